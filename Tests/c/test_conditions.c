/* Semaphores, events and barriers through the C ABI: counting under stress, bounds, timeouts,
 * broadcast, barrier generations/timeout/abort/reset/action, and process-shared use via fork. */
#define _GNU_SOURCE
#include <sync.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

enum { THREADS = 4, ITEMS = 20000 };

static sync_semaphore_t items = SYNC_SEMAPHORE_INIT(0);
static volatile int32_t consumed;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 0; i < ITEMS; i++) CHECK_EQ(sync_semaphore_signal(&items, 1), 0);
    return NULL;
}
static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < ITEMS; i++) {
        CHECK_EQ(sync_semaphore_wait(&items), 0);
        OSAtomicIncrement32(&consumed);
    }
    return NULL;
}

static void semaphore(void) {
    pthread_t t[2 * THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_create(&t[i], NULL, consumer, NULL);
        pthread_create(&t[THREADS + i], NULL, producer, NULL);
    }
    for (int i = 0; i < 2 * THREADS; i++) pthread_join(t[i], NULL);
    CHECK_EQ(consumed, THREADS * ITEMS);
    CHECK_EQ(sync_semaphore_value(&items), 0);
    CHECK_EQ(sync_semaphore_trywait(&items), EAGAIN);

    /* Timeouts: a relative one waits about that long; a past deadline returns at once. */
    int64_t start = sync_monotonic_ns();
    CHECK_EQ(sync_semaphore_timedwait(&items, 50 * 1000000LL), ETIMEDOUT);
    int64_t waited = sync_monotonic_ns() - start;
    CHECK(waited >= 50 * 1000000LL && waited < 60000 * 1000000LL);  /* (the upper bound guards a hang) */
    start = sync_monotonic_ns();
    CHECK_EQ(sync_semaphore_wait_until(&items, start - 1000), ETIMEDOUT);
    CHECK(sync_monotonic_ns() - start < 60000 * 1000000LL);  /* returned: a bound, not a time */

    /* Bounded: over-release is an error and changes nothing. */
    sync_semaphore_t bounded = SYNC_BOUNDED_SEMAPHORE_INIT(1, 2);
    CHECK_EQ(sync_semaphore_signal(&bounded, 1), 0);
    CHECK_EQ(sync_semaphore_signal(&bounded, 1), EOVERFLOW);
    CHECK_EQ(sync_semaphore_value(&bounded), 2);
    CHECK_EQ(sync_semaphore_wait(&bounded), 0);
    CHECK_EQ(sync_semaphore_signal(&bounded, 2), EOVERFLOW);
    CHECK_EQ(sync_semaphore_signal(&bounded, 1), 0);
    CHECK_EQ(sync_semaphore_signal(&bounded, 0), EINVAL);
    sync_semaphore_t s;
    CHECK_EQ(sync_semaphore_init(&s, 3, 2, SYNC_SEMAPHORE_BOUNDED), EINVAL);
    CHECK_EQ(sync_semaphore_init(&s, 0, 0, SYNC_SEMAPHORE_BOUNDED), 0); /* bound 0: no release fits */
    CHECK_EQ(sync_semaphore_signal(&s, 1), EOVERFLOW);
    CHECK_EQ(sync_semaphore_init(&s, 3, 0, 0x80), EINVAL);
    CHECK_EQ(sync_semaphore_init(&s, 3, 0, 0), 0);
    CHECK_EQ(sync_semaphore_wait_interruptible(&s, 0), 0);  /* a unit is there: a past deadline is fine */
    CHECK_EQ(sync_semaphore_signal(&s, 1), 0);
    CHECK_EQ(sync_semaphore_signal(&s, UINT32_MAX), EOVERFLOW);
    CHECK_EQ(sync_semaphore_value(&s), 3);
    CHECK_EQ(sync_semaphore_wait(NULL), EINVAL);
}

static sync_event_t go = SYNC_EVENT_INIT;
static volatile int32_t woken;

static void *event_waiter(void *arg) {
    (void)arg;
    CHECK_EQ(sync_event_wait(&go), 0);
    OSAtomicIncrement32Barrier(&woken);
    return NULL;
}

static void event(void) {
    CHECK(!sync_event_is_set(&go));
    CHECK_EQ(sync_event_timedwait(&go, 10 * 1000000LL), ETIMEDOUT);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, event_waiter, NULL);
    usleep(20000);
    CHECK_EQ(woken, 0);
    CHECK_EQ(sync_event_set(&go), 0);  /* one set wakes every waiter */
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK_EQ(woken, THREADS);
    CHECK(sync_event_is_set(&go));
    CHECK_EQ(sync_event_wait_until(&go, 0), 0); /* set: passes even with a past deadline */
    CHECK_EQ(sync_event_clear(&go), 0);
    CHECK(!sync_event_is_set(&go));
    CHECK_EQ(sync_event_wait_until(&go, 0), ETIMEDOUT);
}

enum { ROUNDS = 200 };
static sync_barrier_t barrier = SYNC_BARRIER_INIT(THREADS);
static volatile int32_t arrivals[ROUNDS];
static volatile int32_t index_seen[ROUNDS][THREADS];

static void *barrier_worker(void *arg) {
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        OSAtomicIncrement32Barrier(&arrivals[r]);
        uint32_t index = 99;
        CHECK_EQ(sync_barrier_wait(&barrier, &index), 0);
        /* Nobody leaves round r before everyone arrived in it. */
        CHECK_EQ(arrivals[r], THREADS);
        CHECK(index < THREADS);
        CHECK_EQ(OSAtomicIncrement32(&index_seen[r][index]), 1);
    }
    return NULL;
}

static sync_barrier_t breaking = SYNC_BARRIER_INIT(3);
static void *breaking_waiter(void *arg) {
    int *result = arg;
    *result = sync_barrier_wait(&breaking, NULL);
    return NULL;
}

/* For the action barrier: whoever arrives last runs the "action" (here: succeeds at once). */
static void *action_waiter(void *arg) {
    int *result = arg;
    uint32_t index = 0;
    *result = sync_barrier_wait(&breaking, &index);
    if (*result == 0 && index == 1) sync_barrier_action_done(&breaking, true);
    return NULL;
}

static void barriers(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, barrier_worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    uint32_t parties, waiting;
    bool broken;
    CHECK_EQ(sync_barrier_status(&barrier, &parties, &waiting, &broken), 0);
    CHECK(parties == THREADS && waiting == 0 && !broken);

    /* A timeout breaks the barrier for everyone waiting. */
    int other = -1;
    pthread_create(&t[0], NULL, breaking_waiter, &other);
    usleep(10000);
    CHECK_EQ(sync_barrier_timedwait(&breaking, 20 * 1000000LL, NULL), ETIMEDOUT);
    pthread_join(t[0], NULL);
    CHECK_EQ(other, ECANCELED);
    CHECK_EQ(sync_barrier_status(&breaking, NULL, NULL, &broken), 0);
    CHECK(broken);
    CHECK_EQ(sync_barrier_wait(&breaking, NULL), ECANCELED);
    /* reset makes it usable again; abort breaks a waiting thread out. */
    CHECK_EQ(sync_barrier_reset(&breaking), 0);
    CHECK_EQ(sync_barrier_status(&breaking, NULL, NULL, &broken), 0);
    CHECK(!broken);
    pthread_create(&t[0], NULL, breaking_waiter, &other);
    for (int i = 0; i < 10000; i++) {  /* until it waits inside (the bound only guards a hang) */
        CHECK_EQ(sync_barrier_status(&breaking, NULL, &waiting, NULL), 0);
        if (waiting == 1) break;
        usleep(1000);
    }
    CHECK_EQ(waiting, 1);
    CHECK_EQ(sync_barrier_abort(&breaking), 0);
    pthread_join(t[0], NULL);
    CHECK_EQ(other, ECANCELED);
    CHECK_EQ(sync_barrier_reset(&breaking), 0);

    /* With an action: the last arriver runs it while the others wait. */
    sync_barrier_t with_action;
    CHECK_EQ(sync_barrier_init(&with_action, 2, SYNC_BARRIER_ACTION), 0);
    CHECK_EQ(sync_barrier_init(&with_action, 0, 0), EINVAL);
    CHECK_EQ(sync_barrier_init(&with_action, 2, SYNC_BARRIER_ACTION), 0);
    breaking = with_action;
    other = -1;
    pthread_create(&t[0], NULL, action_waiter, &other);
    uint32_t index;
    CHECK_EQ(sync_barrier_wait(&breaking, &index), 0);
    if (index == 1) {            /* we arrived last: the other must still be waiting */
        usleep(10000);
        CHECK_EQ(other, -1);
        CHECK_EQ(sync_barrier_action_done(&breaking, false), 0);  /* a failed action breaks it */
        pthread_join(t[0], NULL);
        CHECK_EQ(other, ECANCELED);
    } else {                     /* the other arrived last, ran the action, released us */
        pthread_join(t[0], NULL);
        CHECK_EQ(other, 0);
    }
}

/* Process-shared: a parent and a forked child hand a semaphore back and forth and meet at an
 * event, in MAP_SHARED memory. */
struct shared_block { sync_semaphore_t ping, pong; sync_event_t done; int32_t counter; };

static void process_shared(void) {
    struct shared_block *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(b != MAP_FAILED);
    CHECK_EQ(sync_semaphore_init(&b->ping, 0, 0, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_semaphore_init(&b->pong, 0, 0, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_event_init(&b->done, false, SYNC_PROCESS_SHARED), 0);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 1000; i++) {
            if (sync_semaphore_wait(&b->ping) != 0) _exit(1);
            b->counter++;
            sync_semaphore_signal(&b->pong, 1);
        }
        sync_event_wait(&b->done);
        _exit(b->counter == 1000 ? 0 : 2);
    }
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ(sync_semaphore_signal(&b->ping, 1), 0);
        CHECK_EQ(sync_semaphore_wait(&b->pong), 0);
        CHECK_EQ(b->counter, i + 1);
    }
    sync_event_set(&b->done);
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    munmap(b, sizeof *b);
}

int main(void) {
    semaphore();
    event();
    barriers();
    process_shared();
    DONE();
}
