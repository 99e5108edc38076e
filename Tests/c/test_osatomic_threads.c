/* Concurrency: threads hammering counters, CAS loops, bit claims, the spin lock (with more
 * threads than cores) and both intrusive queues; every total must be exact, no queue node lost
 * or duplicated. */
#include <libkern/OSAtomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

enum { THREADS = 8, ITERATIONS = 200000, NODES_PER_THREAD = 2000, ROUNDS = 50 };

static void run_threads(void *(*body)(void *)) {
    pthread_t t[THREADS];
    for (intptr_t i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, body, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static volatile int32_t counter32;
static volatile OSAtomic_int64_aligned64_t counter64;
static volatile int32_t cas_counter;
static volatile int32_t barrier_counter;

static void *counters(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS; i++) {
        OSAtomicIncrement32(&counter32);
        OSAtomicAdd64(3, &counter64);
        OSAtomicDecrement64Barrier(&counter64);
        OSAtomicAdd32Barrier(2, &barrier_counter);
        int32_t old;
        do { old = __atomic_load_n(&cas_counter, __ATOMIC_RELAXED); }  /* (a plain read would race) */
        while (!OSAtomicCompareAndSwap32Barrier(old, old + 1, &cas_counter));
    }
    return NULL;
}

/* Each thread claims every bit of a shared bitmap; each bit must be won exactly once. */
enum { BITS = 4096 };
static volatile unsigned char bitmap[BITS / 8];
static volatile int32_t bits_won;
static volatile uint32_t or_mask;

static void *claim_bits(void *arg) {
    intptr_t self = (intptr_t)arg;
    for (uint32_t n = 0; n < BITS; n++)
        if (!OSAtomicTestAndSetBarrier(n, bitmap)) OSAtomicIncrement32(&bits_won);
    OSAtomicOr32(1u << self, &or_mask);
    return NULL;
}

/* A non-atomic counter protected by an OSSpinLock: lost updates would show in the total. */
static OSSpinLock spin = OS_SPINLOCK_INIT;
static long guarded;
static int inside;

static void *spin_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS / 4; i++) {
        OSSpinLockLock(&spin);
        CHECK(++inside == 1);
        guarded++;
        inside--;
        OSSpinLockUnlock(&spin);
    }
    return NULL;
}

/* Queues: every thread pushes its own nodes, then pops whatever it finds and pushes it back,
 * ROUNDS times. At the end each node is in the queue exactly once. */
struct node { void *link; int owner; int index; volatile int32_t held; };
static struct node nodes[THREADS][NODES_PER_THREAD];
static OSQueueHead lifo = OS_ATOMIC_QUEUE_INIT;
static OSFifoQueueHead fifo = OS_ATOMIC_FIFO_QUEUE_INIT;
static int use_fifo;

static void push(struct node *n) {
    if (use_fifo) OSAtomicFifoEnqueue(&fifo, n, offsetof(struct node, link));
    else OSAtomicEnqueue(&lifo, n, offsetof(struct node, link));
}
static struct node *pop(void) {
    return use_fifo ? OSAtomicFifoDequeue(&fifo, offsetof(struct node, link))
                    : OSAtomicDequeue(&lifo, offsetof(struct node, link));
}

static void *queue_worker(void *arg) {
    intptr_t self = (intptr_t)arg;
    for (int i = 0; i < NODES_PER_THREAD; i++) push(&nodes[self][i]);
    for (int r = 0; r < ROUNDS * NODES_PER_THREAD / 10; r++) {
        struct node *batch[10];
        int got = 0;
        for (; got < 10; got++) {
            batch[got] = pop();
            if (!batch[got]) break;
            /* Nobody else may hold this node now: a duplicate pop would show here. */
            CHECK(OSAtomicIncrement32(&batch[got]->held) == 1);
        }
        for (int i = 0; i < got; i++) {
            OSAtomicDecrement32(&batch[i]->held);
            push(batch[i]);
        }
    }
    return NULL;
}

static void check_queue(int fifo_mode) {
    use_fifo = fifo_mode;
    run_threads(queue_worker);
    static char seen[THREADS][NODES_PER_THREAD];
    memset(seen, 0, sizeof seen);
    int count = 0;
    for (struct node *n; (n = pop()) != NULL; count++) {
        int owner = (int)(n - &nodes[0][0]) / NODES_PER_THREAD, index = (int)(n - &nodes[0][0]) % NODES_PER_THREAD;
        CHECK(!seen[owner][index]);
        seen[owner][index] = 1;
    }
    CHECK_EQ(count, THREADS * NODES_PER_THREAD);
}

int main(void) {
    run_threads(counters);
    CHECK_EQ(counter32, THREADS * ITERATIONS);
    CHECK_EQ(counter64, 2LL * THREADS * ITERATIONS);
    CHECK_EQ(barrier_counter, 2 * THREADS * ITERATIONS);
    CHECK_EQ(cas_counter, THREADS * ITERATIONS);

    run_threads(claim_bits);
    CHECK_EQ(bits_won, BITS);
    for (int i = 0; i < BITS / 8; i++) CHECK_EQ(bitmap[i], 0xFF);
    CHECK_EQ(or_mask, (1u << THREADS) - 1);

    run_threads(spin_worker);
    CHECK_EQ(guarded, (long)THREADS * (ITERATIONS / 4));
    CHECK_EQ(spin, 0);

    check_queue(0);
    check_queue(1);
    DONE();
}
