/* <os/lock.h>: os_unfair_lock with Apple's semantics. Mutual exclusion under threads, trylock,
 * the owner (the word holds the holder's thread id), the assertions, a waiter that sleeps, a
 * forked child that continues its holder, and every misuse stopping the program with Apple's
 * wording (each in a child process, its stderr read back). */
#define _GNU_SOURCE
#include "check.h"
#include <os/lock.h>
#include <os/lock_private.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint32_t tid(void) { return (uint32_t)syscall(SYS_gettid); }

static void nap(void) { struct timespec ts = {0, 1000000}; nanosleep(&ts, NULL); }

/* Runs body in a child (its own process group); returns its exit status, or -1 if a signal
 * ended it or it had not ended within 10 s (then it is killed: a guard against a hang, not a
 * timing assertion). The start of its stderr goes to `err` (NUL-terminated). Only called while
 * the process has one thread. */
static int in_child(void (*body)(void), char *err, size_t size) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        setpgid(0, 0);
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        body();
        _exit(0);
    }
    setpgid(child, child);
    close(pipefd[1]);
    CHECK(fcntl(pipefd[0], F_SETFL, O_NONBLOCK) == 0);
    size_t got = 0;
    int status = 0, done = 0;
    for (int i = 0; i < 10000 && !done; i++) {
        if (waitpid(child, &status, WNOHANG) == child) done = 1;
        else nap();
        ssize_t n;
        char sink[4096];
        while ((n = got + 1 < size ? read(pipefd[0], err + got, size - 1 - got) : read(pipefd[0], sink, sizeof sink)) > 0)
            if (got + 1 < size) got += (size_t)n;
    }
    kill(-child, SIGKILL);
    if (!done) waitpid(child, &status, 0);
    err[got] = 0;
    close(pipefd[0]);
    return done && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- a thread that takes a lock and holds it until told ---- */

static os_unfair_lock shared_lock = {0};  /* static: GCC -Wpedantic rejects the compound literal */
static atomic_int holder_state;  /* 1: holding, 2: release now, 3: released */

static void *hold(void *arg) {
    (void)arg;
    os_unfair_lock_lock(&shared_lock);
    atomic_store(&holder_state, 1);
    while (atomic_load(&holder_state) != 2) nap();
    os_unfair_lock_unlock(&shared_lock);
    atomic_store(&holder_state, 3);
    return NULL;
}

static pthread_t start_holder(void) {
    pthread_t thread;
    atomic_store(&holder_state, 0);
    CHECK(pthread_create(&thread, NULL, hold, NULL) == 0);
    while (atomic_load(&holder_state) != 1) nap();
    return thread;
}

static void stop_holder(pthread_t thread) {
    atomic_store(&holder_state, 2);
    CHECK(pthread_join(thread, NULL) == 0);
}

/* ---- misuse, each in a child ---- */

static void unlock_free(void) { os_unfair_lock lock = OS_UNFAIR_LOCK_INIT; os_unfair_lock_unlock(&lock); }
static void unlock_others(void) {
    start_holder();
    os_unfair_lock_unlock(&shared_lock);
}
static void lock_twice(void) {
    os_unfair_lock lock = OS_UNFAIR_LOCK_INIT;
    os_unfair_lock_lock(&lock);
    os_unfair_lock_lock(&lock);
}
static void lock_twice_with_flags(void) {
    os_unfair_lock lock = OS_UNFAIR_LOCK_INIT;
    os_unfair_lock_lock_with_flags(&lock, OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN);
    os_unfair_lock_lock_with_options(&lock, OS_UNFAIR_LOCK_DATA_SYNCHRONIZATION);
}
static void assert_owner_free(void) { os_unfair_lock lock = OS_UNFAIR_LOCK_INIT; os_unfair_lock_assert_owner(&lock); }
static void assert_owner_others(void) {
    start_holder();
    os_unfair_lock_assert_owner(&shared_lock);
}
static void assert_not_owner_held(void) {
    os_unfair_lock lock = OS_UNFAIR_LOCK_INIT;
    os_unfair_lock_lock(&lock);
    os_unfair_lock_assert_not_owner(&lock);
}
static void unknown_flags(void) {
    os_unfair_lock lock = OS_UNFAIR_LOCK_INIT;
    os_unfair_lock_lock_with_flags(&lock, 0x1);
}
static void unknown_options(void) {
    os_unfair_lock lock = OS_UNFAIR_LOCK_INIT;
    os_unfair_lock_lock_with_options(&lock, OS_UNFAIR_LOCK_DATA_SYNCHRONIZATION | 0x80000000u);
}
static void lock_corrupt(void) {
    os_unfair_lock lock = {0x7FFFFFFFu};
    os_unfair_lock_lock(&lock);
}
static void unlock_corrupt(void) {
    os_unfair_lock lock = {0x80000000u};  /* WAITERS without a holder */
    os_unfair_lock_unlock(&lock);
}
static void lock_null(void) { os_unfair_lock_lock((os_unfair_lock_t)(uintptr_t)0); }

static void expect_stop(void (*body)(void), const char *message) {
    char err[8192];
    int status = in_child(body, err, sizeof err);
    if (status != -1 || strstr(err, message) == NULL || strstr(err, "BUG IN CLIENT OF LIBSYNC") == NULL) {
        fprintf(stderr, "expected a stop with \"%s\"; status %d, stderr:\n%s\n", message, status, err);
        exit(1);
    }
    CHECK_PASSED();
}

/* ---- after fork(), the child's thread continues the holder ---- */

static os_unfair_lock forked_lock = {0};
static void unlock_in_child(void) {
    os_unfair_lock_assert_owner(&forked_lock);
    os_unfair_lock_unlock(&forked_lock);
    os_unfair_lock_assert_not_owner(&forked_lock);
    if (!os_unfair_lock_trylock(&forked_lock)) _exit(2);
    if (forked_lock._os_unfair_lock_opaque != tid()) _exit(3);
    os_unfair_lock_unlock(&forked_lock);
}

/* ---- threads ---- */

enum { THREADS = 4, ROUNDS = 20000 };
static os_unfair_lock counter_lock = {0};
static long counter;
static atomic_int inside, overlaps;

static void *count(void *arg) {
    int flags = (int)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        if (flags == 0) os_unfair_lock_lock(&counter_lock);
        else if (flags == 1) os_unfair_lock_lock_with_flags(&counter_lock, OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN);
        else while (!os_unfair_lock_trylock(&counter_lock)) sched_yield();
        if (atomic_fetch_add(&inside, 1) != 0) atomic_fetch_add(&overlaps, 1);
        os_unfair_lock_assert_owner(&counter_lock);
        counter++;
        atomic_fetch_sub(&inside, 1);
        os_unfair_lock_unlock(&counter_lock);
    }
    return NULL;
}

static os_unfair_lock sleep_lock = {0};
static atomic_int waiter_done;
static void *waiter(void *arg) {
    (void)arg;
    os_unfair_lock_lock(&sleep_lock);
    atomic_store(&waiter_done, 1);
    os_unfair_lock_unlock(&sleep_lock);
    return NULL;
}

int main(void) {
    /* Apple's layout. */
    CHECK_EQ(sizeof(os_unfair_lock), 4);
    os_unfair_lock lock = OS_UNFAIR_LOCK_INIT;
    CHECK_EQ(lock._os_unfair_lock_opaque, 0);

    /* Misuse: each stops the program with Apple's wording (first, while there is one thread). */
    expect_stop(unlock_free, "Unlock of an os_unfair_lock not owned by current thread");
    expect_stop(unlock_others, "Unlock of an os_unfair_lock not owned by current thread");
    expect_stop(lock_twice, "Trying to recursively lock an os_unfair_lock");
    expect_stop(lock_twice_with_flags, "Trying to recursively lock an os_unfair_lock");
    expect_stop(assert_owner_free, "Lock unexpectedly not owned by current thread");
    expect_stop(assert_owner_others, "Lock unexpectedly not owned by current thread");
    expect_stop(assert_not_owner_held, "Lock unexpectedly owned by current thread");
    expect_stop(unknown_flags, "Invalid options 0x1");
    expect_stop(unknown_options, "Invalid options 0x80010000");
    expect_stop(lock_corrupt, "os_unfair_lock is corrupt");
    expect_stop(unlock_corrupt, "os_unfair_lock is corrupt");
    expect_stop(lock_null, "os_unfair_lock_lock: the lock argument is NULL");

    /* A forked child holds what its thread held, under its new id. */
    os_unfair_lock_lock(&forked_lock);
    char err[4096];
    CHECK_EQ(in_child(unlock_in_child, err, sizeof err), 0);
    os_unfair_lock_unlock(&forked_lock);

    /* The owner: the word holds the holder's thread id; trylock; the assertions. */
    os_unfair_lock_assert_not_owner(&lock);
    CHECK(os_unfair_lock_trylock(&lock));
    CHECK_EQ(lock._os_unfair_lock_opaque, tid());
    os_unfair_lock_assert_owner(&lock);
    CHECK(!os_unfair_lock_trylock(&lock));   /* held by the caller: false, no stop */
    os_unfair_lock_unlock(&lock);
    CHECK_EQ(lock._os_unfair_lock_opaque, 0);
    os_unfair_lock_lock_with_options(&lock, OS_UNFAIR_LOCK_NONE);
    os_unfair_lock_unlock(&lock);
    os_unfair_lock_lock_with_flags(&lock, OS_UNFAIR_LOCK_FLAG_NONE);
    os_unfair_lock_unlock(&lock);

    /* Held by another thread: trylock fails, assert_not_owner passes; free again after. */
    pthread_t holder = start_holder();
    CHECK(!os_unfair_lock_trylock(&shared_lock));
    os_unfair_lock_assert_not_owner(&shared_lock);
    CHECK(shared_lock._os_unfair_lock_opaque != 0 && shared_lock._os_unfair_lock_opaque != tid());
    stop_holder(holder);
    CHECK(os_unfair_lock_trylock(&shared_lock));
    os_unfair_lock_unlock(&shared_lock);

    /* A waiter that sleeps: it marks the word (bit 31), and the unlock wakes it. */
    os_unfair_lock_lock(&sleep_lock);
    pthread_t sleeper;
    CHECK(pthread_create(&sleeper, NULL, waiter, NULL) == 0);
    while (!(atomic_load_explicit((_Atomic uint32_t *)&sleep_lock._os_unfair_lock_opaque, memory_order_relaxed) & 0x80000000u)) nap();
    CHECK_EQ(atomic_load(&waiter_done), 0);
    os_unfair_lock_unlock(&sleep_lock);
    CHECK(pthread_join(sleeper, NULL) == 0);
    CHECK_EQ(atomic_load(&waiter_done), 1);
    CHECK_EQ(sleep_lock._os_unfair_lock_opaque, 0);

    /* Mutual exclusion: lock, lock_with_flags and trylock loops together. */
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, count, (void *)(intptr_t)(i % 3)) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
    CHECK_EQ(counter, (long)THREADS * ROUNDS);
    CHECK_EQ(atomic_load(&overlaps), 0);
    CHECK_EQ(counter_lock._os_unfair_lock_opaque, 0);
    DONE();
}
