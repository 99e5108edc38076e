/*
 * sync/async.h — acquiring a mutex, a read-write lock (and, below, the other primitives) from an
 * event loop (epoll, libuv, libevent) without blocking.
 *
 * sync_mutex_lock_async either takes the mutex at once or returns EINPROGRESS with a pending
 * acquire; no thread of the caller waits. When the acquire completes (granted, timed out, failed)
 * libsync writes 1 to the caller's eventfd (which becomes readable) and/or calls the caller's
 * callback, once. The loop then reads the result with sync_async_result. One libsync thread per
 * process (the waker) serves every pending acquire, whatever their number (docs/async.md).
 *
 * The mutex is any sync_mutex_t or sync_robust_mutex_t (private, SYNC_MUTEX_SHARED,
 * SYNC_MUTEX_ROBUST): threads blocked in sync_mutex_lock, pending acquires of this process and
 * other processes all exclude one another on it.
 *
 * Ownership: a lock taken through this API is held by its handle, not by a thread: release it
 * with sync_async_unlock(mutex, handle), from any thread. sync_mutex_unlock (from any thread)
 * returns EPERM for it. A robust mutex whose holder *process* dies is reported (EOWNERDEAD) to
 * the next locker, as for thread holders.
 *
 * Deadlines as everywhere in sync.h: absolute CLOCK_MONOTONIC nanoseconds; < 0 none; at or
 * before now one try (ETIMEDOUT at once if the mutex is not free).
 *
 * Thread-safety: every function may be called from any thread. The callback runs on libsync's
 * waker thread, or on the thread that releases the mutex through an async release
 * (sync_async_unlock, sync_mutex_unlock_async, a Swift task's unlock; for a
 * SYNC_MUTEX_UNOWNED mutex any release, sync_mutex_unlock too) when the lock passes straight
 * to the pending acquire (a non-robust mutex that this process's acquires wait for: no waker
 * round trip), inside that call. Either way it must not block (a blocked
 * callback delays every pending acquire of the process, or the releasing thread); it may
 * call the functions of this header. After fork() the child has no pending
 * acquires (its handles of the parent's pending acquires stay EINPROGRESS forever: free them
 * with sync_async_cancel, then sync_async_free).
 */
#ifndef SYNC_ASYNC_H
#define SYNC_ASYNC_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a name kept for compatibility (CONTRIBUTING.md, "Names"), as in sync/locks.h. */
#ifndef SYNC_DEPRECATED
#define SYNC_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#endif

/** One acquire: pending, then completed; if granted, the holder of the lock until released. */
typedef struct sync_async sync_async_t;

/**
 * Called once when a pending acquire completes, on the waker thread or the releasing thread
 * (see above), with its result (as
 * sync_async_result returns it) and the `context` given to sync_mutex_lock_async; possibly
 * before sync_mutex_lock_async has returned EINPROGRESS.
 */
typedef void (*sync_async_callback_fn)(sync_async_t *handle, int result, void *context);
typedef sync_async_callback_fn sync_async_callback_t SYNC_DEPRECATED("sync_async_callback_fn");

/**
 * Starts acquiring `mutex` (4-aligned; a robust one 8-aligned) until `deadline_ns`.
 * Completion of a pending acquire: if `event_fd` >= 0, an 8-byte 1 is written to it (an
 * eventfd, or any descriptor such a write suits); if `callback` is not NULL, it is called.
 * Returns, with *handle set to a new handle (free it with sync_async_free):
 * 0           taken at once: the handle holds it;
 * EOWNERDEAD  taken at once from a dead holder (robust): repair, sync_async_consistent;
 * EINPROGRESS pending: completion comes as above; neither is used otherwise.
 * Or, with *handle set to NULL: ETIMEDOUT (not free and `deadline_ns` passed: one try),
 * ENOTRECOVERABLE, EINVAL (NULL or misaligned pointer, a robust mutex of another pid
 * namespace).
 */
int sync_mutex_lock_async(void *mutex, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                          void *context, sync_async_t **handle);

/**
 * The acquire's state: EINPROGRESS while pending; then 0 (granted: the handle holds the lock),
 * EOWNERDEAD (granted from a dead holder), ETIMEDOUT, ECANCELED (sync_async_cancel withdrew
 * it), ENOTRECOVERABLE. EINVAL for NULL.
 */
int sync_async_result(const sync_async_t *handle);

/**
 * Withdraws a pending acquire: 0, and its result is ECANCELED; no completion is delivered (a
 * callback already running may still finish). EALREADY if it had completed (its result stands:
 * if granted, the handle holds the lock); sync_async_result then returns that result at once,
 * even while its delivery (the eventfd write, the callback) is still under way on libsync's
 * thread. EINVAL for NULL.
 */
int sync_async_cancel(sync_async_t *handle);

/**
 * Releases `mutex` (or another lock, such as a read-write lock's either side), which `handle`
 * holds: 0; EPERM if it does not hold it (also for another lock's handle, and for handles that
 * hold nothing: a semaphore's, an event's). A robust lock released with EOWNERDEAD unrepaired
 * becomes not recoverable.
 */
int sync_async_unlock(void *mutex, sync_async_t *handle);

/**
 * Robust: marks the state repaired after EOWNERDEAD: 0; EPERM if `handle` does not hold
 * `mutex`; EINVAL if it is not robust or not marked.
 */
int sync_async_consistent(void *mutex, sync_async_t *handle);

/**
 * Frees a handle: 0; EBUSY (nothing freed) while it is pending (cancel it first) or holds a
 * lock (release it first). NULL: 0.
 */
int sync_async_free(sync_async_t *handle);

/*
 * The other primitives (since 1.6). Each start function has sync_mutex_lock_async's shape: the
 * primitive, an absolute deadline, an eventfd and/or a callback, and *handle; it returns 0 (done
 * at once, *handle set), EINPROGRESS (pending, *handle set, completion as above) or an error
 * (*handle NULL). sync_async_result, sync_async_cancel and sync_async_free serve every handle
 * alike, so one wrapper serves every primitive. A handle that holds a lock (a read-write lock's
 * read or write side) is released with sync_async_unlock(lock, handle); a handle that holds
 * nothing (a semaphore's unit is the caller's, an event's or a barrier's wait holds nothing)
 * returns EPERM there.
 */

/**
 * Starts acquiring a read lock on `rwlock` (a sync_rwlock_t, 4-aligned) until `deadline_ns`:
 * it waits while a writer holds the lock or waits for it (writer preference, as
 * sync_rwlock_rdlock). Returns, with *handle set: 0 (taken at once: the handle holds a read
 * lock), EINPROGRESS (pending); or, with *handle NULL: ETIMEDOUT (one try at a passed
 * deadline), EAGAIN (2^26-1 readers), EINVAL (NULL or misaligned pointer, impossible words).
 * Completed results: 0, ETIMEDOUT, ECANCELED, EAGAIN, EINVAL. Release it with
 * sync_async_unlock(rwlock, handle), not sync_rwlock_rdunlock (which would release a read lock,
 * read locks having no owner, while the handle still counted as holding it).
 */
int sync_rwlock_rdlock_async(void *rwlock, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                             void *context, sync_async_t **handle);

/**
 * Starts acquiring the write lock of `rwlock` until `deadline_ns`. A pending writer is counted
 * and marks the lock as a blocked writer does, so new readers wait behind it. Returns, with
 * *handle set: 0 (taken at once: the handle holds it), EINPROGRESS; or, with *handle NULL:
 * ETIMEDOUT, EINVAL. Completed results: 0, ETIMEDOUT, ECANCELED, EINVAL. The handle, not a
 * thread, holds the write lock: sync_rwlock_wrunlock returns EPERM for it; release it with
 * sync_async_unlock(rwlock, handle), or turn it into a read lock with sync_async_downgrade.
 */
int sync_rwlock_wrlock_async(void *rwlock, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                             void *context, sync_async_t **handle);

/**
 * Turns the write lock `handle` holds on `rwlock` into a read lock held by the same handle, in
 * one step (no writer gets in between; readers parked behind it join unless a writer waits).
 * 0; EPERM if `handle` does not hold `rwlock`'s write lock; EINVAL (NULL, impossible words).
 * Release the read lock with sync_async_unlock(rwlock, handle).
 */
int sync_async_downgrade(void *rwlock, sync_async_t *handle);

/**
 * Starts taking a unit of `semaphore` (a sync_semaphore_t, 4-aligned) until `deadline_ns`.
 * A pending wait is counted as a blocked thread is, so sync_semaphore_signal wakes it; pending
 * waits of this process are granted oldest first. Returns, with *handle set: 0 (a unit taken at
 * once), EINPROGRESS; or, with *handle NULL: ETIMEDOUT (no unit and the deadline passed: one
 * try), EINVAL (NULL or misaligned pointer, impossible words). Completed results: 0 (a unit
 * taken), ETIMEDOUT, ECANCELED, EINVAL. The unit is the caller's, not the handle's: give it
 * back with sync_semaphore_signal; the handle holds nothing (sync_async_unlock: EPERM) and may
 * be freed once completed. A cancel that returns EALREADY after a grant leaves the unit taken.
 */
int sync_semaphore_wait_async(void *semaphore, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                              void *context, sync_async_t **handle);

/**
 * Starts waiting for `event` (a sync_event_t, 4-aligned) to be set, until `deadline_ns`: it
 * completes once sync_event_set is called, even if sync_event_clear follows at once (as
 * sync_event_wait). Returns, with *handle set: 0 (set now), EINPROGRESS; or, with *handle
 * NULL: ETIMEDOUT (clear and the deadline passed: one look), EINVAL (NULL or misaligned
 * pointer, impossible words). Completed results: 0, ETIMEDOUT, ECANCELED. The handle holds
 * nothing (sync_async_unlock: EPERM).
 */
int sync_event_wait_async(void *event, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                          void *context, sync_async_t **handle);

/*
 * Acquires held for an owner (LIBSYNC_1.6_AIO). The holder the core records is the caller's
 * `owner`, a nonzero value that names who holds the lock: a coroutine, a task, a fiber (for
 * instance the address of its object, unique while it lives; binding layers such as Python's
 * asyncio pass their task's). The owner, not a handle, is then checked: an acquire by the owner
 * that holds the mutex returns EDEADLK, a release by another owner EPERM. The handle of a
 * pending acquire only carries its completion: free it once completed, whether or not the
 * lock is held. A mutex created SYNC_MUTEX_UNOWNED records no owner: any caller may release it
 * (sync_mutex_unlock too), and an owner's second acquire waits, as sync_mutex_lock does.
 * Thread-safety: as above, every function may be called from any thread.
 */

/**
 * Takes `mutex` for `owner` if it is free now; never waits, allocates nothing (the fast path
 * to try before sync_mutex_lock_async_owner). 0 taken; EOWNERDEAD taken from a dead holder
 * (robust: repair, sync_mutex_consistent_async); EBUSY held by another; EDEADLK `owner` holds
 * it already; ENOTRECOVERABLE; EINVAL (NULL or misaligned pointer, `owner` 0, a robust mutex
 * of another pid namespace).
 */
int sync_mutex_try_lock_async(void *mutex, uintptr_t owner);

/**
 * As sync_mutex_lock_async, the lock being held for `owner` (nonzero) instead of the handle:
 * returns 0 or EOWNERDEAD (taken at once; *handle is set, free it at once) or EINPROGRESS
 * (pending: completion as for sync_mutex_lock_async; sync_async_cancel withdraws it), or, with
 * *handle NULL, ETIMEDOUT, EDEADLK (`owner` holds it already), ENOTRECOVERABLE, EINVAL (also
 * for `owner` 0). A completed handle may be freed while its owner holds the lock; release
 * that with sync_mutex_unlock_async (sync_async_unlock also accepts the handle).
 */
int sync_mutex_lock_async_owner(void *mutex, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                                void *context, uintptr_t owner, sync_async_t **handle);

/**
 * Releases `mutex`, which `owner` holds: 0; EPERM if `owner` does not hold it (an unowned
 * mutex: if it is not held). A robust lock released with EOWNERDEAD unrepaired becomes not
 * recoverable. EINVAL for a NULL or misaligned pointer.
 */
int sync_mutex_unlock_async(void *mutex, uintptr_t owner);

/**
 * Releases `mutex` as sync_mutex_unlock (`owner` 0: the calling thread's hold, or any caller's
 * of a SYNC_MUTEX_UNOWNED mutex) or sync_mutex_unlock_async (`owner`), for an event loop that
 * runs its own waiting acquires: when the release hands the lock straight to a pending acquire
 * whose eventfd is `event_fd` (the caller's loop), the acquire is completed (its result 0) but
 * nothing is written to `event_fd`, and *granted is set to its handle: the caller delivers the
 * completion itself, with no eventfd round trip (its callback, if any, is still called). Else
 * *granted is NULL, and an acquire of another eventfd is signalled as usual. Which acquire gets
 * the lock is decided as for any release. Returns what the plain release returns; EINVAL for a
 * NULL or misaligned `mutex` or a NULL `granted`. `event_fd` < 0: a plain release.
 */
int sync_mutex_unlock_local(void *mutex, uintptr_t owner, int event_fd, sync_async_t **granted);

/**
 * Robust: marks the state repaired after EOWNERDEAD, for `owner`, which holds `mutex`: 0;
 * EPERM if it does not hold it; EINVAL if the mutex is not robust or not marked.
 */
int sync_mutex_consistent_async(void *mutex, uintptr_t owner);

/*
 * A read-write lock held for an owner (LIBSYNC_1.7_PYAIO), as the mutex above: the write lock
 * is the caller's `owner`'s (nonzero: a task, a coroutine), checked by the functions below; a
 * read lock is nobody's, as a blocking reader's (release it with sync_rwlock_rdunlock, from
 * anywhere). The handle only carries the completion: free it once completed, whatever is held.
 * Thread-safety: as above.
 */

/**
 * As sync_rwlock_rdlock_async, for `owner`: EDEADLK (with *handle NULL) if `owner` holds the
 * write lock; EINVAL also for `owner` 0. The read lock taken (at once or on completion) is
 * released with sync_rwlock_rdunlock.
 */
int sync_rwlock_rdlock_async_owner(void *rwlock, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                                   void *context, uintptr_t owner, sync_async_t **handle);

/**
 * As sync_rwlock_wrlock_async, the write lock being held for `owner`: EDEADLK (with *handle
 * NULL) if `owner` holds it already; EINVAL also for `owner` 0. Release it with
 * sync_rwlock_wrunlock_async (sync_rwlock_wrunlock returns EPERM for it, from any thread), or
 * turn it into a read lock with sync_rwlock_downgrade_async.
 */
int sync_rwlock_wrlock_async_owner(void *rwlock, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                                   void *context, uintptr_t owner, sync_async_t **handle);

/**
 * Releases the write lock of `rwlock` that `owner` holds: 0; EPERM if `owner` does not hold it
 * (a thread's write lock included); EINVAL for a NULL or misaligned pointer, impossible words.
 */
int sync_rwlock_wrunlock_async(void *rwlock, uintptr_t owner);

/**
 * Turns the write lock `owner` holds into a read lock in one step (no writer gets in between;
 * readers parked behind it join unless a writer waits): 0; EPERM if `owner` does not hold the
 * write lock; EINVAL. The read lock is nobody's: sync_rwlock_rdunlock releases it.
 */
int sync_rwlock_downgrade_async(void *rwlock, uintptr_t owner);

/*
 * The condition lock and the barrier (LIBSYNC_1.7_CONDASYNC). Same shape and handles as above.
 */

/**
 * Starts taking `condition_lock` (a sync_condition_lock_t, 4-aligned) whatever its condition,
 * until `deadline_ns`. Returns, with *handle set: 0 (taken at once: the handle holds it),
 * EINPROGRESS; or, with *handle NULL: ETIMEDOUT (held and the deadline passed: one try), EINVAL
 * (NULL or misaligned pointer, impossible words). Completed results: 0, ETIMEDOUT, ECANCELED,
 * EINVAL. The handle, not a thread, holds the lock: sync_condition_lock_unlock returns EPERM
 * for it; release it with sync_async_unlock (condition unchanged) or sync_async_unlock_with.
 * Threads blocked in sync_condition_lock_lock_when and pending acquires (of any process, for a
 * shared lock) take turns on the same lock.
 */
int sync_condition_lock_lock_async(void *condition_lock, int64_t deadline_ns, int event_fd,
                                   sync_async_callback_fn callback, void *context, sync_async_t **handle);

/**
 * As sync_condition_lock_lock_async, once the lock's condition equals `condition` (as
 * sync_condition_lock_lock_when): a pending acquire looks again at every release of the lock,
 * and is granted holding the lock with the condition it waited for. ETIMEDOUT at a passed
 * deadline also when the lock is free but the condition differs.
 */
int sync_condition_lock_lock_when_async(void *condition_lock, int64_t condition, int64_t deadline_ns, int event_fd,
                                        sync_async_callback_fn callback, void *context, sync_async_t **handle);

/**
 * Sets the condition of `condition_lock`, which `handle` holds, and releases it (the waiters,
 * blocked or pending, look again): 0; EPERM if `handle` does not hold it (also a handle of
 * another kind); EINVAL (NULL, impossible words).
 */
int sync_async_unlock_with(void *condition_lock, sync_async_t *handle, int64_t condition);

/**
 * The condition lock held for an `owner` (nonzero), as sync_mutex_lock_async_owner: takes
 * `condition_lock` once its condition equals *condition (NULL: whatever it is). Returns 0
 * (taken at once; *handle set, free it), EINPROGRESS (pending), or, with *handle NULL,
 * ETIMEDOUT, EDEADLK (`owner` holds it already), EINVAL (also for `owner` 0). Release it with
 * sync_condition_lock_unlock_async.
 */
int sync_condition_lock_lock_async_owner(void *condition_lock, const int64_t *condition, int64_t deadline_ns,
                                         int event_fd, sync_async_callback_fn callback, void *context,
                                         uintptr_t owner, sync_async_t **handle);

/**
 * One try for `owner`, never pending: 0 (taken), EBUSY (held, or the condition is not
 * *condition), EDEADLK (`owner` holds it), EINVAL.
 */
int sync_condition_lock_try_lock_async(void *condition_lock, const int64_t *condition, uintptr_t owner);

/**
 * Sets the condition to *condition (NULL: unchanged) and releases `condition_lock`, which
 * `owner` holds: 0; EPERM if `owner` does not hold it; EINVAL.
 */
int sync_condition_lock_unlock_async(void *condition_lock, uintptr_t owner, const int64_t *condition);

/**
 * Starts a wait of `barrier` (a sync_barrier_t, 4-aligned) until `deadline_ns`, as
 * sync_barrier_wait_until: the party is counted in once the previous cycle has drained, and the
 * wait completes when the barrier trips (the last party arrives), breaks or is reset. Threads
 * in sync_barrier_wait and pending waits (of any process, for a shared barrier) meet in it
 * alike. Returns, with *handle set: 0 (this party was the last: the barrier tripped at once),
 * EINPROGRESS; or, with *handle NULL: ETIMEDOUT (a passed deadline and not the last party: the
 * barrier breaks, as a blocking wait's timeout does), ECANCELED (broken), EINVAL. Completed
 * results: 0, ETIMEDOUT (the deadline passed: the barrier broke), ECANCELED (broken or reset, or
 * the handle was cancelled), EINVAL. Read the arrival index with sync_async_index.
 *
 * Giving up: a wait cancelled (sync_async_cancel) or timed out after its party was counted in
 * breaks the barrier (the other parties get ECANCELED), as Python's threading.Barrier does on
 * a timeout: a party that left cannot be waited for. If the barrier had tripped first, the trip
 * stands: sync_async_cancel then returns 0 with the result 0 and the index set (the party
 * passed). A wait cancelled before its party was counted in (the previous cycle still
 * draining, or its action running) changes nothing. With SYNC_BARRIER_ACTION, the handle that
 * gets index parties - 1 must run the action and call sync_barrier_action_done, from any thread
 * of the process (the action is the process's, not a thread's). The handle holds nothing.
 */
int sync_barrier_wait_async(void *barrier, int64_t deadline_ns, int event_fd, sync_async_callback_fn callback,
                            void *context, sync_async_t **handle);

/**
 * The arrival index of a completed barrier wait (0 .. parties - 1): 0, storing it in *index;
 * EPERM if `handle` is not a barrier wait's, or its party did not pass (pending, broken, timed
 * out, cancelled); EINVAL (NULL).
 */
int sync_async_index(sync_async_t *handle, uint32_t *index);

/*
 * The distributed lock (LIBSYNC_1.7_DISTASYNC): a sync_distributed_lock_t (sync/distributed_lock.h)
 * acquired from an event loop. The wait runs in libsync (a Swift task suspended between tries:
 * no thread of the caller's, and no thread per pending acquire): it tries as
 * sync_distributed_lock_lock_until does (stale holders on this host taken over, PostgreSQL
 * queued in the server, the object's other holder waited for) and is woken, instead of polling,
 * wherever something tells this process that the lock may be free: a hold through the same
 * object ending in this process (any backend), and, on the file system, any release of the lock
 * on this host (inotify on the lock's parent directory). A holder on another NFS client, one
 * whose process died, and a server lock held by another process are seen by a try after at most
 * `poll_ns` (Redis: 1 ms doubling up to poll_ns, as the blocking wait; docs/distributed_lock.md).
 *
 * Holder: the handle (sync_distributed_lock_lock_async), or the caller's `owner`
 * (..._async_owner), never a thread: release with sync_async_unlock(lock, handle) or
 * sync_distributed_lock_unlock_async(lock, owner); the handle's own owner value is
 * (uintptr_t)handle, for the *_async functions below. sync_distributed_lock_unlock from a thread
 * returns EPERM for such a hold (unless the object is SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED, whose
 * holder is the process: any thread and any owner of it count as the holder). An owner that
 * holds the lock acquiring again: EDEADLK (RECURSIVE: counted). Loss notification (the event
 * handler, sync_distributed_lock_lost) works as for a thread's hold; an unlock after a loss
 * returns ESTALE or EBUSY.
 *
 * Cancel: sync_async_cancel withdraws a pending acquire (0, result ECANCELED, no completion); a
 * try under way at that moment may still take the lock, and then releases it at once (a
 * PostgreSQL request queued in the server is withdrawn): for that short while another try of
 * this process may find the lock busy. The object must outlive its pending acquires (cancel
 * them before sync_distributed_lock_destroy; a handle keeps the object's memory alive, not its
 * C pointer's validity for other calls). sync_distributed_lock_error_message is the waiting
 * task's, not the caller's: a completed acquire's error has its code only.
 */
struct sync_distributed_lock;

/**
 * Starts acquiring `lock` until `deadline_ns` (CLOCK_MONOTONIC; < 0 none; passed: one try),
 * polling what nothing wakes for every `poll_ns` (> 0) at most. Returns, with *handle set:
 * 0 (taken at once: the handle holds it; a file-system lock's first try is made on the calling
 * thread, a few system calls; a server's tries all run in libsync, so its acquire is always
 * EINPROGRESS first) or EINPROGRESS (pending: completion through `event_fd` and/or `callback`
 * as for sync_mutex_lock_async, the callback on a thread of libsync's task pool). Or, with
 * *handle NULL: ETIMEDOUT (held and the deadline passed), EDEADLK (the holder holds it through
 * this non-recursive object, or, with no deadline, through another object of this process),
 * ESTALE (the holder's hold was lost: this call ended it), EINVAL (NULL, poll_ns <= 0), and
 * sync_distributed_lock_lock's other errors. Completed results: 0, ETIMEDOUT, ECANCELED, and
 * those errors.
 */
int sync_distributed_lock_lock_async(struct sync_distributed_lock *lock, int64_t deadline_ns, int64_t poll_ns,
                                     int event_fd, sync_async_callback_fn callback, void *context,
                                     sync_async_t **handle);

/**
 * As sync_distributed_lock_lock_async, the lock being held for `owner` (nonzero: a coroutine's,
 * a task's identity; Python's asyncio passes its task's) instead of the handle: free the handle
 * once completed, whether or not the lock is held (a handle taken at once, 0, too); release with
 * sync_distributed_lock_unlock_async(lock, owner). EINVAL for `owner` 0.
 */
int sync_distributed_lock_lock_async_owner(struct sync_distributed_lock *lock, int64_t deadline_ns,
                                           int64_t poll_ns, int event_fd, sync_async_callback_fn callback,
                                           void *context, uintptr_t owner, sync_async_t **handle);

/** sync_distributed_lock_unlock for `owner`'s hold: 0, EPERM (`owner` does not hold it), ESTALE,
 *  EBUSY (the hold was lost), another errno (still held); EINVAL (NULL, owner 0). */
int sync_distributed_lock_unlock_async(struct sync_distributed_lock *lock, uintptr_t owner);

/** sync_distributed_lock_unlock_all for `owner`'s hold (all its acquisitions), codes as above. */
int sync_distributed_lock_unlock_all_async(struct sync_distributed_lock *lock, uintptr_t owner);

/** How many of `owner`'s acquisitions through `lock` are not released (0: none; NULL, owner 0). */
int sync_distributed_lock_count_async(const struct sync_distributed_lock *lock, uintptr_t owner);

/** Whether `owner` holds `lock` now (checked in the store, as sync_distributed_lock_is_held). */
bool sync_distributed_lock_is_held_async(const struct sync_distributed_lock *lock, uintptr_t owner);

/** The fencing token of `owner`'s hold into *token: 0, EPERM (not held by it), EINVAL. */
int sync_distributed_lock_token_async(const struct sync_distributed_lock *lock, uintptr_t owner, uint64_t *token);

/*
 * Condition variables (LIBSYNC_1.7_CONDVARASYNC): a wait by the holder of a mutex taken through
 * this API (the handle of sync_mutex_lock_async, or an owner of sync_mutex_lock_async_owner),
 * as sync_cond_wait does for a thread: it enters the variable's queue, releases the mutex, waits
 * for a signal without a thread, then takes the mutex again for the same holder; it completes
 * (eventfd, callback) only once the holder holds the mutex again, whatever ended the wait.
 * sync_cond_signal, sync_cond_signal_count and sync_cond_broadcast, from any thread, wake these
 * waits and blocked threads alike, oldest first (a process-private variable: exactly
 * min(n, waiting); a SYNC_PROCESS_SHARED one may wake more, as sync_cond_wait there).
 *
 * Completed results: 0 (signalled), ETIMEDOUT, ECANCELED; or the re-acquire's EOWNERDEAD (a
 * robust mutex, held again from a dead holder: repair it) or ENOTRECOVERABLE (not held). A
 * signal that raced the deadline counts (0). The handle holds nothing (sync_async_unlock:
 * EPERM); the mutex is the holder's, as before the wait.
 *
 * sync_async_cancel on such a handle ends the wait for a signal but not the re-acquire: it
 * returns 0 (withdrawn: the result will be ECANCELED, or the re-acquire's failure) or EALREADY
 * (a signal or the deadline had ended it: that result stands), and in both cases the
 * completion is still delivered, once the mutex is held again (possibly inside
 * sync_async_cancel, on the calling thread, if the mutex is free). Wait for it before
 * sync_async_free (EBUSY until then). A signal that took a wait as it was cancelled is passed
 * on: the variable is signalled once more.
 */

/**
 * Starts waiting on `cond` (a sync_cond_t) with `mutex`, which `holder` (a completed handle of
 * sync_mutex_lock_async) holds, until `deadline_ns` (a deadline at or before now releases the
 * mutex and takes it again, as sync_cond_wait_until). Returns EINPROGRESS with *handle set
 * (completion as above), or with *handle NULL: the result of a wait that ended at once (a
 * passed deadline: ETIMEDOUT, 0, EOWNERDEAD, ENOTRECOVERABLE, the mutex released and taken
 * again), EPERM (`holder` does not hold `mutex`: nothing done), EINVAL (NULL or misaligned
 * pointer, `holder` not a mutex's handle, impossible words).
 */
int sync_cond_wait_async(void *cond, void *mutex, sync_async_t *holder, int64_t deadline_ns, int event_fd,
                         sync_async_callback_fn callback, void *context, sync_async_t **handle);

/**
 * As sync_cond_wait_async, `mutex` being held for `owner` (sync_mutex_lock_async_owner's,
 * nonzero; a SYNC_MUTEX_UNOWNED mutex need only be held, and is taken again with no owner).
 */
int sync_cond_wait_async_owner(void *cond, void *mutex, uintptr_t owner, int64_t deadline_ns, int event_fd,
                               sync_async_callback_fn callback, void *context, sync_async_t **handle);

/**
 * As sync_cond_wait_async on a sync_condition_t (its mutex is its first member: take it with
 * sync_mutex_lock_async(condition, ...)).
 */
int sync_condition_wait_async(void *condition, sync_async_t *holder, int64_t deadline_ns, int event_fd,
                              sync_async_callback_fn callback, void *context, sync_async_t **handle);

/** As sync_cond_wait_async_owner on a sync_condition_t. */
int sync_condition_wait_async_owner(void *condition, uintptr_t owner, int64_t deadline_ns, int event_fd,
                                    sync_async_callback_fn callback, void *context, sync_async_t **handle);

/**
 * As sync_cond_signal_checked for a mutex held for `owner` (or a handle cast to uintptr_t):
 * wakes up to `count` waiters if `owner` holds `mutex` (a SYNC_MUTEX_UNOWNED one: if it is
 * held); EPERM, waking nobody, if not; EINVAL.
 */
int sync_cond_signal_checked_async(void *cond, void *mutex, uintptr_t owner, uint32_t count);

/**
 * Gives up a condition wait whose holder will never run again (its event loop is closing): the
 * wait is cancelled, nothing more is delivered (no eventfd write, no callback, once this
 * returns), the mutex taken again for the holder is released again at once, and the handle is
 * freed (do not use it afterwards), now or when the re-acquire completes. Pending or completed
 * (and not yet freed) alike: 0. EINVAL for NULL or a handle of another kind (cancel those with
 * sync_async_cancel, then release and free them).
 */
int sync_async_abandon(sync_async_t *handle);

#ifdef __cplusplus
}
#endif
#endif
