/* Condition variables, conditions (NSCondition) and condition locks (NSConditionLock) through
 * the C ABI: no lost wakeup under stress, broadcast, timeouts, misuse, the seed's listings. */
#define _GNU_SOURCE
#include <sync.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

enum { PRODUCERS = 3, CONSUMERS = 3, PER_PRODUCER = 20000, SLOTS = 8 };

/* A bounded queue guarded by a mutex with two condition variables: every item must be
 * delivered exactly once, and nobody may sleep through the wakeup meant for it. */
static sync_mutex_t qlock = SYNC_MUTEX_INIT;
static sync_cond_t not_empty = SYNC_COND_INIT, not_full = SYNC_COND_INIT;
static int ring[SLOTS], head, count, producers_left = PRODUCERS;
static unsigned char delivered[PRODUCERS * PER_PRODUCER];

static void *producer(void *arg) {
    int base = (int)(intptr_t)arg * PER_PRODUCER;
    for (int i = 0; i < PER_PRODUCER; i++) {
        CHECK_EQ(sync_mutex_lock(&qlock), 0);
        while (count == SLOTS) CHECK_EQ(sync_cond_wait(&not_full, &qlock), 0);
        ring[(head + count++) % SLOTS] = base + i;
        sync_cond_signal(&not_empty);
        CHECK_EQ(sync_mutex_unlock(&qlock), 0);
    }
    sync_mutex_lock(&qlock);
    if (--producers_left == 0) sync_cond_broadcast(&not_empty);
    sync_mutex_unlock(&qlock);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        CHECK_EQ(sync_mutex_lock(&qlock), 0);
        while (count == 0 && producers_left > 0) CHECK_EQ(sync_cond_wait(&not_empty, &qlock), 0);
        if (count == 0) { sync_mutex_unlock(&qlock); return NULL; }
        int item = ring[head];
        head = (head + 1) % SLOTS;
        count--;
        CHECK_EQ(delivered[item]++, 0);
        sync_cond_signal(&not_full);
        CHECK_EQ(sync_mutex_unlock(&qlock), 0);
    }
}

static void no_lost_wakeup(void) {
    pthread_t t[PRODUCERS + CONSUMERS];
    for (intptr_t i = 0; i < CONSUMERS; i++) pthread_create(&t[i], NULL, consumer, NULL);
    for (intptr_t i = 0; i < PRODUCERS; i++) pthread_create(&t[CONSUMERS + i], NULL, producer, (void *)i);
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++) CHECK_EQ(delivered[i], 1);
}

/* Broadcast wakes every waiter; signal wakes at least one. */
static sync_mutex_t m = SYNC_MUTEX_INIT;
static sync_cond_t c = SYNC_COND_INIT;
static int generation, awake, entered;

/* Waits, under m, until `count` waiters have entered: each enters holding m and keeps it until
 * sync_cond_wait releases it, so all of them wait on c once the caller holds m again. */
static void wait_for_waiters(int count) {
    sync_mutex_lock(&m);
    while (entered < count) { sync_mutex_unlock(&m); sched_yield(); sync_mutex_lock(&m); }
}

static void *waiter(void *arg) {
    (void)arg;
    sync_mutex_lock(&m);
    entered++;
    int mine = generation;
    while (generation == mine) CHECK_EQ(sync_cond_wait(&c, &m), 0);
    awake++;
    sync_mutex_unlock(&m);
    return NULL;
}

static void broadcast_and_signal(void) {
    enum { N = 6 };
    pthread_t t[N];
    for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, waiter, NULL);
    wait_for_waiters(N);
    generation++;
    CHECK_EQ(sync_cond_broadcast(&c), 0);
    sync_mutex_unlock(&m);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    CHECK_EQ(awake, N);

    pthread_create(&t[0], NULL, waiter, NULL);
    wait_for_waiters(N + 1);
    generation++;
    CHECK_EQ(sync_cond_signal(&c), 0);
    sync_mutex_unlock(&m);
    pthread_join(t[0], NULL);
    CHECK_EQ(awake, N + 1);
}

static void timeouts_and_misuse(void) {
    sync_mutex_lock(&m);
    int64_t start = sync_monotonic_ns();
    CHECK_EQ(sync_cond_timedwait(&c, &m, 50 * 1000000ULL), ETIMEDOUT);
    int64_t waited = sync_monotonic_ns() - start;
    CHECK(waited >= 50 * 1000000LL && waited < 60000 * 1000000LL);  /* (the upper bound guards a hang) */
    CHECK(sync_mutex_is_owner(&m));                 /* holds the mutex again after a timeout */
    start = sync_monotonic_ns();
    CHECK_EQ(sync_cond_wait_until(&c, &m, start - 1), ETIMEDOUT);
    CHECK(sync_monotonic_ns() - start < 60000 * 1000000LL);  /* returned: a bound, not a time */
    CHECK(sync_mutex_is_owner(&m));
    sync_mutex_unlock(&m);
    CHECK_EQ(sync_cond_wait(&c, &m), EPERM);         /* not holding it: refused, no wait */
    CHECK_EQ(sync_cond_timedwait(&c, &m, 1000000), EPERM);
    CHECK_EQ(sync_cond_wait(NULL, &m), EINVAL);
    CHECK_EQ(sync_cond_init(&c, 8), EINVAL);
    CHECK_EQ(sync_cond_signal(&c), 0);               /* with no waiter: nothing happens */
    CHECK_EQ(sync_mutex_trylock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
}

/* Listings 4-3 and 4-4: a Cocoa condition guarding timeToDoWork. */
static sync_condition_t cocoaCondition = SYNC_CONDITION_INIT;
static int timeToDoWork, workDone;

static void *listing_4_3(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        sync_condition_lock(&cocoaCondition);
        while (timeToDoWork <= 0)
            sync_condition_wait(&cocoaCondition);
        timeToDoWork--;
        workDone++; /* Do real work here. */
        sync_condition_unlock(&cocoaCondition);
    }
    return NULL;
}

static void cocoa_condition(void) {
    pthread_t t;
    pthread_create(&t, NULL, listing_4_3, NULL);
    for (int i = 0; i < 1000; i++) { /* Listing 4-4 */
        sync_condition_lock(&cocoaCondition);
        timeToDoWork++;
        sync_condition_signal(&cocoaCondition);
        sync_condition_unlock(&cocoaCondition);
    }
    pthread_join(t, NULL);
    CHECK_EQ(workDone, 1000);
    CHECK_EQ(timeToDoWork, 0);
    CHECK_EQ(sync_condition_unlock(&cocoaCondition), EPERM);
    CHECK_EQ(sync_condition_wait(&cocoaCondition), EPERM);
    CHECK_EQ(sync_condition_lock(&cocoaCondition), 0);
    CHECK_EQ(sync_condition_lock(&cocoaCondition), EDEADLK);
    CHECK_EQ(sync_condition_timedwait(&cocoaCondition, 1000000), ETIMEDOUT);
    CHECK_EQ(sync_condition_unlock(&cocoaCondition), 0);
}

/* NSConditionLock: ordering by condition value, the seed's producer/consumer, misuse. */
enum { NO_DATA = 0, HAS_DATA = 1, STEPS = 8 };
static sync_condition_lock_t order = SYNC_CONDITION_LOCK_INIT(0);
static int sequence[STEPS], next_slot;

static void *step(void *arg) {
    int64_t mine = (int64_t)(intptr_t)arg;
    CHECK_EQ(sync_condition_lock_lock_when(&order, mine), 0);
    sequence[next_slot++] = (int)mine;
    CHECK_EQ(sync_condition_lock_unlock_with(&order, mine + 1), 0);
    return NULL;
}

static sync_condition_lock_t condLock = SYNC_CONDITION_LOCK_INIT(NO_DATA);
static int queue_items, produced, consumed_total;
enum { TOTAL = 5000 };

static void *seed_producer(void *arg) {
    (void)arg;
    while (produced < TOTAL) {
        sync_condition_lock_lock(&condLock);
        queue_items++; produced++;                     /* Add data to the queue. */
        sync_condition_lock_unlock_with(&condLock, HAS_DATA);
    }
    return NULL;
}

static void *seed_consumer(void *arg) {
    (void)arg;
    for (;;) {
        if (sync_condition_lock_timedlock_when(&condLock, HAS_DATA, 200 * 1000000ULL) == ETIMEDOUT) return NULL;
        queue_items--; consumed_total++;               /* Remove data from the queue. */
        bool isEmpty = queue_items == 0;
        sync_condition_lock_unlock_with(&condLock, isEmpty ? NO_DATA : HAS_DATA);
    }
}

static void condition_lock(void) {
    pthread_t t[STEPS];
    for (intptr_t i = STEPS - 1; i >= 0; i--) pthread_create(&t[i], NULL, step, (void *)i);
    for (int i = 0; i < STEPS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < STEPS; i++) CHECK_EQ(sequence[i], i);
    CHECK_EQ(sync_condition_lock_condition(&order), STEPS);

    pthread_create(&t[0], NULL, seed_consumer, NULL);
    pthread_create(&t[1], NULL, seed_consumer, NULL);
    pthread_create(&t[2], NULL, seed_producer, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    CHECK_EQ(consumed_total, TOTAL);
    CHECK_EQ(queue_items, 0);
    CHECK_EQ(sync_condition_lock_condition(&condLock), NO_DATA);

    int64_t start = sync_monotonic_ns();
    CHECK_EQ(sync_condition_lock_trylock_when(&condLock, HAS_DATA), EBUSY);  /* wrong value */
    CHECK(sync_monotonic_ns() - start < 60000 * 1000000LL);  /* returned: a bound, not a time */
    CHECK_EQ(sync_condition_lock_unlock(&condLock), EPERM);
    CHECK_EQ(sync_condition_lock_trylock_when(&condLock, NO_DATA), 0);
    CHECK_EQ(sync_condition_lock_trylock(&condLock), EBUSY);
    CHECK_EQ(sync_condition_lock_lock(&condLock), EDEADLK);
    CHECK_EQ(sync_condition_lock_unlock_with(&condLock, 42), 0);
    CHECK_EQ(sync_condition_lock_condition(&condLock), 42);
    CHECK_EQ(sync_condition_lock_lock_when_until(&condLock, 7, sync_monotonic_ns()), ETIMEDOUT);
    CHECK_EQ(sync_condition_lock_trylock(&condLock), 0);  /* the timeout left it unlocked */
    CHECK_EQ(sync_condition_lock_unlock(&condLock), 0);
    CHECK_EQ(sync_condition_lock_init(&condLock, 3, 4), EINVAL);
}

int main(void) {
    no_lost_wakeup();
    broadcast_and_signal();
    timeouts_and_misuse();
    cocoa_condition();
    condition_lock();
    DONE();
}
