"""Finding libsync.so, and the debug build's precondition traps."""
import os
import subprocess
import sys

import pytest


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_missing_library_says_how_to_build():
    result = run_python("import libsync", LIBSYNC_PATH="/nonexistent/libsync.so")
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "cmake -S . -B build" in result.stderr


DEBUG = os.environ.get("LIBSYNC_DEBUG_PATH")


@pytest.mark.skipif(not DEBUG, reason="set LIBSYNC_DEBUG_PATH to a debug libsync.so (scripts/test.sh does)")
@pytest.mark.parametrize("call,message", [
    ("lib.OSAtomicAdd32(1, None)", "OSAtomicAdd32: the pointer argument is NULL"),
    ("lib.OSAtomicIncrement64(ctypes.addressof(buf) + 4)", "OSAtomicIncrement64: the pointer"),
    ("lib.OSAtomicEnqueue(ctypes.addressof(buf) + 8, ctypes.addressof(buf), 0)", "not 16-byte aligned"),
])
def test_debug_build_traps_with_the_function_name(call, message):
    code = ("import ctypes; lib = ctypes.CDLL(%r); buf = (ctypes.c_int64 * 8)(); "
            "lib.OSAtomicIncrement64.argtypes = [ctypes.c_void_p]; "
            "lib.OSAtomicEnqueue.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_size_t]; " % DEBUG) + call
    result = run_python(code)
    assert result.returncode != 0
    assert message in result.stderr
