/* Attaching to shared memory: an init with a SHARED flag over a primitive that is held or
 * waited on returns EBUSY and changes nothing (sync/locks.h, "Attaching to shared memory").
 * The init runs in a forked child (the second process of the mistake), while the parent holds
 * the primitive or one of its threads waits on it; the parent's release still succeeds, and an
 * init once nobody uses the memory succeeds. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include <sync.h>
#include "check.h"

static void *shared_memory(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, 0, size);
    return p;
}

/* What `init(memory)` returns in a forked child (its exit status; 255: the child died). */
static int init_in_child(int (*init)(void *), void *memory) {
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(init(memory) & 0x7f);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

/* Waits (yielding) until the 32-bit counter at `word` (bits 0-29) counts a waiter. */
static void until_counted(const uint32_t *word) {
    while ((__atomic_load_n(word, __ATOMIC_ACQUIRE) & 0x3fffffffu) == 0) sched_yield();
}

/* The inits the children try (flags: shared, and the primitive's mode). */
static int mutex_init(void *m) { return sync_mutex_init(m, SYNC_MUTEX_SHARED); }
static int lock_init(void *m) { return sync_mutex_init(m, SYNC_MUTEX_SHARED | SYNC_MUTEX_UNOWNED); }
static int robust_init(void *m) { return sync_mutex_init(m, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST); }
static int recursive_init(void *m) { return sync_recursive_lock_init(m, SYNC_MUTEX_SHARED); }
static int robust_recursive_init(void *m) { return sync_recursive_lock_init(m, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST); }
static int rwlock_init(void *m) { return sync_rwlock_init(m, SYNC_RWLOCK_SHARED); }
static int spinlock_init(void *m) { return sync_spinlock_init(m, SYNC_SPINLOCK_SHARED); }
static int cond_init(void *m) { return sync_cond_init(m, SYNC_PROCESS_SHARED); }
static int condition_init(void *m) { return sync_condition_init(m, SYNC_PROCESS_SHARED); }
static int condition_lock_init(void *m) { return sync_condition_lock_init(m, 7, SYNC_PROCESS_SHARED); }
static int semaphore_init(void *m) { return sync_semaphore_init(m, 0, 0, SYNC_PROCESS_SHARED); }
static int event_init(void *m) { return sync_event_init(m, false, SYNC_PROCESS_SHARED); }
static int barrier_init(void *m) { return sync_barrier_init(m, 2, SYNC_PROCESS_SHARED); }

/* ---- Held: the parent holds the lock -------------------------------------------------------- */

static void test_held_locks(void) {
    struct area {
        sync_mutex_t mutex, lock;
        sync_robust_mutex_t robust, robust_recursive;
        sync_recursive_lock_t recursive;
        sync_rwlock_t rwlock;
        sync_spinlock_t spin;
        sync_condition_t condition;
        sync_condition_lock_t condition_lock;
    } *a = shared_memory(sizeof *a);

    CHECK_EQ(mutex_init(&a->mutex), 0);
    CHECK_EQ(sync_mutex_lock(&a->mutex), 0);
    CHECK_EQ(init_in_child(mutex_init, &a->mutex), EBUSY);
    CHECK_EQ(sync_mutex_is_owner(&a->mutex), 1);
    CHECK_EQ(sync_mutex_unlock(&a->mutex), 0);
    CHECK_EQ(init_in_child(mutex_init, &a->mutex), 0);  /* free: attaching by init is harmless */

    CHECK_EQ(lock_init(&a->lock), 0);
    CHECK_EQ(sync_mutex_lock(&a->lock), 0);
    CHECK_EQ(init_in_child(lock_init, &a->lock), EBUSY);
    CHECK_EQ(sync_mutex_is_locked(&a->lock), 1);
    CHECK_EQ(sync_mutex_unlock(&a->lock), 0);
    CHECK_EQ(init_in_child(lock_init, &a->lock), 0);

    CHECK_EQ(robust_init(&a->robust.mutex), 0);
    CHECK_EQ(sync_mutex_lock(&a->robust.mutex), 0);
    CHECK_EQ(init_in_child(robust_init, &a->robust.mutex), EBUSY);
    CHECK_EQ(sync_mutex_is_owner(&a->robust.mutex), 1);
    CHECK_EQ(sync_mutex_unlock(&a->robust.mutex), 0);
    CHECK_EQ(init_in_child(robust_init, &a->robust.mutex), 0);

    CHECK_EQ(recursive_init(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->recursive), 0);
    CHECK_EQ(init_in_child(recursive_init, &a->recursive), EBUSY);
    CHECK_EQ(sync_recursive_lock_depth(&a->recursive), 2);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&a->recursive), 0);
    CHECK_EQ(init_in_child(recursive_init, &a->recursive), 0);

    CHECK_EQ(robust_recursive_init(&a->robust_recursive.recursive), 0);
    CHECK_EQ(sync_recursive_lock_lock(&a->robust_recursive.recursive), 0);
    CHECK_EQ(init_in_child(robust_recursive_init, &a->robust_recursive.recursive), EBUSY);
    CHECK_EQ(sync_recursive_lock_depth(&a->robust_recursive.recursive), 1);
    CHECK_EQ(sync_recursive_lock_unlock(&a->robust_recursive.recursive), 0);
    CHECK_EQ(init_in_child(robust_recursive_init, &a->robust_recursive.recursive), 0);

    CHECK_EQ(rwlock_init(&a->rwlock), 0);
    CHECK_EQ(sync_rwlock_rdlock(&a->rwlock), 0);
    CHECK_EQ(init_in_child(rwlock_init, &a->rwlock), EBUSY);
    CHECK_EQ(sync_rwlock_rdunlock(&a->rwlock), 0);
    CHECK_EQ(sync_rwlock_wrlock(&a->rwlock), 0);
    CHECK_EQ(init_in_child(rwlock_init, &a->rwlock), EBUSY);
    CHECK_EQ(sync_rwlock_wrunlock(&a->rwlock), 0);
    CHECK_EQ(sync_rwlock_uprdlock(&a->rwlock), 0);  /* the upgradable reader alone holds it */
    CHECK_EQ(init_in_child(rwlock_init, &a->rwlock), EBUSY);
    CHECK_EQ(sync_rwlock_upgrade(&a->rwlock), 0);  /* still its holder */
    CHECK_EQ(sync_rwlock_wrunlock(&a->rwlock), 0);
    CHECK_EQ(init_in_child(rwlock_init, &a->rwlock), 0);

    CHECK_EQ(spinlock_init(&a->spin), 0);
    CHECK_EQ(sync_spinlock_lock(&a->spin), 0);
    CHECK_EQ(init_in_child(spinlock_init, &a->spin), EBUSY);
    CHECK_EQ(sync_spinlock_unlock(&a->spin), 0);
    CHECK_EQ(init_in_child(spinlock_init, &a->spin), 0);

    CHECK_EQ(condition_init(&a->condition), 0);
    CHECK_EQ(sync_condition_enter(&a->condition), 0);
    CHECK_EQ(init_in_child(condition_init, &a->condition), EBUSY);
    CHECK_EQ(sync_condition_exit(&a->condition), 0);
    CHECK_EQ(init_in_child(condition_init, &a->condition), 0);

    CHECK_EQ(condition_lock_init(&a->condition_lock), 0);
    CHECK_EQ(sync_condition_lock_lock(&a->condition_lock), 0);
    CHECK_EQ(init_in_child(condition_lock_init, &a->condition_lock), EBUSY);
    CHECK_EQ(sync_condition_lock_unlock_with(&a->condition_lock, 3), 0);
    CHECK_EQ(sync_condition_lock_condition(&a->condition_lock), 3);  /* the EBUSY changed nothing */
    CHECK_EQ(init_in_child(condition_lock_init, &a->condition_lock), 0);
    CHECK_EQ(sync_condition_lock_condition(&a->condition_lock), 7);
    munmap(a, sizeof *a);
}

/* ---- Waited on: a thread of the parent waits ------------------------------------------------ */

static struct waited {
    sync_mutex_t mutex;
    sync_cond_t cond;
    sync_condition_t condition;
    sync_condition_lock_t condition_lock;
    sync_semaphore_t semaphore;
    sync_event_t event;
    sync_barrier_t barrier;
    int ready;
} *w;

static void *cond_waiter(void *unused) {
    (void)unused;
    CHECK_EQ(sync_mutex_lock(&w->mutex), 0);
    while (!w->ready) CHECK_EQ(sync_cond_wait(&w->cond, &w->mutex), 0);
    CHECK_EQ(sync_mutex_unlock(&w->mutex), 0);
    return NULL;
}
static void *condition_waiter(void *unused) {
    (void)unused;
    CHECK_EQ(sync_condition_enter(&w->condition), 0);
    while (!w->ready) CHECK_EQ(sync_condition_wait(&w->condition), 0);
    CHECK_EQ(sync_condition_exit(&w->condition), 0);
    return NULL;
}
static void *condition_lock_waiter(void *unused) {
    (void)unused;
    CHECK_EQ(sync_condition_lock_lock_when(&w->condition_lock, 1), 0);
    CHECK_EQ(sync_condition_lock_unlock(&w->condition_lock), 0);
    return NULL;
}
static void *semaphore_waiter(void *unused) { (void)unused; CHECK_EQ(sync_semaphore_wait(&w->semaphore), 0); return NULL; }
static void *event_waiter(void *unused) { (void)unused; CHECK_EQ(sync_event_wait(&w->event), 0); return NULL; }
static void *barrier_waiter(void *unused) {
    (void)unused;
    uint32_t index;
    CHECK_EQ(sync_barrier_wait(&w->barrier, &index), 0);
    return NULL;
}

static void test_waited_on(void) {
    w = shared_memory(sizeof *w);
    pthread_t t;

    CHECK_EQ(sync_mutex_init(&w->mutex, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(cond_init(&w->cond), 0);
    CHECK_EQ(pthread_create(&t, NULL, cond_waiter, NULL), 0);
    until_counted(&w->cond._waiters);
    CHECK_EQ(init_in_child(cond_init, &w->cond), EBUSY);
    CHECK_EQ(sync_mutex_lock(&w->mutex), 0);
    w->ready = 1;
    CHECK_EQ(sync_cond_broadcast(&w->cond), 0);  /* the waiter is still counted: it is woken */
    CHECK_EQ(sync_mutex_unlock(&w->mutex), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(init_in_child(cond_init, &w->cond), 0);

    w->ready = 0;
    CHECK_EQ(condition_init(&w->condition), 0);
    CHECK_EQ(pthread_create(&t, NULL, condition_waiter, NULL), 0);
    until_counted(&w->condition._cond._waiters);
    CHECK_EQ(init_in_child(condition_init, &w->condition), EBUSY);  /* its mutex is free */
    CHECK_EQ(sync_condition_enter(&w->condition), 0);
    w->ready = 1;
    CHECK_EQ(sync_condition_broadcast(&w->condition), 0);
    CHECK_EQ(sync_condition_exit(&w->condition), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(init_in_child(condition_init, &w->condition), 0);

    CHECK_EQ(sync_condition_lock_init(&w->condition_lock, 0, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_create(&t, NULL, condition_lock_waiter, NULL), 0);
    until_counted(&w->condition_lock._cond[1]);
    CHECK_EQ(init_in_child(condition_lock_init, &w->condition_lock), EBUSY);
    CHECK_EQ(sync_condition_lock_lock(&w->condition_lock), 0);
    CHECK_EQ(sync_condition_lock_unlock_with(&w->condition_lock, 1), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(init_in_child(condition_lock_init, &w->condition_lock), 0);

    CHECK_EQ(semaphore_init(&w->semaphore), 0);
    CHECK_EQ(pthread_create(&t, NULL, semaphore_waiter, NULL), 0);
    until_counted(&w->semaphore._waiters);
    CHECK_EQ(init_in_child(semaphore_init, &w->semaphore), EBUSY);
    CHECK_EQ(sync_semaphore_signal(&w->semaphore, 1), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(init_in_child(semaphore_init, &w->semaphore), 0);

    CHECK_EQ(event_init(&w->event), 0);
    CHECK_EQ(pthread_create(&t, NULL, event_waiter, NULL), 0);
    until_counted(&w->event._waiters);
    CHECK_EQ(init_in_child(event_init, &w->event), EBUSY);
    CHECK_EQ(sync_event_set(&w->event), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(init_in_child(event_init, &w->event), 0);

    CHECK_EQ(barrier_init(&w->barrier), 0);
    CHECK_EQ(pthread_create(&t, NULL, barrier_waiter, NULL), 0);
    until_counted(&w->barrier._count);
    CHECK_EQ(init_in_child(barrier_init, &w->barrier), EBUSY);
    uint32_t index;
    CHECK_EQ(sync_barrier_wait(&w->barrier, &index), 0);  /* the second party: both leave */
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(init_in_child(barrier_init, &w->barrier), 0);
    munmap(w, sizeof *w);
}

/* ---- What is not checked -------------------------------------------------------------------- */

/* A private init is not checked: its memory may hold anything, as a stack variable does. And
 * a shared init repairs memory no primitive of its kind holds. */
static void test_unchecked(void) {
    sync_mutex_t stack;
    memset(&stack, 0xff, sizeof stack);
    CHECK_EQ(sync_mutex_init(&stack, 0), 0);
    CHECK_EQ(sync_mutex_lock(&stack), 0);
    CHECK_EQ(sync_mutex_unlock(&stack), 0);

    sync_semaphore_t *s = shared_memory(sizeof *s);
    s->_waiters = 1u << 30;  /* an impossible waiter count: corrupt memory */
    CHECK_EQ(sync_semaphore_init(s, 2, 0, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_semaphore_try_wait(s), 0);
    munmap(s, sizeof *s);

    /* A semaphore's count is not "in use": a shared init resets it (attach without init). */
    sync_semaphore_t *t = shared_memory(sizeof *t);
    CHECK_EQ(sync_semaphore_init(t, 3, 0, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(init_in_child(semaphore_init, t), 0);
    CHECK_EQ(sync_semaphore_value(t), 0);
    munmap(t, sizeof *t);
}

/* An init racing with lock and unlock (two threads here; processes behave the same): every
 * init returns 0 (it found the lock free: it attached, writing nothing) or EBUSY, and never
 * undoes the holder's hold, whose every lock and unlock succeeds. */
static struct racing {
    void *lock;
    int (*lock_fn)(void *), (*unlock_fn)(void *), (*init)(void *);
    atomic_int stop;
    atomic_long failures, refused, attached;
} race;

static int robust_lock(void *m) { return sync_mutex_lock(m); }
static int robust_unlock(void *m) { return sync_mutex_unlock(m); }
static int recursive_lock(void *m) { return sync_recursive_lock_lock(m); }
static int recursive_unlock(void *m) { return sync_recursive_lock_unlock(m); }
static int write_lock(void *m) { return sync_rwlock_wrlock(m); }
static int write_unlock(void *m) { return sync_rwlock_wrunlock(m); }
static int upgradable_lock(void *m) { return sync_rwlock_uprdlock(m); }
static int upgradable_unlock(void *m) { return sync_rwlock_uprdunlock(m); }

static void *initializer(void *unused) {
    (void)unused;
    while (!atomic_load(&race.stop)) {
        int err = race.init(race.lock);
        atomic_fetch_add(err == EBUSY ? &race.refused : err == 0 ? &race.attached : &race.failures, 1);
    }
    return NULL;
}

static void race_one(const char *what, size_t size, int (*init)(void *), int (*lock)(void *), int (*unlock)(void *)) {
    race = (struct racing){.lock = shared_memory(size), .lock_fn = lock, .unlock_fn = unlock, .init = init};
    CHECK_EQ(init(race.lock), 0);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, initializer, NULL), 0);
    long pairs = 0, failed = 0;
    while (pairs < 200000 || ((atomic_load(&race.refused) == 0 || atomic_load(&race.attached) == 0) && pairs < 20000000)) {
        if (lock(race.lock) != 0 || unlock(race.lock) != 0) failed++;
        pairs++;
    }
    atomic_store(&race.stop, 1);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    if (failed || atomic_load(&race.failures)) printf("  %s: %ld of %ld lock/unlock pairs failed\n", what, failed, pairs);
    CHECK_EQ(failed, 0);
    CHECK_EQ(atomic_load(&race.failures), 0);
    CHECK_EQ(lock(race.lock), 0);          /* and the lock still works */
    CHECK_EQ(init(race.lock), EBUSY);
    CHECK_EQ(unlock(race.lock), 0);
    munmap(race.lock, size);
}

static void test_init_racing_use(void) {
    race_one("mutex", sizeof(sync_mutex_t), mutex_init, robust_lock, robust_unlock);
    race_one("robust mutex", sizeof(sync_robust_mutex_t), robust_init, robust_lock, robust_unlock);
    race_one("recursive lock", sizeof(sync_recursive_lock_t), recursive_init, recursive_lock, recursive_unlock);
    race_one("robust recursive lock", sizeof(sync_robust_mutex_t), robust_recursive_init, recursive_lock,
             recursive_unlock);
    race_one("rwlock", sizeof(sync_rwlock_t), rwlock_init, write_lock, write_unlock);
    race_one("rwlock (upgradable)", sizeof(sync_rwlock_t), rwlock_init, upgradable_lock, upgradable_unlock);
}

int main(void) {
    test_held_locks();
    test_waited_on();
    test_unchecked();
    test_init_racing_use();
    DONE();
}
