/* sync/atomics.h semantics: the atomic values (golden values, wrapping, threads), the seed-004
 * throttler scenarios (never more than N inside, never negative, never stuck full; the busy
 * flag; the single-in-flight request), autorelease pools (order, nesting, thread exit,
 * no-pool report), and the dictionary's API and bad input. */
#include <sync.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

enum { THREADS = 8 };

static void run_threads(void *(*body)(void *), void *arg) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, body, arg) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static void test_values(void) {
    sync_atomic_bool_t b = SYNC_ATOMIC_BOOL_INIT(false);
    CHECK(!sync_atomic_bool_get(&b));
    CHECK(sync_atomic_bool_compare_and_set(&b, false, true));
    CHECK(!sync_atomic_bool_compare_and_set(&b, false, true));
    CHECK(sync_atomic_bool_get(&b));
    CHECK(sync_atomic_bool_get_and_set(&b, false) == true);
    sync_atomic_bool_set(&b, true);
    CHECK_EQ(b.value, 1);

    sync_atomic_int32_t i = SYNC_ATOMIC_INT32_INIT(5);
    CHECK_EQ(sync_atomic_int32_get_and_increment(&i), 5);
    CHECK_EQ(sync_atomic_int32_increment_and_get(&i), 7);
    CHECK_EQ(sync_atomic_int32_get_and_decrement(&i), 7);
    CHECK_EQ(sync_atomic_int32_decrement_and_get(&i), 5);
    CHECK_EQ(sync_atomic_int32_get_and_add(&i, 10), 5);
    CHECK_EQ(sync_atomic_int32_add_and_get(&i, -20), -5);
    CHECK_EQ(sync_atomic_int32_get_and_set(&i, INT32_MAX), -5);
    CHECK_EQ(sync_atomic_int32_increment_and_get(&i), INT32_MIN); /* wraps */
    CHECK(sync_atomic_int32_compare_and_set(&i, INT32_MIN, 3));
    CHECK(!sync_atomic_int32_compare_and_set(&i, INT32_MIN, 4));
    sync_atomic_int32_set(&i, 9);
    CHECK_EQ(sync_atomic_int32_get(&i), 9);

    sync_atomic_int64_t l = SYNC_ATOMIC_INT64_INIT(INT64_MAX);
    CHECK(sync_atomic_int64_get_and_increment(&l) == INT64_MAX);
    CHECK(sync_atomic_int64_get(&l) == INT64_MIN);
    CHECK(sync_atomic_int64_add_and_get(&l, 1LL << 40) == INT64_MIN + (1LL << 40));
    CHECK(sync_atomic_int64_get_and_add(&l, -1) == INT64_MIN + (1LL << 40));
    CHECK(sync_atomic_int64_decrement_and_get(&l) == INT64_MIN + (1LL << 40) - 2);
    CHECK(sync_atomic_int64_get_and_decrement(&l) == INT64_MIN + (1LL << 40) - 2);
    CHECK(sync_atomic_int64_increment_and_get(&l) == INT64_MIN + (1LL << 40) - 2);
    CHECK(sync_atomic_int64_get_and_set(&l, 1) == INT64_MIN + (1LL << 40) - 2);
    CHECK(sync_atomic_int64_compare_and_set(&l, 1, 2) && !sync_atomic_int64_compare_and_set(&l, 1, 3));
    sync_atomic_int64_set(&l, -7);
    CHECK(l.value == -7);
}

static sync_atomic_int32_t shared32 = SYNC_ATOMIC_INT32_INIT(0);
static sync_atomic_int64_t shared64 = SYNC_ATOMIC_INT64_INIT(0);
static sync_atomic_int32_t cas_counter = SYNC_ATOMIC_INT32_INIT(0);

static void *hammer(void *arg) {
    (void)arg;
    for (int k = 0; k < 100000; k++) {
        sync_atomic_int32_increment_and_get(&shared32);
        sync_atomic_int64_get_and_add(&shared64, 3);
        sync_atomic_int64_decrement_and_get(&shared64);
        int32_t old;
        do { old = sync_atomic_int32_get(&cas_counter); } while (!sync_atomic_int32_compare_and_set(&cas_counter, old, old + 1));
    }
    return NULL;
}

/* ---- Throttler --------------------------------------------------------------------------- */

enum { LIMIT = 3 };
static sync_throttler_t throttler = SYNC_THROTTLER_INIT(LIMIT);
static atomic_int inside, max_inside, admitted, refused;

static void critical_section(void *context) {
    (void)context;
    int now = atomic_fetch_add(&inside, 1) + 1;
    int seen = atomic_load(&max_inside);
    while (now > seen && !atomic_compare_exchange_weak(&max_inside, &seen, now)) {}
    CHECK(now <= LIMIT);
    CHECK(sync_throttler_holders(&throttler) <= LIMIT);
    for (volatile int spin = 0; spin < 200; spin++) {}
    atomic_fetch_sub(&inside, 1);
}

static void *throttled_worker(void *arg) {
    (void)arg;
    for (int k = 0; k < 20000; k++) {
        if (sync_throttler_exec(&throttler, critical_section, NULL)) atomic_fetch_add(&admitted, 1);
        else atomic_fetch_add(&refused, 1);
    }
    return NULL;
}

static void *waiting_worker(void *arg) {
    (void)arg;
    for (int k = 0; k < 2000; k++) {
        CHECK_EQ(sync_throttler_enter(&throttler, -1), 0);
        critical_section(NULL);
        CHECK_EQ(sync_throttler_exit(&throttler), 0);
    }
    return NULL;
}

static void *refusing_worker(void *arg) {
    for (int k = 0; k < 100; k++) CHECK_EQ(sync_throttler_try_enter(arg), EBUSY);
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* sync.h's time model in the throttler's `_until` and `_interruptible` forms. */
static void on_signal(int signo) { (void)signo; }

static void *enter_until_no_deadline(void *t) {
    int result = sync_throttler_enter_until(t, -1);
    if (result == 0) result = sync_throttler_exit(t);
    return (void *)(intptr_t)result;
}

static atomic_int interruptible_done;
static void *enter_interruptible_no_deadline(void *t) {
    int result = sync_throttler_enter_interruptible(t, -1);
    atomic_store(&interruptible_done, 1);
    return (void *)(intptr_t)result;
}

/* Waits (bounded against a hang) until `count` threads wait in t. */
static void await_waiters(sync_throttler_t *t, int count) {
    for (int i = 0; i < 60000 && __atomic_load_n(&t->waiters, __ATOMIC_SEQ_CST) != count; i++) usleep(1000);
    CHECK_EQ(__atomic_load_n(&t->waiters, __ATOMIC_SEQ_CST), count);
}

static void test_throttler_deadlines(void) {
    sync_throttler_t t;
    CHECK_EQ(sync_throttler_init(&t, 1), 0);
    CHECK_EQ(sync_throttler_enter_until(&t, 0), 0);                  /* free: one try admits */
    CHECK_EQ(sync_throttler_enter_until(&t, 0), ETIMEDOUT);          /* full: one try, counted */
    CHECK_EQ(sync_throttler_enter_until(&t, sync_monotonic_ns() - 1), ETIMEDOUT);
    CHECK_EQ(sync_throttler_enter_interruptible(&t, 0), ETIMEDOUT);
    CHECK_EQ(sync_throttler_rejections(&t), 3);
    /* The main thread's interruptible wait ends in EINTR at the end of a slice, long before a
     * deadline a minute away; EINTR is not a rejection. */
    CHECK_EQ(sync_throttler_enter_interruptible(&t, sync_monotonic_ns() + 60000000000LL), EINTR);
    CHECK_EQ(sync_throttler_rejections(&t), 3);

    /* A negative deadline is none: the waiter stays until a slot frees. */
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, enter_until_no_deadline, &t) == 0);
    await_waiters(&t, 1);
    CHECK_EQ(sync_throttler_exit(&t), 0);
    void *result;
    pthread_join(waiter, &result);
    CHECK_EQ((intptr_t)result, 0);
    CHECK_EQ(sync_throttler_holders(&t), 0);

    /* A signal handler interrupts a waiter of another thread (no slices there): EINTR, not
     * counted. Signals go on until it returns, as one that comes before it sleeps is lost. */
    struct sigaction action = { .sa_handler = on_signal }, old;
    sigemptyset(&action.sa_mask);
    CHECK(sigaction(SIGUSR1, &action, &old) == 0);
    CHECK_EQ(sync_throttler_enter(&t, 0), 0);
    atomic_store(&interruptible_done, 0);
    CHECK(pthread_create(&waiter, NULL, enter_interruptible_no_deadline, &t) == 0);
    await_waiters(&t, 1);
    for (int i = 0; i < 60000 && !atomic_load(&interruptible_done); i++) {
        pthread_kill(waiter, SIGUSR1);
        usleep(1000);
    }
    pthread_join(waiter, &result);
    CHECK_EQ((intptr_t)result, EINTR);
    CHECK_EQ(sync_throttler_rejections(&t), 3);
    CHECK(sigaction(SIGUSR1, &old, NULL) == 0);
    CHECK_EQ(sync_throttler_exit(&t), 0);

    /* NULL or misaligned: EINVAL (queries: 0), nothing touched. */
    char raw[sizeof(sync_throttler_t) + 8] __attribute__((aligned(8)));
    sync_throttler_t *misaligned = (sync_throttler_t *)(raw + 4);
    CHECK_EQ(sync_throttler_enter_until(NULL, 0), EINVAL);
    CHECK_EQ(sync_throttler_enter_interruptible(NULL, 0), EINVAL);
    CHECK_EQ(sync_throttler_try_enter(NULL), EINVAL);
    CHECK_EQ(sync_throttler_exit(NULL), EINVAL);
    CHECK_EQ(sync_throttler_init(misaligned, 1), EINVAL);
    CHECK_EQ(sync_throttler_try_enter(misaligned), EINVAL);
    CHECK_EQ(sync_throttler_enter_until(misaligned, -1), EINVAL);
    CHECK_EQ(sync_throttler_holders(NULL), 0);
    CHECK_EQ(sync_throttler_rejections(NULL), 0);
    CHECK(!sync_throttler_exec(NULL, NULL, NULL));
}

static void test_throttler(void) {
    run_threads(throttled_worker, NULL);
    CHECK_EQ(atomic_load(&admitted) + atomic_load(&refused), THREADS * 20000);
    CHECK_EQ(sync_throttler_rejections(&throttler), atomic_load(&refused));
    CHECK(atomic_load(&max_inside) <= LIMIT);
    CHECK_EQ(sync_throttler_holders(&throttler), 0); /* never stuck: back to empty */
    run_threads(waiting_worker, NULL);
    CHECK_EQ(sync_throttler_holders(&throttler), 0);
    CHECK(atomic_load(&max_inside) <= LIMIT);

    /* Full: fail fast, timed wait times out, exit frees a slot, exit never goes negative. */
    sync_throttler_t t;
    CHECK_EQ(sync_throttler_init(&t, 0), EINVAL);
    CHECK_EQ(sync_throttler_init(&t, 2), 0);
    CHECK_EQ(sync_throttler_try_enter(&t), 0);
    CHECK_EQ(sync_throttler_enter(&t, 0), 0);
    CHECK_EQ(sync_throttler_try_enter(&t), EBUSY);
    double start = now_s();
    CHECK_EQ(sync_throttler_enter(&t, 100000000), ETIMEDOUT);
    double waited = now_s() - start;
    CHECK(waited >= 0.09 && waited < 5);
    CHECK_EQ(sync_throttler_rejections(&t), 2);
    CHECK_EQ(sync_throttler_holders(&t), 2);
    CHECK_EQ(sync_throttler_exit(&t), 0);
    CHECK_EQ(sync_throttler_exit(&t), 0);
    CHECK_EQ(sync_throttler_exit(&t), EPERM);
    CHECK_EQ(sync_throttler_holders(&t), 0);
    sync_throttler_t bad = SYNC_THROTTLER_INIT(0);
    CHECK_EQ(sync_throttler_try_enter(&bad), EINVAL);
    CHECK_EQ(sync_throttler_init(NULL, 1), EINVAL);

    /* Rejections are per-thread counters keyed by address and generation: memory initialised
     * again starts from zero, and a thread refusing on more throttlers than it has counters
     * (8) still counts every refusal exactly (the shared word). */
    CHECK_EQ(sync_throttler_init(&t, 1), 0);
    CHECK_EQ(sync_throttler_rejections(&t), 0);
    CHECK_EQ(sync_throttler_try_enter(&t), 0);
    CHECK_EQ(sync_throttler_try_enter(&t), EBUSY); /* the thread's last counter was the old t's */
    CHECK_EQ(sync_throttler_rejections(&t), 1);
    sync_throttler_t many[12];
    for (int i = 0; i < 12; i++) {
        CHECK_EQ(sync_throttler_init(&many[i], 1), 0);
        CHECK_EQ(sync_throttler_try_enter(&many[i]), 0);
        for (int j = 0; j <= i; j++) CHECK_EQ(sync_throttler_try_enter(&many[i]), EBUSY);
    }
    for (int i = 0; i < 12; i++) CHECK_EQ(sync_throttler_rejections(&many[i]), i + 1);
    /* Refusals alternating between throttlers (each switch leaves the thread's cached counter). */
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 12; i++) CHECK_EQ(sync_throttler_try_enter(&many[i]), EBUSY);
    for (int i = 0; i < 12; i++) CHECK_EQ(sync_throttler_rejections(&many[i]), i + 4);
    /* Threads that refuse and exit: their counts stay, and the next thread to take the record
     * counts on from there, not into a stale cache. */
    for (int k = 0; k < 3; k++) run_threads(refusing_worker, &t);
    CHECK_EQ(sync_throttler_rejections(&t), 1 + 3 * THREADS * 100);
}

/* Rejections read while threads count them: each thread counts refusals on its cached
 * throttler in TLS and folds them into its record when it switches throttler or exits. A
 * reader must see every refusal exactly once at every moment: never fewer than the refusals
 * already returned, never more than those plus one in flight per thread (a fold counted twice
 * would add a whole burst), never decreasing; and exact at the end. */
enum { BURST = 50, SWITCHES = 200, COUNTERS = 4, WAVES = 3 };
static sync_throttler_t pair[2];
static atomic_long returned[2];
static atomic_int reading_done;

static void *switching_worker(void *arg) {
    (void)arg;
    for (int s = 0; s < SWITCHES; s++)
        for (int k = 0; k < BURST; k++) {
            CHECK_EQ(sync_throttler_try_enter(&pair[s & 1]), EBUSY);
            atomic_fetch_add(&returned[s & 1], 1);
        }
    return NULL;
}

static atomic_int reader_started;

/* Checks every poll, however many the scheduler lets it make while the workers count (the
 * interleaving decides how many overlap; the invariants hold for each one). */
static void *rejections_reader(void *arg) {
    (void)arg;
    long last[2] = {0, 0};
    do {
        for (int i = 0; i < 2; i++) {
            long before = atomic_load(&returned[i]);
            long seen = sync_throttler_rejections(&pair[i]);
            long after = atomic_load(&returned[i]);
            CHECK(seen >= before);
            CHECK(seen <= after + COUNTERS);
            CHECK(seen >= last[i]);
            last[i] = seen;
        }
        atomic_store(&reader_started, 1);
    } while (!atomic_load(&reading_done));
    return NULL;
}

static void test_throttler_rejections_read_while_counting(void) {
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sync_throttler_init(&pair[i], 1), 0);
        CHECK_EQ(sync_throttler_try_enter(&pair[i]), 0);
    }
    pthread_t reader;
    CHECK(pthread_create(&reader, NULL, rejections_reader, NULL) == 0);
    while (!atomic_load(&reader_started)) sched_yield();  /* reading before the first refusal */
    for (int wave = 0; wave < WAVES; wave++) {  /* threads exit (fold into their records) between waves */
        pthread_t t[COUNTERS];
        for (int i = 0; i < COUNTERS; i++) CHECK(pthread_create(&t[i], NULL, switching_worker, NULL) == 0);
        for (int i = 0; i < COUNTERS; i++) pthread_join(t[i], NULL);
    }
    atomic_store(&reading_done, 1);
    pthread_join(reader, NULL);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(sync_throttler_rejections(&pair[i]), (long)WAVES * COUNTERS * (SWITCHES / 2) * BURST);
}

/* fork() while other threads read rejections and fold counts: the child has only the forking
 * thread, so a reader count or a half-made fold of a thread it does not have must not make the
 * child wait forever (reading rejections, or a thread of its own exiting). */
static atomic_int forking_done;

static void *folding_worker(void *arg) {
    (void)arg;
    for (unsigned s = 0; !atomic_load(&forking_done); s++) (void)sync_throttler_try_enter(&pair[s & 1]);
    return NULL;
}

static void *polling_reader(void *arg) {
    (void)arg;
    while (!atomic_load(&forking_done)) (void)sync_throttler_rejections(&pair[0]);
    return NULL;
}

static void *refuse_and_exit(void *arg) {
    (void)arg;
    for (int k = 0; k < 10; k++) if (sync_throttler_try_enter(&pair[k & 1]) != EBUSY) _exit(3);
    return NULL;
}

static void test_throttler_fork_while_counting(void) {
    pthread_t folder, reader;
    CHECK(pthread_create(&folder, NULL, folding_worker, NULL) == 0);
    CHECK(pthread_create(&reader, NULL, polling_reader, NULL) == 0);
    for (int round = 0; round < 100; round++) {
        /* Threads that exit between forks leave records free for the child to take. */
        pthread_t t;
        CHECK(pthread_create(&t, NULL, refuse_and_exit, NULL) == 0);
        pthread_join(t, NULL);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            alarm(10);  /* a hang ends the child with SIGALRM, which the parent reports */
            for (int i = 0; i < 2; i++) if (sync_throttler_rejections(&pair[i]) < 0) _exit(4);
            for (int k = 0; k < 4; k++) {
                pthread_t u;
                if (pthread_create(&u, NULL, refuse_and_exit, NULL) != 0) _exit(5);
                pthread_join(u, NULL);
            }
            _exit(0);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) fprintf(stderr, "child: exited %d code %d, signal %d\n", WIFEXITED(status), WEXITSTATUS(status), WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    atomic_store(&forking_done, 1);
    pthread_join(folder, NULL);
    pthread_join(reader, NULL);
}

/* fork() while another thread holds refusals not yet folded into its record: the child counts
 * them exactly once, and its own threads (which reuse the absent thread's stack, and so the
 * address of its thread-local entry) count on from there. */
static sync_throttler_t forked;
static pthread_barrier_t fork_sync;

static void *refuse_then_wait(void *arg) {
    long n = (long)arg;
    for (long k = 0; k < n; k++) CHECK_EQ(sync_throttler_try_enter(&forked), EBUSY);
    pthread_barrier_wait(&fork_sync);  /* counted, not folded: this thread is alive at the fork */
    pthread_barrier_wait(&fork_sync);
    return NULL;
}

static void *refuse_100(void *arg) {
    (void)arg;
    for (int k = 0; k < 100; k++) if (sync_throttler_try_enter(&forked) != EBUSY) _exit(3);
    return NULL;
}

static void test_throttler_fork_counts_exactly(void) {
    CHECK_EQ(sync_throttler_init(&forked, 1), 0);
    CHECK_EQ(sync_throttler_try_enter(&forked), 0);
    CHECK(pthread_barrier_init(&fork_sync, NULL, 2) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, refuse_then_wait, (void *)1000L) == 0);
    pthread_barrier_wait(&fork_sync);
    CHECK_EQ(sync_throttler_rejections(&forked), 1000);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(10);
        if (sync_throttler_rejections(&forked) != 1000) _exit(4);
        for (int k = 1; k <= 4; k++) {
            pthread_t u;
            if (pthread_create(&u, NULL, refuse_100, NULL) != 0) _exit(5);
            pthread_join(u, NULL);
            if (sync_throttler_rejections(&forked) != 1000 + 100 * k) _exit(6);
        }
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pthread_barrier_wait(&fork_sync);
    pthread_join(t, NULL);
    CHECK_EQ(sync_throttler_rejections(&forked), 1000);
    pthread_barrier_destroy(&fork_sync);
}

/* Refusals made by a thread's pthread key destructors after its record was given back, in every
 * destructor round the thread has left: each counted exactly once, and a later thread that
 * takes the record (or the exited thread's stack) counts on from there. */
static pthread_key_t late_key;

static void late_destructor(void *value) {
    long round = (long)value;
    CHECK_EQ(sync_throttler_try_enter(&forked), EBUSY);
    if (round < 8) pthread_setspecific(late_key, (void *)(round + 1));  /* more rounds than there are */
}

static void *refuse_10_then_exit_late(void *arg) {
    (void)arg;
    for (int k = 0; k < 10; k++) CHECK_EQ(sync_throttler_try_enter(&forked), EBUSY);
    pthread_setspecific(late_key, (void *)1);
    return NULL;
}

static void test_throttler_counts_in_late_destructors(void) {
    CHECK_EQ(sync_throttler_init(&forked, 1), 0);
    CHECK_EQ(sync_throttler_try_enter(&forked), 0);
    CHECK_EQ(sync_throttler_try_enter(&forked), EBUSY);  /* the main thread has a record (and the library its key) */
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    /* A stack size no other thread here uses: glibc gives the exited thread's stack, and with it
     * the address of its thread-local entry, to the next thread of that size. */
    pthread_attr_t same_stack;
    pthread_attr_init(&same_stack);
    pthread_attr_setstacksize(&same_stack, 3 << 20);
    pthread_t t;
    CHECK(pthread_create(&t, &same_stack, refuse_10_then_exit_late, NULL) == 0);
    pthread_join(t, NULL);
    /* 1 + 10, plus one refusal per destructor round the thread had (PTHREAD_DESTRUCTOR_ITERATIONS) */
    long after = sync_throttler_rejections(&forked);
    CHECK_EQ(after, 1 + 10 + PTHREAD_DESTRUCTOR_ITERATIONS);
    for (int k = 1; k <= 3; k++) {
        CHECK(pthread_create(&t, &same_stack, refuse_100, NULL) == 0);
        pthread_join(t, NULL);
        CHECK_EQ(sync_throttler_rejections(&forked), after + 100 * k);
    }
    pthread_attr_destroy(&same_stack);
    pthread_key_delete(late_key);
}

/* Busy flag (N = 1 with an AtomicBoolean, the seed's compareTo:andSetValue:). */
/* A retain function that reads other references: gets nest 20 deep (more hazard slots than a
 * thread record has), and every count still balances. */
enum { CHAIN = 20 };
static sync_atomic_ref_t chain[CHAIN];
static atomic_int chain_refs[CHAIN];
static int chain_depth = -1; /* -1: retains do not nest (set) */
static void chain_retain(void *o) {
    atomic_fetch_add(&chain_refs[(int *)o - (int *)chain_refs], 1);
    if (chain_depth >= 0 && chain_depth + 1 < CHAIN) {
        int next = ++chain_depth;
        void *inner = sync_atomic_ref_get(&chain[next]);
        CHECK(inner == &chain_refs[next]);
        atomic_fetch_sub(&chain_refs[next], 1);
    }
}
static void chain_release(void *o) { atomic_fetch_sub(&chain_refs[(int *)o - (int *)chain_refs], 1); }

static void test_nested_gets(void) {
    for (int i = 0; i < CHAIN; i++) {
        CHECK_EQ(sync_atomic_ref_init(&chain[i], chain_retain, chain_release), 0);
        sync_atomic_ref_set(&chain[i], (void *)&chain_refs[i]);
    }
    for (int round = 0; round < 3; round++) {
        chain_depth = 0;
        void *outer = sync_atomic_ref_get(&chain[0]);
        CHECK(outer == &chain_refs[0]);
        CHECK_EQ(chain_depth, CHAIN - 1);
        chain_depth = -1;
        chain_release(outer);
        for (int i = 0; i < CHAIN; i++) CHECK_EQ(atomic_load(&chain_refs[i]), 1);
    }
    for (int i = 0; i < CHAIN; i++) sync_atomic_ref_destroy(&chain[i]);
    for (int i = 0; i < CHAIN; i++) CHECK_EQ(atomic_load(&chain_refs[i]), 0);
}

static sync_atomic_bool_t busy = SYNC_ATOMIC_BOOL_INIT(false);
static atomic_int busy_inside, busy_runs;
static void *busy_worker(void *arg) {
    (void)arg;
    for (int k = 0; k < 20000; k++) {
        if (!sync_atomic_bool_compare_and_set(&busy, false, true)) continue;
        CHECK_EQ(atomic_fetch_add(&busy_inside, 1), 0);
        atomic_fetch_add(&busy_runs, 1);
        atomic_fetch_sub(&busy_inside, 1);
        sync_atomic_bool_set(&busy, false);
    }
    return NULL;
}

/* The single-in-flight request (seed 004's launchRequest / cancelActiveRequest). */
typedef struct request { atomic_int refs; atomic_int cancelled; } request;
static atomic_int requests_live;
static void request_retain(void *o) { atomic_fetch_add(&((request *)o)->refs, 1); }
static void request_release(void *o) {
    request *r = o;
    if (atomic_fetch_sub(&r->refs, 1) == 1) { atomic_fetch_sub(&requests_live, 1); free(r); }
}
static sync_atomic_ref_t current_request = SYNC_ATOMIC_REF_INIT(request_retain, request_release);
static atomic_int launched, cancelled;

static bool launch_request(void) {
    request *r = calloc(1, sizeof *r);
    atomic_store(&r->refs, 1);
    atomic_fetch_add(&requests_live, 1);
    bool ok = sync_atomic_ref_compare_and_set(&current_request, NULL, r);
    request_release(r); /* the reference holds its own +1 if it took it */
    return ok;
}
static bool cancel_active_request(void) {
    request *r = sync_atomic_ref_get_and_set(&current_request, NULL);
    if (!r) return false;
    CHECK_EQ(atomic_fetch_add(&r->cancelled, 1), 0); /* each request cancelled once */
    request_release(r);
    return true;
}
static void *request_worker(void *arg) {
    (void)arg;
    for (int k = 0; k < 20000; k++) {
        if (k % 2) { if (launch_request()) atomic_fetch_add(&launched, 1); }
        else if (cancel_active_request()) atomic_fetch_add(&cancelled, 1);
    }
    return NULL;
}

static void test_seed_004(void) {
    run_threads(busy_worker, NULL);
    CHECK(atomic_load(&busy_runs) > 0);
    CHECK(!sync_atomic_bool_get(&busy));
    run_threads(request_worker, NULL);
    if (cancel_active_request()) atomic_fetch_add(&cancelled, 1);
    CHECK_EQ(atomic_load(&launched), atomic_load(&cancelled));
    CHECK(atomic_load(&launched) > 0);
    CHECK_EQ(atomic_load(&requests_live), 0);
    CHECK(sync_atomic_ref_get(&current_request) == NULL);
}

/* ---- Autorelease pools ------------------------------------------------------------------- */

static int release_log[16], release_count;
static void log_release(void *o) { release_log[release_count++] = (int)(intptr_t)o; }

static atomic_int thread_releases;
static void count_release(void *o) { (void)o; atomic_fetch_add(&thread_releases, 1); }
static void *exits_with_open_pools(void *arg) {
    (void)arg;
    sync_autorelease_pool_push();
    sync_autorelease((void *)1, count_release);
    sync_autorelease_pool_push();
    sync_autorelease((void *)2, count_release);
    return NULL; /* both pools open */
}

static void test_pools(void) {
    CHECK_EQ(sync_autorelease_pool_depth(), 0);
    CHECK_EQ(sync_autorelease((void *)1, log_release), EPERM); /* reported, not leaked silently */
    CHECK_EQ(sync_autorelease((void *)1, NULL), EINVAL);
    size_t outer = sync_autorelease_pool_push();
    CHECK_EQ(outer, 1);
    CHECK_EQ(sync_autorelease((void *)1, log_release), 0);
    CHECK_EQ(sync_autorelease((void *)2, log_release), 0);
    size_t inner = sync_autorelease_pool_push();
    CHECK_EQ(inner, 2);
    CHECK_EQ(sync_autorelease((void *)3, log_release), 0);
    CHECK_EQ(sync_autorelease_pool_pop(inner), 0);
    CHECK_EQ(release_count, 1);
    CHECK_EQ(release_log[0], 3);
    CHECK_EQ(sync_autorelease_pool_pop(inner), EINVAL); /* already closed */
    sync_autorelease_pool_push();
    CHECK_EQ(sync_autorelease((void *)4, log_release), 0);
    CHECK_EQ(sync_autorelease_pool_pop(outer), 0); /* closes the inner one too */
    CHECK_EQ(release_count, 4);
    CHECK_EQ(release_log[1], 4); /* reverse order */
    CHECK_EQ(release_log[2], 2);
    CHECK_EQ(release_log[3], 1);
    CHECK_EQ(sync_autorelease_pool_depth(), 0);
    CHECK_EQ(sync_autorelease_pool_pop(0), EINVAL);

    pthread_t t;
    CHECK(pthread_create(&t, NULL, exits_with_open_pools, NULL) == 0);
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&thread_releases), 2);
}

/* ---- Dictionary API ---------------------------------------------------------------------- */

static atomic_int dict_refs[8];
static void dict_retain(void *o) { atomic_fetch_add(&dict_refs[(intptr_t)o], 1); }
static void dict_release(void *o) { CHECK(atomic_fetch_sub(&dict_refs[(intptr_t)o], 1) > 0); }
static int keys_seen;
static void each_key(const void *key, size_t length, void *context) {
    (void)key; (void)context;
    CHECK(length == 1 || length == 4 || length == 5);
    keys_seen++;
}

static void test_dictionary(void) {
    sync_dictionary_t *d;
    CHECK_EQ(sync_dictionary_create(NULL, dict_retain, dict_release), EINVAL);
    CHECK_EQ(sync_dictionary_create(&d, NULL, dict_release), EINVAL);
    CHECK_EQ(sync_dictionary_create(&d, dict_retain, dict_release), 0);
    CHECK(sync_dictionary_get(d, "name", 4) == NULL);
    CHECK_EQ(sync_dictionary_set(d, "name", 4, (void *)1), 0);
    CHECK_EQ(dict_refs[1], 1);
    CHECK_EQ(sync_dictionary_set(d, "name", 4, NULL), EINVAL);
    CHECK_EQ(sync_dictionary_set(d, NULL, 3, (void *)2), EINVAL);
    void *v = sync_dictionary_get(d, "name", 4);
    CHECK(v == (void *)1);
    CHECK_EQ(dict_refs[1], 2); /* +1 for the caller */
    CHECK_EQ(sync_dictionary_set(d, "name", 4, (void *)2), 0);
    CHECK_EQ(dict_refs[1], 1); /* the dictionary let go, our +1 remains */
    dict_release(v);
    CHECK_EQ(sync_dictionary_set(d, "x", 1, (void *)3), 0);
    CHECK_EQ(sync_dictionary_set(d, "", 0, (void *)4), 0);
    CHECK_EQ(sync_dictionary_set(d, "named", 5, (void *)5), 0);
    CHECK_EQ(sync_dictionary_count(d), 4);
    CHECK_EQ(sync_dictionary_remove(d, "", 0), 0);
    CHECK_EQ(dict_refs[4], 0);
    CHECK_EQ(sync_dictionary_remove(d, "", 0), ENOENT);
    CHECK_EQ(sync_dictionary_keys(d, each_key, NULL), 3);
    CHECK_EQ(keys_seen, 3);
    sync_dictionary_destroy(d);
    for (int i = 0; i < 8; i++) CHECK_EQ(dict_refs[i], 0);
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_THREAD_SANITIZER 1
#endif
#endif
#ifndef UNDER_THREAD_SANITIZER
#define UNDER_THREAD_SANITIZER 0
#endif

int main(void) {
    test_values();
    run_threads(hammer, NULL);
    CHECK_EQ(sync_atomic_int32_get(&shared32), THREADS * 100000);
    CHECK(sync_atomic_int64_get(&shared64) == (int64_t)THREADS * 200000);
    CHECK_EQ(sync_atomic_int32_get(&cas_counter), THREADS * 100000);
    test_throttler();
    test_throttler_deadlines();
    test_throttler_rejections_read_while_counting();
    /* Not under TSan, which cannot run threads in the child of a multithreaded fork, nor code in
     * the key destructor rounds after its own (where the late-destructor test counts). */
    if (!UNDER_THREAD_SANITIZER) {
        test_throttler_fork_while_counting();
        test_throttler_fork_counts_exactly();
        test_throttler_counts_in_late_destructors();
    }
    test_nested_gets();
    test_seed_004();
    test_pools();
    test_dictionary();
    DONE();
}
