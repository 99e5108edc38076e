/* sync/async.h for the primitives beyond the mutex: each acquire either completes at once or is
 * pending, then completes through its eventfd or callback; cancellation, timeouts, ownership of
 * handles, and the blocking forms on the same primitive. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <sync.h>
#include "check.h"
#include "test_support.h"

/* ---- read-write lock ---- */

static void test_rwlock_immediate_and_ownership(void) {
    sync_rwlock_t rw = SYNC_RWLOCK_INIT;
    sync_async_t *r = NULL, *w = NULL, *other = NULL;
    CHECK_EQ(sync_rwlock_rdlock_async(&rw, -1, -1, NULL, NULL, &r), 0);
    CHECK_EQ(sync_async_result(r), 0);
    CHECK_EQ(sync_async_free(r), EBUSY);                 /* holds a read lock */
    CHECK_EQ(sync_rwlock_wrlock_async(&rw, 0, -1, NULL, NULL, &other), ETIMEDOUT);  /* one try */
    CHECK(other == NULL);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), 0);             /* readers share it */
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_async_downgrade(&rw, r), EPERM);       /* a read handle holds no write lock */
    CHECK_EQ(sync_async_consistent(&rw, r), EINVAL);     /* not a mutex */
    CHECK_EQ(sync_async_unlock(&rw, r), 0);
    CHECK_EQ(sync_async_unlock(&rw, r), EPERM);          /* released already */
    CHECK_EQ(sync_async_free(r), 0);

    CHECK_EQ(sync_rwlock_wrlock_async(&rw, -1, -1, NULL, NULL, &w), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), EPERM);          /* a thread is not the holder */
    CHECK_EQ(sync_rwlock_downgrade(&rw), EPERM);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), EBUSY);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), EBUSY);
    CHECK_EQ(sync_async_free(w), EBUSY);
    CHECK_EQ(sync_async_downgrade(&rw, w), 0);           /* now a read lock of the same handle */
    CHECK_EQ(sync_async_downgrade(&rw, w), EPERM);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), EBUSY);
    CHECK_EQ(sync_async_free(w), EBUSY);
    CHECK_EQ(sync_async_unlock(&rw, w), 0);
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), 0);             /* nothing left held */
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
}

static void test_rwlock_bad_input(void) {
    sync_rwlock_t rw = SYNC_RWLOCK_INIT, rw2 = SYNC_RWLOCK_INIT;
    sync_async_t *h = (sync_async_t *)1;
    CHECK_EQ(sync_rwlock_rdlock_async(NULL, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_rwlock_wrlock_async((char *)&rw + 1, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_rwlock_wrlock_async(&rw, -1, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_async_downgrade(&rw, NULL), EINVAL);
    CHECK_EQ(sync_async_downgrade(NULL, NULL), EINVAL);
    /* A handle is released on its own lock only. */
    CHECK_EQ(sync_rwlock_wrlock_async(&rw, -1, -1, NULL, NULL, &h), 0);
    CHECK_EQ(sync_async_unlock(&rw2, h), EPERM);
    CHECK_EQ(sync_async_downgrade(&rw2, h), EPERM);
    CHECK_EQ(sync_async_unlock(&rw, h), 0);
    CHECK_EQ(sync_async_free(h), 0);
    /* Impossible words (WRITER with readers): EINVAL, nothing changed. */
    sync_rwlock_t bad = {(1u << 28) | 1u, 0, 0, 0};
    CHECK_EQ(sync_rwlock_rdlock_async(&bad, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_rwlock_wrlock_async(&bad, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(bad._state, (1u << 28) | 1u);
}

/* Held for an owner (sync_rwlock_*_async_owner): the write lock is the owner's, checked on
 * release and downgrade (EPERM for another owner, a thread, a handle), EDEADLK for its own
 * second acquire of either side; a read lock is nobody's (sync_rwlock_rdunlock releases it);
 * every handle may be freed once completed. */
static void test_rwlock_owner_forms(void) {
    sync_rwlock_t rw = SYNC_RWLOCK_INIT;
    const uintptr_t a = 0x1000, b = 0x2000;
    sync_async_t *h = (sync_async_t *)1, *r = NULL;
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_rwlock_wrlock_async_owner(&rw, -1, -1, NULL, NULL, 0, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_rwlock_rdlock_async_owner(&rw, -1, -1, NULL, NULL, 0, &h), EINVAL);
    CHECK_EQ(sync_rwlock_rdlock_async_owner(NULL, -1, -1, NULL, NULL, a, &h), EINVAL);
    CHECK_EQ(sync_rwlock_wrunlock_async(NULL, a), EINVAL);
    CHECK_EQ(sync_rwlock_downgrade_async((char *)&rw + 1, a), EINVAL);

    CHECK_EQ(sync_rwlock_wrlock_async_owner(&rw, -1, -1, NULL, NULL, a, &h), 0);
    CHECK_EQ(sync_async_free(h), 0);                      /* the owner holds it, not the handle */
    CHECK_EQ(sync_rwlock_wrlock_async_owner(&rw, -1, -1, NULL, NULL, a, &h), EDEADLK);
    CHECK(h == NULL);
    CHECK_EQ(sync_rwlock_rdlock_async_owner(&rw, -1, -1, NULL, NULL, a, &h), EDEADLK);
    CHECK_EQ(sync_rwlock_wrlock_async_owner(&rw, 0, -1, NULL, NULL, b, &h), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_wrunlock_async(&rw, b), EPERM);
    CHECK_EQ(sync_rwlock_downgrade_async(&rw, b), EPERM);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), EPERM);           /* a thread is not the holder */
    /* A reader of another owner waits; the downgrade lets it in beside the owner's read lock. */
    CHECK_EQ(sync_rwlock_rdlock_async_owner(&rw, -1, efd, NULL, NULL, b, &r), EINPROGRESS);
    CHECK_EQ(sync_rwlock_downgrade_async(&rw, a), 0);
    CHECK_EQ(sync_rwlock_downgrade_async(&rw, a), EPERM);
    CHECK_EQ(sync_rwlock_wrunlock_async(&rw, a), EPERM);
    await_completion(efd);
    CHECK_EQ(sync_async_result(r), 0);
    CHECK_EQ(sync_async_unlock(&rw, r), EPERM);           /* the handle holds nothing */
    CHECK_EQ(sync_async_free(r), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), EBUSY);         /* two readers */
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), EPERM);           /* no reader left */
    /* A pending writer of an owner, granted at a thread's release, released by its owner. */
    CHECK_EQ(sync_rwlock_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrlock_async_owner(&rw, -1, efd, NULL, NULL, b, &h), EINPROGRESS);
    CHECK_EQ(sync_async_free(h), EBUSY);                  /* pending */
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), EBUSY);
    CHECK_EQ(sync_rwlock_wrunlock_async(&rw, a), EPERM);
    CHECK_EQ(sync_rwlock_wrunlock_async(&rw, b), 0);
    CHECK_EQ(sync_rwlock_wrunlock_async(&rw, b), EPERM);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), 0);             /* nothing left held */
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    close(efd);
}

/* A pending writer goes before pending readers (writer preference), and new readers wait
 * behind it; its release lets the readers in. */
static void test_rwlock_pending_writer_then_readers(void) {
    sync_rwlock_t rw = SYNC_RWLOCK_INIT_SHARED;
    int wfd = eventfd(0, EFD_CLOEXEC), rfd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_rwlock_wrlock(&rw), 0);                /* a thread holds it */
    sync_async_t *w = NULL, *r[3] = {NULL};
    CHECK_EQ(sync_rwlock_wrlock_async(&rw, -1, wfd, NULL, NULL, &w), EINPROGRESS);
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_rwlock_rdlock_async(&rw, -1, rfd, NULL, NULL, &r[i]), EINPROGRESS);
    CHECK_EQ(sync_async_result(w), EINPROGRESS);
    CHECK_EQ(sync_async_free(w), EBUSY);                 /* pending */
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    await_completion(wfd);
    CHECK_EQ(sync_async_result(w), 0);
    CHECK(!readable(rfd));
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_async_result(r[i]), EINPROGRESS);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), EBUSY);
    CHECK_EQ(sync_async_unlock(&rw, w), 0);
    for (int granted = 0; granted < 3;) {
        uint64_t n = 0;
        CHECK_EQ(read(rfd, &n, 8), 8);
        granted += (int)n;
    }
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_async_result(r[i]), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), EBUSY);         /* three readers hold it */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sync_async_unlock(&rw, r[i]), 0);
        CHECK_EQ(sync_async_free(r[i]), 0);
    }
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    close(wfd);
    close(rfd);
}

/* A pending writer marks the lock (new readers wait); cancelled, it withdraws the mark, and
 * nothing is delivered. A deadline that passes: ETIMEDOUT, delivered, mark withdrawn. */
static void test_rwlock_cancel_and_timeout(void) {
    sync_rwlock_t rw = SYNC_RWLOCK_INIT;
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_rwlock_rdlock(&rw), 0);                /* a thread reads */
    sync_async_t *w = NULL, *r = NULL;
    CHECK_EQ(sync_rwlock_wrlock_async(&rw, -1, efd, NULL, NULL, &w), EINPROGRESS);
    for (int i = 0; i < 1000 && sync_rwlock_try_rdlock(&rw) == 0; i++) {  /* marked by the waker */
        CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
        usleep(1000);
    }
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), EBUSY);
    CHECK_EQ(sync_async_cancel(w), 0);
    CHECK_EQ(sync_async_result(w), ECANCELED);
    CHECK_EQ(sync_async_cancel(w), EALREADY);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), 0);             /* the mark went with it */
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK(!readable(efd));
    CHECK_EQ(sync_async_free(w), 0);

    CHECK_EQ(sync_rwlock_wrlock_async(&rw, now_ns() + 20000000, efd, NULL, NULL, &w), EINPROGRESS);
    await_completion(efd);
    CHECK_EQ(sync_async_result(w), ETIMEDOUT);
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_rwlock_try_rdlock(&rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);              /* the thread's read lock */

    /* A reader that times out behind a writer thread. */
    CHECK_EQ(sync_rwlock_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_rdlock_async(&rw, now_ns() + 20000000, efd, NULL, NULL, &r), EINPROGRESS);
    await_completion(efd);
    CHECK_EQ(sync_async_result(r), ETIMEDOUT);
    CHECK_EQ(sync_async_unlock(&rw, r), EPERM);          /* it holds nothing */
    CHECK_EQ(sync_async_free(r), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    close(efd);
}

/* A write handle that downgrades lets the pending readers in at once; completion by callback. */
enum { READERS = 100 };
static atomic_int readers_granted;
static int readers_done;

static void reader_granted(sync_async_t *h, int result, void *context) {
    (void)h;
    CHECK_EQ(result, 0);
    CHECK(context == &readers_granted);
    if (atomic_fetch_add(&readers_granted, 1) + 1 == READERS) {
        uint64_t one = 1;
        CHECK_EQ(write(readers_done, &one, 8), 8);
    }
}

static void test_rwlock_downgrade_lets_readers_in(void) {
    static sync_rwlock_t rw = SYNC_RWLOCK_INIT;
    static sync_async_t *readers[READERS];
    readers_done = eventfd(0, EFD_CLOEXEC);
    sync_async_t *w = NULL;
    CHECK_EQ(sync_rwlock_wrlock_async(&rw, -1, -1, NULL, NULL, &w), 0);
    for (int i = 0; i < READERS; i++) {
        CHECK_EQ(sync_rwlock_rdlock_async(&rw, -1, -1, reader_granted, &readers_granted, &readers[i]), EINPROGRESS);
    }
    CHECK_EQ(sync_async_downgrade(&rw, w), 0);
    await_completion(readers_done);
    CHECK_EQ(atomic_load(&readers_granted), READERS);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), EBUSY);
    for (int i = 0; i < READERS; i++) {
        CHECK_EQ(sync_async_unlock(&rw, readers[i]), 0);
        CHECK_EQ(sync_async_free(readers[i]), 0);
    }
    CHECK_EQ(sync_async_unlock(&rw, w), 0);
    CHECK_EQ(sync_async_free(w), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    close(readers_done);
}

/* ---- semaphore ---- */

static void test_semaphore_immediate_and_bad_input(void) {
    sync_semaphore_t sem = SYNC_SEMAPHORE_INIT(1);
    sync_async_t *h = (sync_async_t *)1;
    CHECK_EQ(sync_semaphore_wait_async(NULL, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_semaphore_wait_async((char *)&sem + 2, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_semaphore_wait_async(&sem, -1, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_semaphore_wait_async(&sem, -1, -1, NULL, NULL, &h), 0);   /* a unit, at once */
    CHECK(h != NULL);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_async_unlock(&sem, h), EPERM);     /* the unit is the caller's, not the handle's */
    CHECK_EQ(sync_async_downgrade(&sem, h), EPERM);
    CHECK_EQ(sync_async_cancel(h), EALREADY);
    CHECK_EQ(sync_async_free(h), 0);
    sync_async_t *none = (sync_async_t *)1;
    CHECK_EQ(sync_semaphore_wait_async(&sem, 0, -1, NULL, NULL, &none), ETIMEDOUT);  /* one try */
    CHECK(none == NULL);
    CHECK_EQ(sync_semaphore_signal(&sem, 1), 0);
    /* Impossible words (a count above its bound): EINVAL, nothing taken. */
    sync_semaphore_t bad = SYNC_BOUNDED_SEMAPHORE_INIT(5, 2);
    CHECK_EQ(sync_semaphore_wait_async(&bad, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(bad._count, 5);
}

/* Pending waits are granted oldest first, one unit each; a cancelled one takes nothing. */
static void test_semaphore_pending_in_order_cancel_timeout(void) {
    sync_semaphore_t sem = SYNC_SEMAPHORE_INIT(0);  /* zeroed before a shared init (the attach rule) */
    CHECK_EQ(sync_semaphore_init(&sem, 0, 0, SYNC_PROCESS_SHARED), 0);
    int efd[3];
    sync_async_t *h[3];
    for (int i = 0; i < 3; i++) {
        efd[i] = eventfd(0, EFD_CLOEXEC);
        CHECK_EQ(sync_semaphore_wait_async(&sem, -1, efd[i], NULL, NULL, &h[i]), EINPROGRESS);
        CHECK_EQ(sync_async_free(h[i]), EBUSY);
    }
    CHECK_EQ(sync_semaphore_signal(&sem, 1), 0);
    await_completion(efd[0]);
    CHECK_EQ(sync_async_result(h[0]), 0);
    CHECK_EQ(sync_async_result(h[1]), EINPROGRESS);
    CHECK_EQ(sync_async_cancel(h[1]), 0);            /* withdrawn: takes nothing */
    CHECK_EQ(sync_async_result(h[1]), ECANCELED);
    CHECK_EQ(sync_semaphore_signal(&sem, 1), 0);
    await_completion(efd[2]);
    CHECK_EQ(sync_async_result(h[2]), 0);
    CHECK(!readable(efd[1]));
    CHECK_EQ(sync_semaphore_try_wait(&sem), EAGAIN);  /* both units went to h[0] and h[2] */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sync_async_free(h[i]), 0);
        close(efd[i]);
    }

    int tfd = eventfd(0, EFD_CLOEXEC);
    sync_async_t *t = NULL;
    CHECK_EQ(sync_semaphore_wait_async(&sem, now_ns() + 20000000, tfd, NULL, NULL, &t), EINPROGRESS);
    await_completion(tfd);
    CHECK_EQ(sync_async_result(t), ETIMEDOUT);
    CHECK_EQ(sync_async_free(t), 0);
    CHECK_EQ(sync_semaphore_signal(&sem, 1), 0);     /* no waiter is left counted to take it */
    CHECK_EQ(sync_semaphore_try_wait(&sem), 0);
    CHECK_EQ(sem._waiters & 0x3fffffffu, 0);
    close(tfd);
}

/* A thread blocked in sync_semaphore_wait and pending waits share the units. */
static sync_semaphore_t mixed_sem = SYNC_SEMAPHORE_INIT(0);
static atomic_int thread_took;

static void *blocked_waiter(void *arg) {
    (void)arg;
    CHECK_EQ(sync_semaphore_wait(&mixed_sem), 0);
    atomic_store(&thread_took, 1);
    return NULL;
}

/* Callbacks that pass each unit on at once: every pending wait gets it in turn. */
enum { UNITS_PASSED = 500 };
static atomic_int passed;
static int passed_done;

static void pass_unit_on(sync_async_t *h, int result, void *context) {
    (void)h;
    CHECK_EQ(result, 0);
    CHECK_EQ(sync_semaphore_signal((sync_semaphore_t *)context, 1), 0);
    if (atomic_fetch_add(&passed, 1) + 1 == UNITS_PASSED) {
        uint64_t one = 1;
        CHECK_EQ(write(passed_done, &one, 8), 8);
    }
}

static void test_semaphore_threads_and_callbacks(void) {
    pthread_t thread;
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(pthread_create(&thread, NULL, blocked_waiter, NULL), 0);
    while (atomic_load_explicit((atomic_uint *)&mixed_sem._waiters, memory_order_relaxed) == 0) usleep(1000);
    sync_async_t *h = NULL;
    CHECK_EQ(sync_semaphore_wait_async(&mixed_sem, -1, efd, NULL, NULL, &h), EINPROGRESS);
    CHECK_EQ(sync_semaphore_signal(&mixed_sem, 2), 0);
    await_completion(efd);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(atomic_load(&thread_took), 1);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_semaphore_try_wait(&mixed_sem), EAGAIN);
    CHECK_EQ(sync_async_free(h), 0);
    close(efd);

    static sync_semaphore_t sem = SYNC_SEMAPHORE_INIT(0);
    static sync_async_t *handles[UNITS_PASSED];
    passed_done = eventfd(0, EFD_CLOEXEC);
    for (int i = 0; i < UNITS_PASSED; i++) {
        CHECK_EQ(sync_semaphore_wait_async(&sem, -1, -1, pass_unit_on, &sem, &handles[i]), EINPROGRESS);
    }
    CHECK_EQ(sync_semaphore_signal(&sem, 1), 0);
    await_completion(passed_done);
    CHECK_EQ(atomic_load(&passed), UNITS_PASSED);
    for (int i = 0; i < UNITS_PASSED; i++) CHECK_EQ(sync_async_free(handles[i]), 0);
    CHECK_EQ(sync_semaphore_try_wait(&sem), 0);       /* the one unit, back */
    CHECK_EQ(sync_semaphore_try_wait(&sem), EAGAIN);
    close(passed_done);
}

/* ---- event ---- */

static void test_event_set_clear_cancel_timeout(void) {
    sync_event_t ev = SYNC_EVENT_INIT;
    sync_async_t *h = (sync_async_t *)1;
    CHECK_EQ(sync_event_wait_async(NULL, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_event_wait_async(&ev, 0, -1, NULL, NULL, &h), ETIMEDOUT);   /* clear: one look */
    CHECK_EQ(sync_event_set(&ev), 0);
    CHECK_EQ(sync_event_wait_async(&ev, 0, -1, NULL, NULL, &h), 0);           /* set: at once */
    CHECK_EQ(sync_async_unlock(&ev, h), EPERM);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_event_clear(&ev), 0);

    /* Every pending wait completes at a set, even if a clear follows at once. */
    int efd = eventfd(0, EFD_CLOEXEC), cfd = eventfd(0, EFD_CLOEXEC);
    sync_async_t *w[4], *c = NULL;
    for (int i = 0; i < 4; i++) CHECK_EQ(sync_event_wait_async(&ev, -1, efd, NULL, NULL, &w[i]), EINPROGRESS);
    CHECK_EQ(sync_event_wait_async(&ev, -1, cfd, NULL, NULL, &c), EINPROGRESS);
    CHECK_EQ(sync_async_cancel(c), 0);
    CHECK_EQ(sync_event_set(&ev), 0);
    CHECK_EQ(sync_event_clear(&ev), 0);
    for (int done = 0; done < 4;) {
        uint64_t n = 0;
        CHECK_EQ(read(efd, &n, 8), 8);
        done += (int)n;
    }
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(sync_async_result(w[i]), 0);
        CHECK_EQ(sync_async_free(w[i]), 0);
    }
    CHECK_EQ(sync_async_result(c), ECANCELED);
    CHECK(!readable(cfd));
    CHECK_EQ(sync_async_free(c), 0);
    CHECK_EQ(ev._waiters & 0x3fffffffu, 0);

    CHECK_EQ(sync_event_wait_async(&ev, now_ns() + 20000000, efd, NULL, NULL, &h), EINPROGRESS);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), ETIMEDOUT);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(ev._waiters & 0x3fffffffu, 0);
    close(efd);
    close(cfd);
}

/* ---- condition lock ---- */

static void test_condition_lock_immediate_and_ownership(void) {
    sync_condition_lock_t cl = SYNC_CONDITION_LOCK_INIT(0);
    sync_async_t *h = (sync_async_t *)1, *other = NULL, *m = NULL;
    CHECK_EQ(sync_condition_lock_lock_async(NULL, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_condition_lock_lock_when_async((char *)&cl + 1, 0, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_condition_lock_lock_async(&cl, -1, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_condition_lock_lock_when_async(&cl, 1, 0, -1, NULL, NULL, &h), ETIMEDOUT);  /* free, condition 0 */
    CHECK_EQ(sync_condition_lock_lock_when_async(&cl, 0, -1, -1, NULL, NULL, &h), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), EPERM);              /* a thread is not the holder */
    CHECK_EQ(sync_condition_lock_try_lock(&cl), EBUSY);
    CHECK_EQ(sync_condition_lock_lock_async(&cl, 0, -1, NULL, NULL, &other), ETIMEDOUT);
    CHECK_EQ(sync_async_free(h), EBUSY);
    CHECK_EQ(sync_async_downgrade(&cl, h), EPERM);
    CHECK_EQ(sync_async_unlock_with(&cl, h, 5), 0);
    CHECK_EQ(sync_condition_lock_condition(&cl), 5);
    CHECK_EQ(sync_async_unlock_with(&cl, h, 6), EPERM);            /* released already */
    CHECK_EQ(sync_async_unlock(&cl, h), EPERM);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_condition_lock_lock_async(&cl, -1, -1, NULL, NULL, &h), 0);
    CHECK_EQ(sync_async_unlock(&cl, h), 0);                        /* condition unchanged */
    CHECK_EQ(sync_condition_lock_condition(&cl), 5);
    CHECK_EQ(sync_async_free(h), 0);
    sync_mutex_t mutex = SYNC_MUTEX_INIT;                          /* another kind's handle */
    CHECK_EQ(sync_mutex_lock_async(&mutex, -1, -1, NULL, NULL, &m), 0);
    CHECK_EQ(sync_async_unlock_with(&mutex, m, 1), EPERM);
    CHECK_EQ(sync_async_unlock(&mutex, m), 0);
    CHECK_EQ(sync_async_free(m), 0);
    CHECK_EQ(sync_condition_lock_try_lock(&cl), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), 0);
}

/* A pending acquire for a value is granted at the release that sets it, not before; cancel and
 * timeout leave the lock alone. */
static void test_condition_lock_pending_when(void) {
    sync_condition_lock_t cl = SYNC_CONDITION_LOCK_INIT(0);  /* zeroed before a shared init */
    CHECK_EQ(sync_condition_lock_init(&cl, 0, SYNC_PROCESS_SHARED), 0);
    int efd = eventfd(0, EFD_CLOEXEC), cfd = eventfd(0, EFD_CLOEXEC);
    sync_async_t *h = NULL, *c = NULL;
    CHECK_EQ(sync_condition_lock_lock_when_async(&cl, 1, -1, efd, NULL, NULL, &h), EINPROGRESS);
    CHECK_EQ(sync_condition_lock_lock_when_async(&cl, 9, -1, cfd, NULL, NULL, &c), EINPROGRESS);
    CHECK_EQ(sync_condition_lock_lock(&cl), 0);                    /* threads still take it */
    CHECK_EQ(sync_condition_lock_unlock_with(&cl, 2), 0);
    CHECK_EQ(sync_async_result(h), EINPROGRESS);                   /* never granted with 2 */
    CHECK_EQ(sync_condition_lock_lock(&cl), 0);
    CHECK_EQ(sync_condition_lock_unlock_with(&cl, 1), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_condition_lock_condition(&cl), 1);
    CHECK_EQ(sync_condition_lock_try_lock(&cl), EBUSY);
    CHECK_EQ(sync_async_cancel(c), 0);
    CHECK_EQ(sync_async_result(c), ECANCELED);
    CHECK_EQ(sync_async_unlock_with(&cl, h, 9), 0);                /* c, withdrawn, takes nothing */
    CHECK(!readable(cfd));
    CHECK_EQ(sync_condition_lock_try_lock_when(&cl, 9), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), 0);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_async_free(c), 0);

    CHECK_EQ(sync_condition_lock_lock_when_async(&cl, 3, now_ns() + 20000000, efd, NULL, NULL, &h), EINPROGRESS);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), ETIMEDOUT);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_condition_lock_try_lock(&cl), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), 0);
    close(efd);
    close(cfd);
}

/* A thread blocked in sync_condition_lock_lock_when and a pending acquire, each waiting for a
 * value the other sets: they alternate, ROUNDS times each. */
enum { ROUNDS = 200 };
static sync_condition_lock_t ping_pong;
static int pong_fd;
static atomic_int pongs;

static void *ping_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_EQ(sync_condition_lock_lock_when(&ping_pong, 0), 0);
        CHECK_EQ(sync_condition_lock_unlock_with(&ping_pong, 1), 0);
    }
    return NULL;
}

static void pong(sync_async_t *h, int result, void *context) {
    (void)context;
    CHECK_EQ(result, 0);
    CHECK_EQ(sync_condition_lock_condition(&ping_pong), 1);
    CHECK_EQ(sync_async_unlock_with(&ping_pong, h, 0), 0);
    atomic_fetch_add(&pongs, 1);
    uint64_t one = 1;
    CHECK_EQ(write(pong_fd, &one, 8), 8);
}

static void test_condition_lock_with_a_blocked_thread(void) {
    CHECK_EQ(sync_condition_lock_init(&ping_pong, 0, 0), 0);
    pong_fd = eventfd(0, EFD_CLOEXEC);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, ping_thread, NULL), 0);
    for (int i = 0; i < ROUNDS; i++) {
        sync_async_t *h = NULL;
        int rc = sync_condition_lock_lock_when_async(&ping_pong, 1, -1, -1, pong, NULL, &h);
        if (rc == 0) pong(h, 0, NULL);                              /* taken at once: no callback */
        else CHECK_EQ(rc, EINPROGRESS);
        await_completion(pong_fd);
        CHECK_EQ(sync_async_free(h), 0);
    }
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(atomic_load(&pongs), ROUNDS);
    CHECK_EQ(sync_condition_lock_condition(&ping_pong), 0);
    close(pong_fd);
}

/* The owner forms: the owner, not a handle, holds the lock; EDEADLK for the owner, EPERM for
 * another; a pending acquire for a condition is granted at the release that sets it. */
static void test_condition_lock_owner_forms(void) {
    sync_condition_lock_t cl = SYNC_CONDITION_LOCK_INIT(0);
    int64_t one = 1, two = 2;
    sync_async_t *h = NULL;
    uintptr_t a = 0x1000, b = 0x2000;
    CHECK_EQ(sync_condition_lock_try_lock_async(&cl, &one, a), EBUSY);      /* free, but 0 */
    CHECK_EQ(sync_condition_lock_try_lock_async(&cl, NULL, 0), EINVAL);
    CHECK_EQ(sync_condition_lock_lock_async_owner(&cl, NULL, -1, -1, NULL, NULL, 0, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_condition_lock_try_lock_async(&cl, NULL, a), 0);
    CHECK_EQ(sync_condition_lock_try_lock_async(&cl, NULL, a), EDEADLK);
    CHECK_EQ(sync_condition_lock_lock_async_owner(&cl, NULL, -1, -1, NULL, NULL, a, &h), EDEADLK);
    CHECK_EQ(sync_condition_lock_unlock_async(&cl, b, NULL), EPERM);
    CHECK_EQ(sync_condition_lock_unlock(&cl), EPERM);
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_condition_lock_lock_async_owner(&cl, &two, -1, efd, NULL, NULL, b, &h), EINPROGRESS);
    CHECK_EQ(sync_condition_lock_unlock_async(&cl, a, &one), 0);           /* 1: not b's */
    CHECK_EQ(sync_async_result(h), EINPROGRESS);
    CHECK_EQ(sync_condition_lock_lock(&cl), 0);
    CHECK_EQ(sync_condition_lock_unlock_with(&cl, 2), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_async_free(h), 0);                                        /* the owner holds it */
    CHECK_EQ(sync_condition_lock_condition(&cl), 2);
    CHECK_EQ(sync_condition_lock_unlock_async(&cl, b, NULL), 0);
    CHECK_EQ(sync_condition_lock_try_lock(&cl), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), 0);
    close(efd);
}

/* ---- barrier ---- */

static void test_barrier_immediate_bad_input_and_timeouts(void) {
    sync_barrier_t b = SYNC_BARRIER_INIT(1), two = SYNC_BARRIER_INIT(2);
    sync_async_t *h = (sync_async_t *)1;
    uint32_t index = 7;
    CHECK_EQ(sync_barrier_wait_async(NULL, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_barrier_wait_async((char *)&b + 1, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_barrier_wait_async(&b, -1, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_async_index(NULL, &index), EINVAL);
    CHECK_EQ(sync_barrier_wait_async(&b, -1, -1, NULL, NULL, &h), 0);    /* one party: trips at once */
    CHECK_EQ(sync_async_index(h, &index), 0);
    CHECK_EQ(index, 0u);
    CHECK_EQ(sync_async_unlock(&b, h), EPERM);                            /* holds nothing */
    CHECK_EQ(sync_async_free(h), 0);
    /* A passed deadline: one try, and not the last party: the barrier breaks. */
    CHECK_EQ(sync_barrier_wait_async(&two, 0, -1, NULL, NULL, &h), ETIMEDOUT);
    CHECK(h == NULL);
    bool broken = false;
    CHECK_EQ(sync_barrier_status(&two, NULL, NULL, &broken), 0);
    CHECK(broken);
    CHECK_EQ(sync_barrier_wait_async(&two, -1, -1, NULL, NULL, &h), ECANCELED);
    CHECK_EQ(sync_barrier_reset(&two), 0);
    /* A deadline that runs out while pending: ETIMEDOUT, broken for the others. */
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_barrier_wait_async(&two, now_ns() + 20000000, efd, NULL, NULL, &h), EINPROGRESS);
    CHECK_EQ(sync_async_index(h, &index), EPERM);                         /* pending */
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), ETIMEDOUT);
    CHECK_EQ(sync_async_index(h, &index), EPERM);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_barrier_wait(&two, NULL), ECANCELED);
    CHECK_EQ(sync_barrier_reset(&two), 0);
    close(efd);
}

/* A pending wait and a thread meet; a cancelled party breaks the barrier for a blocked thread. */
static sync_barrier_t meet;
static void *meet_thread(void *arg) {
    uint32_t index = 99;
    *(int *)arg = sync_barrier_wait(&meet, &index);
    return NULL;
}

static void test_barrier_pending_with_threads_and_cancel(void) {
    for (int shared = 0; shared < 2; shared++) {
        sync_barrier_t zero = {0};
        meet = zero;
        CHECK_EQ(sync_barrier_init(&meet, 2, shared ? SYNC_PROCESS_SHARED : 0), 0);
        int efd = eventfd(0, EFD_CLOEXEC);
        sync_async_t *h = NULL;
        uint32_t index = 9;
        CHECK_EQ(sync_barrier_wait_async(&meet, -1, efd, NULL, NULL, &h), EINPROGRESS);
        int rc = -1;
        pthread_t thread;
        CHECK_EQ(pthread_create(&thread, NULL, meet_thread, &rc), 0);
        await_completion(efd);
        CHECK_EQ(pthread_join(thread, NULL), 0);
        CHECK_EQ(rc, 0);
        CHECK_EQ(sync_async_result(h), 0);
        CHECK_EQ(sync_async_index(h, &index), 0);
        CHECK_EQ(index, 0u);                                              /* it arrived first */
        CHECK_EQ(sync_async_cancel(h), EALREADY);
        CHECK_EQ(sync_async_free(h), 0);

        /* A thread waits; a pending party is cancelled: the barrier breaks, the thread fails. */
        CHECK_EQ(pthread_create(&thread, NULL, meet_thread, &rc), 0);
        uint32_t waiting = 0;
        do {
            CHECK_EQ(sync_barrier_status(&meet, NULL, &waiting, NULL), 0);
        } while (waiting != 1);
        CHECK_EQ(sync_barrier_wait_async(&meet, -1, efd, NULL, NULL, &h), 0);  /* the last: trips */
        CHECK_EQ(pthread_join(thread, NULL), 0);
        CHECK_EQ(rc, 0);
        CHECK_EQ(sync_async_free(h), 0);
        CHECK_EQ(sync_barrier_wait_async(&meet, -1, efd, NULL, NULL, &h), EINPROGRESS);
        CHECK_EQ(sync_async_cancel(h), 0);
        CHECK_EQ(sync_async_result(h), ECANCELED);
        CHECK_EQ(sync_async_index(h, &index), EPERM);
        CHECK(!readable(efd));
        CHECK_EQ(sync_async_free(h), 0);
        bool broken = false;
        CHECK_EQ(sync_barrier_status(&meet, NULL, NULL, &broken), 0);
        CHECK(broken);
        CHECK_EQ(sync_barrier_wait(&meet, NULL), ECANCELED);
        CHECK_EQ(sync_barrier_reset(&meet), 0);
        close(efd);
    }
}

/* With an action: the handle that arrives last runs it and ends it from another thread. */
static sync_barrier_t acting;
static void *end_action(void *arg) {
    (void)arg;
    CHECK_EQ(sync_barrier_action_done(&acting, true), 0);
    return NULL;
}

static void test_barrier_action_of_a_handle(void) {
    CHECK_EQ(sync_barrier_init(&acting, 2, SYNC_BARRIER_ACTION), 0);
    int efd = eventfd(0, EFD_CLOEXEC);
    sync_async_t *first = NULL, *last = NULL;
    uint32_t index = 9;
    CHECK_EQ(sync_barrier_wait_async(&acting, -1, efd, NULL, NULL, &first), EINPROGRESS);
    CHECK_EQ(sync_barrier_wait_async(&acting, -1, -1, NULL, NULL, &last), 0);
    CHECK_EQ(sync_async_index(last, &index), 0);
    CHECK_EQ(index, 1u);                                                  /* runs the action */
    CHECK_EQ(sync_async_result(first), EINPROGRESS);                      /* until it ends */
    CHECK(!readable(efd));
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, end_action, NULL), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(first), 0);
    CHECK_EQ(sync_async_index(first, &index), 0);
    CHECK_EQ(index, 0u);
    CHECK_EQ(sync_barrier_action_done(&acting, true), EPERM);             /* ended already */
    CHECK_EQ(sync_async_free(first), 0);
    CHECK_EQ(sync_async_free(last), 0);
    close(efd);
}

int main(void) {
    test_rwlock_immediate_and_ownership();
    test_rwlock_bad_input();
    test_rwlock_owner_forms();
    test_rwlock_pending_writer_then_readers();
    test_rwlock_cancel_and_timeout();
    test_rwlock_downgrade_lets_readers_in();
    test_semaphore_immediate_and_bad_input();
    test_semaphore_pending_in_order_cancel_timeout();
    test_semaphore_threads_and_callbacks();
    test_event_set_clear_cancel_timeout();
    test_condition_lock_immediate_and_ownership();
    test_condition_lock_pending_when();
    test_condition_lock_with_a_blocked_thread();
    test_condition_lock_owner_forms();
    test_barrier_immediate_bad_input_and_timeouts();
    test_barrier_pending_with_threads_and_cancel();
    test_barrier_action_of_a_handle();
    DONE();
}
