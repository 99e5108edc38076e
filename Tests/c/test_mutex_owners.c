/* Owners of process-shared and robust mutexes: a thread id the kernel reused, fork, and robust
 * mode (holders SIGKILLed while nobody waits, while waiters sleep, in the middle of recursion;
 * consistent, ENOTRECOVERABLE for every waiter, condition waits). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sync.h>
#include "check.h"

#define SHARED_BIT 0x40000000u
#define ROBUST_BIT 0x10000000u
#define WAITERS_BIT 0x80000000u

/* In a forked child that waits to be killed: dies with the test, whatever happens to it. */
static void die_with_parent(void) { prctl(PR_SET_PDEATHSIG, SIGKILL); }

static uint32_t my_tid(void) { return (uint32_t)syscall(SYS_gettid); }
static int64_t in_ms(int ms) { return sync_monotonic_ns() + (int64_t)ms * 1000000; }

static void *shared_memory(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, 0, size);
    return p;
}

/* The state a robust lock's first 8 bytes hold while `tid`, started at `start`, holds it. */
static uint64_t robust_state(uint32_t word, uint32_t start) { return (uint64_t)start << 32 | word; }

/* The start time (field 22 of /proc/<tid>/task/<tid>/stat), low 32 bits. */
static uint32_t start_time(pid_t tid) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)tid, (int)tid);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    CHECK(fgets(line, sizeof line, f) != NULL);
    fclose(f);
    char *p = strrchr(line, ')');
    CHECK(p != NULL);
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        CHECK(p != NULL);
        p++;
    }
    return (uint32_t)strtoull(p, NULL, 10);
}

/* Waits (bounded) until some thread sleeps on the word: its WAITERS bit is set. */
static void await_sleeper(const volatile uint32_t *word) {
    for (int i = 0; i < 20000 && !(__atomic_load_n(word, __ATOMIC_RELAXED) & WAITERS_BIT); i++) usleep(500);
}

/* ---- Recycled thread ids ------------------------------------------------------------------ */

/* A dead holder left the caller's own id in a shared lock the caller never took: exactly what a
 * recycled id looks like. The caller must not take itself for the holder. */
static void test_recycled_tid_is_not_the_holder(void) {
    struct area {
        sync_mutex_t mutex;
        sync_recursive_lock_t recursive;
        sync_condition_t condition;
        sync_cond_t cond;
        sync_condition_lock_t condition_lock;
    } *a = shared_memory(sizeof *a);
    uint32_t me = my_tid();

    CHECK_EQ(sync_mutex_init(&a->mutex, SYNC_MUTEX_SHARED), 0);
    a->mutex._word = SHARED_BIT | me;
    CHECK_EQ(sync_mutex_is_owner(&a->mutex), 0);
    CHECK_EQ(sync_mutex_is_locked(&a->mutex), 1);
    CHECK_EQ(sync_mutex_try_lock(&a->mutex), EBUSY);
    CHECK_EQ(sync_mutex_lock_until(&a->mutex, in_ms(20)), ETIMEDOUT);  /* not EDEADLK */
    CHECK_EQ(sync_mutex_lock_timed(&a->mutex, 1000000), ETIMEDOUT);
    CHECK_EQ(sync_mutex_unlock(&a->mutex), EPERM);                      /* not 0 */
    CHECK_EQ(a->mutex._word & 0xFFFFFFu, me);                           /* still the dead one's */
    CHECK_EQ(sync_cond_init(&a->cond, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_cond_wait_timed(&a->cond, &a->mutex, 1000000), EPERM);
    CHECK_EQ(sync_cond_signal_checked(&a->cond, &a->mutex, 1), EPERM);

    /* Taken for real, the same lock knows its owner. An init cannot tell a dead holder from a
     * live one (EBUSY, the word kept): zeroing the memory starts over. */
    CHECK_EQ(sync_mutex_init(&a->mutex, SYNC_MUTEX_SHARED), EBUSY);
    CHECK_EQ(a->mutex._word & 0xFFFFFFu, me);
    a->mutex._word = 0;
    CHECK_EQ(sync_mutex_init(&a->mutex, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_mutex_lock(&a->mutex), 0);
    CHECK_EQ(sync_mutex_is_owner(&a->mutex), 1);
    CHECK_EQ(sync_mutex_lock(&a->mutex), EDEADLK);
    CHECK_EQ(sync_cond_wait_timed(&a->cond, &a->mutex, 1000), ETIMEDOUT);
    CHECK_EQ(sync_mutex_is_owner(&a->mutex), 1);
    CHECK_EQ(sync_mutex_unlock(&a->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&a->mutex), EPERM);

    CHECK_EQ(sync_recursive_lock_init(&a->recursive, SYNC_MUTEX_SHARED), 0);
    a->recursive._word = SHARED_BIT | me;
    a->recursive._depth = 3;
    CHECK_EQ(sync_recursive_lock_depth(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_try_lock(&a->recursive), EBUSY);        /* not a fourth level */
    CHECK_EQ(sync_recursive_lock_lock_until(&a->recursive, in_ms(20)), ETIMEDOUT);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), EPERM);
    CHECK_EQ(a->recursive._depth, 3);
    CHECK_EQ(sync_recursive_lock_init(&a->recursive, SYNC_MUTEX_SHARED), EBUSY);
    CHECK_EQ(a->recursive._depth, 3);
    a->recursive._word = a->recursive._depth = 0;
    CHECK_EQ(sync_recursive_lock_init(&a->recursive, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_depth(&a->recursive), 2);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), EPERM);

    CHECK_EQ(sync_condition_init(&a->condition, SYNC_PROCESS_SHARED), 0);
    a->condition._mutex._word = SHARED_BIT | me;
    CHECK_EQ(sync_condition_try_enter(&a->condition), EBUSY);
    CHECK_EQ(sync_condition_enter_interruptible(&a->condition, in_ms(20)), ETIMEDOUT);
    CHECK_EQ(sync_condition_wait_timed(&a->condition, 1000000), EPERM);
    CHECK_EQ(sync_condition_exit(&a->condition), EPERM);

    CHECK_EQ(sync_condition_lock_init(&a->condition_lock, 7, SYNC_PROCESS_SHARED), 0);
    a->condition_lock._mutex = SHARED_BIT | me;
    CHECK_EQ(sync_condition_lock_lock_until(&a->condition_lock, in_ms(20)), ETIMEDOUT);
    CHECK_EQ(sync_condition_lock_unlock_with(&a->condition_lock, 8), EPERM);
    CHECK_EQ(sync_condition_lock_condition(&a->condition_lock), 7);
    munmap(a, sizeof *a);
}

/* The spin lock and the read-write lock's writer, shared: a dead holder left the caller's own
 * id in a lock the caller never took (what a recycled id looks like). The caller must not take
 * itself for the holder; taken for real, each knows its owner; the private spin lock still
 * names its holder by id alone. */
static void test_recycled_tid_spinlock_and_rwlock(void) {
    struct area {
        sync_spinlock_t spin;
        sync_rwlock_t rw;
    } *a = shared_memory(sizeof *a);
    uint32_t me = my_tid();

    CHECK_EQ(sync_spinlock_init(&a->spin, SYNC_SPINLOCK_SHARED), 0);
    sync_spinlock_t initialized = SYNC_SPINLOCK_INIT_SHARED;
    CHECK_EQ(a->spin._word, initialized._word);
    a->spin._word = SHARED_BIT | me;
    CHECK_EQ(sync_spinlock_unlock(&a->spin), EPERM);                     /* not 0 */
    CHECK_EQ(sync_spinlock_try_lock(&a->spin), EBUSY);
    CHECK_EQ(sync_spinlock_lock_until(&a->spin, in_ms(20)), ETIMEDOUT);  /* not EDEADLK */
    CHECK_EQ(sync_spinlock_lock_interruptible(&a->spin, in_ms(20)), ETIMEDOUT);
    CHECK_EQ(a->spin._word, SHARED_BIT | me);                            /* still the dead one's */
    CHECK_EQ(sync_spinlock_init(&a->spin, SYNC_SPINLOCK_SHARED), EBUSY); /* held: zero to start over */
    a->spin._word = 0;
    CHECK_EQ(sync_spinlock_init(&a->spin, SYNC_SPINLOCK_SHARED), 0);
    CHECK_EQ(sync_spinlock_unlock(&a->spin), EPERM);
    CHECK_EQ(sync_spinlock_lock(&a->spin), 0);
    CHECK_EQ(a->spin._word, SHARED_BIT | me);
    CHECK_EQ(sync_spinlock_lock(&a->spin), EDEADLK);
    CHECK_EQ(sync_spinlock_try_lock(&a->spin), EBUSY);
    CHECK_EQ(sync_spinlock_unlock(&a->spin), 0);
    CHECK_EQ(sync_spinlock_unlock(&a->spin), EPERM);
    CHECK_EQ(sync_spinlock_try_lock(&a->spin), 0);
    CHECK_EQ(sync_spinlock_unlock(&a->spin), 0);
    CHECK_EQ(a->spin._word, SHARED_BIT);
    CHECK_EQ(sync_spinlock_init(&a->spin, 2), EINVAL);
    sync_spinlock_t private_lock = SYNC_SPINLOCK_INIT;                   /* unchanged: id alone */
    CHECK_EQ(sync_spinlock_lock(&private_lock), 0);
    CHECK_EQ(private_lock._word, me);
    CHECK_EQ(sync_spinlock_lock(&private_lock), EDEADLK);
    CHECK_EQ(sync_spinlock_unlock(&private_lock), 0);
    CHECK_EQ(private_lock._word, 0u);

    const uint32_t rw_shared = 0x80000000u, rw_writer = 0x10000000u;
    CHECK_EQ(sync_rwlock_init(&a->rw, SYNC_RWLOCK_SHARED), 0);
    a->rw._state = rw_shared | rw_writer;
    a->rw._writer = me;
    CHECK_EQ(sync_rwlock_wrunlock(&a->rw), EPERM);                       /* not 0 */
    CHECK_EQ(sync_rwlock_downgrade(&a->rw), EPERM);
    CHECK_EQ(sync_rwlock_try_wrlock(&a->rw), EBUSY);
    CHECK_EQ(sync_rwlock_wrlock_until(&a->rw, in_ms(20)), ETIMEDOUT);    /* not EDEADLK */
    CHECK_EQ(sync_rwlock_rdlock_until(&a->rw, in_ms(20)), ETIMEDOUT);    /* not EDEADLK */
    CHECK_EQ(a->rw._state & (rw_writer | 0x0FFFFFFFu), rw_writer);       /* still the dead one's */
    CHECK_EQ(a->rw._writer, me);

    CHECK_EQ(sync_rwlock_init(&a->rw, SYNC_RWLOCK_SHARED), EBUSY);       /* held: zero to start over */
    memset(&a->rw, 0, sizeof a->rw);
    CHECK_EQ(sync_rwlock_init(&a->rw, SYNC_RWLOCK_SHARED), 0);
    CHECK_EQ(sync_rwlock_wrlock(&a->rw), 0);
    CHECK_EQ(sync_rwlock_wrlock_until(&a->rw, in_ms(20)), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock(&a->rw), EDEADLK);
    CHECK_EQ(sync_rwlock_wrunlock(&a->rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&a->rw), EPERM);
    CHECK_EQ(sync_rwlock_try_wrlock(&a->rw), 0);
    CHECK_EQ(sync_rwlock_downgrade(&a->rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&a->rw), EPERM);
    CHECK_EQ(sync_rwlock_rdunlock(&a->rw), 0);
    CHECK_EQ(a->rw._state, rw_shared);
    munmap(a, sizeof *a);
}

/* A robust lock whose holder has the caller's id but is not the caller: a dead thread. Also a
 * live thread's id with another start time (the id was reused since that holder took it). */
static void test_robust_recycled_tid(void) {
    sync_robust_mutex_t *r = shared_memory(sizeof *r);
    uint32_t me = my_tid();
    CHECK_EQ(sync_mutex_init(&r->mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    r->_state[0] = robust_state(ROBUST_BIT | SHARED_BIT | me, 12345);
    CHECK_EQ(sync_mutex_is_owner(&r->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r->mutex), EPERM);
    CHECK_EQ(sync_mutex_lock(&r->mutex), EOWNERDEAD);  /* not EDEADLK: taken from the dead one */
    CHECK_EQ(sync_mutex_is_owner(&r->mutex), 1);
    CHECK_EQ(sync_mutex_consistent(&r->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);
    r->_state[0] = robust_state(ROBUST_BIT | SHARED_BIT | me, 12345);
    CHECK_EQ(sync_mutex_try_lock(&r->mutex), EOWNERDEAD);
    CHECK_EQ(sync_mutex_consistent(&r->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);

    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {  /* a live thread whose id a lock will name */
        die_with_parent();
        char c = 1;
        if (write(ready[1], &c, 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c;
    CHECK_EQ(read(ready[0], &c, 1), 1);
    uint32_t started = start_time(child);
    r->_state[0] = robust_state(ROBUST_BIT | SHARED_BIT | (uint32_t)child, started);
    CHECK_EQ(sync_mutex_try_lock(&r->mutex), EBUSY);  /* its holder lives */
    CHECK_EQ(sync_mutex_lock_until(&r->mutex, in_ms(20)), ETIMEDOUT);
    r->_state[0] = robust_state(ROBUST_BIT | SHARED_BIT | (uint32_t)child, started + 1);
    CHECK_EQ(sync_mutex_lock(&r->mutex), EOWNERDEAD);  /* the id now belongs to another thread */
    CHECK_EQ(sync_mutex_consistent(&r->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);

    /* A lock first taken in another pid or time namespace (its tag differs): EINVAL. */
    uint32_t *tag = (uint32_t *)((char *)r + 12);
    CHECK(*tag != 0);
    uint32_t mine = *tag;
    *tag = mine ^ 0x100;
    CHECK_EQ(sync_mutex_lock(&r->mutex), EINVAL);
    CHECK_EQ(sync_mutex_try_lock(&r->mutex), EINVAL);
    *tag = mine;
    CHECK_EQ(sync_mutex_lock(&r->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);
    munmap(r, sizeof *r);
}

/* ---- fork --------------------------------------------------------------------------------- */

static void test_fork_child_does_not_hold(void) {
    struct area { sync_mutex_t mutex; sync_recursive_lock_t recursive; sync_robust_mutex_t robust; } *a = shared_memory(sizeof *a);
    sync_robust_mutex_t private_lock;
    CHECK_EQ(sync_mutex_init(&private_lock.mutex, SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(sync_mutex_lock(&private_lock.mutex), 0);
    CHECK_EQ(sync_mutex_init(&a->mutex, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_recursive_lock_init(&a->recursive, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_recursive_lock_init(&a->robust.recursive, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(sync_mutex_lock(&a->mutex), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->robust.recursive), 0);
    pid_t child = fork();
    if (child == 0) {
        int ok = sync_mutex_is_owner(&a->mutex) == 0
            && sync_mutex_unlock(&a->mutex) == EPERM
            && sync_mutex_try_lock(&a->mutex) == EBUSY
            && sync_mutex_lock_until(&a->mutex, in_ms(20)) == ETIMEDOUT
            && sync_recursive_lock_depth(&a->recursive) == 0
            && sync_recursive_lock_unlock(&a->recursive) == EPERM
            && sync_recursive_lock_try_lock(&a->recursive) == EBUSY
            && sync_recursive_lock_depth(&a->robust.recursive) == 0
            && sync_recursive_lock_unlock(&a->robust.recursive) == EPERM
            && sync_recursive_lock_try_lock(&a->robust.recursive) == EBUSY  /* its holder lives */
            && sync_recursive_lock_lock_until(&a->robust.recursive, in_ms(20)) == ETIMEDOUT
            /* The child's copy of a private robust lock: its holder is no thread of the child. */
            && sync_mutex_is_owner(&private_lock.mutex) == 0
            && sync_mutex_lock(&private_lock.mutex) == EOWNERDEAD
            && sync_mutex_consistent(&private_lock.mutex) == 0
            && sync_mutex_unlock(&private_lock.mutex) == 0;
        _exit(ok ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(sync_mutex_unlock(&a->mutex), 0);
    CHECK_EQ(sync_recursive_lock_depth(&a->recursive), 2);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&a->robust.recursive), 0);
    CHECK_EQ(sync_mutex_unlock(&private_lock.mutex), 0);
    munmap(a, sizeof *a);
}

/* ---- Robust mode -------------------------------------------------------------------------- */

/* Forks a child that locks `lock` `depth` times (a recursive lock if depth > 0, else a mutex),
 * reports it, and waits to be killed. Returns its pid once it holds the lock. */
static pid_t holder_child(sync_robust_mutex_t *lock, int depth) {
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        die_with_parent();
        char c = 1;
        if (depth == 0) c = sync_mutex_lock(&lock->mutex) == 0;
        for (int i = 0; i < depth; i++) c &= sync_recursive_lock_lock(&lock->recursive) == 0;
        if (write(ready[1], &c, 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c = 0;
    CHECK_EQ(read(ready[0], &c, 1), 1);
    CHECK_EQ(c, 1);
    close(ready[0]);
    close(ready[1]);
    return child;
}

/* The holder dies while nobody waits: the next locker (lock, or trylock) finds out. */
static void test_robust_dead_holder_found_by_next_locker(void) {
    sync_robust_mutex_t *r = shared_memory(sizeof *r);
    CHECK_EQ(sync_mutex_init(&r->mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    pid_t child = holder_child(r, 0);
    CHECK_EQ(sync_mutex_try_lock(&r->mutex), EBUSY);
    CHECK_EQ(sync_mutex_is_owner(&r->mutex), 0);
    kill(child, SIGKILL);  /* not reaped: a zombie */
    CHECK_EQ(sync_mutex_lock(&r->mutex), EOWNERDEAD);
    CHECK_EQ(sync_mutex_is_owner(&r->mutex), 1);
    CHECK_EQ(sync_mutex_lock(&r->mutex), EDEADLK);
    CHECK_EQ(sync_mutex_try_lock(&r->mutex), EBUSY);
    CHECK_EQ(sync_mutex_consistent(&r->mutex), 0);
    CHECK_EQ(sync_mutex_consistent(&r->mutex), EINVAL);  /* already consistent */
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);
    CHECK_EQ(sync_mutex_consistent(&r->mutex), EPERM);   /* not held */
    CHECK_EQ(sync_mutex_lock(&r->mutex), 0);              /* usable again */
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);
    waitpid(child, NULL, 0);

    child = holder_child(r, 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);  /* reaped: its id is free */
    CHECK_EQ(sync_mutex_try_lock(&r->mutex), EOWNERDEAD);
    CHECK_EQ(sync_mutex_consistent(&r->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r->mutex), 0);
    munmap(r, sizeof *r);
}

struct waiter { sync_robust_mutex_t *lock; int64_t deadline; int result; int *inside; };

static void *robust_waiter(void *arg) {
    struct waiter *w = arg;
    int r = w->deadline ? sync_mutex_lock_until(&w->lock->mutex, w->deadline) : sync_mutex_lock(&w->lock->mutex);
    w->result = r;
    if (r == 0 || r == EOWNERDEAD) {
        /* Exclusion: nobody else is inside. */
        if (__atomic_add_fetch(w->inside, 1, __ATOMIC_SEQ_CST) != 1) w->result = -1;
        if (r == EOWNERDEAD && sync_mutex_consistent(&w->lock->mutex) != 0) w->result = -2;
        __atomic_sub_fetch(w->inside, 1, __ATOMIC_SEQ_CST);
        if (sync_mutex_unlock(&w->lock->mutex) != 0) w->result = -3;
    }
    return NULL;
}

/* The holder dies while threads of this process and of another sleep in lock: exactly one gets
 * EOWNERDEAD, the others then get the lock in turn. */
static void test_robust_holder_dies_while_waiters_sleep(void) {
    struct area { sync_robust_mutex_t lock; int inside; int child_result; } *a = shared_memory(sizeof *a);
    CHECK_EQ(sync_mutex_init(&a->lock.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    pid_t holder = holder_child(&a->lock, 0);
    pid_t other = fork();
    if (other == 0) {  /* a waiter in another process */
        struct waiter w = { &a->lock, 0, 0, &a->inside };
        robust_waiter(&w);
        a->child_result = w.result;
        _exit(0);
    }
    enum { N = 6 };
    struct waiter w[N];
    pthread_t threads[N];
    for (int i = 0; i < N; i++) {
        w[i] = (struct waiter){ &a->lock, i == 0 ? in_ms(600000) : 0, 0, &a->inside };
        CHECK_EQ(pthread_create(&threads[i], NULL, robust_waiter, &w[i]), 0);
    }
    await_sleeper(&a->lock.mutex._word);
    kill(holder, SIGKILL);
    for (int i = 0; i < N; i++) CHECK_EQ(pthread_join(threads[i], NULL), 0);
    int status;
    CHECK_EQ(waitpid(other, &status, 0), other);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int dead = a->child_result == EOWNERDEAD;
    CHECK(a->child_result == 0 || a->child_result == EOWNERDEAD);
    for (int i = 0; i < N; i++) {
        CHECK(w[i].result == 0 || w[i].result == EOWNERDEAD);
        dead += w[i].result == EOWNERDEAD;
    }
    CHECK_EQ(dead, 1);
    CHECK_EQ(sync_mutex_is_locked(&a->lock.mutex), 0);
    waitpid(holder, NULL, 0);
    munmap(a, sizeof *a);
}

/* The holder dies three levels deep in a robust recursive lock: the taker holds it once. */
static void test_robust_recursive_holder_dies_mid_recursion(void) {
    sync_robust_mutex_t *r = shared_memory(sizeof *r);
    CHECK_EQ(sync_recursive_lock_init(&r->recursive, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    pid_t child = holder_child(r, 3);
    CHECK_EQ(sync_recursive_lock_depth(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r->recursive), EPERM);
    kill(child, SIGKILL);
    CHECK_EQ(sync_recursive_lock_lock(&r->recursive), EOWNERDEAD);
    CHECK_EQ(sync_recursive_lock_depth(&r->recursive), 1);
    CHECK_EQ(sync_recursive_lock_lock(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r->recursive), 2);
    CHECK_EQ(sync_recursive_lock_unlock(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_consistent(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r->recursive), EPERM);
    CHECK_EQ(sync_recursive_lock_try_lock(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r->recursive), 0);
    waitpid(child, NULL, 0);

    /* The taker dies too, before consistent: the next one gets EOWNERDEAD again. */
    child = holder_child(r, 2);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    pid_t taker = fork();
    if (taker == 0) {
        int ok = sync_recursive_lock_lock(&r->recursive) == EOWNERDEAD;
        _exit(ok ? 0 : 1);  /* dies holding it, state still inconsistent */
    }
    int status;
    CHECK_EQ(waitpid(taker, &status, 0), taker);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(sync_recursive_lock_lock_timed(&r->recursive, 5000000000u), EOWNERDEAD);
    CHECK_EQ(sync_recursive_lock_consistent(&r->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r->recursive), 0);
    munmap(r, sizeof *r);
}

/* Unlocking after EOWNERDEAD without consistent: ENOTRECOVERABLE for everyone, including the
 * threads asleep in lock at that moment (they must not hang). */
static void test_robust_unlock_without_consistent_is_not_recoverable(void) {
    struct area { sync_robust_mutex_t lock; int inside; } *a = shared_memory(sizeof *a);
    CHECK_EQ(sync_mutex_init(&a->lock.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    pid_t holder = holder_child(&a->lock, 0);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_mutex_lock(&a->lock.mutex), EOWNERDEAD);
    enum { N = 4 };
    struct waiter w[N];
    pthread_t threads[N];
    for (int i = 0; i < N; i++) {
        w[i] = (struct waiter){ &a->lock, i % 2 ? in_ms(600000) : 0, 0, &a->inside };
        CHECK_EQ(pthread_create(&threads[i], NULL, robust_waiter, &w[i]), 0);
    }
    await_sleeper(&a->lock.mutex._word);
    CHECK_EQ(sync_mutex_unlock(&a->lock.mutex), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(pthread_join(threads[i], NULL), 0);
        CHECK_EQ(w[i].result, ENOTRECOVERABLE);
    }
    CHECK_EQ(sync_mutex_lock(&a->lock.mutex), ENOTRECOVERABLE);
    CHECK_EQ(sync_mutex_try_lock(&a->lock.mutex), ENOTRECOVERABLE);
    CHECK_EQ(sync_mutex_lock_timed(&a->lock.mutex, 1000000), ENOTRECOVERABLE);
    CHECK_EQ(sync_mutex_lock_interruptible(&a->lock.mutex, -1), ENOTRECOVERABLE);
    CHECK_EQ(sync_mutex_unlock(&a->lock.mutex), EPERM);
    CHECK_EQ(sync_mutex_consistent(&a->lock.mutex), EPERM);
    CHECK_EQ(sync_mutex_is_locked(&a->lock.mutex), 0);
    pid_t other = fork();
    if (other == 0) _exit(sync_mutex_lock(&a->lock.mutex) == ENOTRECOVERABLE ? 0 : 1);
    int status;
    CHECK_EQ(waitpid(other, &status, 0), other);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(sync_mutex_init(&a->lock.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);  /* only init recovers it */
    CHECK_EQ(sync_mutex_lock(&a->lock.mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&a->lock.mutex), 0);
    munmap(a, sizeof *a);
}

/* A thread that exits holding a private robust lock (static initializers). */
static sync_robust_mutex_t private_mutex = SYNC_ROBUST_MUTEX_INIT;
static sync_robust_mutex_t private_recursive = SYNC_ROBUST_MUTEX_INIT;

static void *lock_and_exit(void *arg) {
    (void)arg;
    if (sync_mutex_lock(&private_mutex.mutex) != 0) return (void *)1;
    if (sync_recursive_lock_lock(&private_recursive.recursive) != 0) return (void *)1;
    if (sync_recursive_lock_lock(&private_recursive.recursive) != 0) return (void *)1;
    return NULL;
}

static void test_robust_thread_exits_holding(void) {
    pthread_t thread;
    void *failed = (void *)1;
    CHECK_EQ(pthread_create(&thread, NULL, lock_and_exit, NULL), 0);
    CHECK_EQ(pthread_join(thread, &failed), 0);
    CHECK(failed == NULL);
    CHECK_EQ(sync_mutex_lock(&private_mutex.mutex), EOWNERDEAD);
    CHECK_EQ(sync_mutex_consistent(&private_mutex.mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&private_mutex.mutex), 0);
    CHECK_EQ(sync_recursive_lock_try_lock(&private_recursive.recursive), EOWNERDEAD);
    CHECK_EQ(sync_recursive_lock_depth(&private_recursive.recursive), 1);
    CHECK_EQ(sync_recursive_lock_consistent(&private_recursive.recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&private_recursive.recursive), 0);
}

/* A condition wait whose relock finds the mutex's holder dead returns EOWNERDEAD, holding it. */
struct cond_area { sync_robust_mutex_t lock; sync_cond_t cond; int ready; };

static void *cond_waiter(void *arg) {
    struct cond_area *a = arg;
    intptr_t result = sync_mutex_lock(&a->lock.mutex);
    if (result != 0) return (void *)result;
    __atomic_store_n(&a->ready, 1, __ATOMIC_SEQ_CST);
    do result = sync_cond_wait(&a->cond, &a->lock.mutex);
    while (result == 0 && __atomic_load_n(&a->ready, __ATOMIC_SEQ_CST) != 2);
    if (result == EOWNERDEAD && sync_mutex_is_owner(&a->lock.mutex) == 1 && sync_mutex_consistent(&a->lock.mutex) == 0
        && sync_mutex_unlock(&a->lock.mutex) == 0) return (void *)(intptr_t)EOWNERDEAD;
    return (void *)(intptr_t)(1000 + result);
}

static void test_robust_condition_wait(void) {
    struct cond_area *a = shared_memory(sizeof *a);
    CHECK_EQ(sync_mutex_init(&a->lock.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(sync_cond_init(&a->cond, SYNC_PROCESS_SHARED), 0);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, cond_waiter, a), 0);
    while (__atomic_load_n(&a->ready, __ATOMIC_SEQ_CST) != 1) usleep(100);
    /* The child takes the mutex (the waiter has released it by sleeping), signals, and dies. */
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        die_with_parent();
        char c = sync_mutex_lock(&a->lock.mutex) == 0;
        __atomic_store_n(&a->ready, 2, __ATOMIC_SEQ_CST);
        sync_cond_broadcast(&a->cond);
        if (write(ready[1], &c, 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c = 0;
    CHECK_EQ(read(ready[0], &c, 1), 1);
    CHECK_EQ(c, 1);
    kill(child, SIGKILL);
    void *result;
    CHECK_EQ(pthread_join(thread, &result), 0);
    CHECK_EQ((intptr_t)result, EOWNERDEAD);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    munmap(a, sizeof *a);
}

static void test_robust_errors(void) {
    sync_robust_mutex_t r[2];
    sync_mutex_t plain = SYNC_MUTEX_INIT;
    CHECK_EQ(sync_mutex_init(&r[0].mutex, SYNC_MUTEX_ROBUST | SYNC_MUTEX_UNOWNED), EINVAL);
    CHECK_EQ(sync_mutex_init(&r[0].mutex, 8), EINVAL);
    CHECK_EQ(sync_mutex_init((sync_mutex_t *)((char *)r + 4), SYNC_MUTEX_ROBUST), EINVAL);  /* not 8-aligned */
    CHECK_EQ(sync_recursive_lock_init((sync_recursive_lock_t *)((char *)r + 4), SYNC_MUTEX_ROBUST), EINVAL);
    CHECK_EQ(sync_recursive_lock_init(&r[0].recursive, 2), EINVAL);
    CHECK_EQ(sync_mutex_consistent(&plain), EINVAL);  /* not robust */
    CHECK_EQ(sync_mutex_lock(&plain), 0);
    CHECK_EQ(sync_mutex_consistent(&plain), EINVAL);
    CHECK_EQ(sync_mutex_unlock(&plain), 0);
    CHECK_EQ(sync_mutex_consistent(NULL), EINVAL);
    CHECK_EQ(sync_recursive_lock_consistent(NULL), EINVAL);
    CHECK_EQ(sync_mutex_init(&r[0].mutex, SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(sync_mutex_consistent(&r[0].mutex), EPERM);  /* not held */
    CHECK_EQ(sync_mutex_lock(&r[0].mutex), 0);
    CHECK_EQ(sync_mutex_consistent(&r[0].mutex), EINVAL); /* held, nothing to repair */
    CHECK_EQ(sync_mutex_lock(&r[0].mutex), EDEADLK);
    CHECK_EQ(sync_mutex_unlock(&r[0].mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&r[0].mutex), EPERM);
}

/* Processes that increment two counters under a robust lock, SIGKILLed at random moments: an
 * EOWNERDEAD taker repairs them; exclusion never breaks (both counters agree at every entry). */
static void test_robust_exclusion_under_kills(void) {
    struct area { sync_robust_mutex_t lock; long a, b; long repaired, broken; } *x = shared_memory(sizeof *x);
    CHECK_EQ(sync_mutex_init(&x->lock.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    enum { WORKERS = 3, KILLS = 12 };
    pid_t workers[WORKERS];
    for (int i = 0, killed = -1; i <= KILLS; i++) {
        for (int w = 0; w < WORKERS; w++) {
            if (killed >= 0 && w != killed) continue;
            workers[w] = fork();
            if (workers[w] == 0) {
                die_with_parent();
                for (;;) {
                    int r = sync_mutex_lock(&x->lock.mutex);
                    if (r == EOWNERDEAD) {
                        x->b = x->a;  /* the repair */
                        x->repaired++;
                        sync_mutex_consistent(&x->lock.mutex);
                    } else if (r != 0) _exit(2);
                    if (x->a != x->b) x->broken++;
                    x->a++;
                    for (volatile int spin = 0; spin < 100; spin++) {}
                    x->b++;
                    sync_mutex_unlock(&x->lock.mutex);
                }
            }
        }
        if (i == KILLS) break;
        /* Let them run (until the counter moves), then kill one and start another. */
        long start = __atomic_load_n(&x->a, __ATOMIC_RELAXED);
        for (int n = 0; n < 100000 && __atomic_load_n(&x->a, __ATOMIC_RELAXED) < start + 2000; n++) usleep(100);
        killed = i % WORKERS;
        kill(workers[killed], SIGKILL);
        waitpid(workers[killed], NULL, 0);
    }
    for (int w = 0; w < WORKERS; w++) kill(workers[w], SIGKILL);
    for (int w = 0; w < WORKERS; w++) waitpid(workers[w], NULL, 0);
    int r = sync_mutex_lock(&x->lock.mutex);
    CHECK(r == 0 || r == EOWNERDEAD);
    if (r == EOWNERDEAD) { x->b = x->a; CHECK_EQ(sync_mutex_consistent(&x->lock.mutex), 0); }
    CHECK_EQ(x->broken, 0);
    CHECK_EQ(x->a, x->b);
    CHECK_EQ(sync_mutex_unlock(&x->lock.mutex), 0);
    printf("exclusion under kills: %ld increments, %ld repairs\n", x->a, x->repaired);
    munmap(x, sizeof *x);
}

/* Thousands of short-lived threads take shared and robust locks (each makes and frees its list of
 * held locks); the last one exits holding the robust lock. */
struct churn { sync_mutex_t shared; sync_robust_mutex_t robust; long count; int exit_holding; };

static void *churn_thread(void *arg) {
    struct churn *c = arg;
    if (sync_mutex_lock(&c->shared) != 0) return (void *)1;
    int r = sync_mutex_lock(&c->robust.mutex);
    if (r != 0) return (void *)2;
    c->count++;
    if (__atomic_load_n(&c->exit_holding, __ATOMIC_RELAXED)) {
        sync_mutex_unlock(&c->shared);
        return NULL;  /* exits holding the robust lock */
    }
    if (sync_mutex_unlock(&c->robust.mutex) != 0 || sync_mutex_unlock(&c->shared) != 0) return (void *)3;
    return NULL;
}

static void test_thousands_of_threads(void) {
    struct churn *c = shared_memory(sizeof *c);
    CHECK_EQ(sync_mutex_init(&c->shared, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_mutex_init(&c->robust.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    enum { BATCH = 50, BATCHES = 60 };
    for (int b = 0; b < BATCHES; b++) {
        pthread_t threads[BATCH];
        for (int i = 0; i < BATCH; i++) CHECK_EQ(pthread_create(&threads[i], NULL, churn_thread, c), 0);
        for (int i = 0; i < BATCH; i++) {
            void *result;
            CHECK_EQ(pthread_join(threads[i], &result), 0);
            CHECK(result == NULL);
        }
    }
    CHECK_EQ(c->count, BATCH * BATCHES);
    c->exit_holding = 1;
    pthread_t last;
    CHECK_EQ(pthread_create(&last, NULL, churn_thread, c), 0);
    CHECK_EQ(pthread_join(last, NULL), 0);
    CHECK_EQ(sync_mutex_lock(&c->robust.mutex), EOWNERDEAD);
    CHECK_EQ(sync_mutex_consistent(&c->robust.mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&c->robust.mutex), 0);
    CHECK_EQ(sync_mutex_lock(&c->shared), 0);
    CHECK_EQ(sync_mutex_unlock(&c->shared), 0);
    munmap(c, sizeof *c);
}

int main(void) {
    test_recycled_tid_is_not_the_holder();
    test_recycled_tid_spinlock_and_rwlock();
    test_robust_recycled_tid();
    test_fork_child_does_not_hold();
    test_robust_errors();
    test_robust_thread_exits_holding();
    test_robust_dead_holder_found_by_next_locker();
    test_robust_holder_dies_while_waiters_sleep();
    test_robust_recursive_holder_dies_mid_recursion();
    test_robust_unlock_without_consistent_is_not_recoverable();
    test_robust_condition_wait();
    test_robust_exclusion_under_kills();
    test_thousands_of_threads();
    DONE();
}
