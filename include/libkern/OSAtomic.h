/*
 * libkern/OSAtomic.h — libsync's drop-in replacement for Apple's header.
 *
 * A C or C++ file written for macOS that includes <libkern/OSAtomic.h> compiles unchanged with
 * `-I <libsync>/include` (or `pkg-config --cflags sync`) and links with `-lsync`.
 *
 * Semantics, as Apple's:
 *   - Arithmetic (Add, Increment, Decrement) returns the NEW value and wraps at the limits
 *     (two's complement).
 *   - Or32/And32/Xor32 return the NEW value; their Orig variants return the OLD value.
 *   - CompareAndSwap takes (old, new, address): if *address == old it stores new; it returns
 *     whether it swapped.
 *   - TestAndSet/TestAndClear use Apple's bit numbering: bit n is (0x80 >> (n & 7)) of the byte
 *     at ((char *)address + (n >> 3)). Bit 0 is the MOST significant bit of the first byte, so
 *     on a little-endian 32-bit integer bit 7 is the value 1 and bit 24 is 0x80000000.
 *     They return the bit's old value.
 *   - Plain functions are atomic but relaxed (no ordering of other memory), like Apple's
 *     inline versions; each Barrier variant is also a full sequentially consistent barrier.
 *
 * Preconditions (there is no error channel, as in Apple's API): every pointer is non-NULL and
 * naturally aligned (4 bytes for 32-bit values, 8 for 64-bit values, pointers and longs; 16 for
 * queue heads). A debug build of libsync traps on a violation with a message naming the
 * function; a release build does not check.
 *
 * Thread safety: every function may be called concurrently from any thread, and on memory shared
 * between processes (mmap, shm), on the same or different addresses.
 */
#ifndef _OSATOMIC_H_
#define _OSATOMIC_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Apple's name for an 8-byte-aligned 64-bit value. */
typedef int64_t OSAtomic_int64_aligned64_t __attribute__((aligned(8)));

/* ---- Arithmetic: return the new value ---------------------------------------------------- */

/** Adds theAmount to *theValue; returns the new value. */
int32_t OSAtomicAdd32(int32_t theAmount, volatile int32_t *theValue);
/** OSAtomicAdd32, and a full memory barrier. */
int32_t OSAtomicAdd32Barrier(int32_t theAmount, volatile int32_t *theValue);
/** Adds 1 to *theValue; returns the new value. */
int32_t OSAtomicIncrement32(volatile int32_t *theValue);
/** OSAtomicIncrement32, and a full memory barrier. */
int32_t OSAtomicIncrement32Barrier(volatile int32_t *theValue);
/** Subtracts 1 from *theValue; returns the new value. */
int32_t OSAtomicDecrement32(volatile int32_t *theValue);
/** OSAtomicDecrement32, and a full memory barrier. */
int32_t OSAtomicDecrement32Barrier(volatile int32_t *theValue);

/** Adds theAmount to *theValue (8-byte aligned); returns the new value. */
int64_t OSAtomicAdd64(int64_t theAmount, volatile OSAtomic_int64_aligned64_t *theValue);
/** OSAtomicAdd64, and a full memory barrier. */
int64_t OSAtomicAdd64Barrier(int64_t theAmount, volatile OSAtomic_int64_aligned64_t *theValue);
/** Adds 1 to *theValue; returns the new value. */
int64_t OSAtomicIncrement64(volatile OSAtomic_int64_aligned64_t *theValue);
/** OSAtomicIncrement64, and a full memory barrier. */
int64_t OSAtomicIncrement64Barrier(volatile OSAtomic_int64_aligned64_t *theValue);
/** Subtracts 1 from *theValue; returns the new value. */
int64_t OSAtomicDecrement64(volatile OSAtomic_int64_aligned64_t *theValue);
/** OSAtomicDecrement64, and a full memory barrier. */
int64_t OSAtomicDecrement64Barrier(volatile OSAtomic_int64_aligned64_t *theValue);

/* ---- Logic on 32 bits: plain forms return the new value, Orig forms the old value -------- */

/** *theValue |= theMask; returns the new value. */
int32_t OSAtomicOr32(uint32_t theMask, volatile uint32_t *theValue);
/** OSAtomicOr32, and a full memory barrier. */
int32_t OSAtomicOr32Barrier(uint32_t theMask, volatile uint32_t *theValue);
/** *theValue |= theMask; returns the OLD value. */
int32_t OSAtomicOr32Orig(uint32_t theMask, volatile uint32_t *theValue);
/** OSAtomicOr32Orig, and a full memory barrier. */
int32_t OSAtomicOr32OrigBarrier(uint32_t theMask, volatile uint32_t *theValue);
/** *theValue &= theMask; returns the new value. */
int32_t OSAtomicAnd32(uint32_t theMask, volatile uint32_t *theValue);
/** OSAtomicAnd32, and a full memory barrier. */
int32_t OSAtomicAnd32Barrier(uint32_t theMask, volatile uint32_t *theValue);
/** *theValue &= theMask; returns the OLD value. */
int32_t OSAtomicAnd32Orig(uint32_t theMask, volatile uint32_t *theValue);
/** OSAtomicAnd32Orig, and a full memory barrier. */
int32_t OSAtomicAnd32OrigBarrier(uint32_t theMask, volatile uint32_t *theValue);
/** *theValue ^= theMask; returns the new value. */
int32_t OSAtomicXor32(uint32_t theMask, volatile uint32_t *theValue);
/** OSAtomicXor32, and a full memory barrier. */
int32_t OSAtomicXor32Barrier(uint32_t theMask, volatile uint32_t *theValue);
/** *theValue ^= theMask; returns the OLD value. */
int32_t OSAtomicXor32Orig(uint32_t theMask, volatile uint32_t *theValue);
/** OSAtomicXor32Orig, and a full memory barrier. */
int32_t OSAtomicXor32OrigBarrier(uint32_t theMask, volatile uint32_t *theValue);

/* ---- Compare and swap: (old, new, address); return whether the swap happened -------------- */

/** If *theValue == oldValue, stores newValue; returns true if it did. */
bool OSAtomicCompareAndSwap32(int32_t oldValue, int32_t newValue, volatile int32_t *theValue);
/** OSAtomicCompareAndSwap32, and a full memory barrier. */
bool OSAtomicCompareAndSwap32Barrier(int32_t oldValue, int32_t newValue, volatile int32_t *theValue);
/** As OSAtomicCompareAndSwap32, on a 64-bit value. */
bool OSAtomicCompareAndSwap64(int64_t oldValue, int64_t newValue, volatile OSAtomic_int64_aligned64_t *theValue);
/** OSAtomicCompareAndSwap64, and a full memory barrier. */
bool OSAtomicCompareAndSwap64Barrier(int64_t oldValue, int64_t newValue, volatile OSAtomic_int64_aligned64_t *theValue);
/** As OSAtomicCompareAndSwap32, on a pointer. */
bool OSAtomicCompareAndSwapPtr(void *oldValue, void *newValue, void *volatile *theValue);
/** OSAtomicCompareAndSwapPtr, and a full memory barrier. */
bool OSAtomicCompareAndSwapPtrBarrier(void *oldValue, void *newValue, void *volatile *theValue);
/** As OSAtomicCompareAndSwap32, on an int. */
bool OSAtomicCompareAndSwapInt(int oldValue, int newValue, volatile int *theValue);
/** OSAtomicCompareAndSwapInt, and a full memory barrier. */
bool OSAtomicCompareAndSwapIntBarrier(int oldValue, int newValue, volatile int *theValue);
/** As OSAtomicCompareAndSwap32, on a long. */
bool OSAtomicCompareAndSwapLong(long oldValue, long newValue, volatile long *theValue);
/** OSAtomicCompareAndSwapLong, and a full memory barrier. */
bool OSAtomicCompareAndSwapLongBarrier(long oldValue, long newValue, volatile long *theValue);

/* ---- Test and set / clear (Apple's bit numbering, see above); return the old bit ---------- */

/** Sets bit n of the bytes at theAddress; returns its old value. */
bool OSAtomicTestAndSet(uint32_t n, volatile void *theAddress);
/** OSAtomicTestAndSet, and a full memory barrier. */
bool OSAtomicTestAndSetBarrier(uint32_t n, volatile void *theAddress);
/** Clears bit n of the bytes at theAddress; returns its old value. */
bool OSAtomicTestAndClear(uint32_t n, volatile void *theAddress);
/** OSAtomicTestAndClear, and a full memory barrier. */
bool OSAtomicTestAndClearBarrier(uint32_t n, volatile void *theAddress);

/* ---- Memory barrier ------------------------------------------------------------------------ */

/** A full barrier: no load or store moves across it, in either direction. */
void OSMemoryBarrier(void);

/* ---- Spin lock ------------------------------------------------------------------------------
 * An int32_t, 0 when free. Unlike Apple's, OSSpinLockLock never spins without bound: it spins
 * briefly, then yields, then sleeps in the kernel until the holder unlocks, so it does not
 * collapse when threads outnumber cores or the holder is descheduled. Not recursive, no owner
 * check (as Apple's). Works between processes when placed in shared memory. Lock and unlock are
 * acquire/release barriers for the memory they protect.
 */
typedef int32_t OSSpinLock;
#define OS_SPINLOCK_INIT 0

/** Takes the lock if free, without blocking; returns true if taken. */
bool OSSpinLockTry(volatile OSSpinLock *lock);
/** Takes the lock, waiting as long as needed (spin briefly, yield, then sleep). */
void OSSpinLockLock(volatile OSSpinLock *lock);
/** Releases the lock, waking one sleeping waiter if any. */
void OSSpinLockUnlock(volatile OSSpinLock *lock);

/* ---- Intrusive queues -------------------------------------------------------------------------
 * Elements are the caller's own structs; `offset` is the byte offset of a `void *` link field
 * inside each element (offsetof(struct elem, link)). An element is in at most one queue at a
 * time. Elements must stay mapped while other threads may still be dequeuing from the queue (a
 * dequeuer may read the link of an element that another thread has just taken), as with Apple's.
 */

/** A lock-free LIFO (stack) head; ABA-safe (a generation count changes with every push/pop). */
typedef volatile struct {
    void *opaque1;
    long opaque2;
} __attribute__((aligned(16))) OSQueueHead;
#define OS_ATOMIC_QUEUE_INIT { NULL, 0 }

/** Pushes new onto list. Lock-free. */
void OSAtomicEnqueue(OSQueueHead *list, void *new_, size_t offset);
/** Pops the most recently pushed element; NULL if empty. Lock-free. */
void *OSAtomicDequeue(OSQueueHead *list, size_t offset);

/** A FIFO head. Head and tail change together under a short internal lock word (opaque3). */
typedef volatile struct {
    void *opaque1;
    void *opaque2;
    int opaque3;
} __attribute__((aligned(16))) OSFifoQueueHead;
#define OS_ATOMIC_FIFO_QUEUE_INIT { NULL, NULL, 0 }

/** Appends new to list. */
void OSAtomicFifoEnqueue(OSFifoQueueHead *list, void *new_, size_t offset);
/** Removes the oldest element; NULL if empty. */
void *OSAtomicFifoDequeue(OSFifoQueueHead *list, size_t offset);

#ifdef __cplusplus
}
#endif
#endif /* _OSATOMIC_H_ */
