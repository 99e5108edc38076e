/* sync/async.h: acquires that complete through an eventfd or a callback, cancellation,
 * timeouts, handle ownership, many pending acquires, and a robust holder process SIGKILLed. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sync.h>
#include "check.h"
#include "test_support.h"

static void test_immediate_and_ownership(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    sync_async_t *h = NULL, *other = NULL;
    CHECK_EQ(sync_mutex_lock_async(&m, -1, -1, NULL, NULL, &h), 0);
    CHECK(h != NULL);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_mutex_unlock(&m), EPERM);         /* a thread is not the holder */
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);
    CHECK_EQ(sync_async_free(h), EBUSY);            /* holds the lock */
    CHECK_EQ(sync_mutex_lock_async(&m, 0, -1, NULL, NULL, &other), ETIMEDOUT);  /* one try */
    CHECK(other == NULL);
    CHECK_EQ(sync_async_cancel(h), EALREADY);
    CHECK_EQ(sync_async_unlock(&m, h), 0);
    CHECK_EQ(sync_async_unlock(&m, h), EPERM);      /* released already */
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
}

static void test_bad_input(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    sync_async_t *h = (sync_async_t *)1;
    CHECK_EQ(sync_mutex_lock_async(NULL, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_mutex_lock_async((char *)&m + 1, -1, -1, NULL, NULL, &h), EINVAL);
    CHECK_EQ(sync_mutex_lock_async(&m, -1, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_async_result(NULL), EINVAL);
    CHECK_EQ(sync_async_cancel(NULL), EINVAL);
    CHECK_EQ(sync_async_unlock(&m, NULL), EINVAL);
    CHECK_EQ(sync_async_free(NULL), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), 0);   /* untouched */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
}

static void test_pending_eventfd_cancel_timeout(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT_SHARED;
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK(efd >= 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    sync_async_t *h = NULL;
    CHECK_EQ(sync_mutex_lock_async(&m, -1, efd, NULL, NULL, &h), EINPROGRESS);
    CHECK_EQ(sync_async_result(h), EINPROGRESS);
    CHECK_EQ(sync_async_free(h), EBUSY);
    CHECK_EQ(sync_mutex_unlock(&m), 0);        /* the waker grants it to h */
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), EBUSY);
    CHECK_EQ(sync_async_unlock(&m, h), 0);
    CHECK_EQ(sync_async_free(h), 0);

    /* Cancelled while pending: ECANCELED, nothing delivered, the lock untouched. */
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_mutex_lock_async(&m, -1, efd, NULL, NULL, &h), EINPROGRESS);
    CHECK_EQ(sync_async_cancel(h), 0);
    CHECK_EQ(sync_async_result(h), ECANCELED);
    CHECK_EQ(sync_async_cancel(h), EALREADY);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_try_lock(&m), 0);       /* nobody took it for the cancelled acquire */
    CHECK(!readable(efd));
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_async_free(h), 0);

    /* A deadline that passes: ETIMEDOUT, delivered. */
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_mutex_lock_async(&m, now_ns() + 20000000, efd, NULL, NULL, &h), EINPROGRESS);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), ETIMEDOUT);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    close(efd);
}

/* 1,000 pending acquires, completed by callback; each callback releases at once, so the grant
 * passes down the queue to the last one. */
enum { MANY = 1000 };
static atomic_int granted;
static int efd_done;
static sync_mutex_t many_mutex = SYNC_MUTEX_INIT;

static void release_at_once(sync_async_t *h, int result, void *context) {
    CHECK_EQ(result, 0);
    CHECK(context == &many_mutex);
    CHECK_EQ(sync_async_unlock(&many_mutex, h), 0);
    if (atomic_fetch_add(&granted, 1) + 1 == MANY) {
        uint64_t one = 1;
        CHECK_EQ(write(efd_done, &one, 8), 8);
    }
}

static void test_many_pending_callbacks(void) {
    static sync_async_t *handles[MANY];
    efd_done = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ(sync_mutex_lock(&many_mutex), 0);
    for (int i = 0; i < MANY; i++) {
        CHECK_EQ(sync_mutex_lock_async(&many_mutex, -1, -1, release_at_once, &many_mutex, &handles[i]), EINPROGRESS);
    }
    CHECK_EQ(sync_mutex_unlock(&many_mutex), 0);
    await_completion(efd_done);
    CHECK_EQ(atomic_load(&granted), MANY);
    for (int i = 0; i < MANY; i++) CHECK_EQ(sync_async_free(handles[i]), 0);
    CHECK_EQ(sync_mutex_try_lock(&many_mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&many_mutex), 0);
    close(efd_done);
}

/* A robust shared mutex whose holder process is SIGKILLed: the pending acquire completes with
 * EOWNERDEAD, holding it; repaired, it is usable again. */
static void test_robust_killed_holder(void) {
    sync_robust_mutex_t *robust = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(robust != MAP_FAILED);
    sync_mutex_t *m = &robust->mutex;
    CHECK_EQ(sync_mutex_init(m, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(300);
        char one = 1;
        if (sync_mutex_lock(m) != 0) _exit(1);
        if (write(ready[1], &one, 1) != 1) _exit(1);
        for (;;) pause();
    }
    char byte;
    CHECK_EQ(read(ready[0], &byte, 1), 1);
    int efd = eventfd(0, EFD_CLOEXEC);
    sync_async_t *h = NULL;
    CHECK_EQ(sync_mutex_lock_async(m, -1, efd, NULL, NULL, &h), EINPROGRESS);
    CHECK_EQ(kill(child, SIGKILL), 0);
    CHECK_EQ(waitpid(child, NULL, 0), child);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), EOWNERDEAD);
    CHECK_EQ(sync_mutex_consistent(m), EPERM);     /* the thread is not the holder */
    CHECK_EQ(sync_async_consistent(m, h), 0);
    CHECK_EQ(sync_async_unlock(m, h), 0);
    CHECK_EQ(sync_async_free(h), 0);
    CHECK_EQ(sync_mutex_try_lock(m), 0);
    CHECK_EQ(sync_mutex_unlock(m), 0);
    close(efd);
    close(ready[0]);
    close(ready[1]);
    munmap(robust, 4096);
}

/* The owner forms (LIBSYNC_1.6_AIO): the owner, not the handle, holds; checks are the owner's. */
static void test_owner_forms(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    uintptr_t a = 0x1000, b = 0x2000;
    CHECK_EQ(sync_mutex_try_lock_async(&m, 0), EINVAL);
    CHECK_EQ(sync_mutex_try_lock_async(NULL, a), EINVAL);
    CHECK_EQ(sync_mutex_try_lock_async(&m, a), 0);
    CHECK_EQ(sync_mutex_try_lock_async(&m, a), EDEADLK);
    CHECK_EQ(sync_mutex_try_lock_async(&m, b), EBUSY);
    CHECK_EQ(sync_mutex_unlock(&m), EPERM);
    CHECK_EQ(sync_mutex_unlock_async(&m, b), EPERM);
    CHECK_EQ(sync_mutex_consistent_async(&m, a), EINVAL); /* not robust */

    sync_async_t *h = (sync_async_t *)1;
    CHECK_EQ(sync_mutex_lock_async_owner(&m, -1, -1, NULL, NULL, 0, &h), EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(sync_mutex_lock_async_owner(&m, -1, -1, NULL, NULL, a, &h), EDEADLK);
    CHECK(h == NULL);
    CHECK_EQ(sync_mutex_lock_async_owner(&m, 0, -1, NULL, NULL, b, &h), ETIMEDOUT);

    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK(efd >= 0);
    CHECK_EQ(sync_mutex_lock_async_owner(&m, -1, efd, NULL, NULL, b, &h), EINPROGRESS);
    CHECK_EQ(sync_async_free(h), EBUSY); /* pending */
    CHECK_EQ(sync_mutex_unlock_async(&m, a), 0);
    await_completion(efd);
    CHECK_EQ(sync_async_result(h), 0);
    CHECK_EQ(sync_async_free(h), 0); /* the owner holds the lock, not the handle */
    CHECK_EQ(sync_mutex_unlock_async(&m, a), EPERM);
    CHECK_EQ(sync_mutex_try_lock_async(&m, b), EDEADLK);
    CHECK_EQ(sync_mutex_unlock_async(&m, b), 0);
    CHECK_EQ(sync_mutex_unlock_async(&m, b), EPERM);
    CHECK_EQ(sync_mutex_is_locked(&m), 0);

    /* Unowned: no owner recorded; anyone releases, sync_mutex_unlock too. */
    sync_mutex_t u;
    CHECK_EQ(sync_mutex_init(&u, SYNC_MUTEX_UNOWNED), 0);
    CHECK_EQ(sync_mutex_try_lock_async(&u, a), 0);
    CHECK_EQ(sync_mutex_try_lock_async(&u, a), EBUSY);
    CHECK_EQ(sync_mutex_unlock(&u), 0);
    CHECK_EQ(sync_mutex_try_lock_async(&u, a), 0);
    CHECK_EQ(sync_mutex_unlock_async(&u, b), 0);
    CHECK_EQ(sync_mutex_unlock_async(&u, b), EPERM); /* not held */
    CHECK_EQ(sync_mutex_lock_async(&u, -1, -1, NULL, NULL, &h), 0);
    CHECK_EQ(sync_async_unlock(&u, h), 0);
    CHECK_EQ(sync_async_free(h), 0);
    close(efd);
}

/* sync_mutex_unlock_local (LIBSYNC_1.7_AIOSPEED): a release that hands the lock to a pending
 * acquire of the caller's own eventfd reports its handle instead of writing to the eventfd (the
 * caller delivers it); one of another eventfd is signalled as usual. */
static void test_unlock_local(void) {
    uintptr_t a = 0x1000, b = 0x2000, c = 0x3000;
    int mine = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), other = eventfd(0, EFD_CLOEXEC);
    CHECK(mine >= 0 && other >= 0);
    sync_async_t *granted = (sync_async_t *)1, *hb = NULL, *hc = NULL;
    sync_mutex_t m = SYNC_MUTEX_INIT;
    CHECK_EQ(sync_mutex_unlock_local(NULL, a, mine, &granted), EINVAL);
    CHECK(granted == NULL);
    CHECK_EQ(sync_mutex_try_lock_async(&m, a), 0);
    CHECK_EQ(sync_mutex_unlock_local(&m, a, mine, NULL), EINVAL);
    CHECK_EQ(sync_mutex_unlock_local(&m, b, mine, &granted), EPERM); /* b does not hold it */
    CHECK(granted == NULL);
    CHECK_EQ(sync_mutex_lock_async_owner(&m, -1, mine, NULL, NULL, b, &hb), EINPROGRESS);
    CHECK_EQ(sync_mutex_lock_async_owner(&m, -1, other, NULL, NULL, c, &hc), EINPROGRESS);
    CHECK_EQ(sync_mutex_unlock_local(&m, a, mine, &granted), 0);
    CHECK(granted == hb);             /* the oldest waiter, of the caller's eventfd */
    CHECK_EQ(sync_async_result(hb), 0);
    CHECK(!readable(mine));           /* not signalled: the caller delivers it */
    CHECK_EQ(sync_mutex_try_lock_async(&m, b), EDEADLK); /* b holds it */
    CHECK_EQ(sync_mutex_unlock_local(&m, b, mine, &granted), 0);
    CHECK(granted == NULL);           /* c's acquire is another eventfd's: signalled */
    await_completion(other);
    CHECK_EQ(sync_async_result(hc), 0);
    CHECK_EQ(sync_mutex_unlock_local(&m, c, -1, &granted), 0); /* no eventfd: a plain release */
    CHECK(granted == NULL);
    CHECK_EQ(sync_mutex_is_locked(&m), 0);
    CHECK_EQ(sync_async_free(hb), 0);
    CHECK_EQ(sync_async_free(hc), 0);

    /* Owner 0: as sync_mutex_unlock; an unowned mutex that a thread holds passes to the task. */
    sync_mutex_t u;
    CHECK_EQ(sync_mutex_init(&u, SYNC_MUTEX_UNOWNED), 0);
    CHECK_EQ(sync_mutex_try_lock(&u), 0);
    CHECK_EQ(sync_mutex_lock_async(&u, -1, mine, NULL, NULL, &hb), EINPROGRESS);
    CHECK_EQ(sync_mutex_unlock_local(&u, 0, mine, &granted), 0);
    CHECK(granted == hb);
    CHECK_EQ(sync_async_result(hb), 0);
    CHECK(!readable(mine));
    CHECK_EQ(sync_mutex_is_locked(&u), 1);
    CHECK_EQ(sync_async_unlock(&u, hb), 0);
    CHECK_EQ(sync_async_free(hb), 0);
    CHECK_EQ(sync_mutex_is_locked(&u), 0);
    close(mine);
    close(other);
}

int main(void) {
    test_immediate_and_ownership();
    test_bad_input();
    test_pending_eventfd_cancel_timeout();
    test_many_pending_callbacks();
    test_robust_killed_holder();
    test_owner_forms();
    test_unlock_local();
    DONE();
}
