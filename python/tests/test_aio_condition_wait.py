"""asyncio forms of Condition (docs/async.md, docs/conditions.md): ``async with cond``,
``await cond.wait_async(timeout=)``, ``await cond.wait_for_async(predicate, timeout=)`` over
libsync's Lock and Mutex. The task holds the lock again whenever the wait returns or raises
(cancelled, timed out); threads' notify wakes tasks and tasks' wakes threads; no notify is lost
to a cancelled waiter; a broadcast reaches 1,000+ waiting tasks; a loop closed with a wait pending
leaves the lock free."""
import asyncio
import ctypes
import errno
import gc
import math
import random
import threading
import time

import pytest

from aio_support import BOUND, pending, until_async

from libsync import _aio, locks as _locks
from libsync.conditions import Condition
from libsync.locks import Lock, Mutex, RLock

def held_by_task(lock):
    """Whether the running task holds a Mutex (async form) / a Lock is held at all."""
    if isinstance(lock, Mutex):
        owner = ctypes.c_size_t(id(asyncio.current_task()))
        code = _locks._mutex_try_lock_async(lock._p, owner)
        if code == 0:  # it was free: taken now, given back
            _locks._mutex_unlock_async(lock._p, owner)
        return code == errno.EDEADLK
    return lock.locked()


LOCKS = [Lock, Mutex]


@pytest.mark.parametrize("make_lock", LOCKS)
def test_wait_releases_and_holds_again(make_lock):
    async def main():
        lock = make_lock()
        cond = Condition(lock)
        state = {"go": False}

        async def waiter():
            async with cond:
                while not state["go"]:
                    assert await cond.wait_async()
                return held_by_task(lock)

        task = asyncio.create_task(waiter())
        await until_async(lambda: pending() == 1)
        assert not lock.locked()  # released while it waits

        def notifier():
            with cond:  # a thread takes it and notifies
                state["go"] = True
                cond.notify()
        thread = threading.Thread(target=notifier)
        thread.start()
        assert await task
        await asyncio.to_thread(thread.join)
        assert not lock.locked()
    asyncio.run(main())


@pytest.mark.parametrize("make_lock", LOCKS)
def test_timeouts_as_the_blocking_form(make_lock):
    async def main():
        lock = make_lock()
        cond = Condition(lock)
        async with cond:
            for timeout in (0, -1, -math.inf, math.nan, 0.001, 1e-9):
                assert await cond.wait_async(timeout) is False, timeout
                assert held_by_task(lock)
            assert await cond.wait_for_async(lambda: False, timeout=0.002) is False
            assert await cond.wait_for_async(lambda: 7, timeout=0) == 7
            assert held_by_task(lock)
        assert not lock.locked()
        assert pending() == 0
    asyncio.run(main())


def test_not_holding_is_a_runtime_error_and_other_locks_a_type_error():
    async def main():
        for lock in (Lock(), Mutex()):
            cond = Condition(lock)
            with pytest.raises(RuntimeError):
                await cond.wait_async(0)
        mutex = Mutex()
        cond = Condition(mutex)
        with mutex:  # the thread holds it, not the task
            with pytest.raises(RuntimeError):
                await cond.wait_async(0)
        with pytest.raises(TypeError):
            await Condition(RLock()).wait_async()
        with pytest.raises(TypeError):
            async with Condition(threading.Lock()):
                pass
        assert not mutex.locked()
    asyncio.run(main())


@pytest.mark.parametrize("make_lock", LOCKS)
def test_cancelled_wait_holds_the_lock_again(make_lock):
    async def main():
        lock = make_lock()
        cond = Condition(lock)
        outcome = {}

        async def waiter():
            async with cond:
                try:
                    await cond.wait_async()
                except asyncio.CancelledError:
                    outcome["held"] = held_by_task(lock)
                    raise

        task = asyncio.create_task(waiter())
        await until_async(lambda: pending() == 1)
        # The lock is taken by this task while the waiter is cancelled: the waiter raises only
        # once it holds the lock again.
        await lock.acquire_async()
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()
        lock.release()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert outcome["held"]
        assert not lock.locked()
        assert pending() == 0

        # asyncio.timeout around the wait: TimeoutError, the lock held again inside the block.
        async with cond:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.005):
                    await cond.wait_async()
            assert held_by_task(lock)
        assert not lock.locked()
    asyncio.run(main())


def test_notify_racing_cancellation_is_passed_on():
    """Two tasks wait, one notify, the oldest cancelled at once: the item is consumed once."""
    async def main():
        for round in range(200):
            lock = Mutex()
            cond = Condition(lock)
            state = {"items": 0, "consumed": 0, "violations": 0}

            async def consumer():
                async with cond:
                    try:
                        while state["items"] == 0:
                            await cond.wait_async()
                    except asyncio.CancelledError:
                        if not held_by_task(lock):
                            state["violations"] += 1
                        raise
                    state["items"] -= 1
                    state["consumed"] += 1

            first = asyncio.create_task(consumer())
            await until_async(lambda: pending() == 1)
            second = asyncio.create_task(consumer())
            await until_async(lambda: pending() == 2)
            async with cond:
                state["items"] = 1
                cond.notify()
            if round % 2:
                await asyncio.sleep(0)
            first.cancel()
            try:
                await first
            except asyncio.CancelledError:
                await asyncio.wait_for(second, BOUND)  # the notify reached it
            else:
                second.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await second
            assert state["consumed"] == 1, round
            assert state["violations"] == 0
            assert not lock.locked()
    asyncio.run(main())


@pytest.mark.parametrize("make_lock", LOCKS)
def test_producers_and_consumers_threads_and_tasks_with_cancellation(make_lock):
    """Producers (threads, tasks) and consumers (threads, tasks), consumer tasks cancelled at
    random: every item is consumed once, no notify lost (a lost one leaves an item with every
    long-lived consumer asleep: the drain never ends), the lock free at the end."""
    lock = make_lock()
    cond = Condition(lock)
    state = {"items": 0, "consumed": 0, "done": False, "violations": 0}
    per_producer, thread_producers, task_producers = 1000, 2, 2
    total = per_producer * (thread_producers + task_producers)

    def thread_producer():
        for _ in range(per_producer):
            with cond:
                state["items"] += 1
                cond.notify()

    def thread_consumer():
        while True:
            with cond:
                while state["items"] == 0 and not state["done"]:
                    cond.wait()
                if state["items"] == 0:
                    return
                state["items"] -= 1
                state["consumed"] += 1

    async def task_producer():
        for i in range(per_producer):
            async with cond:
                state["items"] += 1
                if i % 7 == 0:
                    await asyncio.sleep(0)  # held across an await
                cond.notify()

    async def task_consumer():
        while True:
            async with cond:
                while state["items"] == 0 and not state["done"]:
                    await cond.wait_async()
                if state["items"] == 0:
                    return
                state["items"] -= 1
                state["consumed"] += 1

    async def one_item():
        async with cond:
            try:
                while state["items"] == 0 and not state["done"]:
                    await cond.wait_async()
            except asyncio.CancelledError:
                if not held_by_task(lock):
                    state["violations"] += 1
                raise
            if state["items"]:
                state["items"] -= 1
                state["consumed"] += 1

    async def storm(attempts):
        for _ in range(attempts):
            task = asyncio.create_task(one_item())
            for _ in range(random.randrange(4)):
                await asyncio.sleep(0)
            if random.randrange(4):
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def main():
        threads = [threading.Thread(target=thread_producer) for _ in range(thread_producers)]
        threads += [threading.Thread(target=thread_consumer) for _ in range(2)]
        for thread in threads:
            thread.start()
        consumers = [asyncio.create_task(task_consumer()) for _ in range(3)]
        storms = [asyncio.create_task(storm(300)) for _ in range(4)]
        await asyncio.gather(*(task_producer() for _ in range(task_producers)))
        deadline = time.monotonic() + BOUND
        while True:  # the drain: every item consumed, the long-lived consumers asleep untimed
            async with cond:
                if state["consumed"] == total:
                    state["done"] = True
                    cond.notify_all()
                    break
            assert time.monotonic() < deadline, "an item left with every consumer asleep (a lost notify)"
            await asyncio.sleep(0.001)
        await asyncio.gather(*consumers, *storms)
        for thread in threads:
            await asyncio.to_thread(thread.join)
        assert pending() == 0

    asyncio.run(main())
    assert state["consumed"] == total
    assert state["items"] == 0
    assert state["violations"] == 0
    assert not lock.locked()


def test_notify_all_reaches_more_than_a_thousand_tasks_and_threads():
    async def main():
        lock = Mutex()
        cond = Condition(lock)
        state = {"ready": 0, "go": False, "woken": 0, "violations": 0}
        tasks, threads = 1200, 3

        async def waiter():
            async with cond:
                state["ready"] += 1
                await cond.wait_for_async(lambda: state["go"])
                if not held_by_task(lock):
                    state["violations"] += 1
                state["woken"] += 1

        def thread_waiter():
            with cond:
                state["ready"] += 1
                cond.wait_for(lambda: state["go"])
                state["woken"] += 1

        waiting = [threading.Thread(target=thread_waiter) for _ in range(threads)]
        for thread in waiting:
            thread.start()
        running = [asyncio.create_task(waiter()) for _ in range(tasks)]
        while True:  # each counted itself before its wait entered the queue
            async with cond:
                if state["ready"] == tasks + threads:
                    state["go"] = True
                    cond.notify_all()
                    break
            await asyncio.sleep(0.001)
        await asyncio.wait_for(asyncio.gather(*running), BOUND)
        for thread in waiting:
            await asyncio.to_thread(thread.join)
        assert state["woken"] == tasks + threads
        assert state["violations"] == 0
        assert not lock.locked()
    asyncio.run(main())


def test_notify_n_wakes_exactly_n_tasks_oldest_first():
    async def main():
        lock = Lock()
        cond = Condition(lock)
        woken = []

        async def waiter(i):
            async with cond:
                await cond.wait_async()
                woken.append(i)

        tasks = []
        for i in range(6):
            tasks.append(asyncio.create_task(waiter(i)))
            await until_async(lambda: pending() == i + 1)
        async with cond:
            cond.notify(2)
        await until_async(lambda: len(woken) == 2)
        assert sorted(woken) == [0, 1]
        assert pending() == 4
        async with cond:
            cond.notify_all()
        await asyncio.gather(*tasks)
        assert sorted(woken) == list(range(6))
    asyncio.run(main())


# The abandoned task's coroutine, closed when collected, leaves `async with` without the lock
# (NotOwnerError, ignored by the collector): the core released it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_closed_loop_abandons_the_wait_and_leaves_the_lock_free():
    lock = Mutex()
    cond = Condition(lock)
    loop = asyncio.new_event_loop()

    async def waiter():
        async with cond:
            await cond.wait_async()

    task = loop.create_task(waiter())
    loop.run_until_complete(asyncio.sleep(0.01))
    assert pending(loop) == 1
    lock.acquire()  # a thread holds it while the loop closes: the re-acquire completes later
    loop.close()
    lock.release()
    del task
    gc.collect()
    deadline = time.monotonic() + BOUND
    while lock.locked():  # taken again for the abandoned task, then released by the core
        assert time.monotonic() < deadline, "the abandoned wait kept the lock"
        time.sleep(0.001)
    assert lock.acquire(timeout=BOUND)
    lock.release()
    time.sleep(0.05)  # (a re-acquire still to come, after this thread's turn, gives it back too)
    assert lock.acquire(timeout=BOUND)
    lock.release()


def test_several_loops_in_several_threads():
    lock = Lock()
    cond = Condition(lock)
    state = {"items": 0, "consumed": 0}
    per_loop = 200

    async def consumer():
        for _ in range(per_loop):
            async with cond:
                await cond.wait_for_async(lambda: state["items"] > 0)
                state["items"] -= 1
                state["consumed"] += 1

    threads = [threading.Thread(target=asyncio.run, args=(consumer(),)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(3 * per_loop):
        with cond:
            state["items"] += 1
            cond.notify()
    for thread in threads:
        thread.join(BOUND)
        assert not thread.is_alive()
    assert state["consumed"] == 3 * per_loop
