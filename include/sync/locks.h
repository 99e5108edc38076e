/*
 * sync/locks.h — mutex, recursive lock, read-write lock, spin lock, once and synchronized.
 *
 * Every lock lives in memory the caller owns and starts from its static initializer
 * (= SYNC_..._INIT) or an init function: no allocation, nothing to destroy (a lock that is not
 * held may simply be freed or reused). Sizes: sync_mutex_t 4 bytes (pthread_mutex_t: 40),
 * sync_recursive_lock_t 8, sync_robust_mutex_t (a robust mutex or recursive lock) 16,
 * sync_rwlock_t 16, sync_spinlock_t 4, sync_once_t 4.
 *
 * Attaching to shared memory. A process-shared lock (a SHARED flag) is initialized by one
 * process; the others attach by using it as it is, without calling init. An init with a SHARED
 * flag never resets a lock that another process (or thread) uses: if the memory holds a lock
 * that is held (also by a dead holder) or has waiters, it returns EBUSY and changes nothing.
 * Its memory must be zero-filled (as mmap and ftruncate give it) or hold a lock nobody uses;
 * to start over after every process that used it is gone, zero it first. (An init without a
 * SHARED flag is not checked: its memory may hold anything before it, such as a stack variable.)
 *
 * Return codes: 0 on success, else an errno code documented per function. A NULL or misaligned
 * lock pointer returns EINVAL (queries: 0), as everywhere in sync.h. Misuse is reported, never undefined: releasing a lock the caller
 * does not hold returns EPERM; waiting for a lock the caller already holds returns EDEADLK.
 * Owners are kernel thread ids: a thread that exits while holding a lock leaves it held, unless
 * the lock is a robust mutex or recursive lock (SYNC_MUTEX_ROBUST, below), which reports it.
 *
 * Timeouts, as everywhere in sync.h: the `_timed` forms take a relative timeout in nanoseconds,
 * the `_until` forms an absolute CLOCK_MONOTONIC deadline in nanoseconds (< 0: none, wait until
 * taken; at or before now: one try, ETIMEDOUT at once if the lock is not free). Neither is
 * affected by changes of the wall clock. The `_interruptible` forms (the same deadline) also
 * return EINTR when a signal handler runs during the wait, and, in the process's main thread,
 * at least every 50 ms (a signal that arrives while the waiter is not asleep in the kernel
 * interrupts nothing), so that a caller such as an interpreter can handle pending signals and
 * retry; all other forms retry internally and never return EINTR.
 *
 * Thread safety: every function may be called from any thread at any time.
 */
#ifndef SYNC_LOCKS_H
#define SYNC_LOCKS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a name kept for compatibility (CONTRIBUTING.md, "Names"): it still links and works as
 * before, and compiling a use of it warns, naming its replacement. */
#ifndef SYNC_DEPRECATED
#define SYNC_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#endif

/* ---- Mutex ------------------------------------------------------------------------------- */

/**
 * A mutual-exclusion lock in 4 bytes that knows its owner. Uncontended lock and unlock are one
 * compare-and-swap each; contended, a locker spins with a bounded backoff (reading, never
 * writing, the word while it is held), then sleeps on a futex. Not FIFO: a running thread may
 * take the lock before a woken one (throughput over order).
 *
 * Owners of process-shared locks. The word records its holder's kernel thread id, and the kernel
 * gives the id of a dead thread to a new one, in any process. So each thread also lists, in
 * thread-local memory, the addresses of the process-shared (and robust) mutexes and recursive
 * locks it holds: the caller holds such a lock only if the word names it and its list has the
 * lock. A thread that got a dead holder's id neither gets EDEADLK from lock (it waits, as for any
 * holder) nor unlocks what it never took (EPERM); a fork()ed child holds none of its parent's
 * shared or robust locks. (The private, not robust, mutexes and recursive locks that the forking
 * thread held are still held by the child's thread, which continues it: it may unlock them.)
 * This costs the slow paths only, which process-shared locks always take (their word is never
 * 0). Within one process, lock and unlock such a lock through the same address (a second
 * mapping of the same memory is another lock to the list). sync_condition_t and
 * sync_condition_lock_t, whose first word is such a mutex, follow the same rules.
 *
 * Waiters of process-shared locks (mutex, recursive lock, rwlock; sync/conditions.h's
 * semaphore, event and condition lock, and a condition's lock) sleep at most 200 ms at a time,
 * then re-check the lock and take it if it is free. An unlock wakes one waiter; a process killed after that
 * wakeup and before it took the lock takes the wakeup with it, and the others then find the
 * lock free within one such slice instead of sleeping forever. Process-private waiters sleep
 * until woken (a thread cannot die alone) and pay nothing for this.
 */
typedef struct { uint32_t _word; } sync_mutex_t;

#define SYNC_MUTEX_INIT { 0u }                  /**< private to one process, owner-checked */
#define SYNC_MUTEX_INIT_SHARED { 0x40000000u }  /**< for memory shared by processes */
#define SYNC_MUTEX_INIT_UNOWNED { 0x20000000u } /**< any thread may unlock (a binary semaphore) */

#define SYNC_MUTEX_SHARED 1  /**< sync_mutex_init flag: the mutex is in memory shared by processes */
#define SYNC_MUTEX_UNOWNED 2 /**< sync_mutex_init flag: any thread may unlock; no EDEADLK check */
#define SYNC_MUTEX_ROBUST 4  /**< sync_mutex_init / sync_recursive_lock_init flag: robust (see below) */

/**
 * Initializes *mutex, unlocked, with flags: 0, or any of SYNC_MUTEX_SHARED, SYNC_MUTEX_UNOWNED,
 * SYNC_MUTEX_ROBUST (then mutex must be the .mutex of a sync_robust_mutex_t: 16 bytes are
 * written). A process-shared mutex must be initialized once, by one process, before others use
 * it; a robust one may also start as SYNC_ROBUST_MUTEX_INIT(_SHARED). Not thread-safe with
 * respect to other uses of the same mutex.
 * @return 0; EINVAL for an unknown flag, ROBUST with UNOWNED, or robust memory not 8-aligned;
 * EBUSY (SHARED), changing nothing, if the mutex there is locked or has waiters (see
 * "Attaching to shared memory" above; a robust one whose holder died: lock it instead, and get
 * EOWNERDEAD; a not-recoverable one is neither, and init makes it usable).
 */
int sync_mutex_init(sync_mutex_t *mutex, int flags);

/**
 * Locks, waiting as long as it takes.
 * @return 0; EDEADLK if the caller holds it; robust: EOWNERDEAD (locked: the previous holder
 * died), ENOTRECOVERABLE (not locked), EINVAL (the caller is in another pid or time namespace
 * than the lock's first locker).
 */
int sync_mutex_lock(sync_mutex_t *mutex);

/**
 * Locks if free; never waits (robust: checks whether the holder is alive).
 * @return 0, or EBUSY if held (by anyone, the caller included); robust: also EOWNERDEAD,
 * ENOTRECOVERABLE, EINVAL as sync_mutex_lock.
 */
int sync_mutex_try_lock(sync_mutex_t *mutex);
SYNC_DEPRECATED("sync_mutex_try_lock") int sync_mutex_trylock(sync_mutex_t *mutex);
/**
 * The first attempt of a blocking lock that an interpreter binding makes before it waits
 * (through sync_mutex_lock_interruptible): exactly sync_mutex_try_lock, except that the
 * lock-order checker (sync/debug.h) counts a lock taken here as a lock, with the orders from
 * the locks held before it, not as a trylock. The other `_try_lock_first` functions (recursive
 * lock, rwlock sides, spin lock, sync/conditions.h's condition lock) are the same to their
 * trylocks. Thread-safe. @return as sync_mutex_try_lock.
 */
int sync_mutex_try_lock_first(sync_mutex_t *mutex);
SYNC_DEPRECATED("sync_mutex_try_lock_first") int sync_mutex_trylock_first(sync_mutex_t *mutex);

/** Locks unless timeout_ns nanoseconds pass first.
 *  @return 0, ETIMEDOUT, or EDEADLK; robust: also EOWNERDEAD, ENOTRECOVERABLE, EINVAL. */
int sync_mutex_lock_timed(sync_mutex_t *mutex, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_mutex_lock_timed") int sync_mutex_timedlock(sync_mutex_t *mutex, uint64_t timeout_ns);

/** Locks unless CLOCK_MONOTONIC reaches deadline_ns first.
 *  @return 0, ETIMEDOUT, or EDEADLK; robust: also EOWNERDEAD, ENOTRECOVERABLE, EINVAL. */
int sync_mutex_lock_until(sync_mutex_t *mutex, int64_t deadline_ns);

/** As sync_mutex_lock_until (deadline_ns < 0: none), and EINTR if a signal interrupts it. */
int sync_mutex_lock_interruptible(sync_mutex_t *mutex, int64_t deadline_ns);

/**
 * Unlocks, waking one waiter if any sleeps. Robust, after EOWNERDEAD without
 * sync_mutex_consistent: unlocks and leaves the mutex not recoverable, waking every waiter.
 * @return 0, or EPERM if the caller does not hold it (unowned mode: if it is not locked).
 */
int sync_mutex_unlock(sync_mutex_t *mutex);

/**
 * Robust mode: marks the state the mutex guards consistent again, after the caller's lock
 * returned EOWNERDEAD, so that unlocking leaves the mutex usable.
 * @return 0; EPERM if the caller does not hold it; EINVAL if the mutex is not robust or is not
 * marked as taken from a dead holder.
 */
int sync_mutex_consistent(sync_mutex_t *mutex);

/** 1 if the mutex is locked (by anyone), else 0: a snapshot, for diagnostics. */
int sync_mutex_is_locked(const sync_mutex_t *mutex);

/** 1 if the calling thread holds the mutex (owned mode), else 0. */
int sync_mutex_is_owner(const sync_mutex_t *mutex);

/* ---- Recursive lock ---------------------------------------------------------------------- */

/** A mutex its owner may lock again; each lock balanced by an unlock (8 bytes). */
typedef struct { uint32_t _word, _depth; } sync_recursive_lock_t;

#define SYNC_RECURSIVE_LOCK_INIT { 0u, 0u }
#define SYNC_RECURSIVE_LOCK_INIT_SHARED { 0x40000000u, 0u } /**< for memory shared by processes */

/**
 * Initializes *lock, unlocked, with flags: 0, or any of SYNC_MUTEX_SHARED and SYNC_MUTEX_ROBUST
 * (then lock must be the .recursive of a sync_robust_mutex_t: 16 bytes are written).
 * @return 0; EINVAL (an unknown flag, robust memory not 8-aligned); EBUSY (SHARED), changing
 * nothing, if the lock there is locked or has waiters, as sync_mutex_init.
 */
int sync_recursive_lock_init(sync_recursive_lock_t *lock, int flags);

/** Locks (again, if the caller holds it). @return 0, or EAGAIN if the depth would overflow;
 *  robust: EOWNERDEAD (locked once: the previous holder died, at whatever depth),
 *  ENOTRECOVERABLE, EINVAL, as sync_mutex_lock. */
int sync_recursive_lock_lock(sync_recursive_lock_t *lock);
/** Locks if free or held by the caller. @return 0, EBUSY (held by another thread), or EAGAIN;
 *  robust: also EOWNERDEAD, ENOTRECOVERABLE, EINVAL. */
int sync_recursive_lock_try_lock(sync_recursive_lock_t *lock);
SYNC_DEPRECATED("sync_recursive_lock_try_lock") int sync_recursive_lock_trylock(sync_recursive_lock_t *lock);
/** As sync_recursive_lock_try_lock, as the first attempt of a blocking lock (see
 *  sync_mutex_try_lock_first). @return as sync_recursive_lock_try_lock. */
int sync_recursive_lock_try_lock_first(sync_recursive_lock_t *lock);
SYNC_DEPRECATED("sync_recursive_lock_try_lock_first") int sync_recursive_lock_trylock_first(sync_recursive_lock_t *lock);
/** Locks unless timeout_ns pass first. @return 0, ETIMEDOUT, or EAGAIN; robust: also
 *  EOWNERDEAD, ENOTRECOVERABLE, EINVAL. */
int sync_recursive_lock_lock_timed(sync_recursive_lock_t *lock, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_recursive_lock_lock_timed") int sync_recursive_lock_timedlock(sync_recursive_lock_t *lock, uint64_t timeout_ns);
/** Locks unless CLOCK_MONOTONIC reaches deadline_ns first. @return 0, ETIMEDOUT, or EAGAIN;
 *  robust: also EOWNERDEAD, ENOTRECOVERABLE, EINVAL. */
int sync_recursive_lock_lock_until(sync_recursive_lock_t *lock, int64_t deadline_ns);
/** As sync_recursive_lock_lock_until (deadline_ns < 0: none), and EINTR on a signal. */
int sync_recursive_lock_lock_interruptible(sync_recursive_lock_t *lock, int64_t deadline_ns);
/** Undoes one lock; the last one releases it (robust, after EOWNERDEAD without consistent:
 *  leaving it not recoverable). @return 0, or EPERM if the caller does not hold it. */
int sync_recursive_lock_unlock(sync_recursive_lock_t *lock);
/** Robust mode: as sync_mutex_consistent. @return 0, EPERM, or EINVAL. */
int sync_recursive_lock_consistent(sync_recursive_lock_t *lock);
/** How many times the calling thread holds the lock (0: not at all). */
uint32_t sync_recursive_lock_depth(const sync_recursive_lock_t *lock);
/**
 * Releases the caller's hold entirely, however deep, in one step, and stores the depth it had
 * in *depth (for sync_recursive_lock_restore_interruptible): what a condition variable's wait
 * does with the lock (Python's RLock._release_save). Robust: as the last unlock.
 * @return 0; EPERM (nothing changes) if the caller does not hold it; EINVAL for NULL.
 */
int sync_recursive_lock_release_save(sync_recursive_lock_t *lock, uint32_t *depth);
/**
 * Takes the lock again at `depth` (> 0) in one step, after sync_recursive_lock_release_save:
 * as sync_recursive_lock_lock_interruptible, then the caller holds it `depth` times.
 * @return 0; ETIMEDOUT once deadline_ns (CLOCK_MONOTONIC, < 0: none) passes; EINTR on a
 * signal; EDEADLK if the caller holds it; EINVAL (depth 0, NULL); robust: EOWNERDEAD (held at
 * `depth`), ENOTRECOVERABLE (not held).
 */
int sync_recursive_lock_restore_interruptible(sync_recursive_lock_t *lock, uint32_t depth, int64_t deadline_ns);

/* ---- Robust mutex and recursive lock ------------------------------------------------------ */

/**
 * Robust mode (SYNC_MUTEX_ROBUST), as PTHREAD_MUTEX_ROBUST: when the holder dies holding the lock
 * (its thread exits, its process is killed), the next thread to lock it gets EOWNERDEAD *and
 * holds the lock*. The state the lock guards may be half-updated: repair it, call
 * sync_mutex_consistent (sync_recursive_lock_consistent), then unlock. Unlocking without that
 * makes the lock not recoverable: every later lock, and every thread then waiting, gets
 * ENOTRECOVERABLE until the lock is initialized again. A taker that dies before consistent
 * passes EOWNERDEAD on to the next one. A robust mutex works with the condition variables of
 * sync/conditions.h: taking it again after a wait may give the wait's caller EOWNERDEAD (held)
 * or ENOTRECOVERABLE (not held), as a lock would; a wait releases it as an unlock does, so call
 * consistent before waiting.
 *
 * Memory: a robust mutex or recursive lock takes 16 bytes, 8-aligned, not 4 or 8: declare a
 * sync_robust_mutex_t and pass &r.mutex to the sync_mutex_* functions, or &r.recursive to the
 * sync_recursive_lock_* functions (one or the other for a given lock). Plain mutexes stay 4 bytes.
 *
 *     sync_robust_mutex_t *r = mmap(...MAP_SHARED...);
 *     sync_mutex_init(&r->mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST);
 *     int e = sync_mutex_lock(&r->mutex);
 *     if (e == EOWNERDEAD) { repair(); sync_mutex_consistent(&r->mutex); }
 *     else if (e) { ... ENOTRECOVERABLE: give up ... }
 *     ...
 *     sync_mutex_unlock(&r->mutex);
 *
 * How a death is found: the 64-bit word at offset 0 holds, changed by one compare-and-swap, the
 * holder's thread id and its start time (clock ticks since boot, from /proc). A thread that finds
 * the lock held checks the holder before each sleep, and wakes at least every 250 ms to check
 * again: kill(tid, 0) failing with ESRCH, a zombie in /proc/<tid>/task/<tid>/stat, or a start
 * time there other than the holder's (the id was reused) means the holder is dead; for a private
 * robust lock, also a holder that is no thread of the caller's process (tgkill): in a fork()ed
 * child, the parent's thread that held the lock at the fork. So a waiter learns of a death within
 * about 250 ms, and the next locker of a lock whose holder died while nobody waited (trylock too)
 * at once, unless it found that holder alive in the last 250 ms (a per-thread cache: a busy
 * robust lock costs its waiters one kill(2) call per sleep). Fast paths of other mutexes do not
 * change; a robust lock's operations always take the slow path.
 *
 * Limits: every thread that uses a robust lock must be in the same pid namespace and the same
 * time namespace (ids and start times mean nothing across them): the lock records a digest of
 * the first locker's namespaces, and a thread of other namespaces gets EINVAL from every lock
 * function. A death is reported only when certain: where /proc cannot be read, or hides the
 * holder's process (hidepid), a holder whose id was reused counts as alive, and the lock stays
 * held as a plain one would. A thread id reused within the clock tick (10 ms) of its previous
 * holder's start, or exactly 2^32 ticks later, is not told apart. A holder that calls execve
 * keeps its id and start time: it is not found dead. Robust locks cannot be unowned.
 */
typedef union {
    sync_mutex_t mutex;              /**< pass &r.mutex to the sync_mutex_* functions */
    sync_recursive_lock_t recursive; /**< or &r.recursive to the sync_recursive_lock_* functions */
    uint64_t _state[2];
} sync_robust_mutex_t;

#define SYNC_ROBUST_MUTEX_INIT { { 0x10000000u } }        /**< robust, private to one process */
#define SYNC_ROBUST_MUTEX_INIT_SHARED { { 0x50000000u } } /**< robust, in memory shared by processes */

/* ---- Read-write lock --------------------------------------------------------------------- */

/**
 * Many readers or one writer, writer-preferring: while a writer waits, new readers wait too,
 * so writers never starve (16 bytes); a release while a writer waits keeps the lock for the
 * writers (no reader gets in before the writer it wakes; tries meanwhile return EBUSY). Any
 * number of threads may wait. A reader cannot
 * upgrade: calling wrlock while holding a read lock waits forever (release the read lock
 * first, or take the upgradable read below). A writer can downgrade to a reader atomically
 * (sync_rwlock_downgrade) or to the upgradable reader (sync_rwlock_downgrade_to_uprd). A thread that
 * takes a read lock it already holds may wait forever if a writer arrived in between. Readers
 * are not tracked per thread: rdunlock checks only that some reader holds the lock.
 *
 * The write holder's own attempts: a try (try_rdlock, try_wrlock) reports the lock as held,
 * EBUSY, whoever holds it; any form that may wait (rdlock, wrlock, their timed, _until and
 * _interruptible forms) returns EDEADLK at once, since its wait could only end in a timeout.
 *
 * Process-shared: a reader or writer that dies (or gives up) while it waits leaves nothing
 * that blocks others for long. A process killed between being woken and taking the lock
 * delays the others by at most one 200 ms slice (waiters re-check the lock at every slice
 * end, as for the mutex above). A writer that gives up clears its writer-waiting mark at once
 * if no other writer waits; one that is killed while it waits leaves the mark, which stops new
 * readers: the next release that wakes no writer forgets it, and before that the readers
 * re-validate it. A reader
 * whose sleep ends without a release (a slice end, its deadline, a signal) while readers hold
 * the lock asks the kernel how many threads sleep on the writers' futex word (_wakeups), with
 * FUTEX_CMP_REQUEUE of nr_wake 0 and nr_requeue INT_MAX onto that same word, which wakes and
 * moves nobody. If none sleeps at two looks 2 ms apart, it withdraws the mark: the waiting
 * readers, and new ones, get in, the holders' own further read locks included (within about
 * 0.5 s of the death). Limits: this judgement only ever affects writer preference, never
 * exclusion (a writer enters only when no reader holds the lock). A live writer preempted
 * between marking the lock and falling asleep at both looks waits behind the readers that got
 * in meanwhile, then marks the lock again; where the kernel refuses the call (a seccomp
 * filter), a dead writer's mark stays until every reader has released. A process that dies
 * while it HOLDS the lock leaves it held (as a default pthread rwlock).
 * The write holder of a process-shared lock is known by more than its thread id: when it dies
 * and the kernel gives its id to a thread of another process, that thread is not taken for the
 * holder (wrunlock and downgrade return EPERM; the waiting forms wait, and time out, instead of
 * returning EDEADLK).
 *
 * Every function returns EINVAL for a NULL or misaligned pointer, and for a lock whose memory
 * holds a state no sequence of calls produces (never initialized, or overwritten); it then
 * changes nothing.
 */
typedef struct { uint32_t _state, _wakeups, _writer, _waiting; } sync_rwlock_t;

#define SYNC_RWLOCK_INIT { 0u, 0u, 0u, 0u }
#define SYNC_RWLOCK_INIT_SHARED { 0x80000000u, 0u, 0u, 0u } /**< for memory shared by processes */
#define SYNC_RWLOCK_SHARED 1 /**< sync_rwlock_init flag */

/**
 * Initializes *rwlock, unlocked, with flags (0 or SYNC_RWLOCK_SHARED). A process-shared rwlock
 * must be initialized once, by one process, before others use it. Not thread-safe with respect
 * to other uses of the same rwlock. @return 0; EINVAL (unknown flag); EBUSY (SHARED), changing
 * nothing, if the rwlock there is held (read, upgradable read or write) or a writer waits for
 * it (see "Attaching to shared memory" above).
 */
int sync_rwlock_init(sync_rwlock_t *rwlock, int flags);

/**
 * Takes a read lock, waiting while a writer holds the lock or waits for it, or an upgrade waits
 * for the readers to leave.
 * @return 0, EDEADLK (the caller holds the write lock, or the upgradable read while a writer
 *         waits), EAGAIN (2^26-1 read locks are held), or EINVAL.
 */
int sync_rwlock_rdlock(sync_rwlock_t *rwlock);
/**
 * Takes a read lock if no writer holds the lock or waits for it, and no upgrade waits; never
 * waits. @return 0, EBUSY (a writer holds or waits, the caller included, or an upgrade waits),
 * EAGAIN, or EINVAL.
 */
int sync_rwlock_try_rdlock(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_rdlock") int sync_rwlock_tryrdlock(sync_rwlock_t *rwlock);
/** As sync_rwlock_try_rdlock, as the first attempt of a blocking read lock (see
 *  sync_mutex_try_lock_first). */
int sync_rwlock_try_rdlock_first(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_rdlock_first") int sync_rwlock_tryrdlock_first(sync_rwlock_t *rwlock);
/** Takes a read lock unless timeout_ns pass first. @return 0, ETIMEDOUT, EDEADLK, EAGAIN, or EINVAL. */
int sync_rwlock_rdlock_timed(sync_rwlock_t *rwlock, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_rwlock_rdlock_timed") int sync_rwlock_timedrdlock(sync_rwlock_t *rwlock, uint64_t timeout_ns);
/** Takes a read lock unless CLOCK_MONOTONIC reaches deadline_ns. @return as rdlock_timed. */
int sync_rwlock_rdlock_until(sync_rwlock_t *rwlock, int64_t deadline_ns);
/** As sync_rwlock_rdlock_until (deadline_ns < 0: none), and EINTR on a signal. */
int sync_rwlock_rdlock_interruptible(sync_rwlock_t *rwlock, int64_t deadline_ns);
/**
 * Releases a read lock; the last reader out wakes a waiting writer (or the readers parked
 * behind a writer that has gone). @return 0, EPERM (no reader holds the lock), or EINVAL.
 */
int sync_rwlock_rdunlock(sync_rwlock_t *rwlock);

/** Takes the write lock. @return 0, EDEADLK (the caller holds it, or the upgradable read: upgrade instead), or EINVAL. */
int sync_rwlock_wrlock(sync_rwlock_t *rwlock);
/** Takes the write lock if nobody holds the lock; never waits. @return 0, EBUSY (held, by anyone, the caller included), or EINVAL. */
int sync_rwlock_try_wrlock(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_wrlock") int sync_rwlock_trywrlock(sync_rwlock_t *rwlock);
/** As sync_rwlock_try_wrlock, as the first attempt of a blocking write lock (see
 *  sync_mutex_try_lock_first). */
int sync_rwlock_try_wrlock_first(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_wrlock_first") int sync_rwlock_trywrlock_first(sync_rwlock_t *rwlock);
/** Takes the write lock unless timeout_ns pass first. @return 0, ETIMEDOUT, EDEADLK, or EINVAL. */
int sync_rwlock_wrlock_timed(sync_rwlock_t *rwlock, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_rwlock_wrlock_timed") int sync_rwlock_timedwrlock(sync_rwlock_t *rwlock, uint64_t timeout_ns);
/** Takes the write lock unless CLOCK_MONOTONIC reaches deadline_ns. @return 0, ETIMEDOUT, EDEADLK, or EINVAL. */
int sync_rwlock_wrlock_until(sync_rwlock_t *rwlock, int64_t deadline_ns);
/** As sync_rwlock_wrlock_until (deadline_ns < 0: none), and EINTR on a signal. */
int sync_rwlock_wrlock_interruptible(sync_rwlock_t *rwlock, int64_t deadline_ns);
/**
 * Releases the write lock, waking the next waiting writer, else the waiting readers.
 * @return 0, EPERM (the caller does not hold it), or EINVAL.
 */
int sync_rwlock_wrunlock(sync_rwlock_t *rwlock);
/**
 * Turns the caller's write lock into a read lock in one atomic step: no writer can take the
 * lock in between, and other readers may join at once, unless a writer waits (writer
 * preference: that writer goes next). Release the result with sync_rwlock_rdunlock.
 * @return 0, EPERM (the caller does not hold the write lock; nothing changes), or EINVAL.
 */
int sync_rwlock_downgrade(sync_rwlock_t *rwlock);
/*
 * The upgradable read (parking_lot's upgradable_read). One thread at a time holds it, beside
 * any number of plain readers and never beside a writer: it reads, and may then turn its hold
 * into the write lock (sync_rwlock_upgrade) with no release in between, so what it read still
 * holds when it writes. A second thread's uprdlock waits for the first to release, upgrade and
 * unlock, or downgrade: it never deadlocks with it (neither waits for the other), unlike two
 * plain readers that would both upgrade (each waiting for the other to leave). Writer
 * preference as for readers: while a writer waits, uprdlock waits too. The upgradable reader is
 * known by its thread (as the writer is, process-shared too): only it may upgrade, downgrade
 * or release its hold. Plain read locks are not tracked per thread: sync_rwlock_upgrade from a
 * thread that is not the upgradable reader returns EDEADLK (a plain reader's upgrade would wait
 * for itself), but the upgradable reader that also holds a plain read lock of its own and
 * upgrades waits for itself (the timed forms time out). The upgradable reader's own rdlock
 * returns EDEADLK when a writer waits (that writer waits for it); its try_rdlock, EBUSY.
 * A process that dies holding it leaves it held, as a writer does.
 */
/**
 * Takes the upgradable read, waiting while a writer holds the lock or waits for it, or another
 * thread holds the upgradable read. Release it with sync_rwlock_uprdunlock (or upgrade, or
 * downgrade it).
 * @return 0, EDEADLK (the caller holds the write lock or the upgradable read), or EINVAL.
 */
int sync_rwlock_uprdlock(sync_rwlock_t *rwlock);
/**
 * Takes the upgradable read if no writer holds or waits and nobody holds the upgradable read;
 * never waits. @return 0, EBUSY (held so, the caller included), or EINVAL.
 */
int sync_rwlock_try_uprdlock(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_uprdlock") int sync_rwlock_tryuprdlock(sync_rwlock_t *rwlock);
/** As sync_rwlock_try_uprdlock, as the first attempt of a blocking upgradable read (see
 *  sync_mutex_try_lock_first). */
int sync_rwlock_try_uprdlock_first(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_uprdlock_first") int sync_rwlock_tryuprdlock_first(sync_rwlock_t *rwlock);
/** Takes the upgradable read unless timeout_ns pass first. @return 0, ETIMEDOUT, EDEADLK, or EINVAL. */
int sync_rwlock_uprdlock_timed(sync_rwlock_t *rwlock, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_rwlock_uprdlock_timed") int sync_rwlock_timeduprdlock(sync_rwlock_t *rwlock, uint64_t timeout_ns);
/** Takes the upgradable read unless CLOCK_MONOTONIC reaches deadline_ns. @return as uprdlock_timed. */
int sync_rwlock_uprdlock_until(sync_rwlock_t *rwlock, int64_t deadline_ns);
/** As sync_rwlock_uprdlock_until (deadline_ns < 0: none), and EINTR on a signal. */
int sync_rwlock_uprdlock_interruptible(sync_rwlock_t *rwlock, int64_t deadline_ns);
/**
 * Releases the caller's upgradable read; if no plain reader holds the lock, wakes as the last
 * reader's release does. @return 0, EPERM (the caller does not hold the upgradable read), or
 * EINVAL.
 */
int sync_rwlock_uprdunlock(sync_rwlock_t *rwlock);
/**
 * Turns the caller's upgradable read into the write lock with no release in between: no writer
 * can take the lock first. New readers wait from the call on; it waits for the plain readers
 * to leave. Release the result with sync_rwlock_wrunlock (or downgrade it).
 * @return 0, EDEADLK (the caller does not hold the upgradable read: it holds a plain read
 *         lock, or nothing, or has already upgraded; nothing changes), or EINVAL.
 */
int sync_rwlock_upgrade(sync_rwlock_t *rwlock);
/** Upgrades if no plain reader holds the lock; never waits. @return 0, EBUSY (the caller keeps its upgradable read), EDEADLK, or EINVAL. */
int sync_rwlock_try_upgrade(sync_rwlock_t *rwlock);
SYNC_DEPRECATED("sync_rwlock_try_upgrade") int sync_rwlock_tryupgrade(sync_rwlock_t *rwlock);
/**
 * Upgrades unless timeout_ns pass first. On ETIMEDOUT the caller keeps its upgradable read and
 * the readers that waited behind the upgrade get in. @return 0, ETIMEDOUT, EDEADLK, or EINVAL.
 */
int sync_rwlock_upgrade_timed(sync_rwlock_t *rwlock, uint64_t timeout_ns);
SYNC_DEPRECATED("sync_rwlock_upgrade_timed") int sync_rwlock_timedupgrade(sync_rwlock_t *rwlock, uint64_t timeout_ns);
/** Upgrades unless CLOCK_MONOTONIC reaches deadline_ns. @return as upgrade_timed. */
int sync_rwlock_upgrade_until(sync_rwlock_t *rwlock, int64_t deadline_ns);
/** As sync_rwlock_upgrade_until (deadline_ns < 0: none), and EINTR on a signal (the upgradable read kept). */
int sync_rwlock_upgrade_interruptible(sync_rwlock_t *rwlock, int64_t deadline_ns);
/**
 * Turns the caller's upgradable read into a plain read lock in one atomic step (another thread
 * may then take the upgradable read). Release the result with sync_rwlock_rdunlock.
 * @return 0, EPERM (the caller does not hold the upgradable read; nothing changes), EAGAIN
 *         (2^26-1 read locks held; nothing changes), or EINVAL.
 */
int sync_rwlock_uprd_downgrade(sync_rwlock_t *rwlock);
/**
 * Turns the caller's write lock into the upgradable read in one atomic step: no writer can take
 * the lock in between; readers may join at once unless a writer waits. It may upgrade again.
 * @return 0, EPERM (the caller does not hold the write lock; nothing changes), or EINVAL.
 */
int sync_rwlock_downgrade_to_uprd(sync_rwlock_t *rwlock);
/**
 * How many writers wait for the lock: a snapshot, for diagnostics and tests. A writer that
 * died while waiting stays counted (this affects only this number and whether a later writer
 * that gives up withdraws the mark at once or leaves it to the readers' re-validation);
 * UINT32_MAX once the count saturated. 0 for a NULL or misaligned pointer.
 */
uint32_t sync_rwlock_waiting_writers(const sync_rwlock_t *rwlock);

/* ---- Spin lock --------------------------------------------------------------------------- */

/**
 * A spin lock for critical sections of a few instructions (4 bytes, owner-checked). Unlock is
 * one compare-and-swap and never a system call. Waiting spins with bounded exponential backoff,
 * then yields, then sleeps in naps growing to 1 ms, so a preempted holder is not starved of the
 * CPU by its waiters.
 *
 * Process-shared: a spin lock in memory shared by processes should be initialized with
 * SYNC_SPINLOCK_INIT_SHARED or sync_spinlock_init(lock, SYNC_SPINLOCK_SHARED). Its owner checks
 * then hold across processes: when a holder dies and the kernel gives its thread id to a thread
 * of another process, that thread is not taken for the holder (unlock EPERM; lock waits, and
 * times out, instead of EDEADLK). A private spin lock (SYNC_SPINLOCK_INIT, zeroed memory) also
 * works in shared memory, but only names its holder by thread id, so such a recycled id looks
 * like the holder. A process that dies holding a spin lock leaves it held.
 *
 * The word holds 0 or the holder's kernel thread id, with bit 30 set in shared mode; one that
 * holds anything else (no thread id is 2^22 or more) was not written by the library: every
 * function returns EINVAL for it and changes nothing. Every function returns EINVAL for a NULL
 * or misaligned lock.
 */
typedef struct { uint32_t _word; } sync_spinlock_t;

#define SYNC_SPINLOCK_INIT { 0u }
#define SYNC_SPINLOCK_INIT_SHARED { 0x40000000u } /**< for memory shared by processes */
#define SYNC_SPINLOCK_SHARED 1 /**< sync_spinlock_init flag: the lock is in memory shared by processes */

/** Initializes *lock, unlocked, with flags (0 or SYNC_SPINLOCK_SHARED). Not thread-safe with
 *  respect to other uses of the same lock. @return 0; EINVAL (unknown flag); EBUSY (SHARED),
 *  changing nothing, if the lock there is held (see "Attaching to shared memory" above). */
int sync_spinlock_init(sync_spinlock_t *lock, int flags);
/** Locks. @return 0, EDEADLK if the caller holds it, or EINVAL. */
int sync_spinlock_lock(sync_spinlock_t *lock);
/** Locks if free. @return 0, EBUSY (held, by the caller too), or EINVAL. */
int sync_spinlock_try_lock(sync_spinlock_t *lock);
SYNC_DEPRECATED("sync_spinlock_try_lock") int sync_spinlock_trylock(sync_spinlock_t *lock);
/** As sync_spinlock_try_lock, as the first attempt of a blocking lock (see sync_mutex_try_lock_first). */
int sync_spinlock_try_lock_first(sync_spinlock_t *lock);
SYNC_DEPRECATED("sync_spinlock_try_lock_first") int sync_spinlock_trylock_first(sync_spinlock_t *lock);
/** Locks unless CLOCK_MONOTONIC reaches deadline_ns first.
 *  @return 0, ETIMEDOUT, EDEADLK, or EINVAL. */
int sync_spinlock_lock_until(sync_spinlock_t *lock, int64_t deadline_ns);
/** As sync_spinlock_lock_until (deadline_ns < 0: none), and EINTR on a signal. */
int sync_spinlock_lock_interruptible(sync_spinlock_t *lock, int64_t deadline_ns);
/** Unlocks. @return 0, EPERM if the caller does not hold it, or EINVAL. */
int sync_spinlock_unlock(sync_spinlock_t *lock);

/* ---- Once -------------------------------------------------------------------------------- */

/**
 * Run-once: the safe double-checked lock. Once completed, sync_once costs one load.
 * Private to one process. Every function returns EINVAL for a NULL or misaligned once, and for
 * a word the library never writes (it names no thread as the runner), which it leaves
 * unchanged: waiting on such a word would never end.
 */
typedef struct { uint32_t _word; } sync_once_t;

#define SYNC_ONCE_INIT { 0u }
#define SYNC_ONCE_RUN (-1) /**< sync_once_begin: the caller must run the initializer */

/**
 * Calls function(context) exactly once per *once, however many threads race: every caller
 * returns after it has returned, and sees its writes.
 * @return 0, EDEADLK if function calls sync_once on the same *once, or EINVAL (NULL function,
 *         or see above).
 */
int sync_once(sync_once_t *once, void (*function)(void *), void *context);

/**
 * The two-step form, for initializers that can fail: sync_once_begin returns 0 once the
 * initialization has completed (waiting for a run in progress), or SYNC_ONCE_RUN exactly when
 * the caller must run it and then call sync_once_end(once, completed). If completed is 0, the
 * next caller (a waiter or a later one) gets SYNC_ONCE_RUN instead.
 * @return 0, SYNC_ONCE_RUN, EDEADLK (the caller is running it), or EINVAL.
 */
int sync_once_begin(sync_once_t *once);
/** As sync_once_begin, and EINTR if a signal interrupts the wait. */
int sync_once_begin_interruptible(sync_once_t *once);
/** Ends the caller's run. @return 0, EPERM if the caller is not running it, or EINVAL. */
int sync_once_end(sync_once_t *once, int completed);

/* ---- synchronized ------------------------------------------------------------------------ */

/*
 * Objective-C's @synchronized(token) for C: a recursive lock per token (any non-NULL address),
 * found in a table without creating a lock first. Different tokens never share a lock, so they
 * never block each other beyond a table lookup and never deadlock unless the program's own
 * lock order does. Lock only on tokens you own (anyone else may lock on them too).
 */

/** Calls body(context) holding token's lock. @return 0, EINVAL (NULL token or body), or EAGAIN. */
int sync_synchronized(const void *token, void (*body)(void *), void *context);
/** Takes token's lock (recursively). @return 0, EINVAL (NULL), or EAGAIN (depth overflow). */
int sync_synchronized_enter(const void *token);
/** As sync_synchronized_enter, with a deadline (< 0: none), and EINTR/ETIMEDOUT. */
int sync_synchronized_enter_interruptible(const void *token, int64_t deadline_ns);
/** Releases token's lock once. @return 0, EINVAL (NULL), or EPERM if the caller does not hold it. */
int sync_synchronized_exit(const void *token);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_LOCKS_H */
