"""libsync.distributed_lock's filelock interface where filelock 4's own suite found it differing
(issue 29): migrating from filelock's lock files, async objects dropped while held, Ctrl-C inside
release(), ``lifetime``, relative paths, and Timeout's pickling."""
import asyncio
import copy
import fcntl
import gc
import logging
import os
import pickle

import pytest

from libsync.distributed_lock import AsyncFileLock, FileLock, SoftFileLock, Timeout

LOCKS = [FileLock, SoftFileLock]


def _filelock_leftover(path) -> None:
    """What filelock's UnixFileLock leaves behind after a run: an empty plain file, flock released."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@pytest.mark.parametrize("lock_type", LOCKS)
def test_takes_over_the_plain_file_filelock_left_behind(lock_type, tmp_path):
    path = tmp_path / "a.lock"
    _filelock_leftover(path)
    lock = lock_type(path)
    with lock:
        assert lock.is_locked and path.is_dir()
        with pytest.raises(Timeout):
            lock_type(path).acquire(timeout=0)
    assert not lock.is_locked


@pytest.mark.parametrize("lock_type", LOCKS)
def test_a_plain_file_a_filelock_process_holds_is_refused_saying_what_to_do(lock_type, tmp_path):
    path = tmp_path / "a.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (another open file description: as another process's)
        with pytest.raises(FileExistsError, match="held by a filelock process"):
            lock_type(path).acquire(timeout=0)
        assert path.is_file()  # left alone
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    with lock_type(path) as lock:  # nobody holds it now: taken over
        assert lock.is_locked and path.is_dir()


@pytest.mark.parametrize("lock_type", LOCKS)
def test_a_plain_file_with_content_is_refused_saying_what_to_do(lock_type, tmp_path):
    path = tmp_path / "a.lock"
    path.write_text("12345\nhost\n")  # a SoftFileLock's marker, or someone's data: never removed
    with pytest.raises(FileExistsError, match="remove it"):
        lock_type(path).acquire(timeout=0)
    assert path.read_text() == "12345\nhost\n"


def test_async_lock_dropped_while_held_leaves_no_stale_entry(tmp_path):
    path = tmp_path / "a.lock"

    async def main():
        dropped = AsyncFileLock(path)
        await dropped.acquire()
        del dropped  # (its core goes with it, and releases)
        gc.collect()
        fresh = AsyncFileLock(path)  # the same path, the same task: acquires, as filelock's
        await fresh.acquire()
        assert fresh.is_locked
        with pytest.raises(RuntimeError, match="Deadlock"):  # a live object of this task holds it: still told
            await AsyncFileLock(path).acquire()
        await fresh.release()
        assert not fresh.is_locked
    asyncio.run(main())


class _InterruptOn(logging.Handler):
    """Raises KeyboardInterrupt from inside release(), where a Ctrl-C may land: at its log call."""

    def __init__(self, text):
        super().__init__(logging.DEBUG)
        self.text, self.fired = text, False

    def emit(self, record):
        if not self.fired and record.getMessage().startswith(self.text):
            self.fired = True
            raise KeyboardInterrupt


@pytest.fixture
def interrupt_release():
    logger = logging.getLogger("filelock")
    handler, level = _InterruptOn("Attempting to release"), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.parametrize("lock_type", LOCKS)
@pytest.mark.parametrize("how", ["release", "with"])
def test_ctrl_c_inside_release_leaves_the_lock_free(lock_type, how, tmp_path, interrupt_release):
    lock = lock_type(tmp_path / "a.lock")
    with pytest.raises(KeyboardInterrupt):
        if how == "with":
            with lock:
                pass
        else:
            lock.acquire()
            lock.release()
    assert interrupt_release.fired and not lock.is_locked and lock.lock_counter == 0
    other = lock_type(tmp_path / "a.lock")
    other.acquire(timeout=0)  # another object gets it: nobody holds it
    other.release()


def test_ctrl_c_inside_async_release_leaves_the_lock_free(tmp_path, interrupt_release):
    async def main():
        lock = AsyncFileLock(tmp_path / "a.lock", run_in_executor=False)
        await lock.acquire()
        with pytest.raises(KeyboardInterrupt):
            await lock.release()
        assert interrupt_release.fired and not lock.is_locked
        other = AsyncFileLock(tmp_path / "a.lock", run_in_executor=False)
        await other.acquire(timeout=0)
        await other.release()
    asyncio.run(main())


@pytest.mark.parametrize("lock_type", LOCKS)
def test_lifetime_is_refused_clearly(lock_type, tmp_path):
    with pytest.raises(ValueError, match="lifetime is not supported"):
        lock_type(tmp_path / "a.lock", lifetime=5)
    assert lock_type(tmp_path / "a.lock", lifetime=None).lifetime is None


@pytest.mark.parametrize("lock_type", LOCKS)
def test_a_relative_path_is_resolved_at_each_acquire(lock_type, tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    lock = lock_type("a.lock")
    with lock:
        monkeypatch.chdir(second)  # while held: the hold stays where it was taken, re-entry too
        with lock:
            assert lock.lock_counter == 2
        assert lock_type(first / "a.lock").holder is not None
        assert lock_type(second / "a.lock").holder is None
    assert lock_type(first / "a.lock").holder is None  # released where it was taken
    with lock:  # a new acquisition: relative to the working directory now, as filelock's
        assert lock_type(second / "a.lock").holder is not None
        assert lock_type(first / "a.lock").holder is None
    assert not lock.is_locked and lock_type(second / "a.lock").holder is None


@pytest.mark.parametrize("copier", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy, copy.deepcopy])
def test_a_copied_timeout_keeps_its_notes_and_attributes(copier):
    error = Timeout("/tmp/a.lock")
    error.add_note("the holder: pid 12")
    error.attempt = 3
    copied = copier(error)
    assert type(copied) is Timeout and copied is not error
    assert (str(copied), copied.lock_file, copied.__notes__, copied.attempt) == (
        str(error), "/tmp/a.lock", ["the holder: pid 12"], 3)
