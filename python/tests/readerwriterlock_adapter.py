"""readerwriterlock's module interface (``from readerwriterlock import rwlock``) over libsync's
RWLock, to run code and tests written for readerwriterlock against libsync.

libsync's RWLock has readerwriterlock's interface itself (``gen_rlock()``, ``gen_wlock()``,
lock objects with ``acquire(blocking, timeout)``/``release()``/``locked()``, ``downgrade()`` on
the write lock); this module only adds readerwriterlock's names. libsync has one policy, writer
preference: the reader-preferring (``RWLockRead``, ``RWLockReadD``) and fair (``RWLockFair``,
``RWLockFairD``) classes here are that same lock, so a test of either of those policies cannot
pass against them (the suite runner skips such tests, naming the policy).

``install()`` makes ``import readerwriterlock`` and ``from readerwriterlock import rwlock`` find
this module.
"""
import sys
import threading
import time
import types
from typing import Any, Callable, Optional, Protocol, runtime_checkable

from libsync.locks import RWLock

try:
    threading.Lock().release()
except RuntimeError as error:  # threading's class and message for releasing an unlocked lock
    RELEASE_ERR_CLS: type = type(error)
    RELEASE_ERR_MSG: str = str(error)


@runtime_checkable
class Lockable(Protocol):
    """readerwriterlock's lock object: threading.Lock's interface."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def locked(self) -> bool: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Optional[bool]: ...


@runtime_checkable
class LockableD(Lockable, Protocol):
    """A write lock object that can downgrade to a read lock object."""

    def downgrade(self) -> Lockable: ...


@runtime_checkable
class RWLockable(Protocol):
    """A read-write lock that generates read and write lock objects."""

    def gen_rlock(self) -> Lockable: ...

    def gen_wlock(self) -> Lockable: ...


@runtime_checkable
class RWLockableD(Protocol):
    """A read-write lock whose write lock objects downgrade."""

    def gen_rlock(self) -> Lockable: ...

    def gen_wlock(self) -> LockableD: ...


class _RWLock(RWLock):
    """libsync's RWLock, constructed as readerwriterlock's (its arguments have no use here:
    the lock is libsync's, and its deadlines use the monotonic clock)."""
    __slots__ = ()

    def __init__(self, lock_factory: Callable[[], Any] = threading.Lock,
                 time_source: Callable[[], float] = time.perf_counter):
        super().__init__()


class RWLockWrite(_RWLock):
    """Writer preference: libsync's policy."""
    __slots__ = ()


class RWLockWriteD(_RWLock):
    """Writer preference, downgradable: libsync's policy."""
    __slots__ = ()


class RWLockRead(_RWLock):
    """readerwriterlock's reader preference: here libsync's writer preference."""
    __slots__ = ()


class RWLockReadD(_RWLock):
    """readerwriterlock's reader preference, downgradable: here libsync's writer preference."""
    __slots__ = ()


class RWLockFair(_RWLock):
    """readerwriterlock's fair policy: here libsync's writer preference."""
    __slots__ = ()


class RWLockFairD(_RWLock):
    """readerwriterlock's fair policy, downgradable: here libsync's writer preference."""
    __slots__ = ()


def install() -> dict:
    """Registers this module as ``readerwriterlock.rwlock``; returns the sys.modules entries it
    replaced (None where there was none), for the caller to restore."""
    package = types.ModuleType("readerwriterlock")
    package.__path__ = []
    package.rwlock = sys.modules[__name__]
    replaced = {name: sys.modules.get(name) for name in ("readerwriterlock", "readerwriterlock.rwlock")}
    sys.modules["readerwriterlock"] = package
    sys.modules["readerwriterlock.rwlock"] = sys.modules[__name__]
    return replaced
