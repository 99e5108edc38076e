#!/usr/bin/env bash
# Runs every test: C (ctest: the C tests, the C examples, programs built against the installed
# library), Swift (swift test), Python (pytest, against the package installed in .venv), and the
# examples: the code blocks of the README, docs/ and python/README.md are example files or
# fragments whose names match the API (scripts/snippets.py), and every example runs clean (exit
# 0, nothing on stderr). A build that warns fails the run. Then the
# sanitizer stage (scripts/sanitize.sh). Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
scripts/servers.sh install || true  # PostgreSQL and Redis for the distributed lock tests (which skip loudly without)

# NAME COMMAND...: COMMAND must exit 0 and print nothing on stderr (no warning, no traceback).
run_clean() {
  local name=$1 errors status=0; shift
  errors=$("$@" 2>&1 >/dev/null) || status=$?
  if [ $status -ne 0 ] || [ -n "$errors" ]; then
    echo "example $name: exit status $status, stderr:" >&2; echo "$errors" >&2; exit 1
  fi
  echo "  $name: clean"
}

echo "== A build with nothing changed does nothing (no compile, no relink)"
# setup.sh has just built build/: building again must find every output current.
again=$(cmake --build build 2>&1)
if ! grep -qx "ninja: no work to do." <<<"$again"; then
  echo "a second cmake --build build did work (ninja -C build -d explain -n says why):" >&2
  echo "$again" >&2; exit 1
fi
echo "  cmake --build build: no work to do"

echo "== C tests and C examples (ctest)"
(cd build && ctest --output-on-failure)

echo "== Swift tests (swift test)"
logged swift-build swift build --build-tests
if swift build --build-tests 2>&1 | grep -E "^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Linking)"; then
  echo "a second swift build --build-tests compiled or linked again (above)" >&2; exit 1
fi
swift test --skip-build --disable-swift-testing

echo "== Python tests (pytest, against the package installed in .venv)"
# The debug build of libsync.so (from swift build) checks preconditions: its traps are tested too.
export LIBSYNC_DEBUG_PATH="$PWD/.build/debug/libsync.so"
# From the top folder, so that `import libsync` finds the installed package, not python/.
LIBSYNC_TEST_INSTALLED=1 "$PYTHON" -m pytest -q -rs python/tests   # -rs: why each skip
bash benchmarks/faults/run.sh --short --check  # the distributed lock under faults (benchmarks/faults/README.md)

echo "== Examples: the docs' code is example files or checked fragments; examples run clean"
"$PYTHON" scripts/snippets.py --swift-modules .build/debug/Modules README.md docs/*.md python/README.md
for src in examples/python/*.py; do run_clean "$src" "$PYTHON" -X dev -W error "$src"; done
for product in sync-demo quickstart; do run_clean "$product (Swift)" ".build/debug/$product"; done
# The distributed lock's usage examples take a TARGET (default: a path): each server too.
scripts/servers.sh run -- bash -c '
  [ -n "${LIBSYNC_TEST_SERVERS:-}" ] || { echo "  usage examples on servers: SKIPPED (no servers)"; exit 0; }
  for backend in postgres redis; do
    url="$(cat "$LIBSYNC_TEST_SERVERS/$backend.url")?lock=usage"
    "$PYTHON" -X dev -W error examples/python/distributed_lock_usage.py "$url" >/dev/null || exit 1
    build/examples/example_c_distributed_lock_usage "$url" >/dev/null || exit 1
    echo "  distributed_lock_usage (C, Python) on $backend: clean"
  done' || { echo "a distributed lock usage example failed on a server" >&2; exit 1; }

echo "== No warnings in the builds"
if grep -E "warning:|remark:" build/logs/*.log; then
  echo "the builds above printed warnings (logs in build/logs/): fix them" >&2; exit 1
fi
echo "  none"

echo "== Sanitizers (ASan+UBSan and TSan builds of libsync.so and the C tests; swift test under TSan)"
scripts/sanitize.sh
