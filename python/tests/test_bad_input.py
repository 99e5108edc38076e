"""Input every primitive must take the same way: an infinite timeout waits (threading raises
OverflowError for it; a huge one must not wrap to an arbitrary deadline), and a buffer that is
None or closed is refused (it must never give private memory that no other process sees)."""
import threading
from multiprocessing import shared_memory

import pytest

from libsync.atomics import AtomicBool, AtomicInt, Throttler
from libsync.conditions import (Barrier, BoundedSemaphore, Condition, ConditionLock, Event,
                                Semaphore)
from libsync.locks import Lock, Mutex, RLock, RWLock, SpinLock
from libsync.osatomic import ref

INF = float("inf")


def _rwlock_reader():
    lock = RWLock()
    return lock.acquire_write, lock.release_write, lambda: lock.acquire_read(timeout=INF), lock.release_read


def _rwlock_writer():
    lock = RWLock()
    return lock.acquire_write, lock.release_write, lambda: lock.acquire_write(timeout=INF), lock.release_write


def _plain(make):
    def cases():
        lock = make()
        return lock.acquire, lock.release, lambda: lock.acquire(timeout=INF), lock.release
    return cases


def _semaphore(make):
    def cases():
        semaphore = make(1)
        return semaphore.acquire, semaphore.release, lambda: semaphore.acquire(timeout=INF), semaphore.release
    return cases


def _condition_lock_when():
    lock = ConditionLock(0)
    return (lock.acquire, lambda: lock.release_with(1), lambda: lock.acquire_when(1, timeout=INF),
            lock.release)


def _event():
    event = Event()
    return lambda: None, event.set, lambda: event.wait(INF), lambda: None


def _condition(wait_for):
    def cases():
        condition, ready = Condition(), []

        def wake():
            with condition:
                ready.append(True)
                condition.notify_all()

        def wait():
            with condition:
                if wait_for:
                    return bool(condition.wait_for(lambda: ready, timeout=INF))
                while not ready:  # a wakeup without the notify is allowed
                    condition.wait(INF)
                return True
        return lambda: None, wake, wait, lambda: None
    return cases


def _throttler(timeout):
    def cases():
        throttler = Throttler(1)
        return throttler.try_enter, throttler.exit, lambda: throttler.enter(timeout), throttler.exit
    return cases


def _barrier():
    barrier = Barrier(2)
    return lambda: None, lambda: barrier.wait(INF), lambda: barrier.wait(INF) in (0, 1), lambda: None


WAITS = {
    "Lock": _plain(Lock), "Mutex": _plain(Mutex), "RLock": _plain(RLock), "SpinLock": _plain(SpinLock),
    "RWLock.read": _rwlock_reader, "RWLock.write": _rwlock_writer,
    "Semaphore": _semaphore(Semaphore), "BoundedSemaphore": _semaphore(BoundedSemaphore),
    "ConditionLock": _plain(ConditionLock), "ConditionLock.when": _condition_lock_when,
    "Event": _event, "Condition.wait": _condition(False), "Condition.wait_for": _condition(True),
    "Barrier": _barrier, "Throttler": _throttler(INF), "Throttler.huge": _throttler(1e300),
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


BUFFERED = {
    "AtomicBool": lambda buffer: AtomicBool(buffer=buffer), "AtomicInt": lambda buffer: AtomicInt(buffer=buffer),
    "AtomicInt32": lambda buffer: AtomicInt(bits=32, buffer=buffer),
    "Lock": lambda buffer: Lock(buffer), "Mutex": lambda buffer: Mutex(buffer), "RLock": lambda buffer: RLock(buffer),
    "RWLock": lambda buffer: RWLock(buffer), "SpinLock": lambda buffer: SpinLock(buffer),
    "ConditionLock": lambda buffer: ConditionLock(0, buffer), "Semaphore": lambda buffer: Semaphore(1, buffer),
    "BoundedSemaphore": lambda buffer: BoundedSemaphore(1, buffer), "Event": lambda buffer: Event(buffer),
    "Barrier": lambda buffer: Barrier(2, buffer=buffer), "ref": lambda buffer: ref(buffer),
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
