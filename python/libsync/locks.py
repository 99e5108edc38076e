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
share (``Lock(buffer=shm, initialize=True)`` with a ``multiprocessing.shared_memory.SharedMemory``
or any writable buffer, at ``offset``); one process creates it with ``initialize=True``, the
others attach with ``initialize=False`` (or inherit it through fork, or receive it pickled, for
a SharedMemory). With a buffer, ``initialize`` must be given (TypeError otherwise), and
``initialize=True`` over a lock that is held or waited on raises LockError (EBUSY) instead of
resetting it. Without ``buffer`` the lock uses memory of its own; ``buffer=None`` (what a closed
SharedMemory's ``buf`` reads) or a closed SharedMemory raises ValueError.

Robust mode (``Mutex(buffer=shm, initialize=True, robust=True)``, also ``RLock``): when a
holder dies holding the lock (its thread exits, its process is killed), the next acquire raises
``OwnerDiedError`` *with the lock held*; repair the state the lock guards, call
``consistent()``, then ``release()``. Releasing without ``consistent()`` makes every
later acquire raise ``NotRecoverableError``::

    try:
        mutex.acquire()
    except OwnerDiedError:
        repair()
        mutex.consistent()
    try:
        ...
    finally:
        mutex.release()

A blocked acquire releases the GIL, and Ctrl-C interrupts it in the main thread.

Every lock here takes ``name=`` (``Lock(name="accounts")``): its name in lock-order reports and
the waits dump (libsync.debug), kept by libsync for the lock's memory (in a shared buffer, per
process); None gives none.
"""
from __future__ import annotations

import ctypes
import functools
import errno
import threading
from ctypes import POINTER, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, TypeVar

from ._common import (EBUSY, EDEADLK, ETIMEDOUT, FOREVER, DeadlockError, LockError, NotOwnerError,
                      NotRecoverableError, OwnerDiedError, acquire, acquired, check, declare, deprecated, error, init_error,
                      interruptible, layout, lock_deadline, wait, word, words)
from . import _aio, debug as _debug
from ._memory import PRIVATE, attach_choice, ref as _ref

if TYPE_CHECKING:
    from multiprocessing.shared_memory import SharedMemory

    class _SideAcquire(Protocol):
        """A side of an RWLock: acquire(p, blocking, timeout), as threading's acquire."""
        def __call__(self, p: c_void_p, blocking: bool = ..., timeout: float = ...) -> bool: ...

    _SideRelease = Callable[[c_void_p], None]  # release(p)

_M = TypeVar("_M", bound="_Memory")

__all__ = ["Lock", "RLock", "Mutex", "RWLock", "UpgradableRead", "SpinLock", "Once", "once", "synchronized",
           "LockError", "DeadlockError", "NotOwnerError", "OwnerDiedError", "NotRecoverableError"]


def _qualname(obj: Any) -> str:
    """The class name a repr shows, as threading's: module.name, where this package's modules
    are just "libsync" (so that `<\\w+\\.Name` matches, as for threading's classes)."""
    cls = type(obj)
    module = "libsync" if cls.__module__.startswith("libsync.") else cls.__module__
    return f"{module}.{cls.__qualname__}"


class _Memory:
    """Lock state in memory this object owns, or in a caller's (shared) buffer."""
    __slots__ = ("_cells", "_p", "_shm", "_offset", "_shared", "__weakref__")
    _WORDS = 1
    _cells: ctypes.Array[Any]  # 32-bit words (a robust lock: 64-bit ones)
    _p: c_void_p               # their address
    _shm: Optional[SharedMemory]
    _offset: int
    _shared: bool

    def _place(self, buffer: Any, offset: int, cells: Optional[type[ctypes.Array[Any]]] = None) -> bool:
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
            # (typeshed declares Array._type_ an instance property; the class has it: the element type)
            _ref(buffer, offset, cells._type_)  # type: ignore[arg-type]  # checks type, writability, range, alignment (and None)
            size = ctypes.sizeof(cells)
            try:
                _ref(buffer, offset + size - 4, c_uint32)  # the last word: the rest of the range
            except ValueError:
                with memoryview(buffer) as view:
                    raise ValueError(f"offset {offset} is out of range for a {size}-byte {type(self).__name__} "
                                     f"in a {view.nbytes}-byte buffer") from None
            self._cells = cells.from_buffer(buffer, offset)
        self._p = c_void_p(ctypes.addressof(self._cells))
        self._shared = buffer is not PRIVATE
        if _debug.tracking and not self._shared:  # lock-order checking: the orders go with the
            _debug.track(self)                       # memory (a shared lock outlives its wrappers)
        return self._shared

    def __reduce__(self) -> tuple[Callable[..., _Memory], tuple[Any, ...]]:
        if self._shm is None:
            raise TypeError(f"a {type(self).__name__} can be pickled only when it lives in a SharedMemory")
        return (_attach, (type(self), self._shm.name, self._offset) + self._attach_options())

    def _attach_options(self) -> tuple[dict[str, Any], ...]:
        """What __reduce__ passes on besides the memory: (), or (keyword arguments,)."""
        return ()


def _attach(cls: Callable[..., _M], name: str, offset: int, options: Optional[dict[str, Any]] = None) -> _M:
    from multiprocessing import shared_memory
    return cls(buffer=shared_memory.SharedMemory(name=name), offset=offset, initialize=False, **(options or {}))


def _init(function: Callable[..., int], pointer: c_void_p, flags: int, what: str = "init") -> None:
    code = function(pointer, c_int(flags))
    if code:
        raise init_error(code, what)


# ---- Lock, Mutex ---------------------------------------------------------------------------

_mutex_init = declare("sync_mutex_init")
_mutex_trylock = declare("sync_mutex_try_lock")
_mutex_trylock_first = declare("sync_mutex_try_lock_first")
_mutex_unlock = declare("sync_mutex_unlock")
_mutex_is_locked = declare("sync_mutex_is_locked")
_mutex_wait = declare("sync_mutex_lock_interruptible", blocking=True)
_mutex_consistent = declare("sync_mutex_consistent")
_SHARED, _UNOWNED, _ROBUST = layout.lock_shared, layout.lock_unowned, layout.lock_robust  # the init flags
_ROBUST_CELLS = c_uint64 * 2  # a robust lock's 16 bytes, 8-aligned


def _check_robust(cells: Any, robust: bool) -> None:
    """Attaching (initialize=False): `robust` must be what the creator chose, as it sizes the view."""
    if bool(words(cells)[0] & layout.mutex_robust) != robust:
        raise ValueError(f"the lock in this memory is {'not ' if robust else ''}robust: pass robust={not robust}")


class _Acquirable(_Memory):
    """A lock taken by a C try function (0, EBUSY, or an error) and its `_interruptible` wait,
    the class's _TRY and _WAIT; _WHAT names the acquire in errors. _TAKE is the try that opens a
    blocking acquire: the C `_trylock_first` form of _TRY (lock-order checking counts a lock
    taken at that first try as a lock, not as a trylock)."""
    __slots__ = ()
    # (the C functions: class attributes that do not bind, as ctypes functions are no methods)
    _TRY: Callable[[c_void_p], int]
    _TAKE: Callable[[c_void_p], int]
    _WAIT: Callable[..., int]
    _WHAT: str

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquires the lock, as threading's acquire: True if acquired, False on timeout or if
        non-blocking and held by another thread. Owner-checked locks raise DeadlockError for
        their holder's wait, and robust ones OwnerDiedError (held) or NotRecoverableError."""
        if blocking is True and timeout == -1:  # the common call: nothing to check, one C call
            code = self._TAKE(self._p)
            return not code or acquired(code, self._p, self._WAIT, FOREVER, self._WHAT)
        return acquire(self._p, self._TRY, self._WAIT, self._WHAT, blocking, timeout, self._TAKE)

    __enter__ = acquire


# The async forms (sync/async.h, docs/async.md): the first try takes the lock for an owner
# without a handle; only a lock that is held starts a pending acquire (awaited through _aio).
# The two calls of an uncontended `async with` take no argtypes: their callers pass ctypes
# objects (the lock's c_void_p, the owner as c_size_t), whose conversion costs less.
_mutex_try_lock_async = declare("sync_mutex_try_lock_async")
_mutex_lock_async = declare("sync_mutex_lock_async_owner", c_int, c_void_p, c_int64, c_int, c_void_p, c_void_p,
                            c_size_t, POINTER(c_void_p))
_mutex_unlock_async = declare("sync_mutex_unlock_async")
_ANY_OWNER = c_size_t(1)  # a Lock's: it records none, any nonzero one will do
_mutex_consistent_async = declare("sync_mutex_consistent_async", c_int, c_void_p, c_size_t)
_EBUSY, _EPERM, _ETIMEDOUT = errno.EBUSY, errno.EPERM, errno.ETIMEDOUT
_current_task = _aio._current_task
_aio_loops, _running_waits, _unlock_local = _aio._loops, _aio.running_waits, _aio.unlock_local


def _task_owner() -> int:
    """The running asyncio task's identity, or 0 outside one (a thread's call)."""
    task = _current_task()
    return 0 if task is None else id(task)


class Lock(_Acquirable):
    """threading.Lock, from libsync: any thread may release it. 4 bytes of lock state."""
    __slots__ = ()
    _FLAGS = _UNOWNED
    _TRY, _TAKE = _mutex_trylock, _mutex_trylock_first
    _WAIT = _mutex_wait

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: Optional[bool] = None,
                 name: Optional[str] = None):
        shared = self._place(buffer, offset)
        initialize = attach_choice(buffer, initialize, type(self).__name__)
        if initialize:
            _init(_mutex_init, self._p, self._FLAGS | (_SHARED if shared else 0), type(self).__name__)
        _debug.name_lock(self, name)

    def release(self) -> None:
        """Releases the lock; RuntimeError if it is not locked."""
        # A task of the running loop waiting for it is handed it without the eventfd's round
        # trip (_aio.unlock_local); otherwise one C call.
        waits = _running_waits() if _aio_loops else None
        if _mutex_unlock(self._p) if waits is None else _unlock_local(self._p, 0, waits):
            raise RuntimeError("release unlocked lock")

    def locked(self) -> bool:
        """Whether the lock is held (by anyone)."""
        return bool(_mutex_is_locked(self._p))

    def _at_fork_reinit(self) -> None:
        """After fork, in the child: unlocked, whoever held it (threading's protocol). In shared
        memory nothing changes: the word is every process's, and a holder in another process
        (the parent too) still holds it."""
        if not self._shared:
            _init(_mutex_init, self._p, self._FLAGS)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if _mutex_unlock(self._p):  # release()'s body: one Python frame less per `with`
            raise RuntimeError("release unlocked lock")

    acquire_lock, release_lock, locked_lock = _Acquirable.acquire, release, locked
    _WHAT = "Lock.acquire"

    # ---- asyncio ----
    # A Lock has no owner: the core records none (any task or thread may release it). The owner
    # passed to the C functions is then only nonzero.

    def _async_owner(self) -> int:
        return 1

    async def acquire_async(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquires the lock from an asyncio task, suspending the task (not the thread, not the
        loop) while it is held: as acquire(), the same arguments (timeout in seconds, -1 none,
        0 one try; threading's errors for the others) and result. Threads, tasks of any loop
        and other processes take turns on it. Cancelled while waiting, the task is withdrawn
        and the lock not taken (see docs/async.md); Mutex: as Mutex.acquire, OwnerDiedError
        and NotRecoverableError, and DeadlockError for the task that holds it."""
        owner = self._async_owner()
        limit: Optional[c_int64]
        if blocking is True and timeout == -1:
            limit = FOREVER
        else:
            limit = lock_deadline(blocking, timeout)
        code = _mutex_try_lock_async(self._p, c_size_t(owner))
        if code == _EBUSY and limit is not None:
            code = await self._wait_async(owner, limit)
        if not code:
            return True
        if code == _EBUSY or code == _ETIMEDOUT:
            return False
        raise error(code, self._WHAT + "_async", "task")

    async def _wait_async(self, owner: int, limit: c_int64) -> int:
        p = self._p
        code, _ = await _aio.acquire(lambda fd, handle: _mutex_lock_async(p, limit, fd, None, None, owner, handle),
                                     lambda handle: _mutex_unlock_async(p, c_size_t(owner)))
        return code

    async def __aenter__(self) -> bool:
        """``async with lock:``: acquire_async() for the block."""
        code = _mutex_try_lock_async(self._p, _ANY_OWNER)
        if code == _EBUSY:
            code = await self._wait_async(1, FOREVER)
        if code:
            raise error(code, self._WHAT + "_async", "task")
        return True

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        waits = _running_waits() if _aio_loops else None
        if _mutex_unlock(self._p) if waits is None else _unlock_local(self._p, 0, waits):
            raise RuntimeError("release unlocked lock")

    def __repr__(self) -> str:
        state = "locked" if self.locked() else "unlocked"
        return f"<{state} {_qualname(self)} object at {id(self):#x}>"


class _Robust(_Acquirable):
    """An owner-checked lock that may be robust (16 bytes, 8-aligned), initialized by _INIT."""
    __slots__ = ()
    _INIT: Callable[..., int]

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: Optional[bool] = None,
                 robust: bool = False, name: Optional[str] = None):
        shared = self._place(buffer, offset, _ROBUST_CELLS if robust else None)
        initialize = attach_choice(buffer, initialize, type(self).__name__)
        if initialize:
            _init(self._INIT, self._p, self._flags(shared), type(self).__name__)
        else:
            _check_robust(self._cells, robust)
        _debug.name_lock(self, name)

    def _flags(self, shared: bool) -> int:
        return (_SHARED if shared else 0) | (_ROBUST if self._robust() else 0)

    def _robust(self) -> bool:
        return isinstance(self._cells, _ROBUST_CELLS)

    def _attach_options(self) -> tuple[dict[str, Any], ...]:
        return ({"robust": True},) if self._robust() else ()

    def _at_fork_reinit(self) -> None:
        """After fork, in the child: unlocked, whoever held it (threading's protocol). In shared
        memory nothing changes, as for Lock."""
        if not self._shared:
            _init(self._INIT, self._p, self._flags(False))


class Mutex(_Robust, Lock):
    """An owner-checked mutex: acquire from the owning thread raises DeadlockError, release from
    another thread NotOwnerError. Otherwise as Lock.

    ``robust=True`` (16 bytes, 8-aligned): a holder's death is reported to the next acquire as
    OwnerDiedError, with the lock held; ``consistent()`` then ``release()`` (see the
    module's doc). In other processes pass ``robust=True, initialize=False`` too, or pickle it.
    """
    __slots__ = ()
    _INIT = _mutex_init
    _WHAT = "Mutex.acquire"

    def release(self) -> None:
        """Releases the lock; NotOwnerError if the caller does not hold it (the calling thread,
        or for a lock taken with acquire_async the calling task)."""
        code = _mutex_unlock(self._p)
        if code == _EPERM:  # a task's hold?
            owner = _task_owner()
            if owner:
                waits = _running_waits()
                code = _mutex_unlock_async(self._p, c_size_t(owner)) if waits is None else _unlock_local(self._p, owner, waits)
        if code:
            raise error(code, "Mutex.release")

    release_lock = release

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        code = _mutex_unlock(self._p)
        if code:
            raise error(code, "Mutex.release")

    def consistent(self) -> None:
        """Robust: the state the lock guards is repaired after OwnerDiedError, so that release()
        leaves the lock usable. NotOwnerError if the caller (thread, or task for a lock taken
        with acquire_async) does not hold it; LockError (EINVAL) if the lock is not robust or
        has nothing to repair."""
        code = _mutex_consistent(self._p)
        if code == _EPERM:
            owner = _task_owner()
            if owner:
                code = _mutex_consistent_async(self._p, owner)
        check(code, "Mutex.consistent")

    def mark_consistent(self) -> None:
        """Deprecated (DeprecationWarning): consistent()."""
        deprecated("Mutex.mark_consistent()", "consistent()")
        self.consistent()

    def is_owner(self) -> bool:
        """Whether the calling thread holds it."""
        return bool(_mutex_is_owner(self._p))

    # ---- asyncio: the holder is the task (its identity), as a thread holds the blocking form.

    def _async_owner(self) -> int:
        task = _current_task()
        if task is None:
            raise RuntimeError(f"{self._WHAT}_async must run in an asyncio task")
        return id(task)

    async def __aenter__(self) -> bool:
        """``async with mutex:``: acquire_async() for the block, held by the task."""
        task = _current_task()
        if task is None:
            raise RuntimeError(f"{self._WHAT}_async must run in an asyncio task")
        owner = id(task)
        code = _mutex_try_lock_async(self._p, c_size_t(owner))
        if code == _EBUSY:
            code = await self._wait_async(owner, FOREVER)
        if code:
            raise error(code, self._WHAT + "_async", "task")
        return True

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        waits = _running_waits() if _aio_loops else None
        owner = id(_current_task())
        code = _mutex_unlock_async(self._p, c_size_t(owner)) if waits is None else _unlock_local(self._p, owner, waits)
        if code:
            raise error(code, "Mutex.release", "task")

    def owned(self) -> bool:
        """Deprecated (DeprecationWarning): is_owner()."""
        deprecated("Mutex.owned()", "is_owner()")
        return bool(_mutex_is_owner(self._p))


_mutex_is_owner = declare("sync_mutex_is_owner")


# ---- RLock ---------------------------------------------------------------------------------

_rlock_init = declare("sync_recursive_lock_init")
_rlock_trylock = declare("sync_recursive_lock_try_lock")
_rlock_trylock_first = declare("sync_recursive_lock_try_lock_first")
_rlock_unlock = declare("sync_recursive_lock_unlock")
_rlock_depth = declare("sync_recursive_lock_depth", c_uint32)
_rlock_wait = declare("sync_recursive_lock_lock_interruptible", blocking=True)
_rlock_consistent = declare("sync_recursive_lock_consistent")
_rlock_release_save = declare("sync_recursive_lock_release_save")
_rlock_restore = declare("sync_recursive_lock_restore_interruptible", blocking=True)
_DEPTH, _ROBUST_DEPTH = word(layout.recursive_depth_offset), word(layout.robust_recursive_depth_offset)


class RLock(_Robust):
    """threading.RLock, from libsync: the owner may acquire again; each acquire balanced by a
    release; release by another thread raises RuntimeError. As threading's, an RLock (in private
    memory, not robust) held by the thread that calls fork() is still held by the child's thread,
    which may release it. 8 bytes of lock state.

    ``robust=True`` (16 bytes, 8-aligned), as Mutex's: OwnerDiedError leaves the caller holding
    it once; ``consistent()`` then ``release()``."""
    __slots__ = ()
    _WORDS = 2
    _INIT, _WAIT = _rlock_init, _rlock_wait
    _TRY, _TAKE = _rlock_trylock, _rlock_trylock_first
    _WHAT = "RLock.acquire"

    def release(self) -> None:
        """Releases one level of the lock; RuntimeError if the calling thread does not hold it."""
        if _rlock_unlock(self._p):
            raise RuntimeError("cannot release un-acquired lock")

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if _rlock_unlock(self._p):
            raise RuntimeError("cannot release un-acquired lock")

    def consistent(self) -> None:
        """Robust: as Mutex.consistent."""
        check(_rlock_consistent(self._p), "RLock.consistent")

    def mark_consistent(self) -> None:
        """Deprecated (DeprecationWarning): consistent()."""
        deprecated("RLock.mark_consistent()", "consistent()")
        check(_rlock_consistent(self._p), "RLock.consistent")

    # threading.Condition's protocol for recursive locks.
    def _is_owned(self) -> bool:
        """Whether the calling thread holds it."""
        return _rlock_depth(self._p) > 0

    def _recursion_count(self) -> int:
        """How many times the calling thread holds it (0: not at all)."""
        return _rlock_depth(self._p)

    def _release_save(self) -> int:
        """Releases it entirely, however deep, in one call; returns the depth for _acquire_restore."""
        depth = c_uint32()
        if _rlock_release_save(self._p, ctypes.byref(depth)):
            raise RuntimeError("cannot release un-acquired lock")
        return depth.value

    def _acquire_restore(self, depth: int) -> None:
        """Takes it again at the depth _release_save returned, in one call."""
        wait(_rlock_restore, self._p, c_uint32(depth), FOREVER, what="RLock._acquire_restore")

    def __repr__(self) -> str:
        # threading's format, without the owner (the word keeps a kernel id, not threading's ident).
        locked = _mutex_is_locked(self._p)
        depth = _ROBUST_DEPTH if self._robust() else _DEPTH  # the holder's depth
        count = words(self._cells)[depth] if locked else 0
        return f"<{'locked' if locked else 'unlocked'} {_qualname(self)} object count={count} at {id(self):#x}>"


# ---- RWLock --------------------------------------------------------------------------------

_rw_init = declare("sync_rwlock_init")
_rw_tryrd = declare("sync_rwlock_try_rdlock")
_rw_tryrd_first = declare("sync_rwlock_try_rdlock_first")
_rw_rdunlock = declare("sync_rwlock_rdunlock")
_rw_rdwait = declare("sync_rwlock_rdlock_interruptible", blocking=True)
_rw_trywr = declare("sync_rwlock_try_wrlock")
_rw_trywr_first = declare("sync_rwlock_try_wrlock_first")
_rw_wrunlock = declare("sync_rwlock_wrunlock")
_rw_wrwait = declare("sync_rwlock_wrlock_interruptible", blocking=True)
_rw_downgrade = declare("sync_rwlock_downgrade")
_rw_waiting = declare("sync_rwlock_waiting_writers", c_uint32)
_rw_tryup = declare("sync_rwlock_try_uprdlock")
_rw_tryup_first = declare("sync_rwlock_try_uprdlock_first")
_rw_upunlock = declare("sync_rwlock_uprdunlock")
_rw_upwait = declare("sync_rwlock_uprdlock_interruptible", blocking=True)
_rw_tryupgrade = declare("sync_rwlock_try_upgrade")
_rw_upgradewait = declare("sync_rwlock_upgrade_interruptible", blocking=True)
_rw_uprd_downgrade = declare("sync_rwlock_uprd_downgrade")
_rw_downgrade_to_uprd = declare("sync_rwlock_downgrade_to_uprd")
_rw_wruntil = declare("sync_rwlock_wrlock_until")     # a passed deadline: one try, EDEADLK, no sleep
_rw_upuntil = declare("sync_rwlock_uprdlock_until")
_PAST = c_int64(0)  # a deadline long gone
_RELEASE_UNLOCKED = "release unlocked lock"  # threading.Lock's message
# The async forms (sync/async.h): held for the task (its identity), as the Mutex's; a read lock
# is nobody's (sync_rwlock_rdunlock releases it), the write lock the task's.
_rw_rdlock_async = declare("sync_rwlock_rdlock_async_owner", c_int, c_void_p, c_int64, c_int, c_void_p, c_void_p,
                           c_size_t, POINTER(c_void_p))
_rw_wrlock_async = declare("sync_rwlock_wrlock_async_owner", c_int, c_void_p, c_int64, c_int, c_void_p, c_void_p,
                           c_size_t, POINTER(c_void_p))
_rw_wrunlock_async = declare("sync_rwlock_wrunlock_async", c_int, c_void_p, c_size_t)
_rw_downgrade_async = declare("sync_rwlock_downgrade_async", c_int, c_void_p, c_size_t)


async def _rw_acquire_async(p: c_void_p, write: bool, blocking: bool, timeout: float) -> bool:
    """A side's acquire from an asyncio task, as the blocking side's (arguments, result, the
    write holder's own acquire: False when bounded, DeadlockError when not)."""
    bounded = not (blocking is True and timeout == -1)
    limit = lock_deadline(blocking, timeout) if bounded else FOREVER
    owner = _aio.owner()
    start = _rw_wrlock_async if write else _rw_rdlock_async
    deadline = _PAST if limit is None else limit  # not blocking: one try
    if write:
        def give_back(handle: c_void_p) -> Any:
            return _rw_wrunlock_async(p, owner)
    else:
        def give_back(handle: c_void_p) -> Any:
            return _rw_rdunlock(p)
    code, _ = await _aio.acquire(lambda fd, handle: start(p, deadline, fd, None, None, owner, handle), give_back)
    if not code:
        return True
    if code == ETIMEDOUT or (code == EDEADLK and bounded):
        return False
    raise error(code, f"RWLock.acquire_{'write' if write else 'read'}_async", "task")


def _release_write(p: c_void_p) -> None:
    """Releases the write side that the calling thread holds, or else the calling task."""
    code, owner = _rw_wrunlock(p), 0
    if code == _EPERM:  # a task's hold?
        owner = _task_owner()
        if owner:
            code = _rw_wrunlock_async(p, owner)
    if code:
        raise error(code, "RWLock.release_write", "task" if owner else "thread")


def _downgrade(p: c_void_p) -> None:
    """Downgrades the write side that the calling thread holds, or else the calling task."""
    code, owner = _rw_downgrade(p), 0
    if code == _EPERM:
        owner = _task_owner()
        if owner:
            code = _rw_downgrade_async(p, owner)
    if code:
        raise error(code, "RWLock.downgrade", "task" if owner else "thread")


def _owned_wait(code: int, p: c_void_p, wait_function: Callable[..., int], limit: Optional[c_int64], what: str,
                undo: Optional[Callable[[c_void_p], int]],
                first_look: Optional[Callable[[c_void_p, c_int64], int]] = None) -> bool:
    """``acquired`` for a hold known by its thread (the write side, the upgradable read, an
    upgrade), `undo` giving it back (it returns EPERM, changing nothing, if the caller does not
    hold it). A signal handler's exception (Ctrl-C's KeyboardInterrupt) is raised as the wait's
    C call returns, also when that call took the lock: `undo` then gives it back before the
    exception goes on, so that no lock is left held with nothing to release it. `first_look`,
    the side's `_until` form called holding the GIL with a passed deadline (one try, no sleep),
    raises EDEADLK (the caller held it before the wait) outside that guard, so that the undo
    never releases a hold the caller had (None: the caller has made sure of that)."""
    if code != EBUSY or limit is None or undo is None:
        return acquired(code, p, wait_function, limit, what)
    if first_look is not None:
        code = first_look(p, _PAST)
        if code != ETIMEDOUT:
            return not code or acquired(code, p, wait_function, None, what)
    try:
        return wait(wait_function, p, limit, what=what)
    except LockError:  # the wait's own code: it took nothing
        raise
    except BaseException:
        undo(p)
        raise


def _rw_bounded(p: c_void_p, try_lock: Callable[[c_void_p], int], take: Callable[[c_void_p], int],
                wait_function: Callable[..., int], what: str, blocking: bool, timeout: float,
                undo: Optional[Callable[[c_void_p], int]] = None,
                first_look: Optional[Callable[[c_void_p, c_int64], int]] = None) -> bool:
    """A side's acquire with a timeout or non-blocking. The write holder's own attempt returns
    False at once: its wait could only time out (the C functions say EBUSY or EDEADLK)."""
    try:
        limit = lock_deadline(blocking, timeout)
        code = (try_lock if limit is None else take)(p)
        return not code or _owned_wait(code, p, wait_function, limit, what, undo, first_look)
    except DeadlockError:
        return False


def _side(name: str, try_lock: Callable[[c_void_p], int], take: Callable[[c_void_p], int],
          wait_function: Callable[..., int], unlock: Callable[[c_void_p], int],
          first_look: Optional[Callable[[c_void_p, c_int64], int]] = None) -> tuple[_SideAcquire, _SideRelease]:
    """The acquire(p, blocking, timeout) and release(p) of the side `name` of an RWLock; `take`
    is the first try of a blocking acquire (the `_trylock_first` form of `try_lock`). A side
    known by its thread has its `_until` form as `first_look`: a wait cut off by a signal
    handler's exception after it took the side gives it back (``_owned_wait``); plain readers
    are not tracked."""
    acquiring, releasing = f"RWLock.acquire_{name}", f"RWLock.release_{name}"
    undo = unlock if first_look is not None else None

    def acquire_side(p: c_void_p, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout == -1 and blocking is True:  # the common call: one C call
            code = take(p)
            return not code or _owned_wait(code, p, wait_function, FOREVER, acquiring, undo, first_look)
        return _rw_bounded(p, try_lock, take, wait_function, acquiring, blocking, timeout, undo, first_look)

    def release_side(p: c_void_p) -> None:
        code = unlock(p)
        if code:
            raise error(code, releasing)
    return acquire_side, release_side


_acquire_read, _release_read = _side("read", _rw_tryrd, _rw_tryrd_first, _rw_rdwait, _rw_rdunlock)
_acquire_write, _release_thread_write = _side("write", _rw_trywr, _rw_trywr_first, _rw_wrwait, _rw_wrunlock,
                                              _rw_wruntil)
_acquire_upgradable, _release_upgradable = _side("upgradable", _rw_tryup, _rw_tryup_first, _rw_upwait,
                                                 _rw_upunlock, _rw_upuntil)


def _upgrade(p: c_void_p, blocking: bool = True, timeout: float = -1) -> bool:
    limit = lock_deadline(blocking, timeout)
    code = _rw_tryupgrade(p)
    if code == EDEADLK:
        raise DeadlockError("RWLock.upgrade: the calling thread does not hold the upgradable read (a plain "
                            "reader's upgrade would wait for itself; after an upgrade it holds the write side)", code)
    # The caller is the upgradable reader (else EDEADLK above), not the writer: an interrupted
    # upgrade that took the write side turns it back into the upgradable read it kept.
    return not code or _owned_wait(code, p, _rw_upgradewait, limit, "RWLock.upgrade", _rw_downgrade_to_uprd)


def _downgrade_upgradable(p: c_void_p) -> None:
    check(_rw_uprd_downgrade(p), "RWLock.downgrade_upgradable")


def _downgrade_to_upgradable(p: c_void_p) -> None:
    check(_rw_downgrade_to_uprd(p), "RWLock.downgrade_to_upgradable")


# The ``with rw.upgradable()`` blocks the calling thread is in, innermost last: [lock address,
# plain reads the thread took on that lock inside the block less those it released there, never
# below 0]. Plain readers are counted, not tracked per thread, so the block's end cannot ask the
# lock whether the caller still holds the read side its block downgraded to; it counts instead
# (RWLock's own read calls), as Swift's withUpgradableReadLock does.
_upgradable_blocks = threading.local()


def _count_read(p: c_void_p, delta: int) -> None:
    """Counts a plain read taken (+1) or released (-1) on the lock at `p` in the calling
    thread's innermost ``with rw.upgradable()`` block on it, if it is in one."""
    blocks: Optional[list[list[int]]] = getattr(_upgradable_blocks, "blocks", None)
    if blocks:
        for block in reversed(blocks):
            if block[0] == p.value:
                block[1] = max(0, block[1] + delta)
                return


_RELEASED_INSIDE = ("RWLock.upgradable: the block released the lock itself (the caller holds neither the "
                    "upgradable read nor the write side, nor a read side it downgraded to); release nothing "
                    "inside the block, its end releases whichever side the caller holds")


class UpgradableRead:
    """``with rw.upgradable() as guard:`` holds the upgradable read of ``rw`` for the block;
    ``guard.upgrade()`` turns it into the write side with no release in between,
    ``guard.downgrade()`` into a plain read side, ``guard.downgrade_to_upgradable()`` a write
    side back; the block's end releases the side held then (``guard.mode``: "upgradable",
    "write" or "read"). One thread's: the holder is known by its thread. A block that released
    the side itself raises NotOwnerError at its end, releasing nothing (a release of the read
    side would take another reader's away)."""
    __slots__ = ("_cells", "_p", "mode", "_block")

    def __init__(self, cells: Any, p: c_void_p):
        self._cells, self._p, self.mode = cells, p, ""
        self._block: list[int] = []

    def __enter__(self) -> UpgradableRead:
        _acquire_upgradable(self._p)
        self.mode = "upgradable"
        self._block = [self._p.value or 0, 0]
        blocks: Optional[list[list[int]]] = getattr(_upgradable_blocks, "blocks", None)
        if blocks is None:
            blocks = _upgradable_blocks.blocks = []
        blocks.append(self._block)
        return self

    def upgrade(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As ``RWLock.upgrade``."""
        if not _upgrade(self._p, blocking, timeout):
            return False
        self.mode = "write"
        return True

    def downgrade(self) -> None:
        """The upgradable read, or the write side, becomes a plain read side atomically."""
        (_downgrade_upgradable if self.mode == "upgradable" else _downgrade)(self._p)
        self.mode = "read"
        self._block[1] += 1

    def downgrade_to_upgradable(self) -> None:
        """The write side (after ``upgrade()``) becomes the upgradable read atomically."""
        _downgrade_to_upgradable(self._p)
        self.mode = "upgradable"

    def __exit__(self, *exc: Any) -> None:
        mode, self.mode = self.mode, ""
        blocks: list[list[int]] = _upgradable_blocks.blocks
        blocks.remove(self._block)
        if mode == "read":
            if self._block[1] == 0:
                raise NotOwnerError(_RELEASED_INSIDE, _EPERM)
            _release_read(self._p)
            return
        try:
            (_release_upgradable if mode == "upgradable" else _release_write)(self._p)
        except NotOwnerError:
            # The block changed the side through the lock's own calls: a read side it
            # downgraded to is released; else it released the side itself.
            if mode == "upgradable" and self._block[1] > 0:
                _release_read(self._p)
                return
            raise NotOwnerError(_RELEASED_INSIDE, _EPERM) from None


class _Side:
    """A context manager for one side of an RWLock: ``with rw.read():`` in a thread,
    ``async with rw.read():`` in an asyncio task. It holds the lock's memory, not the lock (no
    reference cycle keeps a shared buffer exported)."""
    __slots__ = ("_cells", "_p", "_acquire", "_release", "_write")

    def __init__(self, cells: Any, p: c_void_p, acquire: Callable[..., bool], release: Callable[[Any], None],
                 write: bool):
        self._cells, self._p, self._acquire, self._release, self._write = cells, p, acquire, release, write

    def __enter__(self) -> None:
        self._acquire(self._p)

    def __exit__(self, *exc: Any) -> None:
        self._release(self._p)

    async def __aenter__(self) -> None:
        await _rw_acquire_async(self._p, self._write, True, -1)

    async def __aexit__(self, *exc: Any) -> None:
        if not self._write:
            code = _rw_rdunlock(self._p)
            if code:
                raise error(code, "RWLock.release_read")
            return
        code = _rw_wrunlock_async(self._p, _task_owner())
        if code:
            raise error(code, "RWLock.release_write", "task")


class RWLock(_Memory):
    """A writer-preferring read-write lock: many readers or one writer; while a writer waits,
    new readers wait, so writers never starve. A plain reader cannot upgrade (acquiring the
    write side while holding the read side waits forever); a writer can ``downgrade()`` to a
    reader without letting another writer in. The upgradable read (``acquire_upgradable()``,
    ``with rw.upgradable() as guard:``) is held by one thread at a time beside plain readers,
    and ``upgrade()`` turns it into the write side with no release in between. 16 bytes of lock
    state (``SIZE``).

    Two interfaces: ``acquire_read``/``release_read``/``acquire_write``/``release_write``/
    ``downgrade`` and ``with rw.read():``/``with rw.write():`` on the lock itself; and
    readerwriterlock's, lock objects from ``gen_rlock()``/``gen_wlock()`` (``ReadLock``,
    ``WriteLock``).

    The write holder's own acquire of either side returns False when bounded (``blocking=False``
    or a timeout), at once, since its wait could only time out; unbounded, it raises
    DeadlockError (it would never return); so does the upgradable reader's acquire of the
    write side or of the upgradable read. ``upgrade()`` from a thread that is not the
    upgradable reader (a plain reader, or after an upgrade) raises DeadlockError, bounded or
    not. Other misuse raises: NotOwnerError (release or downgrade of a side not held),
    LockError (too many readers; EINVAL for memory that does not hold a lock)."""
    __slots__ = ("_read", "_write")
    _WORDS = 4
    SIZE = 16

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: Optional[bool] = None,
                 name: Optional[str] = None):
        shared = self._place(buffer, offset)
        initialize = attach_choice(buffer, initialize, "RWLock")
        if initialize:
            _init(_rw_init, self._p, 1 if shared else 0, "RWLock")
        self._read = _Side(self._cells, self._p, _acquire_read, _release_read, False)
        self._write = _Side(self._cells, self._p, _acquire_write, _release_thread_write, True)
        _debug.name_lock(self, name)

    def acquire_read(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the read side; arguments and result as threading.Lock.acquire."""
        taken = _acquire_read(self._p, blocking, timeout)
        if taken:
            _count_read(self._p, 1)
        return taken

    def release_read(self) -> None:
        """Releases the read side; NotOwnerError if no reader holds it."""
        _release_read(self._p)
        _count_read(self._p, -1)

    def acquire_write(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the write side; arguments and result as threading.Lock.acquire."""
        return _acquire_write(self._p, blocking, timeout)

    def release_write(self) -> None:
        """Releases the write side; NotOwnerError if the caller (the calling thread, or for a
        side taken with acquire_write_async the calling task) does not hold it."""
        _release_write(self._p)

    def downgrade(self) -> None:
        """Turns the caller's write side (the calling thread's, or the calling task's) into a
        read side atomically: no writer gets in between, and waiting readers may join unless a
        writer waits. Release it with ``release_read()``. NotOwnerError if the caller does not
        hold the write side."""
        _downgrade(self._p)
        _count_read(self._p, 1)

    # ---- asyncio (docs/async.md): the write side is held by the task, a read side by nobody.

    async def acquire_read_async(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the read side from an asyncio task, suspending the task (not the loop) while a
        writer holds or waits: as acquire_read() (arguments, result, errors), the task's own
        write side included. Release it with ``release_read()``. Cancelled while waiting, the
        task is withdrawn holding nothing."""
        return await _rw_acquire_async(self._p, False, blocking, timeout)

    async def acquire_write_async(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the write side from an asyncio task, as acquire_write(): the task holds it (it
        releases it with ``release_write()`` or ``downgrade()``s it, on any thread; anyone else
        gets NotOwnerError). Cancelled while waiting, the task is withdrawn holding nothing."""
        return await _rw_acquire_async(self._p, True, blocking, timeout)

    def acquire_upgradable(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the upgradable read: waits while a writer holds or waits, or another thread
        holds the upgradable read; arguments and result as threading.Lock.acquire."""
        return _acquire_upgradable(self._p, blocking, timeout)

    def release_upgradable(self) -> None:
        """Releases the caller's upgradable read; NotOwnerError if it does not hold it."""
        _release_upgradable(self._p)

    def upgrade(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Turns the caller's upgradable read into the write side, with no release in between
        (no writer gets in first): waits for the plain readers to leave, new readers waiting
        meanwhile. False (``blocking=False``, or the timeout passed): the caller still holds the
        upgradable read. DeadlockError if the caller is not the upgradable reader."""
        return _upgrade(self._p, blocking, timeout)

    def downgrade_upgradable(self) -> None:
        """Turns the caller's upgradable read into a plain read side atomically (another
        thread may then take the upgradable read). NotOwnerError if it does not hold it."""
        _downgrade_upgradable(self._p)
        _count_read(self._p, 1)

    def downgrade_to_upgradable(self) -> None:
        """Turns the caller's write side into the upgradable read atomically (no writer gets in
        between). NotOwnerError if the caller does not hold the write side."""
        _downgrade_to_upgradable(self._p)

    def upgradable(self) -> UpgradableRead:
        """``with rw.upgradable() as guard:`` holds the upgradable read for the block (see
        UpgradableRead)."""
        return UpgradableRead(self._cells, self._p)

    def read(self) -> _Side:
        """``with rw.read():`` holds the read side for the block; ``async with rw.read():`` in
        an asyncio task."""
        return self._read

    def write(self) -> _Side:
        """``with rw.write():`` holds the write side for the block; ``async with rw.write():``
        in an asyncio task (held by the task)."""
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


class _SideLock:
    """One side of an RWLock as a lock object, taken by _TAKE; it counts the holds taken through
    it in _holds (one item per hold: list append/pop are atomic, so threads may share it)."""
    __slots__ = ("_rwlock", "_p", "_holds")
    _rwlock: RWLock
    _p: c_void_p
    _holds: list[None]

    if TYPE_CHECKING:  # each side's (ReadLock's, WriteLock's)
        _TAKE: staticmethod[[c_void_p, bool, float], bool]

        def release(self) -> None: ...

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the side; arguments and result as threading.Lock.acquire."""
        if not self._TAKE(self._p, blocking, timeout):
            return False
        self._holds.append(None)
        return True

    def locked(self) -> bool:
        """Whether this object holds the side."""
        return bool(self._holds)

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()


class ReadLock(_SideLock):
    """The read side of an RWLock as a lock object, readerwriterlock's ``gen_rlock()``:
    ``acquire(blocking, timeout)``, ``release()``, ``locked()`` and ``with``. ``locked()`` and
    ``release()`` concern the holds taken through this object; releasing one it does not hold
    raises RuntimeError("release unlocked lock"), as threading.Lock does."""
    __slots__ = ()
    _TAKE = staticmethod(_acquire_read)

    def __init__(self, rwlock: RWLock, holds: int = 0):
        self._rwlock, self._p = rwlock, rwlock._p
        self._holds = [None] * holds

    def release(self) -> None:
        """Releases a read lock taken through this object."""
        try:
            self._holds.pop()
        except IndexError:
            raise RuntimeError(_RELEASE_UNLOCKED) from None
        _release_read(self._p)


class WriteLock(_SideLock):
    """The write side of an RWLock as a lock object, readerwriterlock's ``gen_wlock()``: as
    ReadLock, and ``downgrade()``."""
    __slots__ = ()
    _TAKE = staticmethod(_acquire_write)

    def __init__(self, rwlock: RWLock):
        self._rwlock, self._p = rwlock, rwlock._p
        self._holds = []

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


# ---- SpinLock ------------------------------------------------------------------------------

_spin_init = declare("sync_spinlock_init")
_spin_trylock = declare("sync_spinlock_try_lock")
_spin_trylock_first = declare("sync_spinlock_try_lock_first")
_spin_unlock = declare("sync_spinlock_unlock")
_spin_wait = declare("sync_spinlock_lock_interruptible", blocking=True)


class SpinLock(_Acquirable):
    """libsync's spin lock (bounded spinning, then yielding and napping), owner-checked like
    Mutex. 4 bytes. In a caller's buffer (shared memory) it is process-shared, like Mutex: one
    process passes ``initialize=True``, the others ``initialize=False``; its owner checks then hold
    across processes (a thread that got a dead holder's thread id is not taken for the holder)."""
    __slots__ = ()
    _TRY, _TAKE = _spin_trylock, _spin_trylock_first
    _WAIT = _spin_wait
    _WHAT = "SpinLock.acquire"

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: Optional[bool] = None,
                 name: Optional[str] = None):
        shared = self._place(buffer, offset)
        initialize = attach_choice(buffer, initialize, "SpinLock")
        if initialize:
            _init(_spin_init, self._p, 1 if shared else 0, "SpinLock")
        _debug.name_lock(self, name)

    def release(self) -> None:
        """Releases the lock; NotOwnerError if the calling thread does not hold it."""
        code = _spin_unlock(self._p)
        if code:
            raise error(code, "SpinLock.release")

    def __exit__(self, *exc: Any) -> None:
        self.release()


# ---- once ----------------------------------------------------------------------------------

_once_begin = declare("sync_once_begin_interruptible", blocking=True)
_once_end = declare("sync_once_end")
_ONCE_DONE = layout.once_done
_ONCE_RUN = -1  # SYNC_ONCE_RUN: the caller runs the function


class Once:
    """Runs a function exactly once, however many threads race: ``o(f, *args)`` calls f the
    first time and returns its result; every later (or concurrent) call waits for that first
    call and returns the same result. If f raises, the exception propagates and the next call
    runs f again."""
    __slots__ = ("_word", "_p", "_result")

    def __init__(self) -> None:
        self._word = c_uint32(0)
        self._p = c_void_p(ctypes.addressof(self._word))
        self._result: Any = None

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``function(*args, **kwargs)`` if no call has completed yet, else waits for the
        running one; returns the first successful call's result."""
        state = interruptible(_once_begin, self._p)
        if state == 0:
            return self._result
        if state != _ONCE_RUN:
            raise error(state, "once")
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
        return self._word.value == _ONCE_DONE


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

_sync_enter = declare("sync_synchronized_enter_interruptible", blocking=True)
_sync_exit = declare("sync_synchronized_exit")


class synchronized:
    """Objective-C's ``@synchronized(obj)``: a recursive lock that belongs to ``obj``'s identity,
    without creating a lock first. A context manager (``with synchronized(obj):``) and a
    decorator (``@synchronized(obj)``); released when the block raises. Lock only on objects
    you own: anyone else may lock on them too."""
    __slots__ = ("_object", "_token")

    def __init__(self, obj: Any, *, name: Optional[str] = None):
        self._object = obj  # keeps obj alive, so its id stays its own while locked
        self._token = c_void_p(id(obj))
        _debug.name_lock(self, name, id(obj))  # the name of obj's lock, as long as obj's id is its own

    def __enter__(self) -> None:
        wait(_sync_enter, self._token, FOREVER, what="synchronized")

    def __exit__(self, *exc: Any) -> None:
        code = _sync_exit(self._token)
        if code:
            raise error(code, "synchronized exit")

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: ``function`` runs holding the object's lock."""
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)
        return wrapper


# ---- Guarded: a value and the Mutex that guards it ------------------------------------------

class _GuardedMutex(Mutex):
    __slots__ = ()
    _WHAT = "Guarded"


class Guarded:
    """A mutable value and the owner-checked ``Mutex`` that guards it (Swift's
    ``SyncLockedValue``): ``with guarded as value:`` holds the lock for the block and gives the
    value, released when the block ends or raises::

        hits = Guarded({})
        with hits as table:
            table["home"] = table.get("home", 0) + 1

    The value must be one that changes in place (a list, dict, set, or an object with
    attributes): an int or str could not be changed through the ``as`` name, so TypeError.
    The value must not escape the block: a reference kept after it is used without the lock.
    Entering the same ``Guarded`` again inside its block, on the same thread, raises
    DeadlockError instead of hanging.
    """
    __slots__ = ("_value", "_lock")
    _IMMUTABLE = (int, float, complex, str, bytes, tuple, frozenset, range, type(None))

    def __init__(self, value: Any):
        if isinstance(value, self._IMMUTABLE):
            raise TypeError(f"Guarded needs a value that changes in place (a list, dict, set or object), "
                            f"not {type(value).__name__}")
        self._value = value
        self._lock = _GuardedMutex()

    def __enter__(self) -> Any:
        self._lock.acquire()
        return self._value

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self._lock.release()

    def __repr__(self) -> str:
        return f"<{_qualname(self)} of {type(self._value).__name__} at {id(self):#x}>"


__all__ += ["Guarded"]
