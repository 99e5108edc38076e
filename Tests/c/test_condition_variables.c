/* Condition variables, conditions (NSCondition) and condition locks (NSConditionLock) through
 * the C ABI: no lost wakeup under stress, broadcast, timeouts, misuse, the seed's listings. */
#define _GNU_SOURCE
#include <sync.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
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

/* Broadcast wakes every waiter; signal wakes one. */
static sync_mutex_t m = SYNC_MUTEX_INIT;
static sync_cond_t c = SYNC_COND_INIT;
static int generation, awake, ready;

static void *waiter(void *arg) {
    (void)arg;
    sync_mutex_lock(&m);
    int mine = generation;
    ready++;                                  /* under m: waiting once m is released */
    while (generation == mine) CHECK_EQ(sync_cond_wait(&c, &m), 0);
    awake++;
    sync_mutex_unlock(&m);
    return NULL;
}

static void wait_ready(int count) {
    for (;;) {
        sync_mutex_lock(&m);
        if (ready == count) return;           /* holding m */
        sync_mutex_unlock(&m);
        usleep(1000);
    }
}

static void broadcast_and_signal(void) {
    enum { N = 6 };
    pthread_t t[N];
    for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, waiter, NULL);
    wait_ready(N);
    generation++;
    CHECK_EQ(sync_cond_broadcast(&c), 0);
    sync_mutex_unlock(&m);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    CHECK_EQ(awake, N);

    pthread_create(&t[0], NULL, waiter, NULL);
    wait_ready(N + 1);
    generation++;
    CHECK_EQ(sync_cond_signal(&c), 0);
    sync_mutex_unlock(&m);
    pthread_join(t[0], NULL);
    CHECK_EQ(awake, N + 1);
}

static void timeouts_and_misuse(void) {
    sync_mutex_lock(&m);
    int64_t start = sync_monotonic_ns();
    CHECK_EQ(sync_cond_wait_timed(&c, &m, 50 * 1000000ULL), ETIMEDOUT);
    int64_t waited = sync_monotonic_ns() - start;
    CHECK(waited >= 50 * 1000000LL && waited < 60000 * 1000000LL);  /* (the upper bound guards a hang) */
    CHECK(sync_mutex_is_owner(&m));                 /* holds the mutex again after a timeout */
    start = sync_monotonic_ns();
    CHECK_EQ(sync_cond_wait_until(&c, &m, start - 1), ETIMEDOUT);
    CHECK(sync_monotonic_ns() - start < 60000 * 1000000LL);  /* returned: a bound, not a time */
    CHECK(sync_mutex_is_owner(&m));
    sync_mutex_unlock(&m);
    CHECK_EQ(sync_cond_wait(&c, &m), EPERM);         /* not holding it: refused, no wait */
    CHECK_EQ(sync_cond_wait_timed(&c, &m, 1000000), EPERM);
    CHECK_EQ(sync_cond_wait(NULL, &m), EINVAL);
    CHECK_EQ(sync_cond_init(&c, 8), EINVAL);
    CHECK_EQ(sync_cond_signal(&c), 0);               /* with no waiter: nothing happens */
    CHECK_EQ(sync_mutex_try_lock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
}

/* Listings 4-3 and 4-4: a Cocoa condition guarding timeToDoWork. */
static sync_condition_t cocoaCondition = SYNC_CONDITION_INIT;
static int timeToDoWork, workDone;

static void *listing_4_3(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        sync_condition_enter(&cocoaCondition);
        while (timeToDoWork <= 0)
            sync_condition_wait(&cocoaCondition);
        timeToDoWork--;
        workDone++; /* Do real work here. */
        sync_condition_exit(&cocoaCondition);
    }
    return NULL;
}

static void cocoa_condition(void) {
    pthread_t t;
    pthread_create(&t, NULL, listing_4_3, NULL);
    for (int i = 0; i < 1000; i++) { /* Listing 4-4 */
        sync_condition_enter(&cocoaCondition);
        timeToDoWork++;
        sync_condition_signal(&cocoaCondition);
        sync_condition_exit(&cocoaCondition);
    }
    pthread_join(t, NULL);
    CHECK_EQ(workDone, 1000);
    CHECK_EQ(timeToDoWork, 0);
    CHECK_EQ(sync_condition_exit(&cocoaCondition), EPERM);
    CHECK_EQ(sync_condition_wait(&cocoaCondition), EPERM);
    CHECK_EQ(sync_condition_enter(&cocoaCondition), 0);
    CHECK_EQ(sync_condition_enter(&cocoaCondition), EDEADLK);
    CHECK_EQ(sync_condition_wait_timed(&cocoaCondition, 1000000), ETIMEDOUT);
    CHECK_EQ(sync_condition_exit(&cocoaCondition), 0);
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
        if (sync_condition_lock_lock_when_timed(&condLock, HAS_DATA, 200 * 1000000ULL) == ETIMEDOUT) return NULL;
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
    CHECK_EQ(sync_condition_lock_try_lock_when(&condLock, HAS_DATA), EBUSY);  /* wrong value */
    CHECK(sync_monotonic_ns() - start < 60000 * 1000000LL);  /* returned: a bound, not a time */
    CHECK_EQ(sync_condition_lock_unlock(&condLock), EPERM);
    CHECK_EQ(sync_condition_lock_try_lock_when(&condLock, NO_DATA), 0);
    CHECK_EQ(sync_condition_lock_try_lock(&condLock), EBUSY);
    CHECK_EQ(sync_condition_lock_lock(&condLock), EDEADLK);
    CHECK_EQ(sync_condition_lock_unlock_with(&condLock, 42), 0);
    CHECK_EQ(sync_condition_lock_condition(&condLock), 42);
    CHECK_EQ(sync_condition_lock_lock_when_until(&condLock, 7, sync_monotonic_ns()), ETIMEDOUT);
    CHECK_EQ(sync_condition_lock_try_lock(&condLock), 0);  /* the timeout left it unlocked */
    CHECK_EQ(sync_condition_lock_unlock(&condLock), 0);
    CHECK_EQ(sync_condition_lock_init(&condLock, 3, 4), EINVAL);
}

/* Polls `cond` (an observable state) until it holds; the bound only guards against a hang. */
#define WAIT_UNTIL(cond) do { \
    int64_t until_ = sync_monotonic_ns() + 30 * 1000000000LL; \
    while (!(cond)) { CHECK(sync_monotonic_ns() < until_); usleep(1000); } } while (0)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_SEQ_CST)

/* A waiter blocked across many 50 ms slices returns only when signalled. The main thread waits
 * in slices (sync_cond_wait_interruptible returns EINTR at each slice's end); three older
 * waiters are signalled (signal_count 3: exactly them, oldest first); the main thread must go on
 * slicing, never returning 0, until the conductor's own signal. */
static sync_mutex_t sm = SYNC_MUTEX_INIT;
static sync_cond_t sc = SYNC_COND_INIT;
static int sliced_queued, sliced_others_woken, sliced_slices, sliced_done;

static int locked_read(int *value) {
    sync_mutex_lock(&sm);
    int result = *value;
    sync_mutex_unlock(&sm);
    return result;
}

static void *sliced_other(void *arg) {
    (void)arg;
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    sliced_queued++;                                 /* under sm: queued once sm is released */
    CHECK_EQ(sync_cond_wait(&sc, &sm), 0);
    ADD(sliced_others_woken, 1);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    return NULL;
}

static void *sliced_conductor(void *arg) {
    (void)arg;
    WAIT_UNTIL(LOAD(sliced_slices) >= 2);
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    CHECK_EQ(sync_cond_signal_count(&sc, 3), 0);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    WAIT_UNTIL(LOAD(sliced_others_woken) == 3);
    int seen = LOAD(sliced_slices);
    WAIT_UNTIL(LOAD(sliced_slices) >= seen + 3);     /* three more slices, none a wakeup */
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    sliced_done = 1;
    CHECK_EQ(sync_cond_signal(&sc), 0);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    return NULL;
}

static void slices_are_not_wakeups(void) {
    pthread_t others[3], conductor;
    for (int i = 0; i < 3; i++) pthread_create(&others[i], NULL, sliced_other, NULL);
    WAIT_UNTIL(locked_read(&sliced_queued) == 3);
    CHECK_EQ(sync_mutex_lock(&sm), 0);               /* queued after the three */
    pthread_create(&conductor, NULL, sliced_conductor, NULL);
    for (;;) {                                       /* the main thread: it slices */
        int result = sync_cond_wait_interruptible(&sc, &sm, -1);
        CHECK(sync_mutex_is_owner(&sm));
        if (result == 0) break;
        CHECK_EQ(result, EINTR);
        ADD(sliced_slices, 1);
    }
    CHECK_EQ(sliced_done, 1);                        /* woken by the last signal, not before */
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    pthread_join(conductor, NULL);
    for (int i = 0; i < 3; i++) pthread_join(others[i], NULL);
    CHECK_EQ(sliced_others_woken, 3);
}

/* Exactness with many waiters: signal_count(k) wakes exactly k of N (the rest stay queued, in
 * the waiter count), broadcast the rest; a waiter that queues after a signal is not woken by it. */
enum { MANY = 500 };
static int many_queued, many_woken;

static void *many_waiter(void *arg) {
    (void)arg;
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    many_queued++;
    CHECK_EQ(sync_cond_wait(&sc, &sm), 0);
    many_woken++;
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    return NULL;
}

static void many_waiters_partial_signals(void) {
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    static pthread_t t[MANY];
    for (int i = 0; i < MANY; i++) CHECK_EQ(pthread_create(&t[i], &small, many_waiter, NULL), 0);
    WAIT_UNTIL(locked_read(&many_queued) == MANY);
    int expected = 0;
    for (uint32_t k = 1; k <= 64; k *= 2) {
        CHECK_EQ(sync_mutex_lock(&sm), 0);
        CHECK_EQ(sync_cond_signal_count(&sc, k), 0);
        CHECK_EQ(sc._waiters, (uint32_t)(MANY - expected - (int)k));   /* exactly k left the queue */
        CHECK_EQ(sync_mutex_unlock(&sm), 0);
        expected += (int)k;
        WAIT_UNTIL(locked_read(&many_woken) == expected);
    }
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    CHECK_EQ(sync_cond_broadcast(&sc), 0);
    CHECK_EQ(sc._waiters, 0u);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    for (int i = 0; i < MANY; i++) pthread_join(t[i], NULL);
    CHECK_EQ(many_woken, MANY);
    pthread_attr_destroy(&small);
}

/* The waits that span several calls (interpreters): a signal between two calls is kept; giving
 * up takes the mutex again; misuse is refused. */
static void waits_that_span_calls(void) {
    sync_cond_waiter_t w = SYNC_COND_WAITER_INIT;
    CHECK_EQ(sync_cond_wait_sleep(&w, 0), EINVAL);   /* idle */
    CHECK_EQ(sync_cond_wait_end(&w), EINVAL);
    CHECK_EQ(sync_cond_wait_begin(&sc, &w), 0);
    CHECK_EQ(sync_cond_wait_begin(&sc, &w), EINVAL); /* not idle */
    CHECK_EQ(sync_cond_wait_sleep(&w, -1), EINTR);   /* the main thread: a slice's end */
    CHECK_EQ(sync_cond_signal(&sc), 0);              /* between two slices */
    CHECK_EQ(sync_cond_wait_sleep(&w, -1), 0);
    CHECK_EQ(sync_cond_wait_end(&w), 0);
    CHECK_EQ(sync_cond_wait_begin(&sc, &w), 0);      /* idle again */
    CHECK_EQ(sync_cond_wait_sleep(&w, sync_monotonic_ns() + 1000000), ETIMEDOUT);
    CHECK_EQ(sync_cond_wait_end(&w), ETIMEDOUT);
    CHECK_EQ(sc._waiters, 0u);

    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, -1), EPERM);      /* not holding sm */
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, -1), EINTR);
    CHECK(!sync_mutex_is_owner(&sm));                                  /* released meanwhile */
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    CHECK_EQ(sync_cond_signal(&sc), 0);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, -1), 0);          /* the kept signal */
    CHECK(sync_mutex_is_owner(&sm));
    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, -1), EINTR);
    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, 0), ETIMEDOUT);   /* giving up */
    CHECK(sync_mutex_is_owner(&sm));
    sync_cond_t other = SYNC_COND_INIT;
    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, -1), EINTR);
    CHECK_EQ(sync_cond_wait_resumable(&other, &sm, &w, -1), EINVAL);  /* another variable's waiter */
    CHECK_EQ(sync_cond_wait_resumable(&sc, &sm, &w, 0), ETIMEDOUT);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);

    sync_recursive_lock_t r = { 0, 0 };
    CHECK_EQ(sync_cond_wait_recursive_resumable(&sc, &r, &w, -1), EPERM);
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_cond_wait_recursive_resumable(&sc, &r, &w, -1), EINTR);
    CHECK_EQ(sync_recursive_lock_depth(&r), 0u);
    CHECK_EQ(sync_cond_signal(&sc), 0);
    CHECK_EQ(sync_cond_wait_recursive_resumable(&sc, &r, &w, -1), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r), 2u);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    sync_cond_waiter_t *misaligned = (sync_cond_waiter_t *)((char *)&w + 4);
    CHECK_EQ(sync_cond_wait_begin(&sc, misaligned), EINVAL);
}

/* fork(): the child's thread continues the forking thread, so it still holds the process-private
 * locks that thread held (it may unlock them, and wait on a condition with them); a lock in
 * shared memory stays the parent's, and a private robust lock is a dead holder's in the child
 * (the owner checks of tracked words never accept an ancestor's id). */
static void fork_keeps_the_forking_threads_locks(void) {
    sync_recursive_lock_t r = { 0, 0 };
    sync_mutex_t mine = SYNC_MUTEX_INIT;
    sync_robust_mutex_t robust, robust_recursive;
    sync_mutex_t *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    CHECK_EQ(sync_mutex_init(shared, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_mutex_init(&robust.mutex, SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(sync_recursive_lock_init(&robust_recursive.recursive, SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_mutex_lock(&mine), 0);
    CHECK_EQ(sync_mutex_lock(shared), 0);
    CHECK_EQ(sync_mutex_lock(&robust.mutex), 0);
    CHECK_EQ(sync_recursive_lock_lock(&robust_recursive.recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&robust_recursive.recursive), 0);
    pid_t child = fork();
    if (child == 0) {
        int ok = sync_recursive_lock_depth(&r) == 2 && sync_mutex_is_owner(&mine)
            && sync_mutex_lock(&mine) == EDEADLK
            /* the word still names the parent's thread: deeper, and back, through it */
            && sync_recursive_lock_lock(&r) == 0 && sync_recursive_lock_try_lock(&r) == 0
            && sync_recursive_lock_depth(&r) == 4
            && sync_recursive_lock_unlock(&r) == 0 && sync_recursive_lock_unlock(&r) == 0
            && sync_cond_wait_recursive_interruptible(&sc, &r, 0) == ETIMEDOUT
            && sync_recursive_lock_depth(&r) == 2
            && sync_recursive_lock_unlock(&r) == 0 && sync_recursive_lock_unlock(&r) == 0
            && sync_recursive_lock_unlock(&r) == EPERM
            && sync_mutex_unlock(&mine) == 0 && sync_mutex_unlock(&mine) == EPERM
            && sync_mutex_unlock(shared) == EPERM && sync_mutex_try_lock(shared) == EBUSY
            && sync_mutex_is_owner(shared) == 0;
        /* Robust: not the child's (no owner, EPERM, no EDEADLK); its next locker is told. */
        ok = ok && sync_mutex_is_owner(&robust.mutex) == 0 && sync_mutex_unlock(&robust.mutex) == EPERM
            && sync_cond_wait_interruptible(&sc, &robust.mutex, 0) == EPERM
            && sync_mutex_lock(&robust.mutex) == EOWNERDEAD && sync_mutex_consistent(&robust.mutex) == 0
            && sync_mutex_unlock(&robust.mutex) == 0;
        ok = ok && sync_recursive_lock_depth(&robust_recursive.recursive) == 0
            && sync_recursive_lock_unlock(&robust_recursive.recursive) == EPERM
            && sync_recursive_lock_try_lock(&robust_recursive.recursive) == EOWNERDEAD
            && sync_recursive_lock_depth(&robust_recursive.recursive) == 1
            && sync_recursive_lock_consistent(&robust_recursive.recursive) == 0
            && sync_recursive_lock_unlock(&robust_recursive.recursive) == 0;
        _exit(ok ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(sync_recursive_lock_depth(&r), 2u);    /* the parent's hold is its own */
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_mutex_unlock(&mine), 0);
    CHECK_EQ(sync_mutex_unlock(shared), 0);
    CHECK_EQ(sync_mutex_unlock(&robust.mutex), 0);
    CHECK_EQ(sync_recursive_lock_depth(&robust_recursive.recursive), 2u);
    CHECK_EQ(sync_recursive_lock_unlock(&robust_recursive.recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&robust_recursive.recursive), 0);
    munmap(shared, sizeof *shared);
}

/* Robust locks through the exact (queued) waits of a process-private condition variable: taking
 * the lock back after the wait passes EOWNERDEAD on (held, a recursive lock at its former depth)
 * and ENOTRECOVERABLE (not held, no depth), in every form. The waiter is not the main thread, so
 * that its wait is one piece (no slice ends). */
enum { ROBUST_WAIT, ROBUST_RESUMABLE, ROBUST_RECURSIVE_RESUMABLE, ROBUST_RECURSIVE_INTERRUPTIBLE };
static sync_robust_mutex_t robust_lock;
static sync_cond_t robust_cv = SYNC_COND_INIT;
static int robust_form, robust_holding;
struct robust_outcome { int waited, owner; uint32_t depth; };

static int robust_recursive(void) { return robust_form >= ROBUST_RECURSIVE_RESUMABLE; }
static int robust_take(void) {
    return robust_recursive() ? sync_recursive_lock_lock(&robust_lock.recursive) : sync_mutex_lock(&robust_lock.mutex);
}
static int robust_give(void) {
    return robust_recursive() ? sync_recursive_lock_unlock(&robust_lock.recursive) : sync_mutex_unlock(&robust_lock.mutex);
}

static void *robust_waiter(void *arg) {
    struct robust_outcome *out = arg;
    sync_cond_waiter_t w = SYNC_COND_WAITER_INIT;
    CHECK_EQ(robust_take(), 0);
    if (robust_recursive()) CHECK_EQ(robust_take(), 0);   /* depth 2 */
    __atomic_store_n(&robust_holding, 1, __ATOMIC_SEQ_CST);
    switch (robust_form) {
    case ROBUST_WAIT: out->waited = sync_cond_wait(&robust_cv, &robust_lock.mutex); break;
    case ROBUST_RESUMABLE: out->waited = sync_cond_wait_resumable(&robust_cv, &robust_lock.mutex, &w, -1); break;
    case ROBUST_RECURSIVE_RESUMABLE:
        out->waited = sync_cond_wait_recursive_resumable(&robust_cv, &robust_lock.recursive, &w, -1);
        break;
    default: out->waited = sync_cond_wait_recursive_interruptible(&robust_cv, &robust_lock.recursive, -1); break;
    }
    out->owner = sync_mutex_is_owner(&robust_lock.mutex);
    out->depth = robust_recursive() ? sync_recursive_lock_depth(&robust_lock.recursive) : 0;
    if (out->waited == EOWNERDEAD) {
        CHECK_EQ(sync_mutex_consistent(&robust_lock.mutex), 0);
        for (uint32_t i = 0; i < (robust_recursive() ? out->depth : 1); i++) CHECK_EQ(robust_give(), 0);
    }
    return NULL;
}

/* Takes the lock once the waiter has released it by waiting, signals, and exits holding it. */
static void *robust_signal_and_die(void *arg) {
    (void)arg;
    CHECK_EQ(robust_take(), 0);
    CHECK_EQ(sync_cond_signal(&robust_cv), 0);
    return NULL;
}

static void *robust_die_holding(void *arg) {
    (void)arg;
    CHECK_EQ(robust_take(), 0);
    return NULL;
}

/* A thread takes the lock once the waiter has released it and dies holding it; this one gets
 * EOWNERDEAD, signals, and unlocks without making it consistent: not recoverable. */
static void *robust_spoil(void *arg) {
    (void)arg;
    pthread_t dying;
    CHECK_EQ(pthread_create(&dying, NULL, robust_die_holding, NULL), 0);
    CHECK_EQ(pthread_join(dying, NULL), 0);
    CHECK_EQ(robust_take(), EOWNERDEAD);
    CHECK_EQ(sync_cond_signal(&robust_cv), 0);
    CHECK_EQ(robust_give(), 0);
    return NULL;
}

static void robust_relocks(void) {
    for (robust_form = ROBUST_WAIT; robust_form <= ROBUST_RECURSIVE_INTERRUPTIBLE; robust_form++) {
        for (int spoil = 0; spoil < 2; spoil++) {
            if (robust_recursive()) CHECK_EQ(sync_recursive_lock_init(&robust_lock.recursive, SYNC_MUTEX_ROBUST), 0);
            else CHECK_EQ(sync_mutex_init(&robust_lock.mutex, SYNC_MUTEX_ROBUST), 0);
            __atomic_store_n(&robust_holding, 0, __ATOMIC_SEQ_CST);
            struct robust_outcome out = { -1, -1, 99 };
            pthread_t waiter_thread, other;
            CHECK_EQ(pthread_create(&waiter_thread, NULL, robust_waiter, &out), 0);
            WAIT_UNTIL(__atomic_load_n(&robust_holding, __ATOMIC_SEQ_CST));
            CHECK_EQ(pthread_create(&other, NULL, spoil ? robust_spoil : robust_signal_and_die, NULL), 0);
            CHECK_EQ(pthread_join(other, NULL), 0);
            CHECK_EQ(pthread_join(waiter_thread, NULL), 0);
            if (spoil) {
                CHECK_EQ(out.waited, ENOTRECOVERABLE);
                CHECK_EQ(out.owner, 0);
                CHECK_EQ(out.depth, 0u);
                CHECK_EQ(robust_take(), ENOTRECOVERABLE);
            } else {
                CHECK_EQ(out.waited, EOWNERDEAD);
                CHECK_EQ(out.owner, 1);
                if (robust_recursive()) CHECK_EQ(out.depth, 2u);
                CHECK_EQ(robust_take(), 0);   /* consistent again, and released by the waiter */
                CHECK_EQ(robust_give(), 0);
            }
            CHECK_EQ(robust_cv._waiters, 0u);
        }
    }
}

/* Words no condition variable or condition lock holds: EINVAL, no change, no crash. */
static void impossible_words(void) {
    sync_cond_t bad = SYNC_COND_INIT;
    bad._waiters = 0xffffffffu;
    CHECK_EQ(sync_mutex_lock(&sm), 0);
    CHECK_EQ(sync_cond_wait(&bad, &sm), EINVAL);
    CHECK(sync_mutex_is_owner(&sm));                /* not released */
    CHECK_EQ(sync_cond_wait_timed(&bad, &sm, 1000000), EINVAL);
    CHECK_EQ(sync_cond_signal(&bad), EINVAL);
    CHECK_EQ(sync_cond_broadcast(&bad), EINVAL);
    CHECK_EQ(sync_cond_signal_checked(&bad, &sm, 1), EINVAL);
    CHECK_EQ(bad._waiters, 0xffffffffu);
    CHECK_EQ(sync_mutex_unlock(&sm), 0);
    sync_condition_lock_t lock = SYNC_CONDITION_LOCK_INIT(1);
    lock._reserved = 5;
    CHECK_EQ(sync_condition_lock_lock(&lock), EINVAL);
    CHECK_EQ(sync_condition_lock_try_lock(&lock), EINVAL);
    CHECK_EQ(sync_condition_lock_lock_when(&lock, 1), EINVAL);
    CHECK_EQ(sync_condition_lock_unlock_with(&lock, 2), EINVAL);
    CHECK_EQ(sync_condition_lock_condition(&lock), 1);
    lock._reserved = 0;
    lock._cond[1] = 0xffffffffu;
    CHECK_EQ(sync_condition_lock_lock(&lock), EINVAL);
    CHECK_EQ(lock._mutex, 0u);
    /* Its mutex word is a plain one: the UNOWNED, ROBUST and robust-state bits are impossible
     * there (a robust word would be read as 16 bytes over the condition variable). */
    static const uint32_t impossible_bits[] = { 1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29 };
    for (size_t i = 0; i < sizeof impossible_bits / sizeof impossible_bits[0]; i++) {
        CHECK_EQ(sync_condition_lock_init(&lock, 3, 0), 0);
        lock._mutex = impossible_bits[i];
        CHECK_EQ(sync_condition_lock_lock(&lock), EINVAL);
        CHECK_EQ(sync_condition_lock_try_lock_when(&lock, 3), EINVAL);
        CHECK_EQ(sync_condition_lock_unlock_with(&lock, 4), EINVAL);
        CHECK_EQ(lock._mutex, impossible_bits[i]);
        CHECK_EQ(sync_condition_lock_condition(&lock), 3);
    }
    /* One initialized SHARED stays valid (its word has the SHARED bit). */
    CHECK_EQ(sync_condition_lock_init(&lock, 3, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_condition_lock_lock_when(&lock, 3), 0);
    CHECK_EQ(sync_condition_lock_lock(&lock), EDEADLK);
    CHECK_EQ(sync_condition_lock_unlock_with(&lock, 4), 0);
    CHECK_EQ(sync_condition_lock_try_lock_when(&lock, 4), 0);
    CHECK_EQ(sync_condition_lock_unlock(&lock), 0);
    CHECK_EQ(sync_condition_lock_unlock(&lock), EPERM);
}

int main(void) {
    no_lost_wakeup();
    broadcast_and_signal();
    timeouts_and_misuse();
    cocoa_condition();
    condition_lock();
    slices_are_not_wakeups();
    many_waiters_partial_signals();
    waits_that_span_calls();
    fork_keeps_the_forking_threads_locks();
    robust_relocks();
    impossible_words();
    DONE();
}
