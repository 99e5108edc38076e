/*
 * sync/queues.h — dispatch-style queues, thread executors and isolated values.
 *
 * Work is a function pointer plus a context pointer, as dispatch_sync_f/dispatch_async_f.
 * Every object here is a heap object: create it with *_create (which stores it in *out),
 * release it with *_destroy. All functions are thread-safe; passing an object after its
 * destroy, or destroying it twice, is undefined (as free(3)). A NULL object, work or out
 * pointer returns EINVAL (queries: false), as everywhere in sync.h.
 *
 * Engines: queues are libdispatch queues (the `Dispatch` library shipped with Swift, linked
 * into libsync.so); libsync adds re-entrancy detection (EDEADLK instead of a deadlock). The
 * executor and the isolated value are libsync's own (a pthread with a FIFO; per-thread
 * reader slots and a writer flag, with deferred writes). See docs/queues.md.
 *
 * Re-entrancy: a thread running work of a queue or executor (directly, or through a chain of
 * *_sync calls) that calls *_sync onto that same queue or executor gets EDEADLK and nothing is
 * run: waiting would never end.
 */
#ifndef SYNC_QUEUES_H
#define SYNC_QUEUES_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a name kept for compatibility (CONTRIBUTING.md, "Names"), as in sync/locks.h. */
#ifndef SYNC_DEPRECATED
#define SYNC_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#endif

/** Work for queues and executors: called once with the context given at submission. */
typedef void (*sync_work_fn)(void *context);

/* ---- Queues --------------------------------------------------------------------------- */

/** A serial or concurrent queue (opaque). */
typedef struct sync_queue sync_queue_t;
typedef struct sync_queue sync_queue SYNC_DEPRECATED("sync_queue_t");

/** Work runs one item at a time, in FIFO order. */
#define SYNC_QUEUE_SERIAL 0
/** Plain items may run at the same time; barrier items run alone. */
#define SYNC_QUEUE_CONCURRENT 1

/**
 * Creates a queue of the given kind (SYNC_QUEUE_SERIAL or SYNC_QUEUE_CONCURRENT) and stores
 * it in *out. label (may be NULL) names it for debuggers; it is copied.
 * Returns 0, or EINVAL (out is NULL or kind is unknown).
 */
int sync_queue_create(sync_queue_t **out, const char *label, int kind);

/**
 * Releases the queue. Never waits and never cancels: work already submitted still runs, in
 * order (libdispatch keeps the queue alive until its last item has run), then the queue is
 * freed. To wait for that work first, submit an empty barrier with sync_queue_barrier_sync.
 * May be called from the queue's own work. Returns 0, or EINVAL (queue is NULL).
 */
int sync_queue_destroy(sync_queue_t *queue);

/**
 * Runs work(context) on the queue after the items submitted before it (serial queue) or
 * beside other plain items (concurrent queue), and returns when it has run.
 * Returns 0; EINVAL (queue or work is NULL); EDEADLK (called from work of this queue:
 * nothing is run).
 */
int sync_queue_sync(sync_queue_t *queue, sync_work_fn work, void *context);

/**
 * Submits work(context) and returns at once; it runs on one of libdispatch's threads, after
 * the items submitted before it on a serial queue. Returns 0, or EINVAL (queue or work NULL).
 */
int sync_queue_async(sync_queue_t *queue, sync_work_fn work, void *context);

/**
 * As sync_queue_sync, but the item runs alone: after every item submitted before it has
 * finished, and before any item submitted after it starts (on a serial queue every item is
 * like this). Returns 0, EINVAL or EDEADLK as sync_queue_sync.
 */
int sync_queue_barrier_sync(sync_queue_t *queue, sync_work_fn work, void *context);

/** As sync_queue_async, with the barrier semantics of sync_queue_barrier_sync. */
int sync_queue_barrier_async(sync_queue_t *queue, sync_work_fn work, void *context);

/* ---- Thread executors ------------------------------------------------------------------- */

/** A dedicated thread with a FIFO of work (Cocoa's "perform selector on a thread"; opaque). */
typedef struct sync_executor sync_executor_t;
typedef struct sync_executor sync_executor SYNC_DEPRECATED("sync_executor_t");

/**
 * Starts a thread that runs submitted work one item at a time, in arrival order, and stores
 * the executor in *out. Returns 0; EINVAL (out is NULL); EAGAIN (no thread could be created).
 * The thread blocks asynchronous signals, as libdispatch's workers do (see sync/signals.h).
 */
int sync_executor_create(sync_executor_t **out);

/**
 * Delivers work(context) to the executor's thread and returns at once.
 * Returns 0; EINVAL (executor or work NULL); ECANCELED (the executor is stopped: not run);
 * ESRCH (called in a fork()ed child of the process that created the executor: its thread
 * does not exist here; not run).
 */
int sync_executor_async(sync_executor_t *executor, sync_work_fn work, void *context);

/**
 * Delivers work(context) and returns once the executor's thread has run it.
 * Returns 0; EINVAL; ECANCELED (stopped: not run); EDEADLK (called on the executor's own
 * thread, or from work it is waiting for: not run); ESRCH (in a fork()ed child: not run).
 */
int sync_executor_sync(sync_executor_t *executor, sync_work_fn work, void *context);

/**
 * Stops the executor: it refuses new work (ECANCELED), its thread runs every item already
 * delivered, then exits. Waits for that, except when called on the executor's own thread
 * (the thread then exits after the current item and the rest of the FIFO). Idempotent.
 * In a fork()ed child (no executor thread there) it returns at once, changing nothing.
 * Returns 0, or EINVAL (executor is NULL).
 */
int sync_executor_stop(sync_executor_t *executor);

/**
 * sync_executor_stop, then frees the executor. Returns 0, or EINVAL (executor is NULL).
 */
int sync_executor_destroy(sync_executor_t *executor);

/** Whether the calling thread is the executor's thread (false if executor is NULL). */
bool sync_executor_is_current(sync_executor_t *executor);

/* ---- Isolated values --------------------------------------------------------------------- */

/**
 * A value whose reads run concurrently and whose writes run alone, in issue order (the
 * concurrent queue + barrier property pattern, packaged; opaque). The value is the caller's memory,
 * named by the pointer given at creation; the functions below pass it to the work.
 */
typedef struct sync_isolated sync_isolated_t;
typedef struct sync_isolated sync_isolated SYNC_DEPRECATED("sync_isolated_t");

/** Work on an isolated value: called with the value pointer and the submitted context. */
typedef void (*sync_value_fn)(void *value, void *context);

/** Creates an isolated value for the memory at value (may be NULL) and stores it in *out.
 *  Returns 0, or EINVAL (out is NULL). */
int sync_isolated_create(sync_isolated_t **out, void *value);

/** Frees the isolated value (not the value). No write is ever left pending once every call
 *  on it has returned. Returns 0, or EINVAL (isolated is NULL). */
int sync_isolated_destroy(sync_isolated_t *isolated);

/**
 * Runs work(value, context) on the calling thread, concurrently with other reads, after
 * every write issued before the call. Returns 0, or EINVAL (isolated or work NULL).
 * work must not call the sync_isolated_t functions on the same value.
 */
int sync_isolated_read(sync_isolated_t *isolated, sync_value_fn work, void *context);

/**
 * Issues a write and returns without waiting for it: work(value, context) runs alone, after
 * every write issued before it and before every read or write issued after this call returns.
 * It runs at once on the calling thread when the value is free; otherwise it is queued and
 * run by the thread that frees the value (the last reader or the previous writer), so work
 * may run on any thread that uses the value. Returns 0, or EINVAL.
 */
int sync_isolated_write_async(sync_isolated_t *isolated, sync_value_fn work, void *context);

/**
 * Runs work(value, context) alone on the calling thread, after every write issued before, and
 * returns when it has run: a synchronous write or a read-modify-write. Returns 0, or EINVAL.
 */
int sync_isolated_write_sync(sync_isolated_t *isolated, sync_value_fn work, void *context);

/*
 * The non-blocking halves of sync_isolated_read and sync_isolated_write_async, for bindings
 * that cannot pass work as a callback cheaply (Python uses them for get and set): take the
 * value without waiting, use it on the calling thread, then release it. A try_begin that
 * returns EBUSY took nothing: fall back to sync_isolated_read / sync_isolated_write_async.
 * Releasing may run queued writes on the calling thread, as every release does.
 */

/** Takes a read share unless a writer holds the value or a write is pending.
 *  Returns 0 (taken: call sync_isolated_end_read on this thread), EBUSY, or EINVAL (isolated
 *  is NULL). */
int sync_isolated_try_begin_read(sync_isolated_t *isolated);

/**
 * Releases a read share that the calling thread took with sync_isolated_try_begin_read.
 * Returns 0; EINVAL (isolated is NULL); EPERM (the calling thread holds no share it took so,
 * also while other threads hold shares: nothing changes). Each thread's shares are its own:
 * no thread can release another's.
 */
int sync_isolated_end_read(sync_isolated_t *isolated);

/** Takes the value alone if nobody holds it and no write is pending.
 *  Returns 0 (taken: call sync_isolated_end_write on this thread), EBUSY, or EINVAL. */
int sync_isolated_try_begin_write(sync_isolated_t *isolated);

/** Releases the value that the calling thread took with sync_isolated_try_begin_write.
 *  Returns 0; EINVAL (isolated is NULL); EPERM (the calling thread did not take it so:
 *  nothing changes). */
int sync_isolated_end_write(sync_isolated_t *isolated);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_QUEUES_H */
