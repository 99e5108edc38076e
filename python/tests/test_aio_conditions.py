"""asyncio forms of ConditionLock (acquire_async, acquire_when_async, async with) and Barrier
(wait_async): threads, tasks and another process on one primitive; cancellation; timeouts as
the blocking forms take them (docs/async.md)."""
import asyncio
import gc
import math
import multiprocessing
import random
import threading
from multiprocessing import shared_memory

import pytest

from aio_support import BOUND, SPAWN, pending, shm, until_async  # noqa: F401  (shm: a fixture)

from libsync import _aio
from libsync.conditions import Barrier, BrokenBarrierError, ConditionLock
from libsync.locks import DeadlockError, NotOwnerError

# ---- ConditionLock ---------------------------------------------------------------------------

def test_condition_lock_task_is_the_owner():
    lock = ConditionLock(0)

    async def other_task_releases():
        with pytest.raises(NotOwnerError):
            lock.release()

    async def main():
        assert await lock.acquire_async()
        with pytest.raises(DeadlockError):
            await lock.acquire_when_async(0)
        await asyncio.create_task(other_task_releases())
        seen = []

        def thread_releases():
            try:
                lock.release()
            except NotOwnerError as error:
                seen.append(error)

        thread = threading.Thread(target=thread_releases)
        thread.start()
        thread.join(BOUND)
        assert len(seen) == 1
        assert lock.condition == 0
        lock.release_with(2)
        assert lock.condition == 2
        async with lock:
            assert not lock.try_lock()
        assert await lock.acquire_when_async(2, timeout=0)
        lock.release()
        assert pending() == 0

    asyncio.run(main())
    assert lock.try_lock_when_condition(2)
    lock.release()


def test_condition_lock_timeouts_follow_the_blocking_form():
    lock = ConditionLock(0)

    async def main():
        assert await lock.acquire_when_async(1, timeout=0) is False  # free, but 0: one try
        assert await lock.acquire_when_async(1, blocking=False) is False
        assert await lock.acquire_when_async(1, timeout=0.01) is False
        for bad in (-2, -math.inf, math.nan):
            with pytest.raises(ValueError):
                await lock.acquire_when_async(1, timeout=bad)
            with pytest.raises(ValueError):
                lock.acquire_when(1, timeout=bad)
        with pytest.raises(ValueError):
            await lock.acquire_async(blocking=False, timeout=1)
        assert pending() == 0
        waiting = asyncio.create_task(lock.acquire_when_async(5))
        await until_async(lambda: pending() == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lock.acquire_when_async(5), 0.01)
        assert pending() == 0

    asyncio.run(main())
    assert lock.try_lock()
    lock.release()


def test_condition_lock_thread_and_tasks_take_turns_with_cancellation():
    """A producer thread puts items when the condition is 0 and sets 1; consumer tasks (each
    acquire cancelled at random) take them when 1 and set 0 (the last sets 1 again: the others
    see the end). Every item is taken once."""
    lock = ConditionLock(0)
    items = 600
    counts = {"produced": 0, "consumed": 0}

    def producer():
        for _ in range(items):
            lock.acquire_when(0)
            counts["produced"] += 1
            lock.release_with(1)

    async def consume_one():
        await lock.acquire_when_async(1)
        after = 1  # all taken: the end is passed on to the other consumers
        try:
            if counts["consumed"] < items:
                counts["consumed"] += 1
                after = 1 if counts["consumed"] == items else 0
                if random.random() < 0.3:
                    await asyncio.sleep(0)  # a cancellation here still releases with `after`
        finally:
            lock.release_with(after)

    async def consumer():
        while counts["consumed"] < items:
            attempt = asyncio.create_task(consume_one())
            if random.random() < 0.3:
                await asyncio.sleep(0)
                attempt.cancel()
            try:
                await attempt
            except asyncio.CancelledError:
                pass

    async def main():
        async with asyncio.timeout(BOUND):
            await asyncio.gather(*(consumer() for _ in range(3)))

    thread = threading.Thread(target=producer)
    thread.start()
    asyncio.run(main())
    thread.join(BOUND)
    assert counts == {"produced": items, "consumed": items}
    assert lock.condition == 1
    assert lock.try_lock()
    lock.release()


def _produce_in_process(lock, items, ready):
    ready.set()
    for _ in range(items):
        lock.acquire_when(0)
        lock.release_with(1)


def test_condition_lock_shared_with_a_process(shm):
    """A process produces (blocking); tasks of this process consume (async)."""
    lock = ConditionLock(0, buffer=shm, initialize=True)
    items = 200
    consumed = 0

    async def consumer():
        nonlocal consumed
        while consumed < items:
            if await lock.acquire_when_async(1, timeout=0.05):
                consumed += 1
                lock.release_with(0)

    ready = SPAWN.Event()
    child = SPAWN.Process(target=_produce_in_process, args=(lock, items, ready))
    child.start()
    assert ready.wait(BOUND)

    async def main():
        async with asyncio.timeout(BOUND):
            await asyncio.gather(consumer(), consumer())

    asyncio.run(main())
    child.join(BOUND)
    assert child.exitcode == 0
    assert consumed == items
    assert lock.condition == 0


# ---- Barrier ---------------------------------------------------------------------------------

def test_barrier_threads_and_tasks_meet_cycle_after_cycle():
    cycles, parties = 100, 4
    actions = []
    barrier = Barrier(parties, action=lambda: actions.append(1))
    seen = [[0] * parties for _ in range(cycles)]

    def thread_party():
        for cycle in range(cycles):
            seen[cycle][barrier.wait()] += 1

    async def task_party():
        for cycle in range(cycles):
            seen[cycle][await barrier.wait_async()] += 1
            if random.random() < 0.5:
                await asyncio.sleep(0)

    async def main():
        async with asyncio.timeout(BOUND):
            await asyncio.gather(task_party(), task_party())

    threads = [threading.Thread(target=thread_party) for _ in range(2)]
    for thread in threads:
        thread.start()
    asyncio.run(main())
    for thread in threads:
        thread.join(BOUND)
    assert seen == [[1] * parties for _ in range(cycles)]
    assert len(actions) == cycles
    assert not barrier.broken and barrier.n_waiting == 0


def test_barrier_cancelled_party_breaks_it():
    barrier = Barrier(3)
    errors = []

    def thread_party():
        try:
            barrier.wait()
        except BrokenBarrierError as error:
            errors.append(error)

    async def main():
        thread = threading.Thread(target=thread_party)
        thread.start()
        cancelled = asyncio.create_task(barrier.wait_async())
        await until_async(lambda: barrier.n_waiting == 2)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await asyncio.to_thread(thread.join, BOUND)
        assert len(errors) == 1
        assert barrier.broken
        with pytest.raises(BrokenBarrierError):
            await barrier.wait_async()
        barrier.reset()
        indices = await asyncio.gather(*(barrier.wait_async() for _ in range(3)))
        assert sorted(indices) == [0, 1, 2]
        assert pending() == 0

    asyncio.run(main())


def test_barrier_timeouts_follow_the_blocking_form():
    barrier = Barrier(2)

    async def main():
        for timeout in (0, -1, -math.inf):  # one try: not the last party, so it breaks
            with pytest.raises(BrokenBarrierError):
                await barrier.wait_async(timeout)
            assert barrier.broken
            barrier.reset()
        with pytest.raises(BrokenBarrierError):  # runs out while pending
            await barrier.wait_async(0.01)
        assert barrier.broken
        barrier.reset()
        # NaN waits, as the blocking form's (threading.Barrier's) does: the other party comes.
        first = asyncio.create_task(barrier.wait_async(math.nan))
        await until_async(lambda: barrier.n_waiting == 1)
        last = await barrier.wait_async(0)  # the last party: one try is enough
        assert sorted([await first, last]) == [0, 1]
        # The barrier's default timeout applies.
        timed = Barrier(2, timeout=0.01)
        with pytest.raises(BrokenBarrierError):
            await timed.wait_async()
        assert timed.broken
        assert pending() == 0

    asyncio.run(main())


def _meet_in_process(barrier, cycles, ready):
    ready.set()
    for _ in range(cycles):
        barrier.wait()


def test_barrier_shared_with_a_process(shm):
    cycles = 50
    barrier = Barrier(3, buffer=shm, initialize=True)
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_meet_in_process, args=(barrier, cycles, ready))
    child.start()
    assert ready.wait(BOUND)
    seen = []

    async def party():
        for _ in range(cycles):
            seen.append(await barrier.wait_async())

    async def main():
        async with asyncio.timeout(BOUND):
            await asyncio.gather(party(), party())

    asyncio.run(main())
    child.join(BOUND)
    assert child.exitcode == 0
    assert len(seen) == 2 * cycles and set(seen) <= {0, 1, 2}
    assert not barrier.broken
