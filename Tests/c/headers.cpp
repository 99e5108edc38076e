// Compile-only: the headers from C++ (extern "C"), under -Wall -Wextra -Wpedantic -Werror.
#include <sync.h>
#include <libkern/OSAtomic.h>
#include <os/lock.h>
#include <os/lock_private.h>

static OSSpinLock lock = OS_SPINLOCK_INIT;
static os_unfair_lock unfair = OS_UNFAIR_LOCK_INIT;
static OSQueueHead lifo = OS_ATOMIC_QUEUE_INIT;
static OSFifoQueueHead fifo = OS_ATOMIC_FIFO_QUEUE_INIT;

int headers_compile_cxx();
int headers_compile_cxx() {
    int32_t v = 0;
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
    return OSAtomicIncrement32(&v) + (sync_version() != nullptr);
}
