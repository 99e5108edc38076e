/* Process-shared locks whose waiters die: a waiter that leaves (woken and killed before it
 * takes the lock, or killed while it waits) must never keep the others waiting.
 *
 * The kernel's own count of the sleepers on a futex word (FUTEX_CMP_REQUEUE that wakes nobody
 * and requeues the sleepers onto the same word, where they stay in order) tells the test when
 * each process sleeps, so that every step waits for an observable state. The waiter that is
 * woken and dies is a stand-in process sleeping first on the lock's futex word: the kernel wakes
 * the oldest sleeper, and the stand-in then exits without taking the lock, exactly as a waiter
 * SIGKILLed between its wakeup and its compare-and-swap does. A watchdog turns a hang into a
 * failure with a message. */
#define _GNU_SOURCE
#include "check.h"
#include "test_support.h"
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sync.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND 1000000000ull

/* How many threads sleep on the shared futex word `word`, by the kernel's count. */
static long sleepers(void *word) {
    _Atomic uint32_t *w = word;
    while (1) {
        uint32_t value = atomic_load(w);
        long n = syscall(SYS_futex, w, FUTEX_CMP_REQUEUE, 0, (long)INT_MAX, w, value);
        if (n >= 0) return n;
        CHECK_EQ(errno, EAGAIN);  /* the word changed between the load and the call: again */
    }
}

/* A process that sleeps on `word` until woken, then exits without touching the lock. */
static pid_t stand_in(void *word) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        uint32_t value = atomic_load((_Atomic uint32_t *)word);
        syscall(SYS_futex, word, FUTEX_WAIT, value, NULL, NULL, 0);
        _exit(0);
    }
    return pid;
}

static void expect_exit(pid_t pid, int signal) {
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (signal) CHECK(WIFSIGNALED(status) && WTERMSIG(status) == signal);
    else CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void *shared_memory(size_t size) {
    void *memory = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(memory != MAP_FAILED);
    return memory;
}

/* ---- 1. A woken waiter dies before it takes the lock ---------------------------------------- */

enum kind { MUTEX, RECURSIVE, SEMAPHORE, CONDITION_LOCK };
static const char *const kind_names[] = { "mutex", "recursive lock", "semaphore", "condition lock" };

struct primitives {
    sync_mutex_t mutex;
    sync_recursive_lock_t recursive;
    sync_semaphore_t semaphore;
    sync_condition_lock_t condition_lock;
};

/* A waiter process: takes the primitive without a timeout, releases it, exits 0. */
static pid_t waiter(struct primitives *p, enum kind kind) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int r = -1;
        switch (kind) {
        case MUTEX: r = sync_mutex_lock(&p->mutex) || sync_mutex_unlock(&p->mutex); break;
        case RECURSIVE: r = sync_recursive_lock_lock(&p->recursive) || sync_recursive_lock_unlock(&p->recursive); break;
        case SEMAPHORE: r = sync_semaphore_wait(&p->semaphore) || sync_semaphore_signal(&p->semaphore, 1); break;
        case CONDITION_LOCK:
            r = sync_condition_lock_lock_when(&p->condition_lock, 1) || sync_condition_lock_unlock(&p->condition_lock);
            break;
        }
        _exit(r ? 1 : 0);
    }
    return pid;
}

/* The parent holds the primitive; the stand-in sleeps first, a real waiter behind it; the
 * parent releases (the kernel wakes the stand-in, which leaves): the real waiter gets it. */
static void test_woken_waiter_dies(enum kind kind) {
    alarm(120);
    struct primitives *p = shared_memory(sizeof *p);
    CHECK_EQ(sync_mutex_init(&p->mutex, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_recursive_lock_init(&p->recursive, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(sync_semaphore_init(&p->semaphore, 0, 0, SYNC_PROCESS_SHARED), 0);
    CHECK_EQ(sync_condition_lock_init(&p->condition_lock, 0, SYNC_PROCESS_SHARED), 0);
    void *word = NULL;
    switch (kind) {
    case MUTEX: CHECK_EQ(sync_mutex_lock(&p->mutex), 0); word = &p->mutex._word; break;
    case RECURSIVE: CHECK_EQ(sync_recursive_lock_lock(&p->recursive), 0); word = &p->recursive._word; break;
    case SEMAPHORE: word = &p->semaphore._count; break;  /* count 0: waiters sleep */
    case CONDITION_LOCK: CHECK_EQ(sync_condition_lock_lock(&p->condition_lock), 0); word = &p->condition_lock._mutex; break;
    }
    pid_t first = stand_in(word);
    WAIT_UNTIL(sleepers(word) == 1);
    pid_t second = waiter(p, kind);
    WAIT_UNTIL(sleepers(word) == 2);
    switch (kind) {
    case MUTEX: CHECK_EQ(sync_mutex_unlock(&p->mutex), 0); break;
    case RECURSIVE: CHECK_EQ(sync_recursive_lock_unlock(&p->recursive), 0); break;
    case SEMAPHORE: CHECK_EQ(sync_semaphore_signal(&p->semaphore, 1), 0); break;
    case CONDITION_LOCK: CHECK_EQ(sync_condition_lock_unlock_with(&p->condition_lock, 1), 0); break;
    }
    expect_exit(first, 0);   /* woken, gone without taking it */
    expect_exit(second, 0);  /* the lock is free: the live waiter must find out */
    printf("woken waiter died: %s: the next waiter got through\n", kind_names[kind]);
    munmap(p, sizeof *p);
    alarm(0);
}

/* A child process that takes the rwlock (write or read) without a timeout, then releases it. */
static pid_t rw_waiter(sync_rwlock_t *rw, int write) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (write ? sync_rwlock_wrlock(rw) : sync_rwlock_rdlock(rw)) _exit(1);
        if (write ? sync_rwlock_wrunlock(rw) : sync_rwlock_rdunlock(rw)) _exit(2);
        _exit(0);
    }
    return pid;
}

/* The parent holds the write lock; the stand-in sleeps first among the writers, a writer behind
 * it, a reader behind both. The release wakes the stand-in, which leaves: both must get in. */
static void test_woken_writer_dies(void) {
    alarm(120);
    sync_rwlock_t *rw = shared_memory(sizeof *rw);
    CHECK_EQ(sync_rwlock_init(rw, SYNC_RWLOCK_SHARED), 0);
    CHECK_EQ(sync_rwlock_wrlock(rw), 0);
    pid_t first = stand_in(&rw->_wakeups);
    WAIT_UNTIL(sleepers(&rw->_wakeups) == 1);
    pid_t writer = rw_waiter(rw, 1);
    WAIT_UNTIL(sleepers(&rw->_wakeups) == 2);
    pid_t reader = rw_waiter(rw, 0);
    WAIT_UNTIL(sleepers(&rw->_state) == 1);
    CHECK_EQ(sync_rwlock_wrunlock(rw), 0);
    expect_exit(first, 0);
    expect_exit(writer, 0);
    expect_exit(reader, 0);
    CHECK_EQ(sync_rwlock_try_rdlock(rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(rw), 0);
    printf("woken waiter died: rwlock: the next writer and reader got through\n");
    munmap(rw, sizeof *rw);
    alarm(0);
}

/* ---- 2. A waiting writer dies while readers hold the lock ----------------------------------- */

/* Whether the writers' mark stops readers: tryrdlock says EBUSY (a read lock it gets is given back). */
static int readers_stopped(sync_rwlock_t *rw) {
    int r = sync_rwlock_try_rdlock(rw);
    if (r == 0) CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    return r == EBUSY;
}

/* The parent holds a read lock; a writer process waits (marked, asleep) and is SIGKILLed. With
 * the read lock still held, a new reader in another process and the holder's own second read
 * lock get in (untimed: a timeout would hide a reader that only gets in once the holder leaves). */
static void test_killed_waiting_writer_stops_no_reader(void) {
    alarm(120);
    sync_rwlock_t *rw = shared_memory(sizeof *rw);
    CHECK_EQ(sync_rwlock_init(rw, SYNC_RWLOCK_SHARED), 0);
    CHECK_EQ(sync_rwlock_rdlock(rw), 0);
    pid_t writer = rw_waiter(rw, 1);
    WAIT_UNTIL(sleepers(&rw->_wakeups) == 1 && readers_stopped(rw));
    CHECK_EQ(kill(writer, SIGKILL), 0);
    expect_exit(writer, SIGKILL);
    pid_t reader = rw_waiter(rw, 0);
    expect_exit(reader, 0);
    CHECK_EQ(sync_rwlock_rdlock(rw), 0);   /* the holder's second read lock */
    CHECK_EQ(sync_rwlock_try_rdlock(rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(rw), 0);
    printf("killed waiting writer: readers got in while a reader held the lock\n");
    munmap(rw, sizeof *rw);
    alarm(0);
}

/* A live writer among dead ones: the readers' re-validation never hands the lock to readers
 * and a writer at once, and the live writer gets in once the readers leave. */
static void test_live_writer_behind_dead_one(void) {
    alarm(120);
    sync_rwlock_t *rw = shared_memory(sizeof *rw);
    CHECK_EQ(sync_rwlock_init(rw, SYNC_RWLOCK_SHARED), 0);
    CHECK_EQ(sync_rwlock_rdlock(rw), 0);
    pid_t dead = rw_waiter(rw, 1);
    WAIT_UNTIL(sleepers(&rw->_wakeups) == 1 && readers_stopped(rw));
    pid_t live = rw_waiter(rw, 1);
    WAIT_UNTIL(sleepers(&rw->_wakeups) == 2);
    CHECK_EQ(kill(dead, SIGKILL), 0);
    expect_exit(dead, SIGKILL);
    CHECK_EQ(sync_rwlock_try_wrlock(rw), EBUSY);  /* readers hold it: no writer is let in */
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    expect_exit(live, 0);
    CHECK_EQ(sync_rwlock_try_wrlock(rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(rw), 0);
    printf("live writer behind a killed one: it got in once the readers left\n");
    munmap(rw, sizeof *rw);
    alarm(0);
}

int main(void) {
    watchdog_install("test_waiter_death: watchdog: a waiter never woke (a lost wakeup)\n");
    test_woken_waiter_dies(MUTEX);
    test_woken_waiter_dies(RECURSIVE);
    test_woken_waiter_dies(SEMAPHORE);
    test_woken_waiter_dies(CONDITION_LOCK);
    test_woken_writer_dies();
    test_killed_waiting_writer_stops_no_reader();
    test_live_writer_behind_dead_one();
    DONE();
}
