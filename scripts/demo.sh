#!/usr/bin/env bash
# Builds everything (installing what is missing) and runs the seeds' listings from C, Python and
# Swift on libsync.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

mkdir -p build/examples
for src in examples/c/*.c; do
  exe=build/examples/$(basename "$src" .c)
  cc -std=c11 -O2 -Iinclude "$src" -Lbuild -lsync -Wl,-rpath,"$PWD/build" -lpthread -o "$exe"
  echo; echo "=== C: $src"; "$exe"
done
for src in examples/python/*.py; do
  echo; echo "=== Python: $src"; python3 "$src"
done
echo; echo "=== Swift: examples/swift"
swift run -c release sync-demo
