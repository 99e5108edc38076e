"""filelock's interface over libsync's distributed lock (a path, or a postgresql:// or redis://
URL: the server is connected to when the object is made): replacing
``from filelock import FileLock, SoftFileLock, Timeout`` (and ``AsyncFileLock``) with
``from libsync.distributed_lock import ...`` keeps a filelock user's program working, while the
lock becomes NFS-safe and a dead holder's lock is recovered.

As filelock's: re-entrant (``lock_counter``), ``is_locked``, ``release(force=True)``,
``lock_file``, ``timeout`` / ``blocking`` / ``poll_interval`` (read/write), ``mode``,
``thread_local`` (default True: each thread holds for itself, and another thread of the same
object waits; False: the process holds, and any of its threads re-enters), ``is_singleton``,
use as a decorator and as a context manager (``with lock.acquire(timeout=1):``), missing parent
directories made, a relative path resolved at each new acquisition (a hold is released where
it was taken), filelock's Timeout and its messages, debug logging to the "filelock" logger,
a finalizer that releases. The re-entrancy, the waiting of one object's threads and the
deadlock check (RuntimeError "Deadlock" instead of waiting forever for oneself) are the core's.

Differences, by design: the lock is a directory (NFS-safe), not a file, so nothing can be
written into it and ``mode``'s read bits add search bits (the empty lock file filelock's
FileLock leaves behind is taken over once nobody holds a flock on it); ``release()`` raises LockBrokenError
if the lock was broken while held (filelock cannot tell); a holder that died on this host is
taken over, never waited for.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import operator
import os
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, TypeVar, Union, cast
import weakref
from weakref import WeakValueDictionary

from . import _aio
from ._distributed import (_MAKE_PARENTS, _PROCESS_OWNED, _RECURSIVE, _RELEASE_ON_DESTROY, Holder, HoldEvent,
                               Timeout, _count, _event_handler, _Handle, _hold_state, _is_held, _lock, _path, _poll_ns, _raise_error, _raise_release_error,
                               _read_holder, _read_token, _seconds_to_ns, _timeout, _unlock, _unlock_all, _wait, _wait_async,
                               canonical as _canonical, is_url)

if TYPE_CHECKING:
    from concurrent.futures import Executor
    from types import TracebackType

_T = TypeVar("_T")
_L = TypeVar("_L", bound="BaseFileLock")  # (a lock's own class)

__all__ = ["BaseFileLock", "FileLock", "SoftFileLock", "BaseAsyncFileLock", "AsyncFileLock", "AsyncSoftFileLock",
           "AcquireReturnProxy", "AsyncAcquireReturnProxy"]

_LOGGER = logging.getLogger("filelock")  # filelock's, so that a user's logging configuration applies
_UNSET_MODE = -1
_REMOVE_ON_RELEASE = 16  # sync_distributed_lock_create_with: release removes the empty lock directory
_TAKE_OVER_FILE = 32  # ... and the plain file filelock's FileLock leaves behind is taken over, if nobody holds it
_FAR = 2**62  # ns: an async wait's distant deadline (about 146 years)
_singletons_lock = threading.RLock()
# (the C RLock's _at_fork_reinit, which threading uses alike, is not in typeshed's stubs)
os.register_at_fork(after_in_child=_singletons_lock._at_fork_reinit)  # type: ignore[attr-defined]


class _Settings:
    """A lock's defaults; per thread (each thread starts from the constructor's) when thread_local."""

    def __init__(self, timeout: float, blocking: bool, poll_interval: float) -> None:
        self.timeout, self.blocking, self.poll_interval = timeout, blocking, poll_interval


class _ThreadSettings(_Settings, threading.local):
    pass


class _FileLockMeta(type):
    """is_singleton=True returns the live instance for the same canonical path (per class)."""

    _instances: WeakValueDictionary[str, BaseFileLock]  # (each class's, set by BaseFileLock)

    def __call__(cls, lock_file: Union[str, os.PathLike[str]], *args: Any, **kwargs: Any) -> BaseFileLock:
        made: BaseFileLock  # (type.__call__'s result is not typed)
        if not kwargs.get("is_singleton", False):
            made = super().__call__(lock_file, *args, **kwargs)
            return made
        key = _canonical(lock_file)
        with _singletons_lock:
            instance = cls._instances.get(key)
            if instance is None:
                made = super().__call__(lock_file, *args, **kwargs)
                cls._instances[key] = made
                return made
        passed = dict(zip(("timeout", "mode", "thread_local"), args), **kwargs)
        current = {"timeout": instance.timeout, "mode": instance._mode, "thread_local": instance.is_thread_local(),
                   "blocking": instance.blocking, "poll_interval": instance.poll_interval,
                   "context_error_policy": instance.context_error_policy,
                   "close_error_policy": instance.close_error_policy, "fallback_to_soft": instance.fallback_to_soft,
                   "preserve_lock_file": instance.preserve_lock_file}
        differing = {name: (value, current[name]) for name, value in passed.items()
                     if name in current and value != current[name]}
        if differing:
            raise ValueError("Singleton lock instances cannot be initialized with differing arguments\n"
                             "Non-matching arguments: " + "".join(
                                 f"\n\t{name} (existing lock has {has} but {value} was passed)"
                                 for name, (value, has) in differing.items()))
        return instance


def _read_only(attribute: str, doc: str) -> property:
    """A property that reads `attribute`."""
    return property(operator.attrgetter(attribute), doc=doc)


class BaseFileLock(contextlib.ContextDecorator, metaclass=_FileLockMeta):
    """filelock's lock object (see the module doc), over libsync's distributed lock."""

    _instances: WeakValueDictionary[str, BaseFileLock] = WeakValueDictionary()
    _extra_flags = 0
    _deadlock_holder = "FileLock instance in this thread"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances = WeakValueDictionary()

    def __init__(self, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, mode: int = _UNSET_MODE,
                 thread_local: bool = True, *, blocking: bool = True, is_singleton: bool = False,
                 poll_interval: float = 0.05, lifetime: Optional[float] = None,
                 context_error_policy: str = "chain", close_error_policy: str = "default",
                 fallback_to_soft: bool = True, preserve_lock_file: bool = False,
                 on_acquired: Optional[Callable[[int], None]] = None,
                 on_event: Optional[Callable[["BaseFileLock", HoldEvent], None]] = None) -> None:
        """``lock_file``: the lock's path (missing parent directories are made at the first
        acquire); ``timeout``: acquire's default, seconds (< 0: forever, 0: one try);
        ``mode``: the lock's permission bits (default: the umask decides); ``thread_local``:
        each thread holds the lock for itself (True) or the process does (False);
        ``blocking``: acquire's default; ``is_singleton``: one object per path and class;
        ``poll_interval``: acquire's default, seconds between tries while another holds it;
        ``context_error_policy``: "chain" (a failed release on leaving ``with`` propagates, the
        body's error as its context) or "group" (both, in a BaseExceptionGroup).
        filelock's descriptor options have nothing to act on here (the lock is a directory):
        ``close_error_policy`` and ``fallback_to_soft`` are accepted and checked;
        ``preserve_lock_file=True`` is what FileLock does anyway (SoftFileLock refuses it, as
        filelock's); ``on_acquired`` (a descriptor hook) is refused; so is ``lifetime`` other than None
        (ValueError: a dead holder's lock is recovered; a live holder's is never expired).
        ``on_event(lock, event)`` (libsync's) is told when a hold is lost, as DistributedLock's."""
        if context_error_policy not in ("chain", "group"):
            raise ValueError(f"context_error_policy must be 'chain' or 'group', not {context_error_policy!r}")
        if close_error_policy not in ("default", "raise", "suppress"):
            raise ValueError(f"close_error_policy must be 'default', 'raise' or 'suppress', not {close_error_policy!r}")
        if preserve_lock_file and self._extra_flags & _REMOVE_ON_RELEASE:
            raise ValueError(f"{type(self).__name__} removes its lock on release: preserve_lock_file=True is not supported")
        if on_acquired is not None:
            raise TypeError(f"{type(self).__name__} has no lock file descriptor to lend: on_acquired is not supported")
        if lifetime is not None:
            raise ValueError(f"lifetime is not supported (lifetime={lifetime!r}): libsync never expires a live "
                             "holder's lock, so two processes never both hold it; a dead holder's lock is "
                             "recovered at once. Leave lifetime unset.")
        self._on_event = _event_handler(self, on_event)
        self._context_error_policy, self._close_error_policy = context_error_policy, close_error_policy
        self._fallback_to_soft, self._preserve_lock_file = bool(fallback_to_soft), bool(preserve_lock_file)
        self._lock_file = os.fspath(lock_file)
        self._cores: dict[str, _Handle] = {}  # the core objects: "" for an absolute path or a URL, else by working directory
        self._relative = not is_url(self._lock_file) and not os.path.isabs(self._lock_file)
        if not isinstance(mode, int) or not (mode == _UNSET_MODE or 0 <= mode <= 0o777):
            raise ValueError(f"mode must be file permission bits (0...0o777), not {mode!r}")
        self._mode = mode
        self._thread_local = bool(thread_local)
        self._is_singleton = bool(is_singleton)
        _seconds_to_ns(timeout, "timeout")
        _poll_ns(poll_interval)
        settings = _ThreadSettings if thread_local else _Settings
        self._settings = settings(float(timeout), bool(blocking), poll_interval)
        if is_url(self._lock_file):  # a server lock connects now, and is shown without its password
            self._handle()
            # (NULL only for a NULL object: the one just made is not)
            self._lock_file = os.fsdecode(cast(bytes, _path(self._made())))

    # The core object is made at the first use, so that making the lock object never touches
    # the disk nor fails (as filelock's); two threads racing to make it keep one of the two.
    # A relative path is resolved at each new acquisition, as filelock opens it then: one core
    # per working directory it was used from; while the caller holds the lock, re-entry and
    # release go to the core it holds, wherever the process has moved since.
    def _handle(self) -> Optional[int]:
        if self._relative:
            held = self._held_core()
            if held is not None:
                return held
        key = self._core_key()
        cores = self._cores
        made: Optional[_Handle] = cores.get(key)
        if made is None:
            flags = _RECURSIVE | _MAKE_PARENTS | _RELEASE_ON_DESTROY | _TAKE_OVER_FILE | self._extra_flags
            if not self._thread_local:
                flags |= _PROCESS_OWNED
            core = _make_core(self._lock_file, flags, self._mode)
            if self._on_event is not None:
                core.set_event_handler(self._on_event)
            made = cores.setdefault(key, core)
        return made.value

    def _made(self) -> Optional[int]:
        if self._relative:
            held = self._held_core()
            if held is not None:
                return held
        made: Optional[_Handle] = self._cores.get(self._core_key())
        return None if made is None else made.value

    def _core_key(self) -> str:
        """Which core the path names now: the working directory for a relative path."""
        return os.getcwd() if self._relative else ""

    def _held_core(self) -> Optional[int]:
        """The core of a relative path that the caller holds, if any."""
        for core in list(self._cores.values()):
            if _is_held(core.value):
                return core.value
        return None

    @property
    def lock_file(self) -> str:
        """The lock's path, as given."""
        return self._lock_file

    @property
    def timeout(self) -> float:
        """The default timeout of acquire(), seconds (< 0: forever)."""
        return self._settings.timeout

    @timeout.setter
    def timeout(self, value: Union[float, str]) -> None:
        value = float(value)
        _seconds_to_ns(value, "timeout")
        self._settings.timeout = value

    @property
    def blocking(self) -> bool:
        """The default of acquire()'s ``blocking``."""
        return self._settings.blocking

    @blocking.setter
    def blocking(self, value: bool) -> None:
        self._settings.blocking = bool(value)

    @property
    def poll_interval(self) -> float:
        """The default interval between tries while another holds the lock, seconds."""
        return self._settings.poll_interval

    @poll_interval.setter
    def poll_interval(self, value: float) -> None:
        _poll_ns(value)
        self._settings.poll_interval = value

    @property
    def mode(self) -> int:
        """The lock's permission bits (0o644 when left to the umask, as filelock reports)."""
        return 0o644 if self._mode == _UNSET_MODE else self._mode

    @property
    def has_explicit_mode(self) -> bool:
        """Whether ``mode`` was given."""
        return self._mode != _UNSET_MODE

    def is_thread_local(self) -> bool:
        """Whether each thread holds the lock for itself."""
        return self._thread_local

    is_singleton = _read_only("_is_singleton", "Whether this is the one object of its class for its path.")
    context_error_policy = _read_only("_context_error_policy",
                                      "How leaving ``with`` reports a failed release beside the body's error.")
    close_error_policy = _read_only("_close_error_policy",
                                    "filelock's descriptor close policy (no descriptor here: no effect).")
    fallback_to_soft = _read_only("_fallback_to_soft", "filelock's flock fallback switch (no flock here: no effect).")
    preserve_lock_file = _read_only("_preserve_lock_file", "Whether release keeps the lock's path (FileLock always does).")

    @property
    def on_acquired(self) -> None:
        """filelock's descriptor hook: always None here."""
        return None

    @property
    def lifetime(self) -> None:
        """filelock's age-based expiry: never, here."""
        return None

    @property
    def is_locked(self) -> bool:
        """Whether the caller (this thread, or with thread_local=False this process) holds it."""
        handle = self._made()
        return handle is not None and bool(_is_held(handle))

    @property
    def holder(self) -> Optional[Holder]:
        """Who holds the lock now, any process may ask (libsync's; not in filelock), or None."""
        return _read_holder(self._handle(), self._lock_file)

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the caller's hold (libsync's; None when it does not hold it):
        larger than the token of every earlier acquisition of the lock, whoever held it."""
        handle = self._made()
        return None if handle is None else _read_token(handle)

    @property
    def lost(self) -> bool:
        """Whether the latest hold acquired through this object was lost, as far as this process
        has learned (libsync's; no store access). Reset by the next acquire."""
        handle = self._made()
        return handle is not None and _hold_state(handle) == HoldEvent.LOST

    @property
    def suspended(self) -> bool:
        """Whether the latest hold is in doubt (Redis: a renewal got no answer; libsync's)."""
        handle = self._made()
        return handle is not None and _hold_state(handle) == HoldEvent.SUSPENDED

    @property
    def lock_counter(self) -> int:
        """How many of the caller's acquisitions are not yet released."""
        handle = self._made()
        return 0 if handle is None else _count(handle)

    def acquire(self, timeout: Optional[float] = None, poll_interval: Optional[float] = None, *,
                poll_intervall: Optional[float] = None, blocking: Optional[bool] = None,
                cancel_check: Optional[Callable[[], bool]] = None) -> "AcquireReturnProxy":
        """Acquires the lock (again, if the caller holds it: counted). Waits up to ``timeout``
        seconds (None: the default; < 0: forever), trying every ``poll_interval`` seconds while
        another process holds it, or until this object's other thread releases it; then raises
        Timeout. ``blocking=False`` tries once; ``cancel_check`` (called between tries) returning
        True raises Timeout too. Ctrl-C interrupts the wait. Raises RuntimeError ("Deadlock")
        for an endless wait for a lock this thread holds through another object."""
        settings = self._settings
        timeout = settings.timeout if timeout is None else timeout
        blocking = settings.blocking if blocking is None else blocking
        if poll_intervall is not None:
            warnings.warn("use poll_interval instead of poll_intervall", DeprecationWarning, stacklevel=2)
            poll_interval = poll_intervall
        poll = _poll_ns(settings.poll_interval if poll_interval is None else poll_interval)
        timeout_ns = _seconds_to_ns(timeout, "timeout") if blocking else 0
        handle = self._handle()
        lock_id = id(self)
        if _count(handle) == 0:
            _LOGGER.debug("Attempting to acquire lock %s on %s", lock_id, self._lock_file)
        code = _wait(handle, timeout_ns, poll, cancel_check)
        if code == errno.ECANCELED:
            _LOGGER.debug("Cancellation requested for lock %s on %s", lock_id, self._lock_file)
            code = errno.ETIMEDOUT
        if code == errno.ETIMEDOUT:
            _LOGGER.debug("Timeout on acquiring lock %s on %s", lock_id, self._lock_file)
            raise _timeout(self._lock_file)
        self._check(code, "acquire")
        _LOGGER.debug("Lock %s acquired on %s", lock_id, self._lock_file)
        return AcquireReturnProxy(self)

    def release(self, force: bool = False) -> None:
        """Ends one of the caller's acquisitions (``force``: all of them); the last releases the
        lock. Nothing happens if the caller does not hold it. Raises LockBrokenError if the lock
        was broken while held."""
        handle = self._made()
        if handle is None:
            return
        # The core's release comes first, before any Python code that a Ctrl-C (or an exception
        # from a log handler) may interrupt: an interrupted release() has released.
        code = (_unlock_all if force else _unlock)(handle)
        if code == errno.EPERM:  # not held by the caller (or released meanwhile by another of its threads)
            return
        last = _count(handle) == 0
        if last:
            _LOGGER.debug("Attempting to release lock %s on %s", id(self), self._lock_file)
        _raise_release_error(code, self)
        if last:
            _LOGGER.debug("Lock %s released on %s", id(self), self._lock_file)

    def _check(self, code: int, operation: str) -> None:
        if code == errno.EDEADLK:
            raise RuntimeError(f"Deadlock: lock '{self._lock_file}' is already held by a different "
                               f"{self._deadlock_holder}. Use is_singleton=True to enable reentrant locking "
                               "across instances.")
        _raise_error(code, operation, self._lock_file, "this object")

    def __enter__(self: _L) -> _L:
        self.acquire()
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], body_error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        _release_leaving(self.release, body_error, self._context_error_policy)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._lock_file!r} locked={self.is_locked} at {id(self):#x}>"


def _release_leaving(release: Callable[[], None], body_error: Optional[BaseException], policy: str) -> None:
    """Releases on leaving ``with``: a failed release beside the body's error propagates with it
    as its context ("chain") or both in a BaseExceptionGroup ("group")."""
    try:
        release()
    except BaseException as release_error:
        if body_error is None or policy == "chain":
            raise
        if sys.version_info >= (3, 11):
            group: type[BaseExceptionGroup[BaseException]] = (
                ExceptionGroup if all(isinstance(e, Exception) for e in (body_error, release_error)) else BaseExceptionGroup)
            raise group("the with-block and the lock's release both failed", [body_error, release_error]) from None
        raise  # no exception groups before 3.11: as "chain"


def _make_core(lock_file: str, flags: int, mode: int) -> _Handle:
    """The core object, with the errors opening the path would give (as filelock reports them)."""
    if is_url(lock_file):
        return _Handle(lock_file, flags & ~(_MAKE_PARENTS | _REMOVE_ON_RELEASE | _TAKE_OVER_FILE), -1)
    if "\0" in lock_file:
        raise ValueError("embedded null byte")
    if lock_file == "":
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), lock_file)
    if os.path.basename(lock_file.rstrip("/")) in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), lock_file)
    return _Handle(lock_file, flags, mode)


class FileLock(BaseFileLock):
    """filelock's FileLock (see the module doc)."""


class SoftFileLock(BaseFileLock):
    """filelock's SoftFileLock: the same lock (libsync's is NFS-safe already); releasing it
    removes the lock's directory, as SoftFileLock removes its file."""
    _extra_flags = _REMOVE_ON_RELEASE


class AcquireReturnProxy:
    """What acquire() returns: ``with lock.acquire(...):`` releases at the end."""

    def __init__(self, lock: BaseFileLock) -> None:
        self.lock = lock

    def __enter__(self) -> BaseFileLock:
        return self.lock

    def __exit__(self, exc_type: Optional[type[BaseException]], body_error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        _release_leaving(self.lock.release, body_error, self.lock.context_error_policy)


class AsyncAcquireReturnProxy:
    """What the async acquire() returns: ``async with await lock.acquire(...):``."""

    def __init__(self, lock: "BaseAsyncFileLock") -> None:
        self.lock = lock

    async def __aenter__(self) -> "BaseAsyncFileLock":
        return self.lock

    async def __aexit__(self, exc_type: Optional[type[BaseException]], body_error: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        await self.lock.__aexit__(exc_type, body_error, traceback)


# task -> {canonical path: weak reference to the object it holds it through}; an entry whose
# object is gone (dropped while held: its core released) or no longer holds counts for nothing.
_async_holders: "weakref.WeakKeyDictionary[asyncio.Task[Any], dict[str, weakref.ref[BaseAsyncFileLock]]]" = weakref.WeakKeyDictionary()


def _holds_through_another(task: "Optional[asyncio.Task[Any]]", key: str, lock: "BaseAsyncFileLock") -> bool:
    """Whether `task` holds the lock at `key` through a live object other than `lock`."""
    ref = _async_holders.get(task, {}).get(key) if task is not None else None
    other = None if ref is None else ref()
    return other is not None and other is not lock and other.lock_counter > 0


class BaseAsyncFileLock(BaseFileLock):
    """filelock's asyncio lock: ``async with lock:``. Waiting never blocks the event loop nor
    polls: the task is suspended while the core waits, woken by the lock's release (inotify on
    this host; docs/distributed_lock.md). Making the core object and releasing run in
    ``executor`` (run_in_executor=True, the default) or in the loop; an acquire's first try (a
    few system calls) runs in the loop. As filelock's, one
    object is shared by the process by default (thread_local=False): tasks sharing one object
    re-enter it; tasks with objects of their own exclude each other."""

    _deadlock_holder = "BaseAsyncFileLock instance in this task"

    def __init__(self, lock_file: Union[str, os.PathLike[str]], timeout: float = -1, mode: int = _UNSET_MODE,
                 thread_local: bool = False, *, blocking: bool = True, is_singleton: bool = False,
                 poll_interval: float = 0.05, loop: Optional[asyncio.AbstractEventLoop] = None,
                 run_in_executor: bool = True, executor: Optional[Executor] = None, **options: Any) -> None:
        """BaseFileLock's arguments (thread_local defaults to False), and ``loop``,
        ``run_in_executor`` (tries run in ``executor``, default the loop's) as filelock's."""
        if thread_local and run_in_executor:
            raise ValueError("run_in_executor is not supported when thread_local is True")
        super().__init__(lock_file, timeout, mode, thread_local, blocking=blocking, is_singleton=is_singleton,
                         poll_interval=poll_interval, **options)
        self._loop, self._run_in_executor, self._executor = loop, run_in_executor, executor

    @property
    def run_in_executor(self) -> bool:
        """Whether the tries run in the executor."""
        return self._run_in_executor

    @property
    def executor(self) -> Optional[Executor]:
        """The executor of the tries (None: the loop's default)."""
        return self._executor

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """The event loop given, if any."""
        return self._loop

    async def _call(self, function: Callable[..., _T], *args: Any) -> _T:
        if not self._run_in_executor:
            return function(*args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    # (a coroutine here, as filelock's BaseAsyncFileLock.acquire and release, which override
    # BaseFileLock's the same way: not substitutable, by filelock's design)
    async def acquire(  # type: ignore[override]
            self, timeout: Optional[float] = None, poll_interval: Optional[float] = None, *,
            blocking: Optional[bool] = None,
            cancel_check: Optional[Callable[[], bool]] = None) -> AsyncAcquireReturnProxy:
        """Acquires the lock (see BaseFileLock.acquire). The task is suspended while another
        holds it, the wait being the core's (sync_distributed_lock_lock_async): woken when the
        lock is released on this host (inotify on its directory) or through this object, not
        by polling; ``poll_interval`` only bounds how late it sees what nothing reports (a
        holder on another NFS client, or one that died) and how often ``cancel_check`` is asked."""
        settings = self._settings
        timeout = settings.timeout if timeout is None else timeout
        blocking = settings.blocking if blocking is None else blocking
        poll_seconds = settings.poll_interval if poll_interval is None else poll_interval
        poll = _poll_ns(poll_seconds)
        timeout_ns = _seconds_to_ns(timeout, "timeout") if blocking else 0
        # (what may touch the file system, or wait for a thread that does, runs off the loop)
        handle, count, key = await self._call(lambda: (self._handle(), self.lock_counter, _canonical(self._lock_file)))
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        fresh = count == 0
        if fresh:
            _LOGGER.debug("Attempting to acquire lock %s on %s", id(self), self._lock_file)
            if timeout_ns < 0 and _holds_through_another(task, key, self):
                self._check(errno.EDEADLK, "acquire")  # this task holds it through another object
        # The holder the core records: the thread (thread_local: as filelock's, the thread
        # holds), else the task (the process holds; the task only names whose wait it is).
        owner = threading.get_native_id() if self._thread_local else _aio.owner()
        deadline = None if timeout_ns < 0 else loop.time() + timeout_ns / 1e9
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            # A bounded wait (a cancel_check is asked every poll_interval); an endless one is
            # given a distant deadline: the deadlock between tasks is checked above, per task.
            limit = _FAR if remaining is None else int(remaining * 1e9)
            if cancel_check is not None:
                limit = min(limit, poll)
            code = await _wait_async(handle, limit, poll, owner, lambda: _LOGGER.debug(
                "Lock %s not acquired on %s, waiting for its release ...", id(self), self._lock_file))
            if code != errno.ETIMEDOUT:
                break
            remaining = None if deadline is None else deadline - loop.time()
            if cancel_check is None or (remaining is not None and remaining <= 0):
                _LOGGER.debug("Timeout on acquiring lock %s on %s", id(self), self._lock_file)
                raise Timeout(self._lock_file)
            if cancel_check():
                _LOGGER.debug("Cancellation requested for lock %s on %s", id(self), self._lock_file)
                raise Timeout(self._lock_file)
        self._check(code, "acquire")
        if fresh and task is not None:
            _async_holders.setdefault(task, {})[key] = weakref.ref(self)
            self._holder_key = (weakref.ref(task), key)
        _LOGGER.debug("Lock %s acquired on %s", id(self), self._lock_file)
        return AsyncAcquireReturnProxy(self)

    async def release(self, force: bool = False) -> None:  # type: ignore[override]  # (see acquire)
        """Ends one of the caller's acquisitions (``force``: all); the last releases the lock."""
        def release() -> int:
            BaseFileLock.release(self, force)
            return self.lock_counter

        if self._made() is None or await self._call(release) == 0:
            task, key = self.__dict__.pop("_holder_key", (lambda: None, None))
            held = _async_holders.get(task(), {}) if task() is not None else {}
            if key in held and held[key]() in (self, None):
                del held[key]

    def __enter__(self) -> NoReturn:
        raise NotImplementedError("Do not use `with` for asyncio locks, use `async with` instead.")

    def __exit__(self, *exc: object) -> NoReturn:
        raise NotImplementedError("Do not use `with` for asyncio locks, use `async with` instead.")

    async def __aenter__(self) -> "BaseAsyncFileLock":
        await self.acquire()
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]], body_error: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        try:
            await self.release()
        except BaseException as release_error:
            if body_error is None or self._context_error_policy == "chain":
                raise
            _release_leaving(lambda: _reraise(release_error), body_error, "group")


def _reraise(error: BaseException) -> None:
    raise error


class AsyncFileLock(BaseAsyncFileLock):
    """filelock's AsyncFileLock."""


class AsyncSoftFileLock(BaseAsyncFileLock):
    """filelock's AsyncSoftFileLock (see SoftFileLock)."""
    _extra_flags = _REMOVE_ON_RELEASE
