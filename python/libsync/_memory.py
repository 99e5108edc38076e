"""Views of caller memory for the atomic operations: a ctypes object, or a writable buffer
(bytearray, mmap, multiprocessing.shared_memory) at an offset."""
from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["ref", "address_of", "PRIVATE", "attach_choice"]


class _Private:
    """The default ``buffer`` of every object that can live in caller memory: memory the object
    allocates itself. Not None, so that an explicit None (what the ``buf`` of a closed
    SharedMemory reads) is refused instead of quietly giving memory no other process sees."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "PRIVATE"


PRIVATE = _Private()


def attach_choice(buffer: Any, initialize: Any, what: str) -> bool:
    """Whether an object placed in ``buffer`` initializes it: ``initialize`` as given, or, not
    given (None), True for memory of its own. In a caller's buffer the caller must choose, as
    the wrong default would reset an object another process uses (or lose its count, flag or
    value): TypeError naming both choices."""
    if initialize is None:
        if buffer is PRIVATE:
            return True
        raise TypeError(f"{what}(buffer=...) needs initialize=True or initialize=False: True in the one process "
                        f"that creates it (the memory is zeroed, or holds one that nobody uses), False in every "
                        f"process that attaches to it")
    if not isinstance(initialize, bool):
        raise TypeError(f"{what}: initialize must be True or False, not {initialize!r}")
    return initialize


def ref(buffer: Any, offset: int = 0, ctype: type = ctypes.c_int32) -> Any:
    """A ``ctype`` object that aliases ``buffer`` at ``offset``, for the atomic functions.

    Two processes that map the same memory (``multiprocessing.shared_memory``, ``mmap``) and
    make a ref at the same offset share one atomic value. The ref keeps the buffer exported:
    ``del`` it before closing the buffer.

    Raises TypeError for a non-buffer, a read-only buffer, or a wrong offset/ctype type;
    ValueError for None (the ``buf`` of a closed SharedMemory), a released buffer, or an offset
    out of range or not aligned to the type's size.
    """
    if buffer is None:
        raise ValueError("buffer is None (the buf of a closed SharedMemory?): pass a live buffer")
    if not (isinstance(ctype, type) and issubclass(ctype, ctypes._SimpleCData)):
        raise TypeError(f"ctype must be a ctypes scalar type such as ctypes.c_int32, not {ctype!r}")
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"offset must be an int, not {type(offset).__name__}")
    try:
        view = memoryview(buffer)
    except TypeError:
        raise TypeError(f"expected a writable buffer (bytearray, mmap, shared memory), not {type(buffer).__name__}") from None
    with view:
        if view.readonly:
            raise TypeError(f"the buffer ({type(buffer).__name__}) is read-only")
        size = ctypes.sizeof(ctype)
        if offset < 0 or offset + size > view.nbytes:
            raise ValueError(f"offset {offset} is out of range for a {size}-byte value in a {view.nbytes}-byte buffer")
    obj = ctype.from_buffer(buffer, offset)
    alignment = ctypes.alignment(ctype)
    if ctypes.addressof(obj) % alignment:
        raise ValueError(f"offset {offset} gives an address not aligned to {alignment} bytes")
    return obj


def address_of(obj: Any, alignment: int = 1) -> int:
    """The address of a ctypes object, checked for alignment (ValueError) and type (TypeError)."""
    try:
        address = ctypes.addressof(obj)
    except TypeError:
        raise TypeError(f"expected a ctypes object, not {type(obj).__name__}") from None
    if address % alignment:
        raise ValueError(f"the object at {address:#x} is not aligned to {alignment} bytes")
    return address
