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
connection ends), ``redis://:password@host:port/db?lock=NAME&ttl=10`` (a lease renewed while
held: a holder stopped for less than ``ttl`` seconds keeps the lock, wherever the stop falls;
a holder on another host that dies leaves it held for more than ``ttl`` and at most
``ttl`` + ``ttl``/3 seconds), or ``etcd://user:password@host:port?lock=NAME&ttl=10`` (a key on a
lease kept alive while held, waiters queued and watching; ``etcds://...&cacert=CA.pem&cert=C.pem&key=K.pem``
over TLS). The URLs take
``connect_timeout=SECONDS`` (default 5). ``lock.token`` is the fencing
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
ended), the next ``acquire()`` or ``try_lock()`` raises ``LockBrokenError`` (a ``LockLostError``)
once, the core ending the lost hold, and the one after acquires; release raises ``NotLockedError`` (the caller does not hold it), or a ``LockLostError``:
``LockBrokenError`` (the hold was lost meanwhile: broken, lease expired, server session ended) or
``LockStolenError`` (lost, and someone else holds it now). Server targets add ValueError (a
malformed URL), OSError(ELIBACC) (the client library is missing: the message says which Debian
package to install), ConnectionRefusedError (cannot connect), PermissionError (wrong or missing password),
and OSError(EIO) (the server failed or stopped answering); a server that stops answering during
a wait ends it at its timeout with ``Timeout`` (its note says so).
"""
from __future__ import annotations

import errno
import os
from datetime import datetime
from typing import Any, Callable, Optional, cast

from . import _aio
from ._distributed import (Holder, HoldEvent, LockBrokenError, LockLostError, LockPath, LockStolenError, NotLockedError,
                           Timeout, _break, _event_handler, _Handle, _hold_state, _is_held, _is_held_async, _path,
                           _poll_ns, _raise_error, _raise_release_error, _read_holder, _read_token, _recover,
                           _RELEASE_ON_DESTROY, _seconds_to_ns, _timeout, _try_lock, _unlock, _unlock_async, _wait,
                           _wait_async)
from ._filelock import (AcquireReturnProxy, AsyncAcquireReturnProxy, AsyncFileLock,
                        AsyncSoftFileLock, BaseAsyncFileLock, BaseFileLock, FileLock, SoftFileLock)
from ._filelock_lease import AsyncSoftFileLease, LeaseCompromise, SoftFileLease
from ._filelock_rw import (AcquireReadWriteReturnProxy, AsyncAcquireReadWriteReturnProxy, AsyncReadWriteLock,
                           AsyncSoftReadWriteLock, ReadWriteLock, SoftReadWriteLock)
from ._semaphore import DistributedSemaphore

__all__ = ["DistributedLock", "Holder", "HoldEvent", "Timeout", "NotLockedError", "LockLostError", "LockBrokenError", "LockStolenError",
           "FileLock", "SoftFileLock", "AsyncFileLock", "AsyncSoftFileLock", "BaseFileLock", "BaseAsyncFileLock",
           "AcquireReturnProxy", "AsyncAcquireReturnProxy",
           "ReadWriteLock", "AsyncReadWriteLock", "SoftReadWriteLock", "AsyncSoftReadWriteLock",
           "AcquireReadWriteReturnProxy", "AsyncAcquireReadWriteReturnProxy",
           "SoftFileLease", "AsyncSoftFileLease", "LeaseCompromise", "DistributedSemaphore"]


class _Acquired:
    """What acquire() returns, so that ``with lock.acquire(timeout=1):`` works (as filelock's)."""
    __slots__ = ("lock",)

    def __init__(self, lock: "DistributedLock") -> None:
        self.lock = lock

    def __enter__(self) -> "DistributedLock":
        return self.lock

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    async def __aenter__(self) -> "DistributedLock":
        return self.lock

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()


def _task_owner() -> int:
    """The running asyncio task's identity, or 0 outside one."""
    task = _aio._current_task()
    return 0 if task is None else id(task)


class DistributedLock:
    """A distributed lock at ``path`` (see the module doc). ``timeout`` (seconds; < 0: forever)
    and ``poll_interval`` are the defaults of acquire() and of ``with``. Each object is one
    would-be holder: two objects for one path exclude each other, in one process or not; one
    object's threads take turns (the holder is the thread that acquired it). Not recursive."""

    def __init__(self, path: LockPath, timeout: float = -1,
                 poll_interval: float = 0.05, *,
                 on_event: Optional[Callable[["DistributedLock", HoldEvent], None]] = None) -> None:
        """``path``: a path, or a postgresql:// / redis:// / etcd:// / etcds:// URL (the server is connected to now).
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
        than the token of every earlier acquisition of the lock, whoever held it. The caller is
        the thread, or, for a hold taken with acquire_async, the task."""
        token = _read_token(self._handle.value)
        owner = _task_owner() if token is None else 0
        return _read_token(self._handle.value, owner) if owner else token

    @property
    def path(self) -> str:
        """The lock's absolute path (a URL target: the URL without its password)."""
        # (NULL only for a NULL object, which this one's handle is not while it lives)
        return os.fsdecode(cast(bytes, _path(self._handle.value)))

    lock_file = path  # filelock's name

    def try_lock(self) -> bool:
        """Acquires the lock if it is free, without blocking: True if the caller holds it now,
        False if someone else holds it."""
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
        if code == errno.ETIMEDOUT:
            raise _timeout(self.path)
        self._check(code, "acquire")
        return _Acquired(self)

    async def acquire_async(self, timeout: Optional[float] = None, poll_interval: Optional[float] = None, *,
                            blocking: bool = True) -> _Acquired:
        """acquire() from an asyncio task: the same arguments, result and errors, but the task
        is suspended (not the thread, not the event loop) while the lock is held elsewhere, and
        the holder is the task (release it from the task: ``release()``, or leave
        ``async with``). The wait is the core's: woken when a hold through this object ends
        (another task's or thread's release) and, for a path, when the lock is released on this
        host (inotify), else trying every ``poll_interval`` (docs/distributed_lock.md).
        Cancelled (``task.cancel()``, ``asyncio.timeout``), the wait is withdrawn and the lock
        not held: a grant that raced the cancellation is released."""
        timeout = self.timeout if timeout is None else timeout
        poll = _poll_ns(self.poll_interval if poll_interval is None else poll_interval)
        timeout_ns = 0 if not blocking else _seconds_to_ns(timeout, "timeout")
        code = await _wait_async(self._handle.value, timeout_ns, poll, _aio.owner())
        if code == errno.ETIMEDOUT:
            raise _timeout(self.path)
        self._check(code, "acquire")
        return _Acquired(self)

    def release(self) -> None:
        """Releases the lock the caller (the thread, or the task that took it with
        acquire_async) holds. Raises NotLockedError, LockBrokenError or LockStolenError (see the
        module doc)."""
        code = _unlock(self._handle.value)
        if code == errno.EPERM:  # a task's hold?
            owner = _task_owner()
            if owner:
                code = _unlock_async(self._handle.value, owner)
        _raise_release_error(code, self)

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
        """Whether the caller (the thread, or in a task the task) holds the lock through this
        object now (checked in the store: False once it was broken)."""
        if _is_held(self._handle.value):
            return True
        owner = _task_owner()
        return bool(owner and _is_held_async(self._handle.value, owner))

    def _check(self, code: int, operation: str) -> None:
        if code == errno.ESTALE:  # the caller's hold was lost: the core ended it now
            _raise_release_error(code, self)
        _raise_error(code, operation, self.path, "this DistributedLock object (it is not recursive)")

    def __enter__(self) -> "DistributedLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> "DistributedLock":
        """``async with lock:``: acquire_async() (the object's timeout) for the block."""
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        _raise_release_error(_unlock_async(self._handle.value, _aio.owner()), self)

    def __repr__(self) -> str:
        return f"DistributedLock({self.path!r}, is_locked={self.is_locked})"
