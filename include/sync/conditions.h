/*
 * sync/conditions.h — condition variables, conditions (NSCondition), condition locks
 * (NSConditionLock), semaphores, events and barriers (included by <sync.h>).
 *
 * Each lives in memory the caller owns, needs no destroy, and is ready when set with its static
 * initializer or init function. Pass SYNC_PROCESS_SHARED to the init function to place it in
 * memory shared between processes (mmap MAP_SHARED, shm_open); a mutex used with a shared
 * condition variable must be shared too. Waiters of a shared semaphore, event, condition lock
 * or condition's lock sleep at most 200 ms at a time and re-check (sync/locks.h): a process
 * killed after its wakeup, before it took what it waited for, delays the others by at most
 * that slice.
 *
 * Attaching to shared memory, as for the locks (sync/locks.h): one process initializes the
 * object, the others use it as it is. An init with SYNC_PROCESS_SHARED returns EBUSY, changing
 * nothing, if the object there is in use: threads wait on it, or hold its lock (a condition's or
 * condition lock's mutex, a barrier's inner lock, or threads inside a barrier's wait). A
 * semaphore's count and an event's flag are not "in use": an init resets them, so an attaching
 * process must not call init at all. Zero-filled memory is never in use.
 *
 * Waiting comes in the forms of sync/locks.h:
 *   - `*_wait`: as long as it takes;
 *   - `*_wait_timed(x, timeout_ns)`: a relative timeout in nanoseconds;
 *   - `*_wait_until(x, deadline_ns)`: an absolute CLOCK_MONOTONIC deadline (sync_monotonic_ns;
 *     sync.h's time model: < 0: none; one at or before now returns ETIMEDOUT at once unless the
 *     wait is already satisfied);
 *   - `*_interruptible(x, deadline_ns)`: as `_until`, and also returns EINTR when a signal
 *     handler ran during the wait; called from the process's main thread, also at least every
 *     50 ms (a signal that arrives while the waiter is not asleep in the kernel, or that the
 *     kernel hands to another thread, interrupts nothing), so that a caller such as an
 *     interpreter can act on pending signals and call again. All other forms never return EINTR.
 * The clock is monotonic: changing the wall clock does not shorten or stretch a wait.
 * Return codes are 0 or an errno code; a NULL or misaligned object pointer gives EINVAL, and so
 * does an object whose memory holds words it can never hold (corrupt memory, e.g. a waiter
 * count of 2^30 or more: no system runs that many threads), without changing it.
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
 * POSIX-style, used with a sync_mutex_t the caller holds:
 *
 *     sync_mutex_lock(&m);
 *     while (!ready) sync_cond_wait(&c, &m);
 *     ... use the state ...
 *     sync_mutex_unlock(&m);
 *
 * Process-private (the default), a wait returns 0 only when a signal chose it: there are no
 * spurious wakeups, waiters are served oldest first, a signal for n wakes exactly min(n, waiting)
 * threads, and a thread that starts waiting after a signal is not woken by it. (Still re-check
 * the predicate: another thread may take the mutex first and change the state.) Each waiter
 * waits in its own memory (the stack, or a sync_cond_waiter_t), queued in a table the library
 * keeps per process; a fork()ed child starts with no waiters.
 * With SYNC_PROCESS_SHARED the queue cannot live in the shared memory: waiters sleep on a
 * sequence number, and a wait may also return 0 for a signal meant for another waiter that came
 * just before it slept (a spurious wakeup, as POSIX allows); loop on the predicate. A timeout or
 * an interruption never returns 0 in either mode. A signal with no thread waiting costs one load.
 */
typedef struct { uint32_t _sequence, _waiters; } sync_cond_t;
#define SYNC_COND_INIT { 0u, 0u }

/** Initializes; flags 0 or SYNC_PROCESS_SHARED. Forgets any waiter (use it on a variable nobody
 *  waits on). @return 0, EINVAL, or EBUSY (SHARED: threads wait on it; nothing changes). */
int sync_cond_init(sync_cond_t *cond, int flags);
/** Releases mutex (which the caller must hold), waits for a signal, takes mutex again (also on
 *  ETIMEDOUT and EINTR; not on EPERM, EINVAL or ENOTRECOVERABLE). @return 0 (signalled); EPERM
 *  without waiting if the caller does not hold mutex (an unowned mutex: if it is not locked);
 *  EINVAL without waiting (NULL, misaligned or corrupt). Every wait below with a robust mutex or
 *  recursive lock (sync/locks.h), the resumable ones included, may also return EOWNERDEAD (taken
 *  again from a dead holder; a recursive lock at its former depth) or ENOTRECOVERABLE (not held). */
int sync_cond_wait(sync_cond_t *cond, sync_mutex_t *mutex);
/** As sync_cond_wait for at most timeout_ns. @return 0, ETIMEDOUT, EPERM or EINVAL. A signal
 *  that races the timeout is reported (0), never lost. */
int sync_cond_wait_timed(sync_cond_t *cond, sync_mutex_t *mutex, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_cond_wait_timed") int sync_cond_timedwait(sync_cond_t *cond, sync_mutex_t *mutex, uint64_t timeout_ns);
/** As sync_cond_wait until deadline_ns. @return 0, ETIMEDOUT, EPERM or EINVAL. */
int sync_cond_wait_until(sync_cond_t *cond, sync_mutex_t *mutex, int64_t deadline_ns);
/** As sync_cond_wait_until, and EINTR (see the `_interruptible` forms above): the caller holds
 *  the mutex again and no longer waits, so a signal sent before its next call does not reach
 *  it; treat EINTR as a wakeup and re-check the predicate. 0 still means signalled, never a
 *  slice's end. @return 0, ETIMEDOUT, EINTR, EPERM or EINVAL. For a wait that keeps its place
 *  across returns, use sync_cond_wait_resumable. */
int sync_cond_wait_interruptible(sync_cond_t *cond, sync_mutex_t *mutex, int64_t deadline_ns);
/** As sync_cond_wait_interruptible with a recursive lock held at any depth: it is released
 *  entirely while waiting and taken again at the same depth. @return 0, ETIMEDOUT, EINTR, EPERM
 *  (the caller does not hold it) or EINVAL. */
int sync_cond_wait_recursive_interruptible(sync_cond_t *cond, sync_recursive_lock_t *lock, int64_t deadline_ns);
/** Wakes the oldest waiting thread, if any. Holding the mutex is not required, but a signal
 *  sent without it may reach no thread that is about to wait. @return 0 or EINVAL. */
int sync_cond_signal(sync_cond_t *cond);
/** Wakes up to `count` waiting threads (process-private: exactly min(count, waiting), oldest
 *  first). @return 0 or EINVAL. */
int sync_cond_signal_count(sync_cond_t *cond, uint32_t count);
/** Wakes every waiting thread. @return 0 or EINVAL. */
int sync_cond_broadcast(sync_cond_t *cond);
/** Wakes up to `count` waiting threads (UINT32_MAX: all) if the caller holds mutex (an unowned
 *  mutex: if it is locked; a sync_recursive_lock_t may be passed, cast, as its first word is its
 *  mutex). @return 0, EPERM (waking nobody) if it does not, or EINVAL. */
int sync_cond_signal_checked(sync_cond_t *cond, sync_mutex_t *mutex, uint32_t count);

/* A waiter: one thread's place among a condition variable's waiters, in memory the caller
 * provides for a wait that spans several calls, as an interpreter's does (it must return to run
 * signal handlers, and must not lose a signal sent meanwhile). 40 bytes, 8-byte aligned;
 * zeroed (SYNC_COND_WAITER_INIT) it is idle, and it is idle again after each completed wait.
 * It must stay in place, unmoved, while it is not idle. */
typedef struct { uint64_t _private[5]; } sync_cond_waiter_t;
#define SYNC_COND_WAITER_INIT { { 0u, 0u, 0u, 0u, 0u } }

/** One call per slice of a wait with a mutex that keeps its place across returns. With an idle
 *  waiter: checks that the caller holds mutex, starts waiting and releases mutex. Then sleeps
 *  until signalled, deadline_ns, or (in the process's main thread) the end of a 50 ms slice.
 *  @return EINTR at a slice's end or when a signal handler ran: the caller still waits, with
 *  mutex released; it calls again with the same waiter to go on (a signal sent meanwhile is
 *  kept for it), or with a deadline in the past (0) to give up at once. Otherwise the wait is
 *  over, mutex is held again and the waiter idle: 0 (signalled) or ETIMEDOUT. EPERM (the caller
 *  does not hold mutex) and EINVAL (NULL, misaligned, corrupt, or a waiter of another variable)
 *  start no wait and leave mutex as it was. */
int sync_cond_wait_resumable(sync_cond_t *cond, sync_mutex_t *mutex, sync_cond_waiter_t *waiter, int64_t deadline_ns);
/** As sync_cond_wait_resumable with a recursive lock held at any depth (released entirely while
 *  waiting, taken again at the same depth; the waiter keeps the depth meanwhile). */
int sync_cond_wait_recursive_resumable(sync_cond_t *cond, sync_recursive_lock_t *lock, sync_cond_waiter_t *waiter,
                                       int64_t deadline_ns);
/** A wait in three steps, for callers that release and retake their lock themselves (any kind of
 *  lock). begin: the caller holds its lock; starts waiting (so that a signal sent after the
 *  caller releases the lock reaches it). Then the caller releases its lock.
 *  @return 0, or EINVAL (NULL, misaligned, corrupt, or the waiter is not idle). */
int sync_cond_wait_begin(sync_cond_t *cond, sync_cond_waiter_t *waiter);
/** sleep: sleeps until signalled, deadline_ns, or (interruptible, see above) EINTR. The waiter
 *  keeps its place whatever the result; call it as often as needed.
 *  @return 0 (signalled), ETIMEDOUT, EINTR, or EINVAL (the waiter is idle). */
int sync_cond_wait_sleep(sync_cond_waiter_t *waiter, int64_t deadline_ns);
/** end: stops waiting (the waiter is idle afterwards); then the caller takes its lock again.
 *  @return 0 if a signal chose this waiter (also one that raced the last sleep's timeout: it is
 *  not lost), ETIMEDOUT if none did, EINVAL if the waiter was idle. */
int sync_cond_wait_end(sync_cond_waiter_t *waiter);

/* ---- Condition (12 bytes): a mutex and a condition variable in one, as Foundation's NSCondition.
 * Lock it like a mutex (owner-checked), wait on it like a condition variable:
 *
 *     sync_condition_enter(&c);
 *     while (timeToDoWork <= 0) sync_condition_wait(&c);
 *     timeToDoWork--;
 *     sync_condition_exit(&c);
 */
typedef struct { sync_mutex_t _mutex; sync_cond_t _cond; } sync_condition_t;
#define SYNC_CONDITION_INIT { SYNC_MUTEX_INIT, SYNC_COND_INIT }

/** Initializes; flags 0 or SYNC_PROCESS_SHARED. @return 0, EINVAL, or EBUSY (SHARED: its mutex
 *  is locked or has waiters, or threads wait on it; nothing changes). */
int sync_condition_init(sync_condition_t *condition, int flags);
/** Locks. @return 0, EDEADLK if the caller holds it, or EINVAL. */
int sync_condition_enter(sync_condition_t *condition);
SYNC_DEPRECATED("sync_condition_enter") int sync_condition_lock(sync_condition_t *condition);
/** Locks if free. @return 0, EBUSY or EINVAL. */
int sync_condition_try_enter(sync_condition_t *condition);
SYNC_DEPRECATED("sync_condition_try_enter") int sync_condition_trylock(sync_condition_t *condition);
/** Locks, unless deadline_ns passes (ETIMEDOUT) or a signal handler runs (EINTR). @return 0,
 *  ETIMEDOUT, EINTR, EDEADLK or EINVAL. */
int sync_condition_enter_interruptible(sync_condition_t *condition, int64_t deadline_ns);
SYNC_DEPRECATED("sync_condition_enter_interruptible") int sync_condition_lock_interruptible(sync_condition_t *condition, int64_t deadline_ns);
/** Unlocks. @return 0, EPERM if the caller does not hold it, or EINVAL. */
int sync_condition_exit(sync_condition_t *condition);
SYNC_DEPRECATED("sync_condition_exit") int sync_condition_unlock(sync_condition_t *condition);
/** Waits (the caller holds the lock; see sync_cond_wait: process-private, no spurious wakeups).
 *  @return 0 (signalled), EPERM or EINVAL. */
int sync_condition_wait(sync_condition_t *condition);
/** Waits at most timeout_ns. @return 0 (signalled), ETIMEDOUT, EPERM or EINVAL. */
int sync_condition_wait_timed(sync_condition_t *condition, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_condition_wait_timed") int sync_condition_timedwait(sync_condition_t *condition, uint64_t timeout_ns);
/** Waits until deadline_ns. @return 0, ETIMEDOUT, EPERM or EINVAL. */
int sync_condition_wait_until(sync_condition_t *condition, int64_t deadline_ns);
/** Wakes the oldest waiting thread, if any. @return 0 or EINVAL. */
int sync_condition_signal(sync_condition_t *condition);
/** Wakes every waiting thread. @return 0 or EINVAL. */
int sync_condition_broadcast(sync_condition_t *condition);

/* ---- Condition lock (24 bytes, 8-byte aligned): Foundation's NSConditionLock.
 * An owner-checked lock carrying an integer condition: lock_when waits until the condition has
 * a value, unlock_with sets it and wakes the threads waiting for values. A consumer:
 *
 *     sync_condition_lock_lock_when(&lock, HAS_DATA);
 *     ... take the data ...
 *     sync_condition_lock_unlock_with(&lock, empty ? NO_DATA : HAS_DATA);
 */
typedef struct { uint32_t _mutex, _cond[2], _reserved; int64_t _condition; } sync_condition_lock_t;
#define SYNC_CONDITION_LOCK_INIT(condition) { 0u, { 0u, 0u }, 0u, (condition) }

/** Initializes with a condition value; flags 0 or SYNC_PROCESS_SHARED. @return 0, EINVAL, or
 *  EBUSY (SHARED: the lock is held or threads wait for it; nothing changes). */
int sync_condition_lock_init(sync_condition_lock_t *lock, int64_t condition, int flags);
/** Locks, whatever the condition. @return 0, EDEADLK if the caller holds it, or EINVAL. */
int sync_condition_lock_lock(sync_condition_lock_t *lock);
/** Locks unless deadline_ns passes first. @return 0, ETIMEDOUT, EDEADLK or EINVAL. */
int sync_condition_lock_lock_until(sync_condition_lock_t *lock, int64_t deadline_ns);
/** Locks if free, never waiting. @return 0, EBUSY or EINVAL. */
int sync_condition_lock_try_lock(sync_condition_lock_t *lock);
SYNC_DEPRECATED("sync_condition_lock_try_lock") int sync_condition_lock_trylock(sync_condition_lock_t *lock);
/** As sync_condition_lock_try_lock, as the first attempt of a blocking lock (see
 *  sync/locks.h's sync_mutex_try_lock_first). */
int sync_condition_lock_try_lock_first(sync_condition_lock_t *lock);
SYNC_DEPRECATED("sync_condition_lock_try_lock_first") int sync_condition_lock_trylock_first(sync_condition_lock_t *lock);
/** Locks once the condition equals `condition`. @return 0 (holding it), EDEADLK or EINVAL. */
int sync_condition_lock_lock_when(sync_condition_lock_t *lock, int64_t condition);
/** As lock_when for at most timeout_ns. @return 0, ETIMEDOUT (not holding it), EDEADLK or EINVAL. */
int sync_condition_lock_lock_when_timed(sync_condition_lock_t *lock, int64_t condition, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_condition_lock_lock_when_timed") int sync_condition_lock_timedlock_when(sync_condition_lock_t *lock, int64_t condition, uint64_t timeout_ns);
/** As lock_when until deadline_ns. @return 0, ETIMEDOUT, EDEADLK or EINVAL. */
int sync_condition_lock_lock_when_until(sync_condition_lock_t *lock, int64_t condition, int64_t deadline_ns);
/** As lock_when_until (any condition if `any`), and EINTR (see the `_interruptible` forms;
 *  not holding it). @return 0, ETIMEDOUT, EINTR, EDEADLK or EINVAL. */
int sync_condition_lock_lock_when_interruptible(sync_condition_lock_t *lock, bool any, int64_t condition, int64_t deadline_ns);
/** Locks if free and the condition equals `condition`, never waiting. @return 0, EBUSY or EINVAL. */
int sync_condition_lock_try_lock_when(sync_condition_lock_t *lock, int64_t condition);
SYNC_DEPRECATED("sync_condition_lock_try_lock_when") int sync_condition_lock_trylock_when(sync_condition_lock_t *lock, int64_t condition);
/** As sync_condition_lock_try_lock_when, as the first attempt of a blocking lock_when. */
int sync_condition_lock_try_lock_when_first(sync_condition_lock_t *lock, int64_t condition);
SYNC_DEPRECATED("sync_condition_lock_try_lock_when_first") int sync_condition_lock_trylock_when_first(sync_condition_lock_t *lock, int64_t condition);
/** Unlocks, keeping the condition. @return 0, EPERM (nothing changes) if the caller does not
 *  hold it, or EINVAL. */
int sync_condition_lock_unlock(sync_condition_lock_t *lock);
/** Sets the condition and unlocks. @return 0, EPERM (nothing changes) if the caller does not
 *  hold it, or EINVAL. */
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
 *  count never exceeds `limit`; otherwise `limit` is ignored). @return 0; EINVAL (bounded
 *  with value > limit, unknown flag); EBUSY (SHARED: threads wait on it; nothing changes). */
int sync_semaphore_init(sync_semaphore_t *sem, uint32_t value, uint32_t limit, int flags);
/** Takes a unit, waiting while there is none. @return 0, or EINVAL (also for words no semaphore
 *  holds: _bounded above 1, a count above the bound, a corrupt waiter count; every function
 *  then takes and adds nothing, also when a unit is there to take). */
int sync_semaphore_wait(sync_semaphore_t *sem);
/** Takes a unit if there is one, never waiting. @return 0, EAGAIN if there was none, or EINVAL
 *  (as sync_semaphore_wait: also for words no semaphore holds, taking nothing). */
int sync_semaphore_try_wait(sync_semaphore_t *sem);
SYNC_DEPRECATED("sync_semaphore_try_wait") int sync_semaphore_trywait(sync_semaphore_t *sem);
/** As sync_semaphore_wait for at most timeout_ns. @return 0, ETIMEDOUT or EINVAL. */
int sync_semaphore_wait_timed(sync_semaphore_t *sem, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_semaphore_wait_timed") int sync_semaphore_timedwait(sync_semaphore_t *sem, uint64_t timeout_ns);
/** As sync_semaphore_wait until deadline_ns. @return 0, ETIMEDOUT or EINVAL. */
int sync_semaphore_wait_until(sync_semaphore_t *sem, int64_t deadline_ns);
/** As sync_semaphore_wait_until, and EINTR (see the `_interruptible` forms). @return 0,
 *  ETIMEDOUT, EINTR or EINVAL. */
int sync_semaphore_wait_interruptible(sync_semaphore_t *sem, int64_t deadline_ns);
/** Adds `count` (>= 1) units and wakes as many waiters. @return 0; EOVERFLOW — adding nothing —
 *  if the count would pass the bound or UINT32_MAX; EINVAL — adding nothing — if count is 0 or
 *  the words are impossible (see sync_semaphore_wait). */
int sync_semaphore_signal(sync_semaphore_t *sem, uint32_t count);
/** The current count: a snapshot (0 for NULL). */
uint32_t sync_semaphore_value(sync_semaphore_t *sem);

/* ---- Event (8 bytes) ------------------------------------------------------------------------
 * A flag threads can wait for: set wakes every waiter and lets later waits through until clear.
 * Every thread waiting when set is called returns 0, even if clear follows at once (the state
 * keeps a generation count that set moves; a waiter would have to sleep through 2^31 set/clear
 * pairs to miss one).
 */
typedef struct { uint32_t _state, _waiters; } sync_event_t;
/** A clear, process-private event. */
#define SYNC_EVENT_INIT { 0u, 0u }

/** Initializes, set or clear; flags 0 or SYNC_PROCESS_SHARED. @return 0, EINVAL, or EBUSY
 *  (SHARED: threads wait on it; nothing changes). */
int sync_event_init(sync_event_t *event, bool set, int flags);
/** Sets the flag and wakes every waiter. @return 0, or EINVAL (for a corrupt waiter count the
 *  flag is set, but nobody is woken). */
int sync_event_set(sync_event_t *event);
/** Clears the flag. @return 0 or EINVAL. */
int sync_event_clear(sync_event_t *event);
/** Whether the flag is set (false for NULL). */
bool sync_event_is_set(sync_event_t *event);
/** Waits until the flag is set. @return 0, or EINVAL (also for a corrupt waiter count). */
int sync_event_wait(sync_event_t *event);
/** Waits at most timeout_ns for the flag. @return 0 (set meanwhile), ETIMEDOUT or EINVAL. */
int sync_event_wait_timed(sync_event_t *event, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_event_wait_timed") int sync_event_timedwait(sync_event_t *event, uint64_t timeout_ns);
/** Waits until deadline_ns for the flag. @return 0 (set meanwhile), ETIMEDOUT or EINVAL. */
int sync_event_wait_until(sync_event_t *event, int64_t deadline_ns);
/** As sync_event_wait_until, and EINTR (see the `_interruptible` forms). A set and clear between
 *  two calls is not seen by the next: to wait in several calls, use wait_since_interruptible.
 *  @return 0, ETIMEDOUT, EINTR or EINVAL. */
int sync_event_wait_interruptible(sync_event_t *event, int64_t deadline_ns);
/** The event's state word: bit 0 is the flag (1: set); while it is clear, the whole word is a
 *  mark for sync_event_wait_since_interruptible. 0 for NULL. */
uint32_t sync_event_mark(sync_event_t *event);
/** As sync_event_wait_interruptible, and returns 0 as soon as the event is set or has been set at
 *  any moment since `mark` (from sync_event_mark) was read, even if it is clear again: call it
 *  again with the same mark after EINTR, and no set is missed. @return 0, ETIMEDOUT, EINTR or
 *  EINVAL. */
int sync_event_wait_since_interruptible(sync_event_t *event, uint32_t mark, int64_t deadline_ns);

/* ---- Barrier (32 bytes) -----------------------------------------------------------------------
 * A cyclic barrier with the semantics of Python's threading.Barrier: `parties` threads meet in
 * sync_barrier_wait and leave together; the barrier then refills for the next round. A timeout
 * breaks it (every waiter fails); abort breaks it on purpose; reset makes it usable again (the
 * threads waiting at that moment fail). With SYNC_BARRIER_ACTION, the last thread to arrive
 * (index parties - 1) runs the caller's action and must then call sync_barrier_action_done: the
 * others stay waiting until it does.
 */
typedef struct { uint32_t _lock, _cond[2], _parties, _count, _state, _flags, _action_thread; } sync_barrier_t;
/** A process-private barrier for `parties` (>= 1) threads, with no action. */
#define SYNC_BARRIER_INIT(parties) { 0u, { 0u, 0u }, (parties), 0u, 0u, 0u, 0u }
/** Flag for sync_barrier_init: the last arriver runs an action (see above). */
#define SYNC_BARRIER_ACTION 2

/** Initializes for `parties` threads; flags: SYNC_PROCESS_SHARED, SYNC_BARRIER_ACTION.
 *  @return 0; EINVAL (parties 0, unknown flag); EBUSY (SHARED: threads are inside its wait;
 *  nothing changes). */
int sync_barrier_init(sync_barrier_t *barrier, uint32_t parties, int flags);
/** Waits for the other parties. @return 0, storing the arrival index (0 .. parties - 1, 0 =
 *  first) in *index if not NULL; ECANCELED if the barrier is broken or reset meanwhile; EINVAL
 *  (NULL, misaligned, or words no barrier holds: parties 0, more threads inside than parties,
 *  an unknown state or flag, a lock word above 2). */
int sync_barrier_wait(sync_barrier_t *barrier, uint32_t *index);
/** As sync_barrier_wait for at most timeout_ns; on timeout the barrier breaks and ETIMEDOUT is
 *  returned (the other waiters get ECANCELED). @return 0, ETIMEDOUT, ECANCELED or EINVAL. */
int sync_barrier_wait_timed(sync_barrier_t *barrier, uint64_t timeout_ns, uint32_t *index);
SYNC_DEPRECATED("sync_barrier_wait_timed") int sync_barrier_timedwait(sync_barrier_t *barrier, uint64_t timeout_ns, uint32_t *index);
/** As sync_barrier_wait_timed with an absolute deadline. */
int sync_barrier_wait_until(sync_barrier_t *barrier, int64_t deadline_ns, uint32_t *index);
/** As sync_barrier_wait_until, and EINTR when a signal handler interrupted the sleep (the caller
 *  has then left the barrier, which stays intact). Not sliced: a signal that arrives while the
 *  caller is not asleep is seen at its next wait. @return 0, ETIMEDOUT, ECANCELED, EINTR or EINVAL. */
int sync_barrier_wait_interruptible(sync_barrier_t *barrier, int64_t deadline_ns, uint32_t *index);
/** Called by the thread that ran the action: releases the others (succeeded) or breaks the
 *  barrier (they get ECANCELED); a reset or abort meanwhile stands. @return 0; EPERM, changing
 *  nothing, if the calling thread runs no action of this barrier (none pending, already done,
 *  or another thread's); EINVAL. */
int sync_barrier_action_done(sync_barrier_t *barrier, bool succeeded);
/** Returns the barrier to its initial state; threads waiting in it get ECANCELED. @return 0 or EINVAL. */
int sync_barrier_reset(sync_barrier_t *barrier);
/** Breaks the barrier: waits fail with ECANCELED until sync_barrier_reset. @return 0 or EINVAL. */
int sync_barrier_abort(sync_barrier_t *barrier);
/** Reads the number of parties, the number of threads waiting, and whether it is broken (any
 *  output pointer may be NULL). @return 0 or EINVAL (nothing stored). */
int sync_barrier_status(sync_barrier_t *barrier, uint32_t *parties, uint32_t *waiting, bool *broken);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_CONDITIONS_H */
