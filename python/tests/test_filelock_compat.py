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


@pytest.mark.parametrize("copier", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy, copy.deepcopy])
def test_a_copied_timeout_keeps_its_notes_and_attributes(copier):
    error = Timeout("/tmp/a.lock")
    error.add_note("the holder: pid 12")
    error.attempt = 3
    copied = copier(error)
    assert type(copied) is Timeout and copied is not error
    assert (str(copied), copied.lock_file, copied.__notes__, copied.attempt) == (
        str(error), "/tmp/a.lock", ["the holder: pid 12"], 3)
