"""Lock-order checking (debug mode) for libsync's locks: potential deadlocks found before they
happen, with the Python stack of each order, and a dump of who holds and waits for which lock.

    import libsync
    libsync.debug.check_lock_order(True)
    a, b = libsync.Lock(), libsync.Lock()
    with a:
        with b: pass
    with b:
        with a: pass     # reported: a potential deadlock, with both Python stacks

Covered: Lock, RLock, Mutex, RWLock (both sides), SpinLock, synchronized, Condition and
ConditionLock (through their mutex), from Python, C and Swift alike: one graph per process.
The report goes to stderr once per cycle; ``set_handler`` replaces it, ``set_action("abort")``
aborts after it. ``LIBSYNC_CHECK_LOCK_ORDER=1`` (or ``=abort``) in the environment turns checking
on when libsync.so is loaded. ``waits()`` (and SIGQUIT while checking is on, if SIGQUIT's
disposition is the default) gives the locks each thread holds and waits for, with the wait-for
cycle of a real deadlock marked. See docs/lock_order.md.

Names: every lock above takes ``name=`` (``Lock(name="accounts")``, ``synchronized(obj,
name=...)``), and reports show it (``mutex "accounts" 0x...``) with the Python thread's name
(``thread 1234 "worker-1"``); the Python stacks leave out threading.py's own frames.

Memory: a lock made while checking is on is forgotten when it is freed, so a new lock in the
same memory starts without orders. A lock made before checking was turned on is not (call
``forget`` before dropping it if its memory may hold another lock later). A name goes when the
lock's memory is initialized again (a new lock there) or forgotten.
A lock in a shared buffer is named per process (by its address there).
"""
from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
import traceback
import weakref
from ctypes import POINTER, c_bool, c_char, c_char_p, c_int, c_size_t, c_uint32, c_void_p
from pathlib import Path
from typing import Any, Callable, List, NamedTuple, Optional, TextIO

from ._lib import declare, nonblocking

__all__ = ["check_lock_order", "is_checking", "set_handler", "set_action", "forget", "reset", "address_of",
           "waits", "dump_waits", "Cycle", "Edge"]


class _CEdge(ctypes.Structure):
    _fields_ = [("from_", c_void_p), ("to", c_void_p), ("from_kind", c_char_p), ("to_kind", c_char_p),
                ("thread", c_uint32), ("site", c_char_p), ("from_name", c_char_p), ("to_name", c_char_p),
                ("thread_name", c_char_p)]


class _CCycle(ctypes.Structure):
    _fields_ = [("length", c_size_t), ("edges", POINTER(_CEdge)), ("text", c_char_p)]


_HANDLER = ctypes.CFUNCTYPE(None, POINTER(_CCycle), c_void_p)
_SITE_HOOK = ctypes.CFUNCTYPE(c_size_t, POINTER(c_char), c_size_t, c_void_p)

_enable = declare(nonblocking, "sync_debug_lock_order", None, c_bool)
_enabled = declare(nonblocking, "sync_debug_lock_order_enabled", c_bool)
_set_action = declare(nonblocking, "sync_debug_lock_order_set_action", c_int, c_int)
_set_handler = declare(nonblocking, "sync_debug_lock_order_set_handler", None, _HANDLER, c_void_p)
_set_site_hook = declare(nonblocking, "sync_debug_lock_order_set_site_hook", None, _SITE_HOOK, c_void_p)
_THREAD_HOOK = ctypes.CFUNCTYPE(None, c_void_p)
_set_thread_hook = declare(nonblocking, "sync_debug_lock_order_set_thread_hook", None, _THREAD_HOOK, c_void_p)
_forget = declare(nonblocking, "sync_debug_lock_forget", c_int, c_void_p)
_reset = declare(nonblocking, "sync_debug_lock_order_reset", None)
_lock_name = declare(nonblocking, "sync_debug_lock_name", c_int, c_void_p, c_char_p)
_thread_name = declare(nonblocking, "sync_debug_thread_name", c_int, c_char_p)
# The waits are formatted under an internal lock that a thread blocked in a lock never holds.
_format_waits = declare(nonblocking, "sync_debug_format_waits", c_size_t, c_void_p, c_size_t)


class Edge(NamedTuple):
    """One order of a cycle: ``to_lock`` was first waited for or taken while ``from_lock`` was
    held, by thread ``thread`` (its kernel id, ``threading.get_native_id()``; its name then,
    ``thread_name``), at ``site``."""
    from_lock: int      # the lock's address (address_of); synchronized: id() of its object
    to_lock: int
    from_kind: str      # how each was taken in this order: "mutex", "rwlock (read)",
    to_kind: str        # "rwlock (write)", "rwlock (upgradable read)", "spin lock", "synchronized"
    thread: int
    site: str           # the Python stack (most recent call last), or a C backtrace
    from_name: Optional[str] = None    # the locks' names (name=), if they have one
    to_name: Optional[str] = None
    thread_name: Optional[str] = None  # the Python thread's name (threading), if known


class Cycle(NamedTuple):
    """A potential deadlock: ``edges[i].to_lock == edges[i + 1].from_lock``, around."""
    edges: List[Edge]
    text: str           # the report printed by default

    def __str__(self) -> str:
        return self.text


_LIBRARY_DIR = str(Path(__file__).resolve().parent)
_THREADING_FILES = {threading.__file__, os.path.realpath(threading.__file__)}


def _python_stack() -> str:
    """The calling thread's Python stack, without libsync's own frames and threading.py's (a
    thread's bootstrap, a threading.Condition's methods); "" if it has none (a thread that runs
    no Python code: libsync then takes a C backtrace)."""
    frames = [frame for frame in traceback.extract_stack()[:-2]
              if not frame.filename.startswith(_LIBRARY_DIR) and frame.filename not in _THREADING_FILES]
    if not frames:
        return ""
    return "Python stack (most recent call last):\n" + "".join(traceback.format_list(frames)).rstrip("\n")


_named = threading.local()  # .name: the name libsync has for this thread


def _name_thread() -> None:
    """Tells libsync the calling thread's Python name, when it is new or changed (a name that
    libsync refuses, with control characters, goes escaped)."""
    name = threading.current_thread().name
    if getattr(_named, "name", None) == name:
        return
    _named.name = name
    if _thread_name(name.encode("utf-8", "replace") or b"?") == errno.EINVAL:
        _thread_name(name.encode("unicode_escape") or b"?")


def _write_site(buffer: ctypes._Pointer[c_char], size: int, _context: Optional[int]) -> int:
    try:
        stack = _python_stack()
        if stack:  # a Python thread: its name goes with the order
            _name_thread()
        data = stack.encode("utf-8", "replace")[:size]
        ctypes.memmove(buffer, data, len(data))
        return len(data)
    except BaseException:  # never into libsync's C frames
        return 0


_site_hook = _SITE_HOOK(_write_site)  # (a prototype as a decorator would leave the function untyped for mypy)


_handler: Optional[Callable[[Cycle], Any]] = None


def _deliver_cycle(cycle_pointer: ctypes._Pointer[_CCycle], _context: Optional[int]) -> None:
    cycle = cycle_pointer.contents
    def text(value: Optional[bytes]) -> Optional[str]:
        return None if value is None else value.decode("utf-8", "replace")
    edges = [Edge(e.from_ or 0, e.to or 0, e.from_kind.decode(), e.to_kind.decode(), e.thread,
                  e.site.decode("utf-8", "replace"), text(e.from_name), text(e.to_name), text(e.thread_name))
             for e in cycle.edges[:cycle.length]]
    handler = _handler
    if handler is not None:
        try:
            handler(Cycle(edges, cycle.text.decode("utf-8", "replace")))
        except BaseException:
            print("libsync.debug: the lock-order handler raised:", file=sys.stderr)
            traceback.print_exc()


_deliver = _HANDLER(_deliver_cycle)


# Locks made while checking is on are forgotten when freed (libsync.locks and .conditions ask).
tracking = False


def track(lock: Any) -> None:
    """Forgets the lock's orders and name when the object goes (its memory may then hold
    another lock)."""
    weakref.finalize(lock, _forget, lock._p.value).atexit = False


def name_lock(lock: Any, name: Optional[str], address: Optional[int] = None) -> None:
    """The constructors' ``name=``: names `lock` (at `address`, default ``address_of(lock)``)
    in reports; None leaves it as it is. Initializing the memory again forgets the name.
    TypeError for a name that is not a str, ValueError for one libsync refuses (empty, not
    UTF-8, or with a control character such as a newline)."""
    if name is None:
        return
    if not isinstance(name, str):
        raise TypeError(f"name must be a str or None, not {type(name).__name__}")
    data = name.encode("utf-8", "surrogatepass")
    if b"\0" in data or _lock_name(address_of(lock) if address is None else address, data) == errno.EINVAL:
        raise ValueError(f"invalid lock name {name!r}: a name is not empty, is UTF-8, and has no control character")


def _name_waiting_thread(_context: Optional[int]) -> None:
    """Before each first try of a blocking acquire (while checking is on): the thread's Python
    name goes to libsync (reports and waits show it)."""
    try:
        _name_thread()
    except BaseException:  # never into libsync's C frames
        pass


_thread_hook = _THREAD_HOOK(_name_waiting_thread)


def _start() -> None:
    """Python's part: stacks for the sites, thread names, and locks forgotten when freed. (The
    acquires that try before they wait call the library's `_trylock_first` functions, which
    count a lock taken at that try as a lock.)"""
    global tracking
    if tracking:
        return
    tracking = True
    _set_site_hook(_site_hook, None)
    _set_thread_hook(_thread_hook, None)


def _start_if_enabled() -> None:
    """At import (libsync/__init__): LIBSYNC_CHECK_LOCK_ORDER may have turned checking on."""
    if _enabled():
        _start()


def check_lock_order(enabled: bool = True) -> None:
    """Turns lock-order checking on (for every libsync lock of the process) or off.

    Locks already held when it is turned on are unknown to it (their release is ignored, they
    give no orders); that includes, after an off -> on turn, the locks held across the turn:
    each thread's stack of held locks starts empty again."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, not {type(enabled).__name__}")
    if enabled:
        _start()
    _enable(enabled)


def is_checking() -> bool:
    """Whether lock-order checking is on."""
    return bool(_enabled())


def set_handler(handler: Optional[Callable[[Cycle], Any]]) -> None:
    """Calls ``handler(cycle)`` for each potential deadlock instead of printing it to stderr
    (None: print again). It runs in the thread whose lock closed the cycle, holding its locks;
    what it raises is printed to stderr. The locks it takes are not checked (no orders)."""
    global _handler
    if handler is not None and not callable(handler):
        raise TypeError(f"handler must be callable or None, not {type(handler).__name__}")
    _handler = handler
    if handler is None:
        _set_handler(_HANDLER(), None)
    else:
        _set_handler(_deliver, None)


def set_action(action: str) -> None:
    """After a report: "report" goes on (default), "abort" aborts the process."""
    if action not in ("report", "abort"):
        raise ValueError(f"action must be 'report' or 'abort', not {action!r}")
    _set_action(1 if action == "abort" else 0)


def address_of(lock: Any) -> int:
    """The address libsync knows a lock by (an Edge's from_lock/to_lock): a Lock, RLock, Mutex,
    RWLock, SpinLock, Condition or ConditionLock; for ``synchronized(obj)``, ``id(obj)``."""
    pointer = getattr(lock, "_p", None)
    if isinstance(pointer, c_void_p) and pointer.value:
        return pointer.value
    inner = getattr(lock, "_lock", None)  # Condition: its lock
    if inner is not None and inner is not lock:
        return address_of(inner)
    raise TypeError(f"not a libsync lock: {type(lock).__name__}")


def forget(lock: Any) -> None:
    """Forgets a lock's orders (before dropping a lock made while checking was off, whose
    memory may later hold another lock)."""
    _forget(address_of(lock))


def reset() -> None:
    """Forgets every order recorded and every cycle reported (held locks stay held)."""
    _reset()


def waits() -> str:
    """Which thread (kernel id) holds and which waits for every lock, with the threads of a
    wait-for cycle (a deadlock) marked ``*`` and the cycle named."""
    size = _format_waits(None, 0) + 1
    buffer = ctypes.create_string_buffer(size)
    _format_waits(buffer, size)
    return buffer.value.decode("utf-8", "replace")


def dump_waits(file: Optional[TextIO] = None) -> None:
    """Prints ``waits()`` to ``file`` (default: sys.stderr)."""
    print(waits(), end="", file=sys.stderr if file is None else file, flush=True)

