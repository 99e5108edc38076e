/* Semaphores, events and barriers through the C ABI: counting under stress, bounds, timeouts,
 * broadcast, barrier generations/timeout/abort/reset/action, and process-shared use via fork. */
#define _GNU_SOURCE
#include <sync.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

/* Polls `cond` (an observable state) until it holds; the bound only guards against a hang. */
#define WAIT_UNTIL(cond) do { \
    int64_t until_ = sync_monotonic_ns() + 30 * 1000000000LL; \
    while (!(cond)) { CHECK(sync_monotonic_ns() < until_); usleep(1000); } } while (0)

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
    CHECK_EQ(sync_semaphore_try_wait(&items), EAGAIN);

    /* Timeouts: a relative one waits about that long; a past deadline returns at once. */
    int64_t start = sync_monotonic_ns();
    CHECK_EQ(sync_semaphore_wait_timed(&items, 50 * 1000000LL), ETIMEDOUT);
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
    CHECK_EQ(sync_event_wait_timed(&go, 10 * 1000000LL), ETIMEDOUT);
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
    CHECK_EQ(sync_barrier_wait_timed(&breaking, 20 * 1000000LL, NULL), ETIMEDOUT);
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
    WAIT_UNTIL(sync_barrier_status(&breaking, NULL, &waiting, NULL) == 0 && waiting == 1);
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

/* set() immediately followed by clear(): every thread waiting at set() returns 0 (a generation
 * in the event's word, which clear does not undo). */
enum { SET_CLEAR_WAITERS = 16, SET_CLEAR_ROUNDS = 50 };
static sync_event_t flicker = SYNC_EVENT_INIT;
static int32_t flicker_returned;

static void *flicker_waiter(void *arg) {
    (void)arg;
    CHECK_EQ(sync_event_wait(&flicker), 0);
    __atomic_add_fetch(&flicker_returned, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void event_set_then_clear(void) {
    for (int round = 0; round < SET_CLEAR_ROUNDS; round++) {
        pthread_t t[SET_CLEAR_WAITERS];
        __atomic_store_n(&flicker_returned, 0, __ATOMIC_SEQ_CST);
        for (int i = 0; i < SET_CLEAR_WAITERS; i++) pthread_create(&t[i], NULL, flicker_waiter, NULL);
        WAIT_UNTIL(__atomic_load_n(&flicker._waiters, __ATOMIC_SEQ_CST) == SET_CLEAR_WAITERS);
        CHECK_EQ(sync_event_set(&flicker), 0);
        CHECK_EQ(sync_event_clear(&flicker), 0);
        WAIT_UNTIL(__atomic_load_n(&flicker_returned, __ATOMIC_SEQ_CST) == SET_CLEAR_WAITERS);
        for (int i = 0; i < SET_CLEAR_WAITERS; i++) pthread_join(t[i], NULL);
    }
    /* A wait in several calls keeps its mark: a set and clear between two calls is seen. */
    uint32_t mark = sync_event_mark(&flicker);
    CHECK_EQ(mark & 1, 0);
    CHECK_EQ(sync_event_wait_since_interruptible(&flicker, mark, sync_monotonic_ns() + 1000000), ETIMEDOUT);
    CHECK_EQ(sync_event_set(&flicker), 0);
    CHECK_EQ(sync_event_clear(&flicker), 0);
    CHECK_EQ(sync_event_wait_since_interruptible(&flicker, mark, 0), 0);
    CHECK_EQ(sync_event_wait_interruptible(&flicker, 0), ETIMEDOUT);  /* a new wait: clear now */
    CHECK(sync_event_mark(&flicker) != mark);
    CHECK_EQ(sync_event_wait_since_interruptible(NULL, mark, 0), EINVAL);
}

/* sync_barrier_action_done only from the thread that runs a pending action: otherwise EPERM and
 * nothing changes (it used to kill the process). */
static sync_barrier_t acting;
static int action_result = -1;

static void *acting_waiter(void *arg) {
    (void)arg;
    uint32_t index;
    action_result = sync_barrier_wait(&acting, &index);
    return NULL;
}

static void *acting_stranger(void *arg) {
    (void)arg;
    action_result = sync_barrier_action_done(&acting, true);
    return NULL;
}

static void barrier_action_done_misuse(void) {
    sync_barrier_t plain = SYNC_BARRIER_INIT(2), before;
    memcpy(&before, &plain, sizeof before);
    CHECK_EQ(sync_barrier_action_done(&plain, true), EPERM);       /* no action at all */
    CHECK(memcmp(&before, &plain, sizeof before) == 0);
    CHECK_EQ(sync_barrier_init(&acting, 2, SYNC_BARRIER_ACTION), 0);
    memcpy(&before, &acting, sizeof before);
    CHECK_EQ(sync_barrier_action_done(&acting, true), EPERM);      /* none pending */
    CHECK_EQ(sync_barrier_action_done(&acting, false), EPERM);
    CHECK(memcmp(&before, &acting, sizeof before) == 0);
    for (int round = 0; round < 3; round++) {
        pthread_t t;
        pthread_create(&t, NULL, acting_waiter, NULL);
        uint32_t parties, waiting;
        WAIT_UNTIL(sync_barrier_status(&acting, &parties, &waiting, NULL) == 0 && waiting == 1);
        uint32_t index;
        CHECK_EQ(sync_barrier_wait(&acting, &index), 0);
        CHECK_EQ(index, 1);                                         /* this thread runs the action */
        pthread_t stranger;                                         /* nobody else may end it */
        pthread_create(&stranger, NULL, acting_stranger, NULL);
        pthread_join(stranger, NULL);
        CHECK_EQ(action_result, EPERM);
        action_result = -1;
        CHECK_EQ(sync_barrier_action_done(&acting, true), 0);
        CHECK_EQ(sync_barrier_action_done(&acting, true), EPERM);  /* twice */
        pthread_join(t, NULL);
        CHECK_EQ(action_result, 0);
        bool broken = true;
        CHECK_EQ(sync_barrier_status(&acting, &parties, &waiting, &broken), 0);
        CHECK(parties == 2 && waiting == 0 && !broken);
    }
}

/* Words no semaphore, event or barrier can hold: EINVAL and no change, never a crash (a trapped
 * overflow is a bare SIGILL in a release build) or a hang. */
static void impossible_words(void) {
    sync_semaphore_t sem = SYNC_SEMAPHORE_INIT(0), copy;
    sem._waiters = 0xffffffffu;
    memcpy(&copy, &sem, sizeof copy);
    CHECK_EQ(sync_semaphore_wait(&sem), EINVAL);
    CHECK_EQ(sync_semaphore_wait_timed(&sem, 1000000), EINVAL);
    CHECK_EQ(sync_semaphore_wait_interruptible(&sem, -1), EINVAL);
    CHECK_EQ(sync_semaphore_signal(&sem, 1), EINVAL);
    CHECK(memcmp(&copy, &sem, sizeof copy) == 0);
    sync_semaphore_t over = SYNC_BOUNDED_SEMAPHORE_INIT(0, 2);
    over._count = 3;                                                /* above its bound */
    CHECK_EQ(sync_semaphore_signal(&over, 1), EINVAL);
    over._count = 0;
    over._bounded = 7;
    CHECK_EQ(sync_semaphore_signal(&over, 1), EINVAL);
    CHECK_EQ(sync_semaphore_wait_timed(&over, 1000000), EINVAL);
    CHECK_EQ(over._count, 0);
    /* With a unit to take: the try and the waits take none (they used to take it). */
    sync_semaphore_t corrupt[3] = {SYNC_SEMAPHORE_INIT(1), SYNC_BOUNDED_SEMAPHORE_INIT(1, 4),
                                   SYNC_BOUNDED_SEMAPHORE_INIT(1, 1)};
    corrupt[0]._waiters = 0xffffffffu;                              /* a corrupt waiter count */
    corrupt[1]._bounded = 0xdeadbeefu;                              /* neither 0 nor 1 */
    corrupt[2]._count = 5;                                          /* above its bound */
    for (int i = 0; i < 3; i++) {
        memcpy(&copy, &corrupt[i], sizeof copy);
        CHECK_EQ(sync_semaphore_try_wait(&corrupt[i]), EINVAL);
        CHECK_EQ(sync_semaphore_wait(&corrupt[i]), EINVAL);
        CHECK_EQ(sync_semaphore_wait_until(&corrupt[i], -1), EINVAL);
        CHECK_EQ(sync_semaphore_wait_timed(&corrupt[i], 1000000), EINVAL);
        CHECK_EQ(sync_semaphore_wait_interruptible(&corrupt[i], -1), EINVAL);
        CHECK_EQ(sync_semaphore_signal(&corrupt[i], 1), EINVAL);
        CHECK(memcmp(&copy, &corrupt[i], sizeof copy) == 0);
    }
    sync_semaphore_t fine = SYNC_BOUNDED_SEMAPHORE_INIT(1, 1);
    CHECK_EQ(sync_semaphore_try_wait(&fine), 0);
    CHECK_EQ(sync_semaphore_try_wait(&fine), EAGAIN);

    sync_event_t ev = SYNC_EVENT_INIT;
    ev._waiters = 0xffffffffu;
    CHECK_EQ(sync_event_wait(&ev), EINVAL);
    CHECK_EQ(sync_event_wait_timed(&ev, 1000000), EINVAL);
    CHECK_EQ(sync_event_set(&ev), EINVAL);
    CHECK_EQ(ev._waiters, 0xffffffffu);

    sync_barrier_t good = SYNC_BARRIER_INIT(2);
    for (int field = 0; field < 6; field++) {
        sync_barrier_t bad = good;
        switch (field) {
        case 0: bad._lock = 7; break;
        case 1: bad._cond[1] = 0xffffffffu; break;
        case 2: bad._parties = 0; break;
        case 3: bad._count = 3; break;
        case 4: bad._state = 9; break;
        default: bad._flags = 0xff; break;
        }
        sync_barrier_t before = bad;
        CHECK_EQ(sync_barrier_wait(&bad, NULL), EINVAL);
        CHECK_EQ(sync_barrier_wait_timed(&bad, 1000000, NULL), EINVAL);
        CHECK_EQ(sync_barrier_action_done(&bad, true), EINVAL);
        CHECK_EQ(sync_barrier_reset(&bad), EINVAL);
        CHECK_EQ(sync_barrier_abort(&bad), EINVAL);
        CHECK_EQ(sync_barrier_status(&bad, NULL, NULL, NULL), EINVAL);
        CHECK(memcmp(&before, &bad, sizeof bad) == 0);
    }
}

int main(void) {
    semaphore();
    event();
    barriers();
    process_shared();
    event_set_then_clear();
    barrier_action_done_misuse();
    impossible_words();
    DONE();
}
