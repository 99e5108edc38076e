/* Lock-order checking (sync/debug.h) in one process: inversions are reported with their sites,
 * consistent orders are not, every lock kind takes part, trylocks add no order, reused memory
 * gives no false report. (Child processes: test_lock_order_children.c.) */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define CHECK_STR_EQ(a, b) do { \
    const char *a_ = (a), *b_ = (b); \
    if (a_ == NULL || strcmp(a_, b_) != 0) { fprintf(stderr, "%s:%d: FAILED: %s == \"%s\" (got \"%s\")\n", \
                                                 __FILE__, __LINE__, #a, b_, a_ ? a_ : "NULL"); exit(1); } \
    CHECK_PASSED(); } while (0)

/* What the handler saw: the last cycle, copied. */
#define MAX_EDGES 8
static struct {
    int reports;
    size_t length;
    const void *from[MAX_EDGES], *to[MAX_EDGES];
    uint32_t thread[MAX_EDGES];
    char site[MAX_EDGES][4096];
    char kind[MAX_EDGES][32], from_kind[MAX_EDGES][32];
    char from_name[MAX_EDGES][32], to_name[MAX_EDGES][32], thread_name[MAX_EDGES][32];  /* "" for NULL */
    char text[16384];
} seen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_cycle(const sync_lock_order_cycle_t *cycle, void *context) {
    CHECK(context == &seen);
    pthread_mutex_lock(&seen_lock);
    seen.reports++;
    seen.length = cycle->length;
    for (size_t i = 0; i < cycle->length && i < MAX_EDGES; i++) {
        seen.from[i] = cycle->edges[i].from;
        seen.to[i] = cycle->edges[i].to;
        seen.thread[i] = cycle->edges[i].thread;
        snprintf(seen.site[i], sizeof seen.site[i], "%s", cycle->edges[i].site);
        snprintf(seen.kind[i], sizeof seen.kind[i], "%s", cycle->edges[i].to_kind);
        snprintf(seen.from_kind[i], sizeof seen.from_kind[i], "%s", cycle->edges[i].from_kind);
        const sync_lock_order_edge_t *e = &cycle->edges[i];
        snprintf(seen.from_name[i], sizeof seen.from_name[i], "%s", e->from_name ? e->from_name : "");
        snprintf(seen.to_name[i], sizeof seen.to_name[i], "%s", e->to_name ? e->to_name : "");
        snprintf(seen.thread_name[i], sizeof seen.thread_name[i], "%s", e->thread_name ? e->thread_name : "");
    }
    snprintf(seen.text, sizeof seen.text, "%s", cycle->text);
    pthread_mutex_unlock(&seen_lock);
}

static void start_checking(void) {
    memset(&seen, 0, sizeof seen);
    sync_debug_lock_order_reset();
    sync_debug_lock_order_set_handler(on_cycle, &seen);
    sync_debug_lock_order(true);
}

static uint32_t gettid_now(void) { return (uint32_t)syscall(SYS_gettid); }

/* ---- a two-thread inversion, the threads one after the other ---- */

static sync_mutex_t lock_a = SYNC_MUTEX_INIT, lock_b = SYNC_MUTEX_INIT;
static uint32_t tid_ab, tid_ba;

/* Not static: the test links with -rdynamic, so that backtraces name them. */
void *take_a_then_b(void *unused);
void *take_b_then_a(void *unused);

__attribute__((noinline)) void *take_a_then_b(void *unused) {
    (void)unused;
    tid_ab = gettid_now();
    CHECK_EQ(sync_mutex_lock(&lock_a), 0);
    CHECK_EQ(sync_mutex_lock(&lock_b), 0);
    CHECK_EQ(sync_mutex_unlock(&lock_b), 0);
    CHECK_EQ(sync_mutex_unlock(&lock_a), 0);
    return NULL;
}

__attribute__((noinline)) void *take_b_then_a(void *unused) {
    (void)unused;
    tid_ba = gettid_now();
    CHECK_EQ(sync_mutex_lock(&lock_b), 0);
    CHECK_EQ(sync_mutex_lock(&lock_a), 0);
    CHECK_EQ(sync_mutex_unlock(&lock_a), 0);
    CHECK_EQ(sync_mutex_unlock(&lock_b), 0);
    return NULL;
}

static void run_thread(void *(*body)(void *)) {
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, body, NULL), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
}

static void test_two_thread_inversion(void) {
    start_checking();
    run_thread(take_a_then_b);
    CHECK_EQ(seen.reports, 0);
    run_thread(take_b_then_a);  /* never deadlocks: the first thread is gone */
    CHECK_EQ(seen.reports, 1);
    CHECK_EQ(seen.length, 2);
    /* The cycle: A -> B (first seen in take_a_then_b), B -> A (in take_b_then_a), from either end. */
    int ab = seen.from[0] == &lock_a ? 0 : 1, ba = 1 - ab;
    CHECK(seen.from[ab] == &lock_a && seen.to[ab] == &lock_b);
    CHECK(seen.from[ba] == &lock_b && seen.to[ba] == &lock_a);
    CHECK_EQ(seen.thread[ab], tid_ab);
    CHECK_EQ(seen.thread[ba], tid_ba);
    CHECK(strstr(seen.site[ab], "take_a_then_b") != NULL);
    CHECK(strstr(seen.site[ba], "take_b_then_a") != NULL);
    CHECK(strcmp(seen.kind[ab], "mutex") == 0);
    CHECK(strstr(seen.text, "potential deadlock") != NULL);
    /* Once per cycle. */
    run_thread(take_b_then_a);
    run_thread(take_a_then_b);
    CHECK_EQ(seen.reports, 1);
    sync_debug_lock_order(false);
}

/* ---- a consistent order over 100 locks reports nothing ---- */

#define MANY 100
static sync_mutex_t many[MANY];

static void *take_in_order(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int round = 0; round < 20; round++) {
        /* An increasing subset, held nested, released in any order. */
        int taken[MANY], count = 0;
        for (int i = 0; i < MANY; i++) {
            if (rand_r(&seed) % 3 == 0) continue;
            CHECK_EQ(sync_mutex_lock(&many[i]), 0);
            taken[count++] = i;
        }
        for (int i = 0; i < count; i++) CHECK_EQ(sync_mutex_unlock(&many[taken[round % 2 ? i : count - 1 - i]]), 0);
    }
    return NULL;
}

static void test_consistent_order(void) {
    for (int i = 0; i < MANY; i++) CHECK_EQ(sync_mutex_init(&many[i], 0), 0);
    start_checking();
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) CHECK_EQ(pthread_create(&threads[t], NULL, take_in_order, (void *)(uintptr_t)(t + 1)), 0);
    for (int t = 0; t < 4; t++) CHECK_EQ(pthread_join(threads[t], NULL), 0);
    CHECK_EQ(seen.reports, 0);
    /* The check can fail: one step against the order is reported. */
    CHECK_EQ(sync_mutex_lock(&many[MANY - 1]), 0);
    CHECK_EQ(sync_mutex_lock(&many[0]), 0);
    CHECK_EQ(sync_mutex_unlock(&many[0]), 0);
    CHECK_EQ(sync_mutex_unlock(&many[MANY - 1]), 0);
    CHECK_EQ(seen.reports, 1);
    sync_debug_lock_order(false);
}

/* ---- a three-lock cycle, across kinds ---- */

static void test_three_lock_cycle(void) {
    sync_mutex_t a = SYNC_MUTEX_INIT;
    sync_rwlock_t b = SYNC_RWLOCK_INIT;
    sync_spinlock_t c = SYNC_SPINLOCK_INIT;
    start_checking();
    CHECK_EQ(sync_mutex_lock(&a), 0);      /* A -> B */
    CHECK_EQ(sync_rwlock_wrlock(&b), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&b), 0);
    CHECK_EQ(sync_mutex_unlock(&a), 0);
    CHECK_EQ(sync_rwlock_rdlock(&b), 0);   /* B -> C */
    CHECK_EQ(sync_spinlock_lock(&c), 0);
    CHECK_EQ(sync_spinlock_unlock(&c), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&b), 0);
    CHECK_EQ(seen.reports, 0);
    CHECK_EQ(sync_spinlock_lock(&c), 0);   /* C -> A closes the cycle */
    CHECK_EQ(sync_mutex_lock(&a), 0);
    CHECK_EQ(sync_mutex_unlock(&a), 0);
    CHECK_EQ(sync_spinlock_unlock(&c), 0);
    CHECK_EQ(seen.reports, 1);
    CHECK_EQ(seen.length, 3);
    for (size_t i = 0; i < 3; i++) CHECK(seen.to[i] == seen.from[(i + 1) % 3]);
    int found_a = 0, found_b = 0, found_c = 0;
    for (size_t i = 0; i < 3; i++) {
        found_a |= seen.from[i] == (void *)&a;
        found_b |= seen.from[i] == (void *)&b;
        found_c |= seen.from[i] == (void *)&c;
    }
    CHECK(found_a && found_b && found_c);
    CHECK(strstr(seen.text, "spin lock") != NULL && strstr(seen.text, "rwlock") != NULL);
    sync_debug_lock_order(false);
}

/* ---- each edge names the rwlock side taken on that edge ---- */

/* One thread writes `cache` then takes `m`, the next takes `m` then reads `cache` (or the
 * other way round with `write_first` false): the cycle's edges must say which side each took. */
static void check_rwlock_modes(bool write_first) {
    sync_mutex_t m;
    sync_rwlock_t cache;
    CHECK_EQ(sync_mutex_init(&m, 0), 0);
    CHECK_EQ(sync_rwlock_init(&cache, 0), 0);
    start_checking();
    CHECK_EQ(write_first ? sync_rwlock_wrlock(&cache) : sync_rwlock_rdlock(&cache), 0);  /* cache -> m */
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(write_first ? sync_rwlock_wrunlock(&cache) : sync_rwlock_rdunlock(&cache), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);                                                   /* m -> cache */
    CHECK_EQ(write_first ? sync_rwlock_rdlock(&cache) : sync_rwlock_wrlock(&cache), 0);
    CHECK_EQ(write_first ? sync_rwlock_rdunlock(&cache) : sync_rwlock_wrunlock(&cache), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(seen.reports, 1);
    CHECK_EQ(seen.length, 2);
    const char *first = write_first ? "rwlock (write)" : "rwlock (read)";
    const char *second = write_first ? "rwlock (read)" : "rwlock (write)";
    for (size_t i = 0; i < 2; i++) {
        if (seen.from[i] == (void *)&cache) {
            CHECK_STR_EQ(seen.from_kind[i], first);
            CHECK_STR_EQ(seen.kind[i], "mutex");
        } else {
            CHECK(seen.to[i] == (void *)&cache);
            CHECK_STR_EQ(seen.from_kind[i], "mutex");
            CHECK_STR_EQ(seen.kind[i], second);
        }
    }
    char expected[2][128];
    snprintf(expected[0], sizeof expected[0], "%s %p -> mutex %p", first, (void *)&cache, (void *)&m);
    snprintf(expected[1], sizeof expected[1], "mutex %p -> %s %p", (void *)&m, second, (void *)&cache);
    CHECK(strstr(seen.text, expected[0]) != NULL);
    CHECK(strstr(seen.text, expected[1]) != NULL);
    sync_debug_lock_order(false);
    sync_debug_lock_forget(&m);
    sync_debug_lock_forget(&cache);
}

static void test_rwlock_modes_per_edge(void) {
    check_rwlock_modes(true);
    check_rwlock_modes(false);

    /* A writer that downgrades holds the read side from then on. */
    sync_mutex_t m;
    sync_rwlock_t rw;
    CHECK_EQ(sync_mutex_init(&m, 0), 0);
    CHECK_EQ(sync_rwlock_init(&rw, 0), 0);
    start_checking();
    CHECK_EQ(sync_rwlock_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_downgrade(&rw), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);     /* rw (read) -> m */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);     /* m -> rw (write) */
    CHECK_EQ(sync_rwlock_wrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(seen.reports, 1);
    size_t out = seen.from[0] == (void *)&rw ? 0 : 1;
    CHECK(seen.from[out] == (void *)&rw);
    CHECK_STR_EQ(seen.from_kind[out], "rwlock (read)");
    CHECK_STR_EQ(seen.kind[1 - out], "rwlock (write)");
    sync_debug_lock_order(false);
    sync_debug_lock_forget(&m);
    sync_debug_lock_forget(&rw);
}

/* ---- the other kinds: recursive lock, synchronized, condition, condition lock ---- */

static int token_a, token_b;

static void test_other_kinds(void) {
    sync_recursive_lock_t r = SYNC_RECURSIVE_LOCK_INIT;
    sync_condition_t cond = SYNC_CONDITION_INIT;
    sync_condition_lock_t cl = SYNC_CONDITION_LOCK_INIT(0);

    start_checking();
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);      /* again: no new order */
    CHECK_EQ(sync_condition_enter(&cond), 0);
    CHECK_EQ(sync_condition_exit(&cond), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(seen.reports, 0);
    CHECK_EQ(sync_condition_enter(&cond), 0);
    CHECK_EQ(sync_recursive_lock_lock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_condition_exit(&cond), 0);
    CHECK_EQ(seen.reports, 1);

    start_checking();
    CHECK_EQ(sync_synchronized_enter(&token_a), 0);
    CHECK_EQ(sync_condition_lock_lock(&cl), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), 0);
    CHECK_EQ(sync_synchronized_exit(&token_a), 0);
    CHECK_EQ(sync_condition_lock_lock(&cl), 0);
    CHECK_EQ(sync_synchronized_enter(&token_a), 0);
    CHECK_EQ(sync_synchronized_exit(&token_a), 0);
    CHECK_EQ(sync_condition_lock_unlock(&cl), 0);
    CHECK_EQ(seen.reports, 1);
    CHECK(seen.from[0] == &token_a || seen.to[0] == &token_a);  /* a synchronized lock is its token */
    CHECK(strstr(seen.text, "synchronized") != NULL);

    /* Two tokens: their (reused) table entries never make the tokens one lock. */
    start_checking();
    CHECK_EQ(sync_synchronized_enter(&token_a), 0);
    CHECK_EQ(sync_synchronized_enter(&token_b), 0);
    CHECK_EQ(sync_synchronized_exit(&token_b), 0);
    CHECK_EQ(sync_synchronized_exit(&token_a), 0);
    CHECK_EQ(seen.reports, 0);
    CHECK_EQ(sync_synchronized_enter(&token_b), 0);
    CHECK_EQ(sync_synchronized_enter(&token_a), 0);
    CHECK_EQ(sync_synchronized_exit(&token_a), 0);
    CHECK_EQ(sync_synchronized_exit(&token_b), 0);
    CHECK_EQ(seen.reports, 1);
    sync_debug_lock_order(false);
}

/* ---- a trylock adds no order into the lock it tries ---- */

static void test_trylock(void) {
    sync_mutex_t a = SYNC_MUTEX_INIT, b = SYNC_MUTEX_INIT, c = SYNC_MUTEX_INIT;
    start_checking();
    CHECK_EQ(sync_mutex_lock(&a), 0);
    CHECK_EQ(sync_mutex_try_lock(&b), 0);   /* A held, B tried: no A -> B */
    CHECK_EQ(sync_mutex_lock(&c), 0);      /* but B -> C and A -> C */
    CHECK_EQ(sync_mutex_unlock(&c), 0);
    CHECK_EQ(sync_mutex_unlock(&b), 0);
    CHECK_EQ(sync_mutex_unlock(&a), 0);
    CHECK_EQ(sync_mutex_lock(&b), 0);
    CHECK_EQ(sync_mutex_lock(&a), 0);      /* B -> A: no cycle, A -> B was a trylock */
    CHECK_EQ(sync_mutex_unlock(&a), 0);
    CHECK_EQ(sync_mutex_unlock(&b), 0);
    CHECK_EQ(seen.reports, 0);
    CHECK_EQ(sync_mutex_lock(&c), 0);
    CHECK_EQ(sync_mutex_lock(&b), 0);      /* C -> B closes B -> C */
    CHECK_EQ(sync_mutex_unlock(&b), 0);
    CHECK_EQ(sync_mutex_unlock(&c), 0);
    CHECK_EQ(seen.reports, 1);
    sync_debug_lock_order(false);
}

/* ---- the first try of a blocking acquire counts as a lock; the thread hook runs first ---- */

static int hook_calls;
static void count_hook(void *context) {
    CHECK(context == &hook_calls);
    hook_calls++;
}

/* Holds `held`, then takes `first` through `take` (a `_trylock_first` function), then releases. */
static void first_after(sync_mutex_t *held, void *first, int (*take)(void *), int (*release)(void *)) {
    CHECK_EQ(sync_mutex_lock(held), 0);
    CHECK_EQ(take(first), 0);
    CHECK_EQ(release(first), 0);
    CHECK_EQ(sync_mutex_unlock(held), 0);
}

static int mutex_first(void *m) { return sync_mutex_try_lock_first(m); }
static int mutex_unlock(void *m) { return sync_mutex_unlock(m); }
static int recursive_first(void *l) { return sync_recursive_lock_try_lock_first(l); }
static int recursive_unlock(void *l) { return sync_recursive_lock_unlock(l); }
static int read_first(void *rw) { return sync_rwlock_try_rdlock_first(rw); }
static int read_unlock(void *rw) { return sync_rwlock_rdunlock(rw); }
static int write_first(void *rw) { return sync_rwlock_try_wrlock_first(rw); }
static int write_unlock(void *rw) { return sync_rwlock_wrunlock(rw); }
static int spin_first(void *s) { return sync_spinlock_try_lock_first(s); }
static int spin_unlock(void *s) { return sync_spinlock_unlock(s); }
static int condition_lock_first(void *l) { return sync_condition_lock_try_lock_first(l); }
static int condition_lock_when_first(void *l) { return sync_condition_lock_try_lock_when_first(l, 0); }
static int condition_lock_unlock(void *l) { return sync_condition_lock_unlock(l); }

static void test_first_try(void) {
    struct { void *lock; int (*take)(void *); int (*release)(void *); } kinds[7];
    sync_mutex_t m = SYNC_MUTEX_INIT, held = SYNC_MUTEX_INIT;
    sync_recursive_lock_t rec = SYNC_RECURSIVE_LOCK_INIT;
    sync_rwlock_t rw1 = SYNC_RWLOCK_INIT, rw2 = SYNC_RWLOCK_INIT;
    sync_spinlock_t spin = SYNC_SPINLOCK_INIT;
    sync_condition_lock_t cl1 = SYNC_CONDITION_LOCK_INIT(0), cl2 = SYNC_CONDITION_LOCK_INIT(0);
    kinds[0].lock = &m, kinds[0].take = mutex_first, kinds[0].release = mutex_unlock;
    kinds[1].lock = &rec, kinds[1].take = recursive_first, kinds[1].release = recursive_unlock;
    kinds[2].lock = &rw1, kinds[2].take = read_first, kinds[2].release = read_unlock;
    kinds[3].lock = &rw2, kinds[3].take = write_first, kinds[3].release = write_unlock;
    kinds[4].lock = &spin, kinds[4].take = spin_first, kinds[4].release = spin_unlock;
    kinds[5].lock = &cl1, kinds[5].take = condition_lock_first, kinds[5].release = condition_lock_unlock;
    kinds[6].lock = &cl2, kinds[6].take = condition_lock_when_first, kinds[6].release = condition_lock_unlock;

    /* Off: exactly the trylocks, and the hook does not run. */
    sync_debug_lock_order_set_thread_hook(count_hook, &hook_calls);
    CHECK_EQ(sync_mutex_try_lock_first(&m), 0);
    CHECK_EQ(sync_mutex_try_lock_first(&m), EBUSY);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_try_lock_first(NULL), EINVAL);
    CHECK_EQ(hook_calls, 0);

    /* On: HELD -> X taken at X's first try is an order; X -> HELD then closes a cycle. A plain
     * trylock in its place gives none (test_trylock). */
    for (int i = 0; i < 7; i++) {
        start_checking();
        sync_debug_lock_order_set_thread_hook(count_hook, &hook_calls);
        hook_calls = 0;
        first_after(&held, kinds[i].lock, kinds[i].take, kinds[i].release);
        CHECK_EQ(hook_calls, 1);
        CHECK_EQ(seen.reports, 0);
        CHECK_EQ(kinds[i].take(kinds[i].lock), 0);
        CHECK_EQ(sync_mutex_lock(&held), 0);
        CHECK_EQ(sync_mutex_unlock(&held), 0);
        CHECK_EQ(kinds[i].release(kinds[i].lock), 0);
        CHECK_EQ(seen.reports, 1);
        sync_debug_lock_order(false);
    }
    sync_debug_lock_order_set_thread_hook(NULL, NULL);
}

/* ---- locks destroyed and their memory reused give no false report ---- */

static void order(void *first, void *second) {
    CHECK_EQ(sync_mutex_lock(first), 0);
    CHECK_EQ(sync_mutex_lock(second), 0);
    CHECK_EQ(sync_mutex_unlock(second), 0);
    CHECK_EQ(sync_mutex_unlock(first), 0);
}

static void test_reused_memory(void) {
    start_checking();
    /* Initialized again: the old locks' orders go. */
    sync_mutex_t *block = malloc(2 * sizeof *block);
    CHECK(block != NULL);
    CHECK_EQ(sync_mutex_init(&block[0], 0), 0);
    CHECK_EQ(sync_mutex_init(&block[1], 0), 0);
    order(&block[0], &block[1]);
    CHECK_EQ(sync_mutex_init(&block[0], 0), 0);  /* new locks in the same memory */
    CHECK_EQ(sync_mutex_init(&block[1], 0), 0);
    order(&block[1], &block[0]);
    CHECK_EQ(seen.reports, 0);

    /* Forgotten before free(): whatever malloc gives next (the same memory or not). */
    CHECK_EQ(sync_debug_lock_forget(&block[0]), 0);
    CHECK_EQ(sync_debug_lock_forget(&block[1]), 0);
    free(block);
    sync_mutex_t *again = malloc(2 * sizeof *again);
    CHECK(again != NULL);
    again[0] = (sync_mutex_t)SYNC_MUTEX_INIT;
    again[1] = (sync_mutex_t)SYNC_MUTEX_INIT;
    order(&again[0], &again[1]);
    CHECK_EQ(seen.reports, 0);

    /* A read-write lock, a recursive lock and a spin lock initialized again, too (each
     * inverts the order of the lock before it). */
    sync_rwlock_t rw;
    sync_recursive_lock_t rec;
    sync_spinlock_t spin;
    for (int round = 0; round < 2; round++) {
        CHECK_EQ(sync_rwlock_init(&rw, 0), 0);
        CHECK_EQ(sync_recursive_lock_init(&rec, 0), 0);
        CHECK_EQ(sync_spinlock_init(&spin, 0), 0);
        if (round == 0) {
            CHECK_EQ(sync_rwlock_wrlock(&rw), 0);
            CHECK_EQ(sync_recursive_lock_lock(&rec), 0);
            CHECK_EQ(sync_spinlock_lock(&spin), 0);
        } else {
            CHECK_EQ(sync_spinlock_lock(&spin), 0);
            CHECK_EQ(sync_recursive_lock_lock(&rec), 0);
            CHECK_EQ(sync_rwlock_wrlock(&rw), 0);
        }
        CHECK_EQ(sync_spinlock_unlock(&spin), 0);
        CHECK_EQ(sync_recursive_lock_unlock(&rec), 0);
        CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    }
    CHECK_EQ(seen.reports, 0);

    /* Neither: the same memory is the same lock, and the inversion is reported (the check
     * above can fail). */
    order(&again[1], &again[0]);
    CHECK_EQ(seen.reports, 1);
    free(again);
    sync_debug_lock_order(false);
}

/* ---- bad input, and checking off ---- */

static void test_bad_input_and_off(void) {
    CHECK_EQ(sync_debug_lock_forget(NULL), EINVAL);
    CHECK_EQ(sync_debug_lock_order_set_action(2), EINVAL);
    CHECK_EQ(sync_debug_lock_order_set_action(-1), EINVAL);
    CHECK_EQ(sync_debug_format_waits(NULL, 0) > 0, 1);

    start_checking();
    sync_debug_lock_order(false);
    CHECK(!sync_debug_lock_order_enabled());
    sync_mutex_t a = SYNC_MUTEX_INIT, b = SYNC_MUTEX_INIT;
    order(&a, &b);
    order(&b, &a);
    CHECK_EQ(seen.reports, 0);
}

/* ---- names of locks and threads, in reports and in the waits dump ---- */

static sync_mutex_t named_accounts = SYNC_MUTEX_INIT;
static sync_rwlock_t named_cache = SYNC_RWLOCK_INIT;
static uint32_t named_tid;

static void *rotate_named(void *arg) {
    (void)arg;
    char name[32] = "rotate log";
    CHECK_EQ(sync_debug_thread_name(name), 0);
    memset(name, 'x', sizeof name - 1);  /* libsync keeps a copy */
    named_tid = gettid_now();
    CHECK_EQ(sync_rwlock_wrlock(&named_cache), 0);  /* cache (write) -> accounts */
    CHECK_EQ(sync_mutex_lock(&named_accounts), 0);
    CHECK_EQ(sync_mutex_unlock(&named_accounts), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&named_cache), 0);
    return NULL;
}

static bool waits_contain(const char *needle) {
    static char text[16384];
    sync_debug_format_waits(text, sizeof text);
    return strstr(text, needle) != NULL;
}

static void test_names(void) {
    CHECK_EQ(sync_debug_lock_name(NULL, "x"), EINVAL);
    CHECK_EQ(sync_debug_lock_name(&named_accounts, ""), EINVAL);
    CHECK_EQ(sync_debug_lock_name(&named_accounts, "two\nlines"), EINVAL);
    CHECK_EQ(sync_debug_lock_name(&named_accounts, "\xff"), EINVAL);  /* not UTF-8 */
    CHECK_EQ(sync_debug_thread_name(""), EINVAL);
    CHECK_EQ(sync_debug_thread_name("tab\there"), EINVAL);

    char name[32] = "accounts";  /* named while checking is off, from a buffer reused at once */
    CHECK_EQ(sync_debug_lock_name(&named_accounts, name), 0);
    memset(name, 'x', sizeof name - 1);
    CHECK_EQ(sync_debug_lock_name(&named_cache, "cache"), 0);
    start_checking();
    CHECK_EQ(sync_mutex_lock(&named_accounts), 0);  /* accounts -> cache (read), an unnamed thread */
    CHECK_EQ(sync_rwlock_rdlock(&named_cache), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&named_cache), 0);
    CHECK_EQ(sync_mutex_unlock(&named_accounts), 0);
    run_thread(rotate_named);
    CHECK_EQ(seen.reports, 1);
    for (size_t i = 0; i < 2; i++) {
        bool from_cache = seen.from[i] == (void *)&named_cache;
        CHECK_STR_EQ(seen.from_name[i], from_cache ? "cache" : "accounts");
        CHECK_STR_EQ(seen.to_name[i], from_cache ? "accounts" : "cache");
        CHECK_STR_EQ(seen.thread_name[i], from_cache ? "rotate log" : "");
    }
    char expected[256];
    snprintf(expected, sizeof expected, "rwlock (write) \"cache\" %p -> mutex \"accounts\" %p, first in this order in thread %u \"rotate log\" at:",
             (void *)&named_cache, (void *)&named_accounts, (unsigned)named_tid);
    CHECK(strstr(seen.text, expected) != NULL);
    snprintf(expected, sizeof expected, "mutex \"accounts\" %p -> rwlock (read) \"cache\" %p, first in this order in thread %u at:",
             (void *)&named_accounts, (void *)&named_cache, (unsigned)gettid_now());
    CHECK(strstr(seen.text, expected) != NULL);

    /* The waits dump names the locks and the threads. */
    CHECK_EQ(sync_debug_thread_name("main"), 0);
    CHECK_EQ(sync_mutex_lock(&named_accounts), 0);
    snprintf(expected, sizeof expected, "thread %u \"main\"\n      holds mutex \"accounts\" %p\n",
             (unsigned)gettid_now(), (void *)&named_accounts);
    CHECK(waits_contain(expected));
    CHECK_EQ(sync_mutex_unlock(&named_accounts), 0);

    /* Initialized again, forgotten, or named NULL: no name. */
    CHECK_EQ(sync_mutex_init(&named_accounts, 0), 0);
    CHECK_EQ(sync_debug_lock_forget(&named_cache), 0);
    CHECK_EQ(sync_mutex_lock(&named_accounts), 0);
    CHECK_EQ(sync_rwlock_rdlock(&named_cache), 0);
    CHECK(!waits_contain("\"accounts\"") && !waits_contain("\"cache\""));
    CHECK_EQ(sync_debug_lock_name(&named_cache, "cache"), 0);
    CHECK(waits_contain("\"cache\""));
    CHECK_EQ(sync_debug_lock_name(&named_cache, NULL), 0);
    CHECK(!waits_contain("\"cache\""));
    CHECK_EQ(sync_debug_thread_name(NULL), 0);
    snprintf(expected, sizeof expected, "thread %u\n", (unsigned)gettid_now());
    CHECK(waits_contain(expected));
    CHECK_EQ(sync_rwlock_rdunlock(&named_cache), 0);
    CHECK_EQ(sync_mutex_unlock(&named_accounts), 0);
    sync_debug_lock_order(false);
}

/* ---- a site hook that takes a libsync lock is not checked inside itself ---- */

static sync_mutex_t hook_lock = SYNC_MUTEX_INIT;
static int hook_calls;

static size_t locking_site_hook(char *buffer, size_t size, void *context) {
    CHECK(context == &hook_calls);
    CHECK_EQ(sync_mutex_lock(&hook_lock), 0);
    hook_calls++;
    int n = snprintf(buffer, size, "site %d", hook_calls);
    CHECK_EQ(sync_mutex_unlock(&hook_lock), 0);
    return n < 0 ? 0 : (size_t)n > size ? size : (size_t)n;
}

static void test_site_hook_takes_a_lock(void) {
    start_checking();
    hook_calls = 0;
    sync_debug_lock_order_set_site_hook(locking_site_hook, &hook_calls);
    sync_mutex_t a = SYNC_MUTEX_INIT, b = SYNC_MUTEX_INIT;
    order(&a, &b);           /* one new order: one site, and the hook's own lock adds none */
    CHECK_EQ(hook_calls, 1);
    order(&b, &a);           /* closes the cycle: one more site */
    CHECK_EQ(hook_calls, 2);
    CHECK_EQ(seen.reports, 1);
    CHECK(strcmp(seen.site[0], "site 1") == 0 || strcmp(seen.site[0], "site 2") == 0);
    sync_debug_lock_order_set_site_hook(NULL, NULL);
    /* hook_lock, taken in the hook while a and b were held, has no order after them: taking
     * them under it closes no cycle. */
    order(&hook_lock, &a);
    order(&hook_lock, &b);
    CHECK_EQ(seen.reports, 1);
    sync_debug_lock_order(false);
}

/* ---- a lock released while checking was off does not stay on the thread's stack ---- */

static void test_released_while_off(void) {
    start_checking();
    sync_mutex_t a, b;
    CHECK_EQ(sync_mutex_init(&a, 0), 0);
    CHECK_EQ(sync_mutex_init(&b, 0), 0);
    CHECK_EQ(sync_mutex_lock(&a), 0);
    sync_debug_lock_order(false);
    CHECK_EQ(sync_mutex_unlock(&a), 0);   /* unseen */
    sync_debug_lock_order(true);
    CHECK_EQ(sync_mutex_lock(&b), 0);     /* no order a -> b: a is free */
    CHECK_EQ(sync_mutex_unlock(&b), 0);
    order(&b, &a);                         /* the only order */
    CHECK_EQ(seen.reports, 0);
    char text[4096];
    sync_debug_format_waits(text, sizeof text);
    CHECK(strstr(text, "holds") == NULL);
    /* A lock held across the toggle is unknown: its release is ignored, later orders count. */
    CHECK_EQ(sync_mutex_lock(&a), 0);
    sync_debug_lock_order(false);
    sync_debug_lock_order(true);
    CHECK_EQ(sync_mutex_unlock(&a), 0);
    order(&a, &b);                         /* closes b -> a */
    CHECK_EQ(seen.reports, 1);
    sync_debug_lock_order(false);
}

/* ---- reset while a synchronized token is held keeps the token's release working ---- */

static int reset_token;

static void test_reset_while_synchronized(void) {
    start_checking();
    sync_mutex_t m;
    CHECK_EQ(sync_mutex_init(&m, 0), 0);
    CHECK_EQ(sync_synchronized_enter(&reset_token), 0);
    sync_debug_lock_order_reset();
    CHECK_EQ(sync_synchronized_exit(&reset_token), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);      /* no order token -> m: the token is free */
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_synchronized_enter(&reset_token), 0);
    CHECK_EQ(sync_synchronized_exit(&reset_token), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(seen.reports, 0);
    char text[4096];
    sync_debug_format_waits(text, sizeof text);
    CHECK(strstr(text, "holds") == NULL);
    sync_debug_lock_order(false);
}

/* ---- releasing an unseen read hold leaves other threads' read holds alone ---- */

static sync_rwlock_t steal_rw = SYNC_RWLOCK_INIT;
static sync_mutex_t steal_m = SYNC_MUTEX_INIT;
static pthread_barrier_t steal_held, steal_released;

static void *read_then_lock(void *unused) {
    (void)unused;
    CHECK_EQ(sync_rwlock_rdlock(&steal_rw), 0);   /* checking on: on this thread's stack */
    pthread_barrier_wait(&steal_held);
    pthread_barrier_wait(&steal_released);
    CHECK_EQ(sync_mutex_lock(&steal_m), 0);       /* rw (read) -> m */
    CHECK_EQ(sync_mutex_unlock(&steal_m), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&steal_rw), 0);
    return NULL;
}

static void test_read_release_is_own(void) {
    start_checking();
    sync_debug_lock_order(false);
    CHECK_EQ(sync_rwlock_rdlock(&steal_rw), 0);   /* unseen read hold */
    sync_debug_lock_order(true);
    CHECK_EQ(pthread_barrier_init(&steal_held, NULL, 2), 0);
    CHECK_EQ(pthread_barrier_init(&steal_released, NULL, 2), 0);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, read_then_lock, NULL), 0);
    pthread_barrier_wait(&steal_held);
    CHECK_EQ(sync_rwlock_rdunlock(&steal_rw), 0); /* this thread's own, unseen hold */
    char text[4096], expected[64];
    sync_debug_format_waits(text, sizeof text);
    snprintf(expected, sizeof expected, "holds rwlock (read) %p", (void *)&steal_rw);
    CHECK(strstr(text, expected) != NULL);        /* the other thread's hold stays */
    pthread_barrier_wait(&steal_released);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(seen.reports, 0);
    CHECK_EQ(sync_mutex_lock(&steal_m), 0);       /* m -> rw closes the cycle */
    CHECK_EQ(sync_rwlock_wrlock(&steal_rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&steal_rw), 0);
    CHECK_EQ(sync_mutex_unlock(&steal_m), 0);
    CHECK_EQ(seen.reports, 1);
    pthread_barrier_destroy(&steal_held);
    pthread_barrier_destroy(&steal_released);
    sync_debug_lock_order(false);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    alarm(300);  /* against a hang only */
    test_two_thread_inversion();
    test_consistent_order();
    test_three_lock_cycle();
    test_rwlock_modes_per_edge();
    test_other_kinds();
    test_trylock();
    test_first_try();
    test_reused_memory();
    test_bad_input_and_off();
    test_names();
    test_site_hook_takes_a_lock();
    test_released_while_off();
    test_reset_while_synchronized();
    test_read_release_is_own();
    DONE();
}
