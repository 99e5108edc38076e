/*
 * sync/debug.h — lock-order checking (debug mode): potential deadlocks found before they happen,
 * and a dump of who holds and who waits for which lock when one does happen.
 *
 * When on, libsync keeps, per thread, the stack of locks it holds, and one graph of the orders
 * in which locks were taken: an edge A -> B the first time a thread waits for or takes B while
 * holding A, with where that happened (a backtrace). An order that closes a cycle with orders
 * seen before is a potential deadlock, reported once per cycle even if no deadlock happened:
 *
 *     thread 1: lock(A); lock(B); unlock(B); unlock(A);
 *     thread 2 (later): lock(B); lock(A);      -> "potential deadlock: cycle of 2 locks", both sites
 *
 * Covered: sync_mutex_t (any mode), sync_recursive_lock_t, sync_rwlock_t (a read lock, plain or
 * upgradable, counts as the lock; an upgrade or downgrade changes the mode of the hold), sync_spinlock_t, sync_synchronized (the token is the lock), sync_condition_t and
 * sync_condition_lock_t (through their mutex: a wait releases it and takes it again). A trylock
 * that succeeds is held (edges from it to later locks count) but adds no edge into it: it never
 * waits. Not covered: robust recursive locks (sync_recursive_lock_init with SYNC_MUTEX_ROBUST),
 * locks taken before checking was turned on (they are not on the stacks; their release is
 * ignored). A release removes only the calling thread's own hold, except for an unowned mutex
 * (one holder, whoever releases it): a read lock released by another thread than its taker
 * stays on the taker's stack until that thread exits.
 *
 * Turning it on: LIBSYNC_CHECK_LOCK_ORDER=1 in the environment (read once, when libsync.so is
 * loaded; =abort also aborts after a report; any other value except 0 prints a warning and leaves
 * it off), or sync_debug_lock_order(true). Off, each lock and unlock costs one load and one branch
 * not taken; on, every lock and unlock takes an internal mutex (see docs/lock_order.md for the
 * measured cost), and a new order captures a backtrace.
 *
 * Names: sync_debug_lock_name and sync_debug_thread_name give the locks and threads of the reports
 * names (Python: `name=`, and its threads' names; Swift: `label`).
 *
 * Reused memory: a lock's orders and name are forgotten when it is initialized again (sync_*_init)
 * and on sync_debug_lock_forget; a lock at the same address afterwards is a new lock. Memory that
 * held a statically initialized lock (SYNC_..._INIT, no init call) and is freed and reused for
 * another lock without sync_debug_lock_forget keeps the old lock's orders and name: call it
 * before free().
 *
 * SIGQUIT: while checking is on, if SIGQUIT's disposition was the default when checking first
 * ran, SIGQUIT (kill -QUIT, ^\) prints sync_debug_dump_waits()'s text to stderr and the process
 * goes on; with checking off again, SIGQUIT quits as by default.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef SYNC_DEBUG_H
#define SYNC_DEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a name kept for compatibility (CONTRIBUTING.md, "Names"), as in sync/locks.h. */
#ifndef SYNC_DEPRECATED
#define SYNC_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#endif

/** One order of a cycle: `to` was first waited for or taken while `from` was held. */
typedef struct sync_lock_order_edge {
    const void *from, *to;      /**< the locks (sync_synchronized: the token) */
    const char *from_kind;      /**< how `from` was held in this order: "mutex", "rwlock (read)",
                                     "rwlock (write)", "rwlock (upgradable read)", "spin lock",
                                     "synchronized" */
    const char *to_kind;        /**< how `to` was taken in this order (same words) */
    uint32_t thread;            /**< kernel id of the thread that first took them in this order */
    const char *site;           /**< where: backtrace lines (or the site hook's text), '\n'-separated */
    const char *from_name;      /**< the locks' names (sync_debug_lock_name), or NULL */
    const char *to_name;
    const char *thread_name;    /**< the thread's name then (sync_debug_thread_name), or NULL */
} sync_lock_order_edge_t;
typedef struct sync_lock_order_edge sync_lock_order_edge SYNC_DEPRECATED("sync_lock_order_edge_t");

/** A potential deadlock: edges[i].to == edges[i + 1].from, and the last edge's to is edges[0].from. */
typedef struct sync_lock_order_cycle {
    size_t length;                        /**< number of edges (and of locks), >= 2 */
    const sync_lock_order_edge_t *edges;
    const char *text;                     /**< the report the default action prints */
} sync_lock_order_cycle_t;
typedef struct sync_lock_order_cycle sync_lock_order_cycle SYNC_DEPRECATED("sync_lock_order_cycle_t");

/**
 * Called once per cycle, in the thread whose lock or wait closed it (holding its locks, but no
 * internal lock of libsync: it may lock and call anything). `cycle` and its strings are valid
 * during the call only.
 */
typedef void (*sync_lock_order_handler_fn)(const sync_lock_order_cycle_t *cycle, void *context);
typedef sync_lock_order_handler_fn sync_lock_order_handler SYNC_DEPRECATED("sync_lock_order_handler_fn");

/** Gives the text of an edge's site: writes at most `size` bytes (no terminator needed) to
 * `buffer` and returns how many; 0 means "use the C backtrace". */
typedef size_t (*sync_lock_order_site_hook_fn)(char *buffer, size_t size, void *context);
typedef sync_lock_order_site_hook_fn sync_lock_order_site_hook SYNC_DEPRECATED("sync_lock_order_site_hook_fn");

#define SYNC_LOCK_ORDER_REPORT 0 /**< sync_debug_lock_order_set_action: report, go on (default) */
#define SYNC_LOCK_ORDER_ABORT 1  /**< report, then abort() */

/** Turns lock-order checking on or off. Orders already recorded stay; locks already held when
 * it is turned on are not on the stacks. Turning it on again after off forgets every thread's
 * stack (at that thread's next lock operation): a lock released while checking was off must not
 * stay on it, so a lock held across the off -> on turn is unknown like one taken before checking
 * was on (its release is ignored, it gives no orders). */
void sync_debug_lock_order(bool on);

/** Whether lock-order checking is on. */
bool sync_debug_lock_order_enabled(void);

/** What a report does after it is delivered: SYNC_LOCK_ORDER_REPORT or SYNC_LOCK_ORDER_ABORT.
 * @return 0, or EINVAL for another value. */
int sync_debug_lock_order_set_action(int action);

/** Delivers reports to `handler` instead of stderr; NULL restores stderr. */
void sync_debug_lock_order_set_handler(sync_lock_order_handler_fn handler, void *context);

/** Describes sites with `hook` (an interpreter's stack) instead of a C backtrace; NULL restores
 * the backtrace. libsync's Python package sets one that gives the Python stack.
 * The hook and the handler run without libsync's internal lock and may take libsync locks; the
 * locks a thread takes or waits for inside them are not checked (not on its stack, no orders),
 * so a hook that locks cannot recurse. Releases inside them are seen as anywhere (a handler may
 * release the thread's locks). */
void sync_debug_lock_order_set_site_hook(sync_lock_order_site_hook_fn hook, void *context);

/** Runs before each `_try_lock_first` attempt while checking is on (sync/locks.h,
 * sync_mutex_try_lock_first): an interpreter binding names the calling thread there
 * (sync_debug_thread_name), so that reports and waits show its name. NULL: none. It runs
 * without libsync's internal lock, as the site hook. */
typedef void (*sync_lock_order_thread_hook_fn)(void *context);
typedef sync_lock_order_thread_hook_fn sync_lock_order_thread_hook SYNC_DEPRECATED("sync_lock_order_thread_hook_fn");
void sync_debug_lock_order_set_thread_hook(sync_lock_order_thread_hook_fn hook, void *context);

/**
 * Forgets the lock at `lock`, its orders and its name (call before freeing the memory of a lock
 * that no init call will reinitialize). The lock may not be held.
 * @return 0, or EINVAL for NULL.
 */
int sync_debug_lock_forget(const void *lock);

/**
 * The calling thread's latest successful trylock of `lock` (still held) was the first attempt of
 * a blocking acquire (an interpreter binding that tries before it waits): it counts as a lock,
 * with the orders from the locks held before it. Does nothing while checking is off.
 * @return 0; EINVAL for NULL; EPERM if the caller holds no trylock of `lock` (checking on).
 */
int sync_debug_lock_order_promote(const void *lock);

/** Forgets every order recorded and every cycle reported (the held locks stay held, and their
 * releases, sync_synchronized_exit included, are still seen; names stay). */
void sync_debug_lock_order_reset(void);

/**
 * Names the lock at `lock` (sync_synchronized: the token) in reports and in the waits dump:
 * `mutex "accounts" 0x...` instead of `mutex 0x...`. `name` is copied (the caller may free it
 * at once); NULL removes the name. A name is kept whether checking is on or off, per process and
 * by address (a lock in shared memory is named in each process that wants it), until the lock is
 * initialized again (sync_*_init), forgotten (sync_debug_lock_forget) or named again.
 * @return 0; EINVAL for a NULL lock, or a name that is empty, not UTF-8, or has a control
 * character (such as a newline).
 */
int sync_debug_lock_name(const void *lock, const char *name);

/**
 * Names the calling thread in reports (the orders it records from now on keep the name) and in
 * the waits dump: `thread 1234 "worker"`. Copied; NULL removes it. Interpreter bindings call it
 * with their thread's name (libsync's Python package does).
 * @return 0; EINVAL for a name that is empty, not UTF-8, or has a control character.
 */
int sync_debug_thread_name(const char *name);

/**
 * Writes, for every thread that holds or waits for a lock (while checking was on), the locks it
 * holds and the lock it waits for with that lock's holders, marking with '*' the threads of a
 * wait-for cycle (a deadlock) and naming the cycle. Like snprintf: writes at most `size` bytes
 * including the terminating NUL (buffer may be NULL if size is 0) and returns the length of the
 * whole text.
 */
size_t sync_debug_format_waits(char *buffer, size_t size);

/** Writes sync_debug_format_waits's text to stderr. @return 0, or the errno of a failed write. */
int sync_debug_dump_waits(void);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_DEBUG_H */
