/* Compile-only: the headers, in C99 and C11, under -Wall -Wextra -Wpedantic -Werror. */
#include <sync.h>
#include <libkern/OSAtomic.h>
#include <os/lock.h>
#include <os/lock_private.h>

static OSSpinLock lock = OS_SPINLOCK_INIT;
static OSQueueHead lifo = OS_ATOMIC_QUEUE_INIT;
static OSFifoQueueHead fifo = OS_ATOMIC_FIFO_QUEUE_INIT;

int headers_compile(void);
int headers_compile(void) {
    int32_t v = 0;
    os_unfair_lock unfair = OS_UNFAIR_LOCK_INIT;   /* C90: {0}; C99 on: Apple's compound literal */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
    unfair = OS_UNFAIR_LOCK_INIT;                  /* so it assigns, as on macOS */
#endif
    OSSpinLockLock(&lock);
    OSSpinLockUnlock(&lock);
    os_unfair_lock_lock(&unfair);
    os_unfair_lock_assert_owner(&unfair);
    os_unfair_lock_unlock(&unfair);
    os_unfair_lock_assert_not_owner(&unfair);
    os_unfair_lock_lock_with_flags(&unfair, OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN);
    os_unfair_lock_unlock(&unfair);
    os_unfair_lock_lock_with_options(&unfair, OS_UNFAIR_LOCK_DATA_SYNCHRONIZATION | OS_UNFAIR_LOCK_ADAPTIVE_SPIN);
    if (os_unfair_lock_trylock(&unfair)) os_unfair_lock_unlock(&unfair);
    os_unfair_lock_unlock(&unfair);
    (void)OSAtomicDequeue(&lifo, 0);
    (void)OSAtomicFifoDequeue(&fifo, 0);
    return OSAtomicIncrement32(&v) + (sync_version() != NULL);
}
