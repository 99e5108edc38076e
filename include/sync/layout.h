/*
 * sync/layout.h — where the words of the caller-memory primitives keep what a binding may read
 * without a call.
 *
 * A language binding that cannot inline the library's functions (Python's ctypes: a call costs
 * more than the work) may read a few words of a primitive directly, on paths where the answer
 * is usually "nothing to do". sync_layout() reports, from the library's own constants, where
 * those words are and what they hold, so that a binding copies no layout of its own: it asks
 * once (at load) and reads the words as the library defines them.
 *
 * Contracts of these reads: a read is a snapshot; a binding may use it only to skip a call
 * whose result it predicts (notify with no waiter, a once that is done, an event that is set),
 * never to change state. Offsets are in bytes from the start of the primitive's memory, each
 * 4-aligned, of a 32-bit word in native byte order.
 *
 * The words a binding can read without this header's help are part of each primitive's own
 * contract: a private mutex or recursive lock (neither SHARED, ROBUST nor UNOWNED) held by a
 * thread T with no thread waiting holds exactly T's kernel thread id (gettid()) in its first
 * word; sync_mutex_t is that word.
 *
 * Fields are only ever appended: a caller compiled against an older header passes a smaller
 * size and gets the fields it knows.
 */
#ifndef SYNC_LAYOUT_H
#define SYNC_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sync_layout {
    /** The bit of a mutex's first word (sync_mutex_t, sync_recursive_lock_t, sync_robust_mutex_t)
     *  that is set for the lifetime of a robust lock, and never otherwise. */
    uint32_t mutex_robust;
    /** The first word of a private SYNC_MUTEX_UNOWNED mutex that is held with no thread waiting
     *  (any other value: free, waited for, or another mode). */
    uint32_t mutex_unowned_held;
    /** The holder's recursion depth (uint32) in a held sync_recursive_lock_t, and in a held
     *  robust recursive lock (sync_robust_mutex_t). 0 while the lock is free. */
    uint32_t recursive_depth_offset;
    uint32_t robust_recursive_depth_offset;
    /** The word of a sync_cond_t that counts its waiters: 0 in a process-private condition
     *  variable that no thread waits on; the count is (word & cond_waiters_mask). */
    uint32_t cond_waiters_offset;
    uint32_t cond_waiters_mask;
    /** sizeof(sync_cond_waiter_t) (8-byte aligned), and its state word: cond_waiter_idle while
     *  the waiter is in no queue (free to reuse or release without sync_cond_wait_end). */
    uint32_t cond_waiter_size;
    uint32_t cond_waiter_state_offset;
    uint32_t cond_waiter_idle;
    /** The state word of a sync_event_t (the value sync_event_wait_since takes as `since`), and
     *  its bit that is set while the event is set. */
    uint32_t event_state_offset;
    uint32_t event_flag;
    /** The bound of a bounded sync_semaphore_t (uint32; meaningless when not bounded). */
    uint32_t semaphore_limit_offset;
    /** The value of a sync_once_t whose initializer has completed (read with acquire ordering,
     *  the initializer's writes are then visible). */
    uint32_t once_done;
    /** The flags of the lock initializers, as the library defines them (sync/locks.h restates
     *  them: SYNC_MUTEX_SHARED, SYNC_RECURSIVE_LOCK's, SYNC_RWLOCK_SHARED and
     *  SYNC_SPINLOCK_SHARED are lock_shared; SYNC_MUTEX_UNOWNED is lock_unowned;
     *  SYNC_MUTEX_ROBUST is lock_robust). */
    uint32_t lock_shared;
    uint32_t lock_unowned;
    uint32_t lock_robust;
} sync_layout_t;

/**
 * Fills the first `size` bytes of *layout with the library's values (size: sizeof the caller's
 * sync_layout_t). Returns 0, or EINVAL if layout is NULL or size is larger than the library's
 * sync_layout_t (a header newer than the library; nothing is written) or not a multiple of 4.
 * Thread-safe.
 */
int sync_layout(sync_layout_t *layout, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_LAYOUT_H */
