"""Semaphores, events and barriers: drop-in replacements for threading's, from libsync.so.

``Semaphore``, ``BoundedSemaphore``, ``Event`` and ``Barrier`` take the same arguments, return
the same values and raise the same exceptions as ``threading``'s (``BrokenBarrierError`` *is*
``threading.BrokenBarrierError``). Waits release the GIL and a Ctrl-C in the main thread
interrupts them (``KeyboardInterrupt``), as threading's do.

Each object's state is a few words of C memory. To share one between processes, place it in a
shared buffer (``multiprocessing.shared_memory``, ``mmap``): ``Semaphore.create_in(buf, offset,
value)`` initialises it there, ``Semaphore.attach(buf, offset)`` uses it from another process;
``SIZE`` says how many bytes it needs (the offset must be 4-byte aligned).
"""
from __future__ import annotations

import ctypes
import errno
import threading
import time
from ctypes import byref, c_bool, c_uint32
from typing import Any, Callable, Optional

from ._lib import blocking, nonblocking

__all__ = ["Semaphore", "BoundedSemaphore", "Event", "Barrier", "BrokenBarrierError"]

BrokenBarrierError = threading.BrokenBarrierError
_PROCESS_SHARED = 1
_BARRIER_ACTION = 2
_SEMAPHORE_BOUNDED = 4
_NEVER = -1


def _fn(handle, name, restype=ctypes.c_int):
    function = getattr(handle, name)
    function.restype = restype
    return function


def _deadline(timeout: Optional[float]) -> int:
    """The CLOCK_MONOTONIC deadline in ns for a timeout in seconds (None: no deadline).
    time.monotonic_ns reads the same clock as the library."""
    if timeout is None:
        return _NEVER
    return time.monotonic_ns() + max(0, int(timeout * 1e9))


def _wait(wait_until: Callable, ref: Any, deadline: int, *extra: Any) -> int:
    """Calls a `*_wait_until` function, again after each EINTR: by then the interpreter has run
    the signal's Python handler, which raises KeyboardInterrupt for Ctrl-C."""
    while True:
        result = wait_until(ref, ctypes.c_int64(deadline), *extra)
        if result != errno.EINTR:
            return result


class _CObject:
    """Owns (or borrows, in a shared buffer) the C memory of one primitive."""
    SIZE = 0

    def _bind(self, buffer: Any, offset: int) -> None:
        if buffer is None:
            self._memory = (c_uint32 * (self.SIZE // 4))()
        else:
            from ._memory import ref
            self._memory = ref(buffer, offset, c_uint32 * (self.SIZE // 4))
        self._ref = byref(self._memory)

    @classmethod
    def attach(cls, buffer: Any, offset: int = 0):
        """The object that `create_in` placed in this shared buffer (another process's)."""
        self = cls.__new__(cls)
        self._bind(buffer, offset)
        self._attached()
        return self

    def _attached(self) -> None:
        pass


# ---- Semaphores -------------------------------------------------------------------------------

_sem_init = _fn(nonblocking, "sync_semaphore_init")
_sem_trywait = _fn(nonblocking, "sync_semaphore_trywait")
_sem_wait_until = _fn(blocking, "sync_semaphore_wait_until")
_sem_signal = _fn(nonblocking, "sync_semaphore_signal")
_sem_value = _fn(nonblocking, "sync_semaphore_value", c_uint32)


class Semaphore(_CObject):
    """threading.Semaphore: a counter; acquire takes one unit (waiting while there is none),
    release adds. Waiters are not served in FIFO order."""
    SIZE = 16
    _bounded = False

    def __init__(self, value: int = 1) -> None:
        self._setup(value, None, 0, 0)

    @classmethod
    def create_in(cls, buffer: Any, offset: int = 0, value: int = 1):
        """A semaphore initialised in a shared buffer, usable from every process mapping it."""
        self = cls.__new__(cls)
        self._setup(value, buffer, offset, _PROCESS_SHARED)
        return self

    def _setup(self, value: int, buffer: Any, offset: int, flags: int) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        if value >= 1 << 32:
            raise OverflowError("semaphore initial value must be < 2**32")
        self._bind(buffer, offset)
        _sem_init(self._ref, value, value, flags | (_SEMAPHORE_BOUNDED if self._bounded else 0))

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes a unit. Returns True, or False if not blocking / timed out (threading's rules)."""
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        if _sem_trywait(self._ref) == 0:
            return True
        if not blocking:
            return False
        return _wait(_sem_wait_until, self._ref, _deadline(timeout)) == 0

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        """Adds n units, waking as many waiters."""
        if n < 1:
            raise ValueError("n must be one or more")
        if n >= 1 << 32 or _sem_signal(self._ref, n) != 0:
            self._over_released()

    def _over_released(self) -> None:
        raise OverflowError("semaphore value would exceed 2**32 - 1")

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: value={_sem_value(self._ref)}>"


class BoundedSemaphore(Semaphore):
    """threading.BoundedSemaphore: release beyond the initial value raises ValueError."""
    _bounded = True

    def _over_released(self) -> None:
        raise ValueError("Semaphore released too many times")


# ---- Event ------------------------------------------------------------------------------------

_event_init = _fn(nonblocking, "sync_event_init")
_event_set = _fn(nonblocking, "sync_event_set")
_event_clear = _fn(nonblocking, "sync_event_clear")
_event_is_set = _fn(nonblocking, "sync_event_is_set", c_bool)
_event_wait_until = _fn(blocking, "sync_event_wait_until")


class Event(_CObject):
    """threading.Event: a flag that threads (or processes) can wait for."""
    SIZE = 8

    def __init__(self) -> None:
        self._bind(None, 0)

    @classmethod
    def create_in(cls, buffer: Any, offset: int = 0):
        """A clear event initialised in a shared buffer, usable from every process mapping it."""
        self = cls.__new__(cls)
        self._bind(buffer, offset)
        _event_init(self._ref, False, _PROCESS_SHARED)
        return self

    def is_set(self) -> bool:
        return _event_is_set(self._ref)

    isSet = is_set

    def set(self) -> None:
        """Sets the flag and wakes every waiter."""
        _event_set(self._ref)

    def clear(self) -> None:
        _event_clear(self._ref)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the flag is set or the timeout passes; returns the flag."""
        if _event_is_set(self._ref):
            return True
        return _wait(_event_wait_until, self._ref, _deadline(timeout)) == 0

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} at {id(self):#x}: {'set' if self.is_set() else 'unset'}>"


# ---- Barrier ----------------------------------------------------------------------------------

_barrier_init = _fn(nonblocking, "sync_barrier_init")
_barrier_wait_until = _fn(blocking, "sync_barrier_wait_until")
_barrier_action_done = _fn(nonblocking, "sync_barrier_action_done")
_barrier_reset = _fn(nonblocking, "sync_barrier_reset")
_barrier_abort = _fn(nonblocking, "sync_barrier_abort")
_barrier_status = _fn(nonblocking, "sync_barrier_status")


class Barrier(_CObject):
    """threading.Barrier: `parties` threads meet in wait() and leave together; the last to
    arrive runs `action` first. A timeout or a failed action breaks the barrier
    (BrokenBarrierError for every waiter) until reset()."""
    SIZE = 32

    def __init__(self, parties: int, action: Optional[Callable[[], Any]] = None,
                 timeout: Optional[float] = None) -> None:
        self._setup(parties, action, timeout, None, 0, 0)

    @classmethod
    def create_in(cls, buffer: Any, offset: int, parties: int, timeout: Optional[float] = None):
        """A barrier in a shared buffer, for parties in several processes (no action)."""
        self = cls.__new__(cls)
        self._setup(parties, None, timeout, buffer, offset, _PROCESS_SHARED)
        return self

    def _setup(self, parties, action, timeout, buffer, offset, flags) -> None:
        if not 1 <= parties < 1 << 32:
            raise ValueError("parties must be >= 1")
        self._bind(buffer, offset)
        self._action, self._timeout = action, timeout
        _barrier_init(self._ref, parties, flags | (_BARRIER_ACTION if action else 0))

    def _attached(self) -> None:
        self._action, self._timeout = None, None

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for all parties; returns this thread's arrival index (0 .. parties - 1)."""
        index = c_uint32()
        result = _wait(_barrier_wait_until, self._ref,
                       _deadline(self._timeout if timeout is None else timeout), byref(index))
        if result != 0:
            raise BrokenBarrierError
        if self._action is not None and index.value == self.parties - 1:
            try:
                self._action()
            except BaseException:
                _barrier_action_done(self._ref, False)
                raise
            _barrier_action_done(self._ref, True)
        return index.value

    def reset(self) -> None:
        """Back to the initial state; threads waiting now get BrokenBarrierError."""
        _barrier_reset(self._ref)

    def abort(self) -> None:
        """Breaks the barrier: waits raise BrokenBarrierError until reset()."""
        _barrier_abort(self._ref)

    def _status(self):
        parties, waiting, broken = c_uint32(), c_uint32(), c_bool()
        _barrier_status(self._ref, byref(parties), byref(waiting), byref(broken))
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
