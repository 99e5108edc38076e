"""A lock between processes and hosts on a shared file system (Apple's NSDistributedLock), in the
style of ``filelock``, with stale-holder recovery::

    from libsync.distributed_lock import DistributedLock, Timeout

    lock = DistributedLock("/shared/jobs.lock", timeout=10)
    with lock:                       # polls; takes over a lock whose holder died on this host
        ...                          # one process at a time, on any host sharing /shared
    try:
        with lock.acquire(timeout=0.5):
            ...
    except Timeout:
        print("busy:", lock.holder)  # who holds it (host, pid, since when), readable by anyone

NSDistributedLock's own calls are there too: ``try_lock()`` (never blocks), ``unlock()``,
``break_lock()``, ``lock_date``. The acquire is one rename(2) of a prepared directory, which NFS
servers perform atomically (never flock/fcntl). A holder on this host whose process is gone is
stale: ``recover()`` (and every blocking acquire) takes its lock over atomically, so of two
processes recovering at once exactly one gets it.

Errors: creation raises FileNotFoundError (no parent directory), NotADirectoryError (the parent
is not a directory), PermissionError (the parent is not writable), FileExistsError (something
that is not a lock is at the path) or ValueError; acquire raises ``Timeout`` (a TimeoutError);
release raises ``NotLockedError`` (this object does not hold it), ``LockBrokenError`` (it was
broken meanwhile) or ``LockStolenError`` (broken, and someone else holds it now); acquiring
twice through one object raises RuntimeError (it is not recursive, unlike filelock's).
"""
from __future__ import annotations

import ctypes
import errno
import os
import time
from ctypes import POINTER, byref, c_bool, c_char, c_char_p, c_int, c_int32, c_int64, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional, Union

from ._lib import blocking, declare, nonblocking

__all__ = ["DistributedLock", "Holder", "Timeout", "NotLockedError", "LockBrokenError", "LockStolenError"]


class Timeout(TimeoutError):
    """The lock could not be acquired within the timeout (as filelock's Timeout)."""

    def __init__(self, lock_file: str) -> None:
        super().__init__(f"the distributed lock {lock_file!r} could not be acquired")
        self.lock_file = lock_file


class NotLockedError(RuntimeError):
    """release() of a lock this object does not hold."""


class LockBrokenError(RuntimeError):
    """release(): the lock was broken since this object acquired it; nobody holds it now."""


class LockStolenError(LockBrokenError):
    """release(): the lock was broken since this object acquired it and someone else holds it now."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lock."""
    host: str
    pid: int
    process_start: int  # clock ticks since the holder's host booted (/proc/<pid>/stat field 22)
    acquired: datetime  # wall clock, UTC
    on_this_host: bool
    stale: bool         # on this host, and its process is gone: recover() may take the lock over


class _CHolder(ctypes.Structure):
    _fields_ = [("acquired_ns", c_int64), ("process_start", c_uint64), ("pid", c_int32),
                ("flags", c_uint32), ("host", c_char * 256)]


# Calls that touch the file system release the GIL (an NFS server may be slow).
_create = declare(blocking, "sync_distributed_lock_create", c_int, c_char_p, POINTER(c_void_p))
_destroy = declare(nonblocking, "sync_distributed_lock_destroy", None, c_void_p)
_path = declare(nonblocking, "sync_distributed_lock_path", c_char_p, c_void_p)
_try_lock = declare(blocking, "sync_distributed_lock_try_lock", c_int, c_void_p)
_lock = declare(blocking, "sync_distributed_lock_lock", c_int, c_void_p, c_int64, c_int64)
_unlock = declare(blocking, "sync_distributed_lock_unlock", c_int, c_void_p)
_break = declare(blocking, "sync_distributed_lock_break", c_int, c_void_p)
_recover = declare(blocking, "sync_distributed_lock_recover", c_int, c_void_p)
_holder = declare(blocking, "sync_distributed_lock_holder", c_int, c_void_p, POINTER(_CHolder))
_is_held = declare(blocking, "sync_distributed_lock_is_held", c_bool, c_void_p)

_CREATE_ERRORS = {errno.ENOENT: "its parent directory does not exist",
                  errno.ENOTDIR: "its parent is not a directory",
                  errno.EACCES: "its parent directory is not writable by this process",
                  errno.EPERM: "its parent directory is not writable by this process",
                  errno.EROFS: "its parent directory is on a read-only file system",
                  errno.EEXIST: "something that is not a lock is there (a file, or a directory with other content)",
                  errno.ENAMETOOLONG: "its name is too long"}


def _os_error(code: int, what: str, path: str) -> OSError:
    return OSError(code, f"{what}: {os.strerror(code)}", path)


def _seconds_to_ns(value: float, name: str) -> int:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if value != value:
        raise ValueError(f"{name} must not be NaN")
    return min(int(value * 1e9), 2**63 - 1) if value >= 0 else -1


class _Acquired:
    """What acquire() returns, so that ``with lock.acquire(timeout=1):`` works (as filelock's)."""
    __slots__ = ("lock",)

    def __init__(self, lock: "DistributedLock") -> None:
        self.lock = lock

    def __enter__(self) -> "DistributedLock":
        return self.lock

    def __exit__(self, *exc) -> None:
        self.lock.release()


class DistributedLock:
    """A distributed lock at ``path`` (see the module doc). ``timeout`` (seconds; < 0: forever)
    and ``poll_interval`` are the defaults of acquire() and of ``with``. Each object is one
    would-be holder: two objects for one path exclude each other, in one process or not."""

    def __init__(self, path: Union[str, bytes, os.PathLike], timeout: float = -1,
                 poll_interval: float = 0.05) -> None:
        self._handle = None
        encoded = os.fsencode(path)
        if b"\0" in encoded:
            raise ValueError("the lock path contains a NUL byte")
        _seconds_to_ns(timeout, "timeout")
        if _seconds_to_ns(poll_interval, "poll_interval") <= 0:
            raise ValueError("poll_interval must be > 0")
        handle = c_void_p()
        code = _create(encoded, byref(handle))
        if code == errno.EINVAL:
            raise ValueError(f"invalid lock path {os.fsdecode(encoded)!r}: it names no file")
        if code:
            raise _os_error(code, f"cannot make a lock there: {_CREATE_ERRORS.get(code, 'error')}", os.fsdecode(encoded))
        self._handle = handle.value
        self.timeout = timeout
        self.poll_interval = poll_interval

    @property
    def path(self) -> str:
        """The lock's absolute path."""
        return os.fsdecode(_path(self._handle))

    lock_file = path  # filelock's name

    def try_lock(self) -> bool:
        """Acquires the lock if it is free, without blocking: True if this object holds it now,
        False if someone holds it."""
        code = _try_lock(self._handle)
        if code == errno.EBUSY:
            return False
        self._check(code, "try_lock")
        return True

    def acquire(self, timeout: Optional[float] = None, poll_interval: Optional[float] = None, *,
                blocking: bool = True) -> _Acquired:
        """Acquires the lock, polling every ``poll_interval`` seconds and taking over a stale
        holder's lock; raises Timeout once ``timeout`` seconds (< 0: never) have passed.
        ``blocking=False`` tries once. Ctrl-C interrupts the wait."""
        timeout = self.timeout if timeout is None else timeout
        poll = _seconds_to_ns(self.poll_interval if poll_interval is None else poll_interval, "poll_interval")
        if poll <= 0:
            raise ValueError("poll_interval must be > 0")
        timeout_ns = 0 if not blocking else _seconds_to_ns(timeout, "timeout")
        deadline = None if timeout_ns < 0 else time.monotonic_ns() + timeout_ns
        while True:
            remaining = -1 if deadline is None else max(0, deadline - time.monotonic_ns())
            code = _lock(self._handle, remaining, poll)
            if code != errno.EINTR:  # EINTR: a signal arrived; a pending KeyboardInterrupt is raised here
                break
        if code == errno.ETIMEDOUT:
            raise Timeout(self.path)
        self._check(code, "acquire")
        return _Acquired(self)

    def release(self) -> None:
        """Releases the lock this object holds. Raises NotLockedError, LockBrokenError or
        LockStolenError (see the module doc)."""
        code = _unlock(self._handle)
        if code == errno.EPERM:
            raise NotLockedError(f"release of the distributed lock {self.path!r}, which this object does not hold")
        if code == errno.ESTALE:
            raise LockBrokenError(f"the distributed lock {self.path!r} was broken while this object held it")
        if code == errno.EBUSY:
            raise LockStolenError(f"the distributed lock {self.path!r} was broken while this object held it, "
                                  f"and is now held by {self.holder}")
        self._check(code, "release")

    unlock = release  # NSDistributedLock's name

    def break_lock(self) -> None:
        """Removes the lock whoever holds it (NSDistributedLock's breakLock): only for a holder
        known to be dead. Prefer recover(), which only takes a provably dead holder's lock."""
        self._check(_break(self._handle), "break_lock")

    def recover(self) -> bool:
        """If the holder is stale (on this host, its process gone), takes the lock over
        atomically and returns True: of several processes doing so at once, exactly one does."""
        code = _recover(self._handle)
        if code in (errno.EBUSY, errno.ENOENT):
            return False
        self._check(code, "recover")
        return True

    @property
    def holder(self) -> Optional[Holder]:
        """Who holds the lock now (any process may ask), or None."""
        h = _CHolder()
        code = _holder(self._handle, byref(h))
        if code == errno.ENOENT:
            return None
        self._check(code, "holder")
        return Holder(host=h.host.decode(errors="replace"), pid=h.pid, process_start=h.process_start,
                      acquired=datetime.fromtimestamp(h.acquired_ns / 1e9, tz=timezone.utc),
                      on_this_host=bool(h.flags & 1), stale=bool(h.flags & 2))

    @property
    def lock_date(self) -> Optional[datetime]:
        """When the current holder acquired the lock (UTC), or None (NSDistributedLock's lockDate)."""
        holder = self.holder
        return holder.acquired if holder else None

    @property
    def is_locked(self) -> bool:
        """Whether this object holds the lock now (checked on disk: False once it was broken)."""
        return bool(_is_held(self._handle))

    def _check(self, code: int, operation: str) -> None:
        if code == errno.EDEADLK:
            raise RuntimeError(f"{operation}: this DistributedLock object already holds {self.path!r} (it is not recursive)")
        if code == errno.EEXIST:
            raise _os_error(code, f"{operation}: something that is not a lock is there", self.path)
        if code:
            raise _os_error(code, operation, self.path)

    def __enter__(self) -> "DistributedLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        # As filelock's: an object that goes away releases what it holds.
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            try:
                if _is_held(handle):
                    _unlock(handle)
            finally:
                _destroy(handle)

    def __repr__(self) -> str:
        return f"DistributedLock({self.path!r}, is_locked={self.is_locked})"
