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

echo "== C tests and C examples (ctest)"
(cd build && ctest --output-on-failure)

echo "== Swift tests (swift test)"
logged swift-build swift build --build-tests
swift test --skip-build --disable-swift-testing

echo "== Python tests (pytest, against the package installed in .venv)"
# The debug build of libsync.so (from swift build) checks preconditions: its traps are tested too.
export LIBSYNC_DEBUG_PATH="$PWD/.build/debug/libsync.so"
# From the top folder, so that `import libsync` finds the installed package, not python/.
LIBSYNC_TEST_INSTALLED=1 "$PYTHON" -m pytest -q python/tests
bash benchmarks/faults/run.sh --short --check  # the distributed lock under faults (benchmarks/faults/README.md)

echo "== Examples: the docs' code is example files or checked fragments; examples run clean"
"$PYTHON" scripts/snippets.py --swift-modules .build/debug/Modules README.md docs/*.md python/README.md
for src in examples/python/*.py; do run_clean "$src" "$PYTHON" -X dev -W error "$src"; done
for product in sync-demo quickstart; do run_clean "$product (Swift)" ".build/debug/$product"; done

echo "== No warnings in the builds"
if grep -E "warning:|remark:" build/logs/*.log; then
  echo "the builds above printed warnings (logs in build/logs/): fix them" >&2; exit 1
fi
echo "  none"

echo "== Sanitizers (ASan+UBSan and TSan builds of libsync.so and the C tests; swift test under TSan)"
scripts/sanitize.sh
