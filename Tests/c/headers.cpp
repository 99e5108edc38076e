// Compile-only: both headers from C++ (extern "C"), under -Wall -Wextra -Wpedantic -Werror.
#include <sync.h>
#include <libkern/OSAtomic.h>

static OSSpinLock lock = OS_SPINLOCK_INIT;
static OSQueueHead lifo = OS_ATOMIC_QUEUE_INIT;
static OSFifoQueueHead fifo = OS_ATOMIC_FIFO_QUEUE_INIT;

int headers_compile_cxx();
int headers_compile_cxx() {
    int32_t v = 0;
    OSSpinLockLock(&lock);
    OSSpinLockUnlock(&lock);
    (void)OSAtomicDequeue(&lifo, 0);
    (void)OSAtomicFifoDequeue(&fifo, 0);
    return OSAtomicIncrement32(&v) + (sync_version() != nullptr);
}
