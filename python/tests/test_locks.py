"""libsync.locks: drop-in behaviour of Lock/RLock, owner checks, RWLock, SpinLock, once,
synchronized, timeouts, shared memory across processes, Ctrl-C."""
import multiprocessing
import os
import threading
import time
from multiprocessing import shared_memory

import pytest
from conftest import assert_ctrl_c_interrupts

from libsync.locks import (DeadlockError, Lock, LockError, Mutex, NotOwnerError, Once, RLock, RWLock,
                           SpinLock, once, synchronized)


def hammer(lock_context, threads=4, iterations=3000):
    """Threads increment two fields under the lock; a yield between the writes exposes overlap."""
    state = {"a": 0, "b": 0, "overlaps": 0}

    def work():
        for i in range(iterations):
            with lock_context():
                a = state["a"]
                state["a"] = a + 1
                if i % 64 == 0:
                    time.sleep(0)
                if state["b"] != a:
                    state["overlaps"] += 1
                state["b"] = a + 1

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert state["overlaps"] == 0
    assert state["a"] == state["b"] == threads * iterations


@pytest.mark.parametrize("cls", [Lock, RLock, Mutex, SpinLock])
def test_mutual_exclusion(cls):
    lock = cls()
    hammer(lambda: lock)


def test_rwlock_mutual_exclusion():
    rw = RWLock()
    hammer(rw.write)
    seen = []

    def reader():
        for _ in range(2000):
            with rw.read():
                seen.append(1)
    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 6000


@pytest.mark.parametrize("cls", [Lock, RLock])
def test_same_exceptions_as_threading(cls):
    ours, theirs = cls(), getattr(threading, cls.__name__)()
    for args in [(False, 1), (True, -2), (True, threading.TIMEOUT_MAX * 2), (True, float("nan")), (True, "x")]:
        with pytest.raises(Exception) as expected:
            theirs.acquire(*args)
        with pytest.raises(expected.type) as got:
            ours.acquire(*args)
        assert str(got.value) == str(expected.value)
    with pytest.raises(RuntimeError) as expected:
        theirs.release()
    with pytest.raises(RuntimeError) as got:
        ours.release()
    assert str(got.value) == str(expected.value)
    assert ours.acquire() is True  # still works afterwards
    ours.release()


def test_lock_is_threading_lock_compatible():
    lock = Lock()
    assert not lock.locked()
    assert lock.acquire() is True
    assert lock.locked()
    assert lock.acquire(False) is False
    assert lock.acquire(timeout=0.01) is False
    releaser = threading.Thread(target=lock.release)  # another thread may release a Lock
    releaser.start()
    releaser.join()
    assert not lock.locked()
    with lock:
        assert lock.locked()
    assert "unlocked" in repr(lock)
    cond = threading.Condition(Lock())
    with cond:
        assert cond.wait(0.01) is False


def test_rlock_is_threading_rlock_compatible():
    lock = RLock()
    for _ in range(3):
        assert lock.acquire()
    assert lock._is_owned() and lock._recursion_count() == 3
    failure = []
    other = threading.Thread(target=lambda: failure.append(pytest.raises(RuntimeError, lock.release)))
    other.start()
    other.join()
    assert failure and lock._recursion_count() == 3
    assert threading.Thread(target=lambda: failure.append(lock.acquire(False))).start() is None
    for _ in range(3):
        lock.release()
    assert not lock._is_owned()
    cond = threading.Condition(RLock())
    with cond:
        with cond:  # Condition.wait releases a recursive hold fully and restores it
            assert cond.wait(0.01) is False
            assert cond._lock._recursion_count() == 2


def test_rlock_release_save_and_acquire_restore_keep_the_depth():
    lock = RLock()
    with pytest.raises(RuntimeError):
        lock._release_save()
    for _ in range(4):
        lock.acquire()
    depth = lock._release_save()
    assert depth == 4 and not lock._is_owned()
    taken = []
    other = threading.Thread(target=lambda: taken.append(lock.acquire(False) and lock.release() is None))
    other.start()
    other.join()
    assert taken == [True]  # released entirely: another thread could take it
    lock._acquire_restore(depth)
    assert lock._recursion_count() == 4
    for _ in range(4):
        lock.release()
    assert not lock._is_owned()


def test_mutex_owner_checks():
    m = Mutex()
    with pytest.raises(NotOwnerError):
        m.release()
    m.acquire()
    assert m.is_owner()
    with pytest.raises(DeadlockError) as e:
        m.acquire()
    assert e.value.errno == 35 and isinstance(e.value, RuntimeError)
    with pytest.raises(DeadlockError):
        m.acquire(timeout=1)
    assert m.acquire(False) is False
    errors = []

    def other():
        try:
            m.release()
        except NotOwnerError as error:
            errors.append(error)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors
    m.release()
    with m:  # still works
        pass


def test_spinlock_owner_checks():
    s = SpinLock()
    with pytest.raises(NotOwnerError):
        s.release()
    with s:
        with pytest.raises(DeadlockError):
            s.acquire()


def test_timeouts():
    lock = Mutex()
    held = threading.Event()
    done = threading.Event()

    def holder():
        with lock:
            held.set()
            done.wait(5)
    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    start = time.monotonic()
    assert lock.acquire(timeout=0.1) is False
    assert 0.1 <= time.monotonic() - start < 5
    start = time.monotonic()
    assert lock.acquire(timeout=0) is False
    assert time.monotonic() - start < 60  # returned (a bound against a hang, not a time)
    done.set()
    assert lock.acquire(timeout=5) is True
    lock.release()
    t.join()


def test_rwlock_semantics():
    rw = RWLock()
    with pytest.raises(NotOwnerError):
        rw.release_read()
    with pytest.raises(NotOwnerError):
        rw.release_write()
    with rw.read():
        assert rw.acquire_read(False) is True
        rw.release_read()
        assert rw.acquire_write(False) is False
        start = time.monotonic()
        assert rw.acquire_write(timeout=0.05) is False
        assert time.monotonic() - start >= 0.05
    with rw.write():
        with pytest.raises(DeadlockError):
            rw.acquire_write()
        with pytest.raises(DeadlockError):
            rw.acquire_read()
        assert rw.acquire_read(False) is False
    with pytest.raises(ValueError):
        rw.acquire_read(False, 1)


def test_writer_not_starved():
    rw = RWLock()
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            with rw.read():
                time.sleep(0.001)
    readers = [threading.Thread(target=reader) for _ in range(3)]
    for r in readers:
        r.start()
    time.sleep(0.02)
    try:
        for _ in range(3):
            assert rw.acquire_write(timeout=60) is True  # a starved writer never gets in
            rw.release_write()
    finally:
        stop.set()
        for r in readers:
            r.join()


def test_once_runs_once_under_race():
    runs = []
    barrier = threading.Barrier(8)

    @once
    def init():
        time.sleep(0.02)
        runs.append(1)
        return "ready"
    results = []

    def call():
        barrier.wait()
        results.append(init())
    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs == [1] and results == ["ready"] * 8 and init.once.done


def test_once_retries_after_exception():
    o = Once()
    with pytest.raises(KeyError):
        o(lambda: {}["missing"])
    assert not o.done
    assert o(lambda: 5) == 5
    assert o(lambda: 6) == 5


def test_synchronized():
    token = object()
    hammer(lambda: synchronized(token))
    with synchronized(token):
        with synchronized(token):  # recursive
            pass
    with pytest.raises(ZeroDivisionError):
        with synchronized(token):
            1 / 0
    # released despite the exception: another thread gets in
    got = []
    t = threading.Thread(target=lambda: got.append(synchronized(token).__enter__()))
    t.start()
    t.join(5)
    assert got == [None]
    other = object()
    with synchronized(other):  # a different token does not block on the held one
        pass

    @synchronized(other)
    def decorated(x):
        return x * 2
    assert decorated(4) == 8


def _increment(kind, name, n):
    shm = shared_memory.SharedMemory(name=name)
    try:
        lock = kind(buffer=shm, offset=0, initialize=False)
        counter = shm.buf.cast("q")
        for _ in range(n):
            if kind is RWLock:
                with lock.write():
                    counter[8] += 1
            else:
                with lock:
                    counter[8] += 1
        del counter, lock
    finally:
        shm.close()


@pytest.mark.parametrize("kind", [Lock, RLock, Mutex, RWLock, SpinLock])
def test_shared_memory_across_processes(kind):
    shm = shared_memory.SharedMemory(create=True, size=128)
    try:
        lock = kind(buffer=shm, initialize=True, offset=0)
        context = multiprocessing.get_context("fork")
        procs = [context.Process(target=_increment, args=(kind, shm.name, 2000)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        assert all(p.exitcode == 0 for p in procs)
        counter = shm.buf.cast("q")
        assert counter[8] == 8000
        del counter, lock
    finally:
        shm.close()
        shm.unlink()


def _in_child(function):
    """function()'s int result as the exit code of a forked child (1 if it raised)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = function()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("kind", [Lock, RLock, Mutex, lambda **kw: Mutex(robust=True, **kw)],
                         ids=["Lock", "RLock", "Mutex", "robust Mutex"])
def test_at_fork_reinit_leaves_a_shared_lock_alone(kind):
    """threading's hook in a forked child resets a private lock, but a lock in shared memory is
    every process's: the parent's hold must survive the child's _at_fork_reinit()."""
    shm, shared = shared_memory.SharedMemory(create=True, size=64), None
    try:
        shared, private = kind(buffer=shm, initialize=True), kind()
        shared.acquire()
        private.acquire()

        def reinit_in_child():
            shared._at_fork_reinit()
            private._at_fork_reinit()
            return 0 if private.acquire(False) else 2  # the private one is the child's to reset

        assert _in_child(reinit_in_child) == 0
        assert _in_child(lambda: 3 if shared.acquire(False) else 0) == 0  # still the parent's
        shared.release()  # the parent still holds it (owner-checked kinds raise otherwise)
        assert _in_child(lambda: 0 if shared.acquire(False) else 4) == 0
        private.release()
    finally:
        shared = None  # the view into shm, which close() refuses while it lives
        shm.close()
        shm.unlink()


def test_bad_buffers():
    with pytest.raises(ValueError, match="offset 60 is out of range for a 8-byte RLock in a 64-byte buffer"):
        RLock(buffer=bytearray(64), initialize=True, offset=60)  # the first word fits, the second does not
    with pytest.raises(ValueError, match="offset 56 is out of range for a 16-byte Mutex"):
        Mutex(buffer=bytearray(64), initialize=True, offset=56, robust=True)
    with pytest.raises(TypeError):
        Lock(buffer=b"read-only", initialize=True)
    with pytest.raises(ValueError):
        RWLock(buffer=bytearray(8), initialize=True)
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(Lock())


@pytest.mark.parametrize("what", ["Lock", "Mutex", "RLock", "RWLock", "SpinLock"])
def test_ctrl_c_interrupts_blocked_acquire(what):
    setup = f"""
import threading, time
from libsync.locks import *
lock = {what}()
acquire = lock.acquire_write if {what!r} == "RWLock" else lock.acquire
held = threading.Event()
threading.Thread(target=lambda: (acquire(), held.set())).start()  # another thread holds it
held.wait()
"""
    assert_ctrl_c_interrupts(setup, "acquire()")
