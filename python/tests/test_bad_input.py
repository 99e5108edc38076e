"""Input every primitive must take the same way: an infinite timeout waits (threading raises
OverflowError for it; a huge one must not wrap to an arbitrary deadline), timeouts with no time
left and NaN behave as threading's, and a buffer that is None or closed is refused (it must
never give private memory that no other process sees)."""
import threading
from multiprocessing import shared_memory

import pytest

from libsync.atomics import AtomicBool, AtomicInt, Throttler
from libsync import conditions as libsync_conditions
from libsync.conditions import (Barrier, BoundedSemaphore, Condition, ConditionLock, Event,
                                Semaphore)
from libsync.locks import Lock, Mutex, RLock, RWLock, SpinLock
from libsync.osatomic import ref

INF = float("inf")


def _rwlock_reader(timeout=INF):
    def cases():
        lock = RWLock()
        return lock.acquire_write, lock.release_write, lambda: lock.acquire_read(timeout=timeout), lock.release_read
    return cases


def _rwlock_writer(timeout=INF):
    def cases():
        lock = RWLock()
        return lock.acquire_write, lock.release_write, lambda: lock.acquire_write(timeout=timeout), lock.release_write
    return cases


def _plain(make, timeout=INF):
    def cases():
        lock = make()
        return lock.acquire, lock.release, lambda: lock.acquire(timeout=timeout), lock.release
    return cases


def _semaphore(make, timeout=INF):
    def cases():
        semaphore = make(1)
        return semaphore.acquire, semaphore.release, lambda: semaphore.acquire(timeout=timeout), semaphore.release
    return cases


def _condition_lock_when(timeout=INF):
    def cases():
        lock = ConditionLock(0)
        return (lock.acquire, lambda: lock.release_with(1), lambda: lock.acquire_when(1, timeout=timeout),
                lock.release)
    return cases


def _event(timeout=INF):
    def cases():
        event = Event()
        return lambda: None, event.set, lambda: event.wait(timeout), lambda: None
    return cases


def _condition(wait_for, timeout=INF):
    def cases():
        condition, ready = Condition(), []

        def wake():
            with condition:
                ready.append(True)
                condition.notify_all()

        def wait():
            with condition:
                if wait_for:
                    return bool(condition.wait_for(lambda: ready, timeout=timeout))
                while not ready:  # a wakeup without the notify is allowed
                    condition.wait(timeout)
                return True
        return lambda: None, wake, wait, lambda: None
    return cases


def _throttler(timeout):
    def cases():
        throttler = Throttler(1)
        return throttler.try_enter, throttler.exit, lambda: throttler.enter(timeout), throttler.exit
    return cases


def _barrier(timeout=INF, default=None):
    def cases():
        barrier = Barrier(2, timeout=default)
        return lambda: None, lambda: barrier.wait(timeout), lambda: barrier.wait(timeout) in (0, 1), lambda: None
    return cases


NAN = float("nan")
WAITS = {
    "Lock": _plain(Lock), "Mutex": _plain(Mutex), "RLock": _plain(RLock), "SpinLock": _plain(SpinLock),
    "RWLock.read": _rwlock_reader(), "RWLock.write": _rwlock_writer(),
    "Semaphore": _semaphore(Semaphore), "BoundedSemaphore": _semaphore(BoundedSemaphore),
    "ConditionLock": _plain(ConditionLock), "ConditionLock.when": _condition_lock_when(),
    "Event": _event(), "Condition.wait": _condition(False), "Condition.wait_for": _condition(True),
    "Barrier": _barrier(), "Throttler": _throttler(INF), "Throttler.huge": _throttler(1e300),
    # threading.Lock's -1 (no deadline), for every lock-like acquire, ConditionLock's included
    "Lock.-1": _plain(Lock, -1), "SpinLock.-1": _plain(SpinLock, -1), "RWLock.write.-1": _rwlock_writer(-1),
    "ConditionLock.-1": _plain(ConditionLock, -1), "ConditionLock.when.-1": _condition_lock_when(-1),
    # timed waits: more than the clock counts saturates (threading raises OverflowError) ...
    "Semaphore.huge": _semaphore(Semaphore, 1e300), "Event.huge": _event(2 ** 64), "Event.huger": _event(10 ** 400),
    "Condition.wait.huge": _condition(False, 1e300), "Condition.wait_for.huge": _condition(True, 1e300),
    "Barrier.huge": _barrier(2 ** 70), "Barrier.default.huge": _barrier(None, 1e300),
    # ... and NaN waits as threading's Semaphore, Barrier and wait_for do: until they succeed
    "Semaphore.nan": _semaphore(Semaphore, NAN), "Condition.wait_for.nan": _condition(True, NAN),
    "Barrier.nan": _barrier(NAN),
}


@pytest.mark.parametrize("name", WAITS)
def test_an_infinite_timeout_waits_without_a_deadline(name):
    """The waiter takes the primitive only after the holder lets it go (a wait that returned
    early, or raised, fails); join's bound only guards against a hang."""
    hold, let_go, wait_forever, release = WAITS[name]()
    hold()
    outcome, let_go_first = [], []

    def waiter():
        try:
            outcome.append(wait_forever())
            outcome.append(bool(let_go_first))
            release()
        except BaseException as error:  # reported below
            outcome.append(error)

    thread = threading.Thread(target=waiter)
    thread.start()
    let_go_first.append(True)
    let_go()
    thread.join(30)
    assert not thread.is_alive()
    assert outcome == [True, True]


@pytest.mark.parametrize("make", [Lock, RLock, SpinLock])
def test_an_infinite_timeout_on_a_free_lock_takes_it(make):
    lock = make()
    assert lock.acquire(True, INF)
    lock.release()
    with pytest.raises(ValueError):  # a timeout with blocking=False, as threading
        lock.acquire(False, INF)
    with pytest.raises(ValueError):  # NaN, as threading
        lock.acquire(True, float("nan"))


NEGATIVE = [-INF, -1e300, -2 ** 70, -0.5, 0]


def _timed_waits(module):
    """Timed waits that find nothing to take, as callables of a timeout."""
    def condition_wait(timeout):
        condition = module.Condition()
        with condition:
            return condition.wait(timeout)
    return {"Event.wait": lambda timeout: module.Event().wait(timeout), "Condition.wait": condition_wait,
            "Semaphore.acquire": lambda timeout: module.Semaphore(0).acquire(timeout=timeout)}


@pytest.mark.parametrize("timeout", NEGATIVE + [NAN])
@pytest.mark.parametrize("name", _timed_waits(threading))
def test_a_timed_wait_with_no_time_left_returns_false_as_threading(name, timeout):
    if timeout != timeout and name == "Semaphore.acquire":
        pytest.skip("threading's Semaphore waits without a deadline for NaN: tested with WAITS")
    assert _timed_waits(threading)[name](timeout) is False
    assert _timed_waits(libsync_conditions)[name](timeout) is False


@pytest.mark.parametrize("timeout", NEGATIVE)
@pytest.mark.parametrize("module", [threading, libsync_conditions], ids=["threading", "libsync"])
def test_wait_for_with_no_time_left_waits_once_as_threading(module, timeout):
    """threading's wait_for with a timeout of 0 or less tests the predicate, waits once (a try
    that lets the lock go and takes it back) and tests it again."""
    condition, calls = module.Condition(), []
    with condition:
        assert condition.wait_for(lambda: calls.append(1), timeout) is None
        assert condition._is_owned()
    assert len(calls) == 2


@pytest.mark.parametrize("timeout", NEGATIVE)
@pytest.mark.parametrize("default", [False, True], ids=["wait", "constructor"])
@pytest.mark.parametrize("module", [threading, libsync_conditions], ids=["threading", "libsync"])
def test_a_barrier_wait_with_no_time_left_breaks_it_as_threading(module, default, timeout):
    barrier = module.Barrier(2, timeout=timeout) if default else module.Barrier(2)
    with pytest.raises(threading.BrokenBarrierError):
        barrier.wait() if default else barrier.wait(timeout)
    assert barrier.broken


LOCK_LIKE = {
    "Lock": lambda timeout: Lock().acquire(timeout=timeout),
    "RLock": lambda timeout: RLock().acquire(timeout=timeout),
    "Mutex": lambda timeout: Mutex().acquire(timeout=timeout),
    "SpinLock": lambda timeout: SpinLock().acquire(timeout=timeout),
    "RWLock.read": lambda timeout: RWLock().acquire_read(timeout=timeout),
    "RWLock.write": lambda timeout: RWLock().acquire_write(timeout=timeout),
    "ConditionLock": lambda timeout: ConditionLock(0).acquire(timeout=timeout),
    "ConditionLock.when": lambda timeout: ConditionLock(0).acquire_when(0, timeout=timeout),
}


@pytest.mark.parametrize("timeout", [-INF, -1e300, -2 ** 70, -2, -0.5, NAN])
@pytest.mark.parametrize("name", LOCK_LIKE)
def test_a_lock_like_acquire_refuses_a_negative_timeout_as_threading_lock(name, timeout):
    """threading.Lock's rule for every lock-like acquire: -1 waits without a deadline; another
    negative timeout, -inf included, and NaN raise ValueError (threading's message)."""
    with pytest.raises(ValueError) as expected:
        threading.Lock().acquire(timeout=-2 if timeout == timeout else NAN)
    with pytest.raises(ValueError) as got:
        LOCK_LIKE[name](timeout)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("name", LOCK_LIKE)
def test_a_lock_like_acquire_refuses_a_timeout_beyond_timeout_max_as_threading(name):
    """Finite timeouts beyond threading.TIMEOUT_MAX raise OverflowError, as threading.Lock's
    (CPython's lock tests require it); inf waits without a deadline (WAITS)."""
    with pytest.raises(OverflowError):
        LOCK_LIKE[name](1e300)
    assert LOCK_LIKE[name](threading.TIMEOUT_MAX) is True


BUFFERED = {
    "AtomicBool": lambda buffer: AtomicBool(buffer=buffer, initialize=True),
    "AtomicInt": lambda buffer: AtomicInt(buffer=buffer, initialize=True),
    "AtomicInt32": lambda buffer: AtomicInt(bits=32, buffer=buffer, initialize=True),
    "Lock": lambda buffer: Lock(buffer, initialize=True), "Mutex": lambda buffer: Mutex(buffer, initialize=True),
    "RLock": lambda buffer: RLock(buffer, initialize=True), "RWLock": lambda buffer: RWLock(buffer, initialize=True),
    "SpinLock": lambda buffer: SpinLock(buffer, initialize=True),
    "ConditionLock": lambda buffer: ConditionLock(0, buffer, initialize=True),
    "Semaphore": lambda buffer: Semaphore(1, buffer, initialize=True),
    "BoundedSemaphore": lambda buffer: BoundedSemaphore(1, buffer, initialize=True),
    "Event": lambda buffer: Event(buffer, initialize=True),
    "Barrier": lambda buffer: Barrier(2, buffer=buffer, initialize=True), "ref": lambda buffer: ref(buffer),
}


@pytest.mark.parametrize("name", BUFFERED)
def test_a_closed_shared_memory_is_refused(name):
    make = BUFFERED[name]
    shm = shared_memory.SharedMemory(create=True, size=64)
    try:
        made = make(shm.buf)  # a live buffer works
        del made
        shm.close()
        with pytest.raises(ValueError):
            make(shm.buf)     # None now
        with pytest.raises((ValueError, TypeError)):
            make(shm)         # the closed SharedMemory itself
    finally:
        shm.unlink()
