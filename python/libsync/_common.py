"""What the package's modules share: declaring C functions, the lock errors, deadlines, the wait
for the library's ``_interruptible`` functions, the try-then-wait acquire, and the word layouts
the library reports (sync/layout.h).

Waiting: every blocking C function the package calls takes a CLOCK_MONOTONIC deadline in ns
(``FOREVER``: none) and returns EINTR when a signal handler is due (in the main thread at least
every 50 ms), so that handlers (Ctrl-C) run between its calls. ``interruptible`` and ``wait``
are the one loop around such a function.
"""
from __future__ import annotations

import ctypes
import errno
import math
import threading
import time
import warnings
from ctypes import POINTER, byref, c_int, c_int64, c_size_t, c_uint32
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, overload

from ._lib import blocking as _blocking, declare as _declare, nonblocking as _nonblocking

if TYPE_CHECKING:  # names of the ctypes stubs only
    from ctypes import _SimpleCData

    from ._lib import CType

_T = TypeVar("_T")

EBUSY, EDEADLK, EINTR, ETIMEDOUT = errno.EBUSY, errno.EDEADLK, errno.EINTR, errno.ETIMEDOUT


@overload
def declare(name: str, *, blocking: bool = ...) -> Callable[..., int]: ...
@overload
def declare(name: str, restype: None, *argtypes: CType, blocking: bool = ...) -> Callable[..., None]: ...
@overload
def declare(name: str, restype: type[_SimpleCData[_T]], *argtypes: CType, blocking: bool = ...) -> Callable[..., _T]: ...


def declare(name: str, restype: Optional[type[_SimpleCData[Any]]] = c_int, *argtypes: CType,
            blocking: bool = False) -> Callable[..., Any]:
    """The C function `name` (see _lib.declare for `argtypes` and the result's type).
    ``blocking=True`` for a call that may wait: it comes from the handle that releases the GIL;
    others keep it (cheaper)."""
    return _declare(_blocking if blocking else _nonblocking, name, restype, *argtypes)


# ---- Errors --------------------------------------------------------------------------------

class LockError(RuntimeError):
    """A lock was misused; ``errno`` holds the C library's code."""

    _CODE = 0

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        self.errno = self._CODE if code is None else code


class DeadlockError(LockError):
    """The calling thread would wait for itself (EDEADLK): it already holds the lock it waits
    for, or runs the work of the queue or executor it waits for."""
    _CODE = errno.EDEADLK


class NotOwnerError(LockError):
    """The calling thread does not hold the lock it releases (EPERM)."""
    _CODE = errno.EPERM


class OwnerDiedError(LockError):
    """A robust lock's previous holder died holding it (EOWNERDEAD). The calling thread now
    holds the lock: repair the state it guards, call ``consistent()``, then release it."""
    _CODE = errno.EOWNERDEAD


class NotRecoverableError(LockError):
    """A robust lock was released after OwnerDiedError without ``consistent()``
    (ENOTRECOVERABLE): it can no longer be acquired."""
    _CODE = errno.ENOTRECOVERABLE


for _error_class in (LockError, DeadlockError, NotOwnerError, OwnerDiedError, NotRecoverableError):
    _error_class.__module__ = "libsync.locks"  # where they are documented and imported from


def error(code: int, what: str, caller: str = "thread") -> LockError:
    """The exception for a lock function's error code (`caller`: who called, in the message:
    a thread, or an asyncio task)."""
    if code == errno.EDEADLK:
        return DeadlockError(f"{what}: the calling {caller} already holds it", code)
    if code == errno.EPERM:
        return NotOwnerError(f"{what}: the calling {caller} does not hold it", code)
    if code == errno.EAGAIN:
        return LockError(f"{what}: count overflow", code)
    if code == errno.EOWNERDEAD:
        return OwnerDiedError(f"{what}: the previous holder died holding it; the caller now holds it: "
                              "repair the state, call consistent(), then release()", code)
    if code == errno.ENOTRECOVERABLE:
        return NotRecoverableError(f"{what}: released without consistent() after its holder died", code)
    return LockError(f"{what}: {errno.errorcode.get(code, code)}", code)


def init_error(code: int, what: str) -> LockError:
    """The exception for an init function's error code: EBUSY says how to attach instead."""
    if code == errno.EBUSY:
        return LockError(f"{what}: the memory holds one that is in use (held or waited on): initialize=True would "
                         "reset it; attach with initialize=False (or, once nothing uses it, zero the memory)", code)
    return error(code, what)


def deprecated(old: str, new: str) -> None:
    """Warns (DeprecationWarning, at the caller's caller) that `old` is kept for compatibility
    only: the name of the library's scheme is `new` (CONTRIBUTING.md, "Names")."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def check(code: int, what: str) -> None:
    """Raises the exception for `code` unless it is 0. (Releases and other hot paths test the
    code inline instead: the call would cost more than the test.)"""
    if code:
        raise error(code, what)


# ---- Deadlines and waiting -------------------------------------------------------------------

FOREVER = c_int64(-1)  # the deadline of a wait without one
_LATEST = (1 << 63) - 1


def deadline_ns(timeout_ns: int) -> c_int64:
    """The CLOCK_MONOTONIC deadline `timeout_ns` from now (time.monotonic_ns reads the library's
    clock); FOREVER for a negative timeout; 0 gives a deadline that has passed when the call
    looks (one try)."""
    if timeout_ns < 0:
        return FOREVER
    return c_int64(min(time.monotonic_ns() + timeout_ns, _LATEST))


def deadline(timeout: Optional[float], nan_waits: bool = False) -> c_int64:
    """The deadline of a timed wait's timeout in seconds, as threading's timed waits treat it:
    None, none (FOREVER); 0 or less, -inf included, do not wait (one try); more than the clock
    can count (inf, 1e300, where threading raises OverflowError) saturates: none. NaN: one try,
    as threading's Condition.wait and Event.wait; with ``nan_waits`` none, as threading's
    Semaphore, Barrier and wait_for (they wait until they succeed)."""
    if timeout is None:
        return FOREVER
    try:
        ns = timeout * 1e9  # TypeError for a non-number, as threading's comparisons raise
    except OverflowError:  # an int too large for a float
        ns = math.inf if timeout > 0 else -math.inf
    if ns >= _LATEST:
        return FOREVER
    if ns > 0:
        return deadline_ns(int(ns))
    if ns <= 0 or not nan_waits:
        return deadline_ns(0)
    return FOREVER  # NaN


_probe = threading.Lock()
_TIMEOUT_MAX = threading.TIMEOUT_MAX


def _refusal(blocking: bool, timeout: float) -> str:
    """threading.Lock's message refusing acquire(blocking, timeout) (it varies by version)."""
    try:
        threading.Lock().acquire(blocking, timeout)
    except ValueError as refused:
        return str(refused)
    raise AssertionError(f"threading.Lock accepted the timeout {timeout}")  # pragma: no cover


_NEGATIVE, _NAN, _NONBLOCKING = _refusal(True, -2), _refusal(True, math.nan), _refusal(False, 1)


def lock_deadline(blocking: Any, timeout: Any) -> Optional[c_int64]:
    """threading's checks of a Lock's acquire(blocking, timeout), with threading's exceptions;
    the deadline to wait to, or None: do not wait. -1: no deadline; another negative timeout,
    -inf and -1e300 included (threading: OverflowError), or NaN: ValueError; more than
    threading.TIMEOUT_MAX: OverflowError, as threading (CPython's lock tests require it), but
    inf, which threading refuses with OverflowError, waits without a deadline."""
    if timeout == -1:
        return FOREVER if blocking else None
    if not blocking:
        raise ValueError(_NONBLOCKING)
    if timeout.__class__ is float or timeout.__class__ is int:
        if not timeout >= 0:
            raise ValueError(_NAN if timeout != timeout else _NEGATIVE)
        if timeout <= _TIMEOUT_MAX:
            return deadline_ns(int(timeout * 1e9))
        if timeout == math.inf:
            return FOREVER
    if _probe.acquire(True, timeout):  # threading's own checks and errors (OverflowError above
        _probe.release()               # TIMEOUT_MAX, TypeError for a non-number)
    return deadline_ns(int(timeout * 1e9))


def interruptible(function: Callable[..., int], *args: Any) -> int:
    """Calls an `_interruptible` C function until it returns other than EINTR, and returns that.
    The interpreter runs pending signal handlers between the calls (Ctrl-C raises
    KeyboardInterrupt here)."""
    code = function(*args)
    while code == EINTR:
        code = function(*args)
    return code


def wait(function: Callable[..., int], *args: Any, what: str) -> bool:
    """An `_interruptible` wait: True when it returns 0, False on ETIMEDOUT; another code raises
    (see ``error``)."""
    code = interruptible(function, *args)
    if code == 0:
        return True
    if code == ETIMEDOUT:
        return False
    raise error(code, what)



def acquired(code: int, pointer: Any, wait_function: Callable[..., int], limit: Optional[c_int64], what: str) -> bool:
    """The rest of an acquire whose try returned `code` (not 0): EBUSY waits until `limit`
    (None: does not wait, False); another code raises."""
    if code != EBUSY:
        raise error(code, what)
    if limit is None:
        return False
    return wait(wait_function, pointer, limit, what=what)


def acquire(pointer: Any, try_function: Callable[[Any], int], wait_function: Callable[..., int], what: str,
            blocking: Any, timeout: Any, take_function: Optional[Callable[[Any], int]] = None) -> bool:
    """threading's acquire(blocking, timeout) of the lock at `pointer`: `try_function(pointer)`
    returns 0 (taken), EBUSY or an error; `wait_function(pointer, deadline)` is its
    `_interruptible` wait. `take_function`, if given, replaces the try of a blocking acquire
    (lock-order checking counts a lock taken there as a lock, not as a trylock)."""
    limit = lock_deadline(blocking, timeout)
    code = (try_function if limit is None or take_function is None else take_function)(pointer)
    return not code or acquired(code, pointer, wait_function, limit, what)


# ---- Word layouts --------------------------------------------------------------------------

class Layout(ctypes.Structure):
    """sync_layout_t (sync/layout.h): where the words Python reads without a call live."""
    _fields_ = [(name, c_uint32) for name in (
        "mutex_robust", "mutex_unowned_held", "recursive_depth_offset", "robust_recursive_depth_offset",
        "cond_waiters_offset", "cond_waiters_mask", "cond_waiter_size", "cond_waiter_state_offset",
        "cond_waiter_idle", "event_state_offset", "event_flag", "semaphore_limit_offset", "once_done",
        "lock_shared", "lock_unowned", "lock_robust")]
    # The fields' Python type (a ctypes field reads as an int), for type checkers.
    mutex_robust: int
    mutex_unowned_held: int
    recursive_depth_offset: int
    robust_recursive_depth_offset: int
    cond_waiters_offset: int
    cond_waiters_mask: int
    cond_waiter_size: int
    cond_waiter_state_offset: int
    cond_waiter_idle: int
    event_state_offset: int
    event_flag: int
    semaphore_limit_offset: int
    once_done: int
    lock_shared: int
    lock_unowned: int
    lock_robust: int


def _layout() -> Layout:
    layout = Layout()
    code = declare("sync_layout", c_int, POINTER(Layout), c_size_t)(byref(layout), ctypes.sizeof(layout))
    if code:
        raise ImportError(f"sync_layout: {errno.errorcode.get(code, code)} (libsync.so is older than this package?)")
    return layout


layout = _layout()


def word(offset: int) -> int:
    """The index, in a view of 32-bit words, of the word at byte `offset`."""
    return offset // 4


def words(cells: Any) -> memoryview:
    """The 32-bit words of ctypes memory, read from Python (cheaper than indexing the array)."""
    return memoryview(cells).cast("B").cast("I")
