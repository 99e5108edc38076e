"""The distributed lock's shared parts: its C functions, errors, events and helpers, used by
distributed_lock (DistributedLock) and _filelock (filelock's interface), which import this
module and not each other."""
from __future__ import annotations

import ctypes
import enum
import errno
import itertools
import math
import os
import sys
import weakref
from ctypes import (CFUNCTYPE, POINTER, byref, c_bool, c_char, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint,
                    c_uint32, c_uint64, c_void_p)
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, SupportsIndex, TypeVar, Union

from . import _aio
from ._common import declare, deadline_ns, interruptible

if TYPE_CHECKING:
    from typing import TypeGuard  # (Python 3.10 on: annotations only)

# A lock's path as the constructors take it (os.fsencode's argument).
LockPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_Lock = TypeVar("_Lock")




class Timeout(TimeoutError):
    """The lock could not be acquired within the timeout (filelock's Timeout: same message for
    a path, ``lock_file``, and it survives pickling). A server lock's message names it by its
    URL (without the password): "The distributed lock 'redis://...' could not be acquired.". A copy
    (pickle, copy) keeps its notes (``add_note``) and any attribute set on it."""

    def __init__(self, lock_file: str) -> None:
        super().__init__(lock_file)
        self._lock_file = lock_file

    def __reduce__(self) -> tuple[type[Timeout], tuple[str]]:
        return self.__class__, (self._lock_file,)

    # (what pickle and copy call: notes and attributes set on it come along)
    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        state = {name: value for name, value in self.__dict__.items() if name != "_lock_file"}
        return (*self.__reduce__(), state) if state else self.__reduce__()

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
_CANCELLED_FN = CFUNCTYPE(c_bool, c_void_p)
_lock_cancellable = declare("sync_distributed_lock_lock_cancellable", c_int, c_void_p, c_int64, c_int64, _CANCELLED_FN,
                            c_void_p, blocking=True)
_is_url = declare("sync_distributed_lock_is_url", c_bool, c_char_p)
# (blocking: it reads the file system)
_canonical = declare("sync_distributed_lock_canonical", c_int, c_char_p, c_char_p, c_size_t, POINTER(c_size_t),
                     blocking=True)
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
# The async forms (sync/async.h, LIBSYNC_1.7_DISTASYNC): held for an owner (an asyncio task's
# identity, or a thread's kernel id for filelock's thread-local objects), awaited through _aio.
_lock_async = declare("sync_distributed_lock_lock_async_owner", c_int, c_void_p, c_int64, c_int64, c_int, c_void_p,
                      c_void_p, c_size_t, POINTER(c_void_p), blocking=True)
_unlock_async = declare("sync_distributed_lock_unlock_async", c_int, c_void_p, c_size_t, blocking=True)
_unlock_all_async = declare("sync_distributed_lock_unlock_all_async", c_int, c_void_p, c_size_t, blocking=True)
_count_async = declare("sync_distributed_lock_count_async", c_int, c_void_p, c_size_t, blocking=True)
_is_held_async = declare("sync_distributed_lock_is_held_async", c_bool, c_void_p, c_size_t, blocking=True)
_token_async = declare("sync_distributed_lock_token_async", c_int, c_void_p, c_size_t, POINTER(c_uint64),
                       blocking=True)

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


def is_url(target: object) -> TypeGuard[str]:
    """Whether the target names a server (``scheme://...``) rather than a path: the core's rule
    (sync_distributed_lock_is_url; the scheme is ASCII letters and ``+``)."""
    return isinstance(target, str) and bool(_is_url(os.fsencode(target)))


def canonical(target: Union[str, os.PathLike[str]]) -> str:
    """One key for the spellings of one lock: the core's (sync_distributed_lock_canonical: a path
    absolute, its parent resolved as far as it exists; a URL as given). A path that names no
    lock file (empty, ".", a NUL byte...) is its own key: using it raises its error."""
    text = os.fspath(target)
    encoded = os.fsencode(text)
    if b"\0" in encoded:
        return os.fsdecode(text)
    length = c_size_t()
    buffer = ctypes.create_string_buffer(4096)
    code = _canonical(encoded, buffer, len(buffer), byref(length))
    if code == errno.ERANGE:
        buffer = ctypes.create_string_buffer(length.value + 1)
        code = _canonical(encoded, buffer, len(buffer), byref(length))
    return os.fsdecode(buffer.value) if code == 0 else os.fsdecode(text)


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
_handlers: dict[int, Callable[[HoldEvent], None]] = {}
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

    def __init__(self, path: LockPath, flags: int, mode: int) -> None:
        self.value: Optional[int] = None  # the C object (None: NULL, which every C function takes)
        self.handler_key: Optional[int] = None
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
        if old is not None:
            _handlers.pop(old, None)

    def __del__(self) -> None:
        handle, self.value = self.value, None
        if handle is not None:
            _destroy(handle)  # (after which the handler is not running, and never called again)
        if self.handler_key is not None:
            _handlers.pop(self.handler_key, None)


def _event_handler(lock: _Lock, on_event: Optional[Callable[[_Lock, HoldEvent], object]]
                   ) -> Optional[Callable[[HoldEvent], None]]:
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


def _wait(handle: Optional[int], timeout_ns: int, poll_ns: int, cancel_check: Optional[Callable[[], bool]] = None) -> int:
    """Acquires, waiting up to timeout_ns (< 0: forever; 0: one try); returns the C code. It
    returns at least every 50 ms, so a pending KeyboardInterrupt (or another signal handler's
    exception) is raised between the calls, also while a server waits for the lock; a wait given
    up so withdraws its request queued in a server. ``cancel_check()`` (if given) is asked by the
    core's wait after each try that finds the lock held: True ends it with ECANCELED; an
    exception it raises ends it too, and is raised here."""
    function: Callable[..., int] = _lock_interruptible
    extra: tuple[object, ...] = ()
    raised: list[BaseException] = []  # what cancel_check raised
    if cancel_check is not None:
        def cancelled(_context: Optional[int]) -> bool:
            if not raised:
                try:
                    return bool(cancel_check())
                except BaseException as error:  # (a ctypes callback cannot raise: carried out)
                    raised.append(error)
            return True
        function, extra = _lock_cancellable, (_CANCELLED_FN(cancelled), None)
    try:
        code = interruptible(function, handle, deadline_ns(timeout_ns), poll_ns, *extra)
    except BaseException:
        _is_held(handle)  # gives the wait up: withdraws its request queued in a server
        raise
    if raised:
        raise raised[0]
    return code


async def _wait_async(handle: Optional[int], timeout_ns: int, poll_ns: int, owner: int,
                      pending: Optional[Callable[[], object]] = None) -> int:
    """Acquires for ``owner`` from an asyncio task, the task suspended (not the thread, not the
    loop) while the core waits (sync_distributed_lock_lock_async_owner): up to timeout_ns (< 0:
    forever; 0: one try); returns the C code. ``pending()`` is called if it must wait.
    Cancelled, the acquire is withdrawn, and a grant that raced the cancellation is released
    (_aio.acquire)."""
    limit = deadline_ns(timeout_ns)

    def start(fd: int, ref: Any) -> int:
        code = _lock_async(handle, limit, poll_ns, fd, None, None, owner, ref)
        if code == errno.EINPROGRESS and pending is not None:
            pending()
        return code
    code, _ = await _aio.acquire(start, lambda _ref: _unlock_async(handle, owner))
    return code


def _read_token(handle: Optional[int], owner: int = 0) -> Optional[int]:
    """The token of the calling thread's hold, or of ``owner``'s (nonzero), or None."""
    token = c_uint64()
    code = _token_async(handle, owner, byref(token)) if owner else _token(handle, byref(token))
    return token.value if code == 0 else None


def _timeout(lock_file: str) -> "Timeout":
    """Timeout for lock_file, noting the core's reason when it is not just a busy lock."""
    error = Timeout(lock_file)
    detail = _detail()
    if "did not answer" in detail:
        if sys.version_info >= (3, 11):  # (no notes before)
            error.add_note(detail)
    return error




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


class _Releasable(Protocol):
    """What _raise_release_error reads of the lock (DistributedLock, filelock's classes)."""
    @property
    def lock_file(self) -> str: ...
    @property
    def holder(self) -> Optional[Holder]: ...


def _raise_release_error(code: int, lock: _Releasable) -> None:
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


def _read_holder(handle: Optional[int], path: str) -> Optional[Holder]:
    h = _CHolder()
    code = _holder(handle, byref(h))
    if code == errno.ENOENT:
        return None
    _raise_error(code, "holder", path, "this object")
    return Holder(host=h.host.decode(errors="replace"), pid=h.pid, process_start=h.process_start,
                  acquired=datetime.fromtimestamp(h.acquired_ns / 1e9, tz=timezone.utc),
                  on_this_host=bool(h.flags & 1), stale=bool(h.flags & 2))


# The public classes are distributed_lock's (reprs, tracebacks and pickles name that module).
for _public in (Timeout, NotLockedError, LockLostError, LockBrokenError, LockStolenError, HoldEvent, Holder):
    _public.__module__ = "libsync.distributed_lock"
