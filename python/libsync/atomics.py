"""Atomic objects and safe sharing (sync/atomics.h): AtomicBool, AtomicInt, AtomicReference,
Throttler and ConcurrentDict.

    flag = AtomicBool()                    # a busy flag
    if flag.compare_and_set(False, True): ...
    hits = AtomicInt(bits=64)              # or AtomicInt(buffer=shm.buf, offset=8, initialize=True/False)
    hits.increment_and_get()
    current = AtomicReference()            # holds any object, reference counts exact
    current.compare_and_set(None, request)
    throttle = Throttler(4)                # at most 4 inside; fail fast
    with throttle: ...                     # raises ThrottlerFull when full
    @throttle(on_full=False)               # or: the wrapped call returns False when full
    def expensive(): ...
    names = ConcurrentDict(); names["name"] = "Pat"

In a caller's buffer (shared memory), ``initialize`` must be given: True in the process that
creates the value (it stores ``value``), False in the processes that attach to it (they keep
the value there; a ``value`` other than the default then raises ValueError).

The atomic values are sequentially consistent. AtomicReference and ConcurrentDict hold Python
objects with Py_IncRef/Py_DecRef as their retain/release functions, so reference counts stay
exact; compare_and_set compares by identity (``is``). They keep the GIL (the C side never waits);
Throttler.enter releases it while it waits and can be interrupted by Ctrl-C.
"""
from __future__ import annotations

import ctypes
import functools
from ctypes import c_bool, c_int, c_int32, c_int64, c_size_t, c_void_p, py_object
from typing import TYPE_CHECKING, Any, Callable, Generic, Hashable, Iterator, List, Optional, TypeVar, cast

from ._common import declare, deadline, wait
from ._memory import PRIVATE, attach_choice, ref

if TYPE_CHECKING:
    from ctypes import _SimpleCData
    from typing import TypedDict

    class _IntFunctions(TypedDict):
        """The C functions of AtomicInt of one width, by operation."""
        get: Callable[..., int]
        set: Callable[..., None]
        compare_and_set: Callable[..., bool]
        get_and_set: Callable[..., int]
        get_and_add: Callable[..., int]
        add_and_get: Callable[..., int]
        get_and_increment: Callable[..., int]
        get_and_decrement: Callable[..., int]
        increment_and_get: Callable[..., int]
        decrement_and_get: Callable[..., int]

__all__ = ["AtomicBool", "AtomicInt", "AtomicReference", "Throttler", "ThrottlerFull", "ConcurrentDict"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


# C functions: argtypes stay unset (ctypes' conversion costs more than the call); arguments are
# checked here and passed as ctypes objects or ints that fit a C int.


def _storage(ctype: type[_SimpleCData[int]], buffer: Any, offset: int) -> _SimpleCData[int]:
    return ctype() if buffer is PRIVATE else ref(buffer, offset, ctype)


def _stores(buffer: Any, initialize: Optional[bool], value: Any, what: str) -> bool:
    """Whether the new object stores its initial value (attach_choice); attaching with a value
    would silently drop it: ValueError."""
    if attach_choice(buffer, initialize, what):
        return True
    if value:
        raise ValueError(f"{what}: initialize=False attaches to the value in the buffer; {value!r} would be ignored")
    return False


class AtomicBool:
    """A bool updated atomically (java.util.concurrent.atomic's AtomicBoolean), in memory the package allocates or
    in ``buffer`` at ``offset`` (4 bytes, e.g. multiprocessing.shared_memory: processes share it; ``initialize``
    required, see the module's doc)."""

    __slots__ = ("_word", "_p", "_get", "_set", "_cas", "_gas")

    def __init__(self, value: bool = False, *, buffer: Any = PRIVATE, offset: int = 0,
                 initialize: Optional[bool] = None) -> None:
        self._word = _storage(c_int32, buffer, offset)
        self._p = c_void_p(ctypes.addressof(self._word))
        self._get, self._set, self._cas, self._gas = _BOOL
        if _stores(buffer, initialize, value, "AtomicBool"):
            self.set(value)

    def get(self) -> bool:
        """The value now."""
        return self._get(self._p)

    def set(self, value: bool) -> None:
        """Stores ``value`` (its truth)."""
        self._set(self._p, 1 if value else 0)

    def compare_and_set(self, expected: bool, desired: bool) -> bool:
        """Sets ``desired`` if the value is ``expected``; returns whether it did."""
        return self._cas(self._p, 1 if expected else 0, 1 if desired else 0)

    def get_and_set(self, value: bool) -> bool:
        """Stores ``value``; returns the previous value."""
        return self._gas(self._p, 1 if value else 0)

    def __bool__(self) -> bool:
        return self.get()

    def __repr__(self) -> str:
        return f"AtomicBool({self.get()})"


_BOOL = (declare("sync_atomic_bool_get", c_bool), declare("sync_atomic_bool_set", None),
         declare("sync_atomic_bool_compare_and_set", c_bool), declare("sync_atomic_bool_get_and_set", c_bool))


class AtomicInt:
    """An integer updated atomically (java.util.concurrent.atomic's AtomicInteger), 32 or 64 bits, wrapping, in
    memory the package allocates or in ``buffer`` at ``offset`` (shared between processes when
    the buffer is shared memory; ``initialize`` required, see the module's doc).
    java.util.concurrent.atomic's names, in snake_case.

    A value that does not fit ``bits`` raises OverflowError; a non-int TypeError."""

    __slots__ = ("_word", "_p", "_f", "_wrap", "_low", "_high", "bits")

    def __init__(self, value: int = 0, *, bits: int = 64, buffer: Any = PRIVATE, offset: int = 0,
                 initialize: Optional[bool] = None) -> None:
        if bits not in (32, 64):
            raise ValueError(f"bits must be 32 or 64, not {bits!r}")
        self.bits = bits
        ctype = c_int32 if bits == 32 else c_int64
        self._word = _storage(ctype, buffer, offset)
        self._p = c_void_p(ctypes.addressof(self._word))
        self._f = _INT[bits]
        self._wrap = int if bits == 32 else c_int64  # a bare int passes as a C int
        self._low, self._high = -(1 << (bits - 1)), 1 << (bits - 1)
        if _stores(buffer, initialize, value, "AtomicInt"):
            self.set(value)

    def _arg(self, value: int) -> Any:
        if value.__class__ is not int and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"expected an int, not {type(value).__name__}")
        if not self._low <= value < self._high:
            raise OverflowError(f"{value} does not fit in {self.bits} bits")
        return self._wrap(value)

    def get(self) -> int:
        """The value now."""
        return self._f["get"](self._p)

    def set(self, value: int) -> None:
        """Stores ``value``."""
        self._f["set"](self._p, self._arg(value))

    def compare_and_set(self, expected: int, desired: int) -> bool:
        """Sets ``desired`` if the value is ``expected``; returns whether it did."""
        return bool(self._f["compare_and_set"](self._p, self._arg(expected), self._arg(desired)))

    def get_and_set(self, value: int) -> int:
        """Stores ``value``; returns the previous value."""
        return self._f["get_and_set"](self._p, self._arg(value))

    def get_and_add(self, delta: int) -> int:
        """Adds ``delta`` (wrapping); returns the previous value."""
        return self._f["get_and_add"](self._p, self._arg(delta))

    def add_and_get(self, delta: int) -> int:
        """Adds ``delta`` (wrapping); returns the new value."""
        return self._f["add_and_get"](self._p, self._arg(delta))

    def get_and_increment(self) -> int:
        """Adds 1 (wrapping); returns the previous value."""
        return self._f["get_and_increment"](self._p)

    def get_and_decrement(self) -> int:
        """Subtracts 1 (wrapping); returns the previous value."""
        return self._f["get_and_decrement"](self._p)

    def increment_and_get(self) -> int:
        """Adds 1 (wrapping); returns the new value."""
        return self._f["increment_and_get"](self._p)

    def decrement_and_get(self) -> int:
        """Subtracts 1 (wrapping); returns the new value."""
        return self._f["decrement_and_get"](self._p)

    def __int__(self) -> int:
        return self.get()

    def __repr__(self) -> str:
        return f"AtomicInt({self.get()}, bits={self.bits})"


_INT: dict[int, _IntFunctions] = {
    bits: cast("_IntFunctions", {
        op: declare(f"sync_atomic_int{bits}_{op}", {"compare_and_set": c_bool, "set": None}.get(op, ctype))
        for op in ("get", "set", "compare_and_set", "get_and_set", "get_and_add", "add_and_get",
                   "get_and_increment", "get_and_decrement", "increment_and_get", "decrement_and_get")})
    for bits, ctype in ((32, c_int32), (64, c_int64))}

# ---- Python objects through the C ABI: Py_IncRef / Py_DecRef are the retain and release. -------

_RETAIN = ctypes.cast(ctypes.pythonapi.Py_IncRef, c_void_p)
_RELEASE = ctypes.cast(ctypes.pythonapi.Py_DecRef, c_void_p)


class _RefStruct(ctypes.Structure):
    _fields_ = [("state", ctypes.c_uint64 * 2), ("retain", c_void_p), ("release", c_void_p)]


# A function returning +1 declared with restype py_object: ctypes takes that reference over
# (CPython's GetResult drops the count its conversion adds), so no count is lost or leaked.
# It must never return NULL (ctypes would crash): AtomicReference holds None as the object
# None, and ConcurrentDict reads with sync_dictionary_get_or and a fallback object.

class AtomicReference(Generic[T]):
    """A reference to any object, replaced atomically (java.util.concurrent.atomic's AtomicReference); it starts
    as None. ``compare_and_set`` compares by identity. Reference counts are exact: the reference
    owns one count on what it holds and gives it back when replaced or deleted."""

    __slots__ = ("_buffer", "_p", "__weakref__")

    def __init__(self, value: Optional[T] = None) -> None:
        # sync_atomic_ref_t is 16-byte aligned; ctypes only guarantees 8.
        self._buffer = ctypes.create_string_buffer(ctypes.sizeof(_RefStruct) + 15)
        address = (ctypes.addressof(self._buffer) + 15) & ~15
        self._p = c_void_p(address)
        if _ref_init(self._p, _RETAIN, _RELEASE) != 0:  # pragma: no cover
            raise RuntimeError("sync_atomic_ref_init failed")
        _ref_set(self._p, py_object(value))

    def get(self) -> Optional[T]:
        """The object now."""
        value: Optional[T] = _ref_get(self._p)  # (a py_object result: the object stored)
        return value

    def set(self, value: Optional[T]) -> None:
        """Stores ``value``."""
        _ref_set(self._p, py_object(value))

    def get_and_set(self, value: Optional[T]) -> Optional[T]:
        """Stores ``value``; returns the previous object."""
        previous: Optional[T] = _ref_get_and_set(self._p, py_object(value))
        return previous

    def compare_and_set(self, expected: Optional[T], desired: Optional[T]) -> bool:
        """Stores ``desired`` if the current object ``is expected``; returns whether it did."""
        return _ref_cas(self._p, py_object(expected), py_object(desired))

    def __del__(self) -> None:
        if getattr(self, "_p", None) is not None:
            _ref_destroy(self._p)

    def __repr__(self) -> str:
        return f"AtomicReference({self.get()!r})"


_ref_init = declare("sync_atomic_ref_init", c_int)
_ref_get = declare("sync_atomic_ref_get", py_object)
_ref_set = declare("sync_atomic_ref_set", None)
_ref_get_and_set = declare("sync_atomic_ref_get_and_set", py_object)
_ref_cas = declare("sync_atomic_ref_compare_and_set", c_bool)
_ref_destroy = declare("sync_atomic_ref_destroy", None)

# ---- Throttler -----------------------------------------------------------------------------------


class ThrottlerFull(RuntimeError):
    """Raised when a Throttler has no free slot (and the caller asked for an exception)."""


class _Struct(ctypes.Structure):
    _fields_ = [("holders", c_int32), ("waiters", c_int32), ("limit", c_int32), ("generation", c_int32),
                ("rejections", c_int64)]


_RAISE = object()


class Throttler:
    """At most ``limit`` concurrent holders. Fails fast: ``try_enter``,
    ``exec`` and the context manager never wait; ``enter(timeout)`` may.

        with throttler: ...                       # ThrottlerFull when full
        throttler.exec(work, arg) -> bool         # runs work only if a slot is free
        @throttler                                # the call raises ThrottlerFull when full
        @throttler(on_full=False)                 # ... or returns False (any value) instead
    """

    __slots__ = ("_t", "_p", "limit")

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(f"limit must be an int, not {type(limit).__name__}")
        if not 1 <= limit < 1 << 31:
            raise ValueError(f"limit must be between 1 and 2**31 - 1, not {limit}")
        self._t = _Struct()
        self._p = c_void_p(ctypes.addressof(self._t))
        self.limit = limit
        _throttler_init(self._p, limit)

    @property
    def holders(self) -> int:
        """Current holders."""
        return _throttler_holders(self._p)

    @property
    def rejections(self) -> int:
        """Refused attempts (fail-fast refusals and timed-out waits)."""
        return _throttler_rejections(self._p)

    def try_enter(self) -> bool:
        """Takes a slot if one is free; never waits."""
        return _try_enter(self._p) == 0

    def enter(self, timeout: Optional[float] = None) -> bool:
        """Takes a slot, waiting up to ``timeout`` seconds (None or infinity: forever); returns
        whether it got one. Releases the GIL while it waits; Ctrl-C interrupts it."""
        if timeout is not None and not timeout >= 0:  # NaN too
            raise ValueError("timeout must be >= 0 or None")
        return wait(_enter, self._p, deadline(timeout), what="Throttler.enter")

    def exit(self) -> None:
        """Gives the slot back. RuntimeError if no slot is held."""
        if _exit(self._p) != 0:
            raise RuntimeError("Throttler.exit: no slot is held")

    def exec(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Runs ``function(*args, **kwargs)`` if a slot is free and returns True; else False at once."""
        if _try_enter(self._p) != 0:
            return False
        try:
            function(*args, **kwargs)
        finally:
            _exit(self._p)
        return True

    def __enter__(self) -> "Throttler":
        if _try_enter(self._p) != 0:
            raise ThrottlerFull(f"all {self.limit} slots are taken")
        return self

    def __exit__(self, *exc: Any) -> None:
        _exit(self._p)

    def __call__(self, function: Optional[Callable[..., Any]] = None, *, on_full: Any = _RAISE) -> Any:
        """Decorator: ``@throttler`` raises ThrottlerFull when full; ``@throttler(on_full=x)``
        makes the call return ``x`` instead."""
        if function is None:
            return functools.partial(self.__call__, on_full=on_full)
        p = self._p

        @functools.wraps(function)
        def throttled(*args: Any, **kwargs: Any) -> Any:
            if _try_enter(p) != 0:
                if on_full is _RAISE:
                    raise ThrottlerFull(f"all {self.limit} slots are taken")
                return on_full
            try:
                return function(*args, **kwargs)
            finally:
                _exit(p)
        return throttled

    def __repr__(self) -> str:
        return f"Throttler(limit={self.limit}, holders={self.holders}, rejections={self.rejections})"


_throttler_init = declare("sync_throttler_init", c_int)
_try_enter = declare("sync_throttler_try_enter", c_int)
_enter = declare("sync_throttler_enter_interruptible", c_int, blocking=True)
_exit = declare("sync_throttler_exit", c_int)
_throttler_holders = declare("sync_throttler_holders", c_int32)
_throttler_rejections = declare("sync_throttler_rejections", c_int64)

# ---- ConcurrentDict --------------------------------------------------------------------------------

_MISSING = object()
_HASH_MASK = (1 << 64) - 1
# Keys are compared by PyObject_RichCompareBool(a, b, op) with op passed in the comparator's
# context argument (Py_EQ = 2; an int argument in a pointer register, as the x86-64 and AArch64
# calling conventions allow). Its errors (an __eq__ that raises) propagate: PyDLL calls check them.
_COMPARE = ctypes.cast(ctypes.pythonapi.PyObject_RichCompareBool, c_void_p)
_PY_EQ = c_void_p(2)


class ConcurrentDict(Generic[K, V]):
    """A thread-safe dictionary, any hashable key to any object: a value you get stays
    valid whatever other threads do; readers never lock (lock-free snapshots, see
    docs/atomics.md). Mapping methods: d[k], d[k] = v, del d[k], get, pop, len, in, keys() (a snapshot list), iteration over that snapshot."""

    __slots__ = ("_d", "__weakref__")
    _d: Optional[c_void_p]  # (None once freed)

    def __init__(self, items: Any = ()) -> None:
        handle = c_void_p()
        if _dict_create(ctypes.byref(handle), _RETAIN, _RELEASE, _COMPARE, _PY_EQ) != 0:  # pragma: no cover
            raise RuntimeError("sync_dictionary_create_with_object_keys failed")
        self._d = handle
        for key, value in (items.items() if hasattr(items, "items") else items):
            self[key] = value

    def __getitem__(self, key: K) -> V:
        value = _dict_get_or(self._d, key, hash(key), _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        found: V = value
        return found

    def get(self, key: object, default: Any = None) -> Any:
        """The value for ``key``, or ``default`` if it has none (dict.get)."""
        return _dict_get_or(self._d, key, hash(key), default)

    def __setitem__(self, key: K, value: V) -> None:
        _dict_set(self._d, py_object(key), c_size_t(hash(key) & _HASH_MASK), py_object(value))

    def __delitem__(self, key: K) -> None:
        if _dict_remove(self._d, py_object(key), c_size_t(hash(key) & _HASH_MASK)) != 0:
            raise KeyError(key)

    def pop(self, key: K, default: Any = _MISSING) -> Any:
        """Removes the entry and returns its value (as of the removal's snapshot)."""
        value = self.get(key, _MISSING)
        if value is _MISSING or _dict_remove(self._d, py_object(key), c_size_t(hash(key) & _HASH_MASK)) != 0:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return _dict_count(self._d)

    def keys(self) -> List[K]:
        """A snapshot of the keys (each key present throughout the call is listed once)."""
        found: List[K] = []
        _dict_keys(self._d, _KEYS_CALLBACK, py_object(found))
        return found

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __del__(self) -> None:
        if getattr(self, "_d", None) is not None:
            _dict_destroy(self._d)
            self._d = None

    def __repr__(self) -> str:
        return f"ConcurrentDict({ {k: self.get(k) for k in self.keys()} !r})"


_dict_create = declare("sync_dictionary_create_with_object_keys", c_int)
# The read path converts through argtypes: cheaper here than building three ctypes objects per
# call. The hash goes as a signed size (the same bits as the c_size_t(hash & mask) writers pass).
_dict_get_or = declare("sync_dictionary_get_or", py_object, c_void_p, py_object, ctypes.c_ssize_t, py_object)
_dict_set = declare("sync_dictionary_set", c_int)
_dict_remove = declare("sync_dictionary_remove", c_int)
_dict_count = declare("sync_dictionary_count", c_size_t)
_dict_keys = declare("sync_dictionary_keys", c_size_t)
_dict_destroy = declare("sync_dictionary_destroy", None)


def _append_key(key: object, _hash: int, found: List[object]) -> None:
    found.append(key)


# (made by a call: a prototype as a decorator would leave the function untyped for mypy)
_KEYS_CALLBACK = ctypes.CFUNCTYPE(None, py_object, c_size_t, py_object)(_append_key)
