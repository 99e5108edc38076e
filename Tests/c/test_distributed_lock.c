/* The distributed lock from C, between forked PROCESSES: mutual exclusion and progress, try_lock
 * busy, each unlock error, SIGKILLed holders recovered, racing breakers, bad paths; between the
 * THREADS of one object (they take turns, sleeping, not polling), recursion, process ownership,
 * self-deadlock; forked children (never the parent's holder, never hanging); paths at PATH_MAX. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "distributed_support.h"

static char dir[64];   /* a fresh directory per run */
static char path[128]; /* the lock, in it */

static sync_distributed_lock_t *make(void) {
    sync_distributed_lock_t *lock = NULL;
    CHECK_EQ(sync_distributed_lock_create(path, &lock), 0);
    CHECK(lock != NULL);
    return lock;
}

static void test_layout(void) {
    CHECK_EQ(sizeof(sync_distributed_lock_holder_t), 280);
    CHECK_EQ(offsetof(sync_distributed_lock_holder_t, acquired_ns), 0);
    CHECK_EQ(offsetof(sync_distributed_lock_holder_t, process_start), 8);
    CHECK_EQ(offsetof(sync_distributed_lock_holder_t, pid), 16);
    CHECK_EQ(offsetof(sync_distributed_lock_holder_t, flags), 20);
    CHECK_EQ(offsetof(sync_distributed_lock_holder_t, host), 24);
}

static void test_bad_paths(void) {
    char p[256];
    CHECK_EQ(create_error(NULL), EINVAL);
    CHECK_EQ(create_error(""), EINVAL);
    CHECK_EQ(create_error("/"), EINVAL);
    CHECK_EQ(sync_distributed_lock_create(path, NULL), EINVAL);
    snprintf(p, sizeof p, "%s/missing/lock", dir);
    CHECK_EQ(create_error(p), ENOENT);
    snprintf(p, sizeof p, "%s/file", dir);
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ(create_error(p), EEXIST);             /* the path is an existing file */
    snprintf(p, sizeof p, "%s/file/lock", dir);
    CHECK_EQ(create_error(p), ENOTDIR);            /* the parent is a file */
    snprintf(p, sizeof p, "%s/link", dir);
    CHECK_EQ(symlink(dir, p), 0);
    CHECK_EQ(create_error(p), EEXIST);             /* a symbolic link (even to a directory) */
    snprintf(p, sizeof p, "%s/foreign", dir);
    CHECK_EQ(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/foreign/data.txt", dir);
    fd = open(p, O_CREAT | O_WRONLY, 0644);
    close(fd);
    snprintf(p, sizeof p, "%s/foreign", dir);
    CHECK_EQ(create_error(p), EEXIST);             /* a directory with other content */

    /* No permission: root may write anywhere, so a child drops to nobody first; the directory
     * is root's, mode 0755. */
    snprintf(p, sizeof p, "%s/private", dir);
    CHECK_EQ(mkdir(p, 0755), 0);
    pid_t child = fork();
    if (child == 0) {
        if (getuid() == 0 && setuid(65534) != 0) _exit(2);
        snprintf(p, sizeof p, "%s/private/lock", dir);
        sync_distributed_lock_t *lock;
        _exit(sync_distributed_lock_create(p, &lock) == EACCES ? 0 : 1);
    }
    wait_ok(child);

    /* NULL objects */
    CHECK_EQ(sync_distributed_lock_try_lock(NULL), EINVAL);
    CHECK_EQ(sync_distributed_lock_unlock(NULL), EINVAL);
    CHECK_EQ(sync_distributed_lock_lock(NULL, 0, 1000), EINVAL);
    CHECK(!sync_distributed_lock_is_held(NULL));
    sync_distributed_lock_destroy(NULL);
}

static void test_basics_and_holder(void) {
    sync_distributed_lock_t *a = make(), *b = make();
    CHECK_EQ(strcmp(sync_distributed_lock_path(a), path), 0);
    sync_distributed_lock_holder_t h;
    CHECK_EQ(sync_distributed_lock_holder(a, &h), ENOENT);
    CHECK_EQ(sync_distributed_lock_unlock(a), EPERM);

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(b), EBUSY);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EDEADLK);
    CHECK_EQ(sync_distributed_lock_recover(b), EBUSY);      /* a live holder is not stale */
    CHECK(sync_distributed_lock_is_held(a));
    CHECK(!sync_distributed_lock_is_held(b));

    CHECK_EQ(sync_distributed_lock_holder(b, &h), 0);       /* anyone can read who holds it */
    CHECK_EQ(h.pid, getpid());
    CHECK_EQ(h.flags, SYNC_DISTRIBUTED_LOCK_THIS_HOST);
    CHECK(h.process_start > 0);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    CHECK_EQ(strcmp(h.host, host), 0);
    int64_t wall = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec, date = 0;
    CHECK(h.acquired_ns >= wall - 1000000000 && h.acquired_ns < wall + 60 * 1000000000LL);
    CHECK_EQ(sync_distributed_lock_date(b, &date), 0);
    CHECK_EQ(date, h.acquired_ns);

    CHECK_EQ(sync_distributed_lock_unlock(b), EPERM);       /* b does not hold it */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), EPERM);
    CHECK_EQ(sync_distributed_lock_date(a, &date), ENOENT);
    struct stat st;                                         /* released: an empty directory */
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode) && rmdir(path) == 0);
    CHECK_EQ(sync_distributed_lock_try_lock(b), 0);        /* ... or none */
    CHECK_EQ(sync_distributed_lock_unlock(b), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);        /* objects go on acquiring */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK_EQ(sync_distributed_lock_lock(a, 0, 0), EINVAL);  /* poll interval <= 0 */
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(b);
}

static void test_unlock_errors(void) {
    sync_distributed_lock_t *a = make(), *b = make();
    /* broken meanwhile, free now */
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_break(b), 0);
    CHECK(!sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), ESTALE);
    CHECK_EQ(sync_distributed_lock_unlock(a), EPERM);       /* and then no longer held */
    /* broken meanwhile, and someone else holds it now */
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_break(b), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(b), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), EBUSY);
    CHECK_EQ(sync_distributed_lock_unlock(b), 0);
    CHECK_EQ(sync_distributed_lock_break(b), 0);            /* breaking a free lock: nothing to do */
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(b);
}

/* The caller acquiring again through its non-recursive object: EDEADLK while the hold is in place;
 * once it was lost, the acquire ends it and says so (ESTALE) once, and the next call acquires. */
static void test_acquire_after_a_lost_hold(void) {
    sync_distributed_lock_t *a = make(), *b = make();
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EDEADLK);   /* in place: a deadlock */
    CHECK_EQ(sync_distributed_lock_break(b), 0);             /* lost, free now */
    CHECK_EQ(sync_distributed_lock_try_lock(a), ESTALE);
    CHECK(strstr(sync_distributed_lock_error_message(), "lost") != NULL);
    CHECK_EQ(sync_distributed_lock_count(a), 0);              /* ended */
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_break(b), 0);             /* lost, and someone else holds it */
    CHECK_EQ(sync_distributed_lock_try_lock(b), 0);
    CHECK_EQ(sync_distributed_lock_lock(a, 1000000000, 1000000), ESTALE);
    CHECK(strstr(sync_distributed_lock_error_message(), "another holder") != NULL);
    CHECK_EQ(sync_distributed_lock_unlock(a), EPERM);        /* ended: nothing left to unlock */
    CHECK_EQ(sync_distributed_lock_lock(a, 0, 1000000), ETIMEDOUT);  /* b's now */
    CHECK_EQ(sync_distributed_lock_unlock(b), 0);
    CHECK_EQ(sync_distributed_lock_lock_until(a, -1, 1000000), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(b);
}

/* A child process that takes the lock and holds it until killed (or told to exit, holding it). */
static pid_t spawn_path_holder(void) {
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        sync_distributed_lock_t *lock = make();
        report_try_lock(ready[1], lock);
        for (;;) pause();
    }
    expect_holding(ready[0]);
    close(ready[0]);
    close(ready[1]);
    return child;
}

static void on_alarm(int signal) { (void)signal; }

static void test_busy_timeout_and_interrupt(void) {
    pid_t holder = spawn_path_holder();
    sync_distributed_lock_t *a = make();
    CHECK_EQ(sync_distributed_lock_try_lock(a), EBUSY);   /* held by another process: busy, at once */
    sync_distributed_lock_holder_t h;
    CHECK_EQ(sync_distributed_lock_holder(a, &h), 0);
    CHECK_EQ(h.pid, holder);
    CHECK_EQ(h.flags, SYNC_DISTRIBUTED_LOCK_THIS_HOST);  /* alive: not stale */

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(sync_distributed_lock_lock(a, 100000000, 5000000), ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(waited >= 0.099 && waited < 5);
    CHECK_EQ(sync_distributed_lock_lock(a, 0, 1000000), ETIMEDOUT);
    /* the longest poll interval: the pauses saturate at it, the wait ends at its deadline */
    CHECK_EQ(sync_distributed_lock_lock(a, 100000000, INT64_MAX), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_lock(a, 100000000, INT64_MAX / 2 + 1), ETIMEDOUT);

    /* A signal handler interrupts the wait: EINTR, so callers (Python's Ctrl-C) can act. */
    struct sigaction action = {0};
    action.sa_handler = on_alarm;                          /* no SA_RESTART */
    sigaction(SIGALRM, &action, NULL);
    struct itimerval timer = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &timer, NULL);
    CHECK_EQ(sync_distributed_lock_lock(a, -1, 1000000000), EINTR);

    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_break(a), 0);          /* leave no stale lock behind */
    sync_distributed_lock_destroy(a);
}

static void test_killed_holder_is_stale_and_recovered(void) {
    pid_t holder = spawn_path_holder();
    sync_distributed_lock_t *a = make();
    kill(holder, SIGKILL);
    /* Not reaped yet (a zombie): already stale. */
    sync_distributed_lock_holder_t h = {0};
    for (int i = 0; i < 500 && !(h.flags & SYNC_DISTRIBUTED_LOCK_STALE); i++) {
        CHECK_EQ(sync_distributed_lock_holder(a, &h), 0);
        usleep(10000);
    }
    CHECK_EQ(h.pid, holder);
    CHECK_EQ(h.flags, SYNC_DISTRIBUTED_LOCK_THIS_HOST | SYNC_DISTRIBUTED_LOCK_STALE);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EBUSY);    /* try_lock never breaks a lock */
    CHECK_EQ(sync_distributed_lock_recover(a), 0);         /* ... recover takes it over */
    CHECK(sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_holder(a, &h), 0);
    CHECK_EQ(h.pid, getpid());
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK_EQ(sync_distributed_lock_recover(a), ENOENT);    /* free: nothing to recover */

    /* lock() recovers a stale lock by itself. */
    holder = spawn_path_holder();
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_lock(a, 10LL * 1000000000, 1000000), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* Two processes recover one stale lock at the same moment: exactly one wins, the other sees it
 * held. On odd rounds the second process try_locks instead: it must never slip in during the
 * takeover. Both stay alive until the parent has both results (else the loser could see the winner
 * dead, and recover again, rightly). The winner then exits holding: the next round's stale lock. */
static void test_racing_breakers(void) {
    pid_t holder = spawn_path_holder();
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    int wins = 0; /* of the first breaker */
    for (int round = 0; round < 200; round++) {
        int start[2], results[2], end[2];
        CHECK_EQ(pipe(start), 0);
        CHECK_EQ(pipe(results), 0);
        CHECK_EQ(pipe(end), 0);
        pid_t breakers[2];
        for (int i = 0; i < 2; i++) {
            breakers[i] = fork();
            if (breakers[i] == 0) {
                close(start[1]);
                close(end[1]);
                sync_distributed_lock_t *lock = make();
                char c;
                if (read(start[0], &c, 1) != 0) _exit(4);  /* EOF: go */
                int rc[2] = {i, i == 1 && round % 2 ? sync_distributed_lock_try_lock(lock)
                                                    : sync_distributed_lock_recover(lock)};
                if (write(results[1], rc, sizeof rc) != sizeof rc) _exit(5);
                if (read(end[0], &c, 1) != 0) _exit(6);
                _exit(0);
            }
        }
        close(start[0]);
        close(start[1]);
        int rc[2], message[2];
        for (int i = 0; i < 2; i++) {
            CHECK_EQ(read(results[0], message, sizeof message), (long)sizeof message);
            rc[message[0]] = message[1];
        }
        CHECK((rc[0] == 0 && rc[1] == EBUSY) || (rc[0] == EBUSY && rc[1] == 0));
        if (round % 2) CHECK_EQ(rc[0], 0);  /* a try_lock never takes a lock being taken over */
        else wins += rc[0] == 0;
        close(end[1]);
        for (int i = 0; i < 2; i++) wait_ok(breakers[i]);
        close(end[0]);
        close(results[0]);
        close(results[1]);
    }
    printf("racing breakers: the first won %d of 100 races\n", wins);
    fflush(stdout);
    sync_distributed_lock_t *a = make();
    CHECK_EQ(sync_distributed_lock_recover(a), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* WORKERS processes take the lock ROUNDS times each through lock(), appending "enter"/"exit"
 * lines to a log; every fifth round a worker's child takes it instead and dies holding it
 * ("abandon"), which the others must recover, racing each other. The log must show one holder
 * at a time, and everyone got through. */
enum { WORKERS = 4, ROUNDS = 100, ABANDON_EVERY = 5 };

static void log_line(int fd, char what, int worker) {
    char line[8] = {what, (char)('0' + worker), '\n'};
    if (write(fd, line, 3) != 3) _exit(9);
}

static void test_mutual_exclusion_between_processes(void) {
    char log_path[160];
    snprintf(log_path, sizeof log_path, "%s/log", dir);
    int fd = open(log_path, O_CREAT | O_TRUNC | O_WRONLY | O_APPEND, 0644);
    CHECK(fd >= 0);
    pid_t workers[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        workers[w] = fork();
        if (workers[w] != 0) continue;
        sync_distributed_lock_t *lock = make();
        for (int r = 0; r < ROUNDS; r++) {
            if (r % ABANDON_EVERY == ABANDON_EVERY - 1) {
                pid_t doomed = fork();
                if (doomed == 0) {
                    sync_distributed_lock_t *mine = make();
                    if (sync_distributed_lock_lock(mine, 60LL * 1000000000, 200000) != 0) _exit(7);
                    log_line(fd, 'E', w);
                    log_line(fd, 'A', w);
                    _exit(0);
                }
                int status;
                if (waitpid(doomed, &status, 0) != doomed || status != 0) _exit(10);
                continue;
            }
            if (sync_distributed_lock_lock(lock, 60LL * 1000000000, 200000) != 0) _exit(7);
            log_line(fd, 'E', w);
            sched_yield();
            log_line(fd, 'X', w);
            if (sync_distributed_lock_unlock(lock) != 0) _exit(8);
        }
        _exit(0);
    }
    for (int w = 0; w < WORKERS; w++) wait_ok(workers[w]);
    close(fd);

    FILE *log = fopen(log_path, "r");
    CHECK(log != NULL);
    char line[8];
    int holder = -1, entries = 0, abandoned = 0;
    while (fgets(line, sizeof line, log)) {
        int worker = line[1] - '0';
        if (line[0] == 'E') { CHECK_EQ(holder, -1); holder = worker; entries++; }
        else { CHECK_EQ(holder, worker); holder = -1; abandoned += line[0] == 'A'; }
    }
    fclose(log);
    CHECK_EQ(entries, WORKERS * ROUNDS);
    CHECK_EQ(abandoned, WORKERS * (ROUNDS / ABANDON_EVERY));
}

static sync_distributed_lock_t *make_with(const char *p, unsigned flags, int mode) {
    sync_distributed_lock_t *lock = NULL;
    CHECK_EQ(sync_distributed_lock_create_with(p, flags, mode, &lock), 0);
    CHECK(lock != NULL);
    return lock;
}

static int create_with_error(const char *p, unsigned flags, int mode) {
    sync_distributed_lock_t *lock = (sync_distributed_lock_t *)1;
    int err = sync_distributed_lock_create_with(p, flags, mode, &lock);
    CHECK(lock == NULL);
    return err;
}

static void test_bad_options(void) {
    char p[300];
    CHECK_EQ(create_with_error(path, 64, -1), EINVAL);                /* an unknown flag */
    CHECK_EQ(create_with_error(path, 0, -2), EINVAL);                 /* mode outside -1...0777 */
    CHECK_EQ(create_with_error(path, 0, 01000), EINVAL);
    snprintf(p, sizeof p, "%s/bad\xff\xfename", dir);                 /* not UTF-8 */
    CHECK_EQ(create_with_error(p, 0, -1), EINVAL);
    CHECK_EQ(create_with_error(NULL, 0, -1), EINVAL);
    CHECK_EQ(sync_distributed_lock_create_with(path, 0, -1, NULL), EINVAL);
    memset(p, 'n', sizeof p - 1);                                     /* a file name over NAME_MAX */
    p[0] = '/';
    p[sizeof p - 1] = 0;
    CHECK_EQ(create_with_error(p, 0, -1), ENAMETOOLONG);
    CHECK_EQ(sync_distributed_lock_unlock_all(NULL), EINVAL);
    CHECK_EQ(sync_distributed_lock_count(NULL), 0);
    CHECK(sync_distributed_lock_path(NULL) == NULL);
}

/* On-disk states no lock leaves (a file named as a holder entry, an entry naming pid 0) are "not a
 * lock": creation and every operation say EEXIST; none polls forever. */
static void test_impossible_disk_states(void) {
    char p[256], entry[512];
    const char *names[] = {"1.2.3.4.m@h", "0.2.3.4.m@h"};
    for (int i = 0; i < 2; i++) {
        sync_distributed_lock_t *lock = make();
        snprintf(p, sizeof p, "rm -rf %s", path);                    /* (the last test's stale lock) */
        CHECK_EQ(system(p), 0);
        CHECK_EQ(mkdir(path, 0755), 0);
        snprintf(entry, sizeof entry, "%s/%s", path, names[i]);
        if (i == 0) {
            int fd = open(entry, O_CREAT | O_WRONLY, 0644);          /* a file, not a directory */
            CHECK(fd >= 0);
            close(fd);
        } else {
            CHECK_EQ(mkdir(entry, 0755), 0);                         /* pid 0 */
        }
        CHECK_EQ(create_error(path), EEXIST);
        CHECK(sync_distributed_lock_try_lock(lock) == EBUSY || sync_distributed_lock_try_lock(lock) == EEXIST);
        CHECK_EQ(sync_distributed_lock_lock(lock, -1, 1000000), EEXIST);
        CHECK_EQ(sync_distributed_lock_recover(lock), EEXIST);
        CHECK_EQ(sync_distributed_lock_break(lock), EEXIST);
        sync_distributed_lock_holder_t h;
        CHECK_EQ(sync_distributed_lock_holder(lock, &h), EEXIST);
        CHECK(!sync_distributed_lock_is_held(lock));
        snprintf(p, sizeof p, "rm -rf %s", path);
        CHECK_EQ(system(p), 0);
        sync_distributed_lock_destroy(lock);
    }
}

/* TAKE_OVER_FILE: the empty file filelock's FileLock leaves behind is taken over when no flock
 * holder is on it; one held by a flock, or with content, is EEXIST with a message saying what to
 * do, and stays; without the flag any file is EEXIST. At creation, and at an acquire (the file
 * made after the object). */
static void test_take_over_filelock_file(void) {
    char p[300];
    snprintf(p, sizeof p, "%s/migrated.lock", dir);
    int fd = open(p, O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);                    /* (another open file: as filelock's process) */
    CHECK_EQ(create_with_error(p, SYNC_DISTRIBUTED_LOCK_TAKE_OVER_FILE, -1), EEXIST);
    CHECK(strstr(sync_distributed_lock_error_message(), "held by a filelock process") != NULL);
    CHECK_EQ(create_with_error(p, 0, -1), EEXIST);
    CHECK_EQ(flock(fd, LOCK_UN), 0);
    CHECK_EQ(create_with_error(p, 0, -1), EEXIST);                /* not asked: left alone */
    struct stat st;
    CHECK(stat(p, &st) == 0 && S_ISREG(st.st_mode));
    CHECK_EQ(write(fd, "1234\n", 5), 5);                         /* content: never removed */
    CHECK_EQ(create_with_error(p, SYNC_DISTRIBUTED_LOCK_TAKE_OVER_FILE, -1), EEXIST);
    CHECK(strstr(sync_distributed_lock_error_message(), "with content") != NULL);
    CHECK_EQ(ftruncate(fd, 0), 0);
    close(fd);
    sync_distributed_lock_t *lock = make_with(p, SYNC_DISTRIBUTED_LOCK_TAKE_OVER_FILE, -1);  /* free: taken over */
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
    CHECK_EQ(rmdir(p), 0);
    fd = open(p, O_CREAT | O_RDWR, 0644);                         /* a file again, after the object was made */
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
    sync_distributed_lock_destroy(lock);
    CHECK_EQ(rmdir(p), 0);
}

/* MAKE_PARENTS, REMOVE_ON_RELEASE and mode. */
static void test_parents_removal_and_mode(void) {
    char p[256], parent[200];
    snprintf(parent, sizeof parent, "%s/made/on/demand", dir);
    snprintf(p, sizeof p, "%s/x.lock", parent);
    CHECK_EQ(create_with_error(p, 0, -1), ENOENT);
    sync_distributed_lock_t *lock = make_with(p, SYNC_DISTRIBUTED_LOCK_MAKE_PARENTS | SYNC_DISTRIBUTED_LOCK_REMOVE_ON_RELEASE, 0640);
    struct stat st;
    CHECK(stat(parent, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ(st.st_mode & 07777, 0750);                               /* 0640 plus a search bit per read bit */
    CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
    CHECK(stat(p, &st) != 0 && errno == ENOENT);                      /* removed on release */
    snprintf(p, sizeof p, "rm -rf %s/made", dir);                     /* parents made again when acquiring */
    CHECK_EQ(system(p), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
    sync_distributed_lock_destroy(lock);
}

/* One object shared by threads: they take turns (the holder is the thread). */
enum { SHARERS = 8, TURNS = 40 };
static sync_distributed_lock_t *shared_lock;
static int inside, turns_taken;
static atomic_int sharing_failures;

static void *share(void *arg) {
    (void)arg;
    for (int i = 0; i < TURNS; i++) {
        if (sync_distributed_lock_lock(shared_lock, 60LL * 1000000000, 1000000) != 0) { sharing_failures++; return NULL; }
        if (inside++ != 0) sharing_failures++;
        sched_yield();
        turns_taken++;
        inside--;
        if (sync_distributed_lock_unlock(shared_lock) != 0) sharing_failures++;
    }
    return NULL;
}

static void test_threads_share_one_object(void) {
    shared_lock = make();
    pthread_t threads[SHARERS];
    for (int i = 0; i < SHARERS; i++) CHECK_EQ(pthread_create(&threads[i], NULL, share, NULL), 0);
    for (int i = 0; i < SHARERS; i++) CHECK_EQ(pthread_join(threads[i], NULL), 0);
    CHECK_EQ(sharing_failures, 0);
    CHECK_EQ(turns_taken, SHARERS * TURNS);
    CHECK(!sync_distributed_lock_is_held(shared_lock));
    sync_distributed_lock_destroy(shared_lock);
}

/* What another thread sees while the main thread holds `lock`. */
struct probe { sync_distributed_lock_t *lock; int try_lock, unlock, unlock_all, count, recover, timed; bool held, elsewhere; };

static void *probe(void *arg) {
    struct probe *p = arg;
    p->try_lock = sync_distributed_lock_try_lock(p->lock);
    p->unlock = sync_distributed_lock_unlock(p->lock);
    p->unlock_all = sync_distributed_lock_unlock_all(p->lock);
    p->count = sync_distributed_lock_count(p->lock);
    p->held = sync_distributed_lock_is_held(p->lock);
    p->elsewhere = sync_distributed_lock_is_held_elsewhere(p->lock);
    p->recover = sync_distributed_lock_recover(p->lock);
    p->timed = sync_distributed_lock_lock(p->lock, 20000000, 1000000);
    return NULL;
}

static struct probe probe_from_thread(sync_distributed_lock_t *lock) {
    struct probe p = {.lock = lock};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, probe, &p), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    return p;
}

static void test_owner_recursion_and_deadlock(void) {
    /* Thread-owned, not recursive: other threads may neither take nor release it. */
    sync_distributed_lock_t *a = make();
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_count(a), 1);
    struct probe p = probe_from_thread(a);
    CHECK_EQ(p.try_lock, EBUSY);
    CHECK_EQ(p.unlock, EPERM);
    CHECK_EQ(p.unlock_all, EPERM);
    CHECK_EQ(p.count, 0);
    CHECK(!p.held);
    CHECK_EQ(p.recover, EBUSY);
    CHECK_EQ(p.timed, ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EDEADLK);
    CHECK_EQ(sync_distributed_lock_lock(a, -1, 1000000), EDEADLK);
    CHECK(!sync_distributed_lock_is_held_elsewhere(a));              /* through this object */
    CHECK(!sync_distributed_lock_is_held_elsewhere(NULL));

    /* Another object, same thread: an endless wait is a deadlock (is_held_elsewhere says so
     * beforehand); a bounded one times out; another thread just waits. */
    sync_distributed_lock_t *b = make();
    CHECK(sync_distributed_lock_is_held_elsewhere(b));
    CHECK_EQ(sync_distributed_lock_lock(b, -1, 1000000), EDEADLK);
    CHECK_EQ(sync_distributed_lock_lock(b, 0, 1000000), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_lock(b, 10000000, 1000000), ETIMEDOUT);
    p = probe_from_thread(b);
    CHECK_EQ(p.try_lock, EBUSY);
    CHECK_EQ(p.timed, ETIMEDOUT);
    CHECK(!p.elsewhere);                                             /* another thread holds nothing */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK(!sync_distributed_lock_is_held_elsewhere(b));
    CHECK_EQ(sync_distributed_lock_lock(b, -1, 1000000), 0);         /* released: no deadlock left */
    CHECK_EQ(sync_distributed_lock_unlock(b), 0);
    sync_distributed_lock_destroy(b);
    sync_distributed_lock_destroy(a);

    /* Recursive: counted; unlock_all releases every level. */
    a = make_with(path, SYNC_DISTRIBUTED_LOCK_RECURSIVE, -1);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ(sync_distributed_lock_lock(a, -1, 1000000), 0);
        CHECK_EQ(sync_distributed_lock_count(a), i);
    }
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK_EQ(sync_distributed_lock_count(a), 2);
    CHECK(sync_distributed_lock_is_held(a));
    p = probe_from_thread(a);                                        /* still the thread's */
    CHECK_EQ(p.try_lock, EBUSY);
    CHECK_EQ(p.count, 0);
    CHECK_EQ(sync_distributed_lock_unlock_all(a), 0);
    CHECK_EQ(sync_distributed_lock_count(a), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), EPERM);
    sync_distributed_lock_destroy(a);

    /* Process-owned: any thread re-enters and may release. */
    a = make_with(path, SYNC_DISTRIBUTED_LOCK_RECURSIVE | SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED, -1);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    p = probe_from_thread(a);  /* try_lock: a re-entry (2); unlock: 1; unlock_all: released; then its own hold */
    CHECK_EQ(p.try_lock, 0);
    CHECK_EQ(p.unlock, 0);
    CHECK_EQ(p.unlock_all, 0);
    CHECK_EQ(p.count, 0);
    CHECK_EQ(p.timed, 0);
    CHECK_EQ(sync_distributed_lock_count(a), 1);                     /* the probe's hold, the process's */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    a = make_with(path, SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED, -1);   /* ... not recursive: EDEADLK */
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    p = probe_from_thread(a);
    CHECK_EQ(p.try_lock, EDEADLK);
    CHECK_EQ(p.unlock, 0);
    CHECK_EQ(p.timed, 0);                                            /* (then its own hold) */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* The current system call of thread `tid` (from /proc), or -1. */
static long current_syscall(pid_t tid) {
    char name[64], text[64] = {0};
    snprintf(name, sizeof name, "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(name, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    return n > 0 ? strtol(text, NULL, 10) : -1;
}

struct waiter { sync_distributed_lock_t *lock; atomic_int tid; int code; };

static void *wait_for_it(void *arg) {
    struct waiter *w = arg;
    w->tid = (int)syscall(SYS_gettid);
    w->code = sync_distributed_lock_lock(w->lock, 60LL * 1000000000, 3600LL * 1000000000);
    if (w->code == 0) w->code = sync_distributed_lock_unlock(w->lock);
    return NULL;
}

struct holding { sync_distributed_lock_t *lock; atomic_int holding, stop; int code; };

/* Takes the lock and holds it until told (SIGALRM blocked here: it goes to the waiting thread). */
static void *hold_until_told(void *arg) {
    struct holding *h = arg;
    sigset_t alarm_only;
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm_only, NULL);
    h->code = sync_distributed_lock_try_lock(h->lock);
    h->holding = 1;
    while (!h->stop) usleep(1000);
    if (h->code == 0) h->code = sync_distributed_lock_unlock(h->lock);
    return NULL;
}

/* A thread waiting for the object's other thread sleeps on a futex (it does not poll the disk: its
 * poll interval is an hour) and is woken by the release. */
static void test_waiting_thread_sleeps_until_released(void) {
    sync_distributed_lock_t *lock = make();
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    struct waiter w = {.lock = lock};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, wait_for_it, &w), 0);
    while (w.tid == 0) sched_yield();
    for (int i = 0; i < 60000 && current_syscall(w.tid) != SYS_futex; i++) usleep(1000);
    CHECK_EQ(current_syscall(w.tid), SYS_futex);
    CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(w.code, 0);

    /* A signal handler interrupts that sleep: EINTR (Python's Ctrl-C needs it). */
    struct holding h = {.lock = lock};
    pthread_t holder;
    CHECK_EQ(pthread_create(&holder, NULL, hold_until_told, &h), 0);
    while (!h.holding) sched_yield();
    struct sigaction action = {0};
    action.sa_handler = on_alarm;                                    /* no SA_RESTART */
    sigaction(SIGALRM, &action, NULL);
    struct itimerval timer = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &timer, NULL);
    CHECK_EQ(sync_distributed_lock_lock(lock, -1, 3600LL * 1000000000), EINTR);
    h.stop = 1;
    CHECK_EQ(pthread_join(holder, NULL), 0);
    CHECK_EQ(h.code, 0);
    sync_distributed_lock_destroy(lock);
}

/* A forked child is never the holder of its parent's lock: unlock is EPERM, is_held false, and its
 * destroy (RELEASE_ON_DESTROY) or exit touches nothing. It may take the lock for itself. */
static void test_fork_child_never_holds(void) {
    sync_distributed_lock_t *lock = make();
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    pid_t child = fork();
    if (child == 0) _exit(sync_distributed_lock_unlock(lock) == EPERM && !sync_distributed_lock_is_held(lock) ? 0 : 1);
    wait_ok(child);
    sync_distributed_lock_holder_t h;
    CHECK_EQ(sync_distributed_lock_holder(lock, &h), 0);
    CHECK_EQ(h.pid, getpid());                                       /* still the parent's */
    CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
    sync_distributed_lock_destroy(lock);

    lock = make_with(path, SYNC_DISTRIBUTED_LOCK_RELEASE_ON_DESTROY | SYNC_DISTRIBUTED_LOCK_RECURSIVE, -1);
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
    child = fork();
    if (child == 0) {
        int ok = sync_distributed_lock_unlock(lock) == EPERM && sync_distributed_lock_unlock_all(lock) == EPERM
                 && !sync_distributed_lock_is_held(lock) && sync_distributed_lock_count(lock) == 0
                 && sync_distributed_lock_try_lock(lock) == EBUSY;   /* the parent holds it */
        sync_distributed_lock_destroy(lock);
        exit(ok ? 0 : 1);                                             /* (exit: atexit handlers run) */
    }
    wait_ok(child);
    CHECK_EQ(sync_distributed_lock_holder(lock, &h), 0);
    CHECK_EQ(h.pid, getpid());
    CHECK(sync_distributed_lock_is_held(lock));
    CHECK_EQ(sync_distributed_lock_count(lock), 2);
    CHECK_EQ(sync_distributed_lock_unlock_all(lock), 0);

    child = fork();                                                  /* the child's own hold */
    if (child == 0) {
        sync_distributed_lock_holder_t mine;
        int ok = sync_distributed_lock_try_lock(lock) == 0 && sync_distributed_lock_holder(lock, &mine) == 0
                 && mine.pid == getpid() && sync_distributed_lock_unlock(lock) == 0;
        _exit(ok ? 0 : 1);
    }
    wait_ok(child);
    CHECK_EQ(sync_distributed_lock_holder(lock, &h), ENOENT);
    sync_distributed_lock_destroy(lock);
}

/* Forks while other threads work on the object (its state locked at any instant): the child's
 * calls never hang, and never touch the parent's hold. */
enum { FORKS = 40 };
static atomic_int churning;

static void *churn(void *arg) {
    sync_distributed_lock_t *lock = arg;
    while (churning) {
        if (sync_distributed_lock_try_lock(lock) == 0) sync_distributed_lock_unlock(lock);
    }
    return NULL;
}

static void test_fork_during_operations(void) {
    sync_distributed_lock_t *lock = make_with(path, SYNC_DISTRIBUTED_LOCK_RELEASE_ON_DESTROY, -1);
    churning = 1;
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&threads[i], NULL, churn, lock), 0);
    for (int i = 0; i < FORKS; i++) {
        pid_t child = fork();
        if (child == 0) {
            alarm(30);                                               /* a hang fails the test */
            int code = sync_distributed_lock_unlock(lock);
            if (code != EPERM) _exit(1);
            code = sync_distributed_lock_lock(lock, 10LL * 1000000000, 1000000);
            if (code == 0) code = sync_distributed_lock_unlock(lock);
            sync_distributed_lock_destroy(lock);
            _exit(code == 0 ? 0 : 2);
        }
        wait_ok(child);
    }
    churning = 0;
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_join(threads[i], NULL), 0);
    sync_distributed_lock_destroy(lock);
}

/* Paths near PATH_MAX with a long file name: every operation works. */
static void test_long_paths(void) {
    static char parent[PATH_MAX + 256], lock_path[PATH_MAX + 512];
    char component[201];
    memset(component, 'd', 200);
    component[200] = 0;
    for (int target = 0; target < 2; target++) {
        /* parent + "/" + a 150-byte name: exactly PATH_MAX - 1 bytes, then 60 bytes beyond it. */
        size_t name_length = 150, total = target == 0 ? PATH_MAX - 1 : PATH_MAX + 60;
        size_t length = (size_t)snprintf(parent, sizeof parent, "%s/long", dir);
        CHECK_EQ(mkdir(parent, 0755) == 0 || errno == EEXIST, 1);
        while (length + 1 + 200 + 1 + name_length <= total) {
            length += (size_t)snprintf(parent + length, sizeof parent - length, "/%s", component);
            CHECK_EQ(mkdir(parent, 0755) == 0 || errno == EEXIST, 1);
        }
        size_t last = total - length - 1 - 1 - name_length;          /* the last component fills the gap */
        CHECK(last >= 1 && last <= 255);
        parent[length++] = '/';
        memset(parent + length, 'e', last);
        length += last;
        parent[length] = 0;
        CHECK_EQ(mkdir(parent, 0755) == 0 || errno == EEXIST, 1);
        memcpy(lock_path, parent, length);
        lock_path[length] = '/';
        memset(lock_path + length + 1, 'n', name_length);
        lock_path[length + 1 + name_length] = 0;
        CHECK_EQ(strlen(lock_path), total);

        sync_distributed_lock_t *a = make_with(lock_path, 0, -1), *b = make_with(lock_path, 0, -1);
        CHECK_EQ(strcmp(sync_distributed_lock_path(a), lock_path), 0);
        for (int round = 0; round < 2; round++) {
            CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
            CHECK(sync_distributed_lock_is_held(a));
            CHECK_EQ(sync_distributed_lock_try_lock(b), EBUSY);
            sync_distributed_lock_holder_t h;
            CHECK_EQ(sync_distributed_lock_holder(b, &h), 0);
            CHECK_EQ(h.pid, getpid());
            CHECK_EQ(sync_distributed_lock_unlock(a), 0);
            CHECK_EQ(sync_distributed_lock_lock(b, 1000000000, 1000000), 0);
            CHECK_EQ(sync_distributed_lock_break(a), 0);
            CHECK_EQ(sync_distributed_lock_unlock(b), ESTALE);
        }
        pid_t child = fork();                                        /* a stale holder, recovered */
        if (child == 0) _exit(sync_distributed_lock_try_lock(b) == 0 ? 0 : 1);
        wait_ok(child);
        CHECK_EQ(sync_distributed_lock_recover(a), 0);
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        sync_distributed_lock_destroy(a);
        sync_distributed_lock_destroy(b);
    }
}

struct asked { int calls, stop_at; };

static bool asked_enough(void *context) {
    struct asked *a = context;
    return ++a->calls >= a->stop_at;
}

static int lock_cancellable(sync_distributed_lock_t *lock, int64_t deadline, struct asked *asked) {
    int err;
    do err = sync_distributed_lock_lock_cancellable(lock, deadline, 1000000, asked ? asked_enough : NULL, asked);
    while (err == EINTR);
    return err;
}

/* The wait with a caller's condition to stop: asked only after a try that finds the lock held,
 * never before the deadlock check nor after the deadline. */
static void test_lock_cancellable(void) {
    sync_distributed_lock_t *a = make(), *b = make();
    struct asked asked = {0, 3};
    CHECK_EQ(sync_distributed_lock_lock_cancellable(NULL, -1, 1000000, NULL, NULL), EINVAL);
    CHECK_EQ(lock_cancellable(a, -1, &asked), 0);             /* free: not asked */
    CHECK_EQ(asked.calls, 0);
    CHECK_EQ(lock_cancellable(b, -1, &asked), EDEADLK);       /* this thread holds it through a */
    CHECK_EQ(asked.calls, 0);
    CHECK_EQ(lock_cancellable(b, 0, &asked), ETIMEDOUT);      /* one try, deadline passed */
    CHECK_EQ(asked.calls, 0);
    CHECK_EQ(lock_cancellable(b, sync_monotonic_ns() + 3600000000000, &asked), ECANCELED);
    CHECK_EQ(asked.calls, 3);
    CHECK_EQ(lock_cancellable(b, sync_monotonic_ns() + 2000000, NULL), ETIMEDOUT);  /* NULL: never */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    asked = (struct asked){0, 1};
    CHECK_EQ(lock_cancellable(b, -1, &asked), 0);
    CHECK_EQ(asked.calls, 0);
    CHECK_EQ(sync_distributed_lock_unlock(b), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(b);
}

static void check_canonical(const char *target, const char *expected) {
    char buffer[PATH_MAX];
    size_t length = 0;
    CHECK_EQ(sync_distributed_lock_canonical(target, buffer, sizeof buffer, &length), 0);
    if (strcmp(buffer, expected) != 0) fprintf(stderr, "canonical(%s) = %s, not %s\n", target, buffer, expected);
    CHECK_EQ(strcmp(buffer, expected), 0);
    CHECK_EQ(length, strlen(expected));
}

/* The core's rules for targets, as every front end applies them: URL or path (the scheme ASCII
 * letters and '+': non-ASCII letters make a path), and a path's one spelling. */
static void test_target_rules(void) {
    CHECK(sync_distributed_lock_is_url("redis://127.0.0.1/?lock=a"));
    CHECK(sync_distributed_lock_is_url("PostgreSQL+x://h/db?lock=a"));   /* (create: EINVAL, scheme) */
    CHECK(!sync_distributed_lock_is_url("\xc3\xa9://x"));                /* "é://x": a path */
    CHECK(!sync_distributed_lock_is_url("r\xc3\xa9" "dis://x"));
    CHECK(!sync_distributed_lock_is_url("1redis://x"));
    CHECK(!sync_distributed_lock_is_url("://x"));
    CHECK(!sync_distributed_lock_is_url("/tmp/a://b"));
    CHECK(!sync_distributed_lock_is_url(""));
    CHECK(!sync_distributed_lock_is_url(NULL));
    CHECK(!sync_distributed_lock_is_url("redis\xff://x"));               /* not UTF-8 */

    char real[PATH_MAX], link[PATH_MAX + 8], sub[PATH_MAX + 8], target[3 * PATH_MAX], expected[3 * PATH_MAX];
    CHECK(realpath(dir, real) != NULL);
    snprintf(sub, sizeof sub, "%s/r\xc3\xa9" "al", real);                /* "réal", and a link to it */
    CHECK_EQ(mkdir(sub, 0700), 0);
    snprintf(link, sizeof link, "%s/link-to-real", dir);
    CHECK_EQ(symlink(sub, link), 0);
    snprintf(target, sizeof target, "%s/x.lock//", link);
    snprintf(expected, sizeof expected, "%s/x.lock", sub);
    check_canonical(target, expected);
    snprintf(target, sizeof target, "%s/./m\xc3\xaf" "ssing/../d\xc3\xaf" "r/x.lock", link);  /* missing parents */
    snprintf(expected, sizeof expected, "%s/d\xc3\xaf" "r/x.lock", sub);
    check_canonical(target, expected);
    check_canonical("redis://u:secret@h/?lock=a", "redis://u:secret@h/?lock=a");
    check_canonical("/x.lock", "/x.lock");

    /* The spelling of the lock made there. */
    snprintf(target, sizeof target, "%s/x.lock/", link);
    sync_distributed_lock_t *lock = NULL;
    CHECK_EQ(sync_distributed_lock_create(target, &lock), 0);
    check_canonical(target, sync_distributed_lock_path(lock));
    sync_distributed_lock_destroy(lock);

    size_t length = 0;
    char small[4];
    CHECK_EQ(sync_distributed_lock_canonical(target, small, sizeof small, &length), ERANGE);
    CHECK_EQ(length, strlen(sub) + strlen("/x.lock"));
    CHECK_EQ(sync_distributed_lock_canonical(target, NULL, 0, NULL), ERANGE);
    const char *names_no_file[] = {"", "/", ".", "a/..", "a/.", "a/b/../"};
    for (size_t i = 0; i < sizeof names_no_file / sizeof *names_no_file; i++)
        CHECK_EQ(sync_distributed_lock_canonical(names_no_file[i], expected, sizeof expected, &length), EINVAL);
    CHECK_EQ(sync_distributed_lock_canonical(NULL, expected, sizeof expected, &length), EINVAL);
    CHECK_EQ(sync_distributed_lock_canonical("/tmp/\xff.lock", expected, sizeof expected, &length), EINVAL);
    CHECK_EQ(unlink(link), 0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/libsync-dlock-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/resource.lock", dir);
    test_layout();
    test_bad_paths();
    test_basics_and_holder();
    test_unlock_errors();
    test_acquire_after_a_lost_hold();
    test_lock_cancellable();
    test_target_rules();
    test_busy_timeout_and_interrupt();
    test_killed_holder_is_stale_and_recovered();
    test_racing_breakers();
    test_mutual_exclusion_between_processes();
    test_bad_options();
    test_impossible_disk_states();
    test_take_over_filelock_file();
    test_parents_removal_and_mode();
    test_threads_share_one_object();
    test_owner_recursion_and_deadlock();
    test_waiting_thread_sleeps_until_released();
    test_fork_child_never_holds();
    test_fork_during_operations();
    test_long_paths();
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK_EQ(system(command), 0);
    DONE();
}
