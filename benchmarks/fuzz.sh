#!/usr/bin/env bash
# The model fuzz of Tests/c/test_fuzz.c, longer than the test command runs it: SECONDS per
# primitive and mode (default 30; 8 runs in all), then, if scripts/sanitize.sh has built it, the
# same under ThreadSanitizer. Usage: benchmarks/fuzz.sh [seconds] (SYNC_FUZZ_SEED=n to replay
# a seed's choices). Not a benchmark: it prints operation counts, never asserts a time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SYNC_FUZZ_SECONDS="${1:-30}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYNC_BUILD_TESTS=ON >/dev/null
cmake --build build --target test_fuzz >/dev/null
echo "=== fuzz: release build"
build/Tests/c/test_fuzz
if [ -x build-tsan/c/Tests/c/test_fuzz ]; then
  echo "=== fuzz: ThreadSanitizer build (build-tsan/c)"
  cmake --build build-tsan/c --target test_fuzz >/dev/null
  TSAN_OPTIONS="halt_on_error=1:exitcode=66:suppressions=$PWD/scripts/tsan.supp" build-tsan/c/Tests/c/test_fuzz
fi
