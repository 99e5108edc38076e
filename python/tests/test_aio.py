"""asyncio forms of Lock and Mutex (acquire_async, async with): suspending a task, never the
loop; cancellation that never leaks or strands the lock; several loops in several threads;
threads, tasks and another process on one shared robust mutex, a SIGKILLed holder; fork and a
closed loop with waiters queued (docs/async.md)."""
import asyncio
import gc
import math
import multiprocessing
import os
import random
import signal
import struct
import threading
import time
from multiprocessing import shared_memory

import pytest

from aio_support import BOUND, SPAWN, Holder, pending, shm, until, until_async  # noqa: F401  (shm: a fixture)

from libsync import _aio
from libsync.locks import DeadlockError, Lock, Mutex, NotOwnerError, OwnerDiedError

KINDS = [Lock, Mutex]


# ---- basics ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_async_with_and_acquire_async(kind):
    lock = kind()

    async def main():
        async with lock:
            assert lock.locked()
        assert not lock.locked()
        assert await lock.acquire_async() is True
        lock.release()
        assert await lock.acquire_async(timeout=0) is True  # free: one try takes it
        lock.release()
        assert not lock.locked()

    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_timeouts_follow_the_blocking_form(kind):
    lock = kind()
    holder = Holder(lock)

    async def main():
        assert await lock.acquire_async(timeout=0) is False  # held: one try
        assert await lock.acquire_async(blocking=False) is False
        assert await lock.acquire_async(timeout=0.01) is False
        for bad in (-2, -math.inf, math.nan):
            with pytest.raises(ValueError):
                await lock.acquire_async(timeout=bad)
        with pytest.raises(ValueError):
            await lock.acquire_async(blocking=False, timeout=1)
        with pytest.raises(OverflowError):
            await lock.acquire_async(timeout=1e300)
        assert pending() == 0

    asyncio.run(main())
    holder.release()
    assert not lock.locked()


def test_mutex_task_is_the_owner():
    mutex = Mutex()

    async def main():
        async with mutex:
            with pytest.raises(DeadlockError):
                await mutex.acquire_async()
            with pytest.raises(NotOwnerError):  # another task
                await asyncio.create_task(mutex.__aexit__(None, None, None))
            with pytest.raises(NotOwnerError):  # a thread
                await asyncio.to_thread(mutex.release)
            assert mutex.locked()
        assert not mutex.locked()
        await mutex.acquire_async()
        mutex.release()  # release() knows the task's hold
        assert not mutex.locked()

    asyncio.run(main())


def test_lock_may_be_released_by_another_task():
    lock = Lock()

    async def main():
        await lock.acquire_async()
        await asyncio.to_thread(lock.release)
        assert not lock.locked()

    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_tasks_take_turns(kind):
    lock, counter = kind(), [0]

    async def worker():
        for _ in range(200):
            async with lock:
                value = counter[0]
                await asyncio.sleep(0)  # the others wait (pending) meanwhile
                counter[0] = value + 1

    async def main():
        await asyncio.gather(*(worker() for _ in range(5)))

    asyncio.run(main())
    assert counter[0] == 1000 and not lock.locked()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["release()", "async with"])
def test_release_hands_the_lock_to_a_waiting_task_of_its_loop(kind, how):
    """A release in the loop's thread that the core hands to a waiting task of the same loop
    resolves that task's wait in the release itself (no eventfd round trip): the task is no
    longer pending, the lock stays held for it, and it runs before a task that asks later."""
    lock, order = kind(), []

    async def waiter(name):
        async with lock:
            order.append(name)

    async def main():
        if how == "release()":
            await lock.acquire_async()
        else:
            await lock.__aenter__()
        first = asyncio.create_task(waiter("first"))
        await until_async(lambda: pending() == 1)
        if how == "release()":
            lock.release()
        else:
            await lock.__aexit__(None, None, None)
        assert pending() == 0  # resolved by the release
        assert lock.locked()   # held for the waiting task
        late = asyncio.create_task(waiter("late"))
        await asyncio.gather(first, late)
        assert order == ["first", "late"] and not lock.locked()

    asyncio.run(main())


# ---- cancellation ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_cancellation_forms_leave_the_lock_free(kind):
    lock = kind()
    holder = Holder(lock)

    async def main():
        task = asyncio.create_task(lock.acquire_async())
        await until_async(lambda: pending() == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await lock.acquire_async()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lock.acquire_async(), 0.01)
        assert pending() == 0

    asyncio.run(main())
    holder.release()
    assert not lock.locked()


@pytest.mark.parametrize("kind", KINDS)
def test_cancellation_storm(kind):
    """8 tasks, acquires cancelled at random points (before, while pending, as granted), a
    thread taking the lock now and then: the guarded counter is exact, the lock free at the
    end, no acquire left pending."""
    lock, counter, done = kind(), [0], [0]
    rng = random.Random(27)
    stop = threading.Event()

    def thread_user():
        while not stop.is_set():
            with lock:
                counter[0] += 1
                done[0] += 1
            time.sleep(0.0002)

    async def guarded():
        async with lock:
            value = counter[0]
            if rng.random() < 0.5:
                await asyncio.sleep(0)
            counter[0] = value + 1
            done[0] += 1

    async def worker():
        for _ in range(1500):
            choice = rng.random()
            if choice < 0.4:
                await guarded()
                continue
            if choice < 0.7:
                task = asyncio.create_task(guarded())
                for _ in range(rng.randrange(4)):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                continue
            try:
                async with asyncio.timeout(rng.choice((0, 1e-6, 1e-5, 1e-4))):
                    await guarded()
            except TimeoutError:
                pass

    async def main():
        await asyncio.gather(*(worker() for _ in range(8)))
        assert pending() == 0

    thread = threading.Thread(target=thread_user)
    thread.start()
    try:
        asyncio.run(main())
    finally:
        stop.set()
        thread.join(BOUND)
    assert counter[0] == done[0] > 0
    assert not lock.locked()
    assert lock.acquire(timeout=0)
    lock.release()


# ---- several loops, threads, processes -------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_several_loops_in_several_threads(kind):
    lock, counter = kind(), [0]
    per_task, tasks, loops = 100, 4, 4

    async def worker():
        for _ in range(per_task):
            async with lock:
                value = counter[0]
                await asyncio.sleep(0)
                counter[0] = value + 1

    async def main():
        await asyncio.gather(*(worker() for _ in range(tasks)))

    def blocking_user():
        for _ in range(per_task):
            with lock:
                value = counter[0]
                time.sleep(0)
                counter[0] = value + 1

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(loops)]
    threads.append(threading.Thread(target=blocking_user))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert counter[0] == per_task * (tasks * loops + 1) and not lock.locked()


@pytest.mark.parametrize("kind", KINDS)
def test_a_blocked_thread_gets_its_turn_between_task_handoffs(kind):
    """Tasks that keep a lock busy hand it to one another at release; a thread blocked in
    acquire() still gets it (a handoff run is bounded), while the tasks still want it."""
    mutex = kind()
    got = threading.Event()

    def thread_user():
        with mutex:
            got.set()

    async def task_user():
        while not got.is_set():
            async with mutex:
                await asyncio.sleep(0)

    async def main():
        tasks = [asyncio.create_task(task_user()) for _ in range(3)]
        await until_async(lambda: pending() >= 1)
        thread = threading.Thread(target=thread_user)
        thread.start()
        await until_async(got.is_set)
        await asyncio.gather(*tasks)
        await asyncio.to_thread(thread.join, BOUND)

    asyncio.run(main())
    assert not mutex.locked()


def _count_in_process(lock, shm_name, rounds, ready):
    memory = shared_memory.SharedMemory(name=shm_name)
    ready.set()
    for _ in range(rounds):
        with lock:
            value = struct.unpack_from("Q", memory.buf, 32)[0]
            time.sleep(0)
            struct.pack_into("Q", memory.buf, 32, value + 1)
    del value
    memory.close()


def test_threads_tasks_and_a_process_on_a_shared_robust_mutex(shm):
    mutex = Mutex(buffer=shm, initialize=True, robust=True)
    rounds = 200

    def bump():
        value = struct.unpack_from("Q", shm.buf, 32)[0]
        struct.pack_into("Q", shm.buf, 32, value + 1)

    async def worker():
        for _ in range(rounds):
            async with mutex:
                await asyncio.sleep(0)
                bump()

    async def main():
        await asyncio.gather(*(worker() for _ in range(3)))

    def blocking_user():
        for _ in range(rounds):
            with mutex:
                bump()

    ready = SPAWN.Event()
    child = SPAWN.Process(target=_count_in_process, args=(mutex, shm.name, rounds, ready))
    child.start()
    assert ready.wait(BOUND)
    threads = [threading.Thread(target=blocking_user) for _ in range(2)]
    for thread in threads:
        thread.start()
    asyncio.run(main())
    for thread in threads:
        thread.join(BOUND)
    child.join(BOUND)
    assert child.exitcode == 0
    assert struct.unpack_from("Q", shm.buf, 32)[0] == rounds * 6
    assert not mutex.locked()


def _hold_forever(lock, ready):
    lock.acquire()
    ready.set()
    threading.Event().wait()


def test_owner_died_reaches_the_awaiting_task(shm):
    """A holder process SIGKILLed while tasks wait: one task gets OwnerDiedError holding the
    lock; it repairs; every task gets in."""
    mutex = Mutex(buffer=shm, initialize=True, robust=True)
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_hold_forever, args=(mutex, ready))
    child.start()
    assert ready.wait(BOUND)
    results = []

    async def waiter():
        try:
            await mutex.acquire_async()
            results.append("ok")
        except OwnerDiedError:
            results.append("died")
            mutex.consistent()
        await asyncio.sleep(0)
        mutex.release()

    async def main():
        tasks = [asyncio.create_task(waiter()) for _ in range(3)]
        await until_async(lambda: pending() == 3)
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    child.join(BOUND)
    assert sorted(results) == ["died", "ok", "ok"]
    assert not mutex.locked()
    with mutex:
        pass


# ---- the loop's end, fork --------------------------------------------------------------------

@pytest.mark.parametrize("release_first", [False, True])
def test_closed_loop_withdraws_its_waiters(release_first):
    """A loop closed with an acquire pending (or granted but not yet delivered): no lock is
    taken on the waiter's behalf."""
    mutex = Mutex()
    holder = Holder(mutex)
    loop = asyncio.new_event_loop()
    task = loop.create_task(mutex.acquire_async())
    while pending(loop) == 0:
        loop.run_until_complete(asyncio.sleep(0.001))
    if release_first:
        holder.release()
        until(lambda: _aio._result(next(iter(_aio._loops[id(loop)].pending.values())).handle) != _aio.EINPROGRESS)
    loop.close()
    assert id(loop) not in _aio._loops
    if not release_first:
        holder.release()
    assert not mutex.locked()
    assert mutex.acquire(timeout=BOUND)
    mutex.release()
    del task, loop
    gc.collect()  # the task's coroutine is closed: nothing more happens
    assert not mutex.locked()


def test_fork_while_tasks_wait(shm):
    """fork() while a loop in another thread has acquires pending: the child has no waiters and
    can use the locks; the parent's waiters still get the lock in turn."""
    mutex = Mutex(buffer=shm, initialize=True)
    holder = Holder(mutex)
    got = []
    loop = asyncio.new_event_loop()

    async def waiter(i):
        async with mutex:
            got.append(i)

    async def main():
        await asyncio.gather(*(waiter(i) for i in range(3)))

    runner = threading.Thread(target=loop.run_until_complete, args=(main(),))
    runner.start()
    until(lambda: pending(loop) == 3)
    pid = os.fork()
    if pid == 0:  # the child: no waiters; the locks work
        code = 1
        try:
            assert _aio._loops == {}

            async def child():
                assert await mutex.acquire_async(timeout=0) is False  # the parent's thread holds it
                private = Mutex()

                async def take_and_release():
                    async with private:
                        return True

                async with private:
                    waiting = asyncio.create_task(take_and_release())
                    await until_async(lambda: pending() == 1)  # the child's own waker serves it
                assert await waiting

            asyncio.run(child())
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + BOUND
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    holder.release()
    runner.join(BOUND)
    loop.close()
    assert sorted(got) == [0, 1, 2] and not mutex.locked()
