"""Owners of process-shared and robust Mutex/RLock: a thread id the kernel reused, fork, and
robust mode with holders SIGKILLed (OwnerDiedError with the lock held, consistent,
NotRecoverableError for everyone)."""
import errno
import gc
import multiprocessing
import os
import signal
import struct
import threading
from multiprocessing import shared_memory

import pytest

from libsync.locks import (DeadlockError, LockError, Mutex, NotOwnerError, NotRecoverableError,
                           OwnerDiedError, RLock, RWLock, SpinLock)

SHARED = 0x40000000
WAITERS = 0x80000000
FORK = multiprocessing.get_context("fork")


@pytest.fixture
def shm():
    memory = shared_memory.SharedMemory(create=True, size=64)
    yield memory
    gc.collect()  # the test's locks, some in reference cycles (tracebacks, Process objects)
    memory.close()
    memory.unlink()


def _set_words(shm, *words, offset=0):
    struct.pack_into(f"{len(words)}I", shm.buf, offset, *words)


def _word(shm, offset=0):
    return struct.unpack_from("I", shm.buf, offset)[0]


def test_recycled_thread_id_is_not_the_holder(shm):
    """A dead holder left this thread's own id in a shared lock it never took."""
    mutex = Mutex(buffer=shm, initialize=True)
    me = threading.get_native_id()
    _set_words(shm, SHARED | me)
    assert not mutex.is_owner()
    assert mutex.acquire(timeout=0.02) is False  # waits; no DeadlockError
    with pytest.raises(NotOwnerError):
        mutex.release()
    assert _word(shm) & 0xFFFFFF == me

    rlock = RLock(buffer=shm, initialize=True, offset=8)
    _set_words(shm, SHARED | me, 3, offset=8)
    assert not rlock._is_owned()
    assert rlock.acquire(timeout=0.02) is False  # not a fourth level
    with pytest.raises(RuntimeError):
        rlock.release()

    with pytest.raises(LockError) as caught:  # an init cannot tell a dead holder from a live one
        Mutex(buffer=shm, initialize=True)
    assert caught.value.errno == errno.EBUSY and _word(shm) & 0xFFFFFF == me
    _set_words(shm, 0, 0, 0)  # zeroed memory starts over
    mutex = Mutex(buffer=shm, initialize=True)  # initialized again: the owner checks still work
    mutex.acquire()
    with pytest.raises(DeadlockError):
        mutex.acquire()
    mutex.release()


def test_recycled_thread_id_spinlock_and_rwlock_writer(shm):
    """The shared SpinLock and RWLock's writer: a dead holder left this thread's own id."""
    spin = SpinLock(buffer=shm, initialize=True)
    assert _word(shm) == SHARED
    me = threading.get_native_id()
    _set_words(shm, SHARED | me)
    assert spin.acquire(blocking=False) is False
    assert spin.acquire(timeout=0.02) is False  # waits; no DeadlockError
    with pytest.raises(NotOwnerError):
        spin.release()
    assert _word(shm) == SHARED | me
    with pytest.raises(LockError, match="initialize=False"):
        SpinLock(buffer=shm, initialize=True)
    _set_words(shm, 0)
    spin = SpinLock(buffer=shm, initialize=True)  # initialized again: the owner checks still work
    with spin:
        with pytest.raises(DeadlockError):
            spin.acquire()
    with pytest.raises(NotOwnerError):
        spin.release()
    assert _word(shm) == SHARED

    rw = RWLock(buffer=shm, initialize=True, offset=16)
    _set_words(shm, 0x80000000 | 0x10000000, 0, me, 0, offset=16)  # SHARED | WRITER, writer: me
    assert rw.acquire_write(timeout=0.02) is False  # waits: not the holder's own acquire
    assert rw.acquire_read(timeout=0.02) is False
    with pytest.raises(NotOwnerError):
        rw.release_write()
    with pytest.raises(NotOwnerError):
        rw.downgrade()
    assert _word(shm, 16) & 0x1FFFFFFF == 0x10000000 and _word(shm, 24) == me  # still the dead one's
    with pytest.raises(LockError, match="initialize=False"):
        RWLock(buffer=shm, initialize=True, offset=16)
    _set_words(shm, 0, 0, 0, 0, offset=16)
    rw = RWLock(buffer=shm, initialize=True, offset=16)
    with rw.write():
        with pytest.raises(DeadlockError):
            rw.acquire_write()
    with pytest.raises(NotOwnerError):
        rw.release_write()


def test_forked_child_does_not_hold(shm):
    mutex = Mutex(buffer=shm, initialize=True)
    robust = Mutex(buffer=shm, initialize=True, offset=8, robust=True)
    mutex.acquire()
    robust.acquire()
    pid = os.fork()
    if pid == 0:
        ok = not mutex.is_owner() and not robust.is_owner() and mutex.acquire(blocking=False) is False
        ok = ok and robust.acquire(timeout=0.02) is False  # its holder lives
        for lock in (mutex, robust):
            try:
                lock.release()
                ok = False
            except NotOwnerError:
                pass
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert mutex.is_owner() and robust.is_owner()
    mutex.release()
    robust.release()


def _hold(lock, depth, ready):
    for _ in range(depth):
        lock.acquire()
    ready.set()
    threading.Event().wait()  # until killed


def _killed_holder(lock, depth=1, context=FORK):
    """A child process that acquires `lock` depth times and is SIGKILLed holding it."""
    ready = context.Event()
    child = context.Process(target=_hold, args=(lock, depth, ready))
    child.start()
    assert ready.wait(60)
    os.kill(child.pid, signal.SIGKILL)
    return child


def test_robust_owner_died(shm):
    mutex = Mutex(buffer=shm, initialize=True, robust=True)
    child = _killed_holder(mutex)
    with pytest.raises(OwnerDiedError) as raised:
        mutex.acquire()
    assert isinstance(raised.value, LockError) and raised.value.errno == errno.EOWNERDEAD
    assert mutex.is_owner()  # held despite the error
    with pytest.raises(DeadlockError):
        mutex.acquire()
    mutex.consistent()
    mutex.release()
    with mutex:
        assert mutex.is_owner()
    child.join()


@pytest.mark.parametrize("kind", [Mutex, RLock])
def test_robust_lock_pickled_to_a_spawned_process(shm, kind):
    """The lock reaches a fresh interpreter pickled (through the SharedMemory's name), robust."""
    lock = kind(buffer=shm, initialize=True, offset=8, robust=True)
    child = _killed_holder(lock, context=multiprocessing.get_context("spawn"))
    with pytest.raises(OwnerDiedError):
        lock.acquire()
    lock.consistent()
    lock.release()
    child.join()


def test_robust_owner_died_with_sleeping_waiters(shm):
    """The holder dies while threads sleep in acquire: one gets OwnerDiedError, all get in."""
    mutex = Mutex(buffer=shm, initialize=True, robust=True)
    ready = FORK.Event()
    holder = FORK.Process(target=_hold, args=(mutex, 1, ready))
    holder.start()
    assert ready.wait(60)
    results = []

    def waiter():
        try:
            mutex.acquire()
            results.append("ok")
        except OwnerDiedError:
            results.append("died")
            mutex.consistent()
        mutex.release()

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(20000):  # until one sleeps in the lock (bounded: only guards against hangs)
        if _word(shm) & WAITERS:
            break
        threading.Event().wait(0.0005)
    os.kill(holder.pid, signal.SIGKILL)
    for t in threads:
        t.join(60)
    assert sorted(results) == ["died", "ok", "ok", "ok"]
    holder.join()


def test_robust_release_without_consistent_is_not_recoverable(shm):
    mutex = Mutex(buffer=shm, initialize=True, robust=True)
    _killed_holder(mutex).join()
    with pytest.raises(OwnerDiedError):
        mutex.acquire(timeout=60)
    outcome = []

    def waiter():
        try:
            mutex.acquire()
            outcome.append("acquired")
        except NotRecoverableError:
            outcome.append("not recoverable")

    thread = threading.Thread(target=waiter)
    thread.start()
    for _ in range(20000):
        if _word(shm) & WAITERS:
            break
        threading.Event().wait(0.0005)
    mutex.release()  # without consistent
    thread.join(60)
    assert outcome == ["not recoverable"]
    with pytest.raises(NotRecoverableError):
        mutex.acquire()
    with pytest.raises(NotRecoverableError):
        mutex.acquire(blocking=False)
    with pytest.raises(NotOwnerError):
        mutex.release()
    other = Mutex(buffer=shm, robust=True, initialize=False)
    with pytest.raises(NotRecoverableError):
        other.acquire(timeout=1)


def test_robust_rlock_holder_killed_mid_recursion(shm):
    rlock = RLock(buffer=shm, initialize=True, robust=True)
    child = _killed_holder(rlock, depth=3)
    with pytest.raises(OwnerDiedError):
        rlock.acquire()
    assert rlock._recursion_count() == 1
    rlock.acquire()
    assert rlock._recursion_count() == 2
    rlock.consistent()
    rlock.release()
    rlock.release()
    assert not rlock._is_owned()
    with rlock:
        pass
    child.join()


def test_robust_thread_exits_holding():
    mutex = Mutex(robust=True)  # private memory: a thread's death
    thread = threading.Thread(target=mutex.acquire)
    thread.start()
    thread.join()
    with pytest.raises(OwnerDiedError):
        mutex.acquire(timeout=60)
    mutex.consistent()
    mutex.release()


def test_robust_errors(shm):
    with pytest.raises(LockError) as raised:
        Mutex().consistent()  # not robust
    assert raised.value.errno == errno.EINVAL
    with pytest.raises(NotOwnerError):
        Mutex(robust=True).consistent()
    held = Mutex(robust=True)
    held.acquire()
    with pytest.raises(LockError):
        held.consistent()  # nothing to repair
    held.release()
    with pytest.raises(ValueError):
        Mutex(buffer=shm, initialize=True, offset=4, robust=True)  # not 8-aligned
    with pytest.raises(ValueError):
        Mutex(buffer=shm, initialize=True, offset=56, robust=True)  # 16 bytes do not fit
    Mutex(buffer=shm, initialize=True, offset=16)
    with pytest.raises(ValueError):
        Mutex(buffer=shm, offset=16, robust=True, initialize=False)  # the creator's is not robust
    RLock(buffer=shm, initialize=True, offset=32, robust=True)
    with pytest.raises(ValueError):
        RLock(buffer=shm, offset=32, initialize=False)
    assert RLock(buffer=shm, offset=32, robust=True, initialize=False).acquire()
