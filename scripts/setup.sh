#!/usr/bin/env bash
# Prepares a fresh Debian machine (idempotent, quiet) and builds libsync. Sourced by test.sh,
# demo.sh and benchmarks/run.sh, which then run Python as "$PYTHON".
#  - Debian packages it lacks: the C toolchain, CMake, Ninja, pkg-config, python3-venv (and
#    python3-dev, libffi-dev for Python packages built from source), and CPython's own tests
#    (libpython3.X-testsuite: the Python tests run CPython's lock tests on libsync).
#  - A project virtual environment, .venv (python3 -m venv), with pytest, mypy and the libsync
#    package, built by pip through scikit-build-core and the project's CMake. Nothing is installed
#    into the system interpreter.
#  - libsync.so, the C tests and the C examples, built with CMake into build/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

apt_install() {
  echo "== installing $* (apt)"
  local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
deb_missing() { ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }

command -v swift >/dev/null || { echo "Swift 6 is required (swift not on PATH): see swift.org/install" >&2; exit 1; }
command -v python3 >/dev/null || apt_install python3
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++)
if [ "$(command -v python3)" = /usr/bin/python3 ]; then  # Debian's interpreter, split into packages
  python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
  deb_missing python3-dev && need+=(python3-dev)
  deb_missing libffi-dev && need+=(libffi-dev)
  python3 -c "import test.lock_tests" 2>/dev/null \
    || need+=("libpython$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')-testsuite")
fi
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

# The venv, made again if its interpreter is gone (python3 upgraded or switched).
export PYTHON="$PWD/.venv/bin/python" PIP_DISABLE_PIP_VERSION_CHECK=1
if ! "$PYTHON" -c "" 2>/dev/null; then
  echo "== creating the virtual environment .venv ($(command -v python3))"
  rm -rf .venv
  python3 -m venv .venv
fi
"$PYTHON" -c "import pytest" 2>/dev/null || "$PYTHON" -m pip install -q pytest
# The type checker (test.sh's python stage; settings in pyproject.toml), one version: each
# release of mypy finds other errors, and the check must not change under an unchanged tree.
MYPY_VERSION=2.4.1
"$PYTHON" -c "import mypy.version, sys; sys.exit(mypy.version.__version__ != '$MYPY_VERSION')" 2>/dev/null \
  || "$PYTHON" -m pip install -q "mypy==$MYPY_VERSION"
# The package's build backend, in .venv: pip builds without an isolated environment, whose new
# path each time would make scikit-build-core clear its CMake build (python/build/) and rebuild.
"$PYTHON" -c "import scikit_build_core" 2>/dev/null || "$PYTHON" -m pip install -q "scikit-build-core>=0.10"

# NAME COMMAND...: runs a build, its output also kept in build/logs/NAME.log (test.sh checks
# that no build warns).
logged() {
  local name=$1; shift
  mkdir -p build/logs
  "$@" 2>&1 | tee "build/logs/$name.log"
}

echo "== building libsync.so, the C tests and the C examples (CMake, Ninja, release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYNC_BUILD_TESTS=ON >/dev/null
logged cmake-build cmake --build build
echo "== installing the Python package into .venv (pip, scikit-build-core, CMake)"
# The wheel packs build/'s libsync.so, just built from this tree, rather than compiling it again.
"$PYTHON" -m pip install -q --no-build-isolation \
  -C cmake.define.SYNC_PREBUILT_LIBRARY="$(readlink -f build/libsync.so)" ./python
