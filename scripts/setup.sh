#!/usr/bin/env bash
# Installs what building libsync needs on a fresh Debian machine (idempotent, quiet), and builds
# libsync.so with CMake into build/. Sourced by test.sh, demo.sh and benchmarks/run.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "Swift 6 is required (swift not on PATH): see swift.org/install" >&2; exit 1; }
python3 -c "import pytest, wheel, setuptools" 2>/dev/null || python3 -m pip install -q pytest wheel setuptools

echo "== building libsync.so (CMake, Ninja, release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
echo "== installing the Python package (bundling build/libsync.so)"
LIBSYNC_BUILT_LIBRARY="$PWD/build/libsync.so" python3 -m pip install -q --no-build-isolation ./python
