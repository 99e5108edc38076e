/*
 * sync/conditions.h — condition variables, conditions (NSCondition), condition locks
 * (NSConditionLock), semaphores, events and barriers (included by <sync.h>).
 *
 * Each lives in memory the caller owns, needs no destroy, and is ready when set with its static
 * initializer or init function. Pass SYNC_PROCESS_SHARED to the init function to place it in
 * memory shared between processes (mmap MAP_SHARED, shm_open); a mutex used with a shared
 * condition variable must be shared too.
 *
 * Waiting comes in the forms of sync/locks.h:
 *   - `*_wait`: as long as it takes;
 *   - `*_timedwait(x, timeout_ns)`: a relative timeout in nanoseconds;
 *   - `*_wait_until(x, deadline_ns)`: an absolute CLOCK_MONOTONIC deadline (sync_monotonic_ns;
 *     < 0: none; one in the past returns ETIMEDOUT at once unless the wait is already satisfied);
 *   - `*_interruptible(x, deadline_ns)`: as `_until`, and also returns EINTR when a signal
 *     handler ran during the wait, and at least every 50 ms (a signal that arrives while the
 *     waiter is not asleep in the kernel interrupts nothing), so that a caller such as an
 *     interpreter can act on pending signals and call again. All other forms never return EINTR.
 * The clock is monotonic: changing the wall clock does not shorten or stretch a wait.
 * Return codes are 0 or an errno code; a NULL or misaligned object pointer gives EINVAL.
 * Thread safety: every function may be called from any thread at any time, except the init
 * functions, which must not race with other use of the same object.
 */
#ifndef SYNC_CONDITIONS_H
#define SYNC_CONDITIONS_H

#include <stdbool.h>
#include <stdint.h>
#include "locks.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Flag for the init functions below: the object lives in memory shared between processes. */
#define SYNC_PROCESS_SHARED 1

/** CLOCK_MONOTONIC now, in nanoseconds: the clock of every deadline. */
int64_t sync_monotonic_ns(void);

/* ---- Condition variable (8 bytes) ------------------------------------------------------------
 * POSIX-style, used with a sync_mutex_t the caller holds. Wakeups may be spurious (a wait may
 * return 0 with nothing signalled), so always wait in a loop that re-checks your predicate:
 *
 *     sync_mutex_lock(&m);
 *     while (!ready) sync_cond_wait(&c, &m);
 *     ... use the state ...
 *     sync_mutex_unlock(&m);
 *
 * A signal or broadcast with no thread waiting costs one load. Not FIFO.
 */
typedef struct { uint32_t _sequence, _waiters; } sync_cond_t;
#define SYNC_COND_INIT { 0u, 0u }

/** Initializes; flags 0 or SYNC_PROCESS_SHARED. @return 0 or EINVAL. */
int sync_cond_init(sync_cond_t *cond, int flags);
/** Releases mutex (which the caller must hold), waits for a signal, takes mutex again (also on
 *  error, except EPERM/EINVAL/ENOTRECOVERABLE). @return 0 (signalled or spurious), or EPERM —
 *  without waiting — if the caller does not hold mutex (an unowned mutex: if it is not locked).
 *  Every wait below with a robust mutex (sync/locks.h) may also return EOWNERDEAD (mutex taken
 *  again from a dead holder) or ENOTRECOVERABLE (mutex not held). */
int sync_cond_wait(sync_cond_t *cond, sync_mutex_t *mutex);
/** As sync_cond_wait for at most timeout_ns. @return 0, ETIMEDOUT, or EPERM. */
int sync_cond_timedwait(sync_cond_t *cond, sync_mutex_t *mutex, uint64_t timeout_ns);
/** As sync_cond_wait until deadline_ns. @return 0, ETIMEDOUT, or EPERM. */
int sync_cond_wait_until(sync_cond_t *cond, sync_mutex_t *mutex, int64_t deadline_ns);
/** As sync_cond_wait_until, and EINTR when a signal handler ran. */
int sync_cond_wait_interruptible(sync_cond_t *cond, sync_mutex_t *mutex, int64_t deadline_ns);
/** As sync_cond_wait_interruptible with a recursive lock held at any depth: it is released
 *  entirely while waiting and taken again at the same depth. EPERM if the caller does not hold it. */
int sync_cond_wait_recursive_interruptible(sync_cond_t *cond, sync_recursive_lock_t *lock, int64_t deadline_ns);
/** Wakes at least one waiting thread, if any. Holding the mutex is not required, but a signal
 *  sent without it may reach no thread that is about to wait. @return 0. */
int sync_cond_signal(sync_cond_t *cond);
/** Wakes up to `count` waiting threads. @return 0. */
int sync_cond_signal_count(sync_cond_t *cond, uint32_t count);
/** Wakes every waiting thread. @return 0. */
int sync_cond_broadcast(sync_cond_t *cond);
/** Wakes up to `count` waiting threads (UINT32_MAX: all) if the caller holds mutex (an unowned
 *  mutex: if it is locked; a sync_recursive_lock_t may be passed, cast, as its first word is its
 *  mutex). @return 0, or EPERM — waking nobody — if it does not. */
int sync_cond_signal_checked(sync_cond_t *cond, sync_mutex_t *mutex, uint32_t count);

/* ---- Condition (12 bytes): a mutex and a condition variable in one, as Foundation's NSCondition.
 * Lock it like a mutex (owner-checked), wait on it like a condition variable:
 *
 *     sync_condition_lock(&c);
 *     while (timeToDoWork <= 0) sync_condition_wait(&c);
 *     timeToDoWork--;
 *     sync_condition_unlock(&c);
 */
typedef struct { sync_mutex_t _mutex; sync_cond_t _cond; } sync_condition_t;
#define SYNC_CONDITION_INIT { SYNC_MUTEX_INIT, SYNC_COND_INIT }

/** Initializes; flags 0 or SYNC_PROCESS_SHARED. @return 0 or EINVAL. */
int sync_condition_init(sync_condition_t *condition, int flags);
/** Locks. @return 0, or EDEADLK if the caller holds it. */
int sync_condition_lock(sync_condition_t *condition);
/** Locks if free. @return 0 or EBUSY. */
int sync_condition_trylock(sync_condition_t *condition);
/** Locks, unless deadline_ns passes (ETIMEDOUT) or a signal handler runs (EINTR). */
int sync_condition_lock_interruptible(sync_condition_t *condition, int64_t deadline_ns);
/** Unlocks. @return 0, or EPERM if the caller does not hold it. */
int sync_condition_unlock(sync_condition_t *condition);
/** Waits (the caller holds the lock; see sync_cond_wait). @return 0 or EPERM. */
int sync_condition_wait(sync_condition_t *condition);
/** Waits at most timeout_ns. @return 0 (signalled or spurious), ETIMEDOUT, or EPERM. */
int sync_condition_timedwait(sync_condition_t *condition, uint64_t timeout_ns);
/** Waits until deadline_ns. @return 0, ETIMEDOUT, or EPERM. */
int sync_condition_wait_until(sync_condition_t *condition, int64_t deadline_ns);
/** Wakes at least one waiting thread, if any. @return 0. */
int sync_condition_signal(sync_condition_t *condition);
/** Wakes every waiting thread. @return 0. */
int sync_condition_broadcast(sync_condition_t *condition);

/* ---- Condition lock (24 bytes, 8-byte aligned): Foundation's NSConditionLock.
 * An owner-checked lock carrying an integer condition: lock_when waits until the condition has
 * a value, unlock_with sets it and wakes the threads waiting for values. The seed's consumer:
 *
 *     sync_condition_lock_lock_when(&lock, HAS_DATA);
 *     ... take the data ...
 *     sync_condition_lock_unlock_with(&lock, empty ? NO_DATA : HAS_DATA);
 */
typedef struct { uint32_t _mutex, _cond[2], _reserved; int64_t _condition; } sync_condition_lock_t;
#define SYNC_CONDITION_LOCK_INIT(condition) { 0u, { 0u, 0u }, 0u, (condition) }

/** Initializes with a condition value; flags 0 or SYNC_PROCESS_SHARED. @return 0 or EINVAL. */
int sync_condition_lock_init(sync_condition_lock_t *lock, int64_t condition, int flags);
/** Locks, whatever the condition. @return 0, or EDEADLK if the caller holds it. */
int sync_condition_lock_lock(sync_condition_lock_t *lock);
/** Locks unless deadline_ns passes first. @return 0, ETIMEDOUT, or EDEADLK. */
int sync_condition_lock_lock_until(sync_condition_lock_t *lock, int64_t deadline_ns);
/** Locks if free, never waiting. @return 0 or EBUSY. */
int sync_condition_lock_trylock(sync_condition_lock_t *lock);
/** Locks once the condition equals `condition`. @return 0 (holding it), or EDEADLK. */
int sync_condition_lock_lock_when(sync_condition_lock_t *lock, int64_t condition);
/** As lock_when for at most timeout_ns. @return 0, ETIMEDOUT (not holding it), or EDEADLK. */
int sync_condition_lock_timedlock_when(sync_condition_lock_t *lock, int64_t condition, uint64_t timeout_ns);
/** As lock_when until deadline_ns. @return 0, ETIMEDOUT, or EDEADLK. */
int sync_condition_lock_lock_when_until(sync_condition_lock_t *lock, int64_t condition, int64_t deadline_ns);
/** As lock_when_until (any condition if `any`), and EINTR when a signal handler ran. */
int sync_condition_lock_lock_when_interruptible(sync_condition_lock_t *lock, bool any, int64_t condition, int64_t deadline_ns);
/** Locks if free and the condition equals `condition`, never waiting. @return 0 or EBUSY. */
int sync_condition_lock_trylock_when(sync_condition_lock_t *lock, int64_t condition);
/** Unlocks, keeping the condition. @return 0, or EPERM (nothing changes) if the caller does not hold it. */
int sync_condition_lock_unlock(sync_condition_lock_t *lock);
/** Sets the condition and unlocks. @return 0, or EPERM (nothing changes) if the caller does not hold it. */
int sync_condition_lock_unlock_with(sync_condition_lock_t *lock, int64_t condition);
/** The current condition: a snapshot (0 for NULL). */
int64_t sync_condition_lock_condition(sync_condition_lock_t *lock);

/* ---- Counting semaphore (16 bytes) ----------------------------------------------------------
 * A count of units; wait takes one (sleeping while there are none), signal adds. Optionally
 * bounded: a signal that would raise the count above the bound fails with EOVERFLOW, which
 * catches a release without a matching acquire. Waiters are not served in FIFO order.
 */
typedef struct { uint32_t _count, _waiters, _limit, _bounded; } sync_semaphore_t;
/** An unbounded, process-private semaphore holding `value` units. */
#define SYNC_SEMAPHORE_INIT(value) { (value), 0u, 0u, 0u }
/** A process-private semaphore holding `value` units, never more than `limit` (value <= limit). */
#define SYNC_BOUNDED_SEMAPHORE_INIT(value, limit) { (value), 0u, (limit), 1u }
/** Flag for sync_semaphore_init: the count may never exceed `limit`. */
#define SYNC_SEMAPHORE_BOUNDED 4

/** Initializes with `value` units; flags: SYNC_PROCESS_SHARED, SYNC_SEMAPHORE_BOUNDED (then the
 *  count never exceeds `limit`; otherwise `limit` is ignored). @return 0, or EINVAL (bounded
 *  with value > limit, unknown flag). */
int sync_semaphore_init(sync_semaphore_t *sem, uint32_t value, uint32_t limit, int flags);
/** Takes a unit, waiting while there is none. @return 0. */
int sync_semaphore_wait(sync_semaphore_t *sem);
/** Takes a unit if there is one, never waiting. @return 0, or EAGAIN if there was none. */
int sync_semaphore_trywait(sync_semaphore_t *sem);
/** As sync_semaphore_wait for at most timeout_ns. @return 0 or ETIMEDOUT. */
int sync_semaphore_timedwait(sync_semaphore_t *sem, uint64_t timeout_ns);
/** As sync_semaphore_wait until deadline_ns. @return 0 or ETIMEDOUT. */
int sync_semaphore_wait_until(sync_semaphore_t *sem, int64_t deadline_ns);
/** As sync_semaphore_wait_until, and EINTR when a signal handler ran. */
int sync_semaphore_wait_interruptible(sync_semaphore_t *sem, int64_t deadline_ns);
/** Adds `count` (>= 1) units and wakes as many waiters. @return 0, EINVAL (count 0), or
 *  EOVERFLOW — adding nothing — if the count would pass the bound or UINT32_MAX. */
int sync_semaphore_signal(sync_semaphore_t *sem, uint32_t count);
/** The current count: a snapshot (0 for NULL). */
uint32_t sync_semaphore_value(sync_semaphore_t *sem);

/* ---- Event (8 bytes) ------------------------------------------------------------------------
 * A flag threads can wait for: set wakes every waiter and lets later waits through until clear.
 */
typedef struct { uint32_t _state, _waiters; } sync_event_t;
/** A clear, process-private event. */
#define SYNC_EVENT_INIT { 0u, 0u }

/** Initializes, set or clear; flags 0 or SYNC_PROCESS_SHARED. @return 0 or EINVAL. */
int sync_event_init(sync_event_t *event, bool set, int flags);
/** Sets the flag and wakes every waiter. @return 0. */
int sync_event_set(sync_event_t *event);
/** Clears the flag. @return 0. */
int sync_event_clear(sync_event_t *event);
/** Whether the flag is set (false for NULL). */
bool sync_event_is_set(sync_event_t *event);
/** Waits until the flag is set. @return 0. */
int sync_event_wait(sync_event_t *event);
/** Waits at most timeout_ns for the flag. @return 0 (set) or ETIMEDOUT. */
int sync_event_timedwait(sync_event_t *event, uint64_t timeout_ns);
/** Waits until deadline_ns for the flag. @return 0 (set) or ETIMEDOUT. */
int sync_event_wait_until(sync_event_t *event, int64_t deadline_ns);
/** As sync_event_wait_until, and EINTR when a signal handler ran. */
int sync_event_wait_interruptible(sync_event_t *event, int64_t deadline_ns);

/* ---- Barrier (32 bytes) -----------------------------------------------------------------------
 * A cyclic barrier with the semantics of Python's threading.Barrier: `parties` threads meet in
 * sync_barrier_wait and leave together; the barrier then refills for the next round. A timeout
 * breaks it (every waiter fails); abort breaks it on purpose; reset makes it usable again (the
 * threads waiting at that moment fail). With SYNC_BARRIER_ACTION, the last thread to arrive
 * (index parties - 1) runs the caller's action and must then call sync_barrier_action_done: the
 * others stay waiting until it does.
 */
typedef struct { uint32_t _lock, _cond[2], _parties, _count, _state, _flags, _reserved; } sync_barrier_t;
/** A process-private barrier for `parties` (>= 1) threads, with no action. */
#define SYNC_BARRIER_INIT(parties) { 0u, { 0u, 0u }, (parties), 0u, 0u, 0u, 0u }
/** Flag for sync_barrier_init: the last arriver runs an action (see above). */
#define SYNC_BARRIER_ACTION 2

/** Initializes for `parties` threads; flags: SYNC_PROCESS_SHARED, SYNC_BARRIER_ACTION.
 *  @return 0, or EINVAL (parties 0, unknown flag). */
int sync_barrier_init(sync_barrier_t *barrier, uint32_t parties, int flags);
/** Waits for the other parties. @return 0, storing the arrival index (0 .. parties - 1, 0 =
 *  first) in *index if not NULL; or ECANCELED if the barrier is broken or reset meanwhile. */
int sync_barrier_wait(sync_barrier_t *barrier, uint32_t *index);
/** As sync_barrier_wait for at most timeout_ns; on timeout the barrier breaks and ETIMEDOUT is
 *  returned (the other waiters get ECANCELED). */
int sync_barrier_timedwait(sync_barrier_t *barrier, uint64_t timeout_ns, uint32_t *index);
/** As sync_barrier_timedwait with an absolute deadline. */
int sync_barrier_wait_until(sync_barrier_t *barrier, int64_t deadline_ns, uint32_t *index);
/** As sync_barrier_wait_until, and EINTR when a signal handler interrupted the sleep (the caller
 *  has then left the barrier, which stays intact). Not sliced: a signal that arrives while the
 *  caller is not asleep is seen at its next wait. */
int sync_barrier_wait_interruptible(sync_barrier_t *barrier, int64_t deadline_ns, uint32_t *index);
/** Called by the thread that ran the action: releases the others (succeeded) or breaks the
 *  barrier (they get ECANCELED). @return 0. */
int sync_barrier_action_done(sync_barrier_t *barrier, bool succeeded);
/** Returns the barrier to its initial state; threads waiting in it get ECANCELED. @return 0. */
int sync_barrier_reset(sync_barrier_t *barrier);
/** Breaks the barrier: waits fail with ECANCELED until sync_barrier_reset. @return 0. */
int sync_barrier_abort(sync_barrier_t *barrier);
/** Reads the number of parties, the number of threads waiting, and whether it is broken (any
 *  output pointer may be NULL). @return 0. */
int sync_barrier_status(sync_barrier_t *barrier, uint32_t *parties, uint32_t *waiting, bool *broken);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_CONDITIONS_H */
