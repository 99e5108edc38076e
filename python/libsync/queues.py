"""Dispatch-style queues, a thread executor and isolated values (libsync's sync/queues.h).

    queue = SerialQueue()
    queue.async_(lambda: print("later, in FIFO order"))
    answer = queue.sync(lambda: 6 * 7)            # 42; an exception raised inside is re-raised

    cache = ConcurrentQueue()                     # sync/async run side by side,
    cache.barrier_async(lambda: table.clear())    # barrier_* run alone

    name = IsolatedValue("initial")               # read concurrently, written alone
    name.get(); name.set("new"); name.update(str.upper)

    with ThreadExecutor() as worker:              # one dedicated thread, FIFO
        worker.async_(job); worker.sync(lambda: state)

Work is any callable taking no argument (``IsolatedValue`` writes take the value and return
the new one). ``sync`` returns the work's result or raises its exception. An exception raised
by *async* work is passed to the handler set with ``set_exception_handler``; by default it is
printed by ``threading.excepthook``, as an unhandled exception in a thread is.

Errors: ``sync`` from work running on the same queue or executor (directly or through other
``sync`` calls) raises ``DeadlockError`` instead of deadlocking; using a closed queue or a
stopped executor raises ``RuntimeError``, as does ``sync``/``async_`` on an executor in a
forked child (its thread stayed in the parent; ``stop`` there returns at once).

Shutdown: ``close()`` on a queue never cancels work: what was submitted still runs (with
``wait=True``, the default, close returns after it has). ``stop()`` on an executor lets its
thread run everything already delivered, then the thread exits (``stop`` waits for that unless
called from the executor's own work). Work submitted but not yet run keeps its queue or
executor alive, so dropping the last reference loses nothing.
"""
from __future__ import annotations

import ctypes
import errno
import itertools
import threading
from ctypes import c_int, c_void_p
from typing import Any, Callable, Optional, TypeVar

from ._common import DeadlockError, declare

__all__ = ["SerialQueue", "ConcurrentQueue", "ThreadExecutor", "IsolatedValue", "DeadlockError",
           "set_exception_handler"]

T = TypeVar("T")
_Self = TypeVar("_Self", bound="_Owner")


# Work crosses into C as one trampoline per signature plus an integer key into these tables:
# pending async work (kept alive until it has run) and the cells of sync calls in progress.
_WORK = ctypes.CFUNCTYPE(None, c_void_p)
_VALUE_WORK = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
_keys = itertools.count(1)
_pending: dict[int, tuple[Callable[[], object], object]] = {}   # key -> (callable, owner)
_calls: dict[int, list[Any]] = {}     # key -> [callable, result, exception]
_handler: Optional[Callable[[BaseException, Any], object]] = None


def set_exception_handler(handler: Optional[Callable[[BaseException, Any], object]]) -> None:
    """Sets the function called as ``handler(exception, owner)`` when async work raises (owner:
    the queue, executor or isolated value). None restores the default: ``threading.excepthook``,
    which prints it like an unhandled exception in a thread."""
    global _handler
    _handler = handler


def _report(exception: BaseException, owner: Any) -> None:
    handler = _handler
    if handler is not None:
        try:
            handler(exception, owner)
            return
        except BaseException as failure:  # a broken handler must not lose the report
            exception = failure
    threading.excepthook(threading.ExceptHookArgs(
        (type(exception), exception, exception.__traceback__, threading.current_thread())))


def _run_async(key: int) -> None:
    work, owner = _pending.pop(key)
    try:
        work()
    except BaseException as exception:
        _report(exception, owner)


def _run_sync(key: int) -> None:
    cell = _calls[key]
    try:
        cell[1] = cell[0]()
    except BaseException as exception:
        cell[2] = exception


_async_trampoline = _WORK(_run_async)
_sync_trampoline = _WORK(_run_sync)
_async_address = ctypes.cast(_async_trampoline, c_void_p).value
_sync_address = ctypes.cast(_sync_trampoline, c_void_p).value


def _raise_for(code: int, what: str) -> None:
    if code == errno.EDEADLK:
        raise DeadlockError(f"{what}: called from work running on it; it would wait forever", code)
    if code == errno.ECANCELED:
        raise RuntimeError(f"{what}: the executor is stopped")
    if code == errno.ESRCH:
        raise RuntimeError(f"{what}: the executor's thread is in the process this one was forked "
                           "from; it does not exist in this child")
    raise OSError(code, f"{what}: {errno.errorcode.get(code, code)}")


def _call_sync(function: Callable[..., int], handle: Optional[int], work: Callable[[], T], what: str,
               trampoline: Optional[int] = 0) -> T:
    """Runs work through the C function `function(handle, trampoline, key)` and returns its
    result or raises its exception."""
    _callable(work, what)
    key = next(_keys)
    cell = _calls[key] = [work, None, None]
    try:
        code = function(handle, trampoline or _sync_address, key)
    finally:
        del _calls[key]
    if code:
        _raise_for(code, what)
    if cell[2] is not None:
        raise cell[2]
    result: T = cell[1]
    return result


def _call_async(function: Callable[..., int], handle: Optional[int], work: Callable[[], object], owner: Any,
                what: str, trampoline: Optional[int] = 0) -> None:
    """Submits work through the C function `function(handle, trampoline, key)`; work stays in
    _pending (alive, with its owner) until it has run."""
    _callable(work, what)
    key = next(_keys)
    _pending[key] = (work, owner)
    code = function(handle, trampoline or _async_address, key)
    if code:
        del _pending[key]
        _raise_for(code, what)


# Work is passed as (handle, trampoline, key). sync calls wait (and call back into Python from
# other threads): they release the GIL. Submissions never wait (an isolated write may run at
# once, on this thread, with the GIL held).
_queue_sync, _queue_barrier_sync, _executor_sync, _isolated_read, _isolated_write_sync = (
    declare(name, c_int, c_void_p, c_void_p, c_void_p, blocking=True) for name in (
        "sync_queue_sync", "sync_queue_barrier_sync", "sync_executor_sync", "sync_isolated_read",
        "sync_isolated_write_sync"))
_queue_async, _queue_barrier_async, _executor_async, _isolated_write_async = (
    declare(name, c_int, c_void_p, c_void_p, c_void_p) for name in (
        "sync_queue_async", "sync_queue_barrier_async", "sync_executor_async", "sync_isolated_write_async"))
_queue_create = declare("sync_queue_create", c_int, ctypes.POINTER(c_void_p), ctypes.c_char_p, c_int)
_executor_create = declare("sync_executor_create", c_int, ctypes.POINTER(c_void_p), blocking=True)
_isolated_create = declare("sync_isolated_create", c_int, ctypes.POINTER(c_void_p), c_void_p)
_executor_is_current = declare("sync_executor_is_current", ctypes.c_bool, c_void_p)
_queue_destroy = declare("sync_queue_destroy", c_int, c_void_p)
_executor_stop = declare("sync_executor_stop", c_int, c_void_p, blocking=True)
_executor_destroy = declare("sync_executor_destroy", c_int, c_void_p, blocking=True)
_isolated_destroy = declare("sync_isolated_destroy", c_int, c_void_p)
# get/set take the value without a callback when it is free (see IsolatedValue). No argtypes:
# ctypes converts faster without; the handle is passed as a c_void_p object.
_try_begin_read, _end_read, _try_begin_write, _end_write = (declare(name) for name in (
    "sync_isolated_try_begin_read", "sync_isolated_end_read", "sync_isolated_try_begin_write",
    "sync_isolated_end_write"))


class _Owner:
    """Owns a C object, `_handle` (None once released), which _DESTROY frees when this goes:
    work not yet run keeps its owner alive, so nothing is pending then."""

    _DESTROY: Callable[[Optional[int]], int]  # a C function, not a method (ctypes functions do not bind)
    _handle: Optional[int]

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._DESTROY(self._handle)


class _Queue(_Owner):
    _kind = 0
    _DESTROY = _queue_destroy

    def __init__(self, label: Optional[str] = None) -> None:
        handle = c_void_p()
        code = _queue_create(ctypes.byref(handle), None if label is None else label.encode(), self._kind)
        if code:
            _raise_for(code, type(self).__name__)
        self._handle = handle.value
        self.label = label

    def _live(self) -> int:
        handle = self._handle
        if handle is None:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return handle

    def sync(self, work: Callable[[], T]) -> T:
        """Runs work on the queue, waits, and returns its result (or raises its exception).
        Raises DeadlockError when called from work running on this queue."""
        return _call_sync(_queue_sync, self._live(), work, f"{type(self).__name__}.sync")

    def async_(self, work: Callable[[], object]) -> None:
        """Submits work and returns at once; its exception goes to the exception handler."""
        _call_async(_queue_async, self._live(), work, self, f"{type(self).__name__}.async_")

    def close(self, wait: bool = True) -> None:
        """Releases the queue. Work already submitted still runs; with wait (the default),
        returns after it has (not allowed from the queue's own work). Idempotent."""
        if self._handle is None:
            return
        if wait:
            _call_sync(_queue_barrier_sync, self._handle, lambda: None, f"{type(self).__name__}.close")
        handle, self._handle = self._handle, None
        _queue_destroy(handle)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label!r}{' closed' if self._handle is None else ''}>"


class SerialQueue(_Queue):
    """Work runs one item at a time, in FIFO order, on libdispatch's threads."""
    _kind = 0


class ConcurrentQueue(_Queue):
    """sync/async work may run at the same time; barrier work runs alone, after everything
    submitted before it has finished and before anything submitted after it starts."""
    _kind = 1

    def barrier_sync(self, work: Callable[[], T]) -> T:
        """As sync, but work runs alone on the queue."""
        return _call_sync(_queue_barrier_sync, self._live(), work, "ConcurrentQueue.barrier_sync")

    def barrier_async(self, work: Callable[[], object]) -> None:
        """As async_, but work runs alone on the queue."""
        _call_async(_queue_barrier_async, self._live(), work, self, "ConcurrentQueue.barrier_async")


class ThreadExecutor(_Owner):
    """A dedicated thread running delivered work one item at a time, in arrival order (Cocoa's
    "perform selector on a thread")."""
    _DESTROY = _executor_destroy

    def __init__(self) -> None:
        handle = c_void_p()
        code = _executor_create(ctypes.byref(handle))
        if code:
            _raise_for(code, "ThreadExecutor")
        self._handle = handle.value

    def async_(self, work: Callable[[], object]) -> None:
        """Delivers work and returns at once. RuntimeError once stopped, or in a forked child."""
        _call_async(_executor_async, self._handle, work, self, "ThreadExecutor.async_")

    def sync(self, work: Callable[[], T]) -> T:
        """Delivers work, waits until the executor's thread has run it, and returns its result
        (or raises its exception). DeadlockError from the executor's own work; RuntimeError
        once stopped, or in a forked child (the executor's thread is in the parent)."""
        return _call_sync(_executor_sync, self._handle, work, "ThreadExecutor.sync")

    def stop(self) -> None:
        """Refuses new work; the thread runs everything already delivered, then exits. Waits
        for that, except from the executor's own work. Idempotent."""
        _executor_stop(self._handle)

    @property
    def is_current(self) -> bool:
        """Whether the calling thread is the executor's thread."""
        return _executor_is_current(self._handle)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# The isolated value's work also receives the C value pointer (unused: the value lives here).
_read_trampoline = _VALUE_WORK(lambda _value, key: _run_sync(key))
_read_address = ctypes.cast(_read_trampoline, c_void_p).value
_write_trampoline = _VALUE_WORK(lambda _value, key: _run_async(key))
_write_address = ctypes.cast(_write_trampoline, c_void_p).value


class IsolatedValue(_Owner):
    """A value read concurrently and written alone, in issue order: a concurrent queue with
    barrier writes, packaged. ``write``/``set`` do not wait (a write may run at once, on
    the caller's thread, or later, on the thread that frees the value); ``update`` waits. A read
    issued after a write returned sees that write. Work must not use the same IsolatedValue."""

    _DESTROY = _isolated_destroy

    def __init__(self, value: Any = None) -> None:
        handle = c_void_p()
        _isolated_create(ctypes.byref(handle), None)
        self._handle = handle.value
        self._pointer = handle
        self._value = value

    def read(self, work: Callable[[Any], T]) -> T:
        """Returns work(value), run beside other reads, after every write issued before."""
        _callable(work, "IsolatedValue.read")
        return _call_sync(_isolated_read, self._handle, lambda: work(self._value), "IsolatedValue.read",
                          _read_address)

    def get(self) -> Any:
        """The value, after every write issued before."""
        # Fast path: a read share taken without waiting (nor releasing the GIL) and released
        # at once; the callback read only when a write holds the value or is pending.
        if _try_begin_read(self._pointer) == 0:
            value = self._value
            _end_read(self._pointer)
            return value
        return self.read(_identity)

    def write(self, work: Callable[[Any], Any]) -> None:
        """Issues value = work(value), run alone; returns without waiting. An exception goes to
        the exception handler and leaves the value unchanged."""
        _callable(work, "IsolatedValue.write")

        def apply() -> None:
            self._value = work(self._value)
        _call_async(_isolated_write_async, self._handle, apply, self, "IsolatedValue.write", _write_address)

    def set(self, value: Any) -> None:
        """Issues value = value (a write); returns without waiting."""
        if _try_begin_write(self._pointer) == 0:  # free: write now, no callback
            self._value = value
            _end_write(self._pointer)
            return

        def apply() -> None:
            self._value = value
        _call_async(_isolated_write_async, self._handle, apply, self, "IsolatedValue.set", _write_address)

    def update(self, work: Callable[[Any], Any]) -> Any:
        """value = work(value), run alone after every write issued before; waits and returns
        the new value (or raises work's exception, leaving the value unchanged)."""
        _callable(work, "IsolatedValue.update")

        def apply() -> Any:
            self._value = work(self._value)
            return self._value
        return _call_sync(_isolated_write_sync, self._handle, apply, "IsolatedValue.update", _read_address)

    def __repr__(self) -> str:
        return f"<IsolatedValue {self.get()!r}>"


def _identity(value: T) -> T:
    return value


def _callable(work: Any, what: str) -> None:
    if not callable(work):
        raise TypeError(f"{what}: work must be callable, not {type(work).__name__}")
