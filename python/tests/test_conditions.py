"""Conditions and signalling from Python: threading drop-ins (Condition, Semaphore,
BoundedSemaphore, Event, Barrier), ConditionLock, shared memory across processes, Ctrl-C."""
import multiprocessing
import os
import threading
import time
from multiprocessing import shared_memory

import pytest
from conftest import assert_ctrl_c_interrupts

import libsync
from libsync import (Barrier, BoundedSemaphore, BrokenBarrierError, Condition, ConditionLock, Event, Lock, RLock,
                     Semaphore)
from libsync.locks import Mutex, NotOwnerError


def run(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize("make_lock", [Lock, RLock, Mutex])
def test_condition_no_lost_wakeup(make_lock):
    cond, items, seen, done = Condition(make_lock()), [], [], [0]

    def producer(base):
        for i in range(2000):
            with cond:
                items.append(base + i)
                cond.notify()
        with cond:
            done[0] += 1
            cond.notify_all()

    def consumer():
        while True:
            with cond:
                cond.wait_for(lambda: items or done[0] == 3)
                if not items:
                    return
                seen.append(items.pop())

    run([threading.Thread(target=consumer) for _ in range(3)] +
        [threading.Thread(target=producer, args=(k * 2000,)) for k in range(3)])
    assert sorted(seen) == list(range(6000))


def test_condition_notify_counts_and_timeouts():
    cond, woken = Condition(), []

    def waiter():
        with cond:
            if cond.wait(timeout=60):  # a bound against a hang, not a time
                woken.append(1)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    while True:
        with cond:
            if cond._cells[1] & 0x7FFFFFFF == 4:  # all four are waiting
                break
        time.sleep(0.005)
    with cond:
        cond.notify(2)
    for _ in range(30000):  # until the woken ones have run (a bound against a hang)
        if len(woken) >= 2:
            break
        time.sleep(0.001)
    assert len(woken) >= 2  # signal wakes at least as many as asked (spurious wakeups allowed)
    with cond:
        cond.notify_all()
    for t in threads:
        t.join()
    assert len(woken) == 4

    with cond:
        start = time.monotonic()
        assert cond.wait(0.05) is False
        assert 0.05 <= time.monotonic() - start < 60  # (the upper bound guards a hang)
        assert cond.wait(-1) is False
        assert cond.wait_for(lambda: 7, timeout=0) == 7
        assert cond.wait_for(lambda: 0, timeout=0.01) == 0


def test_condition_keeps_rlock_depth_and_reports_misuse():
    lock = RLock()
    cond = Condition(lock)
    with cond, cond:
        assert lock._recursion_count() == 2
        cond.wait(0.01)
        assert lock._recursion_count() == 2
    with pytest.raises(RuntimeError):
        cond.wait(0.01)
    with pytest.raises(RuntimeError):
        cond.notify()
    with pytest.raises(RuntimeError):
        cond.notify_all()
    with pytest.raises(TypeError):
        Condition(threading.Lock())
    assert isinstance(Condition()._lock, RLock)


def test_notify_checks_the_holder_as_threading_does():
    """notify's fast path reads the lock's word: only its holder passes (any thread while a Lock
    is held, as threading checks no owner for a Lock), also in a forked child."""
    for make, others_may in ((RLock, False), (Mutex, False), (Lock, True)):
        lock = make()
        cond = Condition(lock)
        with pytest.raises(RuntimeError):
            cond.notify()
        outcome = []

        def other():
            try:
                cond.notify()
                outcome.append("ok")
            except RuntimeError:
                outcome.append("refused")

        with cond:
            cond.notify()
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        assert outcome == ["ok" if others_may else "refused"], make
    cond = Condition()
    with cond:
        cond.notify()
    pid = os.fork()
    if pid == 0:  # the child's thread has a new id
        try:
            with cond:
                cond.notify()
            os._exit(0)
        except BaseException:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0


def test_semaphore_counts_under_stress_and_matches_threading():
    sem, inside, peak = Semaphore(3), [0], [0]
    guard = threading.Lock()

    def work():
        for _ in range(300):
            with sem:
                with guard:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                with guard:
                    inside[0] -= 1

    run([threading.Thread(target=work) for _ in range(8)])
    assert peak[0] <= 3 and inside[0] == 0
    assert sem.acquire() and sem.acquire() and sem.acquire()
    assert sem.acquire(False) is False
    start = time.monotonic()
    assert sem.acquire(timeout=0.05) is False
    assert 0.05 <= time.monotonic() - start < 60  # (the upper bound guards a hang)
    sem.release(3)
    assert sem.acquire(blocking=False)
    # The same misuse raises the same exceptions as threading's.
    for module in (libsync, threading):
        with pytest.raises(ValueError):
            module.Semaphore(-1)
        with pytest.raises(ValueError):
            module.Semaphore(1).release(0)
        with pytest.raises(ValueError):
            module.Semaphore(1).acquire(False, 1.0)


def test_bounded_semaphore_reports_over_release():
    for cls in (BoundedSemaphore, threading.BoundedSemaphore):
        sem = cls(2)
        sem.acquire()
        sem.release()
        with pytest.raises(ValueError):
            sem.release()
    zero = BoundedSemaphore(0)
    with pytest.raises(ValueError):
        zero.release()


def test_event():
    event = Event()
    assert event.is_set() is False and event.wait(0.01) is False
    woke = []
    threads = [threading.Thread(target=lambda: woke.append(event.wait(60))) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    event.set()
    for t in threads:
        t.join()
    assert woke == [True] * 4 and event.wait() is True
    event.clear()
    assert event.is_set() is False and event.wait(0) is False


def test_barrier_generations_action_timeout_abort_reset():
    rounds, indexes, actions = 30, [], []
    barrier = Barrier(3, action=lambda: actions.append(1))

    def work():
        for _ in range(rounds):
            indexes.append(barrier.wait())

    run([threading.Thread(target=work) for _ in range(3)])
    assert len(actions) == rounds and sorted(indexes) == sorted([0, 1, 2] * rounds)
    assert barrier.parties == 3 and barrier.n_waiting == 0 and not barrier.broken

    with pytest.raises(BrokenBarrierError):
        barrier.wait(timeout=0.02)
    assert barrier.broken
    with pytest.raises(BrokenBarrierError):
        barrier.wait()
    barrier.reset()
    assert not barrier.broken

    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(BrokenBarrierError, barrier.wait)))
    t.start()
    while barrier.n_waiting == 0:
        time.sleep(0.005)
    barrier.abort()
    t.join()
    assert barrier.broken and len(errors) == 1

    def failing():
        raise ZeroDivisionError

    failing_barrier, results = Barrier(2, action=failing), []

    def party():
        try:
            failing_barrier.wait()
            results.append("passed")
        except ZeroDivisionError:
            results.append("action failed")
        except BrokenBarrierError:
            results.append("broken")

    run([threading.Thread(target=party) for _ in range(2)])
    assert sorted(results) == ["action failed", "broken"]
    with pytest.raises(ValueError):
        Barrier(0)


def test_condition_lock_orders_threads_and_runs_the_seeds_producer_consumer():
    order, log = ConditionLock(0), []

    def step(n):
        order.acquire_when(n)
        log.append(n)
        order.release_with(n + 1)

    run([threading.Thread(target=step, args=(n,)) for n in reversed(range(6))])
    assert log == list(range(6)) and order.condition == 6

    start = time.monotonic()
    assert order.try_lock_when_condition(3) is False
    assert time.monotonic() - start < 60  # returned (a bound against a hang, not a time)
    assert order.acquire_when(1, timeout=0.02) is False
    with pytest.raises(NotOwnerError):
        order.release()
    with pytest.raises(RuntimeError):
        order.release_with(1)

    NO_DATA, HAS_DATA = 0, 1
    cond_lock, queue, consumed = ConditionLock(NO_DATA), [], []

    def producer():
        for i in range(500):
            cond_lock.lock()
            queue.append(i)                      # Add data to the queue.
            cond_lock.unlock_with_condition(HAS_DATA)

    def consumer():
        while len(consumed) < 500:
            if not cond_lock.lock_when_condition(HAS_DATA, timeout=60):  # a bound, not a time
                return
            consumed.append(queue.pop(0))        # Remove data from the queue.
            cond_lock.unlock_with_condition(NO_DATA if not queue else HAS_DATA)

    run([threading.Thread(target=consumer), threading.Thread(target=producer)])
    assert consumed == list(range(500)) and cond_lock.condition == NO_DATA
    with cond_lock:
        assert cond_lock.try_lock() is False


def _shared_worker(sem, event, counter_lock, shm_name):
    shm = shared_memory.SharedMemory(name=shm_name)
    event.wait(10)
    for _ in range(200):
        sem.acquire()
        with counter_lock:
            count = int.from_bytes(shm.buf[256:260], "little")
            shm.buf[256:260] = (count + 1).to_bytes(4, "little")
        sem.release()
    shm.close()


def test_semaphore_and_event_shared_between_processes():
    shm = shared_memory.SharedMemory(create=True, size=512)
    try:
        sem = Semaphore(2, buffer=shm, offset=0)
        event = Event(buffer=shm, offset=Semaphore.SIZE)
        counter_lock = Lock(buffer=shm, offset=64)
        barrier = Barrier(3, buffer=shm, offset=128)
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_shared_worker, args=(sem, event, counter_lock, shm.name)) for _ in range(2)]
        for p in procs:
            p.start()
        event.set()
        _shared_worker(sem, event, counter_lock, shm.name)
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        assert int.from_bytes(shm.buf[256:260], "little") == 600 and barrier.parties == 3
    finally:
        sem = event = counter_lock = barrier = None
        shm.close()
        shm.unlink()


@pytest.mark.parametrize("blocker", [
    "libsync.Semaphore(0).acquire()",
    "libsync.Event().wait()",
    "c = libsync.Condition(); c.acquire(); c.wait()",
    "libsync.Barrier(2).wait()",
    "libsync.ConditionLock(0).acquire_when(1)",
])
def test_ctrl_c_interrupts_a_blocked_wait(blocker):
    assert_ctrl_c_interrupts("import libsync\n", blocker)
