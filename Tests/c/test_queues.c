/* Queues, executors and isolated values through the C ABI: FIFO under concurrent submitters,
 * barrier exclusivity, executor thread identity and order, re-entrancy (EDEADLK), shutdown. */
#define _GNU_SOURCE
#include "check.h"
#include <sync.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SUBMITTERS = 4, PER_SUBMITTER = 2000 };

static void nap_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Waits until *counter reaches target (at most ~60 s: a bound against a hang, not a time). */
static int wait_for(atomic_long *counter, long target) {
    for (int i = 0; i < 60000 && atomic_load(counter) < target; i++) nap_us(1000);
    return atomic_load(counter) == target;
}

/* The exit status of child, or -1 (and the child killed) if it has not exited within seconds:
 * a bound against a hang, never a timing assertion. */
static int exit_status_within(pid_t child, int seconds) {
    int status;
    for (long i = 0; i < seconds * 1000L; i++) {
        if (waitpid(child, &status, WNOHANG) == child) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        nap_us(1000);
    }
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    return -1;
}

/* ---- Serial FIFO under concurrent submitters ---- */

struct fifo {
    sync_queue_t *queue;
    sync_executor_t *executor;
    long last[SUBMITTERS];      /* last sequence number seen per submitter */
    atomic_int inside;          /* items running right now (must stay <= 1) */
    atomic_long ran;
    atomic_long disorder;
    pthread_t runner;           /* executor only: the thread every item must run on */
    atomic_long wrong_thread;
};

struct item { struct fifo *fifo; int submitter; long seq; };
static struct item items[SUBMITTERS][PER_SUBMITTER];

static void fifo_item(void *p) {
    struct item *it = p;
    struct fifo *f = it->fifo;
    if (atomic_fetch_add(&f->inside, 1) != 0) atomic_fetch_add(&f->disorder, 1);
    if (it->seq != f->last[it->submitter] + 1) atomic_fetch_add(&f->disorder, 1);
    f->last[it->submitter] = it->seq;
    if (f->executor && !pthread_equal(pthread_self(), f->runner)) atomic_fetch_add(&f->wrong_thread, 1);
    atomic_fetch_sub(&f->inside, 1);
    atomic_fetch_add(&f->ran, 1);
}

static struct fifo *fifo_shared;
static void *submitter(void *arg) {
    int s = (int)(long)arg;
    for (long i = 0; i < PER_SUBMITTER; i++) {
        items[s][i] = (struct item){fifo_shared, s, i};
        if (fifo_shared->executor)
            CHECK_EQ(sync_executor_async(fifo_shared->executor, fifo_item, &items[s][i]), 0);
        else
            CHECK_EQ(sync_queue_async(fifo_shared->queue, fifo_item, &items[s][i]), 0);
    }
    return NULL;
}

static void run_submitters(struct fifo *f) {
    pthread_t t[SUBMITTERS];
    for (int s = 0; s < SUBMITTERS; s++) f->last[s] = -1;
    fifo_shared = f;
    for (long s = 0; s < SUBMITTERS; s++) pthread_create(&t[s], NULL, submitter, (void *)s);
    for (int s = 0; s < SUBMITTERS; s++) pthread_join(t[s], NULL);
}

static void noop(void *p) { (void)p; }

static void test_serial_fifo(void) {
    struct fifo f;
    memset(&f, 0, sizeof f);
    CHECK_EQ(sync_queue_create(&f.queue, "test.serial", SYNC_QUEUE_SERIAL), 0);
    run_submitters(&f);
    CHECK_EQ(sync_queue_sync(f.queue, noop, NULL), 0);  /* FIFO: runs after all of them */
    CHECK_EQ(atomic_load(&f.ran), SUBMITTERS * PER_SUBMITTER);
    CHECK_EQ(atomic_load(&f.disorder), 0);
    CHECK_EQ(sync_queue_destroy(f.queue), 0);
}

/* ---- sync runs before returning; re-entrant sync is reported ---- */

struct reentry { sync_queue_t *queue; sync_queue_t *other; int inner; int outer_ran; };

static void reenter(void *p) {
    struct reentry *r = p;
    r->outer_ran = 1;
    r->inner = sync_queue_sync(r->queue, noop, NULL);
}

static void via_other(void *p) {
    struct reentry *r = p;
    r->inner = sync_queue_sync(r->queue, noop, NULL); /* queue -> other -> queue */
}

static void through_other(void *p) {
    struct reentry *r = p;
    CHECK_EQ(sync_queue_sync(r->other, via_other, r), 0);
}

static void test_sync_and_reentry(void) {
    struct reentry r = {0};
    CHECK_EQ(sync_queue_create(&r.queue, NULL, SYNC_QUEUE_SERIAL), 0);
    CHECK_EQ(sync_queue_create(&r.other, NULL, SYNC_QUEUE_CONCURRENT), 0);
    CHECK_EQ(sync_queue_sync(r.queue, reenter, &r), 0);
    CHECK_EQ(r.outer_ran, 1);
    CHECK_EQ(r.inner, EDEADLK);
    r.inner = 0;
    CHECK_EQ(sync_queue_sync(r.queue, through_other, &r), 0);
    CHECK_EQ(r.inner, EDEADLK);
    r.inner = 0;
    CHECK_EQ(sync_queue_barrier_sync(r.other, reenter, &(struct reentry){r.other, NULL, 0, 0}), 0);
    /* Bad arguments. */
    CHECK_EQ(sync_queue_sync(NULL, noop, NULL), EINVAL);
    CHECK_EQ(sync_queue_async(r.queue, NULL, NULL), EINVAL);
    CHECK_EQ(sync_queue_create(NULL, NULL, SYNC_QUEUE_SERIAL), EINVAL);
    sync_queue_t *bad = NULL;
    CHECK_EQ(sync_queue_create(&bad, NULL, 7), EINVAL);
    CHECK(bad == NULL);
    CHECK_EQ(sync_queue_destroy(NULL), EINVAL);
    CHECK_EQ(sync_queue_destroy(r.queue), 0);
    CHECK_EQ(sync_queue_destroy(r.other), 0);
}

/* ---- Concurrent queue: barriers run alone, after earlier work, before later work ---- */

enum { READS = 3000, BARRIERS = 300 };

struct barrier_test {
    sync_queue_t *queue;
    atomic_int readers;       /* plain items running now */
    atomic_int in_barrier;
    atomic_long violations;
    atomic_long done;         /* items finished (plain and barrier) */
    atomic_long seen_max_readers;
    long submitted_before[BARRIERS];
    int barrier_index;
};

static void reader_item(void *p) {
    struct barrier_test *b = p;
    int now = atomic_fetch_add(&b->readers, 1) + 1;
    if (now > atomic_load(&b->seen_max_readers)) atomic_store(&b->seen_max_readers, now);
    if (atomic_load(&b->in_barrier)) atomic_fetch_add(&b->violations, 1);
    for (int i = 0; i < 200; i++) __asm__ __volatile__("" ::: "memory");
    if (atomic_load(&b->in_barrier)) atomic_fetch_add(&b->violations, 1);
    atomic_fetch_sub(&b->readers, 1);
    atomic_fetch_add(&b->done, 1);
}

static void barrier_item(void *p) {
    struct barrier_test *b = p;
    atomic_store(&b->in_barrier, 1);
    if (atomic_load(&b->readers) != 0) atomic_fetch_add(&b->violations, 1);
    /* Everything submitted before this barrier has finished. */
    if (atomic_load(&b->done) != b->submitted_before[b->barrier_index]) atomic_fetch_add(&b->violations, 1);
    b->barrier_index++;
    for (int i = 0; i < 100; i++) __asm__ __volatile__("" ::: "memory");
    if (atomic_load(&b->readers) != 0) atomic_fetch_add(&b->violations, 1);
    atomic_store(&b->in_barrier, 0);
    atomic_fetch_add(&b->done, 1);
}

static void test_concurrent_barriers(void) {
    static struct barrier_test b;
    CHECK_EQ(sync_queue_create(&b.queue, "test.concurrent", SYNC_QUEUE_CONCURRENT), 0);
    long submitted = 0;
    int barriers = 0;
    for (int i = 0; i < READS; i++) {
        CHECK_EQ(sync_queue_async(b.queue, reader_item, &b), 0);
        submitted++;
        if (i % (READS / BARRIERS) == 0 && barriers < BARRIERS) {
            b.submitted_before[barriers++] = submitted;
            submitted++;
            CHECK_EQ(sync_queue_barrier_async(b.queue, barrier_item, &b), 0);
        }
    }
    CHECK_EQ(sync_queue_barrier_sync(b.queue, noop, NULL), 0);  /* waits for all of it */
    CHECK_EQ(atomic_load(&b.done), submitted);
    CHECK_EQ(atomic_load(&b.violations), 0);
    CHECK_EQ(b.barrier_index, barriers);
    CHECK_EQ(sync_queue_destroy(b.queue), 0);
}

/* ---- Releasing a queue with pending work: the work still runs ---- */

static atomic_long slow_ran;
static void slow_item(void *p) { (void)p; nap_us(200); atomic_fetch_add(&slow_ran, 1); }

static void test_queue_destroy_runs_pending(void) {
    sync_queue_t *q;
    CHECK_EQ(sync_queue_create(&q, NULL, SYNC_QUEUE_SERIAL), 0);
    for (int i = 0; i < 100; i++) CHECK_EQ(sync_queue_async(q, slow_item, NULL), 0);
    CHECK_EQ(sync_queue_destroy(q), 0);  /* returns at once */
    CHECK(wait_for(&slow_ran, 100));
}

/* ---- Executor ---- */

static void record_thread(void *p) { *(pthread_t *)p = pthread_self(); }

struct exec_reentry { sync_executor_t *e; int inner; int current; };
static void exec_reenter(void *p) {
    struct exec_reentry *r = p;
    r->current = sync_executor_is_current(r->e);
    r->inner = sync_executor_sync(r->e, noop, NULL);
}

static void test_executor(void) {
    struct fifo f;
    memset(&f, 0, sizeof f);
    CHECK_EQ(sync_executor_create(&f.executor), 0);
    CHECK_EQ(sync_executor_sync(f.executor, record_thread, &f.runner), 0);
    CHECK(!pthread_equal(f.runner, pthread_self()));
    CHECK(!sync_executor_is_current(f.executor));
    run_submitters(&f);
    CHECK_EQ(sync_executor_sync(f.executor, noop, NULL), 0);  /* returns after all before it */
    CHECK_EQ(atomic_load(&f.ran), SUBMITTERS * PER_SUBMITTER);
    CHECK_EQ(atomic_load(&f.disorder), 0);
    CHECK_EQ(atomic_load(&f.wrong_thread), 0);

    struct exec_reentry r = {f.executor, 0, 0};
    CHECK_EQ(sync_executor_sync(f.executor, exec_reenter, &r), 0);
    CHECK_EQ(r.current, 1);
    CHECK_EQ(r.inner, EDEADLK);

    /* Stop: pending items run first, then nothing more is accepted. */
    atomic_store(&slow_ran, 0);
    for (int i = 0; i < 50; i++) CHECK_EQ(sync_executor_async(f.executor, slow_item, NULL), 0);
    CHECK_EQ(sync_executor_stop(f.executor), 0);
    CHECK_EQ(atomic_load(&slow_ran), 50);
    CHECK_EQ(sync_executor_async(f.executor, noop, NULL), ECANCELED);
    CHECK_EQ(sync_executor_sync(f.executor, noop, NULL), ECANCELED);
    CHECK_EQ(sync_executor_stop(f.executor), 0);  /* idempotent */
    CHECK_EQ(sync_executor_destroy(f.executor), 0);

    /* Destroy without stop, with pending work: it runs before destroy returns. */
    sync_executor_t *e;
    CHECK_EQ(sync_executor_create(&e), 0);
    atomic_store(&slow_ran, 0);
    for (int i = 0; i < 50; i++) CHECK_EQ(sync_executor_async(e, slow_item, NULL), 0);
    CHECK_EQ(sync_executor_destroy(e), 0);
    CHECK_EQ(atomic_load(&slow_ran), 50);
    CHECK_EQ(sync_executor_async(NULL, noop, NULL), EINVAL);
    CHECK_EQ(sync_executor_create(NULL), EINVAL);
}

/* fork(): the child has no executor thread. sync and async fail with ESRCH (sync used to wait
 * forever); stop and destroy return at once. Meanwhile the parent's executor works on. */
static void test_executor_in_forked_child(void) {
    sync_executor_t *e;
    CHECK_EQ(sync_executor_create(&e), 0);
    CHECK_EQ(sync_executor_sync(e, noop, NULL), 0);
    for (int i = 0; i < 100; i++) CHECK_EQ(sync_executor_async(e, slow_item, NULL), 0);  /* busy at the fork */
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        if (sync_executor_sync(e, noop, NULL) != ESRCH) _exit(2);
        if (sync_executor_async(e, noop, NULL) != ESRCH) _exit(3);
        if (sync_executor_is_current(e)) _exit(4);
        if (sync_executor_stop(e) != 0) _exit(5);
        if (sync_executor_destroy(e) != 0) _exit(6);
        _exit(0);
    }
    CHECK_EQ(exit_status_within(child, 10), 0);
    CHECK_EQ(sync_executor_sync(e, noop, NULL), 0);
    CHECK_EQ(sync_executor_destroy(e), 0);
}

/* A queue's item waits for an executor item that syncs back onto the queue: EDEADLK. */
struct cross { sync_queue_t *q; sync_executor_t *e; int inner; };
static void back_onto_queue(void *p) { struct cross *c = p; c->inner = sync_queue_sync(c->q, noop, NULL); }
static void onto_executor(void *p) { struct cross *c = p; CHECK_EQ(sync_executor_sync(c->e, back_onto_queue, c), 0); }

static void test_cross_deadlock(void) {
    struct cross c = {0};
    CHECK_EQ(sync_queue_create(&c.q, NULL, SYNC_QUEUE_SERIAL), 0);
    CHECK_EQ(sync_executor_create(&c.e), 0);
    CHECK_EQ(sync_queue_sync(c.q, onto_executor, &c), 0);
    CHECK_EQ(c.inner, EDEADLK);
    CHECK_EQ(sync_executor_destroy(c.e), 0);
    CHECK_EQ(sync_queue_destroy(c.q), 0);
}

/* ---- Isolated value: reads never see a half-done write; writes apply in order ---- */

struct pair { long a, b; long log[64]; int logged; };
static sync_isolated_t *isolated;
static atomic_long torn, stale;

static void check_pair(void *value, void *context) {
    struct pair *p = value;
    if (p->a != p->b) atomic_fetch_add(&torn, 1);
    if (context && p->a < *(long *)context) atomic_fetch_add(&stale, 1);
}
static void bump_pair(void *value, void *context) {
    struct pair *p = value;
    (void)context;
    p->a++;
    for (int i = 0; i < 20; i++) __asm__ __volatile__("" ::: "memory");
    p->b++;
}
static void read_a(void *value, void *context) { *(long *)context = ((struct pair *)value)->a; }

enum { IV_THREADS = 4, IV_OPS = 20000 };
static void *isolated_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < IV_OPS; i++) {
        if (i % 10 == 0) {
            CHECK_EQ(sync_isolated_write_async(isolated, bump_pair, NULL), 0);
        } else {
            CHECK_EQ(sync_isolated_read(isolated, check_pair, NULL), 0);
        }
    }
    return NULL;
}

static void log_write(void *value, void *context) {
    struct pair *p = value;
    p->log[p->logged++] = (long)context;
}

struct holder { sync_isolated_t *isolated; int code; };
static void *end_write_elsewhere(void *p) {
    struct holder *h = p;
    h->code = sync_isolated_end_write(h->isolated);
    return NULL;
}

static void test_isolated(void) {
    static struct pair value;
    CHECK_EQ(sync_isolated_create(&isolated, &value), 0);
    pthread_t t[IV_THREADS];
    for (long i = 0; i < IV_THREADS; i++) pthread_create(&t[i], NULL, isolated_worker, NULL);
    for (int i = 0; i < IV_THREADS; i++) pthread_join(t[i], NULL);
    long a = -1;
    CHECK_EQ(sync_isolated_read(isolated, read_a, &a), 0);
    CHECK_EQ(a, IV_THREADS * IV_OPS / 10);  /* every async write applied, none lost */
    CHECK_EQ(atomic_load(&torn), 0);

    /* A read after a write returned sees it; writes apply in issue order. */
    for (long i = 0; i < 64; i++) {
        CHECK_EQ(sync_isolated_write_async(isolated, log_write, (void *)i), 0);
        long expect = a + 1 + i;
        CHECK_EQ(sync_isolated_write_async(isolated, bump_pair, NULL), 0);
        CHECK_EQ(sync_isolated_read(isolated, check_pair, &expect), 0);
    }
    CHECK_EQ(atomic_load(&stale), 0);
    CHECK_EQ(value.logged, 64);
    for (int i = 0; i < 64; i++) CHECK_EQ(value.log[i], i);
    CHECK_EQ(sync_isolated_write_sync(isolated, bump_pair, NULL), 0);
    CHECK_EQ(value.a, a + 65);
    /* The non-blocking halves: a reader excludes writers, a writer excludes both. */
    CHECK_EQ(sync_isolated_try_begin_read(isolated), 0);
    CHECK_EQ(sync_isolated_try_begin_read(isolated), 0);
    CHECK_EQ(sync_isolated_try_begin_write(isolated), EBUSY);
    CHECK_EQ(sync_isolated_end_read(isolated), 0);
    CHECK_EQ(sync_isolated_end_read(isolated), 0);
    CHECK_EQ(sync_isolated_try_begin_write(isolated), 0);
    CHECK_EQ(sync_isolated_try_begin_read(isolated), EBUSY);
    CHECK_EQ(sync_isolated_try_begin_write(isolated), EBUSY);
    value.a++, value.b++;
    CHECK_EQ(sync_isolated_end_write(isolated), 0);
    CHECK_EQ(value.a, a + 66);
    /* A write issued while a reader holds the value is queued, applied when the reader leaves,
     * and holds back new readers meanwhile. */
    CHECK_EQ(sync_isolated_try_begin_read(isolated), 0);
    CHECK_EQ(sync_isolated_write_async(isolated, bump_pair, NULL), 0);
    CHECK_EQ(value.a, a + 66);
    CHECK_EQ(sync_isolated_try_begin_read(isolated), EBUSY);
    CHECK_EQ(sync_isolated_end_read(isolated), 0);  /* the last reader out applies it */
    CHECK_EQ(value.a, a + 67);
    /* Releasing what the calling thread did not take: EPERM and nothing changes (a read share
     * released twice used to leave a reader count that no write ever waited out). */
    CHECK_EQ(sync_isolated_end_read(isolated), EPERM);
    CHECK_EQ(sync_isolated_end_write(isolated), EPERM);
    CHECK_EQ(sync_isolated_write_async(isolated, bump_pair, NULL), 0);
    CHECK_EQ(value.a, a + 68);                                   /* free: applied at once */
    CHECK_EQ(sync_isolated_try_begin_read(isolated), 0);
    CHECK_EQ(sync_isolated_end_write(isolated), EPERM);          /* a reader holds it, no writer */
    CHECK_EQ(sync_isolated_try_begin_write(isolated), EBUSY);
    CHECK_EQ(sync_isolated_end_read(isolated), 0);
    CHECK_EQ(sync_isolated_end_read(isolated), EPERM);
    struct holder h = {isolated, 0};
    CHECK_EQ(sync_isolated_try_begin_write(isolated), 0);
    pthread_t other;
    CHECK(pthread_create(&other, NULL, end_write_elsewhere, &h) == 0);
    pthread_join(other, NULL);
    CHECK_EQ(h.code, EPERM);                                     /* taken by this thread, not that one */
    CHECK_EQ(sync_isolated_try_begin_read(isolated), EBUSY);     /* still held */
    CHECK_EQ(sync_isolated_end_write(isolated), 0);
    CHECK_EQ(sync_isolated_end_write(isolated), EPERM);
    CHECK_EQ(sync_isolated_write_sync(isolated, bump_pair, NULL), 0);
    CHECK_EQ(value.a, a + 69);
    CHECK_EQ(sync_isolated_end_read(NULL), EINVAL);
    CHECK_EQ(sync_isolated_end_write(NULL), EINVAL);
    CHECK_EQ(sync_isolated_try_begin_read(NULL), EINVAL);
    CHECK_EQ(sync_isolated_read(NULL, read_a, &a), EINVAL);
    CHECK_EQ(sync_isolated_write_async(isolated, NULL, NULL), EINVAL);
    CHECK_EQ(sync_isolated_destroy(isolated), 0);
    CHECK_EQ(sync_isolated_destroy(NULL), EINVAL);
}

/* A thread that took no read share releases one while another thread holds one: EPERM, and
 * the reader's share stays (a write issued meanwhile waits for it). Bystanders run one at a
 * time until several have shared a reader-count slot with the reader (slots are hashed from
 * the low bits of the kernel thread id), as a release by such a thread used to take the
 * reader's share. */
struct bystander { sync_isolated_t *isolated; int code; uint32_t tid; };
static void *end_read_bystander(void *p) {
    struct bystander *b = p;
    b->tid = (uint32_t)syscall(SYS_gettid);
    b->code = sync_isolated_end_read(b->isolated);
    return NULL;
}
static void bump_int(void *value, void *context) { (void)context; ++*(int *)value; }

static void test_isolated_end_read_by_bystander(void) {
    int value = 0;
    sync_isolated_t *isolated;
    CHECK_EQ(sync_isolated_create(&isolated, &value), 0);
    CHECK_EQ(sync_isolated_try_begin_read(isolated), 0);
    uint32_t me = (uint32_t)syscall(SYS_gettid);
    int same_slot = 0;
    for (int i = 0; i < 1024 && same_slot < 4; i++) {
        struct bystander b = {isolated, -1, 0};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, end_read_bystander, &b) == 0);
        pthread_join(t, NULL);
        CHECK_EQ(b.code, EPERM);
        if ((b.tid & 15) == (me & 15)) same_slot++;
    }
    CHECK(same_slot >= 1);
    CHECK_EQ(sync_isolated_try_begin_write(isolated), EBUSY);    /* the share still holds it */
    CHECK_EQ(sync_isolated_write_async(isolated, bump_int, NULL), 0);
    CHECK_EQ(value, 0);                                           /* queued behind the reader */
    CHECK_EQ(sync_isolated_end_read(isolated), 0);
    CHECK_EQ(value, 1);                                           /* the reader out applied it */
    CHECK_EQ(sync_isolated_end_read(isolated), EPERM);
    CHECK_EQ(sync_isolated_write_sync(isolated, bump_int, NULL), 0);
    CHECK_EQ(value, 2);
    CHECK_EQ(sync_isolated_destroy(isolated), 0);
}

int main(void) {
    test_serial_fifo();
    test_sync_and_reentry();
    test_concurrent_barriers();
    test_queue_destroy_runs_pending();
    test_executor();
    test_executor_in_forked_child();
    test_cross_deadlock();
    test_isolated();
    test_isolated_end_read_by_bystander();
    DONE();
}
