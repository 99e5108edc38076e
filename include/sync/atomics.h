/*
 * sync/atomics.h — atomic objects and safe sharing:
 *   sync_atomic_bool_t, sync_atomic_int32_t, sync_atomic_int64_t   java.util.concurrent.atomic's vocabulary
 *   sync_atomic_ref_t      an atomic reference with retain/release, lock-free, get returns +1
 *   sync_throttler_t       at most N holders; fail fast or wait with a timeout
 *   sync_autorelease_*     per-thread nestable autorelease pools
 *   sync_dictionary_t      a dictionary whose get returns +1; readers never lock
 *
 * Thread safety: every function may be called from any thread at any time, except the
 * *_init and *_destroy functions, which need the object not to be in use by other threads.
 *
 * Pointers (sync.h's rule): the atomic values and references have no error channel, so a valid,
 * aligned pointer is their precondition (a debug build of the library traps with a message);
 * the throttler, autorelease and dictionary functions return EINVAL for a NULL or misaligned
 * object (queries: 0).
 * Every operation on the atomic values is sequentially consistent (Java's volatile).
 */
#ifndef SYNC_ATOMICS_H
#define SYNC_ATOMICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- AtomicBoolean ------------------------------------------------------------------------- */

/** A bool in one 32-bit word of caller memory (0 or 1). 4 bytes; works in shared memory. */
typedef struct sync_atomic_bool { int32_t value; } sync_atomic_bool_t;
#define SYNC_ATOMIC_BOOL_INIT(v) { (v) ? 1 : 0 }

/** The current value. Inline, as are the other two gets (__inline__: C89 too): a sequentially
 *  consistent load (one mov on x86-64), the same as the library's exported sync_atomic_*_get,
 *  which FFI callers (Python) use. A call would double the cost of a get + compare_and_set loop.
 *  The pointer must be valid and aligned (no debug-build check says so, unlike the exported
 *  functions). */
static __inline__ bool sync_atomic_bool_get(const sync_atomic_bool_t *b) { return __atomic_load_n(&b->value, __ATOMIC_SEQ_CST) != 0; }
/** Stores value. */
void sync_atomic_bool_set(sync_atomic_bool_t *b, bool value);
/** If the value is expected, stores desired and returns true; else returns false
 *  (Objective-C's compareTo:andSetValue:, a semaphore's try-acquire when used as a busy flag). */
bool sync_atomic_bool_compare_and_set(sync_atomic_bool_t *b, bool expected, bool desired);
/** Stores value; returns the previous value. */
bool sync_atomic_bool_get_and_set(sync_atomic_bool_t *b, bool value);

/* ---- AtomicInteger (32 and 64 bits) ---------------------------------------------------------
 * Arithmetic wraps (two's complement). get_and_* return the OLD value, *_and_get the NEW one.
 * Each is one locked instruction (lock xadd / cmpxchg / xchg on x86-64). Caller memory, naturally
 * aligned (4 / 8 bytes); works in memory shared between processes. */

typedef struct sync_atomic_int32 { int32_t value; } sync_atomic_int32_t;
typedef struct sync_atomic_int64 { int64_t value __attribute__((aligned(8))); } sync_atomic_int64_t;
#define SYNC_ATOMIC_INT32_INIT(v) { (v) }
#define SYNC_ATOMIC_INT64_INIT(v) { (v) }

static __inline__ int32_t sync_atomic_int32_get(const sync_atomic_int32_t *i) { return __atomic_load_n(&i->value, __ATOMIC_SEQ_CST); }
void    sync_atomic_int32_set(sync_atomic_int32_t *i, int32_t value);
/** If the value is expected, stores desired and returns true; else false. */
bool    sync_atomic_int32_compare_and_set(sync_atomic_int32_t *i, int32_t expected, int32_t desired);
int32_t sync_atomic_int32_get_and_set(sync_atomic_int32_t *i, int32_t value);
int32_t sync_atomic_int32_get_and_increment(sync_atomic_int32_t *i);
int32_t sync_atomic_int32_get_and_decrement(sync_atomic_int32_t *i);
int32_t sync_atomic_int32_get_and_add(sync_atomic_int32_t *i, int32_t delta);
int32_t sync_atomic_int32_increment_and_get(sync_atomic_int32_t *i);
int32_t sync_atomic_int32_decrement_and_get(sync_atomic_int32_t *i);
int32_t sync_atomic_int32_add_and_get(sync_atomic_int32_t *i, int32_t delta);

static __inline__ int64_t sync_atomic_int64_get(const sync_atomic_int64_t *i) { return __atomic_load_n(&i->value, __ATOMIC_SEQ_CST); }
void    sync_atomic_int64_set(sync_atomic_int64_t *i, int64_t value);
bool    sync_atomic_int64_compare_and_set(sync_atomic_int64_t *i, int64_t expected, int64_t desired);
int64_t sync_atomic_int64_get_and_set(sync_atomic_int64_t *i, int64_t value);
int64_t sync_atomic_int64_get_and_increment(sync_atomic_int64_t *i);
int64_t sync_atomic_int64_get_and_decrement(sync_atomic_int64_t *i);
int64_t sync_atomic_int64_get_and_add(sync_atomic_int64_t *i, int64_t delta);
int64_t sync_atomic_int64_increment_and_get(sync_atomic_int64_t *i);
int64_t sync_atomic_int64_decrement_and_get(sync_atomic_int64_t *i);
int64_t sync_atomic_int64_add_and_get(sync_atomic_int64_t *i, int64_t delta);

/* ---- AtomicReference with retain/release ----------------------------------------------------
 * Holds one object (or NULL) whose lifetime retain and release govern (e.g. CFRetain/CFRelease,
 * your own reference count, Py_IncRef/Py_DecRef). The reference owns +1 on what it holds.
 *
 * sync_atomic_ref_get returns +1 that stays valid even while another thread replaces the
 * object and the reference drops its own +1 (the caller never holds an object freed under it):
 * the caller releases it, or hands it to sync_autorelease. Every retain is balanced by exactly one release.
 *
 * Lock-free on every path (hazard pointers): a reader publishes the object in its own thread's
 * hazard slot, checks the reference still holds it, retains it and clears the slot, writing
 * only its own cache line. A writer that removes an object a reader may be retaining defers its
 * release to the reference's own list, which later writes and destroy retry; so a release may
 * come after the set that caused it, but no later than the next write or destroy once that
 * reader is done. retain runs while the slot is held: it may itself read references (nesting is
 * unbounded). ABA-safe: readers validate after publishing, compare_and_set compares identities.
 * Not for memory shared between processes (function pointers). 32 bytes, 16-byte aligned. */

/** Retains or releases one object. */
typedef void (*sync_object_fn)(void *object);

typedef struct sync_atomic_ref {
    uintptr_t state[2] __attribute__((aligned(16)));
    sync_object_fn retain;
    sync_object_fn release;
} sync_atomic_ref_t;
/** An empty reference; retain and release must not be NULL. */
#define SYNC_ATOMIC_REF_INIT(retain, release) { { 0, 0 }, (retain), (release) }

/** Initializes an empty reference. Returns 0, or EINVAL if r, retain or release is NULL. */
int sync_atomic_ref_init(sync_atomic_ref_t *r, sync_object_fn retain, sync_object_fn release);
/** Releases the object held (if any) and leaves the reference empty (reusable). No other thread
 *  may use r during the call. */
void sync_atomic_ref_destroy(sync_atomic_ref_t *r);
/** The object held, +1 (release it when done), or NULL. */
void *sync_atomic_ref_get(sync_atomic_ref_t *r);
/** Holds object (retained; NULL empties the reference); releases the previous one. */
void sync_atomic_ref_set(sync_atomic_ref_t *r, void *object);
/** Holds object (retained); returns the previous one +1 (the reference's own), or NULL. */
void *sync_atomic_ref_get_and_set(sync_atomic_ref_t *r, void *object);
/** If the object held is expected (by identity; NULL = empty), holds desired instead (retained),
 *  releases expected's +1, and returns true; else returns false and changes nothing. */
bool sync_atomic_ref_compare_and_set(sync_atomic_ref_t *r, void *expected, void *desired);

/* ---- Throttler ------------------------------------------------------------------------------
 * At most `limit` concurrent holders. try_enter fails fast (never blocks); enter may wait with a
 * timeout or a deadline (sync.h's time model). holders never exceeds limit, even transiently, and exit never takes it below zero.
 * Rejections count fail-fast refusals and timed-out waits; a refusal only reads the throttler
 * and bumps the calling thread's own count in thread-local storage (summed, exactly, by
 * sync_throttler_rejections), so refusals on several cores never contend. Caller memory, 24
 * bytes, 8-byte aligned; works in memory shared between processes (each process sums its own
 * threads' refusals, plus every process's timed-out waits). Waiting is not FIFO. None of these
 * functions is async-signal-safe. Memory the library never wrote (limit < 1, or holders outside
 * 0...limit) gets EINVAL from try_enter, the enter forms and exit, which leave it unchanged; so
 * does a NULL or not 8-aligned t (holders and rejections return 0 for it). */

typedef struct sync_throttler {
    int32_t holders;
    int32_t waiters;
    int32_t limit;
    int32_t generation;  /* keys the per-thread rejection counters; 0 for SYNC_THROTTLER_INIT */
    int64_t rejections __attribute__((aligned(8)));
} sync_throttler_t;
/** A throttler admitting `limit` (>= 1) holders. For memory that held an earlier throttler (a
 * stack slot reused), call sync_throttler_init instead: its rejection count then starts at zero
 * (static initializers share generation 0, so they would inherit the earlier one's refusals). */
#define SYNC_THROTTLER_INIT(limit) { 0, 0, (limit), 0, 0 }

/** Initializes t with zero holders and rejections. Returns 0, or EINVAL if t is NULL, not
 *  8-aligned, or limit < 1. In shared memory only the process that creates the throttler calls
 *  it (the others use it as it is): it takes no shared flag, so unlike the locks' inits it cannot
 *  tell a reused stack slot from a throttler in use, and resets the holders of one. */
int sync_throttler_init(sync_throttler_t *t, int32_t limit);
/** Takes a slot if fewer than limit hold one. Returns 0 (admitted: call sync_throttler_exit),
 *  EBUSY (full; counted as a rejection), or EINVAL (see above). Never blocks. */
int sync_throttler_try_enter(sync_throttler_t *t);
/** Takes a slot, waiting up to timeout_ns nanoseconds (< 0: without limit). Returns 0, ETIMEDOUT
 *  (counted as a rejection), EINTR (a signal handler ran; retry with the time left), or EINVAL. */
int sync_throttler_enter(sync_throttler_t *t, int64_t timeout_ns);
/** Takes a slot unless CLOCK_MONOTONIC reaches deadline_ns first (< 0: none, waits until
 *  admitted; at or before now: one try). Retries after a signal. Returns 0, ETIMEDOUT (counted
 *  as a rejection), or EINVAL. */
int sync_throttler_enter_until(sync_throttler_t *t, int64_t deadline_ns);
/** As sync_throttler_enter_until, and returns EINTR (not counted as a rejection) when a signal
 *  handler ran during the wait and, in the process's main thread, at least every 50 ms, so that
 *  a caller such as an interpreter can handle its signals and call again with the same
 *  deadline. Returns 0, ETIMEDOUT (counted), EINTR, or EINVAL. */
int sync_throttler_enter_interruptible(sync_throttler_t *t, int64_t deadline_ns);
/** Gives a slot back. Returns 0, EPERM if no slot is held (nothing changes), or EINVAL. */
int sync_throttler_exit(sync_throttler_t *t);
/** throttledExec: if a slot is free, runs body(context), gives the slot back and
 *  returns true; otherwise (also for a NULL body or an EINVAL throttler) returns false at once. */
bool sync_throttler_exec(sync_throttler_t *t, void (*body)(void *context), void *context);
/** Current holders (0 for a NULL or misaligned t). */
int32_t sync_throttler_holders(const sync_throttler_t *t);
/** Rejections so far (0 for a NULL or misaligned t). */
int64_t sync_throttler_rejections(const sync_throttler_t *t);

/* ---- Autorelease pools (Objective-C's "retain and autorelease") ------------------------------
 * Per thread, nestable. sync_autorelease defers one release(object) until the innermost pool of
 * the calling thread drains, so a value taken from a dictionary or reference (+1) can be used
 * and forgotten. Popping a pool releases its objects in reverse order and closes the pools
 * opened inside it. A thread that exits with pools open drains them (not the main thread when
 * the process ends with exit()). */

/** Opens a pool on the calling thread; returns its token (its depth, >= 1). */
size_t sync_autorelease_pool_push(void);
/** Drains and closes the pool `pool` and those opened inside it. Returns 0, or EINVAL if pool is
 *  not open on the calling thread. */
int sync_autorelease_pool_pop(size_t pool);
/** Pools open on the calling thread. */
size_t sync_autorelease_pool_depth(void);
/** Defers release(object) to the innermost pool. Returns 0; EPERM if no pool is open on this
 *  thread (nothing is taken: the caller still owns the reference and must release it);
 *  EINVAL if release is NULL. */
int sync_autorelease(void *object, sync_object_fn release);

/* ---- Thread-safe dictionary -----------------------------------------------------------------
 * Keys map to objects held with retain/release (the dictionary owns +1 on each value).
 * sync_dictionary_get returns +1 that stays valid after other threads replace or remove the
 * entry. Lock-free: 16 shards, each an immutable flat hash table published like a
 * sync_atomic_ref_t; readers never wait and write no shared memory; a writer copies its shard
 * and publishes the copy with a compare-and-set, retrying on conflict (read-mostly use: a write
 * costs about count/16 entries copied). No lock is held while keys are compared or values
 * released.
 *
 * Keys are byte strings (key, key_length), copied. A dictionary made with
 * sync_dictionary_create_with_object_keys instead takes objects as keys: key is the object
 * (retained while stored), key_length its hash, computed by the caller (equal keys, equal
 * hashes), compare(a, b, context) returns 1 when equal, 0 when not, < 0 on error (not equal). */

typedef struct sync_dictionary sync_dictionary_t;
typedef int (*sync_key_compare_fn)(const void *a, const void *b, void *context);

/** Creates an empty dictionary. Returns 0, or EINVAL if an argument is NULL. */
int sync_dictionary_create(sync_dictionary_t **out, sync_object_fn retain, sync_object_fn release);
/** Creates an empty dictionary with object keys (see above). Returns 0 or EINVAL. */
int sync_dictionary_create_with_object_keys(sync_dictionary_t **out, sync_object_fn retain, sync_object_fn release,
                                            sync_key_compare_fn compare, void *context);
/** Releases every key and value and frees d. No other thread may use d during or after it. */
void sync_dictionary_destroy(sync_dictionary_t *d);
/** Stores value (retained) under key, releasing the value it replaces once no reader uses it.
 *  Returns 0, or EINVAL if d or value is NULL, key is NULL with key_length > 0, or (byte keys)
 *  key_length > PTRDIFF_MAX. */
int sync_dictionary_set(sync_dictionary_t *d, const void *key, size_t key_length, void *value);
/** The value for key, +1 (release or autorelease it), or NULL (absent, or an argument that
 *  set would refuse). */
void *sync_dictionary_get(sync_dictionary_t *d, const void *key, size_t key_length);
/** The value for key +1, or fallback +1 (retained) when absent: NULL only if fallback is NULL. */
void *sync_dictionary_get_or(sync_dictionary_t *d, const void *key, size_t key_length, void *fallback);
/** Removes the entry. Returns 0, ENOENT if there was none, or EINVAL (as set). */
int sync_dictionary_remove(sync_dictionary_t *d, const void *key, size_t key_length);
/** Entries (each shard counted at one instant). */
size_t sync_dictionary_count(sync_dictionary_t *d);
/** Calls each(key, key_length, context) for every key of a snapshot (every key present
 *  throughout the call is visited once); returns how many. The key is valid during the call. */
size_t sync_dictionary_keys(sync_dictionary_t *d, void (*each)(const void *key, size_t key_length, void *context),
                            void *context);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_ATOMICS_H */
