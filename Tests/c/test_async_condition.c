/* sync/async.h, condition variables: a wait by the holder of a mutex (a handle, or an owner)
 * releases the mutex, waits for a signal without a thread, and completes only once the holder
 * holds the mutex again; cancellation ends the wait but not the re-acquire; signals from
 * threads reach these waits and blocked threads alike, none lost. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <sync.h>
#include "check.h"
#include "test_support.h"

static void test_immediate_results_and_bad_input(void) {
    sync_cond_t cond = SYNC_COND_INIT;
    sync_mutex_t m = SYNC_MUTEX_INIT, other = SYNC_MUTEX_INIT;
    sync_async_t *holder = NULL, *h = (sync_async_t *)1;
    CHECK_EQ(sync_cond_wait_async(&cond, &m, NULL, -1, -1, NULL, NULL, &h), EINVAL);  /* no holder */
    CHECK(h == NULL);
    CHECK_EQ(sync_mutex_lock_async(&m, -1, -1, NULL, NULL, &holder), 0);
    CHECK_EQ(sync_cond_wait_async(NULL, &m, holder, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_cond_wait_async(&cond, NULL, holder, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_cond_wait_async((char *)&cond + 1, &m, holder, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_cond_wait_async(&cond, &m, holder, -1, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, 0, -1, -1, NULL, NULL, &h), EINVAL);
    /* Not the holder: EPERM, nothing done (the mutex still held by its handle). */
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, 42, -1, -1, NULL, NULL, &h), EPERM);
    CHECK_EQ(sync_cond_wait_async(&cond, &other, holder, -1, -1, NULL, NULL, &h), EPERM);
    CHECK(h == NULL);
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);
    /* A handle that holds nothing (an event's) is no mutex holder. */
    sync_event_t ev = SYNC_EVENT_INIT;
    sync_async_t *evh = NULL;
    CHECK_EQ(sync_event_set(&ev), 0);
    CHECK_EQ(sync_event_wait_async(&ev, -1, -1, NULL, NULL, &evh), 0);
    CHECK_EQ(sync_cond_wait_async(&cond, &m, evh, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_async_free(evh), 0);
    /* A passed deadline: the mutex is released and taken again at once (ETIMEDOUT, no handle). */
    CHECK_EQ(sync_cond_wait_async(&cond, &m, holder, 0, -1, NULL, NULL, &h), ETIMEDOUT);
    CHECK(h == NULL);
    CHECK_EQ(sync_cond_wait_async(&cond, &m, holder, sync_monotonic_ns() - 1000, -1, NULL, NULL, &h), ETIMEDOUT);
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);
    CHECK_EQ(sync_async_free(holder), EBUSY);               /* it holds the mutex again */
    CHECK_EQ(cond._waiters, 0u);
    /* Impossible words: EINVAL, the mutex not released. */
    sync_cond_t bad = {0u, 1u << 30};
    CHECK_EQ(sync_cond_wait_async(&bad, &m, holder, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_async_unlock(&m, holder), 0);
    CHECK_EQ(sync_async_free(holder), 0);
}

typedef struct {
    sync_mutex_t *m;
    sync_cond_t *cond;
    int *flag;
} signaller_t;

static void *signal_under_lock(void *arg) {
    signaller_t *s = arg;
    CHECK_EQ(sync_mutex_lock(s->m), 0);
    *s->flag = 1;
    CHECK_EQ(sync_cond_signal(s->cond), 0);
    CHECK_EQ(sync_mutex_unlock(s->m), 0);
    return NULL;
}

/* A thread's signal completes the wait, but only once the mutex is free for the holder. */
static void test_signal_completes_once_the_mutex_is_held(int shared) {
    sync_cond_t cond = SYNC_COND_INIT;
    sync_mutex_t m = SYNC_MUTEX_INIT;
    if (shared) {
        CHECK_EQ(sync_cond_init(&cond, SYNC_PROCESS_SHARED), 0);
        CHECK_EQ(sync_mutex_init(&m, SYNC_MUTEX_SHARED), 0);
    }
    int efd = eventfd(0, EFD_CLOEXEC), flag = 0;
    sync_async_t *holder = NULL, *w = NULL;
    CHECK_EQ(sync_mutex_lock_async(&m, -1, -1, NULL, NULL, &holder), 0);
    CHECK_EQ(sync_cond_wait_async(&cond, &m, holder, -1, efd, NULL, NULL, &w), EINPROGRESS);
    CHECK_EQ(sync_async_result(w), EINPROGRESS);
    CHECK_EQ(sync_async_free(w), EBUSY);
    CHECK_EQ(sync_async_unlock(&m, w), EPERM);              /* the wait's handle holds nothing */
    /* Released: this thread takes it, signals, and the wait cannot complete while it holds it. */
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_cond_signal(&cond), 0);
    CHECK_EQ(sync_async_result(w), EINPROGRESS);
    CHECK(!readable(efd));
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);               /* the holder holds it again */
    CHECK_EQ(sync_async_free(w), 0);

    /* A signal from another thread, the flag it sets seen once the wait completes. */
    signaller_t s = {&m, &cond, &flag};
    CHECK_EQ(sync_cond_wait_async(&cond, &m, holder, -1, efd, NULL, NULL, &w), EINPROGRESS);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, signal_under_lock, &s), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), 0);
    CHECK_EQ(flag, 1);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_async_unlock(&m, holder), 0);
    CHECK_EQ(sync_async_free(holder), 0);
    close(efd);
}

static int callback_result = -1;
static void record(sync_async_t *handle, int result, void *context) {
    (void)handle;
    *(int *)context += 1;
    callback_result = result;
}

/* Cancel ends the wait, not the re-acquire: the completion comes once the mutex is held again
 * (inside sync_async_cancel if it is free). A deadline: ETIMEDOUT, held again. */
static void test_cancel_and_timeout(void) {
    sync_cond_t cond = SYNC_COND_INIT;
    sync_mutex_t m = SYNC_MUTEX_INIT;
    int efd = eventfd(0, EFD_CLOEXEC), calls = 0;
    uintptr_t owner = 7;
    sync_async_t *w = NULL;
    CHECK_EQ(sync_mutex_try_lock_async(&m, owner), 0);
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, owner, -1, -1, record, &calls, &w), EINPROGRESS);
    CHECK_EQ(cond._waiters, 1u);
    CHECK_EQ(sync_async_cancel(w), 0);                     /* the mutex is free: completed inside */
    CHECK_EQ(calls, 1);
    CHECK_EQ(callback_result, ECANCELED);
    CHECK_EQ(sync_async_result(w), ECANCELED);
    CHECK_EQ(sync_async_cancel(w), EALREADY);
    CHECK_EQ(cond._waiters, 0u);
    CHECK_EQ(sync_mutex_try_lock_async(&m, owner), EDEADLK);  /* the owner holds it again */
    CHECK_EQ(sync_async_free(w), 0);

    /* Cancelled while a thread holds the mutex: completes after the thread's release. */
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, owner, -1, efd, NULL, NULL, &w), EINPROGRESS);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_async_cancel(w), 0);
    CHECK_EQ(sync_async_result(w), EINPROGRESS);
    CHECK_EQ(sync_async_free(w), EBUSY);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), ECANCELED);
    CHECK_EQ(sync_async_free(w), 0);

    /* A deadline. */
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, owner, sync_monotonic_ns() + 2000000, efd, NULL, NULL, &w),
             EINPROGRESS);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), ETIMEDOUT);
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_mutex_unlock_async(&m, owner), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    close(efd);
}

/* Abandoned (its loop is closing): nothing delivered, the mutex released again once retaken. */
static void test_abandon(void) {
    sync_cond_t cond = SYNC_COND_INIT;
    sync_mutex_t m = SYNC_MUTEX_INIT;
    int efd = eventfd(0, EFD_CLOEXEC);
    uintptr_t owner = 9;
    sync_async_t *w = NULL;
    CHECK_EQ(sync_async_abandon(NULL), EINVAL);
    /* Pending, the mutex taken by a thread meanwhile: the re-acquire completes after its release. */
    CHECK_EQ(sync_mutex_try_lock_async(&m, owner), 0);
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, owner, -1, efd, NULL, NULL, &w), EINPROGRESS);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_async_abandon(w), 0);
    /* Queued behind the abandoned wait's re-acquire (FIFO): granted once that gave it back. */
    int next_fd = eventfd(0, EFD_CLOEXEC);
    sync_async_t *next = NULL;
    CHECK_EQ(sync_mutex_lock_async(&m, -1, next_fd, NULL, NULL, &next), EINPROGRESS);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    await_completion(next_fd);
    CHECK_EQ(sync_async_result(next), 0);
    CHECK_EQ(sync_async_unlock(&m, next), 0);
    CHECK_EQ(sync_async_free(next), 0);
    close(next_fd);
    CHECK_EQ(sync_mutex_try_lock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK(!readable(efd));
    CHECK_EQ(cond._waiters, 0u);
    /* Completed (signalled, held again), then abandoned: released. */
    CHECK_EQ(sync_mutex_try_lock_async(&m, owner), 0);
    CHECK_EQ(sync_cond_wait_async_owner(&cond, &m, owner, -1, efd, NULL, NULL, &w), EINPROGRESS);
    CHECK_EQ(sync_cond_signal(&cond), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);
    CHECK_EQ(sync_async_abandon(w), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    /* Another kind of handle: EINVAL. */
    sync_async_t *lock = NULL;
    CHECK_EQ(sync_mutex_lock_async(&m, -1, -1, NULL, NULL, &lock), 0);
    CHECK_EQ(sync_async_abandon(lock), EINVAL);
    CHECK_EQ(sync_async_unlock(&m, lock), 0);
    CHECK_EQ(sync_async_free(lock), 0);
    close(efd);
}

/* sync_condition_t: its mutex taken with sync_mutex_lock_async(condition); a blocked thread's
 * wait and the event loop's share its queue; a broadcast wakes both. */
static void test_condition_type(void) {
    sync_condition_t c = SYNC_CONDITION_INIT;
    sync_async_t *holder = NULL, *w = NULL;
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_mutex_lock_async(&c, -1, -1, NULL, NULL, &holder), 0);
    CHECK_EQ(sync_condition_wait_async(&c, holder, -1, efd, NULL, NULL, &w), EINPROGRESS);
    CHECK_EQ(sync_condition_enter(&c), 0);
    CHECK_EQ(sync_condition_broadcast(&c), 0);
    CHECK_EQ(sync_condition_exit(&c), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), 0);
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_condition_wait_async_owner(&c, 5, -1, efd, NULL, NULL, &w), EPERM);  /* 5 holds nothing */
    CHECK_EQ(sync_async_unlock(&c, holder), 0);
    CHECK_EQ(sync_async_free(holder), 0);
    CHECK_EQ(sync_condition_wait_async(NULL, holder, -1, efd, NULL, NULL, &w), EINVAL);
    close(efd);
}

/* ---- producers and consumers: threads, and event-loop consumers cancelled at random ---- */

enum { LOOP_CONSUMERS = 64, PRODUCERS = 2, PER_PRODUCER = 4000, TOTAL = PRODUCERS * PER_PRODUCER };

typedef struct {
    sync_mutex_t m;
    sync_cond_t cond;
    int items, consumed, done;
} queue_t;

static void *produce(void *arg) {
    queue_t *q = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        CHECK_EQ(sync_mutex_lock(&q->m), 0);
        q->items += 1;
        CHECK_EQ(sync_cond_signal(&q->cond), 0);
        CHECK_EQ(sync_mutex_unlock(&q->m), 0);
    }
    return NULL;
}

static void *consume_blocking(void *arg) {
    queue_t *q = arg;
    for (;;) {
        CHECK_EQ(sync_mutex_lock(&q->m), 0);
        while (q->items == 0 && !q->done) CHECK_EQ(sync_cond_wait(&q->cond, &q->m), 0);
        int finished = q->items == 0 && q->done;
        if (q->items > 0) {
            q->items -= 1;
            q->consumed += 1;
        }
        CHECK_EQ(sync_mutex_unlock(&q->m), 0);
        if (finished) return NULL;
    }
}

typedef struct {
    uintptr_t owner;
    sync_async_t *handle;
    int state;  /* 0 wants the mutex, 1 locking, 2 waiting, 3 finished */
} consumer_t;

/* The consumer holds the mutex: takes an item, or waits, or finishes. */
static void act(queue_t *q, consumer_t *c, int efd) {
    for (;;) {
        if (q->items > 0 || q->done) {
            if (q->items > 0) {
                q->items -= 1;
                q->consumed += 1;
                c->state = 0;
            } else {
                c->state = 3;
            }
            CHECK_EQ(sync_mutex_unlock_async(&q->m, c->owner), 0);
            return;
        }
        int rc = sync_cond_wait_async_owner(&q->cond, &q->m, c->owner, -1, efd, NULL, NULL, &c->handle);
        if (rc == EINPROGRESS) {
            c->state = 2;
            return;
        }
        CHECK_EQ(rc, 0);
    }
}

static void test_producers_and_consumers(int shared) {
    static queue_t q;
    q = (queue_t){SYNC_MUTEX_INIT, SYNC_COND_INIT, 0, 0, 0};
    if (shared) {
        CHECK_EQ(sync_cond_init(&q.cond, SYNC_PROCESS_SHARED), 0);
        CHECK_EQ(sync_mutex_init(&q.m, SYNC_MUTEX_SHARED), 0);
    }
    int efd = eventfd(0, EFD_CLOEXEC);
    consumer_t consumers[LOOP_CONSUMERS];
    for (int i = 0; i < LOOP_CONSUMERS; i++) consumers[i] = (consumer_t){(uintptr_t)(i + 1), NULL, 0};
    pthread_t producers[PRODUCERS], blocking[2];
    for (int i = 0; i < PRODUCERS; i++) CHECK_EQ(pthread_create(&producers[i], NULL, produce, &q), 0);
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&blocking[i], NULL, consume_blocking, &q), 0);
    int cancels = 0, cancelled = 0, finished = 0, announced = 0;
    unsigned seed = 12345;
    while (finished < LOOP_CONSUMERS) {
        for (int i = 0; i < LOOP_CONSUMERS; i++) {
            consumer_t *c = &consumers[i];
            if (c->state == 0) {
                int rc = sync_mutex_lock_async_owner(&q.m, -1, efd, NULL, NULL, c->owner, &c->handle);
                if (rc == EINPROGRESS) {
                    c->state = 1;
                } else {
                    CHECK_EQ(rc, 0);
                    CHECK_EQ(sync_async_free(c->handle), 0);
                    act(&q, c, efd);
                    finished += c->state == 3;
                }
            } else if (c->state == 2 && rand_r(&seed) % 8 == 0) {
                int rc = sync_async_cancel(c->handle);
                CHECK(rc == 0 || rc == EALREADY);
                cancels += rc == 0;
            }
        }
        /* Everything produced and consumed: the end, once (a lost signal never gets here). */
        /* (A try: a consumer of this loop may hold the mutex until the loop runs it.) */
        if (!announced && sync_mutex_try_lock(&q.m) == 0) {
            if (q.consumed == TOTAL) {
                q.done = announced = 1;
                CHECK_EQ(sync_cond_broadcast(&q.cond), 0);
            }
            CHECK_EQ(sync_mutex_unlock(&q.m), 0);
        }
        if (!readable(efd)) {
            struct pollfd p = {.fd = efd, .events = POLLIN};
            poll(&p, 1, 1);
            continue;
        }
        uint64_t n;
        CHECK_EQ(read(efd, &n, 8), 8);
        for (int i = 0; i < LOOP_CONSUMERS; i++) {
            consumer_t *c = &consumers[i];
            if ((c->state != 1 && c->state != 2) || sync_async_result(c->handle) == EINPROGRESS) continue;
            int result = sync_async_result(c->handle);
            CHECK(result == 0 || (c->state == 2 && result == ECANCELED));
            cancelled += result == ECANCELED;
            CHECK_EQ(sync_async_free(c->handle), 0);
            c->handle = NULL;
            /* It holds the mutex now, also after a cancel. */
            CHECK_EQ(sync_mutex_try_lock_async(&q.m, c->owner), EDEADLK);
            act(&q, c, efd);
            finished += c->state == 3;
        }
    }
    for (int i = 0; i < PRODUCERS; i++) CHECK_EQ(pthread_join(producers[i], NULL), 0);
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_join(blocking[i], NULL), 0);
    CHECK_EQ(q.consumed, TOTAL);
    CHECK_EQ(q.items, 0);
    CHECK_EQ(cancelled, cancels);
    CHECK_EQ(q.cond._waiters & ~(1u << 31), 0u);
    CHECK_EQ(sync_mutex_try_lock(&q.m), 0);
    CHECK_EQ(sync_mutex_unlock(&q.m), 0);
    close(efd);
}

int main(void) {
    watchdog_install("test_async_condition: hung (a lost signal?)\n");
    alarm(240);
    test_immediate_results_and_bad_input();
    test_signal_completes_once_the_mutex_is_held(0);
    test_signal_completes_once_the_mutex_is_held(1);
    test_cancel_and_timeout();
    test_abandon();
    test_condition_type();
    test_producers_and_consumers(0);
    test_producers_and_consumers(1);
    DONE();
}
