#!/usr/bin/env bash
# Runs the benchmarks (C, Swift, Python) and prints their tables: medians, with the ratio to a
# peer measured in the same run. Then writes the report: RESULTS.md (the tables, the machine,
# the date) and plots of the tables measured at several thread counts (results/*.svg).
#
#   benchmarks/run.sh [--quick] [c|swift|python ...]     (default: all three)
#
# A full run of all three writes benchmarks/RESULTS.md and benchmarks/results/ (commit them);
# --quick (a smoke run: 3 runs of a tenth of the work per row) or a part alone writes its report
# to build/benchmarks/report/ instead. Not a test: nothing here asserts a time. Run it on a
# quiet machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=
parts=()
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    c|swift|python) parts+=("$arg") ;;
    *) echo "usage: benchmarks/run.sh [--quick] [c|swift|python ...]" >&2; exit 2 ;;
  esac
done
full=; [ ${#parts[@]} -gt 0 ] || { parts=(c swift python); [ -n "$quick" ] || full=1; }

source scripts/setup.sh >/dev/null
# The peers the Python benchmarks compare with, and matplotlib for the plots, in .venv.
"$PYTHON" -c "import atomics, readerwriterlock, filelock, matplotlib, aiorwlock, redis" 2>/dev/null \
  || "$PYTHON" -m pip install -q atomics readerwriterlock filelock matplotlib aiorwlock redis

rows=$PWD/build/benchmarks/rows
rm -rf "$rows" && mkdir -p "$rows"
if [ -n "$quick" ]; then export BENCH_QUICK=1; fi

for part in "${parts[@]}"; do
  case $part in
    c)
      for src in benchmarks/c/bench_*.c; do
        name=$(basename "$src" .c)
        exe=build/benchmarks/$name
        # Every loop 64-byte aligned: a 2 ns row moves by a cycle with its loop's placement (the
        # same throttler call measured 0.89x and 1.27x sem_trywait in two unaligned binaries).
        cc -O2 -falign-loops=64 -std=c11 -Iinclude "$src" benchmarks/c/peers.c -Lbuild -lsync -Wl,-rpath,"$PWD/build" -lpthread -o "$exe"
        echo "=== C: $name"; BENCH_ROWS="$rows/c_$name.jsonl" "$exe"
      done ;;
    swift)
      echo "=== Swift"; BENCH_ROWS="$rows/swift.jsonl" swift run -c release SyncBenchmarks ;;
    python)
      for src in benchmarks/python/bench_*.py; do
        name=$(basename "$src" .py)
        echo "=== Python: $name"; (cd benchmarks/python && BENCH_ROWS="$rows/python_$name.jsonl" "$PYTHON" "$name.py")
      done ;;
  esac
done

if [ -n "$full" ]; then out=benchmarks; else out=build/benchmarks/report; fi
command="bash benchmarks/run.sh${*:+ $*}"
"$PYTHON" benchmarks/report.py "$rows" "$out" ${quick:+--quick} --command "$command"
