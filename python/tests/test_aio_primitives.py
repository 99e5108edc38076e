"""asyncio forms of RWLock (both sides, downgrade), Semaphore, BoundedSemaphore and Event
(docs/async.md): timeouts by the blocking forms' rules, the task as the write holder,
cancellation that never leaks or strands, several loops in several threads, threads, tasks and a
second process on shared memory, a closed loop and fork() with waiters queued. Also the issue's
suite tests for the mutex: a 100,000-acquire cancellation storm, and 10,000 tasks waiting on one
shared mutex with at most 2 extra OS threads."""
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
from libsync.conditions import BoundedSemaphore, Event, Semaphore
from libsync.locks import DeadlockError, Mutex, NotOwnerError, RWLock

COUNTER = 32  # the offset of a shared counter (8 bytes) behind the primitive in shared memory


def rw_free(rw):
    """Whether nothing holds `rw` (a thread's one try at the write side)."""
    if not rw.acquire_write(timeout=0):
        return False
    rw.release_write()
    return True


def units(semaphore):
    """How many units `semaphore` has now (taken one by one, then given back)."""
    count = 0
    while semaphore.acquire(blocking=False):
        count += 1
    if count:
        semaphore.release(count)
    return count


def read_counter(memory):
    return struct.unpack_from("Q", memory.buf, COUNTER)[0]


def bump(memory):
    value = read_counter(memory)
    time.sleep(0)
    struct.pack_into("Q", memory.buf, COUNTER, value + 1)


# ---- RWLock ------------------------------------------------------------------------------------

def test_rwlock_sides_and_the_task_as_write_holder():
    rw = RWLock()

    async def main():
        async with rw.read():
            assert await rw.acquire_read_async(timeout=0) is True  # readers share it
            assert await rw.acquire_write_async(timeout=0) is False
            await asyncio.to_thread(rw.release_read)  # a read side is nobody's
        assert rw_free(rw)
        async with rw.write():
            assert await rw.acquire_read_async(timeout=0) is False  # its own write side: bounded
            assert await rw.acquire_write_async(blocking=False) is False
            with pytest.raises(DeadlockError):
                await rw.acquire_write_async()
            with pytest.raises(DeadlockError):
                await rw.acquire_read_async()
            with pytest.raises(NotOwnerError):  # another task
                await asyncio.create_task(rw.write().__aexit__(None, None, None))
            with pytest.raises(NotOwnerError):  # a thread
                await asyncio.to_thread(rw.release_write)
            with pytest.raises(NotOwnerError):
                await asyncio.to_thread(rw.downgrade)
            assert not await asyncio.to_thread(rw_free, rw)
        assert rw_free(rw)
        assert await rw.acquire_write_async() is True
        rw.downgrade()  # the task's write side becomes a read side
        assert await rw.acquire_read_async(timeout=0) is True
        assert await rw.acquire_write_async(timeout=0) is False
        rw.release_read()
        rw.release_read()
        with pytest.raises(NotOwnerError):
            rw.release_read()
        assert await rw.acquire_write_async(timeout=0.5) is True
        rw.release_write()  # release_write() knows the task's hold
        with pytest.raises(NotOwnerError):
            rw.release_write()

    asyncio.run(main())
    assert rw_free(rw)


def test_rwlock_timeouts_follow_the_blocking_form():
    rw = RWLock()
    holder = Holder(rw.gen_wlock())

    async def main():
        for acquire in (rw.acquire_read_async, rw.acquire_write_async):
            assert await acquire(timeout=0) is False  # held: one try
            assert await acquire(blocking=False) is False
            assert await acquire(timeout=0.01) is False
            for bad in (-2, -math.inf, math.nan):
                with pytest.raises(ValueError):
                    await acquire(timeout=bad)
            with pytest.raises(ValueError):
                await acquire(blocking=False, timeout=1)
            with pytest.raises(OverflowError):
                await acquire(timeout=1e300)
        assert pending() == 0

    asyncio.run(main())
    holder.release()
    assert rw_free(rw)


def test_rwlock_pending_writer_goes_before_new_readers():
    """Writer preference across threads and tasks: a task waiting to write makes readers that
    come after it wait; it gets the lock when the thread's read side is released."""
    rw = RWLock()
    holder = Holder(rw.gen_rlock())
    order = []

    async def writer():
        async with rw.write():
            order.append("writer")

    async def reader():
        async with rw.read():
            order.append("reader")

    async def main():
        writing = asyncio.create_task(writer())
        await until_async(lambda: rw.waiting_writers() == 1)
        assert await rw.acquire_read_async(timeout=0) is False  # behind the writer
        reading = asyncio.create_task(reader())
        await until_async(lambda: pending() == 2)
        await asyncio.to_thread(holder.release)
        await asyncio.gather(writing, reading)

    asyncio.run(main())
    assert order == ["writer", "reader"] and rw_free(rw)


def test_rwlock_downgrade_lets_waiting_readers_in():
    rw = RWLock()
    got = []

    async def reader(i):
        async with rw.read():
            got.append(i)

    async def main():
        await rw.acquire_write_async()
        readers = [asyncio.create_task(reader(i)) for i in range(3)]
        await until_async(lambda: pending() == 3)
        assert got == []
        rw.downgrade()
        await asyncio.gather(*readers)
        assert sorted(got) == [0, 1, 2]
        assert await rw.acquire_write_async(timeout=0) is False  # the task still reads
        rw.release_read()

    asyncio.run(main())
    assert rw_free(rw)


@pytest.mark.parametrize("side", ["read", "write"])
def test_rwlock_cancellation_forms_leave_it_free(side):
    rw = RWLock()
    holder = Holder(rw.gen_wlock())
    acquire = rw.acquire_read_async if side == "read" else rw.acquire_write_async

    async def main():
        task = asyncio.create_task(acquire())
        await until_async(lambda: pending() == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await acquire()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(acquire(), 0.01)
        assert pending() == 0 and rw.waiting_writers() == 0

    asyncio.run(main())
    holder.release()
    assert rw_free(rw)


def test_rwlock_cancellation_storm():
    """8 tasks reading and writing, acquires cancelled at random points (before, while pending,
    as granted), a thread reading and writing now and then: no reader sees a writer, the
    guarded counter is exact, the lock free at the end, nothing left pending."""
    rw = RWLock()
    state = {"counter": 0, "done": 0, "writing": False}
    rng = random.Random(27)
    stop = threading.Event()

    def thread_user():
        while not stop.is_set():
            with rw.write():
                state["counter"] += 1
                state["done"] += 1
            with rw.read():
                assert not state["writing"]
            time.sleep(0.0002)

    async def write():
        async with rw.write():
            state["writing"] = True
            try:
                value = state["counter"]
                if rng.random() < 0.5:
                    await asyncio.sleep(0)  # a cancellation here leaves the counter as it was
                state["counter"] = value + 1
                state["done"] += 1
            finally:
                state["writing"] = False

    async def read():
        async with rw.read():
            assert not state["writing"]
            value = state["counter"]
            if rng.random() < 0.5:
                await asyncio.sleep(0)
            assert state["counter"] == value and not state["writing"]

    async def worker():
        for _ in range(1000):
            guarded = write if rng.random() < 0.5 else read
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
    assert state["counter"] == state["done"] > 0
    assert rw.waiting_writers() == 0 and rw_free(rw)


def test_rwlock_several_loops_in_several_threads():
    rw, counter = RWLock(), [0]
    per_task, tasks, loops = 100, 3, 3

    async def worker():
        for i in range(per_task):
            async with rw.write():
                value = counter[0]
                await asyncio.sleep(0)
                counter[0] = value + 1
            if i % 4 == 0:
                async with rw.read():
                    value = counter[0]
                    await asyncio.sleep(0)
                    assert counter[0] == value

    async def main():
        await asyncio.gather(*(worker() for _ in range(tasks)))

    def blocking_user():
        for _ in range(per_task):
            with rw.write():
                value = counter[0]
                time.sleep(0)
                counter[0] = value + 1

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(loops)]
    threads.append(threading.Thread(target=blocking_user))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert counter[0] == per_task * (tasks * loops + 1) and rw_free(rw)


# ---- Semaphore, BoundedSemaphore ---------------------------------------------------------------

@pytest.mark.parametrize("kind", [Semaphore, BoundedSemaphore])
def test_semaphore_units_and_timeouts(kind):
    semaphore = kind(2)

    async def main():
        async with semaphore:
            assert await semaphore.acquire_async() is True
            assert await semaphore.acquire_async(timeout=0) is False  # none left: one try
            assert await semaphore.acquire_async(blocking=False) is False
            assert await semaphore.acquire_async(timeout=-1) is False  # negative: one try
            assert await semaphore.acquire_async(timeout=-math.inf) is False
            assert await semaphore.acquire_async(timeout=0.01) is False
            with pytest.raises(ValueError):
                await semaphore.acquire_async(blocking=False, timeout=1)
            with pytest.raises(TypeError):
                await semaphore.acquire_async(timeout="1")
            nan = asyncio.create_task(semaphore.acquire_async(timeout=math.nan))  # NaN waits
            await until_async(lambda: pending() == 1)
            semaphore.release()
            assert await nan is True
            semaphore.release()  # the unit acquire_async() took
        assert units(semaphore) == 2
        assert pending() == 0

    asyncio.run(main())
    if kind is BoundedSemaphore:
        with pytest.raises(ValueError):
            semaphore.release()
    assert units(semaphore) == 2


def test_bounded_semaphore_over_release_in_async_with():
    semaphore = BoundedSemaphore(1)

    async def main():
        with pytest.raises(ValueError):
            async with semaphore:
                semaphore.release()  # the block's end releases once more: too many

    asyncio.run(main())
    assert units(semaphore) == 1


def test_semaphore_tasks_are_served_oldest_first():
    semaphore, order = Semaphore(0), []

    async def waiter(i):
        await semaphore.acquire_async()
        order.append(i)

    async def main():
        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(waiter(i)))
            await until_async(lambda: pending() == i + 1)
        for _ in range(5):
            semaphore.release()
            count = len(order)
            await until_async(lambda: len(order) == count + 1)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4] and units(semaphore) == 0


@pytest.mark.parametrize("kind", [Semaphore, BoundedSemaphore])
def test_semaphore_cancellation_forms_take_nothing(kind):
    semaphore = kind(1)
    holder = Holder(semaphore)

    async def main():
        task = asyncio.create_task(semaphore.acquire_async())
        await until_async(lambda: pending() == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await semaphore.acquire_async()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(semaphore.acquire_async(), 0.01)
        assert pending() == 0

    asyncio.run(main())
    holder.release()
    assert units(semaphore) == 1


def test_semaphore_cancellation_storm():
    """8 tasks through a semaphore of 2 units, waits cancelled at random points, a thread
    taking units too: never more than 2 inside, every unit back at the end."""
    semaphore, inside, entered = BoundedSemaphore(2), [0], [0]
    rng = random.Random(27)
    stop = threading.Event()
    guard = threading.Lock()

    def enter():
        with guard:
            inside[0] += 1
            entered[0] += 1
            assert inside[0] <= 2

    def leave():
        with guard:
            inside[0] -= 1

    def thread_user():
        while not stop.is_set():
            with semaphore:
                enter()
                leave()
            time.sleep(0.0002)

    async def guarded():
        async with semaphore:
            enter()
            try:
                if rng.random() < 0.5:
                    await asyncio.sleep(0)
            finally:
                leave()

    async def worker():
        for _ in range(1000):
            choice = rng.random()
            if choice < 0.4:
                await guarded()
            elif choice < 0.7:
                task = asyncio.create_task(guarded())
                for _ in range(rng.randrange(4)):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            else:
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
    assert inside[0] == 0 and entered[0] > 0
    assert units(semaphore) == 2


def test_semaphore_several_loops_in_several_threads():
    semaphore, inside, entered = Semaphore(2), [0], [0]
    guard = threading.Lock()
    per_task, tasks, loops = 100, 3, 3

    def step(delta):
        with guard:
            inside[0] += delta
            entered[0] += delta > 0
            assert inside[0] <= 2

    async def worker():
        for _ in range(per_task):
            async with semaphore:
                step(1)
                await asyncio.sleep(0)
                step(-1)

    async def main():
        await asyncio.gather(*(worker() for _ in range(tasks)))

    def blocking_user():
        for _ in range(per_task):
            with semaphore:
                step(1)
                time.sleep(0)
                step(-1)

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(loops)]
    threads.append(threading.Thread(target=blocking_user))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert entered[0] == per_task * (tasks * loops + 1) and inside[0] == 0
    assert units(semaphore) == 2


# ---- Event -------------------------------------------------------------------------------------

def test_event_wait_async():
    event = Event()

    async def main():
        for timeout in (0, -1, -math.inf, math.nan, 0.01):  # clear: one look, or a short wait
            assert await event.wait_async(timeout) is False
        with pytest.raises(TypeError):
            await event.wait_async("1")
        waiters = [asyncio.create_task(event.wait_async()) for _ in range(3)]
        timed = asyncio.create_task(event.wait_async(BOUND))
        await until_async(lambda: pending() == 4)
        await asyncio.to_thread(lambda: (event.set(), event.clear()))  # set, cleared at once
        assert await asyncio.gather(*waiters, timed) == [True] * 4
        assert not event.is_set()
        event.set()
        assert await event.wait_async(0) is True
        assert await event.wait_async() is True
        assert pending() == 0

    asyncio.run(main())


def test_event_cancellation_forms_withdraw_the_wait():
    event = Event()

    async def main():
        task = asyncio.create_task(event.wait_async())
        await until_async(lambda: pending() == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await event.wait_async()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(event.wait_async(), 0.01)
        assert pending() == 0
        later = asyncio.create_task(event.wait_async())
        await until_async(lambda: pending() == 1)
        event.set()
        assert await later is True

    asyncio.run(main())


def test_event_several_loops_and_a_thread():
    event, results = Event(), []
    started = threading.Semaphore(0)

    async def main():
        waits = [asyncio.create_task(event.wait_async()) for _ in range(3)]
        await until_async(lambda: pending() == 3)
        started.release()
        results.extend(await asyncio.gather(*waits))

    def blocking_user():
        started.release()
        results.append(event.wait(BOUND))

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(3)]
    threads.append(threading.Thread(target=blocking_user))
    for thread in threads:
        thread.start()
    for _ in threads:
        assert started.acquire(timeout=BOUND)
    event.set()
    for thread in threads:
        thread.join(BOUND)
    assert results == [True] * 10


# ---- shared memory, a second process -----------------------------------------------------------

def _shared_user(kind, primitive, shm_name, rounds, ready):
    """A child (spawned: it execs): a thread with the blocking form and two tasks with the async
    form, each bumping the shared counter `rounds` times under `primitive`."""
    memory = shared_memory.SharedMemory(name=shm_name)
    blocking = primitive.write() if kind == "rwlock" else primitive
    asynchronous = primitive.write() if kind == "rwlock" else primitive

    def thread_user():
        for _ in range(rounds):
            with blocking:
                bump(memory)

    async def task_user():
        for _ in range(rounds):
            async with asynchronous:
                await asyncio.sleep(0)
                bump(memory)

    async def main():
        await asyncio.gather(task_user(), task_user())

    ready.set()
    thread = threading.Thread(target=thread_user)
    thread.start()
    asyncio.run(main())
    thread.join()
    memory.close()


@pytest.mark.parametrize("kind", ["rwlock", "semaphore"])
def test_shared_with_a_second_process(kind, shm):
    """Threads and tasks of two processes exclude one another on a shared RWLock's write side
    (readers check they see no writer) or a 1-unit shared Semaphore: the counter is exact."""
    if kind == "rwlock":
        primitive = RWLock(buffer=shm, initialize=True)
        guard = primitive.write()
    else:
        primitive = guard = Semaphore(1, buffer=shm, initialize=True)
    rounds = 150

    async def task_user():
        for i in range(rounds):
            async with guard:
                await asyncio.sleep(0)
                bump(shm)
            if kind == "rwlock" and i % 4 == 0:
                async with primitive.read():
                    value = read_counter(shm)
                    await asyncio.sleep(0)
                    assert read_counter(shm) == value

    async def main():
        await asyncio.gather(*(task_user() for _ in range(2)))

    def thread_user():
        for _ in range(rounds):
            with guard:
                bump(shm)

    ready = SPAWN.Event()
    child = SPAWN.Process(target=_shared_user, args=(kind, primitive, shm.name, rounds, ready))
    child.start()
    assert ready.wait(BOUND)
    thread = threading.Thread(target=thread_user)
    thread.start()
    asyncio.run(main())
    thread.join(BOUND)
    child.join(BOUND)
    assert child.exitcode == 0
    assert read_counter(shm) == rounds * 6
    if kind == "rwlock":
        assert rw_free(primitive)
    else:
        assert units(primitive) == 1


def test_shared_semaphore_wait_from_another_process():
    """A task waits for a unit that another process releases (the waker sees the shared word)."""
    memory = shared_memory.SharedMemory(create=True, size=64)
    try:
        semaphore = Semaphore(0, buffer=memory, initialize=True)
        event = Event(buffer=memory, offset=16, initialize=True)
        child = SPAWN.Process(target=_release_later, args=(semaphore, event))

        async def main():
            waits = [asyncio.create_task(semaphore.acquire_async()),
                     asyncio.create_task(event.wait_async())]
            await until_async(lambda: pending() == 2)
            child.start()
            return await asyncio.gather(*waits)

        assert asyncio.run(main()) == [True, True]
        child.join(BOUND)
        assert child.exitcode == 0 and units(semaphore) == 0
        del semaphore, event
    finally:
        gc.collect()
        memory.close()
        memory.unlink()


def _release_later(semaphore, event):
    semaphore.release()
    event.set()


# ---- the loop's end, fork ----------------------------------------------------------------------

@pytest.mark.parametrize("release_first", [False, True])
@pytest.mark.parametrize("kind", ["read", "write", "semaphore"])
def test_closed_loop_withdraws_its_waiters(kind, release_first):
    """A loop closed with an acquire pending (or granted but not yet delivered): nothing is
    taken on the waiter's behalf."""
    if kind == "semaphore":
        primitive = BoundedSemaphore(1)
        holder = Holder(primitive)
        acquire = primitive.acquire_async
    else:
        primitive = RWLock()
        holder = Holder(primitive.gen_wlock())
        acquire = primitive.acquire_read_async if kind == "read" else primitive.acquire_write_async
    loop = asyncio.new_event_loop()
    task = loop.create_task(acquire())
    while pending(loop) == 0:
        loop.run_until_complete(asyncio.sleep(0.001))
    if release_first:
        holder.release()
        until(lambda: _aio._result(next(iter(_aio._loops[id(loop)].pending.values())).handle) != _aio.EINPROGRESS)
    loop.close()
    assert id(loop) not in _aio._loops
    if not release_first:
        holder.release()
    if kind == "semaphore":
        assert units(primitive) == 1
    else:
        assert primitive.waiting_writers() == 0 and rw_free(primitive)
    del task, loop
    gc.collect()  # the task's coroutine is closed: nothing more happens
    if kind == "semaphore":
        assert units(primitive) == 1
    else:
        assert rw_free(primitive)


def _wait_for_child(pid):
    deadline = time.monotonic() + BOUND
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)


def test_fork_while_tasks_wait(shm):
    """fork() while a loop in another thread has acquires pending on a shared RWLock, Semaphore
    and Event: the child has no waiters and can use them; the parent's waiters still complete."""
    rw = RWLock(buffer=shm, initialize=True)
    semaphore = Semaphore(0, buffer=shm, offset=16, initialize=True)
    event = Event(buffer=shm, offset=32, initialize=True)
    holder = Holder(rw.gen_wlock())
    got = []
    loop = asyncio.new_event_loop()

    async def reader():
        async with rw.read():
            got.append("read")

    async def writer():
        async with rw.write():
            got.append("write")

    async def unit():
        await semaphore.acquire_async()
        got.append("unit")

    async def flag():
        got.append(await event.wait_async())

    async def main():
        await asyncio.gather(reader(), writer(), unit(), flag())

    runner = threading.Thread(target=loop.run_until_complete, args=(main(),))
    runner.start()
    until(lambda: pending(loop) == 4)
    pid = os.fork()
    if pid == 0:  # the child: no waiters; the primitives work
        code = 1
        try:
            assert _aio._loops == {}

            async def child():
                assert await rw.acquire_read_async(timeout=0) is False  # the parent's thread writes
                assert await semaphore.acquire_async(timeout=0) is False
                private = RWLock()
                await private.acquire_write_async()
                waiting = asyncio.create_task(private.acquire_read_async())
                await until_async(lambda: pending() == 1)  # the child's own waker serves it
                private.release_write()
                assert await waiting
                private.release_read()
                assert rw_free(private)

            asyncio.run(child())
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    assert _wait_for_child(pid) == 0
    holder.release()
    semaphore.release()
    event.set()
    runner.join(BOUND)
    loop.close()
    assert sorted(map(str, got)) == ["True", "read", "unit", "write"]
    assert rw_free(rw) and units(semaphore) == 0


# ---- the suite tests for the mutex -----------------------------------------------------

def test_mutex_cancellation_storm_100000_acquires(shm):
    """Issue 27's storm: 100,000 acquires by 8 tasks on a shared robust mutex, cancelled at
    random points (before the first try, while pending, as granted; task.cancel() and
    asyncio.timeout); the guarded counter is exact, the lock free at the end."""
    mutex = Mutex(buffer=shm, initialize=True, robust=True)
    counter, done = [0], [0]
    rng = random.Random(2027)
    per_task = 100_000 // 8

    async def guarded():
        async with mutex:
            value = counter[0]
            if rng.random() < 0.3:
                await asyncio.sleep(0)
            counter[0] = value + 1
            done[0] += 1

    async def worker():
        for _ in range(per_task):
            choice = rng.random()
            if choice < 0.5:
                await guarded()
            elif choice < 0.8:
                task = asyncio.create_task(guarded())
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            else:
                try:
                    async with asyncio.timeout(rng.choice((0, 1e-6, 1e-5))):
                        await guarded()
                except TimeoutError:
                    pass

    async def main():
        await asyncio.gather(*(worker() for _ in range(8)))
        assert pending() == 0

    asyncio.run(main())
    assert counter[0] == done[0] > 0
    assert not mutex.locked()
    assert mutex.acquire(timeout=0)
    mutex.release()


def _threads():
    return len(os.listdir("/proc/self/task"))


def test_10000_tasks_on_one_shared_mutex_cost_at_most_2_threads(shm):
    """Issue 27: 10,000 tasks waiting on one shared mutex add at most 2 OS threads to the
    process (libsync's waker), counted in /proc/self/task while they all wait; each gets it."""
    mutex = Mutex(buffer=shm, initialize=True)
    tasks_count, got = 10_000, [0]
    before = _threads()

    async def waiter():
        async with mutex:
            got[0] += 1

    async def main():
        mutex.acquire()  # this thread holds it while the tasks queue up
        tasks = [asyncio.create_task(waiter()) for _ in range(tasks_count)]
        await until_async(lambda: pending() == tasks_count)
        during = _threads()
        mutex.release()
        await asyncio.gather(*tasks)
        return during

    during = asyncio.run(main())
    assert during - before <= 2, f"{during - before} extra threads for {tasks_count} waiting tasks"
    assert got[0] == tasks_count and not mutex.locked()
