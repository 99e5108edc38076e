"""One version everywhere: the project's VERSION file, libsync.__version__, the installed
package's metadata and the loaded library's sync_version() (the C header, pkg-config and the
CMake package are checked against the same file by Tests/c/installed_consumer.sh); and the
installed package is a platform wheel that loads the library it bundles.

scripts/test.sh sets LIBSYNC_TEST_INSTALLED=1: the package under test must then be the one
pip installed, not the source tree's."""
import ctypes
import importlib.metadata
import os
import platform
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


def installed_distribution():
    """The installed distribution the imported package comes from; skips (or fails, under
    LIBSYNC_TEST_INSTALLED=1) when the package is imported from the source tree."""
    try:
        installed = importlib.metadata.distribution("libsync")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    imported = Path(libsync.__file__).resolve()
    if installed is None or Path(installed.locate_file("libsync/__init__.py")).resolve() != imported:
        message = f"the package imported ({imported}) is not an installed one"
        if os.environ.get("LIBSYNC_TEST_INSTALLED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return installed


def test_installed_metadata_is_the_project_version():
    assert installed_distribution().version == VERSION


def test_installed_wheel_is_tagged_for_this_platform_and_bundles_the_library():
    installed = installed_distribution()
    tags = [line.split(":", 1)[1].strip() for line in installed.read_text("WHEEL").splitlines() if line.startswith("Tag:")]
    assert tags == [f"py3-none-linux_{platform.machine()}"]
    if not os.environ.get("LIBSYNC_PATH"):
        assert libsync.library_path == Path(libsync.__file__).parent / "libsync.so"
