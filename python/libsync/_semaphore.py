"""The distributed counting semaphore (sync_distributed_semaphore_*): at most N holders at a time
across processes and hosts, on every backend of the distributed lock. Exported by
``libsync.distributed_lock``."""
from __future__ import annotations

import errno
import os
from ctypes import POINTER, byref, c_bool, c_char_p, c_int, c_int64, c_uint, c_uint64, c_void_p
from typing import Optional

from ._common import declare, deadline_ns, interruptible
from ._distributed import (HoldEvent, LockBrokenError, LockPath, NotLockedError, _detail, _os_error, _poll_ns,
                           _PROCESS_OWNED, _RELEASE_ON_DESTROY, _seconds_to_ns, _timeout)

_create = declare("sync_distributed_semaphore_create", c_int, c_char_p, c_int, c_uint, POINTER(c_void_p), blocking=True)
_destroy = declare("sync_distributed_semaphore_destroy", None, c_void_p, blocking=True)
_path = declare("sync_distributed_semaphore_path", c_char_p, c_void_p)
_permits = declare("sync_distributed_semaphore_permits", c_int, c_void_p)
_try_acquire = declare("sync_distributed_semaphore_try_acquire", c_int, c_void_p, blocking=True)
_acquire_interruptible = declare("sync_distributed_semaphore_acquire_interruptible", c_int, c_void_p, c_int64, c_int64,
                                 blocking=True)
_release = declare("sync_distributed_semaphore_release", c_int, c_void_p, blocking=True)
_token = declare("sync_distributed_semaphore_token", c_int, c_void_p, POINTER(c_uint64), blocking=True)
_is_held = declare("sync_distributed_semaphore_is_held", c_bool, c_void_p, blocking=True)
_hold_state = declare("sync_distributed_semaphore_hold_state", c_int, c_void_p)
_break = declare("sync_distributed_semaphore_break", c_int, c_void_p, blocking=True)

MAX_PERMITS = 10000  # SYNC_DISTRIBUTED_SEMAPHORE_MAX_PERMITS


class DistributedSemaphore:
    """A counting semaphore between processes and hosts: at most ``permits`` holders at a time,
    kept where a DistributedLock is (a path, or a postgresql:// / redis:// / etcd:// / etcds:// URL with
    ``lock=NAME``; a server is connected to now). Each object holds at most one permit: a
    process that wants two at once makes two objects. The holder is the thread that acquired it
    (any thread of the process with ``process_owned=True``). Every acquisition gets a fencing
    ``token``, larger than every earlier acquisition's of the semaphore, whichever permit. A
    holder that dies gives its permit back (PostgreSQL at once, Redis and etcd when its lease
    runs out, the file system at the next acquire on its host). Every client must give the same
    ``permits``: while a permit is held, an acquire with another count raises ValueError.

    ``acquire(blocking=True, timeout=-1)`` returns False when the time runs out (threading's
    convention); ``with semaphore:`` waits for ``timeout`` (the constructor's) and raises
    ``Timeout`` when it passes. Going away releases the object's permit."""

    def __init__(self, target: LockPath, permits: int, timeout: float = -1, poll_interval: float = 0.05, *,
                 process_owned: bool = False) -> None:
        if not isinstance(permits, int) or isinstance(permits, bool):
            raise TypeError(f"permits must be an int, not {type(permits).__name__}")
        if not 1 <= permits <= MAX_PERMITS:
            raise ValueError(f"a distributed semaphore has 1...{MAX_PERMITS} permits, not {permits}")
        _seconds_to_ns(timeout, "timeout")
        _poll_ns(poll_interval)
        self._handle: Optional[int] = None
        encoded = os.fsencode(target)
        if b"\0" in encoded:
            raise ValueError("the semaphore's target contains a NUL byte")
        handle = c_void_p()
        flags = _RELEASE_ON_DESTROY | (_PROCESS_OWNED if process_owned else 0)
        code = _create(encoded, permits, flags, byref(handle))
        if code == errno.EINVAL:
            raise ValueError(_detail() or f"invalid semaphore target {os.fsdecode(encoded)!r}")
        if code:
            raise _os_error(code, "cannot make a distributed semaphore there", os.fsdecode(encoded))
        self._handle = handle.value
        self.timeout = timeout
        self.poll_interval = poll_interval

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            _destroy(handle)

    @property
    def path(self) -> str:
        """The target: an absolute path, or the URL without its password."""
        return os.fsdecode(_path(self._handle) or b"")

    @property
    def permits(self) -> int:
        """How many holders at a time."""
        return int(_permits(self._handle))

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the caller's permit (None when it holds none)."""
        token = c_uint64()
        return token.value if _token(self._handle, byref(token)) == 0 else None

    @property
    def is_held(self) -> bool:
        """Whether the caller holds a permit through this object now (asked of the store)."""
        return bool(_is_held(self._handle))

    @property
    def lost(self) -> bool:
        """Whether the latest permit's loss was noticed (lease ended, session broke, broken); no
        store access."""
        return int(_hold_state(self._handle)) == HoldEvent.LOST

    def acquire(self, blocking: bool = True, timeout: float = -1, poll_interval: Optional[float] = None) -> bool:
        """Takes a permit: True; False when none was free (``blocking=False``) or none came within
        ``timeout`` seconds (< 0: waits for ever). Polls every ``poll_interval`` at most (etcd: a
        watch). Raises ValueError (the holders gave another count), RuntimeError (the caller
        holds this object's permit already), LockBrokenError (the caller's permit was lost: this
        call ended it) or OSError. Ctrl-C interrupts the wait."""
        if not blocking:
            code = _try_acquire(self._handle)
            if code == errno.EBUSY:
                return False
        else:
            poll = _poll_ns(self.poll_interval if poll_interval is None else poll_interval)
            code = interruptible(_acquire_interruptible, self._handle, deadline_ns(_seconds_to_ns(timeout, "timeout")), poll)
            if code == errno.ETIMEDOUT:
                return False
        self._check(code, "acquire")
        return True

    def release(self) -> None:
        """Gives the caller's permit back. Raises NotLockedError (the caller holds none through
        this object) or LockBrokenError (it was lost meanwhile: its lease ended, it was broken)."""
        code = _release(self._handle)
        if code == errno.EPERM:
            raise NotLockedError(f"release of a permit of the semaphore {self.path!r}, which the caller does not hold")
        self._check(code, "release")

    def break_lock(self) -> None:
        """Removes every permit, whoever holds them: only for holders known to be dead."""
        self._check(_break(self._handle), "break_lock")

    def _check(self, code: int, operation: str) -> None:
        if code == 0:
            return
        if code == errno.ESTALE:
            raise LockBrokenError(_detail() or f"the permit of {self.path!r} was lost")
        if code == errno.EINVAL:
            raise ValueError(_detail() or f"{operation}: invalid argument")
        if code == errno.EDEADLK:
            raise RuntimeError(f"{operation}: the caller already holds this object's permit of {self.path!r} "
                               "(one permit per object: use another object for another permit)")
        if code == errno.ETIMEDOUT:
            raise _timeout(self.path)
        raise _os_error(code, operation, self.path)

    def __enter__(self) -> "DistributedSemaphore":
        if not self.acquire(timeout=self.timeout):
            raise _timeout(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DistributedSemaphore({self.path!r}, permits={self.permits}, is_held={self.is_held})"
