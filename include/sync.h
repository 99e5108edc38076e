/*
 * sync.h — libsync's C API.
 *
 * libsync is a library of thread-synchronization primitives: its core is Swift, exported as this
 * C ABI in libsync.so. Conventions, for every family this header declares:
 *   - Functions that can fail return 0 or an errno-style code (EINVAL, EPERM, EDEADLK,
 *     ETIMEDOUT, EBUSY, ...), documented per function.
 *   - Primitives that fit in a word live in memory the caller owns, with a static initializer
 *     (= SYNC_..._INIT): no allocation, nothing to destroy.
 *   - Timeouts and deadlines use CLOCK_MONOTONIC, so wall-clock changes do not affect them.
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
