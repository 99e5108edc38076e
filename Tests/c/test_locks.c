/* The lock family through the C ABI: mutual exclusion under stress, every error code, timeouts,
 * writer non-starvation, process-shared locks across fork, once under a race, synchronized. */
#define _GNU_SOURCE
#include "check.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sync.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 4
#define ITERATIONS 50000

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A two-field invariant: a and b are equal outside the lock; a torn update shows up. */
static volatile long a, b, overlaps;
static void critical(void) {
    long x = a;
    a = x + 1;
    sched_yield();  /* occasionally, widen the window */
    if (b != x) overlaps++;
    b = x + 1;
}

static void *run_threads(void *(*body)(void *), void *arg) {
    pthread_t t[THREADS];
    a = b = overlaps = 0;
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, body, arg);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    return NULL;
}

static sync_mutex_t mutex = SYNC_MUTEX_INIT;
static void *mutex_body(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS; i++) {
        if (i % 3 == 0) { while (sync_mutex_try_lock(&mutex) != 0) {} }
        else if (i % 3 == 1) {
            /* ETIMEDOUT is a correct answer (a holder preempted on a loaded machine may keep the
             * lock longer than 1 s): try again; any other error is counted. */
            int err;
            while ((err = sync_mutex_lock_timed(&mutex, 1000000000ull)) == ETIMEDOUT) {}
            if (err != 0) overlaps++;
        }
        else sync_mutex_lock(&mutex);
        if (i % 256 == 0) critical(); else { a++; b++; }
        if (sync_mutex_unlock(&mutex) != 0) overlaps++;
    }
    return NULL;
}

static sync_recursive_lock_t recursive = SYNC_RECURSIVE_LOCK_INIT;
static void *recursive_body(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS / 2; i++) {
        sync_recursive_lock_lock(&recursive);
        sync_recursive_lock_lock(&recursive);
        if (i % 256 == 0) critical(); else { a++; b++; }
        sync_recursive_lock_unlock(&recursive);
        if (sync_recursive_lock_depth(&recursive) != 1) overlaps++;
        sync_recursive_lock_unlock(&recursive);
    }
    return NULL;
}

static sync_spinlock_t spin = SYNC_SPINLOCK_INIT;
static void *spin_body(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS; i++) {
        sync_spinlock_lock(&spin);
        if (i % 256 == 0) critical(); else { a++; b++; }
        sync_spinlock_unlock(&spin);
    }
    return NULL;
}

static sync_rwlock_t rw = SYNC_RWLOCK_INIT;
static void *rw_body(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS; i++) {
        if (i % 4 == 0) {
            sync_rwlock_wrlock(&rw);
            if (i % 256 == 0) critical(); else { a++; b++; }
            sync_rwlock_wrunlock(&rw);
        } else {
            sync_rwlock_rdlock(&rw);
            if (a != b) overlaps++;
            sync_rwlock_rdunlock(&rw);
        }
    }
    return NULL;
}

static void *holds_mutex_briefly(void *arg) {
    sync_mutex_t *m = arg;
    CHECK_EQ(sync_mutex_unlock(m), EPERM);  /* not the owner */
    return NULL;
}

static void test_mutex(void) {
    CHECK_EQ(sizeof(sync_mutex_t), 4);
    run_threads(mutex_body, NULL);
    CHECK_EQ(a, (long)THREADS * ITERATIONS);
    CHECK_EQ(b, a);
    CHECK_EQ(overlaps, 0);

    sync_mutex_t m = SYNC_MUTEX_INIT;
    CHECK_EQ(sync_mutex_unlock(&m), EPERM);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_mutex_is_owner(&m), 1);
    CHECK_EQ(sync_mutex_lock(&m), EDEADLK);
    CHECK_EQ(sync_mutex_lock_timed(&m, 1000), EDEADLK);
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);
    pthread_t t;
    pthread_create(&t, NULL, holds_mutex_briefly, &m);
    pthread_join(t, NULL);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_is_locked(&m), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);  /* still works after the errors */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_lock(NULL), EINVAL);
    CHECK_EQ(sync_mutex_lock((sync_mutex_t *)((char *)&m + 1)), EINVAL);
    CHECK_EQ(sync_mutex_init(&m, 8), EINVAL);
}

static atomic_int let_go;
static void *lock_and_hold(void *arg) {
    sync_mutex_t *m = arg;
    sync_mutex_lock(m);
    while (!atomic_load(&let_go)) usleep(1000);  /* held until the test says so, not for a time */
    sync_mutex_unlock(m);
    return NULL;
}

static void test_timeouts(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    pthread_t t;
    atomic_store(&let_go, 0);
    pthread_create(&t, NULL, lock_and_hold, &m);
    while (!sync_mutex_is_locked(&m)) usleep(1000);
    int64_t begin = now_ns();
    CHECK_EQ(sync_mutex_lock_timed(&m, 100000000ull), ETIMEDOUT);
    int64_t waited = now_ns() - begin;
    CHECK(waited >= 100000000 && waited < 5000000000LL);
    CHECK_EQ(sync_mutex_lock_until(&m, now_ns() - 1000), ETIMEDOUT);  /* a past deadline */
    atomic_store(&let_go, 1);
    CHECK_EQ(sync_mutex_lock_until(&m, now_ns() + 60000000000LL), 0);  /* the holder leaves */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    pthread_join(t, NULL);
}

/* sync.h's time model for every lock family's `_until` form: a negative deadline is none (the
 * caller waits until the lock is free), a deadline at or before now one try. */
static void *lock_until_no_deadline(void *m) {
    int result = sync_mutex_lock_until(m, -1);
    if (result == 0) result = sync_mutex_unlock(m);
    return (void *)(intptr_t)result;
}

static void test_deadline_model(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    CHECK_EQ(sync_mutex_lock_until(&m, -1), 0);               /* free: taken */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_lock_until(&m, 0), 0);                /* a past deadline: one try */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    pthread_t t;
    pthread_create(&t, NULL, lock_until_no_deadline, &m);
    /* The waiter has marked the word (WAITERS, bit 31) before it sleeps: it waits, not ETIMEDOUT. */
    for (int i = 0; i < 60000 && !(__atomic_load_n(&m._word, __ATOMIC_RELAXED) & 0x80000000u); i++) usleep(1000);
    CHECK(__atomic_load_n(&m._word, __ATOMIC_RELAXED) & 0x80000000u);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    void *result;
    pthread_join(t, &result);
    CHECK_EQ((intptr_t)result, 0);

    sync_recursive_lock_t r = SYNC_RECURSIVE_LOCK_INIT;
    CHECK_EQ(sync_recursive_lock_lock_until(&r, -1), 0);
    CHECK_EQ(sync_recursive_lock_lock_until(&r, 0), 0);       /* the owner goes deeper at once */
    CHECK_EQ(sync_recursive_lock_depth(&r), 2);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    sync_rwlock_t rw = SYNC_RWLOCK_INIT;
    CHECK_EQ(sync_rwlock_rdlock_until(&rw, -1), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrlock_until(&rw, -7), 0);
    CHECK_EQ(sync_rwlock_wrlock_until(&rw, 0), EDEADLK);      /* still the owner check first */
    CHECK_EQ(sync_rwlock_rdlock_until(&rw, 0), EDEADLK);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    sync_spinlock_t s = SYNC_SPINLOCK_INIT;
    CHECK_EQ(sync_spinlock_lock_until(&s, INT64_MIN), 0);
    CHECK_EQ(sync_spinlock_lock_until(&s, -1), EDEADLK);
    CHECK_EQ(sync_spinlock_unlock(&s), 0);
    CHECK_EQ(sync_mutex_lock_until(NULL, -1), EINVAL);
}

static void *release_unowned(void *m) { return (void *)(intptr_t)sync_mutex_unlock(m); }

static void test_unowned(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT_UNOWNED;
    CHECK_EQ(sync_mutex_unlock(&m), EPERM);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_mutex_lock_timed(&m, 1000000), ETIMEDOUT);  /* no EDEADLK: it just waits */
    pthread_t t;
    pthread_create(&t, NULL, release_unowned, &m);  /* another thread releases */
    pthread_join(t, NULL);
    CHECK_EQ(sync_mutex_is_locked(&m), 0);
}

static void test_recursive(void) {
    CHECK_EQ(sizeof(sync_recursive_lock_t), 8);
    run_threads(recursive_body, NULL);
    CHECK_EQ(a, (long)THREADS * ITERATIONS / 2);
    CHECK_EQ(overlaps, 0);
    sync_recursive_lock_t r = SYNC_RECURSIVE_LOCK_INIT;
    CHECK_EQ(sync_recursive_lock_unlock(&r), EPERM);
    for (int i = 0; i < 5; i++) CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_try_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r), 6);
    for (int i = 0; i < 6; i++) CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), EPERM);

    /* Released however deep in one step, and taken again at that depth in one step. */
    uint32_t depth = 99;
    CHECK_EQ(sync_recursive_lock_release_save(&r, &depth), EPERM);
    CHECK_EQ(depth, 99);
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_release_save(&r, NULL), EINVAL);
    CHECK_EQ(sync_recursive_lock_depth(&r), 3);
    CHECK_EQ(sync_recursive_lock_release_save(&r, &depth), 0);
    CHECK_EQ(depth, 3);
    CHECK_EQ(sync_recursive_lock_depth(&r), 0);
    CHECK_EQ(sync_recursive_lock_try_lock(&r), 0);  /* free: nobody holds it */
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_restore_interruptible(&r, 0, -1), EINVAL);
    CHECK_EQ(sync_recursive_lock_restore_interruptible(&r, depth, -1), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), EPERM);
}

static void test_spin(void) {
    run_threads(spin_body, NULL);
    CHECK_EQ(a, (long)THREADS * ITERATIONS);
    CHECK_EQ(overlaps, 0);
    sync_spinlock_t s = SYNC_SPINLOCK_INIT;
    CHECK_EQ(sync_spinlock_unlock(&s), EPERM);
    CHECK_EQ(sync_spinlock_lock(&s), 0);
    CHECK_EQ(sync_spinlock_lock(&s), EDEADLK);
    CHECK_EQ(sync_spinlock_try_lock(&s), EBUSY);
    CHECK_EQ(sync_spinlock_unlock(&s), 0);
}

static atomic_int stop_readers;
static void *streaming_reader(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_readers)) {
        sync_rwlock_rdlock(&rw);
        usleep(200);  /* readers overlap continuously */
        sync_rwlock_rdunlock(&rw);
    }
    return NULL;
}

static void test_rwlock(void) {
    CHECK_EQ(sizeof(sync_rwlock_t), 16);
    run_threads(rw_body, NULL);
    CHECK_EQ(a, (long)THREADS * ITERATIONS / 4);
    CHECK_EQ(overlaps, 0);

    sync_rwlock_t l = SYNC_RWLOCK_INIT;
    CHECK_EQ(sync_rwlock_rdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_wrunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_rdlock(&l), 0);
    CHECK_EQ(sync_rwlock_rdlock(&l), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_wrlock_timed(&l, 50000000), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_wrunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_try_rdlock(&l), 0);  /* the timed-out writer withdrew */
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_wrlock(&l), 0);
    CHECK_EQ(sync_rwlock_wrlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_try_rdlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_rdlock_timed(&l, 1000), EDEADLK);
    CHECK_EQ(sync_rwlock_rdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_wrunlock(&l), 0);
    CHECK_EQ(sync_rwlock_rdlock_until(&l, now_ns() - 1), 0);  /* free: a past deadline still takes it */
    CHECK_EQ(sync_rwlock_rdunlock(&l), 0);

    /* Writer non-starvation: readers stream with overlapping holds, a writer still gets in. */
    pthread_t readers[3];
    atomic_store(&stop_readers, 0);
    for (int i = 0; i < 3; i++) pthread_create(&readers[i], NULL, streaming_reader, NULL);
    usleep(20000);
    for (int round = 0; round < 5; round++) {
        CHECK_EQ(sync_rwlock_wrlock_timed(&rw, 60000000000ull), 0);  /* a starved writer never gets in */
        CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
        usleep(5000);
    }
    atomic_store(&stop_readers, 1);
    for (int i = 0; i < 3; i++) pthread_join(readers[i], NULL);
}

/* Processes share a counter and a lock in a MAP_SHARED mapping. */
struct shared_area { sync_mutex_t mutex; sync_rwlock_t rw; sync_spinlock_t spin; long count[3]; };

static void test_process_shared(void) {
    struct shared_area *area = mmap(NULL, sizeof *area, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(area != MAP_FAILED);
    CHECK_EQ(sync_mutex_init(&area->mutex, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_rwlock_init(&area->rw, SYNC_RWLOCK_SHARED), 0);
    area->spin = (sync_spinlock_t)SYNC_SPINLOCK_INIT;
    enum { PROCESSES = 4, EACH = 20000 };
    pid_t pids[PROCESSES];
    for (int p = 0; p < PROCESSES; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            for (int i = 0; i < EACH; i++) {
                if (sync_mutex_lock(&area->mutex) != 0) _exit(2);
                area->count[0]++;
                if (sync_mutex_unlock(&area->mutex) != 0) _exit(3);
                if (sync_rwlock_wrlock(&area->rw) != 0) _exit(4);
                area->count[1]++;
                sync_rwlock_wrunlock(&area->rw);
                sync_spinlock_lock(&area->spin);
                area->count[2]++;
                sync_spinlock_unlock(&area->spin);
            }
            _exit(0);
        }
    }
    for (int p = 0; p < PROCESSES; p++) {
        int status;
        waitpid(pids[p], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    for (int k = 0; k < 3; k++) CHECK_EQ(area->count[k], PROCESSES * EACH);
    munmap(area, sizeof *area);
}

static sync_once_t once = SYNC_ONCE_INIT;
static volatile int once_runs, once_value;
static pthread_barrier_t once_start;
static void initialize(void *context) {
    usleep(20000);
    once_runs++;
    once_value = *(int *)context;
}
static void *race_once(void *arg) {
    (void)arg;
    pthread_barrier_wait(&once_start);
    int context = 42;
    if (sync_once(&once, initialize, &context) != 0) return (void *)1;
    return (void *)(intptr_t)(once_value != 42);  /* every caller sees the effect */
}
static void recurse(void *arg) { *(int *)arg = sync_once(&once, recurse, arg); }

static void test_once(void) {
    enum { N = 8 };
    pthread_t t[N];
    pthread_barrier_init(&once_start, NULL, N);
    for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, race_once, NULL);
    for (int i = 0; i < N; i++) { void *bad; pthread_join(t[i], &bad); CHECK(bad == NULL); }
    CHECK_EQ(once_runs, 1);
    int context = 7;
    CHECK_EQ(sync_once(&once, initialize, &context), 0);
    CHECK_EQ(once_runs, 1);

    sync_once_t o = SYNC_ONCE_INIT;
    CHECK_EQ(sync_once_end(&o, 1), EPERM);
    CHECK_EQ(sync_once_begin(&o), SYNC_ONCE_RUN);
    CHECK_EQ(sync_once_begin(&o), EDEADLK);
    CHECK_EQ(sync_once_end(&o, 0), 0);                /* failed: the next caller runs it */
    CHECK_EQ(sync_once_begin(&o), SYNC_ONCE_RUN);
    CHECK_EQ(sync_once_end(&o, 1), 0);
    CHECK_EQ(sync_once_begin(&o), 0);
    once = (sync_once_t)SYNC_ONCE_INIT;
    int result = -1;
    CHECK_EQ(sync_once(&once, recurse, &result), 0);
    CHECK_EQ(result, EDEADLK);
}

static int token_a, token_b;
static void *sync_body(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS / 2; i++) {
        sync_synchronized_enter(&token_a);
        sync_synchronized_enter(&token_a);  /* recursive */
        if (i % 256 == 0) critical(); else { a++; b++; }
        sync_synchronized_exit(&token_a);
        sync_synchronized_exit(&token_a);
    }
    return NULL;
}
static void *enter_b(void *arg) { *(int *)arg = sync_synchronized_enter(&token_b); sync_synchronized_exit(&token_b); return NULL; }
static void count(void *arg) { (*(int *)arg)++; }

/* Tokens 64 KiB apart share a bucket: threads cycling through them keep freeing and reclaiming
 * the bucket's entries while others look entries up without the bucket's lock. */
#define SAME_BUCKET 8
static char bucket_tokens[SAME_BUCKET * 65536];
static volatile long token_counts[SAME_BUCKET], token_inside[SAME_BUCKET];
static void *bucket_body(void *arg) {
    long self = (long)(intptr_t)arg;
    for (int i = 0; i < ITERATIONS / 2; i++) {
        int k = (int)((i + self) % SAME_BUCKET);
        if (sync_synchronized_enter(&bucket_tokens[k * 65536]) != 0) overlaps++;
        if (token_inside[k]++ != 0) overlaps++;  /* two holders of one token */
        token_counts[k]++;
        token_inside[k]--;
        if (sync_synchronized_exit(&bucket_tokens[k * 65536]) != 0) overlaps++;
    }
    return NULL;
}

static void test_synchronized_reuse(void) {
    pthread_t t[THREADS];
    overlaps = 0;
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, bucket_body, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK_EQ(overlaps, 0);
    long total = 0;
    for (int k = 0; k < SAME_BUCKET; k++) total += token_counts[k];
    CHECK_EQ(total, (long)THREADS * ITERATIONS / 2);
    for (int k = 0; k < SAME_BUCKET; k++) CHECK_EQ(sync_synchronized_exit(&bucket_tokens[k * 65536]), EPERM);
}

static void test_synchronized(void) {
    run_threads(sync_body, NULL);
    CHECK_EQ(a, (long)THREADS * ITERATIONS / 2);
    CHECK_EQ(overlaps, 0);
    /* Holding token_a does not block another thread on token_b. */
    CHECK_EQ(sync_synchronized_enter(&token_a), 0);
    int result = -1;
    pthread_t t;
    pthread_create(&t, NULL, enter_b, &result);
    pthread_join(t, NULL);
    CHECK_EQ(result, 0);
    CHECK_EQ(sync_synchronized_exit(&token_a), 0);
    CHECK_EQ(sync_synchronized_exit(&token_a), EPERM);
    CHECK_EQ(sync_synchronized_exit(&token_b), EPERM);
    int n = 0;
    CHECK_EQ(sync_synchronized(&token_b, count, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(sync_synchronized(NULL, count, &n), EINVAL);
    /* Many distinct tokens held at once (more than the table has buckets), all released. */
    static char tokens[1000];
    for (int i = 0; i < 1000; i++) CHECK_EQ(sync_synchronized_enter(&tokens[i]), 0);
    for (int i = 0; i < 1000; i++) CHECK_EQ(sync_synchronized_exit(&tokens[i]), 0);
}

int main(void) {
    test_mutex();
    test_timeouts();
    test_deadline_model();
    test_unowned();
    test_recursive();
    test_spin();
    test_rwlock();
    test_process_shared();
    test_once();
    test_synchronized();
    test_synchronized_reuse();
    DONE();
}
