/* What the C tests of the distributed lock share (test_distributed_lock*.c): making a lock that
 * must be made, a refused target's error, children that report holding a lock over a pipe, and
 * processes contending for one lock. Include it after check.h (a test defines _GNU_SOURCE
 * before its first include). */
#ifndef DISTRIBUTED_SUPPORT_H
#define DISTRIBUTED_SUPPORT_H
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sync.h>

#include "check.h"

/* A lock of target `t` that must be created (the library's message is printed if not). */
static inline sync_distributed_lock_t *make_lock(const char *t) {
    sync_distributed_lock_t *lock = NULL;
    int err = sync_distributed_lock_create(t, &lock);
    if (err) fprintf(stderr, "create %s: %d: %s\n", t, err, sync_distributed_lock_error_message());
    CHECK_EQ(err, 0);
    return lock;
}

/* The error creating a lock of target `t` gives (the lock is left NULL). */
static inline int create_error(const char *t) {
    sync_distributed_lock_t *lock = (sync_distributed_lock_t *)1;
    int err = sync_distributed_lock_create(t, &lock);
    CHECK(lock == NULL);
    return err;
}

/* Waits for `child`, which must exit with status 0. */
static inline void wait_ok(pid_t child) {
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    if (status != 0) fprintf(stderr, "child %d: status %#x\n", (int)child, status);
    CHECK_EQ(status, 0);
}

/* In a child: tries `lock` and writes to `fd` whether it holds it ('y' or 'n'); exits 3 if it
 * cannot write. */
static inline void report_try_lock(int fd, sync_distributed_lock_t *lock) {
    char ok = sync_distributed_lock_try_lock(lock) == 0 ? 'y' : 'n';
    if (write(fd, &ok, 1) != 1) _exit(3);
}

/* In the parent: reads the child's report_try_lock from `fd`, which must say it holds the lock. */
static inline void expect_holding(int fd) {
    char ok = 0;
    CHECK_EQ(read(fd, &ok, 1), 1);
    CHECK_EQ(ok, 'y');
}

/* A child that takes `t` and holds it until killed (or its parent dies; SIGALRM ends it after
 * 120 s); returns its pid once it holds it. */
static inline pid_t spawn_holder(const char *t) {
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGALRM, SIG_DFL);
        alarm(120);
        report_try_lock(ready[1], make_lock(t));
        for (;;) pause();
    }
    expect_holding(ready[0]);
    close(ready[0]);
    close(ready[1]);
    return child;
}

/* `workers` processes take `t` `rounds` times each (lock_until, a minute at most), logging
 * "E <worker> <token>" on entry and "X <worker> 0" on exit to the file `log_path` (with a
 * sched_yield between them if `yield_inside`): asserts one holder at a time, and tokens strictly
 * increasing in the order of the log. */
static inline void check_exclusion_between_processes(const char *t, const char *log_path, int workers,
                                                     int rounds, int yield_inside) {
    int fd = open(log_path, O_CREAT | O_TRUNC | O_WRONLY | O_APPEND, 0644);
    CHECK(fd >= 0);
    pid_t children[64];
    CHECK(workers > 0 && workers <= 64);
    for (int w = 0; w < workers; w++) {
        children[w] = fork();
        if (children[w] != 0) continue;
        alarm(120);
        sync_distributed_lock_t *lock = make_lock(t);
        for (int r = 0; r < rounds; r++) {
            int err = sync_distributed_lock_lock_until(lock, sync_monotonic_ns() + 60 * 1000000000LL, 1000000);
            if (err) { fprintf(stderr, "worker: %d %s\n", err, sync_distributed_lock_error_message()); _exit(7); }
            uint64_t token;
            if (sync_distributed_lock_token(lock, &token) != 0) _exit(8);
            char line[64];
            int n = snprintf(line, sizeof line, "E %d %llu\n", w, (unsigned long long)token);
            if (write(fd, line, (size_t)n) != n) _exit(9);
            if (yield_inside) sched_yield();
            n = snprintf(line, sizeof line, "X %d 0\n", w);
            if (write(fd, line, (size_t)n) != n) _exit(9);
            if (sync_distributed_lock_unlock(lock) != 0) _exit(10);
        }
        _exit(0);
    }
    for (int w = 0; w < workers; w++) wait_ok(children[w]);
    close(fd);
    FILE *log = fopen(log_path, "r");
    CHECK(log != NULL);
    char kind;
    int worker, holder = -1, entries = 0;
    unsigned long long token, last = 0;
    while (fscanf(log, " %c %d %llu", &kind, &worker, &token) == 3) {
        if (kind == 'E') {
            CHECK_EQ(holder, -1);
            CHECK(token > last);
            last = token;
            holder = worker;
            entries++;
        } else {
            CHECK_EQ(holder, worker);
            holder = -1;
        }
    }
    fclose(log);
    CHECK_EQ(entries, workers * rounds);
}
#endif
