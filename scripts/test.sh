#!/usr/bin/env bash
# Runs every test: Swift (swift test), C (ctest, including a program built against the
# installed library) and Python (pytest). Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
scripts/servers.sh install || true  # PostgreSQL and Redis for the distributed lock tests (which skip loudly without)

echo "== C tests (ctest)"
(cd build && ctest --output-on-failure)

echo "== Swift tests (swift test)"
swift build --build-tests
swift test --skip-build --disable-swift-testing

echo "== Python tests (pytest, against the installed package)"
# The debug build of libsync.so (from swift build) checks preconditions: its traps are tested too.
export LIBSYNC_DEBUG_PATH="$PWD/.build/debug/libsync.so"
# From the top folder, so that `import libsync` finds the installed package, not python/.
python3 -m pytest -q python/tests
