"""filelock 4's read/write lock shapes (``ReadWriteLock``, ``AsyncReadWriteLock``) over libsync's
file-system read/write lock (C ``sync_distributed_rwlock_*``): many readers or one writer across
processes and hosts, writer-preferring, a fencing token on both sides, dead readers and writers
on this host recovered. The core decides everything; this module converts names and errors.

Differences from filelock's, by design: the lock is a directory (as FileLock's here), not a
SQLite database; a read hold of one object is shared by its threads (any of them re-enters or
releases it; filelock 4 counts reads per thread); a blocked wait polls every ``poll_interval``.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pathlib
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_uint, c_uint64, c_void_p
from typing import Any, AsyncIterator, Callable, Iterator, Optional, TypeVar, Union, cast
from weakref import WeakValueDictionary

from ._common import deadline_ns, declare, interruptible
from ._distributed import (_EVENT_FN, _MAKE_PARENTS, _PROCESS_OWNED, HoldEvent, LockBrokenError, LockStolenError, Timeout,
                           _detail, _event_handler, _handler_keys, _handlers, _os_error, _poll_ns, _seconds_to_ns,
                           _trampoline, is_url)

__all__ = ["ReadWriteLock", "AsyncReadWriteLock", "SoftReadWriteLock", "AsyncSoftReadWriteLock",
           "AcquireReadWriteReturnProxy", "AsyncAcquireReadWriteReturnProxy"]

_T = TypeVar("_T")
_READ, _WRITE = 1, 2  # SYNC_DISTRIBUTED_RWLOCK_READ, _WRITE
_create = declare("sync_distributed_rwlock_create", c_int, c_char_p, c_uint, c_int, POINTER(c_void_p), blocking=True)
_destroy = declare("sync_distributed_rwlock_destroy", None, c_void_p, blocking=True)
_try_lock = declare("sync_distributed_rwlock_try_lock", c_int, c_void_p, c_int, blocking=True)
_lock_interruptible = declare("sync_distributed_rwlock_lock_interruptible", c_int, c_void_p, c_int, c_int64, c_int64,
                              blocking=True)
_cancel = declare("sync_distributed_rwlock_cancel", None, c_void_p, blocking=True)
_unlock = declare("sync_distributed_rwlock_unlock", c_int, c_void_p, blocking=True)
_unlock_all = declare("sync_distributed_rwlock_unlock_all", c_int, c_void_p, blocking=True)
_kind = declare("sync_distributed_rwlock_kind", c_int, c_void_p)
_count = declare("sync_distributed_rwlock_count", c_int, c_void_p)
_token = declare("sync_distributed_rwlock_token", c_int, c_void_p, POINTER(c_uint64))
_break = declare("sync_distributed_rwlock_break", c_int, c_void_p, blocking=True)
# (blocking: it waits for a running handler, which may need the GIL)
_set_event_handler = declare("sync_distributed_rwlock_set_event_handler", c_int, c_void_p, _EVENT_FN, c_void_p,
                             blocking=True)
_hold_state = declare("sync_distributed_rwlock_hold_state", c_int, c_void_p)
_path = declare("sync_distributed_rwlock_path", c_char_p, c_void_p)


class _RWHandle:
    """One core read/write lock object, destroyed with this (which releases a hold of this process)."""
    __slots__ = ("value", "handler_key", "__weakref__")

    def __init__(self, path: str, flags: int) -> None:
        self.value: Optional[int] = None  # the C object (None: NULL)
        self.handler_key: Optional[int] = None
        encoded = os.fsencode(path)
        if b"\0" in encoded:
            raise ValueError("embedded null byte")
        handle = c_void_p()
        code = _create(encoded, flags, -1, byref(handle))
        if code == errno.EINVAL:
            raise ValueError(_detail() or f"invalid lock path {path!r}")
        if code:
            raise _os_error(code, "cannot make a read/write lock there", path)
        self.value = handle.value

    def set_event_handler(self, handler: Callable[[HoldEvent], None]) -> None:
        """Calls ``handler(event)`` on libsync's notifier thread (a server's lock only)."""
        key = next(_handler_keys)
        _handlers[key] = handler
        code = _set_event_handler(self.value, _trampoline, key)
        if code:
            _handlers.pop(key, None)
            if code == errno.ENOTSUP:
                raise ValueError(f"on_event is for a server's read/write lock: {_detail()}")
            raise _os_error(code, "set the event handler", "")
        self.handler_key = key

    def __del__(self) -> None:
        handle, self.value = self.value, None
        if handle is not None:
            _destroy(handle)  # (after which the handler is not running, and never called again)
        if self.handler_key is not None:
            _handlers.pop(self.handler_key, None)


def _singleton_key(lock_file: Union[str, os.PathLike[str]]) -> Union[pathlib.Path, str]:
    """A URL as given (a server's lock), a path resolved."""
    return lock_file if is_url(lock_file) else pathlib.Path(lock_file).resolve()


class _ReadWriteLockMeta(type):
    """is_singleton=True (the default, as filelock's) returns the live instance for the resolved path."""

    _instances: WeakValueDictionary[Union[pathlib.Path, str], ReadWriteLock]  # (each class's, set by ReadWriteLock)
    _instances_lock: threading.RLock

    def __call__(cls, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, *, blocking: bool = True,
                 is_singleton: bool = True, **kwargs: Any) -> ReadWriteLock:
        made: ReadWriteLock  # (type.__call__'s result is not typed)
        if not is_singleton:
            made = super().__call__(lock_file, timeout, blocking=blocking, is_singleton=False, **kwargs)
            return made
        key = _singleton_key(lock_file)
        with cls._instances_lock:
            instance = cls._instances.get(key)
            if instance is None:
                made = super().__call__(lock_file, timeout, blocking=blocking, is_singleton=True, **kwargs)
                cls._instances[key] = made
                return made
        if instance.timeout != timeout or instance.blocking != blocking:
            raise ValueError(f"Singleton lock created with timeout={instance.timeout}, blocking={instance.blocking},"
                             f" cannot be changed to timeout={timeout}, blocking={blocking}")
        return instance


class AcquireReadWriteReturnProxy:
    """What acquire_read()/acquire_write() return: ``with lock.acquire_read():`` releases at the end."""

    def __init__(self, lock: "ReadWriteLock") -> None:
        self.lock = lock

    def __enter__(self) -> "ReadWriteLock":
        return self.lock

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


class ReadWriteLock(metaclass=_ReadWriteLockMeta):
    """filelock's ReadWriteLock: shared read holds, an exclusive write hold, across processes.

    Re-entrant within one kind (each acquisition needs its release); asking for the other kind
    while this object holds raises RuntimeError (no upgrade, no downgrade); the write hold is the
    thread's that took it. Waiting writers stop new readers."""

    _instances: WeakValueDictionary[Union[pathlib.Path, str], ReadWriteLock] = WeakValueDictionary()
    _instances_lock = threading.RLock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances, cls._instances_lock = WeakValueDictionary(), threading.RLock()

    def __init__(self, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, *, blocking: bool = True,
                 is_singleton: bool = True, poll_interval: float = 0.05, _process_owned: bool = False,
                 on_event: Optional[Callable[["ReadWriteLock", HoldEvent], object]] = None) -> None:
        """``lock_file``: the lock's path (its missing parents are made), or a ``postgresql://``,
        ``redis://``, ``etcd://`` or ``etcds://`` URL (libsync's: the lock on that server, connected now);
        ``timeout``: the acquires' default, seconds (< 0: forever); ``blocking``: their default;
        ``is_singleton``: one object per resolved path (or URL) and class; ``poll_interval``:
        seconds between tries while others hold it (libsync's); ``on_event(lock, event)``
        (libsync's, a server's lock only): called when this process learns that a hold, read
        or write, was lost (HoldEvent.LOST) or is in doubt and back (SUSPENDED, RESUMED), as
        DistributedLock's."""
        self.lock_file = os.fspath(lock_file)
        _seconds_to_ns(timeout, "timeout")
        self.timeout, self.blocking = timeout, bool(blocking)
        if not isinstance(poll_interval, bool) and isinstance(poll_interval, (int, float)) and poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        self._poll = _poll_ns(poll_interval)
        flags = _MAKE_PARENTS | (_PROCESS_OWNED if _process_owned else 0)
        handler = _event_handler(self, on_event)
        self._core: Optional[_RWHandle] = _RWHandle(self.lock_file, flags)
        if is_url(self.lock_file):  # a server's lock is shown without its password
            self.lock_file = os.fsdecode(cast(bytes, _path(self._core.value)))  # (NULL only for a NULL object)
        if handler is not None:
            self._core.set_event_handler(handler)

    @classmethod
    def get_lock(cls, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, *,
                 blocking: bool = True) -> "ReadWriteLock":
        """The singleton lock for this path."""
        return cls(lock_file, timeout, blocking=blocking)

    def _handle(self) -> Optional[int]:
        if self._core is None:
            raise RuntimeError(f"the {type(self).__name__} on {self.lock_file} has been closed")
        return self._core.value

    def _acquire(self, kind: int, timeout: Optional[float], blocking: Optional[bool]) -> None:
        timeout = self.timeout if timeout is None else timeout
        blocking = self.blocking if blocking is None else blocking
        handle = self._handle()
        if not blocking:
            code = _try_lock(handle, kind)
            code = errno.ETIMEDOUT if code == errno.EBUSY else code
        else:
            try:
                code = interruptible(_lock_interruptible, handle, kind, deadline_ns(_seconds_to_ns(timeout, "timeout")),
                                     self._poll)
            except BaseException:
                _cancel(handle)  # a writer's claim kept across the interrupted calls goes
                raise
        self._check(code, kind)

    def _check(self, code: int, kind: int, detail: Optional[str] = None) -> None:
        """Raises for a failed acquire's code; ``detail``: the core's reason (default: this thread's)."""
        if code == 0:
            return
        if code == errno.ETIMEDOUT:
            raise Timeout(self.lock_file)
        if code == errno.EDEADLK:
            mode = "read" if kind == _READ else "write"
            raise RuntimeError(f"Cannot acquire {mode} lock on {self.lock_file} (lock id: {id(self)}): "
                               f"{_detail() if detail is None else detail}")
        if code == errno.EAGAIN:
            raise RuntimeError(f"too many acquisitions of the lock on {self.lock_file}")
        raise _os_error(code, "acquire", self.lock_file)

    def acquire_read(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> AcquireReadWriteReturnProxy:
        """Acquires a shared read hold (again, if this object holds one: counted). Raises Timeout
        after ``timeout`` seconds, RuntimeError if this object holds the write lock."""
        self._acquire(_READ, timeout, blocking)
        return AcquireReadWriteReturnProxy(self)

    def acquire_write(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> AcquireReadWriteReturnProxy:
        """Acquires the exclusive write hold (again, from the thread that holds it: counted).
        Raises Timeout after ``timeout`` seconds, RuntimeError if this object holds a read lock
        or another of its threads holds the write lock."""
        self._acquire(_WRITE, timeout, blocking)
        return AcquireReadWriteReturnProxy(self)

    @contextlib.contextmanager
    def read_lock(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> Iterator[None]:
        """A shared read hold for the ``with`` block."""
        self.acquire_read(timeout, blocking=blocking)
        try:
            yield
        finally:
            self.release()

    @contextlib.contextmanager
    def write_lock(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> Iterator[None]:
        """The exclusive write hold for the ``with`` block."""
        self.acquire_write(timeout, blocking=blocking)
        try:
            yield
        finally:
            self.release()

    def release(self, *, force: bool = False) -> None:
        """Ends one acquisition (``force``: all); the last releases the lock. RuntimeError if the
        caller holds nothing (unless ``force``); LockBrokenError/LockStolenError if the lock was
        broken while held (it is released)."""
        if self._core is None:
            return
        code = (_unlock_all if force else _unlock)(self._handle())
        if code == errno.EPERM:
            if force:
                return
            raise RuntimeError(f"Cannot release a lock on {self.lock_file} (lock id: {id(self)}) that is not held "
                               "by this thread")
        if code == errno.ESTALE:
            raise LockBrokenError(f"the read/write lock {self.lock_file!r} was broken while this object held it")
        if code == errno.EBUSY:
            raise LockStolenError(f"the read/write lock {self.lock_file!r} was broken while this object held it, "
                                  "and another holds it now")
        if code:
            raise _os_error(code, "release", self.lock_file)

    def close(self) -> None:
        """Releases a hold of this object and frees it; later acquires raise RuntimeError."""
        core, self._core = self._core, None
        if core is not None and _count(core.value):
            _unlock_all(core.value)

    @property
    def is_locked(self) -> bool:
        """Whether this object holds the lock (either kind; libsync's)."""
        return self._core is not None and _count(self._core.value) > 0

    @property
    def mode(self) -> Optional[str]:
        """"read", "write", or None: what this object holds (libsync's)."""
        kind = 0 if self._core is None else _kind(self._core.value)
        return {_READ: "read", _WRITE: "write"}.get(kind)

    @property
    def lost(self) -> bool:
        """Whether the latest hold of this object was lost, as far as this process has learned
        (libsync's; a server's lock: no store access; always False for a file-system lock)."""
        return self._core is not None and _hold_state(self._core.value) == HoldEvent.LOST

    @property
    def token(self) -> Optional[int]:
        """The fencing token of this object's hold (libsync's; None when not held): larger than
        the token of every hold, read or write, that began before it."""
        if self._core is None:
            return None
        value = c_uint64()
        return value.value if _token(self._core.value, byref(value)) == 0 else None

    def break_lock(self) -> None:
        """Removes the lock whoever holds it (libsync's: a holder on another host that died)."""
        code = _break(self._handle())
        if code:
            raise _os_error(code, "break", self.lock_file)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.lock_file!r} mode={self.mode} at {id(self):#x}>"


class AsyncAcquireReadWriteReturnProxy:
    """What the async acquires return: ``async with await lock.acquire_read():``."""

    def __init__(self, lock: "AsyncReadWriteLock") -> None:
        self.lock = lock

    async def __aenter__(self) -> "AsyncReadWriteLock":
        return self.lock

    async def __aexit__(self, *exc: Any) -> None:
        await self.lock.release()


def _with_detail(function: Callable[..., int], *args: Any) -> tuple[int, str]:
    """Calls a C function in an executor thread: (its code, the core's reason recorded on that thread)."""
    code = function(*args)
    return code, (_detail() if code else "")


def _give_back(handle: Optional[int], slice_done: asyncio.Future[tuple[int, str]]) -> None:
    """Undoes an abandoned wait's last slice: its hold if it acquired, else its writer's claim."""
    if not slice_done.cancelled() and slice_done.exception() is None and slice_done.result()[0] == 0:
        _unlock(handle)
    else:
        _cancel(handle)


class _AsyncBackend(ReadWriteLock):
    """The process-owned core object behind AsyncReadWriteLock (its own singletons)."""


class AsyncReadWriteLock:
    """filelock's AsyncReadWriteLock: ReadWriteLock's holds for asyncio. The core's waits run in
    ``executor`` (None: a worker of the object's own, shut down by ``close()`` or when the object
    goes, as filelock's), in slices of at most 50 ms, so waiting never blocks the event loop. The
    object holds for the process: its tasks share its hold and re-enter it, so tasks that must
    exclude each other use objects of their own (``is_singleton=False``). A waiting writer keeps
    its claim between the slices, so new readers wait behind it."""

    _owns_executor = True  # (filelock's AsyncSoftReadWriteLock uses the loop's default executor instead)

    def __init__(self, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, *, blocking: bool = True,
                 is_singleton: bool = True, loop: Optional[asyncio.AbstractEventLoop] = None,
                 executor: Optional[Executor] = None, poll_interval: float = 0.05) -> None:
        self._lock = _AsyncBackend(lock_file, timeout, blocking=blocking, is_singleton=is_singleton,
                                   poll_interval=poll_interval, _process_owned=True)
        self._owned_executor: Optional[ThreadPoolExecutor] = None
        if executor is None and self._owns_executor:  # as filelock's: a worker, shut down by close() or when the object goes
            executor = self._owned_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="libsync-rwlock")
        self._loop, self._executor, self._poll_interval = loop, executor, poll_interval

    lock_file = property(lambda self: self._lock.lock_file, doc="The lock's path.")
    timeout = property(lambda self: self._lock.timeout, doc="The acquires' default timeout, seconds.")
    blocking = property(lambda self: self._lock.blocking, doc="The acquires' default of ``blocking``.")
    loop = property(lambda self: self._loop, doc="The event loop given, if any.")
    executor = property(lambda self: self._executor, doc="The executor of the waits (by default the object's own worker).")
    token = property(lambda self: self._lock.token, doc="The fencing token of the hold (libsync's).")
    mode = property(lambda self: self._lock.mode, doc='"read", "write", or None (libsync\'s).')

    async def _call(self, function: Callable[..., _T], *args: Any) -> _T:
        loop = self._loop or asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, function, *args)

    async def _acquire(self, kind: int, timeout: Optional[float], blocking: Optional[bool]) -> None:
        timeout = self._lock.timeout if timeout is None else timeout
        blocking = self._lock.blocking if blocking is None else blocking
        handle = self._lock._handle()
        if not blocking:
            code, detail = await self._call(_with_detail, _try_lock, handle, kind)
            self._lock._check(errno.ETIMEDOUT if code == errno.EBUSY else code, kind, detail)
            return
        deadline = deadline_ns(_seconds_to_ns(timeout, "timeout"))
        loop = self._loop or asyncio.get_running_loop()
        code, detail = errno.EINTR, ""
        while code == errno.EINTR:  # the core's wait in slices of at most 50 ms, a writer's claim kept between them
            future = loop.run_in_executor(self._executor, _with_detail, _lock_interruptible, handle, kind, deadline,
                                          self._lock._poll)
            try:
                code, detail = await asyncio.shield(future)
            except BaseException:  # cancelled: once the slice ends, what it got is given back
                future.add_done_callback(lambda done: loop.run_in_executor(self._executor, _give_back, handle, done))
                raise
        self._lock._check(code, kind, detail)

    async def acquire_read(self, timeout: Optional[float] = None, *,
                           blocking: Optional[bool] = None) -> AsyncAcquireReadWriteReturnProxy:
        """Acquires a shared read hold (see ReadWriteLock.acquire_read)."""
        await self._acquire(_READ, timeout, blocking)
        return AsyncAcquireReadWriteReturnProxy(self)

    async def acquire_write(self, timeout: Optional[float] = None, *,
                            blocking: Optional[bool] = None) -> AsyncAcquireReadWriteReturnProxy:
        """Acquires the exclusive write hold (see ReadWriteLock.acquire_write)."""
        await self._acquire(_WRITE, timeout, blocking)
        return AsyncAcquireReadWriteReturnProxy(self)

    @contextlib.asynccontextmanager
    async def read_lock(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> AsyncIterator[None]:
        """A shared read hold for the ``async with`` block."""
        await self.acquire_read(timeout, blocking=blocking)
        try:
            yield
        finally:
            await self.release()

    @contextlib.asynccontextmanager
    async def write_lock(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> AsyncIterator[None]:
        """The exclusive write hold for the ``async with`` block."""
        await self.acquire_write(timeout, blocking=blocking)
        try:
            yield
        finally:
            await self.release()

    async def release(self, *, force: bool = False) -> None:
        """Ends one acquisition (``force``: all); see ReadWriteLock.release."""
        await self._call(lambda: self._lock.release(force=force))

    async def close(self) -> None:
        """Releases and frees the lock (see ReadWriteLock.close), and shuts its own worker down."""
        await self._call(self._lock.close)
        if self._owned_executor is not None:
            self._owned_executor.shutdown(wait=True)

    def __del__(self) -> None:
        owned = self.__dict__.get("_owned_executor")
        if owned is not None:
            owned.shutdown(wait=False)


def _soft_settings(heartbeat_interval: float, stale_threshold: Optional[float],
                   on_compromise: Optional[Callable[..., object]]) -> None:
    """filelock's checks of SoftReadWriteLock's heartbeat settings; on_compromise is refused (the
    read/write lock has no loss notification yet)."""
    if isinstance(heartbeat_interval, bool) or not isinstance(heartbeat_interval, (int, float)) \
            or not 0 < heartbeat_interval < float("inf"):
        raise ValueError(f"heartbeat_interval must be positive and finite, got {heartbeat_interval!r}")
    if stale_threshold is not None and (isinstance(stale_threshold, bool) or not isinstance(stale_threshold, (int, float))
                                        or not heartbeat_interval < stale_threshold < float("inf")):
        raise ValueError(f"stale_threshold must exceed heartbeat_interval and be finite, got {stale_threshold!r}")
    if on_compromise is not None:
        raise ValueError("on_compromise is not supported by libsync's read/write lock: it has no loss notification "
                         "yet (a live holder's hold is never evicted; a dead one's on this host is recovered)")


class SoftReadWriteLock(ReadWriteLock):
    """filelock's SoftReadWriteLock: the same lock as ReadWriteLock here (libsync's is NFS-safe and
    recovers dead holders already, with no heartbeat to run). ``heartbeat_interval`` and
    ``stale_threshold`` are checked as filelock checks them and have nothing to act on;
    ``on_compromise`` is refused."""

    def __init__(self, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, *, blocking: bool = True,
                 is_singleton: bool = True, heartbeat_interval: float = 30.0, stale_threshold: Optional[float] = None,
                 poll_interval: float = 0.25, on_compromise: Optional[Callable[..., object]] = None) -> None:
        _soft_settings(heartbeat_interval, stale_threshold, on_compromise)
        super().__init__(lock_file, timeout, blocking=blocking, is_singleton=is_singleton, poll_interval=poll_interval)
        self.heartbeat_interval = float(heartbeat_interval)
        self.stale_threshold = 3 * self.heartbeat_interval if stale_threshold is None else float(stale_threshold)
        self.poll_interval = poll_interval


class AsyncSoftReadWriteLock(AsyncReadWriteLock):
    """filelock's AsyncSoftReadWriteLock: AsyncReadWriteLock (see SoftReadWriteLock); its waits run
    in ``executor`` or, by default, the loop's default executor, as filelock's."""
    _owns_executor = False

    def __init__(self, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, *, blocking: bool = True,
                 is_singleton: bool = True, heartbeat_interval: float = 30.0, stale_threshold: Optional[float] = None,
                 poll_interval: float = 0.25, on_compromise: Optional[Callable[..., object]] = None,
                 loop: Optional[asyncio.AbstractEventLoop] = None, executor: Optional[Executor] = None) -> None:
        _soft_settings(heartbeat_interval, stale_threshold, on_compromise)
        super().__init__(lock_file, timeout, blocking=blocking, is_singleton=is_singleton, loop=loop, executor=executor,
                         poll_interval=poll_interval)
