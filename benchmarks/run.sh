#!/usr/bin/env bash
# Runs every benchmark (C, Swift, Python) and prints their tables: medians, with the ratio to a
# peer measured in the same run. Usage: benchmarks/run.sh [c|swift|python ...]   (default: all)
# Not a test: nothing here asserts a time. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh >/dev/null
python3 -c "import atomics, readerwriterlock" 2>/dev/null || python3 -m pip install -q atomics readerwriterlock || true

parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(c swift python)
for part in "${parts[@]}"; do
  case $part in
    c)
      mkdir -p build/benchmarks
      for src in benchmarks/c/bench_*.c; do
        exe=build/benchmarks/$(basename "$src" .c)
        # Every loop 64-byte aligned: a 2 ns row moves by a cycle with its loop's placement (the
        # same throttler call measured 0.89x and 1.27x sem_trywait in two unaligned binaries).
        cc -O2 -falign-loops=64 -std=c11 -Iinclude "$src" benchmarks/c/peers.c -Lbuild -lsync -Wl,-rpath,"$PWD/build" -lpthread -o "$exe"
        echo "=== C: $(basename "$src")"; "$exe"
      done ;;
    swift)
      if [ -d benchmarks/swift ]; then
        echo "=== Swift"; swift run -c release SyncBenchmarks
      fi ;;
    python)
      for src in benchmarks/python/bench_*.py; do
        echo "=== Python: $(basename "$src")"; (cd benchmarks/python && python3 "$(basename "$src")")
      done ;;
  esac
done
