"""A lock between processes and hosts (Apple's NSDistributedLock), kept in a shared file system
(with stale-holder recovery), a PostgreSQL server or a Redis server, with a fencing token per
acquisition; and, over the same core, a drop-in for ``filelock``::

    from libsync.distributed_lock import FileLock, SoftFileLock, Timeout, AsyncFileLock

    lock = FileLock("/shared/jobs.lock", timeout=10)   # filelock's interface (see _filelock.py)
    with lock:                       # waits: other processes, other hosts, other threads
        ...

    from libsync.distributed_lock import DistributedLock
    lock = DistributedLock("/shared/jobs.lock", timeout=10)
    with lock:                       # polls; takes over a lock whose holder died on this host
        ...
    try:
        with lock.acquire(timeout=0.5):
            ...
    except Timeout:
        print("busy:", lock.holder)  # who holds it (host, pid, since when), readable by anyone

Targets: a path (the file system), ``postgresql://user:password@host:port/db?lock=NAME``
(``postgres://`` too; a session advisory lock, released by the server when the holder's
connection ends), or ``redis://:password@host:port/db?lock=NAME&ttl=10`` (a lease renewed while
held: a holder stopped for less than ``ttl`` seconds keeps the lock, wherever the stop falls;
a holder on another host that dies leaves it held for more than ``ttl`` and at most
``ttl`` + ``ttl``/3 seconds). Both URLs take ``connect_timeout=SECONDS`` (default 5). ``lock.token`` is the fencing
token of the caller's hold: larger than every earlier acquisition's, so a resource that refuses
smaller tokens is safe from a holder that lost the lock (see docs/distributed_lock.md).

``DistributedLock`` is NSDistributedLock's shape: ``try_lock()`` (never blocks), ``unlock()``,
``break_lock()``, ``lock_date``, ``holder``, ``recover()``; not recursive, and strict about
misuse. The acquire is one rename(2) of a prepared directory, which NFS servers perform
atomically (never flock/fcntl). A holder on this host whose process is gone is stale:
``recover()`` (and every blocking acquire) takes its lock over atomically, so of two processes
recovering at once exactly one gets it.

A hold can be lost without the holder's doing (broken, a Redis lease that ran out, a PostgreSQL
session that ended): ``lock.lost`` says so without a round trip, and ``on_event=`` is called with
``HoldEvent.LOST`` (Redis also ``SUSPENDED`` / ``RESUMED`` while its server does not answer); see
docs/distributed_lock.md for how soon.

Holders: two objects for one path exclude each other, in one process or not. Through one
object, the holder is the thread that acquired it: the object's other threads wait (without
polling the disk). A forked child never holds its parent's lock: its ``release()`` raises
NotLockedError and its finalizers touch nothing.

Errors: creation raises FileNotFoundError (no parent directory), NotADirectoryError (the parent
is not a directory), PermissionError (the parent is not writable), FileExistsError (something
that is not a lock is at the path), OSError(ENAMETOOLONG) or ValueError; acquire raises
``Timeout`` (a TimeoutError) or RuntimeError (the caller holds it already: waiting would never
end); after the caller's hold was lost (``is_locked`` is False: broken, lease expired, session
ended), the next ``acquire()`` or ``try_lock()`` raises that loss's ``LockLostError`` once,
ending the lost hold, and the one after acquires; release raises ``NotLockedError`` (the caller does not hold it), or a ``LockLostError``:
``LockBrokenError`` (the hold was lost meanwhile: broken, lease expired, server session ended) or
``LockStolenError`` (lost, and someone else holds it now). Server targets add ValueError (a
malformed URL), OSError(ELIBACC) (the client library is missing: the message says which Debian
package to install), ConnectionRefusedError (cannot connect), PermissionError (wrong or missing password),
and OSError(EIO) (the server failed or stopped answering); a server that stops answering during
a wait ends it at its timeout with ``Timeout`` (its note says so).
"""
from __future__ import annotations

import ctypes
import enum
import errno
import itertools
import math
import os
import weakref
from ctypes import (CFUNCTYPE, POINTER, byref, c_bool, c_char, c_char_p, c_int, c_int32, c_int64, c_uint, c_uint32,
                    c_uint64, c_void_p)
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Optional, Union

from ._common import declare, deadline_ns, interruptible

__all__ = ["DistributedLock", "Holder", "HoldEvent", "Timeout", "NotLockedError", "LockLostError", "LockBrokenError", "LockStolenError",
           "FileLock", "SoftFileLock", "AsyncFileLock", "AsyncSoftFileLock", "BaseFileLock", "BaseAsyncFileLock",
           "AcquireReturnProxy", "AsyncAcquireReturnProxy"]


class Timeout(TimeoutError):
    """The lock could not be acquired within the timeout (filelock's Timeout: same message for
    a path, ``lock_file``, and it survives pickling). A server lock's message names it by its
    URL (without the password): "The distributed lock 'redis://...' could not be acquired."."""

    def __init__(self, lock_file: str) -> None:
        super().__init__(lock_file)
        self._lock_file = lock_file

    def __reduce__(self):
        return self.__class__, (self._lock_file,)

    def __str__(self) -> str:
        kind = "distributed lock" if is_url(self._lock_file) else "file lock"
        return f"The {kind} '{self._lock_file}' could not be acquired."

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self._lock_file!r})"

    @property
    def lock_file(self) -> str:
        """The path of the lock."""
        return self._lock_file


class NotLockedError(RuntimeError):
    """release() of a lock the caller does not hold through this object."""


class LockLostError(RuntimeError):
    """release(): the hold was lost since this object acquired it (broken, its Redis lease expired,
    its PostgreSQL session ended): work done under it may have overlapped another holder's."""


class LockBrokenError(LockLostError):
    """release(): the hold was lost since this object acquired it; nobody else is known to hold it."""


class LockStolenError(LockBrokenError):
    """release(): the hold was lost since this object acquired it and someone else holds it now."""


class HoldEvent(enum.IntEnum):
    """What a holder learns of its hold after acquiring it (``on_event``)."""
    SUSPENDED = 1  #: Redis: a renewal got no answer: the hold is in doubt
    RESUMED = 2    #: a renewal succeeded again after SUSPENDED
    LOST = 3       #: the hold is gone: another may hold the lock (final for this acquisition)


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


# Calls that touch the file system, or may wait for another thread's, release the GIL.
_create = declare("sync_distributed_lock_create_with", c_int, c_char_p, c_uint, c_int, POINTER(c_void_p),
                  blocking=True)
_destroy = declare("sync_distributed_lock_destroy", None, c_void_p, blocking=True)
_path = declare("sync_distributed_lock_path", c_char_p, c_void_p)
_try_lock = declare("sync_distributed_lock_try_lock", c_int, c_void_p, blocking=True)
_lock = declare("sync_distributed_lock_lock", c_int, c_void_p, c_int64, c_int64, blocking=True)
_lock_interruptible = declare("sync_distributed_lock_lock_interruptible", c_int, c_void_p, c_int64, c_int64, blocking=True)
_token = declare("sync_distributed_lock_token", c_int, c_void_p, POINTER(c_uint64), blocking=True)
_error_message = declare("sync_distributed_lock_error_message", c_char_p)
_unlock = declare("sync_distributed_lock_unlock", c_int, c_void_p, blocking=True)
_unlock_all = declare("sync_distributed_lock_unlock_all", c_int, c_void_p, blocking=True)
_count = declare("sync_distributed_lock_count", c_int, c_void_p, blocking=True)
_break = declare("sync_distributed_lock_break", c_int, c_void_p, blocking=True)
_recover = declare("sync_distributed_lock_recover", c_int, c_void_p, blocking=True)
_holder = declare("sync_distributed_lock_holder", c_int, c_void_p, POINTER(_CHolder), blocking=True)
_is_held = declare("sync_distributed_lock_is_held", c_bool, c_void_p, blocking=True)
_EVENT_FN = CFUNCTYPE(None, c_void_p, c_int, c_void_p)
# (blocking: it waits for a running handler, which may need the GIL)
_set_event_handler = declare("sync_distributed_lock_set_event_handler", c_int, c_void_p, _EVENT_FN, c_void_p,
                             blocking=True)
_hold_state = declare("sync_distributed_lock_hold_state", c_int, c_void_p)

# sync_distributed_lock_create_with flags
_RECURSIVE, _PROCESS_OWNED, _MAKE_PARENTS, _RELEASE_ON_DESTROY = 1, 2, 4, 8

_CREATE_ERRORS = {errno.ENOENT: "its parent directory does not exist",
                  errno.ENOTDIR: "its parent is not a directory",
                  errno.EACCES: "its parent directory is not writable by this process",
                  errno.EPERM: "its parent directory is not writable by this process",
                  errno.EROFS: "its parent directory is on a read-only file system",
                  errno.EEXIST: "something that is not a lock is there (a file, a symbolic link, or a directory with other content)",
                  errno.ENAMETOOLONG: "its name is too long"}
_NEVER = 2**63 - 1


def _os_error(code: int, what: str, path: str) -> OSError:
    detail = _detail()
    if detail:  # a server's message, a missing client library: the core's reason says it all
        return OSError(code, f"{what}: {detail}")
    return OSError(code, f"{what}: {os.strerror(code)}", path)


def _detail() -> str:
    """The core's reason for this thread's last failed call, or ""."""
    return (_error_message() or b"").decode(errors="replace")


def is_url(target) -> bool:
    """Whether the target names a server (``scheme://...``) rather than a path."""
    return isinstance(target, str) and "://" in target and target.split("://", 1)[0].replace("+", "").isalpha()


def _seconds_to_ns(value: float, name: str) -> int:
    """Seconds as ns for the C calls: < 0 (and +inf) is -1, "forever"; more than C can count
    saturates at 2**63-1 ns; a positive value below 1 ns is 0."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    if value < 0 or math.isinf(value):
        return -1
    if value >= _NEVER / 1e9:
        return _NEVER
    return min(int(value * 1e9), _NEVER)


def _poll_ns(value: float) -> int:
    """poll_interval as ns: > 0 (a positive value below 1 ns is 1 ns; +inf and more than C can
    count saturate at 2**63-1 ns); 0 and less raise ValueError."""
    ns = _seconds_to_ns(value, "poll_interval")
    if value <= 0:
        raise ValueError(f"poll_interval must be > 0, not {value!r}")
    return _NEVER if ns == -1 else max(ns, 1)


# Event handlers by key (the C handler's context): one C trampoline for all, never freed, so
# that a handler that drops the last reference to its lock returns into live code.
_handlers: dict = {}
_handler_keys = itertools.count(1)


def _dispatch(_lock: int, event: int, key: int) -> None:
    handler = _handlers.get(key)
    if handler is not None:
        handler(HoldEvent(event))


_trampoline = _EVENT_FN(_dispatch)


class _Handle:
    """One libsync.so lock object; destroyed with this (which, made with _RELEASE_ON_DESTROY,
    releases a hold of this process: the core leaves a parent's hold alone in a forked child)."""
    __slots__ = ("value", "handler_key", "__weakref__")

    def __init__(self, path: Union[str, bytes, os.PathLike], flags: int, mode: int) -> None:
        self.value = None
        self.handler_key = None
        encoded = os.fsencode(path)
        if b"\0" in encoded:
            raise ValueError("the lock path contains a NUL byte")
        handle = c_void_p()
        code = _create(encoded, flags, mode, byref(handle))
        if code and is_url(path):
            detail = _detail()
            if code == errno.EINVAL:
                raise ValueError(detail)
            raise OSError(code, detail or os.strerror(code))
        if code == errno.EINVAL:
            raise ValueError(f"invalid lock path {os.fsdecode(encoded)!r}: it names no file, or is not UTF-8")
        if code:
            raise _os_error(code, f"cannot make a lock there: {_CREATE_ERRORS.get(code, 'error')}", os.fsdecode(encoded))
        self.value = handle.value

    def set_event_handler(self, handler: Optional[Callable[[HoldEvent], None]]) -> None:
        """Calls ``handler(event)`` on libsync's notifier thread (None: stops)."""
        if handler is not None and not callable(handler):
            raise TypeError(f"the event handler must be callable, not {type(handler).__name__}")
        old, self.handler_key = self.handler_key, None
        if handler is not None:
            self.handler_key = next(_handler_keys)
            _handlers[self.handler_key] = handler
            _set_event_handler(self.value, _trampoline, self.handler_key)
        else:
            _set_event_handler(self.value, _EVENT_FN(), None)  # (a NULL function pointer: none)
        _handlers.pop(old, None)

    def __del__(self) -> None:
        handle, self.value = self.value, None
        if handle is not None:
            _destroy(handle)  # (after which the handler is not running, and never called again)
        _handlers.pop(self.handler_key, None)


def _event_handler(lock, on_event: Optional[Callable]) -> Optional[Callable[[HoldEvent], None]]:
    """``on_event(lock, event)`` as the handle's handler, holding the lock weakly (the handle
    lives as long as the lock object)."""
    if on_event is None:
        return None
    if not callable(on_event):
        raise TypeError(f"on_event must be callable, not {type(on_event).__name__}")
    ref = weakref.ref(lock)

    def handler(event: HoldEvent) -> None:
        owner = ref()
        if owner is not None:
            on_event(owner, event)
    return handler


def _wait(handle: int, timeout_ns: int, poll_ns: int) -> int:
    """Acquires, waiting up to timeout_ns (< 0: forever; 0: one try); returns the C code. It
    returns at least every 50 ms, so a pending KeyboardInterrupt (or another signal handler's
    exception) is raised between the calls, also while a server waits for the lock; a wait given
    up so withdraws its request queued in a server."""
    try:
        return interruptible(_lock_interruptible, handle, deadline_ns(timeout_ns), poll_ns)
    except BaseException:
        _is_held(handle)  # gives the wait up: withdraws its request queued in a server
        raise


def _read_token(handle: int) -> Optional[int]:
    token = c_uint64()
    return token.value if _token(handle, byref(token)) == 0 else None


def _timeout(lock_file: str) -> "Timeout":
    """Timeout for lock_file, noting the core's reason when it is not just a busy lock."""
    error = Timeout(lock_file)
    detail = _detail()
    if "did not answer" in detail:
        error.add_note(detail)
    return error


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
    would-be holder: two objects for one path exclude each other, in one process or not; one
    object's threads take turns (the holder is the thread that acquired it). Not recursive."""

    def __init__(self, path: Union[str, bytes, os.PathLike], timeout: float = -1,
                 poll_interval: float = 0.05, *,
                 on_event: Optional[Callable[["DistributedLock", HoldEvent], None]] = None) -> None:
        """``path``: a path, or a postgresql:// / redis:// URL (the server is connected to now).
        ``on_event(lock, event)`` is called when this process learns that a hold acquired through
        this object was lost (HoldEvent.LOST), or (Redis) is in doubt and back (SUSPENDED,
        RESUMED): on libsync's notifier thread, one call at a time; it may call this object
        (``lost``, ``is_locked``...; the holder thread's ``release()`` ends a lost hold with
        LockLostError) and should return soon. See docs/distributed_lock.md for how soon."""
        _seconds_to_ns(timeout, "timeout")
        _poll_ns(poll_interval)
        handler = _event_handler(self, on_event)
        self._handle = _Handle(path, _RELEASE_ON_DESTROY, -1)  # as filelock: going away releases
        if handler is not None:
            self._handle.set_event_handler(handler)
        self.timeout = timeout
        self.poll_interval = poll_interval

    @property
    def lost(self) -> bool:
        """Whether the latest hold acquired through this object was lost, as far as this process
        has learned (no store access: cheap enough before each write). Reset by the next acquire."""
        return _hold_state(self._handle.value) == HoldEvent.LOST

    @property
    def suspended(self) -> bool:
        """Whether the latest hold is in doubt (Redis: a renewal got no answer); no store access."""
        return _hold_state(self._handle.value) == HoldEvent.SUSPENDED

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the caller's hold (None when it does not hold the lock): larger
        than the token of every earlier acquisition of the lock, whoever held it."""
        return _read_token(self._handle.value)

    @property
    def path(self) -> str:
        """The lock's absolute path (a URL target: the URL without its password)."""
        return os.fsdecode(_path(self._handle.value))

    lock_file = path  # filelock's name

    def try_lock(self) -> bool:
        """Acquires the lock if it is free, without blocking: True if the caller holds it now,
        False if someone else holds it."""
        code = _try_lock(self._handle.value)
        if code == errno.EDEADLK and _end_lost_hold(self):
            code = _try_lock(self._handle.value)
        if code == errno.EBUSY:
            return False
        self._check(code, "try_lock")
        return True

    def acquire(self, timeout: Optional[float] = None, poll_interval: Optional[float] = None, *,
                blocking: bool = True) -> _Acquired:
        """Acquires the lock: waits for another thread's hold through this object to end, polls
        other holders every ``poll_interval`` seconds and takes over a stale holder's lock;
        raises Timeout once ``timeout`` seconds (< 0: never) have passed. ``blocking=False``
        tries once. Ctrl-C interrupts the wait."""
        timeout = self.timeout if timeout is None else timeout
        poll = _poll_ns(self.poll_interval if poll_interval is None else poll_interval)
        timeout_ns = 0 if not blocking else _seconds_to_ns(timeout, "timeout")
        code = _wait(self._handle.value, timeout_ns, poll)
        if code == errno.EDEADLK and _end_lost_hold(self):
            code = _wait(self._handle.value, timeout_ns, poll)
        if code == errno.ETIMEDOUT:
            raise _timeout(self.path)
        self._check(code, "acquire")
        return _Acquired(self)

    def release(self) -> None:
        """Releases the lock the caller holds. Raises NotLockedError, LockBrokenError or
        LockStolenError (see the module doc)."""
        _raise_release_error(_unlock(self._handle.value), self)

    unlock = release  # NSDistributedLock's name

    def break_lock(self) -> None:
        """Removes the lock whoever holds it (NSDistributedLock's breakLock): only for a holder
        known to be dead. Prefer recover(), which only takes a provably dead holder's lock."""
        self._check(_break(self._handle.value), "break_lock")

    def recover(self) -> bool:
        """If the holder is stale (on this host, its process gone), takes the lock over
        atomically and returns True: of several processes doing so at once, exactly one does."""
        code = _recover(self._handle.value)
        if code in (errno.EBUSY, errno.ENOENT):
            return False
        self._check(code, "recover")
        return True

    @property
    def holder(self) -> Optional[Holder]:
        """Who holds the lock now (any process may ask), or None."""
        return _read_holder(self._handle.value, self.path)

    @property
    def lock_date(self) -> Optional[datetime]:
        """When the current holder acquired the lock (UTC), or None (NSDistributedLock's lockDate)."""
        holder = self.holder
        return holder.acquired if holder else None

    @property
    def is_locked(self) -> bool:
        """Whether the caller holds the lock through this object now (checked on disk: False
        once it was broken)."""
        return bool(_is_held(self._handle.value))

    def _check(self, code: int, operation: str) -> None:
        _raise_error(code, operation, self.path, "this DistributedLock object (it is not recursive)")

    def __enter__(self) -> "DistributedLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DistributedLock({self.path!r}, is_locked={self.is_locked})"


def _end_lost_hold(lock: "DistributedLock") -> bool:
    """After EDEADLK from an acquire: if the caller's hold through ``lock`` was lost meanwhile
    (the core still counts it, the store no longer has it), ends it and raises its LockLostError
    (the loss is reported once); True if it ended cleanly after all (try again), False if the
    caller does hold it."""
    handle = lock._handle.value
    if _count(handle) == 0 or _is_held(handle):
        return False
    _raise_release_error(_unlock_all(handle), lock)
    return True


def _raise_error(code: int, operation: str, path: str, through: str) -> None:
    if code == errno.EDEADLK:
        raise RuntimeError(f"{operation}: the caller already holds the lock {path!r} through {through}, "
                           "or through another object: waiting would never end")
    if code == errno.EEXIST:
        raise _os_error(code, f"{operation}: something that is not a lock is there", path)
    if code == errno.ETIMEDOUT:
        raise _timeout(path)
    if code:
        raise _os_error(code, operation, path)


def _raise_release_error(code: int, lock) -> None:
    if code == errno.EPERM:
        raise NotLockedError(f"release of the distributed lock {lock.lock_file!r}, which the caller does not hold")
    if code == errno.ESTALE:
        raise LockBrokenError(_detail() or f"the distributed lock {lock.lock_file!r} was broken while this object held it")
    if code == errno.EBUSY:
        detail = _detail()
        raise LockStolenError((detail + f"; the holder now: {lock.holder}") if detail else
                              f"the distributed lock {lock.lock_file!r} was broken while this object held it, "
                              f"and is now held by {lock.holder}")
    _raise_error(code, "release", lock.lock_file, "this object")


def _read_holder(handle: int, path: str) -> Optional[Holder]:
    h = _CHolder()
    code = _holder(handle, byref(h))
    if code == errno.ENOENT:
        return None
    _raise_error(code, "holder", path, "this object")
    return Holder(host=h.host.decode(errors="replace"), pid=h.pid, process_start=h.process_start,
                  acquired=datetime.fromtimestamp(h.acquired_ns / 1e9, tz=timezone.utc),
                  on_this_host=bool(h.flags & 1), stale=bool(h.flags & 2))


from ._filelock import (AcquireReturnProxy, AsyncAcquireReturnProxy, AsyncFileLock,  # noqa: E402 (uses the above)
                        AsyncSoftFileLock, BaseAsyncFileLock, BaseFileLock, FileLock, SoftFileLock)
