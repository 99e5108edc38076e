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


@pytest.mark.parametrize("copier", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy, copy.deepcopy])
def test_a_copied_timeout_keeps_its_notes_and_attributes(copier):
    error = Timeout("/tmp/a.lock")
    error.add_note("the holder: pid 12")
    error.attempt = 3
    copied = copier(error)
    assert type(copied) is Timeout and copied is not error
    assert (str(copied), copied.lock_file, copied.__notes__, copied.attempt) == (
        str(error), "/tmp/a.lock", ["the holder: pid 12"], 3)
