"""asyncio waits on libsync's locks, through the C event-loop API (sync/async.h).

One eventfd per event loop, registered with ``loop.add_reader``: every pending acquire started
from that loop names it, libsync's waker thread writes to it when an acquire completes, and the
loop's reader collects the completed ones and resolves their futures in the loop's own thread
(Python is never called from the waker thread). Any loop works, and several loops in several
threads may wait on the same lock: each has its own descriptor.

Every decision (who holds the lock, FIFO order, deadlines, dead holders) is the core's; this
module converts: a pending handle into a future, a cancellation into ``sync_async_cancel`` (and
a grant that raced it back into a release), the loop's end and fork() into withdrawals.

``acquire(start, give_back)`` is the one helper every primitive uses: ``start(fd, handle_ref)``
is a C ``*_lock_async``-shaped start function bound to its lock and deadline (the handle shape
of ``sync_async_t``), ``give_back(handle)`` releases a grant nobody will use.
"""
from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
import weakref
from ctypes import POINTER, byref, c_int, c_size_t, c_void_p
from typing import Any, Callable, Dict, Optional, Tuple

from ._common import declare

__all__ = ["acquire", "complete", "owner", "running_waits", "unlock_local"]

EINPROGRESS, EOWNERDEAD = errno.EINPROGRESS, errno.EOWNERDEAD
_result = declare("sync_async_result", c_int, c_void_p)
_cancel = declare("sync_async_cancel", c_int, c_void_p)
_free = declare("sync_async_free", c_int, c_void_p)
_abandon = declare("sync_async_abandon", c_int, c_void_p)
if sys.version_info < (3, 12):
    # asyncio.current_task there calls get_running_loop, which makes a getpid() system call
    # each time (a fork check): the costliest part of an uncontended `async with` of a Mutex
    # (twice). The thread's running loop is cached instead: a loop whose _thread_id is the
    # calling thread's runs in it (one loop runs in a thread at a time), so it is the one
    # get_running_loop would return. (The cache is dropped at fork.)
    from asyncio.events import _get_running_loop
    from asyncio.tasks import _current_tasks as _tasks  # type: ignore[attr-defined]  # private, not in typeshed
    _current_tasks: Dict[Any, asyncio.Task[Any]] = _tasks  # loop (or None) -> its running task
    _running = threading.local()
    _get_ident = threading.get_ident

    def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
        """The loop running in this thread, or None."""
        loop = getattr(_running, "loop", None)
        if loop is None or getattr(loop, "_thread_id", None) != _get_ident():
            loop = _running.loop = _get_running_loop()
        return loop

    def _current_task() -> Optional[asyncio.Task[Any]]:
        """The running task, or None (no running loop, or not in a task)."""
        loop = getattr(_running, "loop", None)
        if loop is None or getattr(loop, "_thread_id", None) != _get_ident():
            loop = _running.loop = _get_running_loop()
        return _current_tasks.get(loop)
else:  # C, and no error outside a running loop is wanted here
    from asyncio import _get_running_loop as _running_loop

    def _current_task() -> Optional[asyncio.Task[Any]]:
        """The running task, or None (no running loop, or not in a task)."""
        try:
            return asyncio.current_task()
        except RuntimeError:
            return None


def owner() -> int:
    """The calling task's identity, the owner the core records for an owner-checked lock."""
    task = _current_task()
    if task is None:
        raise RuntimeError("an async acquire must run in an asyncio task")
    return id(task)


class _Pending:
    """One pending acquire: its handle (None once withdrawn for its loop or by fork), its
    future, and how to release it if it was granted to nobody."""
    __slots__ = ("handle", "future", "give_back")
    handle: Optional[c_void_p]
    future: asyncio.Future[int]

    def __init__(self, handle: c_void_p, future: asyncio.Future[int], give_back: Optional[Callable[[c_void_p], Any]]):
        self.handle, self.future, self.give_back = handle, future, give_back

    def withdraw(self, forked: bool = False) -> None:
        """Withdraws the acquire for good (its loop is closing, or this is a fork()ed child):
        cancelled if still pending, released if it was granted; the handle is freed. A
        condition wait (no give_back) is abandoned: the core releases the mutex it takes again
        (in a fork()ed child, where the core has none of the parent's waits, it is left alone)."""
        handle, self.handle = self.handle, None
        if handle is None:
            return
        if self.give_back is None:
            if not forked:
                _abandon(handle)
            return
        if _cancel(handle) != 0 and _result(handle) in (0, EOWNERDEAD):
            self.give_back(handle)
        _free(handle)


class _LoopWaits:
    """One event loop's descriptor and pending acquires (handle address -> _Pending)."""
    __slots__ = ("fd", "pending", "__weakref__")

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.pending: Dict[int, _Pending] = {}

    def ready(self) -> None:
        """The loop's reader: resolves the futures of the acquires that completed.

        The descriptor's count says how many completions were delivered since the last read
        (each writes 1 once its result is stored): the scan, oldest acquire first, stops once it
        has found that many completed, so that a wake costs O(completed) rather than O(pending)
        when the oldest complete first (one lock's FIFO). A completion found before its write
        (its write then comes, and wakes this reader again) leaves that later wake one to find:
        every completion is still found. No count (a wake without one): every pending acquire
        is looked at."""
        try:
            wanted = int.from_bytes(os.read(self.fd, 8), sys.byteorder) or len(self.pending)
        except BlockingIOError:
            wanted = len(self.pending)
        done = []
        for key, entry in self.pending.items():
            code = _result(entry.handle)
            if code != EINPROGRESS:
                done.append((key, entry, code))
                if len(done) >= wanted:
                    break
        for key, entry, code in done:
            del self.pending[key]
            if not entry.future.done():
                entry.future.set_result(code)

    def granted(self, key: int) -> None:
        """A release in this loop's thread handed the lock to the pending acquire `key` of this
        loop and left its delivery to the caller (sync_mutex_unlock_local): resolves its future
        here, as the reader would, without the eventfd's round trip. (Not pending any more: its
        task is being cancelled, and the cancellation finds the grant and gives it back.)"""
        entry = self.pending.pop(key, None)
        if entry is not None and not entry.future.done():
            entry.future.set_result(_result(entry.handle))

    def withdraw_all(self, forked: bool = False) -> None:
        pending, self.pending = self.pending, {}
        for entry in pending.values():
            entry.withdraw(forked)

    def close(self, forked: bool = False) -> None:
        self.withdraw_all(forked)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_loops: Dict[int, _LoopWaits] = {}  # id(loop) -> its waits, while the loop lives and is open


def _waits(loop: asyncio.AbstractEventLoop) -> _LoopWaits:
    waits = _loops.get(id(loop))
    if waits is None:
        waits = _LoopWaits()
        loop.add_reader(waits.fd, waits.ready)
        key = id(loop)
        _loops[key] = waits

        def forget(waits: _LoopWaits = waits, key: int = key) -> None:
            if _loops.get(key) is waits:
                del _loops[key]
            waits.close()

        # The loop's end withdraws its waiters: at close() (a loop whose close can be wrapped:
        # asyncio's own; a loop that cannot, uvloop's, at its collection), and at collection.
        close = loop.close

        def closing() -> None:
            if not loop.is_closed():
                loop.remove_reader(waits.fd)
            forget()
            close()
        try:
            loop.close = closing  # type: ignore[method-assign]
        except AttributeError:
            pass
        weakref.finalize(loop, forget)
    return waits


def running_waits() -> Optional[_LoopWaits]:
    """The running loop's waits if acquires of it are pending (a release may then hand the lock
    to one of them: `unlock_local`), else None. Cheap when no loop ever waited."""
    if not _loops:
        return None
    waits = _loops.get(id(_running_loop()))
    return waits if waits is not None and waits.pending else None


_unlock_local = declare("sync_mutex_unlock_local", c_int, c_void_p, c_size_t, c_int, POINTER(c_void_p))


def unlock_local(p: Any, owner: int, waits: _LoopWaits) -> int:
    """Releases the mutex at `p` as sync_mutex_unlock (owner 0) or sync_mutex_unlock_async
    (owner): the core decides who gets it next; if it hands it to a pending acquire of the
    running loop (`waits`), its future is resolved here, with no eventfd round trip."""
    granted = c_void_p()
    code = _unlock_local(p, owner, waits.fd, byref(granted))
    if granted.value:
        waits.granted(granted.value)
    return code


def _forget_after_fork() -> None:
    """In a fork()ed child: the parent's pending acquires are not the child's. Each is withdrawn
    (the core's child has no waiters; its handles are cancelled and freed); the descriptors are
    closed, the loops left alone (their epoll set is shared with the parent's)."""
    loops = list(_loops.values())
    _loops.clear()
    if sys.version_info < (3, 12):
        _running.loop = None
    for waits in loops:
        waits.close(forked=True)


os.register_at_fork(after_in_child=_forget_after_fork)


async def acquire(start: Callable[[int, Any], int], give_back: Callable[[c_void_p], Any],
                  free_granted: bool = True) -> Tuple[int, Optional[c_void_p]]:
    """Runs an async acquire: ``start(fd, byref(handle))`` returns 0 or EOWNERDEAD (taken at
    once), EINPROGRESS (pending: awaited here), or another code. Returns the acquire's code (0,
    EOWNERDEAD, ETIMEDOUT, or an error) and its handle if it was granted and ``free_granted`` is
    False (a lock its handle holds: release it through the handle, then free it); every other
    handle is freed here.

    Cancelled while pending (task.cancel(), asyncio.timeout, wait_for, the coroutine closed):
    the acquire is withdrawn; a grant that raced the cancellation is given back
    (``give_back(handle)``) and the cancellation propagates, except EOWNERDEAD on a
    cancellation: the lock is then held and the code returned, so that the task learns of the
    dead holder (a release would make the lock not recoverable)."""
    loop = asyncio.get_running_loop()
    waits = _waits(loop)
    handle = c_void_p()
    code = start(waits.fd, byref(handle))
    if code != EINPROGRESS:
        return code, _done(handle, code, free_granted)
    entry = _Pending(handle, loop.create_future(), give_back)
    key = handle.value or 0  # set: the acquire is pending
    waits.pending[key] = entry
    try:
        code = await entry.future
    except BaseException as stop:
        waits.pending.pop(key, None)
        if entry.handle is None:  # withdrawn with its loop, or by fork()
            raise
        entry.handle = None
        if _cancel(handle) == 0:
            _free(handle)
            raise
        code = _result(handle)
        if code == EOWNERDEAD and isinstance(stop, asyncio.CancelledError):
            return code, _done(handle, code, free_granted)
        if code in (0, EOWNERDEAD):
            give_back(handle)
        _free(handle)
        raise
    entry.handle = None
    return code, _done(handle, code, free_granted)


def _done(handle: c_void_p, code: int, free_granted: bool) -> Optional[c_void_p]:
    """The handle of a completed acquire, for its caller, or None: freed."""
    if not handle:
        return None
    if not free_granted and code in (0, EOWNERDEAD):
        return handle
    _free(handle)
    return None


async def complete(start: Callable[[int, Any], int], pass_on: Callable[[], Any]) -> int:
    """Runs a condition wait, whose end a cancellation cannot cut short (the core completes it
    once the mutex is held again): ``start(fd, byref(handle))`` returns EINPROGRESS (pending:
    awaited here) or the result of a wait that ended at once. Returns the result.

    Cancelled while pending (task.cancel(), asyncio.timeout, wait_for): the wait is cancelled in
    the core (a signal it was being given is passed on there) and its completion still awaited,
    further cancellations too, then the first cancellation propagates: the caller holds the
    mutex again either way. A wait that a signal had completed as the task was cancelled passes
    the signal on (``pass_on()``). Closed with its loop, or another exception (the coroutine
    closed): the wait is abandoned, the mutex released again by the core."""
    loop = asyncio.get_running_loop()
    waits = _waits(loop)
    handle = c_void_p()
    code = start(waits.fd, byref(handle))
    if code != EINPROGRESS:
        return code
    entry = _Pending(handle, loop.create_future(), None)
    key = handle.value or 0
    waits.pending[key] = entry
    stop: Optional[BaseException] = None
    while True:
        try:
            code = await asyncio.shield(entry.future)
            break
        except asyncio.CancelledError as cancelled:
            if entry.handle is None:  # abandoned with its loop
                raise
            if stop is None:
                stop = cancelled
                _cancel(handle)
        except BaseException:
            waits.pending.pop(key, None)
            entry.withdraw()
            raise
    entry.handle = None
    _free(handle)
    if stop is not None:
        if code == 0:
            pass_on()
        raise stop
    return code
