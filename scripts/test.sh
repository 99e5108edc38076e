#!/usr/bin/env bash
# Runs the tests. With no argument: every stage below, in this order, as CI does (.ci/run).
#   c         C tests, C examples, programs built against the installed library (ctest)
#   swift     Swift tests (swift test)
#   python    the package's types (mypy --strict python/libsync), then the Python tests (pytest,
#             against the package installed in .venv; the debug build of libsync.so from swift
#             build checks preconditions: its traps are tested too)
#   examples  the code blocks of the README, docs/ and python/README.md are example files or
#             fragments whose names match the API (scripts/snippets.py), and every Python and
#             Swift example runs clean (exit 0, nothing on stderr)
#   sanitize  the sanitizer stage (scripts/sanitize.sh)
# A build that warns fails the run (checked after the examples in the full run, at the end of a
# partial one). Not in the default run:
#   repeat-c N [REGEX]  every C test (ctest names matching REGEX; default: the test_* binaries)
#             N times in a row, each stopped at its first failure: a flaky test is a defect.
#
#   bash scripts/test.sh                  # everything, as CI
#   bash scripts/test.sh c python         # some stages, in the order given
#   bash scripts/test.sh repeat-c 200     # each C test 200 times
#
# Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: bash scripts/test.sh [c|swift|python|examples|sanitize]...  |  bash scripts/test.sh repeat-c N [REGEX]" >&2
  exit 2
}

stages=("$@")
full=0
if [ ${#stages[@]} -eq 0 ]; then
  full=1
  stages=(c swift python examples warnings sanitize)
elif [ "${stages[0]}" = repeat-c ]; then
  [ ${#stages[@]} -ge 2 ] && [ ${#stages[@]} -le 3 ] && [[ ${stages[1]} =~ ^[1-9][0-9]*$ ]] || usage
else
  for stage in "${stages[@]}"; do
    case $stage in c|swift|python|examples|sanitize) ;; *) usage ;; esac
  done
  stages+=(warnings)
fi

source scripts/setup.sh
# Tests run this many at a time (ctest -j, pytest -n): the long ones mostly wait (for servers,
# leases, killed and stopped processes), so one more than the cores. Each test owns its files,
# ports and servers; a test that fails beside another is a defect, as a flaky one is.
jobs=$(( $(nproc) + 1 ))

# The sanitizer stage's three builds start now, in the background and at a lower priority: the
# stages before it mostly wait (servers, leases, stopped processes), and the builds fill that
# time. stage_sanitize waits for them (a failed build fails it, with its log).
sanitize_builds=
if [[ " ${stages[*]} " == *" sanitize "* ]] && [ "${stages[0]}" != sanitize ]; then
  setsid nice -n 10 scripts/sanitize.sh build > build/sanitize-build.log 2>&1 &  # (its own process group)
  sanitize_builds=$!
  trap '[ -z "$sanitize_builds" ] || kill -- "-$sanitize_builds" 2>/dev/null || true' EXIT
fi
case " ${stages[*]} " in
  *" c "*|*" python "*|*" examples "*|*" repeat-c "*)
    scripts/servers.sh install || true ;;  # PostgreSQL and Redis for the distributed lock tests (which skip loudly without)
esac

# NAME COMMAND...: COMMAND must exit 0 and print nothing on stderr (no warning, no traceback).
run_clean() {
  local name=$1 errors status=0; shift
  errors=$("$@" 2>&1 >/dev/null) || status=$?
  if [ $status -ne 0 ] || [ -n "$errors" ]; then
    echo "example $name: exit status $status, stderr:" >&2; echo "$errors" >&2; exit 1
  fi
  echo "  $name: clean"
}

# The Swift debug build, once per run: with the tests for the swift stage (which comes first in
# the full run); the python and examples stages need only the library and the example programs.
swift_built=0
swift_build() {
  [ $swift_built = 1 ] && return
  logged swift-build swift build "$@"
  swift_built=1
}

stage_c() {
  echo "== A build with nothing changed does nothing (no compile, no relink)"
  # setup.sh has just built build/: building again must find every output current.
  local again
  again=$(cmake --build build 2>&1)
  if ! grep -qx "ninja: no work to do." <<<"$again"; then
    echo "a second cmake --build build did work (ninja -C build -d explain -n says why):" >&2
    echo "$again" >&2; exit 1
  fi
  echo "  cmake --build build: no work to do"
  echo "== C tests and C examples (ctest, $jobs at a time)"
  (cd build && ctest --output-on-failure -j "$jobs")
}

stage_swift() {
  echo "== Swift tests (swift test)"
  swift_build --build-tests
  if swift build --build-tests 2>&1 | grep -E "^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Linking)"; then
    echo "a second swift build --build-tests compiled or linked again (above)" >&2; exit 1
  fi
  swift test --skip-build --disable-swift-testing
}

stage_python() {
  echo "== Python types (mypy --strict; its settings: pyproject.toml)"
  .venv/bin/mypy --strict python/libsync
  echo "== Python tests (pytest, against the package installed in .venv)"
  swift_build
  # The debug build of libsync.so (from swift build) checks preconditions: its traps are tested too.
  export LIBSYNC_DEBUG_PATH="$PWD/.build/debug/libsync.so"
  # From the top folder, so that `import libsync` finds the installed package, not python/.
  # -n: $jobs processes (pytest-xdist), each starting its own servers; -rs: why each skip.
  # test_signals runs alone, in pytest's own process: its order tests rely on sync/signals.h's
  # rule that no thread but libsync's has the signal unblocked, and an xdist worker has a thread
  # (execnet's) that was started before the route.
  LIBSYNC_TEST_INSTALLED=1 "$PYTHON" -m pytest -q -rs -n "$jobs" --ignore=python/tests/test_signals.py python/tests
  LIBSYNC_TEST_INSTALLED=1 "$PYTHON" -m pytest -q -rs -p no:xdist python/tests/test_signals.py
  bash benchmarks/faults/run.sh --short --check  # the distributed lock under faults (benchmarks/faults/README.md)
}

stage_examples() {
  echo "== Examples: the docs' code is example files or checked fragments; examples run clean"
  swift_build
  "$PYTHON" scripts/snippets.py --swift-modules .build/debug/Modules README.md docs/*.md python/README.md
  for src in examples/python/*.py; do run_clean "$src" "$PYTHON" -X dev -W error "$src"; done
  for product in sync-demo quickstart; do run_clean "$product (Swift)" ".build/debug/$product"; done
  # The distributed lock's usage examples take a TARGET (default: a path): each server too (etcd
  # is started here: `run` starts PostgreSQL and Redis only).
  scripts/servers.sh run -- bash -c '
    [ -n "${LIBSYNC_TEST_SERVERS:-}" ] || { echo "  usage examples on servers: SKIPPED (no servers)"; exit 0; }
    backends="postgres redis"
    if scripts/servers.sh start-etcd "$LIBSYNC_TEST_SERVERS"; then backends="$backends etcd"
    else echo "  usage examples on etcd: SKIPPED (no etcd)"; fi
    for backend in $backends; do
      url="$(cat "$LIBSYNC_TEST_SERVERS/$backend.url")?lock=usage"
      "$PYTHON" -X dev -W error examples/python/distributed_lock_usage.py "$url" >/dev/null || exit 1
      build/examples/example_c_distributed_lock_usage "$url" >/dev/null || exit 1
      "$PYTHON" -X dev -W error examples/python/distributed_rwlock.py "$url-rw" >/dev/null || exit 1
      build/examples/example_c_distributed_rwlock "$url-rw" >/dev/null || exit 1
      .build/debug/sync-demo "$url" >/dev/null || exit 1
      "$PYTHON" -X dev -W error examples/python/rate_limiter.py "${url}-rate" >/dev/null || exit 1
      build/examples/example_c_rate_limiter "${url}-crate" >/dev/null || exit 1
      echo "  distributed_lock_usage, distributed_rwlock, rate_limiter (C, Python) and sync-demo (Swift) on $backend: clean"
    done' || { echo "a distributed lock usage example failed on a server" >&2; exit 1; }
}

stage_warnings() {
  echo "== No warnings in the builds"
  if grep -E "warning:|remark:" build/logs/*.log; then
    echo "the builds above printed warnings (logs in build/logs/): fix them" >&2; exit 1
  fi
  echo "  none"
}

stage_sanitize() {
  echo "== Sanitizers (ASan+UBSan and TSan builds of libsync.so and the C tests; swift test under TSan)"
  if [ -n "$sanitize_builds" ]; then
    local status=0; wait "$sanitize_builds" || status=$?
    sanitize_builds=
    [ $status = 0 ] || { cat build/sanitize-build.log >&2; echo "the sanitizer builds failed ($status)" >&2; exit 1; }
  fi
  scripts/sanitize.sh
}

# Each C test N times in a row (ctest runs one test N times, then the next); a test stops at its
# first failure, which ctest reports with its output.
stage_repeat_c() {
  local times=$1 regex=${2:-^test_}
  echo "== C tests matching '$regex', each $times times in a row (ctest --repeat until-fail:$times)"
  (cd build && ctest --output-on-failure -R "$regex" --repeat "until-fail:$times")
}

if [ "${stages[0]}" = repeat-c ]; then
  stage_repeat_c "${stages[@]:1}"
  exit 0
fi
for stage in "${stages[@]}"; do
  began=$SECONDS; "stage_$stage"
  echo "== stage $stage: $((SECONDS - began)) s"  # where CI's 10 minutes go
done
[ $full = 1 ] || echo "== Done: ${stages[*]} (the full run, as CI: bash scripts/test.sh)"
