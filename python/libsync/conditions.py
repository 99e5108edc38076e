"""Conditions and signalling from libsync.so: drop-in ``Condition``, ``Semaphore``,
``BoundedSemaphore``, ``Event`` and ``Barrier`` for threading's, and ``ConditionLock``
(Foundation's NSConditionLock).

The threading drop-ins take the same arguments, return the same values, raise the same
exceptions and keep the same guarantees as threading's (``BrokenBarrierError`` *is*
``threading.BrokenBarrierError``): ``Condition`` never wakes spuriously and ``notify(n)`` wakes
exactly ``min(n, waiting)`` threads, oldest first; every thread waiting when ``Event.set()`` is
called returns True, even if ``clear()`` follows at once. ``Condition`` works with any lock, as
threading's: this package's ``Lock``, ``RLock`` (the default) and ``Mutex`` take a one-call fast
path, other locks (``threading.Lock``, ``multiprocessing`` locks, a class with ``acquire`` and
``release``) are used through ``_is_owned``/``_release_save``/``_acquire_restore`` when they have
them. Waits release the GIL, and Ctrl-C interrupts them in the main thread.

Shared memory: ``Semaphore``, ``BoundedSemaphore``, ``Event``, ``Barrier`` and ``ConditionLock``
can live in a buffer that processes share, as the locks can:
``Event(buffer=shm, offset=0, initialize=True)`` with a
``multiprocessing.shared_memory.SharedMemory`` (then the object can be pickled to other
processes) or any writable buffer. With a buffer, ``initialize`` must be given: True in the
process that creates the object, False in the processes that attach to it (TypeError
otherwise: an initialize would reset the count, the flag or the parties another process
relies on). ``initialize=True`` over an object that threads wait on raises LockError (EBUSY).
``SIZE`` is the number of bytes each needs.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import threading
import time
from ctypes import POINTER, byref, c_bool, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Callable, Optional, Union

from ._common import (ETIMEDOUT, check, deadline as _deadline, declare, error, init_error, interruptible, layout,
                      lock_deadline, wait, word, words as _words)
from ._common import NotOwnerError  # noqa: F401 (what ConditionLock raises, importable here)
from ._memory import PRIVATE, attach_choice
from . import _aio, debug as _debug
from .locks import Lock, Mutex, RLock, _Memory, _qualname

__all__ = ["Condition", "ConditionLock", "Semaphore", "BoundedSemaphore", "Event", "Barrier",
           "BrokenBarrierError"]

BrokenBarrierError = threading.BrokenBarrierError
_SHARED, _BARRIER_ACTION, _SEMAPHORE_BOUNDED = 1, 2, 4
_ALL = 0xFFFFFFFF  # notify's count that wakes every waiter
_WAITERS, _WAITERS_MASK = word(layout.cond_waiters_offset), layout.cond_waiters_mask  # a condition's waiter count


# ---- Condition ------------------------------------------------------------------------------

_cond_init = declare("sync_cond_init")
_cond_wait_mutex = declare("sync_cond_wait_resumable", blocking=True)
_cond_wait_recursive = declare("sync_cond_wait_recursive_resumable", blocking=True)
_cond_begin = declare("sync_cond_wait_begin")
_cond_sleep = declare("sync_cond_wait_sleep", blocking=True)
_cond_end = declare("sync_cond_wait_end", blocking=True)
_cond_signal_count = declare("sync_cond_signal_count")
_cond_signal_checked = declare("sync_cond_signal_checked")
_PAST = c_int64(0)  # a deadline long gone: ends a resumable wait at once
# asyncio (sync/async.h): a wait by the task (or, for a Lock, anyone) that holds the lock through
# its async form; the core releases the lock, waits and takes it back before completing.
_cond_wait_async = declare("sync_cond_wait_async_owner", c_int, c_void_p, c_void_p, c_size_t, c_int64, c_int,
                           c_void_p, c_void_p, POINTER(c_void_p))
_cond_signal_checked_async = declare("sync_cond_signal_checked_async", c_int, c_void_p, c_void_p, c_size_t,
                                     c_uint32)


class _WaiterCells(ctypes.Union):
    """A sync_cond_waiter_t's memory (8-byte aligned), as the 32-bit words its state is one of."""
    _fields_ = [("words", c_uint32 * (layout.cond_waiter_size // 4)), ("_align", c_uint64)]


_WAITER_STATE, _WAITER_IDLE = word(layout.cond_waiter_state_offset), layout.cond_waiter_idle


class _Waiter:
    """A sync_cond_waiter_t (a waiter's place in a condition's queue) that leaves the queue
    before its memory is freed, however the wait was interrupted: the queue links it."""
    __slots__ = ("cells", "p")

    def __init__(self) -> None:
        self.cells = _WaiterCells()
        self.p = byref(self.cells)

    def __del__(self) -> None:
        if self.cells.words[_WAITER_STATE] != _WAITER_IDLE:
            _cond_end(self.p)


class _ThreadID(threading.local):
    """The calling thread's kernel id: what the word of a Mutex or RLock it holds reads."""
    def __init__(self) -> None:
        self.value = threading.get_native_id()


class _AnyThread:
    """What the word of a held Lock reads, whoever holds it: UNOWNED mode, anonymous holder."""
    value = layout.mutex_unowned_held


_me = _ThreadID()
os.register_at_fork(after_in_child=lambda: setattr(_me, "value", threading.get_native_id()))


class Condition:
    """threading.Condition: wait() releases the lock (an RLock entirely, however deep), waits
    for notify, and takes the lock again. No spurious wakeups: wait() returns True only when a
    notify chose this thread, notify(n) wakes exactly min(n, waiting) threads (oldest first), and
    a thread that starts waiting after a notify is not woken by it. Still wait in a loop on a
    predicate (or use wait_for()): another thread may change the state before the woken thread
    has the lock again.

    ``lock`` may be any lock, as in threading (default: a new libsync ``RLock``). This package's
    ``Lock``, ``RLock`` and ``Mutex`` wait in one C call per slice; other locks are released and
    retaken through their ``_release_save``/``_acquire_restore`` (else ``release``/``acquire``),
    and ownership is checked with their ``_is_owned`` (else threading's acquire test).
    ``name``: the name of its lock in lock-order reports (libsync.debug); a libsync lock only."""

    def __init__(self, lock: Any = None, *, name: Optional[str] = None) -> None:
        if lock is None:
            lock = RLock(name=name)
        elif name is not None:  # the name of its lock (a libsync lock: TypeError otherwise)
            _debug.name_lock(lock, name)
        self._lock = lock
        self.acquire, self.release = lock.acquire, lock.release
        self._cells = (c_uint32 * 2)()
        self._p = byref(self._cells)
        self._words = _words(self._cells)
        # threading's protocol: the lock's own methods where it has them.
        for name in ("_is_owned", "_release_save", "_acquire_restore"):
            method = getattr(lock, name, None)
            if method is not None:
                setattr(self, name, method)
        self._wait_slice: Optional[Callable[..., int]]
        self._signal: Optional[Callable[[int], int]]
        self._lock_words: Union[memoryview, tuple[None]]
        self._holder: Union[_ThreadID, type[_AnyThread]]
        if isinstance(lock, (RLock, Lock)):  # Lock and Mutex: a mutex word
            self._wait_slice = _cond_wait_recursive if isinstance(lock, RLock) else _cond_wait_mutex
            # notify's one C call, its arguments bound once (argument conversion is most of its cost).
            self._signal = functools.partial(_cond_signal_checked, self._p, lock._p)
            self._lock_words = _words(lock._cells)
            self._holder = _me if isinstance(lock, (Mutex, RLock)) else _AnyThread
        else:  # notify always takes the checked path
            self._wait_slice = self._signal = None
            self._lock_words, self._holder = (None,), _AnyThread

    def __enter__(self) -> bool:
        entered: bool = self._lock.__enter__()  # (any lock: threading's return True)
        return entered

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)

    def _release_save(self) -> Any:
        """Releases the lock for wait(); returns what _acquire_restore needs (threading's protocol)."""
        self._lock.release()

    def _acquire_restore(self, state: Any) -> None:
        """Takes the lock again after wait() (threading's protocol)."""
        self._lock.acquire()

    def _is_owned(self) -> bool:
        """Whether the lock is held (threading's test for a lock without _is_owned: held at all)."""
        if self._lock.acquire(False):
            self._lock.release()
            return False
        return True

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until notified or the timeout passes; True if notified, False if it timed out.
        The caller must hold the lock (RuntimeError otherwise); it is released while waiting.
        Over a robust Mutex or RLock, taking it back may raise OwnerDiedError (held again, as
        acquire raises it) or NotRecoverableError (not held)."""
        deadline = _deadline(timeout)
        memory = _Waiter()
        waiter = memory.p
        wait_slice = self._wait_slice
        if wait_slice is not None:
            p, lock = self._p, self._lock._p
            try:  # between slices the lock is released and handlers run
                code = interruptible(wait_slice, p, lock, waiter, deadline)
            except BaseException:
                wait_slice(p, lock, waiter, _PAST)  # leaves the queue, takes the lock again
                raise
            if code == 0:
                return True
            if code == ETIMEDOUT:
                return False
            if code == errno.EPERM:
                raise RuntimeError("cannot wait on un-acquired lock")
            raise error(code, "Condition.wait")
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        check(_cond_begin(self._p, waiter), "Condition.wait")  # queued before the lock is released: no notify is lost
        try:
            saved = self._release_save()
        except BaseException:
            _cond_end(waiter)
            raise
        try:
            interruptible(_cond_sleep, waiter, deadline)
        finally:
            notified = _cond_end(waiter) == 0
            self._acquire_restore(saved)
        return notified

    def wait_for(self, predicate: Callable[[], Any], timeout: Optional[float] = None) -> Any:
        """Waits until predicate() is true or the timeout passes; returns its last value.
        threading's steps: while the predicate is false, wait() with what is left of the
        timeout, then test it again; once none is left, return. A timeout of 0 or less still
        waits once (one try, the lock released and taken back) and tests the predicate again.
        NaN waits without a deadline (threading's loop never ends its wait either)."""
        if timeout is not None and timeout != timeout:
            timeout = None
        end = None
        wait_time = timeout
        result = predicate()
        while not result:
            if wait_time is not None:
                if end is None:
                    end = time.monotonic() + wait_time
                else:
                    wait_time = end - time.monotonic()
                    if wait_time <= 0:
                        break
            self.wait(wait_time)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        """Wakes min(n, waiting) waiting threads, oldest first; the caller must hold the lock
        (RuntimeError otherwise)."""
        # With this package's locks, no C call when no thread waits (a waiter counts itself under
        # the lock, so the holder sees it) and the lock's word is plainly the caller's. Anything
        # else, and any other lock, takes the checked path.
        if self._words[_WAITERS] or self._lock_words[0] != self._holder.value:
            count = n if 0 <= n < _ALL else _ALL if n > 0 else 0
            if self._signal is not None:
                if self._signal(count) and not self._notify_as_task(count):
                    raise RuntimeError("cannot notify on un-acquired lock")
                return
            if not self._is_owned():
                raise RuntimeError("cannot notify on un-acquired lock")
            if self._words[_WAITERS]:
                check(_cond_signal_count(self._p, count), "Condition.notify")

    def notify_all(self) -> None:
        """Wakes every waiting thread; the caller must hold the lock (RuntimeError otherwise)."""
        self.notify(_ALL)

    notifyAll = notify_all

    def _notify_as_task(self, count: int) -> bool:
        """notify() by a task that holds a Mutex through its async form: whether it did."""
        if not isinstance(self._lock, Mutex):
            return False
        task = _aio._current_task()
        return task is not None and _cond_signal_checked_async(self._p, self._lock._p, id(task), count) == 0

    # ---- asyncio: a task holding the lock through its async form (acquire_async, async with) ----

    def _async_lock(self) -> Lock:
        lock = self._lock
        if not isinstance(lock, Lock):  # Lock and Mutex
            raise TypeError(f"Condition's asyncio forms need a libsync Lock or Mutex, not {type(lock).__name__}")
        return lock

    async def __aenter__(self) -> bool:
        """``async with cond:``: the lock's ``async with`` (a libsync Lock or Mutex)."""
        entered: bool = await self._async_lock().__aenter__()
        return entered

    async def __aexit__(self, *exc: Any) -> None:
        await self._async_lock().__aexit__(*exc)

    async def wait_async(self, timeout: Optional[float] = None) -> bool:
        """wait() from an asyncio task, suspending the task (not the thread, not the loop):
        releases the lock, waits until notified or the timeout passes (the same values as
        wait(): None, seconds, 0 or less or NaN one look), takes the lock back; True if
        notified, False if it timed out. The task must hold the lock through its async form
        (``async with cond:``, ``acquire_async``; RuntimeError otherwise), and holds it again
        when this returns or raises, also when cancelled: a cancellation waits for the lock,
        then propagates (a notify the task had been given is passed on to the next waiter).
        Threads' notify() wakes tasks and tasks' wakes threads, oldest first. A robust Mutex
        may raise OwnerDiedError (held again) or NotRecoverableError (not held)."""
        lock = self._async_lock()
        owner = lock._async_owner()
        limit = _deadline(timeout)
        p, m = self._p, lock._p
        code = await _aio.complete(lambda fd, handle: _cond_wait_async(p, m, owner, limit, fd, None, None, handle),
                                   lambda: _cond_signal_count(p, 1))
        if code == 0:
            return True
        if code == ETIMEDOUT:
            return False
        if code == errno.EPERM:
            raise RuntimeError("cannot wait on un-acquired lock")
        raise error(code, "Condition.wait_async", "task")

    async def wait_for_async(self, predicate: Callable[[], Any], timeout: Optional[float] = None) -> Any:
        """wait_for() from an asyncio task: while predicate() is false, wait_async() with what
        is left of the timeout; returns the predicate's last value (wait_for's steps and
        timeout rules)."""
        if timeout is not None and timeout != timeout:
            timeout = None
        end = None
        wait_time = timeout
        result = predicate()
        while not result:
            if wait_time is not None:
                if end is None:
                    end = time.monotonic() + wait_time
                else:
                    wait_time = end - time.monotonic()
                    if wait_time <= 0:
                        break
            await self.wait_async(wait_time)
            result = predicate()
        return result

    def _at_fork_reinit(self) -> None:
        """After fork, in the child: a new lock state and no waiters (threading's protocol)."""
        self._lock._at_fork_reinit()
        _cond_init(self._p, c_int(0))

    def __repr__(self) -> str:
        return f"<Condition({self._lock}, {self._words[_WAITERS] & _WAITERS_MASK})>"


def _int64(value: Any, what: str) -> c_int64:
    """`value` as a C int64: TypeError if it is not an int, OverflowError if it does not fit."""
    if value.__class__ is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not -(1 << 63) <= value < 1 << 63:
        raise OverflowError(f"{what} {value} does not fit in 64 bits")
    return c_int64(value)


# ---- ConditionLock (NSConditionLock) -----------------------------------------------------------

_cl_init = declare("sync_condition_lock_init")
_cl_wait = declare("sync_condition_lock_lock_when_interruptible", blocking=True)
_cl_trylock = declare("sync_condition_lock_try_lock")
_cl_trylock_when = declare("sync_condition_lock_try_lock_when")
_cl_unlock = declare("sync_condition_lock_unlock")
_cl_unlock_with = declare("sync_condition_lock_unlock_with")
_cl_condition = declare("sync_condition_lock_condition", c_int64)
# The first try of a blocking acquire (lock-order checking counts a lock taken there as a lock).
_cl_take = declare("sync_condition_lock_try_lock_first")
_cl_take_when = declare("sync_condition_lock_try_lock_when_first")
# The async forms (sync/async.h, docs/async.md): held for the task (its id() is the owner).
_cl_try_async = declare("sync_condition_lock_try_lock_async", c_int, c_void_p, POINTER(c_int64), c_size_t)
_cl_lock_async = declare("sync_condition_lock_lock_async_owner", c_int, c_void_p, POINTER(c_int64), c_int64, c_int,
                         c_void_p, c_void_p, c_size_t, POINTER(c_void_p))
_cl_unlock_async = declare("sync_condition_lock_unlock_async", c_int, c_void_p, c_size_t, POINTER(c_int64))
_EBUSY, _EPERM = errno.EBUSY, errno.EPERM


class ConditionLock(_Memory):
    """Foundation's NSConditionLock: a lock (owner-checked) carrying an integer condition.
    ``acquire_when(c)`` waits until the condition is c; ``release_with(c)`` sets it and wakes the
    threads waiting for values. A consumer::

        lock.acquire_when(HAS_DATA)
        ... take the data ...
        lock.release_with(NO_DATA if empty else HAS_DATA)

    Releasing from a thread that does not hold it raises NotOwnerError (a RuntimeError);
    acquiring again from the holder raises DeadlockError. Conditions are int64: another int
    raises OverflowError, another type TypeError. 24 bytes, 8-byte aligned.
    """
    __slots__ = ()
    _WORDS = 6
    SIZE = 24

    def __init__(self, condition: int = 0, buffer: Any = PRIVATE, offset: int = 0, *,
                 initialize: Optional[bool] = None, name: Optional[str] = None):
        value = _int64(condition, "ConditionLock condition")
        shared = self._place(buffer, offset)
        if attach_choice(buffer, initialize, "ConditionLock"):
            code = _cl_init(self._p, value, c_int(_SHARED if shared else 0))
            if code:
                raise init_error(code, "ConditionLock") if code != errno.EINVAL else ValueError(
                    "ConditionLock memory must be 8-byte aligned")
        _debug.name_lock(self, name)

    @property
    def condition(self) -> int:
        """The condition now (a snapshot)."""
        return _cl_condition(self._p)

    def _take(self, when: Optional[c_int64], limit: Optional[c_int64]) -> bool:
        if limit is None:  # not blocking
            return False
        any_value, wanted = when is None, c_int64(0) if when is None else when
        return wait(_cl_wait, self._p, any_value, wanted, limit, what="ConditionLock.acquire")

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes the lock whatever the condition (NSConditionLock lock / lockBeforeDate:); False
        if not blocking or timed out first. The timeout follows threading.Lock's rules (None or
        -1: none; another negative value, or NaN: ValueError; one with blocking=False:
        ValueError; more than threading.TIMEOUT_MAX: none)."""
        limit = lock_deadline(blocking, -1 if timeout is None else timeout)
        if not (_cl_trylock if limit is None else _cl_take)(self._p):
            return True
        return self._take(None, limit)

    def acquire_when(self, condition: int, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes the lock once the condition equals `condition` (lockWhenCondition:[beforeDate:]);
        False if not blocking or timed out first. The timeout as acquire's."""
        wanted = _int64(condition, "ConditionLock condition")
        limit = lock_deadline(blocking, -1 if timeout is None else timeout)
        if not (_cl_trylock_when if limit is None else _cl_take_when)(self._p, wanted):
            return True
        return self._take(wanted, limit)

    def release(self) -> None:
        """Releases the lock, keeping the condition (unlock); NotOwnerError if the caller (the
        thread, or the asyncio task that took it with an async form) does not hold it."""
        code = _cl_unlock(self._p)
        if code == _EPERM:
            code = self._release_task(None)
        if code:
            raise error(code, "ConditionLock.release")

    def release_with(self, condition: int) -> None:
        """Sets the condition and releases the lock (unlockWithCondition:); NotOwnerError (and no
        change) if the caller (thread, or task) does not hold it."""
        value = _int64(condition, "ConditionLock condition")
        code = _cl_unlock_with(self._p, value)
        if code == _EPERM:
            code = self._release_task(value)
        check(code, "ConditionLock.release_with")

    def _release_task(self, condition: Optional[c_int64]) -> int:
        """The release by the running asyncio task, if it holds the lock: EPERM outside a task."""
        task = _aio._current_task()
        if task is None:
            return _EPERM
        return _cl_unlock_async(self._p, id(task), None if condition is None else byref(condition))

    # ---- asyncio ----

    async def acquire_async(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """acquire() from an asyncio task, suspending the task (not the thread, not the loop)
        until the lock is free: the same arguments, rules and result. The task holds the lock
        (release it from the task); threads, tasks of any loop and other processes take turns on
        it. Cancelled while waiting, the task is withdrawn and nothing is taken; DeadlockError
        for the task that holds it."""
        return await self._acquire_async(None, blocking, timeout, "ConditionLock.acquire_async")

    async def acquire_when_async(self, condition: int, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """acquire_when() from an asyncio task: takes the lock once the condition equals
        `condition`, suspending the task meanwhile (as acquire_async)."""
        wanted = _int64(condition, "ConditionLock condition")
        return await self._acquire_async(wanted, blocking, timeout, "ConditionLock.acquire_when_async")

    async def _acquire_async(self, wanted: Optional[c_int64], blocking: bool, timeout: Optional[float],
                             what: str) -> bool:
        limit = lock_deadline(blocking, -1 if timeout is None else timeout)
        owner = _aio.owner()
        p, pointer = self._p, None if wanted is None else byref(wanted)
        code = _cl_try_async(p, pointer, owner)
        if code == _EBUSY and limit is not None:
            code, _ = await _aio.acquire(
                lambda fd, handle: _cl_lock_async(p, pointer, limit, fd, None, None, owner, handle),
                lambda handle: _cl_unlock_async(p, owner, None))
        if not code:
            return True
        if code == _EBUSY or code == ETIMEDOUT:
            return False
        raise error(code, what, "task")

    async def __aenter__(self) -> bool:
        """``async with lock:``: acquire_async() for the block (release_with() inside it sets a
        condition and releases; the block's end then finds it released: do not release twice,
        leave the block instead, or use acquire_async/release_with)."""
        return await self.acquire_async()

    async def __aexit__(self, *exc: Any) -> None:
        self.release()

    # Foundation's names.
    lock = acquire
    unlock = release
    lock_when_condition = acquire_when
    unlock_with_condition = release_with

    def try_lock(self) -> bool:
        """Takes the lock if it is free, never waiting (tryLock)."""
        return self.acquire(False)

    def try_lock_when_condition(self, condition: int) -> bool:
        """Takes the lock if it is free and the condition equals `condition`, never waiting
        (tryLockWhenCondition:)."""
        return self.acquire_when(condition, False)

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{_qualname(self)} at {id(self):#x}: condition={self.condition}>"


# ---- Semaphores -------------------------------------------------------------------------------

_sem_init = declare("sync_semaphore_init")
_sem_trywait = declare("sync_semaphore_try_wait")
_sem_wait = declare("sync_semaphore_wait_interruptible", blocking=True)
_sem_signal = declare("sync_semaphore_signal")
_sem_value = declare("sync_semaphore_value", c_uint32)
_SEMAPHORE_LIMIT = word(layout.semaphore_limit_offset)
# The async wait (sync/async.h): a unit taken is the caller's, the handle holds nothing.
_sem_wait_async = declare("sync_semaphore_wait_async", c_int, c_void_p, c_int64, c_int, c_void_p, c_void_p,
                          POINTER(c_void_p))


class Semaphore(_Memory):
    """threading.Semaphore: a counter; acquire takes one unit (waiting while there is none),
    release adds. Waiters are not served in FIFO order. 16 bytes."""
    __slots__ = ()
    _WORDS = 4
    SIZE = 16
    _BOUNDED = False

    def __init__(self, value: int = 1, buffer: Any = PRIVATE, offset: int = 0, *,
                 initialize: Optional[bool] = None):
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        if value >= 1 << 32:
            raise OverflowError("semaphore initial value must be < 2**32")
        shared = self._place(buffer, offset)
        if attach_choice(buffer, initialize, type(self).__name__):
            code = _sem_init(self._p, c_uint32(value), c_uint32(value),
                             c_int((_SHARED if shared else 0) | (_SEMAPHORE_BOUNDED if self._BOUNDED else 0)))
            if code:
                raise init_error(code, type(self).__name__)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes a unit. True, or False if not blocking / timed out (threading's rules).
        LockError (EINVAL), taking nothing, if the memory holds no semaphore."""
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        code = _sem_trywait(self._p)
        if not code:
            return True
        if code != errno.EAGAIN:
            raise error(code, "Semaphore.acquire")
        if not blocking:
            return False
        return wait(_sem_wait, self._p, _deadline(timeout, True), what="Semaphore.acquire")

    __enter__ = acquire

    async def acquire_async(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes a unit from an asyncio task, suspending the task (not the loop) while there is
        none: as acquire(), the same arguments (threading's rules: None waits without end, 0 or
        less one try, NaN waits) and result. Tasks of any loop, threads and other processes
        share the units; this process's waiting tasks are served oldest first. Cancelled while
        waiting, the task takes nothing (a unit granted as it was cancelled is released)."""
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        p = self._p
        code = _sem_trywait(p)
        if not code:
            return True
        if code != errno.EAGAIN:
            raise error(code, "Semaphore.acquire_async", "task")
        if not blocking:
            return False
        limit = _deadline(timeout, True)
        code, _ = await _aio.acquire(lambda fd, handle: _sem_wait_async(p, limit, fd, None, None, handle),
                                     lambda handle: _sem_signal(p, c_uint32(1)))
        if not code:
            return True
        if code == ETIMEDOUT:
            return False
        raise error(code, "Semaphore.acquire_async", "task")

    async def __aenter__(self) -> bool:
        """``async with semaphore:``: acquire_async() for the block, release() at its end."""
        return await self.acquire_async()

    async def __aexit__(self, *exc: Any) -> None:
        self.release()

    def release(self, n: int = 1) -> None:
        """Adds n units, waking as many waiters (a BoundedSemaphore: ValueError, adding none, if
        that would pass its initial value)."""
        if n < 1:
            raise ValueError("n must be one or more")
        code = _sem_signal(self._p, c_uint32(n)) if n < 1 << 32 else errno.EOVERFLOW
        if code == errno.EOVERFLOW:
            if self._BOUNDED:
                raise ValueError("Semaphore released too many times")
            raise OverflowError("semaphore value would exceed 2**32 - 1")
        if code:
            raise error(code, "Semaphore.release")

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        value = _sem_value(self._p)
        if self._BOUNDED:
            return f"<{_qualname(self)} at {id(self):#x}: value={value}/{self._cells[_SEMAPHORE_LIMIT]}>"
        return f"<{_qualname(self)} at {id(self):#x}: value={value}>"


class BoundedSemaphore(Semaphore):
    """threading.BoundedSemaphore: releasing beyond the initial value raises ValueError."""
    __slots__ = ()
    _BOUNDED = True


# ---- Event ------------------------------------------------------------------------------------

_event_init = declare("sync_event_init")
_event_set = declare("sync_event_set")
_event_clear = declare("sync_event_clear")
_event_wait_since = declare("sync_event_wait_since_interruptible", blocking=True)
_EVENT_STATE, _EVENT_FLAG = word(layout.event_state_offset), layout.event_flag
_event_wait_async = declare("sync_event_wait_async", c_int, c_void_p, c_int64, c_int, c_void_p, c_void_p,
                            POINTER(c_void_p))


class Event(_Memory):
    """threading.Event: a flag that threads (or processes) can wait for. Every thread waiting
    when set() is called returns True, even if clear() follows at once. 8 bytes."""
    __slots__ = ("_state",)
    _WORDS = 2
    SIZE = 8

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: Optional[bool] = None):
        shared = self._place(buffer, offset)
        # The flag and the generation a set() moves, read without a C call.
        self._state = _words(self._cells)[_EVENT_STATE:_EVENT_STATE + 1]
        if attach_choice(buffer, initialize, "Event"):
            code = _event_init(self._p, c_bool(False), c_int(_SHARED if shared else 0))
            if code:
                raise init_error(code, "Event")

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._state[0] & _EVENT_FLAG != 0

    isSet = is_set

    def set(self) -> None:
        """Sets the flag and wakes every waiting thread."""
        code = _event_set(self._p)
        if code:
            raise error(code, "Event.set")

    def clear(self) -> None:
        """Clears the flag: later wait()s block until the next set()."""
        _event_clear(self._p)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the flag is set or the timeout passes; True if it was set meanwhile (even
        if cleared again since), False if it timed out."""
        mark = self._state[0]
        if mark & _EVENT_FLAG:
            return True
        return wait(_event_wait_since, self._p, c_uint32(mark), _deadline(timeout), what="Event.wait")

    async def wait_async(self, timeout: Optional[float] = None) -> bool:
        """wait() from an asyncio task, suspending the task (not the loop): True once the flag
        is set (even if cleared again since), False if the timeout passed; the same timeout
        rules as wait() (None waits without end, 0 or less or NaN one look). Cancelled while
        waiting, the wait is withdrawn."""
        if self._state[0] & _EVENT_FLAG:
            return True
        p, limit = self._p, _deadline(timeout)
        code, _ = await _aio.acquire(lambda fd, handle: _event_wait_async(p, limit, fd, None, None, handle),
                                     lambda handle: None)
        if not code:
            return True
        if code == ETIMEDOUT:
            return False
        raise error(code, "Event.wait_async", "task")

    def _at_fork_reinit(self) -> None:
        """After fork, in the child: forgets the parent's waiting threads, keeps the flag
        (threading's protocol). Nothing to do in shared memory, where they still wait."""
        if not self._shared:
            _event_init(self._p, c_bool(self.is_set()), c_int(0))

    def __repr__(self) -> str:
        return f"<{_qualname(self)} at {id(self):#x}: {'set' if self.is_set() else 'unset'}>"


# ---- Barrier ----------------------------------------------------------------------------------

_barrier_init = declare("sync_barrier_init")
_barrier_wait = declare("sync_barrier_wait_interruptible", blocking=True)
_barrier_action_done = declare("sync_barrier_action_done")
_barrier_reset = declare("sync_barrier_reset")
_barrier_abort = declare("sync_barrier_abort")
_barrier_status = declare("sync_barrier_status")
_barrier_wait_async = declare("sync_barrier_wait_async", c_int, c_void_p, c_int64, c_int, c_void_p, c_void_p,
                              POINTER(c_void_p))
_async_index = declare("sync_async_index", c_int, c_void_p, POINTER(c_uint32))
_async_free = declare("sync_async_free", c_int, c_void_p)


class Barrier(_Memory):
    """threading.Barrier: `parties` threads meet in wait() and leave together; the last to arrive
    runs `action` first. A timeout or a failed action breaks the barrier (BrokenBarrierError for
    every waiter) until reset(). 32 bytes; in shared memory it has no action."""
    __slots__ = ("_action", "_timeout")
    _WORDS = 8
    SIZE = 32

    def __init__(self, parties: int, action: Optional[Callable[[], Any]] = None, timeout: Optional[float] = None,
                 buffer: Any = PRIVATE, offset: int = 0, *, initialize: Optional[bool] = None):
        if not 1 <= parties < 1 << 32:
            raise ValueError("parties must be >= 1")
        shared = self._place(buffer, offset)
        if shared and action is not None:
            raise ValueError("a Barrier in shared memory cannot have an action")
        self._action, self._timeout = action, timeout
        if attach_choice(buffer, initialize, "Barrier"):
            flags = (_SHARED if shared else 0) | (_BARRIER_ACTION if action else 0)
            code = _barrier_init(self._p, c_uint32(parties), c_int(flags))
            if code:
                raise init_error(code, "Barrier")

    def __reduce__(self) -> tuple[Callable[..., Barrier], tuple[str, int, int, Optional[float]]]:
        if self._shm is None:
            raise TypeError("a Barrier can be pickled only when it lives in a SharedMemory")
        return (_attach_barrier, (self._shm.name, self._offset, self.parties, self._timeout))

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for all parties; returns this thread's arrival index (0 .. parties - 1).
        BrokenBarrierError if the barrier is or becomes broken, or the timeout (default: the
        barrier's) passes first (which breaks it)."""
        index = c_uint32()
        code = interruptible(_barrier_wait, self._p, _deadline(self._timeout if timeout is None else timeout, True),
                             byref(index))
        if code == errno.EINVAL:
            raise error(code, "Barrier.wait")
        if code:
            raise BrokenBarrierError
        if self._action is not None and index.value == self.parties - 1:
            try:
                self._action()
            except BaseException:
                _barrier_action_done(self._p, c_bool(False))
                raise
            _barrier_action_done(self._p, c_bool(True))
        return index.value

    async def wait_async(self, timeout: Optional[float] = None) -> int:
        """wait() from an asyncio task, suspending the task (not the thread, not the loop):
        the same timeout rules (the barrier's by default; zero or negative: one try; NaN: none),
        result and errors. Threads, tasks of any loop and other processes meet in it alike.
        Cancelled (task.cancel(), asyncio.timeout) after it was counted in, the task breaks the
        barrier, as a timeout does: the other parties get BrokenBarrierError (a party that left
        cannot be waited for); if the barrier had tripped first, the trip stands for the others.
        Cancelled while the previous cycle still drains, it leaves the barrier alone."""
        p = self._p
        limit = _deadline(self._timeout if timeout is None else timeout, True)
        runner = self._action is not None

        def give_back(handle: c_void_p) -> None:
            # A grant that raced the cancellation: the action (if this party runs it) will not
            # run, which breaks the barrier as a failed action does.
            index = c_uint32()
            if runner and _async_index(handle, byref(index)) == 0 and index.value == self.parties - 1:
                _barrier_action_done(p, c_bool(False))

        code, handle = await _aio.acquire(lambda fd, h: _barrier_wait_async(p, limit, fd, None, None, h), give_back,
                                          free_granted=False)
        if code == errno.EINVAL:
            raise error(code, "Barrier.wait_async")
        if code:
            raise BrokenBarrierError
        index = c_uint32()
        try:
            check(_async_index(handle, byref(index)), "Barrier.wait_async")
        finally:
            _async_free(handle)
        if self._action is not None and index.value == self.parties - 1:
            try:
                self._action()
            except BaseException:
                _barrier_action_done(p, c_bool(False))
                raise
            _barrier_action_done(p, c_bool(True))
        return index.value

    def reset(self) -> None:
        """Back to the initial state; threads waiting now get BrokenBarrierError."""
        check(_barrier_reset(self._p), "Barrier.reset")

    def abort(self) -> None:
        """Breaks the barrier: waits raise BrokenBarrierError until reset()."""
        check(_barrier_abort(self._p), "Barrier.abort")

    def _status(self) -> tuple[int, int, bool]:
        parties, waiting, broken = c_uint32(), c_uint32(), c_bool()
        check(_barrier_status(self._p, byref(parties), byref(waiting), byref(broken)), "Barrier")
        return parties.value, waiting.value, broken.value

    @property
    def parties(self) -> int:
        """The number of threads that must meet."""
        return self._status()[0]

    @property
    def n_waiting(self) -> int:
        """The number of threads waiting now."""
        return self._status()[1]

    @property
    def broken(self) -> bool:
        """Whether the barrier is broken."""
        return self._status()[2]

    def __repr__(self) -> str:
        parties, waiting, broken = self._status()
        if broken:
            return f"<{_qualname(self)} at {id(self):#x}: broken>"
        return f"<{_qualname(self)} at {id(self):#x}: waiters={waiting}/{parties}>"


def _attach_barrier(name: str, offset: int, parties: int, timeout: Optional[float]) -> Barrier:
    from multiprocessing import shared_memory
    return Barrier(parties, None, timeout, buffer=shared_memory.SharedMemory(name=name), offset=offset, initialize=False)
