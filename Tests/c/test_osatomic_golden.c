/* Golden values for every OSAtomic function, plain and Barrier: new vs old return values, CAS
 * argument order, Apple's bit numbering (with the most significant bits of 32- and 64-bit
 * values), wrap-around at the limits, and Listing 4-1 of Apple's Threading Programming Guide. */
#include <libkern/OSAtomic.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

/* Each golden check runs against the plain and the Barrier variant: same results. */
#define BOTH(macro, name) macro(name) macro(name##Barrier)

#define ARITH32(fn) { \
    int32_t v = 5; CHECK_EQ(fn(3, &v), 8); CHECK_EQ(v, 8); \
    v = INT32_MAX; CHECK_EQ(fn(1, &v), INT32_MIN); \
    v = INT32_MIN; CHECK_EQ(fn(-1, &v), INT32_MAX); }
#define INC32(fn) { int32_t v = 41; CHECK_EQ(fn(&v), 42); CHECK_EQ(v, 42); \
    v = INT32_MAX; CHECK_EQ(fn(&v), INT32_MIN); }
#define DEC32(fn) { int32_t v = 43; CHECK_EQ(fn(&v), 42); CHECK_EQ(v, 42); \
    v = INT32_MIN; CHECK_EQ(fn(&v), INT32_MAX); }
#define ARITH64(fn) { \
    int64_t v = 5; CHECK_EQ(fn(3, &v), 8); \
    v = (int64_t)1 << 40; CHECK_EQ(fn(1, &v), ((int64_t)1 << 40) + 1); \
    v = INT64_MAX; CHECK(fn(1, &v) == INT64_MIN); \
    v = INT64_MIN; CHECK(fn(-1, &v) == INT64_MAX); }
#define INC64(fn) { int64_t v = INT64_MAX; CHECK(fn(&v) == INT64_MIN); CHECK(v == INT64_MIN); \
    v = 0xFFFFFFFF; CHECK(fn(&v) == 0x100000000LL); }
#define DEC64(fn) { int64_t v = INT64_MIN; CHECK(fn(&v) == INT64_MAX); \
    v = 0x100000000LL; CHECK(fn(&v) == 0xFFFFFFFFLL); }

/* Logic: plain forms return the new value, Orig forms the old value. */
#define OR32(fn)      { uint32_t v = 0x0F; CHECK_EQ(fn(0xF0, &v), 0xFF); CHECK_EQ(v, 0xFF); \
                        v = 1; CHECK_EQ(fn(0x80000000u, &v), (int32_t)0x80000001u); }
#define OR32ORIG(fn)  { uint32_t v = 0x0F; CHECK_EQ(fn(0xF0, &v), 0x0F); CHECK_EQ(v, 0xFF); }
#define AND32(fn)     { uint32_t v = 0xFF; CHECK_EQ(fn(0x3C, &v), 0x3C); CHECK_EQ(v, 0x3C); \
                        v = 0xFFFFFFFFu; CHECK_EQ(fn(0x80000000u, &v), INT32_MIN); }
#define AND32ORIG(fn) { uint32_t v = 0xFF; CHECK_EQ(fn(0x3C, &v), 0xFF); CHECK_EQ(v, 0x3C); }
#define XOR32(fn)     { uint32_t v = 0xFF; CHECK_EQ(fn(0x0F, &v), 0xF0); CHECK_EQ(v, 0xF0); }
#define XOR32ORIG(fn) { uint32_t v = 0xFF; CHECK_EQ(fn(0x0F, &v), 0xFF); CHECK_EQ(v, 0xF0); \
                        v = 0; CHECK_EQ(fn(0xFFFFFFFFu, &v), 0); CHECK_EQ(v, 0xFFFFFFFFu); }

/* CAS: (old, new, address); swaps only when *address == old. */
#define CAS(fn, T, a, b, c) { T v = a; \
    CHECK(fn(a, b, &v)); CHECK(v == b); \
    CHECK(!fn(a, c, &v)); CHECK(v == b); }
#define CAS32(fn)   CAS(fn, int32_t, 256, 512, 1024) CAS(fn, int32_t, INT32_MIN, INT32_MAX, 0)
#define CAS64(fn)   CAS(fn, int64_t, (int64_t)1 << 40, INT64_MIN, 7)
#define CASINT(fn)  CAS(fn, int, -1, 1, 2)
#define CASLONG(fn) CAS(fn, long, (long)1 << 62, -3L, 4L)
#define CASPTR(fn)  { int a, b; void *p = &a; CHECK(fn(&a, &b, &p)); CHECK(p == &b); \
                      CHECK(!fn(&a, NULL, &p)); CHECK(p == &b); CHECK(fn(&b, NULL, &p)); CHECK(p == NULL); }

/* Test-and-set/clear with Apple's numbering: bit n is 0x80 >> (n & 7) of byte n >> 3. */
#define TAS(fn) { \
    int32_t v = 0; \
    CHECK(!fn(0, &v)); CHECK_EQ(v, 128); CHECK(fn(0, &v)); CHECK_EQ(v, 128); \
    v = 0; CHECK(!fn(7, &v)); CHECK_EQ(v, 1); \
    v = 0; CHECK(!fn(15, &v)); CHECK_EQ(v, 256); \
    v = 0; CHECK(!fn(24, &v)); CHECK_EQ((uint32_t)v, 0x80000000u); \
    int64_t w = 0; CHECK(!fn(56, &w)); CHECK((uint64_t)w == 0x8000000000000000ull); \
    w = 0; CHECK(!fn(63, &w)); CHECK((uint64_t)w == 0x0100000000000000ull); \
    unsigned char bytes[16] = {0}; CHECK(!fn(127, bytes)); CHECK_EQ(bytes[15], 1); }
#define TAC(fn) { \
    int32_t v = -1; \
    CHECK(fn(0, &v)); CHECK_EQ((uint32_t)v, 0xFFFFFF7Fu); CHECK(!fn(0, &v)); \
    v = 1; CHECK(fn(7, &v)); CHECK_EQ(v, 0); \
    v = INT32_MIN; CHECK(fn(24, &v)); CHECK_EQ(v, 0); \
    int64_t w = INT64_MIN; CHECK(fn(56, &w)); CHECK(w == 0); }

static void listing_4_1(void) {
    /* Listing 4-1, exactly as Apple prints it. */
    int32_t theValue = 0;
    OSAtomicTestAndSet(0, &theValue);
    CHECK_EQ(theValue, 128); /* theValue is now 128. */
    theValue = 0;
    OSAtomicTestAndSet(7, &theValue);
    CHECK_EQ(theValue, 1); /* theValue is now 1. */
    theValue = 0;
    OSAtomicTestAndSet(15, &theValue);
    CHECK_EQ(theValue, 256); /* theValue is now 256. */
    OSAtomicCompareAndSwap32(256, 512, &theValue);
    CHECK_EQ(theValue, 512); /* theValue is now 512. */
    OSAtomicCompareAndSwap32(256, 1024, &theValue);
    CHECK_EQ(theValue, 512); /* theValue is still 512. */
}

struct node { int value; void *link; };

static void queues(void) {
    OSQueueHead lifo = OS_ATOMIC_QUEUE_INIT;
    OSFifoQueueHead fifo = OS_ATOMIC_FIFO_QUEUE_INIT;
    struct node n[3] = {{1, NULL}, {2, NULL}, {3, NULL}};
    size_t off = offsetof(struct node, link);
    CHECK(OSAtomicDequeue(&lifo, off) == NULL);
    for (int i = 0; i < 3; i++) OSAtomicEnqueue(&lifo, &n[i], off);
    for (int i = 2; i >= 0; i--) CHECK(OSAtomicDequeue(&lifo, off) == &n[i]);
    CHECK(OSAtomicDequeue(&lifo, off) == NULL);

    CHECK(OSAtomicFifoDequeue(&fifo, off) == NULL);
    for (int i = 0; i < 3; i++) OSAtomicFifoEnqueue(&fifo, &n[i], off);
    CHECK(OSAtomicFifoDequeue(&fifo, off) == &n[0]);
    OSAtomicFifoEnqueue(&fifo, &n[0], off);
    CHECK(OSAtomicFifoDequeue(&fifo, off) == &n[1]);
    CHECK(OSAtomicFifoDequeue(&fifo, off) == &n[2]);
    CHECK(OSAtomicFifoDequeue(&fifo, off) == &n[0]);
    CHECK(OSAtomicFifoDequeue(&fifo, off) == NULL);
    CHECK(sizeof(OSQueueHead) == 16 && _Alignof(OSQueueHead) == 16);
    CHECK(sizeof(OSFifoQueueHead) == 32 && _Alignof(OSFifoQueueHead) == 16);
}

static void spin_lock(void) {
    OSSpinLock lock = OS_SPINLOCK_INIT;
    CHECK(OSSpinLockTry(&lock));
    CHECK(lock != 0);
    CHECK(!OSSpinLockTry(&lock));
    OSSpinLockUnlock(&lock);
    CHECK_EQ(lock, 0);
    OSSpinLockLock(&lock);
    CHECK(!OSSpinLockTry(&lock));
    OSSpinLockUnlock(&lock);
    CHECK(OSSpinLockTry(&lock));
    OSSpinLockUnlock(&lock);
}

int main(void) {
    BOTH(ARITH32, OSAtomicAdd32) BOTH(INC32, OSAtomicIncrement32) BOTH(DEC32, OSAtomicDecrement32)
    BOTH(ARITH64, OSAtomicAdd64) BOTH(INC64, OSAtomicIncrement64) BOTH(DEC64, OSAtomicDecrement64)
    BOTH(OR32, OSAtomicOr32) BOTH(OR32ORIG, OSAtomicOr32Orig)
    BOTH(AND32, OSAtomicAnd32) BOTH(AND32ORIG, OSAtomicAnd32Orig)
    BOTH(XOR32, OSAtomicXor32) BOTH(XOR32ORIG, OSAtomicXor32Orig)
    BOTH(CAS32, OSAtomicCompareAndSwap32) BOTH(CAS64, OSAtomicCompareAndSwap64)
    BOTH(CASINT, OSAtomicCompareAndSwapInt) BOTH(CASLONG, OSAtomicCompareAndSwapLong)
    BOTH(CASPTR, OSAtomicCompareAndSwapPtr)
    BOTH(TAS, OSAtomicTestAndSet) BOTH(TAC, OSAtomicTestAndClear)
    OSMemoryBarrier();
    listing_4_1();
    queues();
    spin_lock();
    DONE();
}
