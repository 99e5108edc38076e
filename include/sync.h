/*
 * sync.h — libsync's C API.
 *
 * libsync is a library of thread-synchronization primitives: its core is Swift, exported as this
 * C ABI in libsync.so. Conventions, for every family this header declares:
 *   - Functions that can fail return 0 or an errno-style code (EINVAL, EPERM, EDEADLK,
 *     ETIMEDOUT, EBUSY, ...), documented per function.
 *   - Primitives that fit in a word live in memory the caller owns, with a static initializer
 *     (= SYNC_..._INIT): no allocation, nothing to destroy.
 *   - Time: one model for every family. Timeouts and deadlines use CLOCK_MONOTONIC
 *     (sync_monotonic_ns), so wall-clock changes do not affect them. A function that may wait
 *     comes in up to three forms, with one meaning of their arguments:
 *       `timed` forms    a relative timeout in nanoseconds (uint64_t: saturating; where the
 *                        argument is int64_t, a negative timeout waits without limit);
 *       `_until` forms   an absolute deadline in nanoseconds: a negative deadline is none (the
 *                        wait lasts until it succeeds); a deadline at or before now (0 included)
 *                        is one try (success if possible at once, else ETIMEDOUT, no sleep);
 *       `_interruptible` the same deadline, and EINTR when a signal handler runs during the
 *                        wait and, in the process's main thread, at least every 50 ms (the
 *                        distributed lock: in every thread), so that a caller such as an
 *                        interpreter can handle its signals and call again with the same
 *                        deadline.
 *     The other forms retry after a signal and never return EINTR, except sync_throttler_enter,
 *     whose header documents its EINTR.
 *   - Pointers: a NULL or misaligned object pointer is reported, never undefined behaviour,
 *     wherever the function has a way to report it: functions that return an errno code return
 *     EINVAL and change nothing; queries (is_locked, holders, depth, ...) return 0. Only the
 *     functions with no error channel, the atomic values (sync_atomic_*) and OSAtomic, take a
 *     valid pointer as a precondition, checked (a trap with a message) in debug builds of the
 *     library. Each header restates the rule for its family.
 *   - Every function is thread-safe unless its comment says otherwise.
 *
 * The OSAtomic family (Apple's names and semantics) is declared in <libkern/OSAtomic.h>,
 * included here.
 */
#ifndef SYNC_H
#define SYNC_H

#include <libkern/OSAtomic.h>

/* Each family of primitives has its own header under sync/, all included here. */
#include "sync/locks.h"
#include "sync/conditions.h"
#include "sync/atomics.h"
#include "sync/distributed_lock.h"
#include "sync/queues.h"
#include "sync/signals.h"
#include "sync/async.h"
#include "sync/debug.h"
#include "sync/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SYNC_VERSION_MAJOR 0
#define SYNC_VERSION_MINOR 1
#define SYNC_VERSION_PATCH 0

/** The version of the loaded library as "MAJOR.MINOR.PATCH" (static storage; never NULL). */
const char *sync_version(void);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_H */
