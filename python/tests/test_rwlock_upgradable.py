"""libsync.locks.RWLock's upgradable read: misuse, exclusion, an upgrade no waiting writer gets
in front of, the guard, timed and non-blocking forms, and across processes (children that exec
a new interpreter and attach to the shared memory)."""
import os
import subprocess
import sys
import threading
import time
from multiprocessing import shared_memory

import pytest

from conftest import in_thread, wait_until
from libsync.locks import DeadlockError, NotOwnerError, RWLock


def test_misuse_raises():
    lock = RWLock()
    for blocking in (True, False):
        with pytest.raises(DeadlockError):
            lock.upgrade(blocking)
    with pytest.raises(NotOwnerError):
        lock.release_upgradable()
    with pytest.raises(NotOwnerError):
        lock.downgrade_upgradable()
    with pytest.raises(NotOwnerError):
        lock.downgrade_to_upgradable()
    lock.acquire_read()
    with pytest.raises(DeadlockError):  # a plain reader's upgrade: an error, not a hang
        lock.upgrade()
    with pytest.raises(DeadlockError):
        lock.upgrade(timeout=30)
    lock.release_read()
    lock.acquire_upgradable()
    with pytest.raises(DeadlockError):
        lock.acquire_upgradable()
    assert lock.acquire_upgradable(blocking=False) is False
    assert lock.acquire_upgradable(timeout=30) is False  # its wait could only time out
    with pytest.raises(DeadlockError):
        lock.acquire_write()
    with pytest.raises(NotOwnerError):
        lock.release_write()

    def elsewhere():
        with pytest.raises(NotOwnerError):
            lock.release_upgradable()
        with pytest.raises(DeadlockError):
            lock.upgrade()
        return lock.acquire_upgradable(timeout=0.001)
    assert in_thread(elsewhere) is False
    assert lock.upgrade() is True
    with pytest.raises(DeadlockError):  # a second upgrade
        lock.upgrade()
    with pytest.raises(NotOwnerError):
        lock.release_upgradable()
    lock.release_write()
    assert lock.acquire_write(blocking=False) is True
    lock.release_write()


def test_second_upgradable_reader_waits_and_never_deadlocks():
    lock = RWLock()
    lock.acquire_read()
    lock.acquire_upgradable()  # beside a plain reader
    second_in = threading.Event()

    def second():
        assert lock.acquire_write(blocking=False) is False
        assert lock.acquire_read(blocking=False) is True  # plain readers beside it
        lock.release_read()
        lock.acquire_upgradable()  # waits for the first
        second_in.set()
        lock.upgrade()
        lock.release_write()
    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.02)  # room to get in wrongly
    assert not second_in.is_set()
    lock.release_read()
    assert lock.upgrade() is True  # the waiting one holds nothing: no deadlock
    assert not second_in.is_set()
    lock.release_write()
    thread.join(60)
    assert second_in.is_set()


def test_upgrade_lets_no_waiting_writer_in():
    """The upgradable reader upgrades behind a plain reader while a writer waits: it writes
    first, and the writer after it."""
    lock = RWLock()
    state = {"value": 0}
    reader_in, reader_may_leave = threading.Event(), threading.Event()

    def reader():
        with lock.read():
            reader_in.set()
            reader_may_leave.wait(60)

    def writer():
        with lock.write():
            state["writer saw"] = state["value"]
            state["value"] = 2
    threads = [threading.Thread(target=reader)]
    threads[0].start()
    reader_in.wait(60)
    with lock.upgradable() as guard:
        threads.append(threading.Thread(target=writer))
        threads[1].start()
        wait_until(lambda: lock.waiting_writers() == 1, "the writer to wait")
        assert guard.upgrade(blocking=False) is False  # the reader holds it
        assert guard.upgrade(timeout=0.001) is False
        assert guard.mode == "upgradable"
        reader_may_leave.set()
        assert guard.upgrade() is True
        assert "writer saw" not in state
        state["value"] = 1
    for thread in threads:
        thread.join(60)
    assert state == {"writer saw": 1, "value": 2}


def test_guard_downgrades_and_releases_what_it_holds():
    lock = RWLock()
    with lock.upgradable() as guard:
        guard.upgrade()
        guard.downgrade_to_upgradable()
        assert in_thread(lambda: lock.acquire_read(blocking=False) and (lock.release_read() or True))
        assert in_thread(lambda: lock.acquire_upgradable(blocking=False)) is False
        guard.downgrade()
        assert guard.mode == "read"
        assert in_thread(lambda: lock.acquire_upgradable(blocking=False) and (lock.release_upgradable() or True))
        assert lock.acquire_write(blocking=False) is False
    assert lock.acquire_write(blocking=False) is True  # everything released
    lock.release_write()
    lock.acquire_upgradable()
    lock.downgrade_upgradable()
    lock.release_read()
    lock.acquire_write()
    lock.downgrade_to_upgradable()
    lock.release_upgradable()
    assert lock.acquire_write(blocking=False) is True
    lock.release_write()


_CHILD = """
import sys
from multiprocessing import resource_tracker, shared_memory
from libsync.locks import DeadlockError, NotOwnerError, RWLock
shm = shared_memory.SharedMemory(name=sys.argv[1])
resource_tracker.unregister(shm._name, "shared_memory")  # the parent owns it
lock = RWLock(buffer=shm, initialize=False)
assert lock.acquire_upgradable(blocking=False) is False  # the parent's
assert lock.acquire_read(blocking=False) is True
try:
    lock.upgrade()
    raise SystemExit("a plain reader upgraded")
except DeadlockError:
    pass
lock.release_read()
try:
    lock.release_upgradable()
    raise SystemExit("released the parent's upgradable read")
except NotOwnerError:
    pass
print("checked", flush=True)
with lock.upgradable() as guard:  # waits for the parent's
    print("in", flush=True)
    guard.upgrade()
    seen = shm.buf[RWLock.SIZE]
    shm.buf[RWLock.SIZE] = 2
del lock, guard
shm.close()
sys.exit(0 if seen == 1 else 10 + seen)
"""


def test_across_processes():
    shm = shared_memory.SharedMemory(create=True, size=RWLock.SIZE + 1)
    try:
        lock = RWLock(buffer=shm, initialize=True)
        shm.buf[RWLock.SIZE] = 0
        lock.acquire_read()
        lock.acquire_upgradable()
        child = subprocess.Popen([sys.executable, "-c", _CHILD, shm.name], stdout=subprocess.PIPE, text=True,
                                 env=os.environ)
        assert child.stdout.readline().strip() == "checked"
        time.sleep(0.02)  # room to get in wrongly
        lock.release_read()
        assert lock.upgrade() is True
        shm.buf[RWLock.SIZE] = 1
        lock.release_write()
        assert child.stdout.readline().strip() == "in"
        assert child.wait(60) == 0
        assert shm.buf[RWLock.SIZE] == 2
        assert lock.acquire_write(blocking=False) is True
        lock.release_write()
        del lock
    finally:
        shm.close()
        shm.unlink()


def _other_reader(lock):
    """Another thread takes a plain read of `lock` and leaves it held."""
    assert in_thread(lambda: lock.acquire_read(blocking=False))


@pytest.mark.parametrize("release_inside", ["upgradable", "write after upgrade", "read after downgrade",
                                            "read after the lock's downgrade"])
def test_block_that_releases_the_side_itself_raises_and_releases_nothing(release_inside):
    """A block that released its side itself: its end raises NotOwnerError and releases
    nothing (a release of the read side would take the other reader's away)."""
    lock = RWLock()
    _other_reader(lock)
    with pytest.raises(NotOwnerError, match="the block released the lock itself"):
        with lock.upgradable() as guard:
            if release_inside == "upgradable":
                lock.release_upgradable()
            elif release_inside == "write after upgrade":
                lock.release_read()  # the other reader's, so that the upgrade does not wait
                guard.upgrade()
                lock.release_write()
                _other_reader(lock)
            elif release_inside == "read after downgrade":
                guard.downgrade()
                lock.release_read()
            else:
                lock.downgrade_upgradable()
                lock.release_read()
    assert lock.acquire_write(blocking=False) is False  # the other reader still holds it
    lock.release_read()
    assert lock.acquire_write(blocking=False) is True
    lock.release_write()


def test_block_reads_are_counted_per_lock():
    """Reads the block takes and releases itself are its own: its end releases the one side it
    holds (here a read, after a downgrade, a release and a new read) and the other reader's
    stays; blocks nested on two locks, or on the same one, keep their counts apart."""
    lock, other = RWLock(), RWLock()
    _other_reader(lock)
    with lock.upgradable() as guard:
        guard.downgrade()
        lock.release_read()
        lock.acquire_read()
        with other.upgradable():
            other.acquire_read()
            other.release_read()
            lock.acquire_read()
            lock.release_read()
        with lock.upgradable() as inner:  # holding a read, the upgradable read again
            inner.downgrade()
    with lock.upgradable():  # the block's own calls on the lock: a downgrade it releases
        lock.downgrade_upgradable()
    assert lock.acquire_write(blocking=False) is False  # the other reader still holds it
    assert other.acquire_write(blocking=False) is True
    other.release_write()
    lock.release_read()
    assert lock.acquire_write(blocking=False) is True
    lock.release_write()
