"""Apple's libkern/OSAtomic.h operations, with Apple's names and semantics, on memory Python owns.

Each value argument is a ctypes object of the C type (``ctypes.c_int32()``, ``c_int64``,
``c_uint32`` for the logic operations, ``c_int``, ``c_long``, ``c_void_p``), or a ``ref`` to a
writable buffer at an offset, so two processes can share an atomic value in shared memory::

    counter = ctypes.c_int32(0)
    OSAtomicIncrement32(counter)          # -> 1, the new value
    shm = multiprocessing.shared_memory.SharedMemory(create=True, size=8)
    shared = ref(shm.buf, 0, ctypes.c_int32)
    OSAtomicAdd32(5, shared)              # visible to every process mapping shm

Semantics as Apple's: arithmetic returns the new value and wraps; Or/And/Xor32 return the new
value and their ``Orig`` forms the old one; compare-and-swap takes (old, new, value) and returns
whether it swapped; TestAndSet/Clear number bits as Apple does (bit n is ``0x80 >> (n & 7)`` of
byte ``n >> 3``) and return the old bit. ``Barrier`` forms are also full memory barriers.

Errors: a wrong value type, or an amount, mask, compared value or bit number that is not an
int -> TypeError; an int that does not fit the C type (an address: 0 <= a < 2**64, or None)
-> OverflowError; a bit number beyond the object -> ValueError.

Queues (``OSQueueHead``, ``OSFifoQueueHead``): every element of a queue has its link field at
the same offset, fixed by the first enqueue (a dequeue before it returns None); an offset that
is not an int -> TypeError; one that is negative, misaligned, outside the element or not the
queue's, or an element already in this or another queue -> ValueError. The head keeps each element alive while it is queued; keep your own
reference to use an element after dequeuing it (dequeue returns its address).
"""
from __future__ import annotations

import ctypes
import operator
from ctypes import byref, c_bool, c_int, c_int32, c_int64, c_long, c_size_t, c_uint32, c_void_p
from typing import TYPE_CHECKING, Any, Callable, Optional

from ._common import declare
from ._memory import address_of, ref

if TYPE_CHECKING:  # names of the ctypes stubs only
    from ctypes import _SimpleCData

__all__ = ["ref", "OSSpinLock", "OS_SPINLOCK_INIT", "OSQueueHead", "OSFifoQueueHead"]

_RANGES: dict[type[_SimpleCData[Any]], tuple[int, int]] = {c_int32: (-(1 << 31), 1 << 31), c_int64: (-(1 << 63), 1 << 63),
           c_int: (-(1 << 31), 1 << 31), c_long: (-(1 << 63), 1 << 63),
           c_uint32: (-(1 << 31), 1 << 32),  # masks: any 32-bit pattern
           c_void_p: (0, 1 << 64)}           # addresses (None: NULL)
_WIDE = (c_int64, c_long)  # operands a bare Python int can't carry (ctypes passes it as C int)

# Speed: ctypes' own argument conversion (argtypes) costs more than the call itself, so these
# functions leave argtypes unset, check types and ranges in Python, and pass byref(value).


def _export(name: str, function: Callable[..., object]) -> None:
    function.__name__ = function.__qualname__ = name
    globals()[name] = function
    __all__.append(name)


def _wrong_type(name: str, value: object, ctype: type[_SimpleCData[Any]]) -> TypeError:
    return TypeError(f"{name}: expected a ctypes.{ctype.__name__} (or a ref() of one), not {type(value).__name__}")


def _integer(name: str, operand: Any) -> int:
    """operand as an int (anything with __index__); TypeError otherwise (ctypes would raise its
    own ArgumentError, or pass a float's bits)."""
    try:
        return operator.index(operand)
    except TypeError:
        raise TypeError(f"{name}: expected an int, not {type(operand).__name__}") from None


def _operand(name: str, ctype: type[_SimpleCData[int]]) -> None:
    """(amount-or-mask, value) -> int: Add32/64, Or/And/Xor32 and their variants."""
    c = declare(name, c_int64 if ctype is c_int64 else c_int32)
    low, high = _RANGES[ctype]
    wrap = ctype if ctype in _WIDE else None

    def operation(operand: int, value: Any) -> int:
        if value.__class__ is not ctype and not isinstance(value, ctype):
            raise _wrong_type(name, value, ctype)
        if operand.__class__ is not int:
            operand = _integer(name, operand)
        if not low <= operand < high:
            raise OverflowError(f"{name}: {operand} does not fit in {ctype.__name__}")
        return c(operand if wrap is None else wrap(operand), byref(value))
    operation.__doc__ = f"{name}(operand, value) -> int, as Apple's (see the module doc)."
    _export(name, operation)


def _unary(name: str, ctype: type[_SimpleCData[int]]) -> None:
    """(value) -> int: Increment/Decrement32/64."""
    c = declare(name, ctype)

    def operation(value: Any) -> int:
        if value.__class__ is not ctype and not isinstance(value, ctype):
            raise _wrong_type(name, value, ctype)
        return c(byref(value))
    operation.__doc__ = f"{name}(value) -> int: the new value, as Apple's."
    _export(name, operation)


def _compare_and_swap(name: str, ctype: type[_SimpleCData[Any]]) -> None:
    """(old, new, value) -> bool."""
    c = declare(name, c_bool)
    low, high = _RANGES[ctype]
    wrap = ctype if ctype in _WIDE or ctype is c_void_p else None
    pointer = ctype is c_void_p

    def operation(old: Any, new: Any, value: Any) -> bool:
        if value.__class__ is not ctype and not isinstance(value, ctype):
            raise _wrong_type(name, value, ctype)
        if pointer:  # None is NULL
            old, new = (0 if old is None else old), (0 if new is None else new)
        if old.__class__ is not int:
            old = _integer(name, old)
        if new.__class__ is not int:
            new = _integer(name, new)
        if not (low <= old < high and low <= new < high):
            raise OverflowError(f"{name}: {old} or {new} does not fit in {ctype.__name__}")
        if wrap is None:
            return c(old, new, byref(value))
        return c(wrap(old), wrap(new), byref(value))
    operation.__doc__ = f"{name}(old, new, value) -> bool: swapped if value held old, as Apple's."
    _export(name, operation)


def _test_and(name: str) -> None:
    """(n, object) -> bool, on any ctypes object; n must lie inside it."""
    c = declare(name, c_bool, ctypes.c_uint32, c_void_p)

    def operation(n: int, value: Any) -> bool:
        address = address_of(value)
        if n.__class__ is not int:
            n = _integer(name, n)
        if not 0 <= n < 8 * ctypes.sizeof(value):
            raise ValueError(f"{name}: bit {n} lies outside the {ctypes.sizeof(value)}-byte object")
        return c(n, address)
    operation.__doc__ = f"{name}(n, value) -> bool: the old bit, Apple's numbering."
    _export(name, operation)


_ctype: type[_SimpleCData[Any]]
for _barrier in ("", "Barrier"):
    for _bits, _ctype in (("32", c_int32), ("64", c_int64)):
        _operand(f"OSAtomicAdd{_bits}{_barrier}", _ctype)
        _unary(f"OSAtomicIncrement{_bits}{_barrier}", _ctype)
        _unary(f"OSAtomicDecrement{_bits}{_barrier}", _ctype)
    for _op in ("Or", "And", "Xor"):
        _operand(f"OSAtomic{_op}32{_barrier}", c_uint32)
        _operand(f"OSAtomic{_op}32Orig{_barrier}", c_uint32)
    for _suffix, _ctype in (("32", c_int32), ("64", c_int64), ("Int", c_int), ("Long", c_long), ("Ptr", c_void_p)):
        _compare_and_swap(f"OSAtomicCompareAndSwap{_suffix}{_barrier}", _ctype)
    _test_and(f"OSAtomicTestAndSet{_barrier}")
    _test_and(f"OSAtomicTestAndClear{_barrier}")

OSMemoryBarrier = declare("OSMemoryBarrier", None)
OSMemoryBarrier.__doc__ = "A full memory barrier."
__all__.append("OSMemoryBarrier")

# ---- OSSpinLock: a c_int32, 0 when free. Lock may wait, so it releases the GIL. ----------------

OSSpinLock = c_int32
OS_SPINLOCK_INIT = 0


def _spin(name: str, blocking: bool, doc: str) -> None:
    c = declare(name, c_bool if name == "OSSpinLockTry" else None, blocking=blocking)

    def operation(lock: c_int32) -> Optional[bool]:
        if lock.__class__ is not c_int32 and not isinstance(lock, c_int32):
            raise _wrong_type(name, lock, c_int32)
        return c(byref(lock))
    operation.__doc__ = doc
    _export(name, operation)


_spin("OSSpinLockTry", False, "Takes the lock if free, never waiting; returns whether it did.")
_spin("OSSpinLockLock", True, "Takes the lock, waiting (with the GIL released) until it is free.")
_spin("OSSpinLockUnlock", False, "Releases the lock.")

# ---- Intrusive queues: elements are ctypes objects with a pointer-sized link field at `offset`.
# The head keeps each element alive while it is queued, and fixes the link offset at the first
# enqueue: a dequeue can then only follow links that lie inside live elements. --------------


# {address: token of the head holding it} over every head of the process: an element is in at
# most one queue at a time (a second head would splice its links into the first's).
_queued: dict[int, object] = {}


class _AlignedHead:
    """Zeroed, 16-byte aligned storage for a queue head (ctypes cannot align a Structure to 16),
    and what the queue holds: {address: element}, and the link offset of every element."""
    _size = 16

    def __init__(self) -> None:
        self._storage = ctypes.create_string_buffer(self._size + 15)
        self.address = (ctypes.addressof(self._storage) + 15) & ~15
        self._elements: dict[int, tuple[object]] = {}
        self._token = object()  # this head in _queued (the head itself there would never be freed)
        self._link: dict[str, int] = {}  # {"offset": n} from the first enqueue on (setdefault: atomic)

    def _match_offset(self, name: str, offset: int, fix: bool) -> bool:
        """Whether the queue's offset is fixed (``fix``: fixes it to `offset` if not yet);
        ValueError if it is fixed to another."""
        fixed = self._link.setdefault("offset", offset) if fix else self._link.get("offset")
        if fixed is None:
            return False
        if fixed != offset:
            raise ValueError(f"{name}: offset {offset} differs from {fixed}, the offset this queue's elements were enqueued with")
        return True

    def __del__(self) -> None:
        queued = _queued
        if queued is not None:  # None at interpreter shutdown
            for address in list(self._elements):
                queued.pop(address, None)


_LINK = ctypes.sizeof(c_void_p)


def _check_offset(name: str, offset: Any) -> None:
    if offset.__class__ is not int and (not isinstance(offset, int) or isinstance(offset, bool)):
        raise TypeError(f"{name}: offset must be an int, not {type(offset).__name__}")
    if offset < 0 or offset % _LINK:
        raise ValueError(f"{name}: offset {offset} must be a non-negative multiple of {_LINK} (the link's alignment)")


class OSQueueHead(_AlignedHead):
    """A lock-free, ABA-safe LIFO head (Apple's OSQueueHead)."""
    _size = 16


class OSFifoQueueHead(_AlignedHead):
    """A FIFO head (Apple's OSFifoQueueHead)."""
    _size = 32


def _queue(name: str, head_type: type[_AlignedHead], enqueue: bool) -> None:
    c = declare(name, None if enqueue else c_void_p,
                *((c_void_p, c_void_p, c_size_t) if enqueue else (c_void_p, c_size_t)))

    def check_head(head: object) -> None:
        if not isinstance(head, head_type):
            raise TypeError(f"{name}: expected {head_type.__name__}, not {type(head).__name__}")

    if enqueue:
        def put(head: _AlignedHead, element: Any, offset: int) -> None:
            check_head(head)
            _check_offset(name, offset)
            address = address_of(element, ctypes.alignment(c_void_p))
            if offset + _LINK > ctypes.sizeof(element):
                raise ValueError(f"{name}: the link field at offset {offset} lies outside the element")
            head._match_offset(name, offset, True)  # before the C call: see the dequeue
            token = head._token
            if _queued.setdefault(address, token) is not token:
                raise ValueError(f"{name}: the element at {address:#x} is already in another queue")
            entry = (element,)  # recorded before the C call, so that a dequeuer finds it
            if head._elements.setdefault(address, entry) is not entry:
                raise ValueError(f"{name}: the element at {address:#x} is already in the queue")
            c(head.address, address, offset)
        put.__doc__ = (f"{name}(head, element, offset): adds a ctypes element whose link field is at "
                       "offset (the same for every element of the queue); the head keeps it alive until "
                       "it is dequeued.")
        _export(name, put)
    else:
        def take(head: _AlignedHead, offset: int) -> Optional[int]:
            check_head(head)
            _check_offset(name, offset)
            if not head._match_offset(name, offset, False):
                # No enqueue has fixed the offset yet, so none has reached the C queue: it is
                # empty now. (Calling C anyway would race with a first enqueue and follow a
                # link at this unchecked offset.)
                return None
            address = c(head.address, offset)
            if address is not None:
                head._elements.pop(address, None)
                _queued.pop(address, None)
            return address
        take.__doc__ = (f"{name}(head, offset) -> address or None; `T.from_address(a)` gets the element "
                        "(keep a reference to it: the head drops its own).")
        _export(name, take)


_queue("OSAtomicEnqueue", OSQueueHead, True)
_queue("OSAtomicDequeue", OSQueueHead, False)
_queue("OSAtomicFifoEnqueue", OSFifoQueueHead, True)
_queue("OSAtomicFifoDequeue", OSFifoQueueHead, False)

if TYPE_CHECKING:  # what the loops above export, declared for type checkers (no effect when run)
    from ctypes import _CData

    def OSAtomicAdd32(operand: int, value: c_int32) -> int: ...
    def OSAtomicAdd32Barrier(operand: int, value: c_int32) -> int: ...
    def OSAtomicAdd64(operand: int, value: c_int64) -> int: ...
    def OSAtomicAdd64Barrier(operand: int, value: c_int64) -> int: ...
    def OSAtomicIncrement32(value: c_int32) -> int: ...
    def OSAtomicIncrement32Barrier(value: c_int32) -> int: ...
    def OSAtomicIncrement64(value: c_int64) -> int: ...
    def OSAtomicIncrement64Barrier(value: c_int64) -> int: ...
    def OSAtomicDecrement32(value: c_int32) -> int: ...
    def OSAtomicDecrement32Barrier(value: c_int32) -> int: ...
    def OSAtomicDecrement64(value: c_int64) -> int: ...
    def OSAtomicDecrement64Barrier(value: c_int64) -> int: ...
    def OSAtomicOr32(operand: int, value: c_uint32) -> int: ...
    def OSAtomicOr32Barrier(operand: int, value: c_uint32) -> int: ...
    def OSAtomicOr32Orig(operand: int, value: c_uint32) -> int: ...
    def OSAtomicOr32OrigBarrier(operand: int, value: c_uint32) -> int: ...
    def OSAtomicAnd32(operand: int, value: c_uint32) -> int: ...
    def OSAtomicAnd32Barrier(operand: int, value: c_uint32) -> int: ...
    def OSAtomicAnd32Orig(operand: int, value: c_uint32) -> int: ...
    def OSAtomicAnd32OrigBarrier(operand: int, value: c_uint32) -> int: ...
    def OSAtomicXor32(operand: int, value: c_uint32) -> int: ...
    def OSAtomicXor32Barrier(operand: int, value: c_uint32) -> int: ...
    def OSAtomicXor32Orig(operand: int, value: c_uint32) -> int: ...
    def OSAtomicXor32OrigBarrier(operand: int, value: c_uint32) -> int: ...
    def OSAtomicCompareAndSwap32(old: int, new: int, value: c_int32) -> bool: ...
    def OSAtomicCompareAndSwap32Barrier(old: int, new: int, value: c_int32) -> bool: ...
    def OSAtomicCompareAndSwap64(old: int, new: int, value: c_int64) -> bool: ...
    def OSAtomicCompareAndSwap64Barrier(old: int, new: int, value: c_int64) -> bool: ...
    def OSAtomicCompareAndSwapInt(old: int, new: int, value: c_int) -> bool: ...
    def OSAtomicCompareAndSwapIntBarrier(old: int, new: int, value: c_int) -> bool: ...
    def OSAtomicCompareAndSwapLong(old: int, new: int, value: c_long) -> bool: ...
    def OSAtomicCompareAndSwapLongBarrier(old: int, new: int, value: c_long) -> bool: ...
    def OSAtomicCompareAndSwapPtr(old: Optional[int], new: Optional[int], value: c_void_p) -> bool: ...
    def OSAtomicCompareAndSwapPtrBarrier(old: Optional[int], new: Optional[int], value: c_void_p) -> bool: ...
    def OSAtomicTestAndSet(n: int, value: _CData) -> bool: ...
    def OSAtomicTestAndSetBarrier(n: int, value: _CData) -> bool: ...
    def OSAtomicTestAndClear(n: int, value: _CData) -> bool: ...
    def OSAtomicTestAndClearBarrier(n: int, value: _CData) -> bool: ...
    def OSSpinLockTry(lock: c_int32) -> bool: ...
    def OSSpinLockLock(lock: c_int32) -> None: ...
    def OSSpinLockUnlock(lock: c_int32) -> None: ...
    def OSAtomicEnqueue(head: OSQueueHead, element: _CData, offset: int) -> None: ...
    def OSAtomicDequeue(head: OSQueueHead, offset: int) -> Optional[int]: ...
    def OSAtomicFifoEnqueue(head: OSFifoQueueHead, element: _CData, offset: int) -> None: ...
    def OSAtomicFifoDequeue(head: OSFifoQueueHead, offset: int) -> Optional[int]: ...

del _barrier, _bits, _ctype, _op, _suffix
