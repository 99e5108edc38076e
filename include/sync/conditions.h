/*
 * sync/conditions.h — semaphores, events and barriers (included by <sync.h>).
 *
 * Each lives in memory the caller owns, needs no destroy, and is ready when zeroed or set with
 * its static initializer. Pass SYNC_PROCESS_SHARED to its init function to place it in memory
 * shared between processes (mmap MAP_SHARED, shm_open).
 *
 * Waiting, in three forms for each primitive:
 *   - `*_wait`: waits as long as it takes;
 *   - `*_timedwait(x, timeout_ns)`: a relative timeout in nanoseconds (>= 0, else EINVAL);
 *   - `*_wait_until(x, deadline_ns)`: an absolute CLOCK_MONOTONIC deadline (see
 *     sync_monotonic_ns; < 0 means none). Unlike the others it returns EINTR when a signal
 *     handler ran during the wait, so a caller can act on the signal and wait again.
 * The clock is monotonic: changing the wall clock does not shorten or stretch a wait.
 * All functions are thread-safe; a NULL object pointer gives EINVAL.
 */
#ifndef SYNC_CONDITIONS_H
#define SYNC_CONDITIONS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef SYNC_PROCESS_SHARED
/** Flag for the init functions: the object lives in memory shared between processes. */
#define SYNC_PROCESS_SHARED 1u
#endif

/** CLOCK_MONOTONIC now, in nanoseconds: the clock of every `*_until` deadline. */
int64_t sync_monotonic_ns(void);

/* ---- Counting semaphore (16 bytes) ----------------------------------------------------------
 * A count of units; wait takes one (sleeping while there are none), signal adds. Optionally
 * bounded: a signal that would raise the count above the bound fails with EOVERFLOW, which
 * catches a release without a matching acquire. Waiters are not served in FIFO order.
 */
typedef struct { uint32_t opaque[4]; } sync_semaphore_t;
/** An unbounded, process-private semaphore holding `value` units. */
#define SYNC_SEMAPHORE_INIT(value) { { (value), 0, 0, 0 } }
/** A process-private semaphore holding `value` units, never more than `limit` (value <= limit). */
#define SYNC_BOUNDED_SEMAPHORE_INIT(value, limit) { { (value), 0, (limit), 1 } }
/** Flag for sync_semaphore_init: the count may never exceed `limit`. */
#define SYNC_SEMAPHORE_BOUNDED 4u

/** Initialises with `value` units; flags: SYNC_PROCESS_SHARED, SYNC_SEMAPHORE_BOUNDED (then the
 *  count never exceeds `limit`; otherwise `limit` is ignored). Returns 0, or EINVAL (bounded with
 *  value > limit, unknown flag). Not thread-safe against other use of the same semaphore. */
int sync_semaphore_init(sync_semaphore_t *sem, uint32_t value, uint32_t limit, uint32_t flags);
/** Takes a unit, waiting while there is none. Returns 0. */
int sync_semaphore_wait(sync_semaphore_t *sem);
/** Takes a unit if there is one, never waiting. Returns 0, or EAGAIN if there was none. */
int sync_semaphore_trywait(sync_semaphore_t *sem);
/** As sync_semaphore_wait, for at most timeout_ns. Returns 0 or ETIMEDOUT. */
int sync_semaphore_timedwait(sync_semaphore_t *sem, int64_t timeout_ns);
/** As sync_semaphore_wait, until deadline_ns. Returns 0, ETIMEDOUT or EINTR. */
int sync_semaphore_wait_until(sync_semaphore_t *sem, int64_t deadline_ns);
/** Adds `count` (>= 1) units and wakes as many waiters. Returns 0, EINVAL (count 0), or
 *  EOVERFLOW — and adds nothing — if the count would pass the bound or UINT32_MAX. */
int sync_semaphore_signal(sync_semaphore_t *sem, uint32_t count);
/** The current count: a snapshot, stale as soon as it returns (0 for NULL). */
uint32_t sync_semaphore_value(sync_semaphore_t *sem);

/* ---- Event (8 bytes) ------------------------------------------------------------------------
 * A flag threads can wait for: set wakes every waiter and lets later waits through until clear.
 */
typedef struct { uint32_t opaque[2]; } sync_event_t;
/** A clear, process-private event. */
#define SYNC_EVENT_INIT { { 0, 0 } }

/** Initialises, set or clear; flags 0 or SYNC_PROCESS_SHARED. Returns 0 or EINVAL. */
int sync_event_init(sync_event_t *event, bool set, uint32_t flags);
/** Sets the flag and wakes every waiter. Returns 0. */
int sync_event_set(sync_event_t *event);
/** Clears the flag. Returns 0. */
int sync_event_clear(sync_event_t *event);
/** Whether the flag is set (false for NULL). */
bool sync_event_is_set(sync_event_t *event);
/** Waits until the flag is set. Returns 0. */
int sync_event_wait(sync_event_t *event);
/** Waits at most timeout_ns for the flag. Returns 0 (set) or ETIMEDOUT. */
int sync_event_timedwait(sync_event_t *event, int64_t timeout_ns);
/** Waits until deadline_ns for the flag. Returns 0 (set), ETIMEDOUT or EINTR. */
int sync_event_wait_until(sync_event_t *event, int64_t deadline_ns);

/* ---- Barrier (32 bytes) -----------------------------------------------------------------------
 * A cyclic barrier with the semantics of Python's threading.Barrier: `parties` threads meet in
 * sync_barrier_wait and leave together; the barrier then refills for the next round. A timeout
 * breaks it (every waiter fails); abort breaks it on purpose; reset makes it usable again (the
 * threads waiting at that moment fail). With SYNC_BARRIER_ACTION, the last thread to arrive
 * (index parties - 1) runs the caller's action and must then call sync_barrier_action_done: the
 * others stay waiting until it does.
 */
typedef struct { uint32_t opaque[8]; } sync_barrier_t;
/** A process-private barrier for `parties` (>= 1) threads, with no action. */
#define SYNC_BARRIER_INIT(parties) { { 0, 0, 0, (parties), 0, 0, 0, 0 } }
/** Flag for sync_barrier_init: the last arriver runs an action (see above). */
#define SYNC_BARRIER_ACTION 2u

/** Initialises for `parties` threads; flags: SYNC_PROCESS_SHARED, SYNC_BARRIER_ACTION. Returns 0
 *  or EINVAL (parties 0, unknown flag). */
int sync_barrier_init(sync_barrier_t *barrier, uint32_t parties, uint32_t flags);
/** Waits for the other parties. Returns 0 and stores the arrival index (0 .. parties - 1, 0 =
 *  first) in *index (if not NULL), or ECANCELED if the barrier is broken or reset meanwhile. */
int sync_barrier_wait(sync_barrier_t *barrier, uint32_t *index);
/** As sync_barrier_wait for at most timeout_ns; on timeout the barrier breaks and ETIMEDOUT is
 *  returned (the other waiters get ECANCELED). */
int sync_barrier_timedwait(sync_barrier_t *barrier, int64_t timeout_ns, uint32_t *index);
/** As sync_barrier_timedwait with an absolute deadline; EINTR when a signal handler ran (the
 *  caller has then left the barrier, which stays intact). */
int sync_barrier_wait_until(sync_barrier_t *barrier, int64_t deadline_ns, uint32_t *index);
/** Called by the thread that ran the action: releases the others (succeeded) or breaks the
 *  barrier (they get ECANCELED). Returns 0. */
int sync_barrier_action_done(sync_barrier_t *barrier, bool succeeded);
/** Returns the barrier to its initial state; threads waiting in it get ECANCELED. Returns 0. */
int sync_barrier_reset(sync_barrier_t *barrier);
/** Breaks the barrier: waits fail with ECANCELED until sync_barrier_reset. Returns 0. */
int sync_barrier_abort(sync_barrier_t *barrier);
/** Reads the number of parties, the number of threads waiting, and whether it is broken (any
 *  output pointer may be NULL). Returns 0. */
int sync_barrier_status(sync_barrier_t *barrier, uint32_t *parties, uint32_t *waiting, bool *broken);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_CONDITIONS_H */
