"""Conditions and signalling from libsync.so: drop-in ``Condition``, ``Semaphore``,
``BoundedSemaphore``, ``Event`` and ``Barrier`` for threading's, and ``ConditionLock``
(Foundation's NSConditionLock).

The threading drop-ins take the same arguments, return the same values and raise the same
exceptions as threading's (``BrokenBarrierError`` *is* ``threading.BrokenBarrierError``).
``Condition`` works with this package's ``Lock``, ``RLock`` and ``Mutex`` (default: an
``RLock``). Waits release the GIL, and Ctrl-C interrupts them in the main thread.

Shared memory: ``Semaphore``, ``BoundedSemaphore``, ``Event``, ``Barrier`` and ``ConditionLock``
can live in a buffer that processes share, as the locks can: ``Event(buffer=shm, offset=0)``
with a ``multiprocessing.shared_memory.SharedMemory`` (then the object can be pickled to other
processes) or any writable buffer; other processes attach with ``initialize=False``.
``SIZE`` is the number of bytes each needs.
"""
from __future__ import annotations

import errno
import functools
import os
import threading
import time
from ctypes import byref, c_bool, c_int, c_int64, c_uint32
from typing import Any, Callable, Optional

from ._lib import blocking as _blocking, nonblocking as _nonblocking
from ._memory import PRIVATE
from .locks import Lock, Mutex, NotOwnerError, RLock, _Memory, _attach, _c, _error, _init, _wait

__all__ = ["Condition", "ConditionLock", "Semaphore", "BoundedSemaphore", "Event", "Barrier",
           "BrokenBarrierError"]

BrokenBarrierError = threading.BrokenBarrierError
_SHARED, _BARRIER_ACTION, _SEMAPHORE_BOUNDED = 1, 2, 4
_ALL = 0xFFFFFFFF


def _deadline(timeout: Optional[float]) -> c_int64:
    """The CLOCK_MONOTONIC deadline (ns) of a timeout in seconds; None (or infinity): no
    deadline. A timeout of 0 or less means "do not wait", as in threading. time.monotonic_ns
    reads the library's clock."""
    if timeout is None or timeout == float("inf"):
        return c_int64(-1)
    return c_int64(min(time.monotonic_ns() + max(0, int(timeout * 1e9)), (1 << 63) - 1))


# ---- Condition ------------------------------------------------------------------------------

_cond_init = _c(_nonblocking, "sync_cond_init")
_cond_wait = _c(_blocking, "sync_cond_wait_interruptible")
_cond_wait_recursive = _c(_blocking, "sync_cond_wait_recursive_interruptible")
_cond_signal_checked = _c(_nonblocking, "sync_cond_signal_checked")


class _ThreadID(threading.local):
    """The calling thread's kernel id: what the word of a Mutex or RLock it holds reads."""
    def __init__(self) -> None:
        self.value = threading.get_native_id()


class _AnyThread:
    """What the word of a held Lock reads, whoever holds it: UNOWNED mode, anonymous holder."""
    value = 0x20FFFFFF


_me = _ThreadID()
os.register_at_fork(after_in_child=lambda: setattr(_me, "value", threading.get_native_id()))


def _words(cells: Any) -> memoryview:
    """The 32-bit words of ctypes memory, read from Python (cheaper than indexing the array)."""
    return memoryview(cells).cast("B").cast("I")


class Condition:
    """threading.Condition over this package's Lock, RLock (the default) or Mutex. wait()
    releases the lock (an RLock entirely, however deep), waits for notify, and takes it again;
    wakeups may be spurious, so wait in a loop on a predicate, or use wait_for()."""

    def __init__(self, lock: Any = None) -> None:
        if lock is None:
            lock = RLock()
        if isinstance(lock, RLock):
            self._wait_function = _cond_wait_recursive
        elif isinstance(lock, Lock):  # Lock and Mutex: a mutex word
            self._wait_function = _cond_wait
        else:
            raise TypeError(f"Condition needs a libsync Lock, RLock or Mutex, not {type(lock).__name__}")
        self._lock = lock
        self._cells = (c_uint32 * 2)()
        self._p = byref(self._cells)
        self.acquire, self.release = lock.acquire, lock.release
        # notify's one C call, its arguments bound once (argument conversion is most of its cost).
        self._signal = functools.partial(_cond_signal_checked, self._p, lock._p)
        # notify's fast path reads the words: no waiter counted, and the lock's word is what it
        # reads when the caller holds it (a Lock records no owner: "held" is threading's check).
        self._words, self._lock_words = _words(self._cells), _words(lock._cells)
        self._holder = _me if isinstance(lock, (Mutex, RLock)) else _AnyThread

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until notified or the timeout passes; False if it timed out."""
        deadline = _deadline(timeout)
        while True:
            code = self._wait_function(self._p, self._lock._p, deadline)
            if code == errno.EINTR:  # the interpreter has run the signal's handler; wait again
                continue
            if code == errno.EPERM:
                raise RuntimeError("cannot wait on un-acquired lock")
            return code == 0

    def wait_for(self, predicate: Callable[[], Any], timeout: Optional[float] = None) -> Any:
        """Waits until predicate() is true or the timeout passes; returns its last value."""
        end = None if timeout is None else time.monotonic() + timeout
        result = predicate()
        while not result:
            if end is not None:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self.wait(remaining)
            else:
                self.wait()
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        """Wakes up to n waiting threads; the caller must hold the lock."""
        # No C call when no thread waits (word 1, the count, is raised under the lock, so the
        # holder sees it) and the lock's word is plainly the caller's. Anything else asks C.
        if self._words[1] or self._lock_words[0] != self._holder.value:
            if self._signal(n if 0 <= n < _ALL else _ALL if n > 0 else 0):
                raise RuntimeError("cannot notify on un-acquired lock")

    def notify_all(self) -> None:
        """Wakes every waiting thread; the caller must hold the lock."""
        self.notify(_ALL)

    notifyAll = notify_all

    def __repr__(self) -> str:
        return f"<Condition({self._lock}, {self._cells[1] & 0x7FFFFFFF})>"


# ---- ConditionLock (NSConditionLock) -----------------------------------------------------------

_cl_init = _c(_nonblocking, "sync_condition_lock_init")
_cl_wait = _c(_blocking, "sync_condition_lock_lock_when_interruptible")
_cl_trylock = _c(_nonblocking, "sync_condition_lock_trylock")
_cl_trylock_when = _c(_nonblocking, "sync_condition_lock_trylock_when")
_cl_unlock = _c(_nonblocking, "sync_condition_lock_unlock")
_cl_unlock_with = _c(_nonblocking, "sync_condition_lock_unlock_with")
_cl_condition = _c(_nonblocking, "sync_condition_lock_condition", c_int64)


class ConditionLock(_Memory):
    """Foundation's NSConditionLock: a lock (owner-checked) carrying an integer condition.
    ``acquire_when(c)`` waits until the condition is c; ``release_with(c)`` sets it and wakes the
    threads waiting for values. The seed's consumer::

        lock.acquire_when(HAS_DATA)
        ... take the data ...
        lock.release_with(NO_DATA if empty else HAS_DATA)

    Releasing from a thread that does not hold it raises NotOwnerError (a RuntimeError);
    acquiring again from the holder raises DeadlockError. 24 bytes, 8-byte aligned.
    """
    __slots__ = ()
    _WORDS = 6
    SIZE = 24

    def __init__(self, condition: int = 0, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        shared = self._place(buffer, offset)
        if initialize:
            code = _cl_init(self._p, c_int64(condition), c_int(_SHARED if shared else 0))
            if code:
                raise _error(code, "ConditionLock") if code != 22 else ValueError(
                    "ConditionLock memory must be 8-byte aligned")

    @property
    def condition(self) -> int:
        """The condition now (a snapshot)."""
        return _cl_condition(self._p)

    def _take(self, when: Optional[int], timeout: Optional[float]) -> bool:
        return _wait(lambda p, deadline: _cl_wait(p, when is None, c_int64(when or 0), deadline),
                     self._p, _deadline(timeout), "ConditionLock.acquire")

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes the lock whatever the condition (NSConditionLock lock / lockBeforeDate:)."""
        if not _cl_trylock(self._p):
            return True
        return self._take(None, timeout) if blocking else False

    def acquire_when(self, condition: int, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes the lock once the condition equals `condition` (lockWhenCondition:[beforeDate:]);
        False if not blocking or timed out first."""
        if not _cl_trylock_when(self._p, c_int64(condition)):
            return True
        return self._take(condition, timeout) if blocking else False

    def release(self) -> None:
        """Releases the lock, keeping the condition (unlock)."""
        if _cl_unlock(self._p):
            raise NotOwnerError("ConditionLock.release: the calling thread does not hold it", errno.EPERM)

    def release_with(self, condition: int) -> None:
        """Sets the condition and releases the lock (unlockWithCondition:)."""
        if _cl_unlock_with(self._p, c_int64(condition)):
            raise NotOwnerError("ConditionLock.release_with: the calling thread does not hold it", errno.EPERM)

    # Foundation's names.
    lock = acquire
    unlock = release
    lock_when_condition = acquire_when
    unlock_with_condition = release_with

    def try_lock(self) -> bool:
        return self.acquire(False)

    def try_lock_when_condition(self, condition: int) -> bool:
        return self.acquire_when(condition, False)

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.ConditionLock condition={self.condition} at {id(self):#x}>"


# ---- Semaphores -------------------------------------------------------------------------------

_sem_init = _c(_nonblocking, "sync_semaphore_init")
_sem_trywait = _c(_nonblocking, "sync_semaphore_trywait")
_sem_wait = _c(_blocking, "sync_semaphore_wait_interruptible")
_sem_signal = _c(_nonblocking, "sync_semaphore_signal")
_sem_value = _c(_nonblocking, "sync_semaphore_value", c_uint32)


class Semaphore(_Memory):
    """threading.Semaphore: a counter; acquire takes one unit (waiting while there is none),
    release adds. Waiters are not served in FIFO order. 16 bytes."""
    __slots__ = ()
    _WORDS = 4
    SIZE = 16
    _BOUNDED = False

    def __init__(self, value: int = 1, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        if value >= 1 << 32:
            raise OverflowError("semaphore initial value must be < 2**32")
        shared = self._place(buffer, offset)
        if initialize:
            _sem_init(self._p, c_uint32(value), c_uint32(value),
                      c_int((_SHARED if shared else 0) | (_SEMAPHORE_BOUNDED if self._BOUNDED else 0)))

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes a unit. True, or False if not blocking / timed out (threading's rules)."""
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        if not _sem_trywait(self._p):
            return True
        if not blocking:
            return False
        return _wait(_sem_wait, self._p, _deadline(timeout), "Semaphore.acquire")

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        """Adds n units, waking as many waiters."""
        if n < 1:
            raise ValueError("n must be one or more")
        if n >= 1 << 32 or _sem_signal(self._p, c_uint32(n)):
            if self._BOUNDED:
                raise ValueError("Semaphore released too many times")
            raise OverflowError("semaphore value would exceed 2**32 - 1")

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: value={_sem_value(self._p)}>"


class BoundedSemaphore(Semaphore):
    """threading.BoundedSemaphore: releasing beyond the initial value raises ValueError."""
    __slots__ = ()
    _BOUNDED = True


# ---- Event ------------------------------------------------------------------------------------

_event_init = _c(_nonblocking, "sync_event_init")
_event_set = _c(_nonblocking, "sync_event_set")
_event_clear = _c(_nonblocking, "sync_event_clear")
_event_is_set = _c(_nonblocking, "sync_event_is_set", c_bool)
_event_wait = _c(_blocking, "sync_event_wait_interruptible")


class Event(_Memory):
    """threading.Event: a flag that threads (or processes) can wait for. 8 bytes."""
    __slots__ = ()
    _WORDS = 2
    SIZE = 8

    def __init__(self, buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        shared = self._place(buffer, offset)
        if initialize:
            _event_init(self._p, c_bool(False), c_int(_SHARED if shared else 0))

    def is_set(self) -> bool:
        return _event_is_set(self._p)

    isSet = is_set

    def set(self) -> None:
        """Sets the flag and wakes every waiter."""
        _event_set(self._p)

    def clear(self) -> None:
        _event_clear(self._p)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the flag is set or the timeout passes; returns the flag."""
        if _event_is_set(self._p):
            return True
        return _wait(_event_wait, self._p, _deadline(timeout), "Event.wait")

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: {'set' if self.is_set() else 'unset'}>"


# ---- Barrier ----------------------------------------------------------------------------------

_barrier_init = _c(_nonblocking, "sync_barrier_init")
_barrier_wait = _c(_blocking, "sync_barrier_wait_interruptible")
_barrier_action_done = _c(_nonblocking, "sync_barrier_action_done")
_barrier_reset = _c(_nonblocking, "sync_barrier_reset")
_barrier_abort = _c(_nonblocking, "sync_barrier_abort")
_barrier_status = _c(_nonblocking, "sync_barrier_status")


class Barrier(_Memory):
    """threading.Barrier: `parties` threads meet in wait() and leave together; the last to arrive
    runs `action` first. A timeout or a failed action breaks the barrier (BrokenBarrierError for
    every waiter) until reset(). 32 bytes; in shared memory it has no action."""
    __slots__ = ("_action", "_timeout")
    _WORDS = 8
    SIZE = 32

    def __init__(self, parties: int, action: Optional[Callable[[], Any]] = None, timeout: Optional[float] = None,
                 buffer: Any = PRIVATE, offset: int = 0, *, initialize: bool = True):
        if not 1 <= parties < 1 << 32:
            raise ValueError("parties must be >= 1")
        shared = self._place(buffer, offset)
        if shared and action is not None:
            raise ValueError("a Barrier in shared memory cannot have an action")
        self._action, self._timeout = action, timeout
        if initialize:
            flags = (_SHARED if shared else 0) | (_BARRIER_ACTION if action else 0)
            _barrier_init(self._p, c_uint32(parties), c_int(flags))

    def __reduce__(self):
        if self._shm is None:
            raise TypeError("a Barrier can be pickled only when it lives in a SharedMemory")
        return (_attach_barrier, (self._shm.name, self._offset, self.parties, self._timeout))

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for all parties; returns this thread's arrival index (0 .. parties - 1)."""
        index = c_uint32()
        deadline = _deadline(self._timeout if timeout is None else timeout)
        while True:
            code = _barrier_wait(self._p, deadline, byref(index))
            if code != errno.EINTR:  # after EINTR the interpreter has run the signal's handler
                break
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

    def reset(self) -> None:
        """Back to the initial state; threads waiting now get BrokenBarrierError."""
        _barrier_reset(self._p)

    def abort(self) -> None:
        """Breaks the barrier: waits raise BrokenBarrierError until reset()."""
        _barrier_abort(self._p)

    def _status(self):
        parties, waiting, broken = c_uint32(), c_uint32(), c_bool()
        _barrier_status(self._p, byref(parties), byref(waiting), byref(broken))
        return parties.value, waiting.value, broken.value

    @property
    def parties(self) -> int:
        return self._status()[0]

    @property
    def n_waiting(self) -> int:
        return self._status()[1]

    @property
    def broken(self) -> bool:
        return self._status()[2]

    def __repr__(self) -> str:
        parties, waiting, broken = self._status()
        if broken:
            return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: broken>"
        return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: waiters={waiting}/{parties}>"


def _attach_barrier(name: str, offset: int, parties: int, timeout: Optional[float]) -> Barrier:
    from multiprocessing import shared_memory
    return Barrier(parties, None, timeout, buffer=shared_memory.SharedMemory(name=name), offset=offset, initialize=False)
