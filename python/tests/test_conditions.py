"""Conditions and signalling from Python: threading drop-ins (Condition, Semaphore,
BoundedSemaphore, Event, Barrier), ConditionLock, shared memory across processes, Ctrl-C."""
import errno
import multiprocessing
import os
import re
import threading
import time
from multiprocessing import shared_memory

import pytest
from conftest import assert_ctrl_c_interrupts

import libsync
from libsync import (Barrier, BoundedSemaphore, BrokenBarrierError, Condition, ConditionLock, Event, Lock, RLock,
                     Semaphore)
from libsync.locks import Mutex, NotOwnerError, OwnerDiedError


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


def test_condition_timeouts():
    cond = Condition()
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
        sem = Semaphore(2, buffer=shm, initialize=True, offset=0)
        event = Event(buffer=shm, initialize=True, offset=Semaphore.SIZE)
        counter_lock = Lock(buffer=shm, initialize=True, offset=64)
        barrier = Barrier(3, buffer=shm, initialize=True, offset=128)
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
    "libsync.Event().wait(1000)",
    "libsync.Barrier(2).wait()",
    "libsync.ConditionLock(0).acquire_when(1)",
])
def test_ctrl_c_interrupts_a_blocked_wait(blocker):
    assert_ctrl_c_interrupts("import libsync\n", blocker)


@pytest.mark.parametrize("lock", ["libsync.RLock()", "libsync.Lock()", "libsync.locks.Mutex()", "threading.Lock()"])
def test_ctrl_c_interrupts_a_condition_wait_which_keeps_the_lock(lock):
    """KeyboardInterrupt leaves wait() holding the lock again (as threading's), so that `with`
    releases it, and the waiter is out of the queue (a later notify wakes the next waiter)."""
    setup = f"""
        import threading, time, libsync
        cond, woke = libsync.Condition({lock}), []
        def other():
            with cond:
                woke.append(cond.wait(30))
        def blocked():
            try:
                with cond:
                    cond.wait()
            finally:
                assert not cond._is_owned() and cond._words[1] == 0
                thread = threading.Thread(target=other)
                thread.start()
                while cond._words[1] == 0:
                    time.sleep(0.001)
                with cond:
                    cond.notify()
                thread.join()
                assert woke == [True] and cond._words[1] == 0
        """
    assert_ctrl_c_interrupts(setup, "blocked()")


# ---- threading's guarantees, tried hard -------------------------------------------------------

_COUNT = 0x3FFFFFFF


def wait_until(predicate, what, limit=30.0):
    """Polls `predicate` (an observable state) until it holds; the limit only guards against a hang."""
    end = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.002)


def queued(cond):
    """How many threads wait on a Condition (its waiter count, raised under the lock)."""
    return cond._words[1] & _COUNT


def quiet_period():
    """A window in which a wrong wakeup would show: a few of the 50 ms slices in which libsync
    waits (the old defect woke every waiter at the end of its next slice). Only the absence of an
    event is asserted after it, so a slow machine cannot make the test fail."""
    time.sleep(0.15)


class UserLock:
    """A user's lock class with acquire/release only (threading.Condition accepts these)."""
    def __init__(self):
        self._lock = threading.Lock()
        self.acquire, self.release = self._lock.acquire, self._lock.release

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


LOCKS = [RLock, Lock, Mutex, threading.Lock, threading.RLock, multiprocessing.Lock, UserLock]


@pytest.mark.parametrize("make_lock", LOCKS, ids=lambda f: f"{f.__module__}.{f.__qualname__}")
def test_notify_n_wakes_exactly_n_and_the_rest_stay_until_notify_all(make_lock):
    cond, woken, done = Condition(make_lock()), [0], [False]

    def waiter():
        with cond:
            while not done[0]:
                if cond.wait(60):  # a woken waiter counts itself and waits again
                    woken[0] += 1

    threads = [threading.Thread(target=waiter) for _ in range(5)]
    for t in threads:
        t.start()
    expected = 0
    for n in (1, 2, 3, 4):
        wait_until(lambda: queued(cond) == 5, "all five wait")
        with cond:
            cond.notify(n)
        expected += n
        wait_until(lambda: woken[0] >= expected, f"notify({n}) woke {n}")
        quiet_period()
        with cond:
            assert woken[0] == expected, f"notify({n}) woke {woken[0] - expected + n}"
    wait_until(lambda: queued(cond) == 5, "all five wait")
    with cond:
        done[0] = True
        cond.notify_all()
    for t in threads:
        t.join()
    assert woken[0] == expected + 5


@pytest.mark.parametrize("make_lock", [RLock, Lock, threading.Lock], ids=lambda f: f"{f.__module__}.{f.__qualname__}")
def test_the_main_thread_waits_in_slices_and_returns_only_when_notified(make_lock):
    """The main thread waits in 50 ms slices (to run signal handlers between them); a slice's
    end is never a wakeup, and a notify for another waiter does not wake it."""
    cond, results, errors = Condition(make_lock()), [], []

    def other():
        with cond:
            results.append(("other", cond.wait(60)))

    def conductor():
        try:
            wait_until(lambda: queued(cond) == 1, "the main thread waits")
            thread = threading.Thread(target=other)
            thread.start()
            wait_until(lambda: queued(cond) == 2, "both wait")
            quiet_period()  # the main thread's slices come and go
            assert results == []
            with cond:
                cond.notify()  # the oldest: the main thread
            wait_until(lambda: len(results) == 1, "one is woken")
            quiet_period()
            assert results == [("main", True)] and queued(cond) == 1
            with cond:
                cond.notify()
            thread.join()
        except BaseException as error:
            errors.append(error)
            with cond:
                cond.notify_all()

    helper = threading.Thread(target=conductor)
    helper.start()
    with cond:
        results.append(("main", cond.wait(60)))
    helper.join()
    assert not errors, errors
    assert results == [("main", True), ("other", True)]


@pytest.mark.parametrize("make_lock", LOCKS, ids=lambda f: f"{f.__module__}.{f.__qualname__}")
def test_condition_over_any_lock(make_lock):
    lock = make_lock()
    cond = Condition(lock)
    with pytest.raises(RuntimeError):
        cond.wait(0.01)
    with pytest.raises(RuntimeError):
        cond.notify()
    assert not cond._is_owned()
    with cond:
        assert cond._is_owned()
        assert cond.wait(0) is False and cond.wait(0.01) is False and cond._is_owned()
        state = cond._release_save()
        assert not cond._is_owned()
        cond._acquire_restore(state)
        assert cond._is_owned()
        cond.notify()  # nobody waits: nothing happens
    # No lost wakeup: three producers, three consumers, every item once.
    items, seen, done = [], [], [0]

    def producer(base):
        for i in range(300):
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
        [threading.Thread(target=producer, args=(k * 300,)) for k in range(3)])
    assert sorted(seen) == list(range(900))


def _depth(lock) -> int:
    """How deep the caller holds an RLock (threading.RLock has _recursion_count only from
    Python 3.11.3 on; its repr says the count everywhere)."""
    if hasattr(lock, "_recursion_count"):
        return lock._recursion_count()
    match = re.search(r"count=(\d+)", repr(lock))
    return int(match.group(1)) if match and lock._is_owned() else 0


def test_condition_over_an_rlock_waits_at_any_depth_with_threadings_protocol():
    for make_lock in (RLock, threading.RLock):
        lock = make_lock()
        cond = Condition(lock)
        with cond, cond, cond:
            assert _depth(lock) == 3
            state = cond._release_save()
            assert _depth(lock) == 0 and not cond._is_owned()
            cond._acquire_restore(state)
            assert _depth(lock) == 3
            seen = []

            def notifier():
                seen.append(lock._is_owned())
                with cond:  # the waiter released every level
                    cond.notify()

            t = threading.Thread(target=notifier)
            t.start()
            assert cond.wait(30) is True
            assert _depth(lock) == 3 and seen == [False]
        t.join()


def test_a_waiter_abandoned_in_the_queue_leaves_it_before_its_memory_goes():
    """However a wait is cut short (a second exception inside the cleanup, say), the waiter's
    memory, which the queue links, leaves the queue before it is freed."""
    from libsync.conditions import _cond_begin, _Waiter
    cond = Condition(Lock())
    waiter = _Waiter()
    assert _cond_begin(cond._p, waiter.p) == 0 and queued(cond) == 1
    del waiter
    assert queued(cond) == 0
    with cond:
        cond.notify_all()  # walks the bucket: no freed node in it


def test_a_late_waiter_is_not_woken_by_an_earlier_notify():
    cond, order = Condition(Lock()), []

    def waiter(name):
        with cond:
            order.append(("waiting", name))
            order.append((cond.wait(30), name))

    first = threading.Thread(target=waiter, args=("first",))
    first.start()
    wait_until(lambda: queued(cond) == 1, "the first waits")
    with cond:
        cond.notify()
        second = threading.Thread(target=waiter, args=("second",))
        second.start()  # it queues only once the notifier releases the lock
    first.join()
    wait_until(lambda: queued(cond) == 1, "the second waits")
    quiet_period()
    assert (True, "second") not in order
    with cond:
        cond.notify()
    second.join()
    assert (True, "first") in order and order[-1] == (True, "second")


def test_thousands_of_threads_on_one_condition_and_one_event():
    n = 2000
    old = threading.stack_size(256 * 1024)
    try:
        cond, event, results = Condition(Lock()), Event(), []

        def cond_waiter():
            with cond:
                results.append(("cond", cond.wait(60)))
            results.append(("event", event.wait(60)))

        threads = [threading.Thread(target=cond_waiter) for _ in range(n)]
        for t in threads:
            t.start()
        wait_until(lambda: queued(cond) == n, f"{n} threads wait")
        with cond:
            cond.notify(n // 2)
        wait_until(lambda: len(results) >= n // 2, "half are woken")
        quiet_period()
        with cond:
            assert queued(cond) == n // 2 and sum(1 for kind, _ in results if kind == "cond") == n // 2
            cond.notify_all()
        wait_until(lambda: len(results) >= n and event._cells[1] & _COUNT == n, "all wait on the event")
        event.set()
        event.clear()
        for t in threads:
            t.join(60)
        assert results.count(("cond", True)) == n and results.count(("event", True)) == n
    finally:
        threading.stack_size(old)


def test_every_thread_waiting_at_set_returns_true_even_if_cleared_at_once():
    event, n = Event(), 20
    # The main thread among the waiters: it waits in slices, and set(); clear() may fall between two.
    helper_failed = []

    def setter():
        try:
            wait_until(lambda: event._cells[1] & _COUNT == 1, "the main thread waits")
            for _ in range(10):
                time.sleep(0.01)  # anywhere in the main thread's slices; no outcome depends on where
                event.set()
                event.clear()
        except BaseException as error:
            helper_failed.append(error)
            event.set()

    helper = threading.Thread(target=setter)
    helper.start()
    assert event.wait(60) is True
    helper.join()
    assert not helper_failed
    for round in range(10):
        results = []
        threads = [threading.Thread(target=lambda: results.append(event.wait())) for _ in range(n)]
        for t in threads:
            t.start()
        wait_until(lambda: event._cells[1] & _COUNT == n, "all wait")
        event.set()
        event.clear()
        for t in threads:
            t.join(10)
        stuck = sum(t.is_alive() for t in threads)
        if stuck:
            event.set()  # let them go, then report
            for t in threads:
                t.join()
        assert stuck == 0 and results == [True] * n, f"round {round}: {stuck} waiters missed set()"
        # With timeouts too, and a flag that another setter leaves set.
        results = []
        threads = [threading.Thread(target=lambda: results.append(event.wait(60))) for _ in range(n)]
        for t in threads:
            t.start()
        wait_until(lambda: event._cells[1] & _COUNT == n, "all wait")
        event.set()
        event.clear()
        event.set()
        for t in threads:
            t.join()
        assert results == [True] * n
        event.clear()


def test_fork_with_a_held_rlock_and_a_condition_over_it():
    """The child's thread continues the forking thread: it may release the RLock (and Mutex) it
    held, as threading.RLock allows, and wait and notify on the Condition over it; a new thread
    of the child may not release them; and a lock in shared memory stays the parent's."""
    lock, other, mutex = RLock(), RLock(), Mutex()
    cond = Condition(lock)
    shm = shared_memory.SharedMemory(create=True, size=64)
    shared = RLock(buffer=shm, initialize=True, offset=0)
    try:
        for taken in (lock, lock, other, mutex, shared):
            taken.acquire()
        del taken
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert lock._recursion_count() == 2 and cond._is_owned() and mutex.is_owner()
                refused = []

                def stranger():
                    for held in (lock, other, mutex):
                        try:
                            held.release()
                        except RuntimeError:
                            refused.append(held)

                t = threading.Thread(target=stranger)
                t.start()
                t.join()
                assert refused == [lock, other, mutex]
                with pytest.raises(RuntimeError):
                    shared.release()  # the parent's thread holds it, in the parent
                assert shared.acquire(False) is False
                other.release()
                mutex.release()
                assert other.acquire(False) and mutex.acquire(False)
                other.release()
                mutex.release()
                # The Condition over the held RLock: wait (released entirely, restored), notify.
                assert cond.wait(0.01) is False and lock._recursion_count() == 2
                cond.notify()
                woke = []

                def waiter():
                    with cond:
                        woke.append(cond.wait(30))

                lock.release()
                lock.release()
                t = threading.Thread(target=waiter)
                t.start()
                wait_until(lambda: queued(cond) == 1, "the child's new thread waits")
                with cond:
                    cond.notify()
                t.join()
                assert woke == [True] and not lock._is_owned()
                code = 0
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert lock._recursion_count() == 2 and mutex.is_owner()  # the parent's are untouched
    finally:
        shared.release()
        mutex.release()
        other.release()
        lock.release()
        lock.release()
        shared = None
        shm.close()
        shm.unlink()


def test_fork_forgets_the_parents_waiters():
    """A thread of the parent waiting at fork() does not exist in the child: it must not take
    the child's notifies (the child's waiters are woken), and the waiter count heals."""
    cond, event = Condition(Lock()), Event()
    parent_waiter = threading.Thread(target=lambda: cond.acquire() and (cond.wait(60), cond.release()))
    parent_waiter.start()
    event_waiter = threading.Thread(target=event.wait, args=(60,))
    event_waiter.start()
    wait_until(lambda: queued(cond) == 1 and event._cells[1] & _COUNT == 1, "the parent's threads wait")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            woke = []

            def waiter():
                with cond:
                    woke.append(cond.wait(30))

            t = threading.Thread(target=waiter)
            t.start()
            wait_until(lambda: queued(cond) == 2, "the child's thread waits (the count still has the parent's)")
            with cond:
                cond.notify()  # FIFO: the parent's waiter came first, but the child has no such thread
            t.join(30)
            assert woke == [True] and not t.is_alive()
            with cond:
                cond.notify_all()
                assert queued(cond) == 0
            cond._at_fork_reinit()  # threading's protocol: a fresh lock, no waiters
            assert not cond._is_owned() and queued(cond) == 0
            with cond:
                assert cond.wait(0) is False
            event._at_fork_reinit()
            event.set()
            assert event.wait(0)
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    with cond:
        cond.notify()
    event.set()
    parent_waiter.join()
    event_waiter.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("make_lock", [Mutex, RLock])
def test_a_wait_over_a_robust_lock_reports_a_notifier_that_died_holding_it(make_lock):
    """The wait's relock finds the lock's holder dead: OwnerDiedError, raised holding the lock
    (an RLock at the depth it had), as acquire raises it; once marked consistent it serves on.
    The main thread waits, in slices."""
    lock = make_lock(robust=True)
    cond = Condition(lock)

    def notify_and_die():
        wait_until(lambda: queued(cond) == 1, "the main thread waits")
        lock.acquire()
        cond.notify()  # and the thread ends holding the lock

    depth = 2 if make_lock is RLock else 1
    for _ in range(depth):
        lock.acquire()
    thread = threading.Thread(target=notify_and_die)
    thread.start()
    with pytest.raises(OwnerDiedError):
        cond.wait(60)
    thread.join()
    assert cond._is_owned() and queued(cond) == 0
    if make_lock is RLock:
        assert lock._recursion_count() == 2
    lock.consistent()
    for _ in range(depth):
        lock.release()
    assert lock.acquire(timeout=60)
    lock.release()


def test_condition_lock_conditions_are_int64():
    for bad in (1 << 63, -(1 << 63) - 1, (1 << 64) + 5):
        with pytest.raises(OverflowError):
            ConditionLock(bad)
        lock = ConditionLock(5)
        with pytest.raises(OverflowError):
            lock.acquire_when(bad, blocking=False)
        lock.acquire()
        with pytest.raises(OverflowError):
            lock.release_with(bad)
        assert lock.condition == 5  # nothing changed
        lock.release()
    for bad in ("1", 1.5, None):
        with pytest.raises(TypeError):
            ConditionLock(bad)
    for good in ((1 << 63) - 1, -(1 << 63)):
        lock = ConditionLock(good)
        assert lock.condition == good and lock.acquire_when(good, blocking=False)
        lock.release_with(-good - 1)
        assert lock.condition == -good - 1


def test_impossible_words_raise_instead_of_crashing():
    """State words no primitive can hold (corrupt shared memory) get an exception, never a
    crash of the interpreter (a trapped overflow in the library is a SIGILL)."""
    buffer = bytearray(64)
    sem = Semaphore(0, buffer=buffer, initialize=True)
    buffer[4:8] = b"\xff\xff\xff\xff"  # 0x7fffffff waiters, in shared mode
    with pytest.raises(libsync.locks.LockError):
        sem.acquire(timeout=0.01)
    with pytest.raises(libsync.locks.LockError):
        sem.release()
    event = Event(buffer=buffer, initialize=True, offset=16)
    buffer[20:24] = b"\xff\xff\xff\xff"
    with pytest.raises(libsync.locks.LockError):
        event.wait(0.01)
    barrier = Barrier(2, buffer=buffer, initialize=True, offset=32)
    buffer[32 + 20:32 + 24] = b"\x09\x00\x00\x00"  # an unknown state
    for operation in (barrier.wait, barrier.reset, barrier.abort, lambda: barrier.parties):
        with pytest.raises(libsync.locks.LockError):
            operation()
    cond_lock = ConditionLock(0, buffer=buffer, initialize=True, offset=8)
    buffer[8 + 12:8 + 16] = b"\x01\x00\x00\x00"  # its reserved word
    with pytest.raises(libsync.locks.LockError):
        cond_lock.acquire()


@pytest.mark.parametrize("corrupt", [(4, 0xFFFFFFFF), (12, 0xDEADBEEF), (0, 5)],
                         ids=["waiter count", "bounded word", "count above bound"])
def test_impossible_semaphore_words_take_no_unit(corrupt):
    """A semaphore with a unit to take but words no semaphore holds: every acquire raises
    (EINVAL) and takes nothing, the non-blocking one included."""
    buffer = bytearray(16)
    sem = BoundedSemaphore(1, buffer=buffer, initialize=True)
    offset, word = corrupt
    buffer[offset:offset + 4] = word.to_bytes(4, "little")
    before = bytes(buffer)
    for acquire in (lambda: sem.acquire(blocking=False), lambda: sem.acquire(timeout=0.01), sem.acquire):
        with pytest.raises(libsync.locks.LockError) as caught:
            acquire()
        assert caught.value.errno == errno.EINVAL
    assert bytes(buffer) == before
    del sem


def test_reprs_and_docstrings_as_threadings():
    assert repr(Lock()).startswith("<unlocked libsync.Lock object at 0x")
    rlock = RLock()
    with rlock, rlock:
        assert repr(rlock).startswith("<locked libsync.RLock object count=2 at 0x")
    assert repr(Event()).endswith(": unset>") and repr(Event()).startswith("<libsync.Event at 0x")
    assert repr(BoundedSemaphore(3)).endswith(": value=3/3>")
    assert repr(Semaphore(3)).endswith(": value=3>")
    assert repr(ConditionLock(7)).startswith("<libsync.ConditionLock at 0x") and repr(ConditionLock(7)).endswith(
        ": condition=7>")
    assert repr(Condition(Lock())).startswith("<Condition(<unlocked libsync.Lock object at 0x")
    for cls in (Lock, RLock, Condition, ConditionLock, Semaphore, BoundedSemaphore, Event, Barrier):
        assert cls.__doc__, cls
        protocol = ("_is_owned", "_release_save", "_acquire_restore", "_recursion_count", "_at_fork_reinit")
        for name in dir(cls):
            member = getattr(cls, name)
            if (not name.startswith("_") or name in protocol) and (callable(member) or isinstance(member, property)):
                assert member.__doc__, f"{cls.__name__}.{name} has no docstring"
