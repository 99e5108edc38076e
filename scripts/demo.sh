#!/usr/bin/env bash
# Builds everything (installing what is missing) and runs the examples from C, Python and Swift
# on libsync: Apple's listings and the code of the README and docs/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

for src in examples/c/*.c; do   # built by CMake (examples/CMakeLists.txt)
  echo; echo "=== C: $src"; "build/examples/example_c_$(basename "$src" .c)"
done
for src in examples/python/*.py; do
  echo; echo "=== Python: $src"; "$PYTHON" "$src"
done
for product in sync-demo quickstart; do
  echo; echo "=== Swift: $product"; swift run -c release "$product"
done
