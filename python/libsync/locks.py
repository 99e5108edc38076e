"""Locks from libsync.so: drop-in ``Lock`` and ``RLock`` for threading's, and ``Mutex``,
``RWLock``, ``SpinLock``, ``once`` and ``synchronized``.

``Lock`` and ``RLock`` behave as ``threading.Lock`` and ``threading.RLock``: same methods,
same return values, same exceptions for the same misuse (the argument checks are threading's
own). ``Lock`` may be released by any thread; ``RLock`` only by its owner.

``Mutex`` and ``SpinLock`` know their owner: acquiring again from the owning thread raises
``DeadlockError`` instead of hanging, releasing from another thread raises ``NotOwnerError``.
``RWLock`` is writer-preferring (while a writer waits, new readers wait), and also offers
readerwriterlock's interface (``gen_rlock()``, ``gen_wlock()``, ``downgrade()``)::

    table = RWLock()
    with table.read(): ...
    with table.write(): ...

Shared memory: every lock but ``synchronized``/``once`` can live in a buffer that processes
share (``Lock(buffer=shm)`` with a ``multiprocessing.shared_memory.SharedMemory`` or any
writable buffer, at ``offset``); one process creates it, the others attach with
``initialize=False`` (or inherit it through fork, or receive it pickled, for a SharedMemory).
Without ``buffer`` the lock uses memory of its own; ``buffer=None`` (what a closed
SharedMemory's ``buf`` reads) or a closed SharedMemory raises ValueError.

Robust mode (``Mutex(buffer=shm, robust=True)``, also ``RLock``): when a holder dies holding
the lock (its thread exits, its process is killed), the next acquire raises ``OwnerDiedError``
*with the lock held*; repair the state the lock guards, call ``mark_consistent()``, then
``release()``. Releasing without ``mark_consistent()`` makes every later acquire raise
``NotRecoverableError``::

    try:
        mutex.acquire()
    except OwnerDiedError:
        repair()
        mutex.mark_consistent()
    try:
        ...
    finally:
        mutex.release()

A blocked acquire releases the GIL, and Ctrl-C interrupts it in the main thread.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import threading
import time
from ctypes import c_int, c_int64, c_uint32, c_uint64, c_void_p
from typing import Any, Callable, Optional

from . import debug as _debug
from ._lib import blocking as _blocking, nonblocking as _nonblocking
from ._memory import PRIVATE, ref as _ref

__all__ = ["Lock", "RLock", "Mutex", "RWLock", "SpinLock", "Once", "once", "synchronized",
           "LockError", "DeadlockError", "NotOwnerError", "OwnerDiedError", "NotRecoverableError"]


class LockError(RuntimeError):
    """A lock was misused; ``errno`` holds the C library's code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.errno = code


class DeadlockError(LockError):
    """The calling thread already holds the lock it is waiting for (EDEADLK)."""


class NotOwnerError(LockError):
    """The calling thread does not hold the lock it releases (EPERM)."""


class OwnerDiedError(LockError):
    """A robust lock's previous holder died holding it (EOWNERDEAD). The calling thread now
    holds the lock: repair the state it guards, call ``mark_consistent()``, then release it."""


class NotRecoverableError(LockError):
    """A robust lock was released after OwnerDiedError without ``mark_consistent()``
    (ENOTRECOVERABLE): it can no longer be acquired."""


def _c(handle, name, restype=c_int):
    function = getattr(handle, name)
    function.restype = restype  # argtypes left unset: arguments are ctypes objects (cheaper)
    return function


_FOREVER = c_int64(-1)
_probe = threading.Lock()


def _deadline(blocking: Any, timeout: Any) -> Optional[c_int64]:
    """threading's checks of (blocking, timeout) with threading's exceptions; the deadline to
    wait to (None: do not wait). float('inf'), which threading refuses with OverflowError,
    waits without a deadline."""
    endless = timeout == float("inf")
    if _probe.acquire(blocking, threading.TIMEOUT_MAX if endless else timeout):  # free: validates only
        _probe.release()
    if not blocking:
        return None
    if timeout == -1 or endless:
        return _FOREVER
    return c_int64(min(time.monotonic_ns() + int(timeout * 1e9), (1 << 63) - 1))


def _qualname(obj: Any) -> str:
    """The class name a repr shows, as threading's: module.name, where this package's modules
    are just "libsync" (so that `<\\w+\\.Name` matches, as for threading's classes)."""
    cls = type(obj)
    module = "libsync" if cls.__module__.startswith("libsync.") else cls.__module__
    return f"{module}.{cls.__qualname__}"


def _error(code: int, what: str) -> LockError:
    if code == errno.EDEADLK:
        return DeadlockError(f"{what}: the calling thread already holds it", code)
    if code == errno.EPERM:
        return NotOwnerError(f"{what}: the calling thread does not hold it", code)
    if code == errno.EAGAIN:
        return LockError(f"{what}: count overflow", code)
    if code == errno.EOWNERDEAD:
        return OwnerDiedError(f"{what}: the previous holder died holding it; the caller now holds it: "
                              "repair the state, call mark_consistent(), then release()", code)
    if code == errno.ENOTRECOVERABLE:
        return NotRecoverableError(f"{what}: released without mark_consistent() after its holder died", code)
    return LockError(f"{what}: {errno.errorcode.get(code, code)}", code)


def _wait(function, pointer, deadline: c_int64, what: str) -> bool:
    """Calls a blocking `_interruptible` C function until it returns other than EINTR. Between
    calls the interpreter runs signal handlers (Ctrl-C raises KeyboardInterrupt here); in the
    main thread (where Python runs them) the C function returns EINTR at least every 50 ms, so
    a signal that lands while it is not asleep in the kernel is not lost."""
    while True:
        code = function(pointer, deadline)
        if code == 0:
            return True
        if code == errno.ETIMEDOUT:
            return False
        if code != errno.EINTR:
            raise _error(code, what)


class _Memory:
    """Lock state in memory this object owns, or in a caller's (shared) buffer."""
    __slots__ = ("_cells", "_p", "_shm", "_offset", "_shared", "__weakref__")
    _WORDS = 1

    def _place(self, buffer: Any, offset: int, cells: Any = None) -> bool:
        """Sets _cells/_p (a `cells` array, default _WORDS 32-bit words); returns whether the
        memory is shared."""
        cells = cells or c_uint32 * self._WORDS
        self._shm, self._offset = None, offset
        if buffer is PRIVATE:
            self._cells = cells()
        else:
            if hasattr(buffer, "buf") and hasattr(buffer, "name"):  # SharedMemory
                if buffer.buf is None:
                    raise ValueError(f"the SharedMemory {buffer.name!r} is closed")
                self._shm, buffer = buffer, buffer.buf
            _ref(buffer, offset, cells._type_)  # checks type, writability, range, alignment (and None)
            _ref(buffer, offset + ctypes.sizeof(cells) - 4, c_uint32)
            self._cells = cells.from_buffer(buffer, offset)
        self._p = c_void_p(ctypes.addressof(self._cells))
        self._shared = buffer is not PRIVATE
        if _debug.tracking:  # lock-order checking: the lock's orders go with its memory
            _debug.track(self)
        return self._shared

    def __reduce__(self):
        if self._shm is None:
            raise TypeError(f"a {type(self).__name__} can be pickled only when it lives in a SharedMemory")
        return (_attach, (type(self), self._shm.name, self._offset) + self._attach_options())

    def _attach_options(self) -> tuple:
        """What __reduce__ passes on besides the memory: (), or (keyword arguments,)."""
        return ()


def _attach(cls, name: str, offset: int, options: Optional[dict] = None):
    from multiprocessing import shared_memory
    return cls(buffer=shared_memory.SharedMemory(name=name), offset=offset, initialize=False, **(options or {}))


def _init(function, pointer, flags: int) -> None:
    code = function(pointer, c_int(flags))
    if code:
        raise _error(code, "init")


# ---- Lock, Mutex ---------------------------------------------------------------------------

_mutex_init = _c(_nonblocking, "sync_mutex_init")
_mutex_trylock = _c(_nonblocking, "sync_mutex_trylock")
_mutex_unlock = _c(_nonblocking, "sync_mutex_unlock")
_mutex_is_locked = _c(_nonblocking, "sync_mutex_is_locked")
_mutex_wait = _c(_blocking, "sync_mutex_lock_interruptible")
_mutex_consistent = _c(_nonblocking, "sync_mutex_consistent")
# `_take` names: the trylock that opens a blocking acquire. Lock-order checking (libsync.debug)
# rebinds them so that a lock taken at that first try counts as a lock, not as a trylock.
_mutex_take = _mutex_trylock
_SHARED, _UNOWNED, _ROBUST = 1, 2, 4
_ROBUST_CELLS = c_uint64 * 2  # a robust lock's 16 bytes, 8-aligned
_ROBUST_MODE = 0x10000000  # the ROBUST bit of the word at offset 0 (sync/locks.h)


def _check_robust(cells: Any, robust: bool) -> None:
    """Attaching (initialize=False): `robust` must be what the creator chose, as it sizes the view."""
    if bool(memoryview(cells).cast("B").cast("I")[0] & _ROBUST_MODE) != robust:
        raise ValueError(f"the lock in this memory is {'not ' if robust else ''}robust: pass robust={not robust}")
_EBUSY = errno.EBUSY


class Lock(_Memory):
    """threading.Lock, from libsync: any thread may release it. 4 bytes of lock state."""
    __slots__ = ()
    _FLAGS = _UNOWNED

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        shared = self._place(buffer, offset)
        if initialize:
            _init(_mutex_init, self._p, self._FLAGS | (_SHARED if shared else 0))

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquires the lock, as threading.Lock.acquire: True if acquired, False on timeout or
        if non-blocking and held."""
        if blocking is True and timeout == -1:  # the common call: nothing to check, one C call
            return not _mutex_take(self._p) or _wait(_mutex_wait, self._p, _FOREVER, self._WHAT)
        deadline = _deadline(blocking, timeout)
        code = (_mutex_trylock if deadline is None else _mutex_take)(self._p)
        if code == 0:
            return True
        if deadline is None:
            return False
        return _wait(_mutex_wait, self._p, deadline, self._WHAT)

    def release(self) -> None:
        """Releases the lock; RuntimeError if it is not locked."""
        if _mutex_unlock(self._p):
            raise RuntimeError("release unlocked lock")

    def locked(self) -> bool:
        """Whether the lock is held (by anyone)."""
        return bool(_mutex_is_locked(self._p))

    def _at_fork_reinit(self) -> None:
        """After fork, in the child: unlocked, whoever held it (threading's protocol)."""
        _init(_mutex_init, self._p, self._FLAGS | (_SHARED if self._shared else 0))

    __enter__ = acquire

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if _mutex_unlock(self._p):  # release()'s body: one Python frame less per `with`
            raise RuntimeError("release unlocked lock")

    acquire_lock, release_lock, locked_lock = acquire, release, locked
    _WHAT = "Lock.acquire"

    def __repr__(self) -> str:
        state = "locked" if self.locked() else "unlocked"
        return f"<{state} {_qualname(self)} object at {id(self):#x}>"


class Mutex(Lock):
    """An owner-checked mutex: acquire from the owning thread raises DeadlockError, release from
    another thread NotOwnerError. Otherwise as Lock.

    ``robust=True`` (16 bytes, 8-aligned): a holder's death is reported to the next acquire as
    OwnerDiedError, with the lock held; ``mark_consistent()`` then ``release()`` (see the
    module's doc). In other processes pass ``robust=True, initialize=False`` too, or pickle it.
    """
    __slots__ = ()
    _FLAGS = 0
    _WHAT = "Mutex.acquire"

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True, robust: bool = False):
        shared = self._place(buffer, offset, _ROBUST_CELLS if robust else None)
        if initialize:
            _init(_mutex_init, self._p, self._flags(shared))
        else:
            _check_robust(self._cells, robust)

    def _flags(self, shared: bool) -> int:
        return (_SHARED if shared else 0) | (_ROBUST if self._robust() else 0)

    def _robust(self) -> bool:
        return isinstance(self._cells, _ROBUST_CELLS)

    def _attach_options(self) -> tuple:
        return ({"robust": True},) if self._robust() else ()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As Lock.acquire; DeadlockError if the caller holds it; robust: OwnerDiedError (held),
        NotRecoverableError."""
        if blocking is True and timeout == -1:
            code = _mutex_take(self._p)
            if code == 0:
                return True
            if code == _EBUSY:
                return _wait(_mutex_wait, self._p, _FOREVER, self._WHAT)
            raise _error(code, self._WHAT)
        deadline = _deadline(blocking, timeout)
        code = (_mutex_trylock if deadline is None else _mutex_take)(self._p)
        if code == 0:
            return True
        if code != _EBUSY:
            raise _error(code, self._WHAT)
        if deadline is None:
            return False
        return _wait(_mutex_wait, self._p, deadline, self._WHAT)

    __enter__ = acquire

    def release(self) -> None:
        code = _mutex_unlock(self._p)
        if code:
            raise _error(code, "Mutex.release")

    acquire_lock, release_lock = acquire, release

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        code = _mutex_unlock(self._p)
        if code:
            raise _error(code, "Mutex.release")

    def mark_consistent(self) -> None:
        """Robust: the state the lock guards is repaired after OwnerDiedError, so that release()
        leaves the lock usable. NotOwnerError if the caller does not hold it; LockError (EINVAL)
        if the lock is not robust or has nothing to repair."""
        code = _mutex_consistent(self._p)
        if code:
            raise _error(code, "Mutex.mark_consistent")

    def owned(self) -> bool:
        """Whether the calling thread holds it."""
        return bool(_mutex_is_owner(self._p))

    def _at_fork_reinit(self) -> None:
        _init(_mutex_init, self._p, self._flags(self._shared))


_mutex_is_owner = _c(_nonblocking, "sync_mutex_is_owner")


# ---- RLock ---------------------------------------------------------------------------------

_rlock_init = _c(_nonblocking, "sync_recursive_lock_init")
_rlock_trylock = _c(_nonblocking, "sync_recursive_lock_trylock")
_rlock_unlock = _c(_nonblocking, "sync_recursive_lock_unlock")
_rlock_depth = _c(_nonblocking, "sync_recursive_lock_depth", c_uint32)
_rlock_wait = _c(_blocking, "sync_recursive_lock_lock_interruptible")
_rlock_consistent = _c(_nonblocking, "sync_recursive_lock_consistent")
_rlock_take = _rlock_trylock  # see _mutex_take


class RLock(_Memory):
    """threading.RLock, from libsync: the owner may acquire again; each acquire balanced by a
    release; release by another thread raises RuntimeError. As threading's, an RLock (in private
    memory, not robust) held by the thread that calls fork() is still held by the child's thread,
    which may release it. 8 bytes of lock state.

    ``robust=True`` (16 bytes, 8-aligned), as Mutex's: OwnerDiedError leaves the caller holding
    it once; ``mark_consistent()`` then ``release()``."""
    __slots__ = ()
    _WORDS = 2

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True, robust: bool = False):
        shared = self._place(buffer, offset, _ROBUST_CELLS if robust else None)
        if initialize:
            _init(_rlock_init, self._p, self._flags(shared))
        else:
            _check_robust(self._cells, robust)

    def _flags(self, shared: bool) -> int:
        return (_SHARED if shared else 0) | (_ROBUST if self._robust() else 0)

    def _robust(self) -> bool:
        return isinstance(self._cells, _ROBUST_CELLS)

    def _attach_options(self) -> tuple:
        return ({"robust": True},) if self._robust() else ()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquires the lock (again, if the calling thread holds it), as threading.RLock.acquire:
        True if acquired, False on timeout or if non-blocking and held by another thread."""
        if blocking is True and timeout == -1:
            code = _rlock_take(self._p)
            if code == 0:
                return True
            if code == _EBUSY:
                return _wait(_rlock_wait, self._p, _FOREVER, "RLock.acquire")
            raise _error(code, "RLock.acquire")
        deadline = _deadline(blocking, timeout)
        code = (_rlock_trylock if deadline is None else _rlock_take)(self._p)
        if code == 0:
            return True
        if code != errno.EBUSY:
            raise _error(code, "RLock.acquire")
        if deadline is None:
            return False
        return _wait(_rlock_wait, self._p, deadline, "RLock.acquire")

    def release(self) -> None:
        """Releases one level of the lock; RuntimeError if the calling thread does not hold it."""
        if _rlock_unlock(self._p):
            raise RuntimeError("cannot release un-acquired lock")

    __enter__ = acquire

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if _rlock_unlock(self._p):
            raise RuntimeError("cannot release un-acquired lock")

    def mark_consistent(self) -> None:
        """Robust: as Mutex.mark_consistent."""
        code = _rlock_consistent(self._p)
        if code:
            raise _error(code, "RLock.mark_consistent")

    # threading.Condition's protocol for recursive locks.
    def _is_owned(self) -> bool:
        """Whether the calling thread holds it."""
        return _rlock_depth(self._p) > 0

    def _recursion_count(self) -> int:
        """How many times the calling thread holds it (0: not at all)."""
        return _rlock_depth(self._p)

    def _release_save(self) -> int:
        """Releases it entirely, however deep; returns the depth for _acquire_restore."""
        depth = _rlock_depth(self._p)
        if depth == 0:
            raise RuntimeError("cannot release un-acquired lock")
        for _ in range(depth):
            _rlock_unlock(self._p)
        return depth

    def _acquire_restore(self, depth: int) -> None:
        """Takes it again at the depth _release_save returned."""
        self.acquire()
        for _ in range(depth - 1):
            self.acquire()

    def _at_fork_reinit(self) -> None:
        """After fork, in the child: unlocked, whoever held it (threading's protocol)."""
        _init(_rlock_init, self._p, self._flags(self._shared))

    def __repr__(self) -> str:
        # threading's format, without the owner (the word keeps a kernel id, not threading's ident).
        locked = _mutex_is_locked(self._p)
        # The holder's depth: the word after the lock word (robust: at byte 8).
        count = memoryview(self._cells).cast("B").cast("I")[2 if self._robust() else 1] if locked else 0
        return f"<{'locked' if locked else 'unlocked'} {_qualname(self)} object count={count} at {id(self):#x}>"


# ---- RWLock --------------------------------------------------------------------------------

_rw_init = _c(_nonblocking, "sync_rwlock_init")
_rw_tryrd = _c(_nonblocking, "sync_rwlock_tryrdlock")
_rw_rdunlock = _c(_nonblocking, "sync_rwlock_rdunlock")
_rw_rdwait = _c(_blocking, "sync_rwlock_rdlock_interruptible")
_rw_trywr = _c(_nonblocking, "sync_rwlock_trywrlock")
_rw_wrunlock = _c(_nonblocking, "sync_rwlock_wrunlock")
_rw_wrwait = _c(_blocking, "sync_rwlock_wrlock_interruptible")
_rw_downgrade = _c(_nonblocking, "sync_rwlock_downgrade")
_rw_waiting = _c(_nonblocking, "sync_rwlock_waiting_writers", c_uint32)
_rw_takerd, _rw_takewr = _rw_tryrd, _rw_trywr  # see _mutex_take
_RELEASE_UNLOCKED = "release unlocked lock"  # threading.Lock's message


def _acquire_bounded(p, try_lock, take, wait, what: str, blocking: Any, timeout: Any) -> bool:
    """An acquire with a timeout or non-blocking. The write holder's own attempt returns False
    at once: its wait could only time out (the C functions say EBUSY or EDEADLK)."""
    deadline = _deadline(blocking, timeout)
    code = (try_lock if deadline is None else take)(p)
    if code == 0:
        return True
    if code != errno.EBUSY:
        raise _error(code, what)
    if deadline is None:
        return False
    try:
        return _wait(wait, p, deadline, what)
    except DeadlockError:
        return False


def _acquire_read(p, blocking: Any = True, timeout: Any = -1) -> bool:
    if timeout == -1 and blocking is True:
        return not _rw_takerd(p) or _wait(_rw_rdwait, p, _FOREVER, "RWLock.acquire_read")
    return _acquire_bounded(p, _rw_tryrd, _rw_takerd, _rw_rdwait, "RWLock.acquire_read", blocking, timeout)


def _release_read(p) -> None:
    code = _rw_rdunlock(p)
    if code:
        raise _error(code, "RWLock.release_read")


def _acquire_write(p, blocking: Any = True, timeout: Any = -1) -> bool:
    if timeout == -1 and blocking is True:
        return not _rw_takewr(p) or _wait(_rw_wrwait, p, _FOREVER, "RWLock.acquire_write")
    return _acquire_bounded(p, _rw_trywr, _rw_takewr, _rw_wrwait, "RWLock.acquire_write", blocking, timeout)


def _release_write(p) -> None:
    code = _rw_wrunlock(p)
    if code:
        raise _error(code, "RWLock.release_write")


def _downgrade(p) -> None:
    code = _rw_downgrade(p)
    if code:
        raise _error(code, "RWLock.downgrade")


class _Side:
    """A context manager for one side of an RWLock: ``with rw.read():``. It holds the lock's
    memory, not the lock (no reference cycle keeps a shared buffer exported)."""
    __slots__ = ("_cells", "_p", "_acquire", "_release")

    def __init__(self, cells: Any, p: c_void_p, acquire: Callable[..., bool], release: Callable[[Any], None]):
        self._cells, self._p, self._acquire, self._release = cells, p, acquire, release

    def __enter__(self) -> None:
        self._acquire(self._p)

    def __exit__(self, *exc: Any) -> None:
        self._release(self._p)


class RWLock(_Memory):
    """A writer-preferring read-write lock: many readers or one writer; while a writer waits,
    new readers wait, so writers never starve. A reader cannot upgrade (acquiring the write
    side while holding the read side waits forever); a writer can ``downgrade()`` to a reader
    without letting another writer in. 16 bytes of lock state (``SIZE``).

    Two interfaces: ``acquire_read``/``release_read``/``acquire_write``/``release_write``/
    ``downgrade`` and ``with rw.read():``/``with rw.write():`` on the lock itself; and
    readerwriterlock's, lock objects from ``gen_rlock()``/``gen_wlock()`` (``ReadLock``,
    ``WriteLock``).

    The write holder's own acquire of either side returns False when bounded (``blocking=False``
    or a timeout), at once, since its wait could only time out; unbounded, it raises
    DeadlockError (it would never return). Other misuse raises: NotOwnerError (release or
    downgrade of a side not held), LockError (too many readers; EINVAL for memory that does not
    hold a lock)."""
    __slots__ = ("_read", "_write")
    _WORDS = 4
    SIZE = 16

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        shared = self._place(buffer, offset)
        if initialize:
            _init(_rw_init, self._p, 1 if shared else 0)
        self._read = _Side(self._cells, self._p, _acquire_read, _release_read)
        self._write = _Side(self._cells, self._p, _acquire_write, _release_write)

    def acquire_read(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the read side; arguments and result as threading.Lock.acquire."""
        return _acquire_read(self._p, blocking, timeout)

    def release_read(self) -> None:
        """Releases the read side; NotOwnerError if no reader holds it."""
        _release_read(self._p)

    def acquire_write(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the write side; arguments and result as threading.Lock.acquire."""
        return _acquire_write(self._p, blocking, timeout)

    def release_write(self) -> None:
        """Releases the write side; NotOwnerError if the caller does not hold it."""
        _release_write(self._p)

    def downgrade(self) -> None:
        """Turns the caller's write side into a read side atomically: no writer gets in between,
        and waiting readers may join unless a writer waits. Release it with ``release_read()``.
        NotOwnerError if the caller does not hold the write side."""
        _downgrade(self._p)

    def read(self) -> _Side:
        """``with rw.read():`` holds the read side for the block."""
        return self._read

    def write(self) -> _Side:
        """``with rw.write():`` holds the write side for the block."""
        return self._write

    def gen_rlock(self) -> ReadLock:
        """A new read lock object on this lock (readerwriterlock's interface)."""
        return ReadLock(self)

    def gen_wlock(self) -> WriteLock:
        """A new write lock object on this lock (readerwriterlock's interface)."""
        return WriteLock(self)

    def waiting_writers(self) -> int:
        """How many writers wait (a snapshot, for diagnostics and tests)."""
        return _rw_waiting(self._p)


class ReadLock:
    """The read side of an RWLock as a lock object, readerwriterlock's ``gen_rlock()``:
    ``acquire(blocking, timeout)``, ``release()``, ``locked()`` and ``with``. ``locked()`` and
    ``release()`` concern the holds taken through this object; releasing one it does not hold
    raises RuntimeError("release unlocked lock"), as threading.Lock does."""
    __slots__ = ("_rwlock", "_p", "_holds")

    def __init__(self, rwlock: RWLock, holds: int = 0):
        self._rwlock, self._p = rwlock, rwlock._p
        self._holds = [None] * holds  # one item per hold: list append/pop are atomic, so threads may share it

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes a read lock; arguments and result as threading.Lock.acquire."""
        if not _acquire_read(self._p, blocking, timeout):
            return False
        self._holds.append(None)
        return True

    def release(self) -> None:
        """Releases a read lock taken through this object."""
        try:
            self._holds.pop()
        except IndexError:
            raise RuntimeError(_RELEASE_UNLOCKED) from None
        _release_read(self._p)

    def locked(self) -> bool:
        """Whether this object holds a read lock."""
        return bool(self._holds)

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()


class WriteLock:
    """The write side of an RWLock as a lock object, readerwriterlock's ``gen_wlock()``: as
    ReadLock, and ``downgrade()``."""
    __slots__ = ("_rwlock", "_p", "_holds")

    def __init__(self, rwlock: RWLock):
        self._rwlock, self._p = rwlock, rwlock._p
        self._holds: list = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the write lock; arguments and result as threading.Lock.acquire."""
        if not _acquire_write(self._p, blocking, timeout):
            return False
        self._holds.append(None)
        return True

    def release(self) -> None:
        """Releases the write lock taken through this object; NotOwnerError from another thread."""
        self._give_up(_release_write)

    def downgrade(self) -> ReadLock:
        """Turns the write lock held through this object into a read lock atomically (no writer
        gets in between) and returns the ReadLock that holds it."""
        self._give_up(_downgrade)
        return ReadLock(self._rwlock, 1)

    def _give_up(self, operation: Callable[[Any], None]) -> None:
        try:
            self._holds.pop()
        except IndexError:
            raise RuntimeError(_RELEASE_UNLOCKED) from None
        try:
            operation(self._p)
        except LockError:
            self._holds.append(None)  # still held (by the thread that took it)
            raise

    def locked(self) -> bool:
        """Whether this object holds the write lock."""
        return bool(self._holds)

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()


# ---- SpinLock ------------------------------------------------------------------------------

_spin_trylock = _c(_nonblocking, "sync_spinlock_trylock")
_spin_unlock = _c(_nonblocking, "sync_spinlock_unlock")
_spin_wait = _c(_blocking, "sync_spinlock_lock_interruptible")
_spin_take = _spin_trylock  # see _mutex_take


class SpinLock(_Memory):
    """libsync's spin lock (bounded spinning, then yielding and napping), owner-checked like
    Mutex. Needs no initialization, also in shared memory. 4 bytes."""
    __slots__ = ()

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        self._place(buffer, offset)
        if initialize:
            self._cells[0] = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout == -1 and blocking is True:
            if not _spin_take(self._p):
                return True
            return _wait(_spin_wait, self._p, _FOREVER, "SpinLock.acquire")
        deadline = _deadline(blocking, timeout)
        if (_spin_trylock if deadline is None else _spin_take)(self._p) == 0:
            return True
        if deadline is None:
            return False
        return _wait(_spin_wait, self._p, deadline, "SpinLock.acquire")

    def release(self) -> None:
        code = _spin_unlock(self._p)
        if code:
            raise _error(code, "SpinLock.release")

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()


# ---- once ----------------------------------------------------------------------------------

_once_begin = _c(_blocking, "sync_once_begin_interruptible")
_once_end = _c(_nonblocking, "sync_once_end")
_ONCE_RUN = -1


class Once:
    """Runs a function exactly once, however many threads race: ``o(f, *args)`` calls f the
    first time and returns its result; every later (or concurrent) call waits for that first
    call and returns the same result. If f raises, the exception propagates and the next call
    runs f again."""
    __slots__ = ("_word", "_p", "_result")

    def __init__(self):
        self._word = c_uint32(0)
        self._p = c_void_p(ctypes.addressof(self._word))
        self._result: Any = None

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        while True:
            state = _once_begin(self._p)
            if state == 0:
                return self._result
            if state == _ONCE_RUN:
                break
            if state != errno.EINTR:
                raise _error(state, "once")
        try:
            self._result = function(*args, **kwargs)
        except BaseException:
            _once_end(self._p, c_int(0))
            raise
        _once_end(self._p, c_int(1))
        return self._result

    @property
    def done(self) -> bool:
        """Whether the function has run to completion."""
        return self._word.value == 0x7FFFFFFF


def once(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: the first call runs `function` (with that call's arguments); every call
    returns the first successful call's result."""
    runner = Once()

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return runner(function, *args, **kwargs)
    wrapper.once = runner  # type: ignore[attr-defined]
    return wrapper


# ---- synchronized --------------------------------------------------------------------------

_sync_enter = _c(_blocking, "sync_synchronized_enter_interruptible")
_sync_exit = _c(_nonblocking, "sync_synchronized_exit")


class synchronized:
    """Objective-C's ``@synchronized(obj)``: a recursive lock that belongs to ``obj``'s identity,
    without creating a lock first. A context manager (``with synchronized(obj):``) and a
    decorator (``@synchronized(obj)``); released when the block raises. Lock only on objects
    you own: anyone else may lock on them too."""
    __slots__ = ("_object", "_token")

    def __init__(self, obj: Any):
        self._object = obj  # keeps obj alive, so its id stays its own while locked
        self._token = c_void_p(id(obj))

    def __enter__(self) -> None:
        _wait(_sync_enter, self._token, _FOREVER, "synchronized")

    def __exit__(self, *exc: Any) -> None:
        code = _sync_exit(self._token)
        if code:
            raise _error(code, "synchronized exit")

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)
        return wrapper
