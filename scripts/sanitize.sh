#!/usr/bin/env bash
# The sanitizer stage of scripts/test.sh (also runs on its own): the C tests under
# AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer, each against a
# libsync.so built with the same sanitizer (so that TSan sees its atomics), and `swift test`
# under ThreadSanitizer. Separate build directories: build-asan/, build-tsan/. Any report fails
# the stage (the suppressed false positives, each with its proof, are in scripts/tsan.supp).
#
# Which tests: every C test under ASan+UBSan; under TSan (slower) all but test_osatomic_threads
# (16 threads contending on spin locks take minutes there), test_rwlock (thousands of threads),
# test_rwlock_adversarial (64 threads, and SIGKILLed and SIGSTOPped processes),
# and the tests built on fork and killed processes or signals, which TSan does not model
# (test_attach, test_distributed_*, test_mutex_owners, test_signals, test_waiter_death). The fuzz runs briefly
# (SYNC_FUZZ_SECONDS, default 0.25 s per primitive and mode here).
#
#   scripts/sanitize.sh          builds (what is out of date), then runs the tests
#   scripts/sanitize.sh build    the three instrumented builds only: test.sh starts them early,
#                                in the background, while its other stages mostly wait
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
phase=${1:-all}
case $phase in all|build) ;; *) echo "usage: scripts/sanitize.sh [build]" >&2; exit 2 ;; esac

# The toolchain's clang: its sanitizer runtimes are the ones swiftc's -sanitize links against.
CLANG="$(dirname "$(readlink -f "$(command -v swift)")")/clang"
export SWIFT_BACKTRACE=enable=no          # a crash ends at once (the sanitizer has reported)
export SYNC_FUZZ_SECONDS="${SYNC_FUZZ_SECONDS:-0.25}"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# die_after_fork=0: a forked child that takes a file or PostgreSQL lock starts the process's hold
# watcher thread (as one that takes a Redis lock starts its renewer), which TSan otherwise kills.
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:die_after_fork=0:suppressions=$PWD/scripts/tsan.supp"
start=$SECONDS

# Runs one test binary with a bound (a hang fails the stage); prints its output only on failure.
run() {
  local log; log=$(mktemp)
  if timeout 300 "$@" >"$log" 2>&1; then
    rm -f "$log"
  else
    local status=$?
    echo "FAILED ($status): $*"; cat "$log"; rm -f "$log"
    exit 1
  fi
}

c_tests() {  # build directory, tests...
  local dir=$1; shift
  for t in "$@"; do
    # The distributed lock tests' forked children exit without destroying their parent's objects,
    # and a forked child abandons its parent's per-process lock state by design (it may have been
    # in use by a parent thread at the fork): leaks by intent, so no leak check there.
    if [[ $t == test_distributed_* ]]; then ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" run "$dir/Tests/c/$t"
    else run "$dir/Tests/c/$t"; fi
  done
}

# Every C test under ASan+UBSan; under TSan all but those named in TSAN_SKIP. The distributed
# lock's server tests (read/write lock, semaphore, async acquire) are among them: they mostly
# wait on servers, leases and fork()ed holders, which TSan's slowdown stretches past CI's budget.
ALL=($(cd Tests/c && ls test_*.c | sed 's/\.c$//'))
ASAN=("${ALL[@]}")
TSAN_SKIP=" test_attach test_osatomic_threads test_distributed_lock test_distributed_lock_backends test_distributed_lock_etcd test_distributed_lock_loss test_distributed_rwlock test_distributed_rwlock_servers test_distributed_semaphore test_distributed_lock_async test_mutex_owners test_rwlock test_rwlock_adversarial test_signals test_waiter_death "
TSAN=()
for t in "${ALL[@]}"; do [[ $TSAN_SKIP == *" $t "* ]] || TSAN+=("$t"); done

build() {
  CC="$CLANG" cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYNC_SANITIZE=address -DSYNC_BUILD_TESTS=ON >/dev/null
  cmake --build build-asan --target "${ASAN[@]}" >/dev/null
  # Unoptimized, so that the closures of Mutex.withLock stay frames of their own (tsan.supp).
  CC="$CLANG" cmake -S . -B build-tsan/c -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSYNC_SANITIZE=thread -DSYNC_BUILD_TESTS=ON >/dev/null
  cmake --build build-tsan/c --target "${TSAN[@]}" >/dev/null
  swift build --build-tests --sanitize=thread --scratch-path build-tsan/swiftpm >/dev/null
}

echo "== sanitizers: the ASan+UBSan and TSan builds (build-asan/, build-tsan/)"
build
[ "$phase" = build ] && { echo "== sanitizers: built ($((SECONDS - start)) s)"; exit 0; }

echo "== sanitizers: C tests under ASan+UBSan (build-asan/)"
c_tests build-asan "${ASAN[@]}"

echo "== sanitizers: C tests under TSan, libsync.so built with -sanitize=thread (build-tsan/c)"
c_tests build-tsan/c "${TSAN[@]}"

echo "== sanitizers: swift test --sanitize=thread (build-tsan/swiftpm)"
# TSan delivers signals itself and merges real-time signals queued to one thread, which this
# test counts one by one (it passes without TSan, in the Swift stage above). The forked-executor
# test's child runs on without exec(): TSan's runtime is not fork-safe in a process with other
# threads (what its die_after_fork guards): that child hung once (over 10 s) in the full TSan
# run, with the suite's async waker and lock watchers running, where alone it passes in under
# 0.3 s; it runs in the Swift stage above.
run swift test --skip-build --sanitize=thread --scratch-path build-tsan/swiftpm --disable-swift-testing \
  --skip SignalsTests.testThreadsStartedBeforeTheRouteForwardEverySignalExactlyOnce \
  --skip QueuesTests.testExecutorInForkedChildThrowsInsteadOfHanging

echo "== sanitizers: clean ($((SECONDS - start)) s)"
