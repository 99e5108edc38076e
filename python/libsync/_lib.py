"""Finds and loads libsync.so; ``declare`` sets up a C function of it (the package's modules
declare theirs through ``_common.declare``, which picks the handle).

Search order: $LIBSYNC_PATH (a file), the copy the wheel bundles in this package (built by CMake
through scikit-build-core), then a development build in the source tree (build/libsync.so).
Two handles share the one library:
``nonblocking`` (ctypes.PyDLL: keeps the GIL, cheaper) for calls that never wait, and
``blocking`` (ctypes.CDLL: releases the GIL) for calls that may.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar, overload

if TYPE_CHECKING:  # names of the ctypes stubs only
    from ctypes import _CDataType, _NamedFuncPointer, _SimpleCData

    CType = type[_CDataType]  # an argument type of a C function (c_int, POINTER(...), CFUNCTYPE(...))

_T = TypeVar("_T")

__all__ = ["nonblocking", "blocking", "declare", "path", "version"]

_HERE = Path(__file__).resolve().parent
_SOURCE_TREE = _HERE.parents[1]  # python/libsync -> the project, when imported from the source
_HOW_TO_BUILD = (
    "build it with `cmake -S . -B build -G Ninja && cmake --build build` in the libsync source "
    "tree and reinstall the package (`pip install ./python`), or point LIBSYNC_PATH at a libsync.so"
)


def _locate() -> Path:
    env = os.environ.get("LIBSYNC_PATH")
    if env:
        if not Path(env).is_file():
            raise ImportError(f"LIBSYNC_PATH={env!r} is not a file; {_HOW_TO_BUILD}")
        return Path(env)
    for candidate in (_HERE / "libsync.so", _SOURCE_TREE / "build" / "libsync.so"):
        if candidate.is_file():
            return candidate
    raise ImportError(f"libsync.so not found (looked in LIBSYNC_PATH, {_HERE}, and the source tree's build/); {_HOW_TO_BUILD}")


def _version() -> str:
    try:  # written into the wheel by the build, from the project's VERSION file
        from ._version import __version__
        return __version__
    except ImportError:  # imported from the source tree
        return (_SOURCE_TREE / "VERSION").read_text(encoding="utf-8").strip()


path = _locate()
version = _version()
try:
    nonblocking = ctypes.PyDLL(str(path))
    blocking = ctypes.CDLL(str(path))
except OSError as error:  # pragma: no cover - a broken or foreign file
    raise ImportError(f"cannot load {path}: {error}; {_HOW_TO_BUILD}") from None


@overload
def declare(handle: ctypes.CDLL, name: str, restype: None, *argtypes: CType) -> Callable[..., None]: ...
@overload
def declare(handle: ctypes.CDLL, name: str, restype: type[_SimpleCData[_T]], *argtypes: CType) -> Callable[..., _T]: ...


def declare(handle: ctypes.CDLL, name: str, restype: Optional[type[_SimpleCData[_T]]],
            *argtypes: CType) -> Callable[..., Optional[_T]]:
    """The C function `name` from `handle`, with its result type set. With `argtypes` ctypes
    converts and checks the arguments; without, the caller passes ctypes objects or ints that fit
    a C int (conversion is most of a short call's cost). Typed as what ctypes returns for
    `restype`: c_int gives an int, c_bool a bool, c_void_p an int or None, None None."""
    function: _NamedFuncPointer = getattr(handle, name)
    function.restype = restype
    if argtypes:
        function.argtypes = argtypes
    return function
