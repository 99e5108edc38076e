"""One version everywhere: the project's VERSION file, libsync.__version__, the installed
package's metadata and the loaded library's sync_version() (the C header, pkg-config and the
CMake package are checked against the same file by Tests/c/installed_consumer.sh)."""
import ctypes
import importlib.metadata
import os
from pathlib import Path

import pytest

import libsync
from libsync import _lib

VERSION = (Path(__file__).resolve().parents[2] / "VERSION").read_text(encoding="utf-8").strip()


def library_version(handle):
    return _lib.declare(handle, "sync_version", ctypes.c_char_p)().decode()


def test_package_version_is_the_project_version():
    assert libsync.__version__ == VERSION


def test_loaded_library_reports_the_project_version():
    assert library_version(_lib.nonblocking) == VERSION


@pytest.mark.skipif(not os.environ.get("LIBSYNC_DEBUG_PATH"), reason="set LIBSYNC_DEBUG_PATH to SwiftPM's debug libsync.so")
def test_swiftpm_build_reports_the_project_version():
    assert library_version(ctypes.CDLL(os.environ["LIBSYNC_DEBUG_PATH"])) == VERSION


def test_installed_metadata_is_the_project_version():
    try:
        installed = importlib.metadata.distribution("libsync")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    imported = Path(libsync.__file__).resolve()
    if installed is None or Path(installed.locate_file("libsync/__init__.py")).resolve() != imported:
        pytest.skip(f"the package imported ({imported}) is not an installed one")
    assert installed.version == VERSION
