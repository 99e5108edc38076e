"""Signals routed to a thread or a queue (libsync's sync/signals.h).

Python runs ``signal.signal`` handlers in the main thread only, between bytecodes. A routed
signal runs its handler on a chosen ``ThreadExecutor``'s thread (or as work of a ``SerialQueue``
/ ``ConcurrentQueue``), once per arrival, in arrival order, with the sender's siginfo::

    from libsync import signals
    from libsync.queues import ThreadExecutor

    worker = ThreadExecutor()
    def on_usr1(info):                  # on worker's thread
        print(f"SIGUSR1 from pid {info.pid} (uid {info.uid}), value {info.value}")

    with signals.route(signal.SIGUSR1, worker, on_usr1):
        ...                             # leaving the block unroutes

    route = signals.route(signal.SIGRTMIN + 1, worker, on_usr1)
    route.unroute()                     # or signals.unroute(signal.SIGRTMIN + 1)

While a signal is routed its ``signal.signal`` handler does not run; unrouting restores it (the
C-level action it had). Routing ``SIGINT`` therefore takes ^C away from ``KeyboardInterrupt``
until it is unrouted. Standard signals coalesce while pending; real-time signals
(``signal.SIGRTMIN``..``SIGRTMAX``) queue, each with its value. A signal sent to one thread
(``signal.pthread_kill``, ``signal.raise_signal``) that blocks it is not routed: send it to the
process (``os.kill(os.getpid(), sig)``). Routes still in place at interpreter exit are unrouted
then. Details, limits and the mechanism: docs/signals.md.

Errors: ``ValueError`` (the signal cannot be routed: SIGKILL, SIGSTOP, faults such as SIGSEGV,
SIGPIPE, out of range, ...), ``TypeError`` (target or handler of the wrong kind),
``RuntimeError`` (already routed; or, for ``unroute(signo)``, not routed), ``OSError`` (the
internal thread could not be created). A handler's exception goes to the queues' exception
handler (``libsync.queues.set_exception_handler``; by default ``threading.excepthook``).
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import itertools
import os
import threading
from ctypes import c_bool, c_int, c_int32, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Callable, Optional, Union

from . import queues
from ._common import declare
from .queues import ConcurrentQueue, SerialQueue, ThreadExecutor

__all__ = ["SignalInfo", "Route", "route", "unroute", "is_routable"]

Target = Union[ThreadExecutor, SerialQueue, ConcurrentQueue]


@dataclass(frozen=True)
class SignalInfo:
    """One arrival of a routed signal: its siginfo's number, sender pid and uid, ``si_code``
    (how it was sent: 0 kill, -1 sigqueue, -6 tgkill/pthread_kill/raise, 128 the kernel, or a
    signal-specific code such as SIGCHLD's) and value (``sival_int``, what a sigqueue sender
    passed; 0 otherwise)."""
    signo: int
    pid: int
    uid: int
    code: int
    value: int


class _CInfo(ctypes.Structure):
    _fields_ = [("signo", c_int), ("code", c_int), ("pid", c_int32), ("uid", c_uint32),
                ("value", c_int), ("value_ptr", c_void_p)]


_HANDLER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_CInfo), c_void_p)


class _CTarget(ctypes.Structure):
    _fields_ = [("executor", c_void_p), ("queue", c_void_p), ("handler", _HANDLER), ("context", c_void_p)]


# route and unroute wait (unroute for a running handler, which needs the GIL): they release it.
_route = declare("sync_signal_route", c_int, c_int, ctypes.POINTER(_CTarget), blocking=True)
_unroute = declare("sync_signal_unroute", c_int, c_int, blocking=True)
_is_routable = declare("sync_signal_is_routable", c_bool, c_int)

_lock = threading.Lock()
_keys = itertools.count(1)
_routes: dict[int, Route] = {}   # signo -> the Route holding it
_by_key: dict[int, Route] = {}   # the C context (a key) -> Route, until its unroute has returned


def _deliver(info: ctypes._Pointer[_CInfo], key: int) -> None:
    holder = _by_key.get(key)
    if holder is None:
        return
    c = info.contents
    try:
        holder.handler(SignalInfo(c.signo, c.pid, c.uid, c.code, c.value))
    except BaseException as exception:
        queues._report(exception, holder)


_trampoline = _HANDLER(_deliver)


def _forget_routes_in_child() -> None:
    # The C library unroutes everything in a fork()ed child; forget the Python side too.
    _routes.clear()
    _by_key.clear()


os.register_at_fork(after_in_child=_forget_routes_in_child)


@atexit.register
def _unroute_all() -> None:
    # Handlers are Python code: no delivery may call one once the interpreter is finalizing.
    for holder in list(_routes.values()):
        holder.unroute()


def is_routable(signo: int) -> bool:
    """Whether signo can be routed at all (see the ValueError of route)."""
    return bool(_is_routable(_signal_number(signo)))


def route(signo: int, target: Target, handler: Callable[[SignalInfo], object]) -> "Route":
    """Routes signo: from now on each arrival calls handler(info) on target (a ThreadExecutor's
    thread, or as work of a SerialQueue, or as barrier work of a ConcurrentQueue), in arrival
    order. The calling thread blocks the signal (threads it starts later inherit that). Returns
    the Route (a context manager). Raises ValueError, TypeError, RuntimeError or OSError."""
    number = _signal_number(signo)
    if not callable(handler):
        raise TypeError(f"route: handler must be callable, not {type(handler).__name__}")
    c_target = _CTarget(None, None, _trampoline, None)
    if isinstance(target, ThreadExecutor):
        c_target.executor = target._handle
    elif isinstance(target, (SerialQueue, ConcurrentQueue)):
        c_target.queue = target._live()
    else:
        raise TypeError(f"route: target must be a ThreadExecutor, SerialQueue or ConcurrentQueue, "
                        f"not {type(target).__name__}")
    holder = Route(number, target, handler, next(_keys))
    c_target.context = holder._key
    with _lock:
        _by_key[holder._key] = holder
        code = _route(number, ctypes.byref(c_target))
        if code:
            del _by_key[holder._key]
            _raise_for(code, number, "route")
        _routes[number] = holder
    return holder


def unroute(signo: int) -> None:
    """Unroutes signo, whoever routed it: its previous action (a signal.signal handler, SIG_DFL,
    SIG_IGN) is back. Arrivals sent before the call that the handler has not started are
    dropped, even those still pending in the kernel: none reaches the previous action, none is
    left pending. A handler running on another thread is waited for. Arrivals sent after it
    returns go to the previous action. Raises ValueError (cannot be routed) or RuntimeError (not
    routed)."""
    number = _signal_number(signo)
    with _lock:
        holder = _routes.pop(number, None)
    if holder is None:
        # Routed by C or Swift code, or not at all: the library says which.
        code = _unroute(number)
        if code:
            _raise_for(code, number, "unroute")
        return
    holder._finish_unroute()


class Route:
    """A routed signal (returned by ``route``). ``unroute()`` (also ``close()``, or leaving its
    ``with`` block) unroutes it if it still holds the signal; idempotent. The route keeps its
    target and handler alive until then."""

    def __init__(self, signo: int, target: Target, handler: Callable[[SignalInfo], object], key: int) -> None:
        self.signo = signo
        self.target = target
        self.handler = handler
        self._key = key

    @property
    def routed(self) -> bool:
        """Whether this route still holds its signal."""
        return _routes.get(self.signo) is self

    def unroute(self) -> None:
        """Unroutes this route's signal, as the module's unroute(): its previous action is back;
        arrivals not yet started are dropped (also those still pending in the kernel: none
        reaches the previous action); a handler running on another thread is waited for. Nothing
        happens if this route no longer holds it. ``close`` is the same."""
        with _lock:
            if _routes.get(self.signo) is not self:
                return
            del _routes[self.signo]
        self._finish_unroute()

    close = unroute

    def _finish_unroute(self) -> None:
        # Claimed (out of _routes) under _lock; the C call runs without it, since it waits for a
        # running handler, which may itself route or unroute.
        code = _unroute(self.signo)
        # Now the handler is not running and never runs again (or this is the handler itself,
        # unrouting its own signal: it is running, and needs no lookup any more).
        _by_key.pop(self._key, None)
        if code and code != errno.ENOENT:
            _raise_for(code, self.signo, "unroute")

    def __enter__(self) -> "Route":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unroute()

    def __repr__(self) -> str:
        return f"<Route signal {self.signo} -> {self.target!r}{'' if self.routed else ' (unrouted)'}>"


def _signal_number(signo: int) -> int:
    try:
        return int(signo)
    except (TypeError, ValueError):
        raise TypeError(f"a signal number is an int or a signal.Signals, not {type(signo).__name__}") from None


def _raise_for(code: int, signo: int, what: str) -> None:
    if code == errno.EINVAL:
        raise ValueError(f"{what}: signal {signo} cannot be routed (SIGKILL, SIGSTOP, a fault the kernel "
                         f"raises in the faulting thread, SIGABRT, SIGPIPE, SIGXFSZ, glibc's own, or out of range)")
    if code == errno.EBUSY:
        raise RuntimeError(f"{what}: signal {signo} is routed already")
    if code == errno.ENOENT:
        raise RuntimeError(f"{what}: signal {signo} is not routed")
    raise OSError(code, f"{what}: signal {signo}: {os.strerror(code)}")
