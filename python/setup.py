"""Bundles libsync.so into the package at install.

The library comes from $LIBSYNC_BUILT_LIBRARY if set, else from ../build/libsync.so, else it is
built there with CMake (needs cmake, ninja and Swift). The package also loads $LIBSYNC_PATH at
run time, whatever was bundled.
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent.parent


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        library = os.environ.get("LIBSYNC_BUILT_LIBRARY")
        if not library:
            library = SOURCE / "build" / "libsync.so"
            if not library.is_file():
                subprocess.check_call(["cmake", "-S", str(SOURCE), "-B", str(SOURCE / "build"), "-G", "Ninja",
                                       "-DCMAKE_BUILD_TYPE=Release"])
                subprocess.check_call(["cmake", "--build", str(SOURCE / "build"), "--target", "sync"])
        target = Path(self.build_lib) / "libsync" / "libsync.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)


setup(cmdclass={"build_py": BuildPyWithLibrary})
