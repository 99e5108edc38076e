"""libsync.locks.RWLock: readerwriterlock's interface (what readerwriterlock's own suite checks,
through readerwriterlock_adapter), the write holder's own attempts, downgrade, and writers
SIGKILLed while they wait in shared memory."""
import multiprocessing
import os
import signal
import sys
import threading
import time
from multiprocessing import shared_memory

import pytest

import readerwriterlock_adapter as rwlock
from conftest import wait_until
from libsync.locks import DeadlockError, LockError, NotOwnerError, ReadLock, RWLock, WriteLock

ALL_TYPES = (rwlock.RWLockRead, rwlock.RWLockWrite, rwlock.RWLockFair,
             rwlock.RWLockReadD, rwlock.RWLockWriteD, rwlock.RWLockFairD)


# ---- The write holder's own attempts --------------------------------------------------------

@pytest.mark.parametrize("side", ["read", "write"])
def test_holder_bounded_acquire_is_false_either_way(side):
    """Non-blocking and timed acquires by the write holder give the same answer, False (at once:
    waiting could only time out); only the unbounded acquire raises DeadlockError."""
    rw = RWLock()
    acquire = rw.acquire_read if side == "read" else rw.acquire_write
    with rw.write():
        assert acquire(blocking=False) is False
        assert acquire(timeout=30) is False
        assert acquire(True, 0) is False
        with pytest.raises(DeadlockError):
            acquire()
        # The same through readerwriterlock's lock objects (other objects, same thread).
        other = rw.gen_rlock() if side == "read" else rw.gen_wlock()
        assert other.acquire(blocking=False) is False
        assert other.acquire(blocking=True, timeout=30) is False
        assert not other.locked()
    assert rw.waiting_writers() == 0
    assert rw.acquire_read(blocking=False) is True  # nothing left behind
    rw.release_read()


# ---- readerwriterlock's interface -----------------------------------------------------------

@pytest.mark.parametrize("kind", ALL_TYPES)
def test_construction_and_protocols(kind):
    for lock in (kind(), kind(lock_factory=threading.Lock, time_source=time.perf_counter)):
        assert isinstance(lock, kind) and isinstance(lock, RWLock)
        assert isinstance(lock, rwlock.RWLockable) and isinstance(lock, rwlock.RWLockableD)
        reader, writer = lock.gen_rlock(), lock.gen_wlock()
        assert isinstance(reader, rwlock.Lockable) and isinstance(reader, ReadLock)
        assert isinstance(writer, rwlock.LockableD) and isinstance(writer, WriteLock)
        assert not reader.locked() and not writer.locked()


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_lock_objects_as_context_managers(kind):
    lock = kind()
    for side in (lock.gen_rlock(), lock.gen_wlock()):
        with side:
            assert side.locked()
        assert not side.locked()


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_release_unlocked_raises_threadings_error(kind):
    lock = kind()
    for side in (lock.gen_rlock(), lock.gen_wlock()):
        with pytest.raises(rwlock.RELEASE_ERR_CLS) as caught:
            side.release()
        assert str(caught.value) == rwlock.RELEASE_ERR_MSG == "release unlocked lock"


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_writer_excludes_everyone(kind):
    lock = kind()
    with lock.gen_wlock():
        assert lock.gen_wlock().acquire(blocking=False) is False
        assert lock.gen_rlock().acquire(blocking=False) is False
        assert lock.gen_wlock().acquire(blocking=True, timeout=0.05) is False
        assert lock.gen_rlock().acquire(blocking=True, timeout=0.05) is False

        # From another thread, too: the timed attempts wait and fail.
        results = []
        thread = threading.Thread(target=lambda: results.extend(
            [lock.gen_wlock().acquire(timeout=0.05), lock.gen_rlock().acquire(timeout=0.05)]))
        thread.start()
        thread.join()
        assert results == [False, False]


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_readers_share_and_exclude_writers(kind):
    lock = kind()
    with lock.gen_rlock():
        assert lock.gen_wlock().acquire(blocking=False) is False
        assert lock.gen_wlock().acquire(blocking=True, timeout=0.05) is False
        other = lock.gen_rlock()
        assert other.acquire(blocking=False) is True
        other.release()
        assert other.acquire(blocking=True, timeout=0.75) is True
        other.release()


@pytest.mark.parametrize("kind", [rwlock.RWLockReadD, rwlock.RWLockWriteD, rwlock.RWLockFairD])
def test_downgrade_lock_object(kind):
    lock = kind()
    writer, reader = lock.gen_wlock(), lock.gen_rlock()
    assert writer.acquire() and writer.locked() and not reader.locked()
    assert reader.acquire(blocking=False) is False
    downgraded = writer.downgrade()
    assert isinstance(downgraded, rwlock.Lockable) and downgraded.locked()
    assert not writer.locked()
    assert reader.acquire() is True and reader.locked()    # readers join
    assert lock.gen_wlock().acquire(blocking=False) is False
    downgraded.release()
    reader.release()
    assert not downgraded.locked()
    with pytest.raises(RuntimeError):
        downgraded.release()
    assert reader.acquire(blocking=True, timeout=0.75) is True
    reader.release()
    assert lock.gen_wlock().acquire(blocking=False) is True


@pytest.mark.parametrize("kind", [rwlock.RWLockReadD, rwlock.RWLockWriteD, rwlock.RWLockFairD])
def test_downgrade_unlocked_lock_object_raises(kind):
    writer = kind().gen_wlock()
    with pytest.raises(rwlock.RELEASE_ERR_CLS) as caught:
        writer.release()
    assert str(caught.value) == rwlock.RELEASE_ERR_MSG
    with pytest.raises(rwlock.RELEASE_ERR_CLS):
        writer.downgrade()
    assert not writer.locked()


def test_downgraded_state_equals_read_state():
    """A downgraded lock is in exactly the state a read-locked one is in, and both return to
    the initial state when released (readerwriterlock's white-box tests, on libsync's words)."""
    read_memory, downgrade_memory = bytearray(RWLock.SIZE), bytearray(RWLock.SIZE)
    read_locked, downgraded = RWLock(buffer=read_memory, initialize=True), RWLock(buffer=downgrade_memory, initialize=True)
    initial = bytes(read_memory)
    assert bytes(downgrade_memory) == initial
    read_lock = read_locked.gen_rlock()
    read_lock.acquire()
    write_lock = downgraded.gen_wlock()
    write_lock.acquire()
    assert bytes(downgrade_memory) != initial
    from_downgrade = write_lock.downgrade()
    assert bytes(read_memory) == bytes(downgrade_memory) != initial
    read_lock.release()
    from_downgrade.release()
    assert bytes(read_memory) == bytes(downgrade_memory) == initial
    del read_lock, write_lock, from_downgrade, read_locked, downgraded


def test_one_read_lock_object_shared_by_threads():
    """readerwriterlock's usual module-level lock object, used by many threads at once: every
    hold is counted, none is lost or released twice."""
    lock = RWLock()
    reader = lock.gen_rlock()
    errors = []
    start = threading.Barrier(8)

    def work():
        try:
            start.wait()
            for _ in range(2000):
                with reader:
                    pass
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not reader.locked()
    assert lock.acquire_write(blocking=False) is True  # every read lock was released


def test_readers_writers_and_downgraders_stress():
    """readerwriterlock's multi-thread test, shortened: writers (blocking and timed), readers
    (blocking and timed) and downgraders on one lock; a writer's update is atomic, a reader (and a
    downgrader in its read phase) never sees the value change."""
    lock = RWLock()
    state = {"value": 0}
    failures = []
    stop = time.monotonic() + 2.0

    def checked(body):
        def run():
            try:
                while time.monotonic() < stop:
                    body()
            except BaseException as error:  # noqa: BLE001 - reported below
                failures.append(error)
        return run

    writer_lock = lock.gen_wlock()

    def write_blocking():
        with writer_lock:
            before = state["value"]
            time.sleep(0)
            state["value"] = before + 1

    def write_timed():
        w = lock.gen_wlock()
        if w.acquire(blocking=True, timeout=sys.float_info.min):
            try:
                before = state["value"]
                time.sleep(0)
                state["value"] = before + 1
            finally:
                w.release()

    def read(timed):
        def body():
            r = lock.gen_rlock()
            if r.acquire(blocking=True, timeout=sys.float_info.min if timed else -1):
                try:
                    seen = state["value"]
                    time.sleep(0)
                    assert state["value"] == seen
                finally:
                    r.release()
        return body

    def downgrade():
        w = lock.gen_wlock()
        if w.acquire(blocking=True, timeout=sys.float_info.min):
            held = w
            try:
                state["value"] += 1
                mine = state["value"]
                held = w.downgrade()
                time.sleep(0)
                assert state["value"] == mine  # no writer got in
            finally:
                held.release()

    bodies = [write_blocking, write_timed, read(False), read(True), downgrade] * 4
    threads = [threading.Thread(target=checked(body)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert state["value"] > 0
    assert lock.acquire_write(blocking=False) is True


# ---- RWLock.downgrade, misuse ---------------------------------------------------------------

def test_downgrade_on_the_lock():
    rw = RWLock()
    with pytest.raises(NotOwnerError):
        rw.downgrade()
    rw.acquire_read()
    with pytest.raises(NotOwnerError):
        rw.downgrade()
    rw.release_read()
    rw.acquire_write()
    outcome = []

    def downgrade_elsewhere():
        try:
            rw.downgrade()
            outcome.append("downgraded")
        except NotOwnerError:
            outcome.append("NotOwnerError")
    thread = threading.Thread(target=downgrade_elsewhere)
    thread.start()
    thread.join()
    assert outcome == ["NotOwnerError"]
    rw.downgrade()
    with pytest.raises(NotOwnerError):
        rw.release_write()
    assert rw.acquire_read(blocking=False) is True
    assert rw.acquire_write(blocking=False) is False
    rw.release_read()
    rw.release_read()
    with pytest.raises(NotOwnerError):
        rw.release_read()


def test_write_lock_object_release_from_another_thread_keeps_it_held():
    rw = RWLock()
    writer = rw.gen_wlock()
    writer.acquire()
    errors = []

    def release():
        try:
            writer.release()
        except NotOwnerError as error:
            errors.append(error)
    thread = threading.Thread(target=release)
    thread.start()
    thread.join()
    assert len(errors) == 1 and writer.locked()
    writer.release()
    assert not writer.locked()


def test_downgrade_lets_waiting_writer_go_next():
    rw = RWLock()
    rw.acquire_write()
    got_in = threading.Event()

    def writer():
        with rw.write():
            got_in.set()
    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: rw.waiting_writers() == 1, "the writer to wait")
    rw.downgrade()
    assert not got_in.is_set()                      # it cannot: we read
    assert rw.acquire_read(blocking=False) is False  # new readers wait for the writer
    rw.release_read()
    thread.join(60)
    assert got_in.is_set()


def test_impossible_state_is_reported():
    memory = bytearray(b"\xff" * RWLock.SIZE)
    rw = RWLock(buffer=memory, initialize=False)
    for call in (rw.acquire_read, rw.acquire_write, rw.release_read, rw.release_write, rw.downgrade,
                 lambda: rw.acquire_read(timeout=1), lambda: rw.acquire_write(blocking=False)):
        with pytest.raises(LockError) as caught:
            call()
        assert caught.value.errno == 22  # EINVAL
    assert memory == bytearray(b"\xff" * RWLock.SIZE)
    del rw


def test_buffer_must_hold_the_whole_lock():
    with pytest.raises(ValueError):
        RWLock(buffer=bytearray(RWLock.SIZE - 4), initialize=True)


# ---- Killed waiters in shared memory --------------------------------------------------------

def _wait_for_write(name: str) -> None:
    shm = shared_memory.SharedMemory(name=name)
    lock = RWLock(buffer=shm, initialize=False)
    lock.acquire_write()
    lock.release_write()
    os._exit(0)


def _read_then_write(name: str) -> None:
    shm = shared_memory.SharedMemory(name=name)
    lock = RWLock(buffer=shm, initialize=False)
    ok = lock.acquire_read(timeout=10)
    if ok:
        lock.release_read()
        ok = lock.acquire_write(timeout=10)
        if ok:
            lock.release_write()
    os._exit(0 if ok else 1)


def _writer_marked(lock: RWLock) -> bool:
    """Whether a writer waits and has stopped new readers (writer preference)."""
    if lock.waiting_writers() != 1:
        return False
    if lock.acquire_read(blocking=False):
        lock.release_read()
        return False
    return True


@pytest.mark.parametrize("hold", ["read", "write"])
def test_killed_waiting_writer_blocks_nobody(hold):
    """A process SIGKILLed while it waits for the write lock: once the holder releases, new
    readers and writers get in, here and in another process."""
    shm = shared_memory.SharedMemory(create=True, size=RWLock.SIZE)
    try:
        lock = RWLock(buffer=shm, initialize=True)
        (lock.acquire_read if hold == "read" else lock.acquire_write)()
        context = multiprocessing.get_context("fork")
        writer = context.Process(target=_wait_for_write, args=(shm.name,))
        writer.start()
        if hold == "read":
            wait_until(lambda: _writer_marked(lock), "the writer to wait")
        else:
            wait_until(lambda: lock.waiting_writers() == 1, "the writer to wait")
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
        assert writer.exitcode == -signal.SIGKILL
        (lock.release_read if hold == "read" else lock.release_write)()
        assert lock.acquire_read(timeout=10) is True
        lock.release_read()
        assert lock.acquire_write(timeout=10) is True
        lock.release_write()
        other = context.Process(target=_read_then_write, args=(shm.name,))
        other.start()
        other.join(60)
        assert other.exitcode == 0
        del lock
    finally:
        shm.close()
        shm.unlink()
