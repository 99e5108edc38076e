/* The read-write lock's upgradable read, and os_unfair_lock, used as an adversarial caller would:
 * every hold's misuse from another thread, timeouts at their edges (zero, negative, huge), 8 to
 * 64 threads checking exclusion and the upgrade's atomicity, and processes (each this program
 * exec'd again, the lock in a memfd it inherits) that are killed while they hold the upgradable
 * read or while they upgrade, stopped while others wait with timeouts, or that misuse an
 * os_unfair_lock (the program stops, with Apple's message). A watchdog turns a hang into a
 * failure with a message. */
#define _GNU_SOURCE
#include "check.h"
#include "test_support.h"
#include <errno.h>
#include <os/lock.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sync.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND 1000000000ull
#define MS 1000000ull

extern char **environ;

static int upgrading(sync_rwlock_t *rw) { return (__atomic_load_n(&rw->_state, __ATOMIC_SEQ_CST) >> 26) & 1; }
static int readers_held(sync_rwlock_t *rw) { return (int)(__atomic_load_n(&rw->_state, __ATOMIC_SEQ_CST) & ((1u << 26) - 1)); }

/* ---- Everything the threads and processes of a test share --------------------------------- */

struct shared {
    sync_rwlock_t rw;
    atomic_int step, go, readers, upgradables, writers, failures, done;
    long value;
};

static int shm_fd = -1;
static struct shared *new_shared(int flags) {
    if (shm_fd < 0) {
        shm_fd = memfd_create("rwlock_adversarial", 0);  /* no CLOEXEC: exec'd children inherit it */
        CHECK(shm_fd >= 0);
        CHECK_EQ(ftruncate(shm_fd, sizeof(struct shared)), 0);
    }
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
    CHECK(s != MAP_FAILED);
    memset(s, 0, sizeof *s);
    CHECK_EQ(sync_rwlock_init(&s->rw, flags), 0);
    return s;
}

static char self[4096];

/* Runs this program again as `role` (it maps the memfd); stderr into `err_fd` if >= 0. */
static pid_t spawn_role(const char *role, const char *arg, int err_fd) {
    char fd[16];
    snprintf(fd, sizeof fd, "%d", shm_fd);
    char *argv[] = {self, (char *)"child", (char *)role, fd, (char *)(arg ? arg : "0"), NULL};
    posix_spawn_file_actions_t actions;
    CHECK_EQ(posix_spawn_file_actions_init(&actions), 0);
    if (err_fd >= 0) CHECK_EQ(posix_spawn_file_actions_adddup2(&actions, err_fd, 2), 0);
    pid_t pid;
    CHECK_EQ(posix_spawn(&pid, self, &actions, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    return pid;
}

static int reap(pid_t pid) {
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

/* ---- Misuse of every hold, from the holder and from other threads -------------------------- */

static sync_rwlock_t misuse = SYNC_RWLOCK_INIT;

static void *not_the_writer(void *arg) {
    (void)arg;  /* the main thread holds the write lock */
    int ok = sync_rwlock_wrunlock(&misuse) == EPERM && sync_rwlock_downgrade(&misuse) == EPERM
        && sync_rwlock_downgrade_to_uprd(&misuse) == EPERM && sync_rwlock_upgrade(&misuse) == EDEADLK
        && sync_rwlock_try_upgrade(&misuse) == EDEADLK && sync_rwlock_uprdunlock(&misuse) == EPERM
        && sync_rwlock_uprd_downgrade(&misuse) == EPERM && sync_rwlock_rdunlock(&misuse) == EPERM
        && sync_rwlock_uprdlock_timed(&misuse, 0) == ETIMEDOUT && sync_rwlock_rdlock_timed(&misuse, 0) == ETIMEDOUT
        && sync_rwlock_wrlock_timed(&misuse, 0) == ETIMEDOUT;
    return (void *)(intptr_t)!ok;
}

static void *not_the_upgradable(void *arg) {
    (void)arg;  /* the main thread holds the upgradable read, and a plain read */
    int ok = sync_rwlock_uprdunlock(&misuse) == EPERM && sync_rwlock_uprd_downgrade(&misuse) == EPERM
        && sync_rwlock_upgrade(&misuse) == EDEADLK && sync_rwlock_upgrade_until(&misuse, -1) == EDEADLK
        && sync_rwlock_upgrade_interruptible(&misuse, -1) == EDEADLK
        && sync_rwlock_downgrade_to_uprd(&misuse) == EPERM && sync_rwlock_wrunlock(&misuse) == EPERM;
    /* this thread's rdunlock releases the main thread's plain read (readers are not tracked) */
    return (void *)(intptr_t)!ok;
}

static void run_thread(void *(*body)(void *)) {
    pthread_t t;
    void *failed;
    CHECK_EQ(pthread_create(&t, NULL, body, NULL), 0);
    CHECK_EQ(pthread_join(t, &failed), 0);
    CHECK(failed == NULL);
}

static void test_misuse(void) {
    alarm(60);
    CHECK_EQ(sync_rwlock_wrlock(&misuse), 0);
    run_thread(not_the_writer);
    CHECK_EQ(sync_rwlock_uprd_downgrade(&misuse), EPERM);   /* the writer is no upgradable reader */
    CHECK_EQ(sync_rwlock_uprdunlock(&misuse), EPERM);
    CHECK_EQ(sync_rwlock_upgrade(&misuse), EDEADLK);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&misuse), 0);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&misuse), EPERM);  /* twice */
    CHECK_EQ(sync_rwlock_downgrade(&misuse), EPERM);          /* the upgradable reader is no writer */
    CHECK_EQ(sync_rwlock_wrunlock(&misuse), EPERM);
    CHECK_EQ(sync_rwlock_rdlock(&misuse), 0);                 /* its own plain read beside */
    run_thread(not_the_upgradable);
    CHECK_EQ(sync_rwlock_try_upgrade(&misuse), EBUSY);         /* its own plain read: it keeps the hold */
    CHECK_EQ(sync_rwlock_upgrade_until(&misuse, 0), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_upgrade_until(&misuse, now_ns() + (int64_t)MS), ETIMEDOUT);
    CHECK_EQ(upgrading(&misuse), 0);                          /* a given-up upgrade leaves no mark */
    CHECK_EQ(sync_rwlock_rdunlock(&misuse), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&misuse), EPERM);           /* the upgradable read is no plain one */
    CHECK_EQ(sync_rwlock_upgrade_until(&misuse, 0), 0);       /* now at once, even past its deadline */
    CHECK_EQ(sync_rwlock_upgrade(&misuse), EDEADLK);          /* a second upgrade */
    CHECK_EQ(sync_rwlock_upgrade_timed(&misuse, UINT64_MAX), EDEADLK);
    CHECK_EQ(sync_rwlock_downgrade(&misuse), 0);
    CHECK_EQ(sync_rwlock_upgrade(&misuse), EDEADLK);          /* from a plain read */
    CHECK_EQ(sync_rwlock_upgrade_timed(&misuse, MS), EDEADLK);
    CHECK_EQ(sync_rwlock_uprdunlock(&misuse), EPERM);
    CHECK_EQ(sync_rwlock_rdunlock(&misuse), 0);
    CHECK_EQ(misuse._state, 0u);
    CHECK_EQ(misuse._writer, 0u);
    alarm(0);
}

/* The upgradable reader's own read lock while a writer waits for it: EDEADLK (that writer waits
 * for it), its try EBUSY; a downgrade refused for too many readers (EAGAIN) changes nothing and
 * leaves it the upgradable reader, private and process-shared. */
static sync_rwlock_t behind = SYNC_RWLOCK_INIT;
static void *writer_behind(void *arg) {
    (void)arg;
    int code = sync_rwlock_wrlock(&behind);
    if (code == 0) code = sync_rwlock_wrunlock(&behind);
    return (void *)(intptr_t)code;
}

static void test_upgradable_reader_edges(void) {
    alarm(60);
    CHECK_EQ(sync_rwlock_uprdlock(&behind), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, writer_behind, NULL), 0);
    WAIT_UNTIL(sync_rwlock_waiting_writers(&behind) == 1 && (__atomic_load_n(&behind._state, __ATOMIC_SEQ_CST) & (1u << 29)));
    CHECK_EQ(sync_rwlock_rdlock(&behind), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock_timed(&behind, SECOND), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock_until(&behind, -1), EDEADLK);
    CHECK_EQ(sync_rwlock_try_rdlock(&behind), EBUSY);
    CHECK_EQ(sync_rwlock_uprdlock(&behind), EDEADLK);
    CHECK_EQ(sync_rwlock_wrlock(&behind), EDEADLK);
    CHECK_EQ(sync_rwlock_upgrade(&behind), 0);                /* ahead of the waiting writer */
    CHECK_EQ(sync_rwlock_wrunlock(&behind), 0);
    void *code;
    CHECK_EQ(pthread_join(t, &code), 0);
    CHECK_EQ((int)(intptr_t)code, 0);
    CHECK_EQ(behind._state, 0u);

    for (int shared = 0; shared < 2; shared++) {
        sync_rwlock_t l = SYNC_RWLOCK_INIT;
        CHECK_EQ(sync_rwlock_init(&l, shared ? SYNC_RWLOCK_SHARED : 0), 0);
        CHECK_EQ(sync_rwlock_uprdlock(&l), 0);
        l._state += (1u << 26) - 2;                          /* as if 2^26-2 readers held it beside */
        CHECK_EQ(sync_rwlock_try_rdlock(&l), 0);              /* the last read lock there is room for */
        uint32_t full = l._state, owner = l._writer;
        CHECK_EQ(sync_rwlock_try_rdlock(&l), EAGAIN);
        CHECK_EQ(sync_rwlock_uprd_downgrade(&l), EAGAIN);
        CHECK_EQ(l._state, full);
        CHECK_EQ(l._writer, owner);
        CHECK_EQ(sync_rwlock_rdunlock(&l), 0);               /* room for one now */
        CHECK_EQ(sync_rwlock_uprd_downgrade(&l), 0);         /* it was still the upgradable reader */
        CHECK_EQ(sync_rwlock_uprdunlock(&l), EPERM);
        CHECK_EQ(l._state & ((1u << 26) - 1), (1u << 26) - 1);  /* full again, now plain readers */
        l._state = shared ? 0x80000000u : 0;                 /* the readers that never were */
    }
    alarm(0);
}

/* ---- Timeouts at their edges ---------------------------------------------------------------- */

static sync_rwlock_t timed = SYNC_RWLOCK_INIT;
static atomic_int timed_step;

static void *timed_reader(void *arg) {
    (void)arg;  /* holds a plain read until told, then leaves */
    if (sync_rwlock_rdlock(&timed)) return (void *)1;
    atomic_store(&timed_step, 1);
    while (atomic_load(&timed_step) < 2) usleep(1000);
    return (void *)(intptr_t)(sync_rwlock_rdunlock(&timed) != 0);
}

static void *timed_upgradable(void *arg) {
    /* holds the upgradable read until told, then releases */
    (void)arg;
    if (sync_rwlock_uprdlock(&timed)) return (void *)1;
    atomic_store(&timed_step, 1);
    while (atomic_load(&timed_step) < 2) usleep(1000);
    return (void *)(intptr_t)(sync_rwlock_uprdunlock(&timed) != 0);
}

/* Waits in `wait` (any form whose deadline is none or huge) until the other thread leaves. */
static void leaves_then(void *(*holder)(void *), int (*wait)(void), int setup_upgradable, const char *name) {
    pthread_t t;
    void *failed;
    atomic_store(&timed_step, 0);
    if (setup_upgradable) CHECK_EQ(sync_rwlock_uprdlock(&timed), 0);
    CHECK_EQ(pthread_create(&t, NULL, holder, NULL), 0);
    WAIT_UNTIL(atomic_load(&timed_step) == 1);
    atomic_store(&timed_step, 2);      /* the wait below ends when it leaves, whenever that is */
    int code = wait();
    if (code) fprintf(stderr, "%s: %d\n", name, code);
    CHECK_EQ(code, 0);
    CHECK_EQ(pthread_join(t, &failed), 0);
    CHECK(failed == NULL);
}

static int upgrade_huge(void) { int c = sync_rwlock_upgrade_timed(&timed, UINT64_MAX); return c ? c : sync_rwlock_wrunlock(&timed) ? 1000 : 0; }
static int upgrade_until_max(void) { int c = sync_rwlock_upgrade_until(&timed, INT64_MAX); return c ? c : sync_rwlock_wrunlock(&timed) ? 1000 : 0; }
static int upgrade_until_negative(void) { int c = sync_rwlock_upgrade_until(&timed, INT64_MIN); return c ? c : sync_rwlock_wrunlock(&timed) ? 1000 : 0; }
static int upgrade_interruptible_none(void) {
    /* EINTR at least every 50 ms in the main thread (sync/locks.h), the upgradable read kept: again */
    int c;
    do c = sync_rwlock_upgrade_interruptible(&timed, -7); while (c == EINTR);
    return c ? c : sync_rwlock_wrunlock(&timed) ? 1000 : 0;
}
static int uprd_huge(void) { int c = sync_rwlock_uprdlock_timed(&timed, UINT64_MAX); return c ? c : sync_rwlock_uprdunlock(&timed) ? 1000 : 0; }
static int uprd_until_negative(void) { int c = sync_rwlock_uprdlock_until(&timed, -1); return c ? c : sync_rwlock_uprdunlock(&timed) ? 1000 : 0; }
static int uprd_until_max(void) { int c = sync_rwlock_uprdlock_until(&timed, INT64_MAX); return c ? c : sync_rwlock_uprdunlock(&timed) ? 1000 : 0; }

static void test_timeouts(void) {
    alarm(60);
    /* zero: one try, also when the lock is free */
    CHECK_EQ(sync_rwlock_uprdlock_timed(&timed, 0), 0);
    CHECK_EQ(sync_rwlock_upgrade_timed(&timed, 0), 0);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&timed), 0);
    CHECK_EQ(sync_rwlock_uprdunlock(&timed), 0);
    CHECK_EQ(sync_rwlock_uprdlock_until(&timed, 0), 0);
    CHECK_EQ(sync_rwlock_uprdunlock(&timed), 0);
    CHECK_EQ(sync_rwlock_uprdlock_until(&timed, 1), 0);       /* a deadline long gone: one try */
    CHECK_EQ(sync_rwlock_upgrade_until(&timed, 1), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&timed), 0);
    /* zero while blocked: ETIMEDOUT, nothing left behind */
    CHECK_EQ(sync_rwlock_rdlock(&timed), 0);
    CHECK_EQ(sync_rwlock_uprdlock(&timed), 0);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(sync_rwlock_upgrade_timed(&timed, 0), ETIMEDOUT);
        CHECK_EQ(sync_rwlock_upgrade_until(&timed, 1), ETIMEDOUT);
        CHECK_EQ(sync_rwlock_upgrade_interruptible(&timed, 0), ETIMEDOUT);
        CHECK_EQ(sync_rwlock_try_upgrade(&timed), EBUSY);
    }
    CHECK_EQ(upgrading(&timed), 0);
    CHECK_EQ(sync_rwlock_try_rdlock(&timed), 0);               /* readers still get in */
    CHECK_EQ(sync_rwlock_rdunlock(&timed), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&timed), 0);
    CHECK_EQ(sync_rwlock_uprdunlock(&timed), 0);
    CHECK_EQ(timed._state, 0u);
    /* none (negative) and huge: they wait until the other leaves, and succeed */
    leaves_then(timed_reader, upgrade_huge, 1, "upgrade_huge");
    leaves_then(timed_reader, upgrade_until_max, 1, "upgrade_until_max");
    leaves_then(timed_reader, upgrade_until_negative, 1, "upgrade_until_negative");
    leaves_then(timed_reader, upgrade_interruptible_none, 1, "upgrade_interruptible_none");
    leaves_then(timed_upgradable, uprd_huge, 0, "uprd_huge");
    leaves_then(timed_upgradable, uprd_until_negative, 0, "uprd_until_negative");
    leaves_then(timed_upgradable, uprd_until_max, 0, "uprd_until_max");
    CHECK_EQ(timed._state, 0u);
    CHECK_EQ(timed._writer, 0u);
    alarm(0);
}

/* ---- Many threads (private or, across processes, shared) ----------------------------------- */

struct stress_args { struct shared *s; unsigned seed; int rounds; };

#define FAIL(s) atomic_fetch_add(&(s)->failures, 1)

static void *stress_worker(void *arg) {
    struct stress_args *a = arg;
    struct shared *s = a->s;
    unsigned seed = a->seed;
    for (int i = 0; i < a->rounds; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned kind = (seed >> 16) % 20, form = (seed >> 8) % 3;
        int code;
        if (kind < 10) {  /* plain reader */
            code = form == 0 ? sync_rwlock_rdlock(&s->rw) : form == 1 ? sync_rwlock_rdlock_timed(&s->rw, MS)
                                                                      : sync_rwlock_try_rdlock(&s->rw);
            if (code == ETIMEDOUT || code == EBUSY) continue;
            if (code) { FAIL(s); continue; }
            atomic_fetch_add(&s->readers, 1);
            if (atomic_load(&s->writers)) FAIL(s);
            atomic_fetch_sub(&s->readers, 1);
            if (sync_rwlock_rdunlock(&s->rw)) FAIL(s);
        } else if (kind < 17) {  /* upgradable reader: read, upgrade, write what it read + 1 */
            code = form == 0 ? sync_rwlock_uprdlock(&s->rw) : form == 1 ? sync_rwlock_uprdlock_timed(&s->rw, MS)
                                                                        : sync_rwlock_try_uprdlock(&s->rw);
            if (code == ETIMEDOUT || code == EBUSY) continue;
            if (code) { FAIL(s); continue; }
            if (atomic_fetch_add(&s->upgradables, 1) || atomic_load(&s->writers)) FAIL(s);
            long seen = __atomic_load_n(&s->value, __ATOMIC_RELAXED);
            atomic_fetch_sub(&s->upgradables, 1);
            if (kind == 10) {  /* changes its mind */
                if (sync_rwlock_uprdunlock(&s->rw)) FAIL(s);
                continue;
            }
            if (kind == 11) {  /* becomes a plain reader */
                if (sync_rwlock_uprd_downgrade(&s->rw)) FAIL(s);
                atomic_fetch_add(&s->readers, 1);
                if (atomic_load(&s->writers)) FAIL(s);
                atomic_fetch_sub(&s->readers, 1);
                if (sync_rwlock_rdunlock(&s->rw)) FAIL(s);
                continue;
            }
            code = kind == 12 ? sync_rwlock_try_upgrade(&s->rw) : kind == 13 ? sync_rwlock_upgrade_timed(&s->rw, MS)
                                                                             : sync_rwlock_upgrade(&s->rw);
            if (code == EBUSY || code == ETIMEDOUT) {  /* kept the upgradable read */
                if (atomic_fetch_add(&s->upgradables, 1) || atomic_load(&s->writers)) FAIL(s);
                if (__atomic_load_n(&s->value, __ATOMIC_RELAXED) != seen) FAIL(s);
                atomic_fetch_sub(&s->upgradables, 1);
                if (sync_rwlock_uprdunlock(&s->rw)) FAIL(s);
                continue;
            }
            if (code) { FAIL(s); continue; }
            if (atomic_fetch_add(&s->writers, 1) || atomic_load(&s->readers) || atomic_load(&s->upgradables)) FAIL(s);
            if (__atomic_load_n(&s->value, __ATOMIC_RELAXED) != seen) FAIL(s);  /* atomic upgrade */
            __atomic_store_n(&s->value, seen + 1, __ATOMIC_RELAXED);
            atomic_fetch_sub(&s->writers, 1);
            if (kind == 15) {  /* down to the upgradable read, up again */
                if (sync_rwlock_downgrade_to_uprd(&s->rw)) FAIL(s);
                if (__atomic_load_n(&s->value, __ATOMIC_RELAXED) != seen + 1) FAIL(s);
                if (sync_rwlock_upgrade(&s->rw)) FAIL(s);
                if (__atomic_load_n(&s->value, __ATOMIC_RELAXED) != seen + 1) FAIL(s);
            }
            if (kind == 16) {
                if (sync_rwlock_downgrade(&s->rw)) FAIL(s);
                if (sync_rwlock_rdunlock(&s->rw)) FAIL(s);
            } else if (sync_rwlock_wrunlock(&s->rw)) {
                FAIL(s);
            }
        } else {  /* writer */
            code = form == 0 ? sync_rwlock_wrlock(&s->rw) : form == 1 ? sync_rwlock_wrlock_timed(&s->rw, MS)
                                                                      : sync_rwlock_try_wrlock(&s->rw);
            if (code == ETIMEDOUT || code == EBUSY) continue;
            if (code) { FAIL(s); continue; }
            if (atomic_fetch_add(&s->writers, 1) || atomic_load(&s->readers) || atomic_load(&s->upgradables)) FAIL(s);
            __atomic_store_n(&s->value, __atomic_load_n(&s->value, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
            atomic_fetch_sub(&s->writers, 1);
            if (sync_rwlock_wrunlock(&s->rw)) FAIL(s);
        }
    }
    return NULL;
}

static void run_stress(struct shared *s, int threads, int rounds, unsigned seed) {
    pthread_t t[64];
    struct stress_args a[64];
    for (int i = 0; i < threads; i++) {
        a[i] = (struct stress_args){s, seed + (unsigned)i * 7919u, rounds};
        CHECK_EQ(pthread_create(&t[i], NULL, stress_worker, &a[i]), 0);
    }
    for (int i = 0; i < threads; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
}

static void test_many_threads(void) {
    static const int counts[] = {8, 32, 64};
    for (int i = 0; i < 3; i++) {
        alarm(300);
        struct shared *s = new_shared(0);
        run_stress(s, counts[i], 96000 / counts[i], 1u + (unsigned)i);
        CHECK(s->value > 0);
        CHECK_EQ(atomic_load(&s->failures), 0);
        CHECK_EQ(s->rw._state, 0u);
        CHECK_EQ(s->rw._writer, 0u);
        munmap(s, sizeof *s);
    }
    alarm(0);
}

/* Four exec'd processes of 8 threads each on one shared lock. */
static void test_many_processes(void) {
    alarm(300);
    struct shared *s = new_shared(SYNC_RWLOCK_SHARED);
    pid_t pids[4];
    char seed[16];
    for (int i = 0; i < 4; i++) {
        snprintf(seed, sizeof seed, "%d", 100 + i);
        pids[i] = spawn_role("stress", seed, -1);
    }
    for (int i = 0; i < 4; i++) {
        int status = reap(pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK_EQ(atomic_load(&s->failures), 0);
    CHECK_EQ(s->rw._state, 0x80000000u);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- Killed holders (sync/locks.h: "A process that dies holding it leaves it held, as a
 * writer does"; waiters that die leave nothing that blocks others for long) ------------------ */

static void test_killed_upgradable_holder(void) {
    alarm(60);
    struct shared *s = new_shared(SYNC_RWLOCK_SHARED);
    pid_t child = spawn_role("hold", NULL, -1);
    WAIT_UNTIL(atomic_load(&s->step) == 1);
    /* a waiter in another process, parked behind it, then killed too */
    pid_t waiter = spawn_role("wait-upgradable", NULL, -1);
    WAIT_UNTIL(atomic_load(&s->step) == 2);
    CHECK_EQ(kill(waiter, SIGKILL), 0);
    CHECK(WIFSIGNALED(reap(waiter)));
    CHECK_EQ(kill(child, SIGKILL), 0);
    CHECK(WIFSIGNALED(reap(child)));
    /* as documented: still held; nobody gets the upgradable read or the write lock, nobody hangs */
    CHECK_EQ(sync_rwlock_uprdlock_timed(&s->rw, 20 * MS), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_wrlock_timed(&s->rw, 20 * MS), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_waiting_writers(&s->rw), 0u);        /* the timed writer withdrew */
    CHECK_EQ(sync_rwlock_uprdunlock(&s->rw), EPERM);          /* not the dead one's heir */
    CHECK_EQ(sync_rwlock_upgrade(&s->rw), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock_timed(&s->rw, 20 * MS), 0);    /* plain readers beside it, as before */
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_init(&s->rw, SYNC_RWLOCK_SHARED), EBUSY);
    munmap(s, sizeof *s);
    alarm(0);
}

static void test_killed_mid_upgrade(void) {
    alarm(60);
    struct shared *s = new_shared(SYNC_RWLOCK_SHARED);
    CHECK_EQ(sync_rwlock_rdlock(&s->rw), 0);                  /* keeps the child's upgrade waiting */
    pid_t child = spawn_role("upgrade", NULL, -1);
    WAIT_UNTIL(atomic_load(&s->step) == 1 && upgrading(&s->rw));
    CHECK_EQ(kill(child, SIGKILL), 0);
    CHECK(WIFSIGNALED(reap(child)));
    CHECK_EQ(atomic_load(&s->step), 1);                       /* it never got the write lock */
    /* the dead upgrade still holds it: new readers wait behind it (and time out) */
    CHECK_EQ(sync_rwlock_rdlock_timed(&s->rw, 20 * MS), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_try_rdlock(&s->rw), EBUSY);
    CHECK_EQ(sync_rwlock_uprdlock_timed(&s->rw, 20 * MS), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_wrlock_timed(&s->rw, 20 * MS), ETIMEDOUT);
    CHECK_EQ(readers_held(&s->rw), 1);
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);                /* the reader it waited for leaves */
    CHECK_EQ(readers_held(&s->rw), 0);
    CHECK_EQ(sync_rwlock_wrlock_timed(&s->rw, 20 * MS), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), EPERM);
    CHECK_EQ(sync_rwlock_init(&s->rw, SYNC_RWLOCK_SHARED), EBUSY);
    munmap(s, sizeof *s);
    alarm(0);
}

/* A writer killed while it waits behind a live upgradable reader leaves its mark, which stops new
 * readers; sync/locks.h promises that readers' slices withdraw a dead writer's mark: the plain
 * readers get in beside the upgradable reader, which can still upgrade and release. */
static void *reader_beside(void *arg) {
    struct shared *s = arg;
    int code = sync_rwlock_rdlock_timed(&s->rw, 60 * SECOND);  /* a guard against a hang */
    if (code == 0) code = sync_rwlock_rdunlock(&s->rw);
    return (void *)(intptr_t)code;
}

static void test_killed_writer_behind_upgradable(void) {
    alarm(120);
    struct shared *s = new_shared(SYNC_RWLOCK_SHARED);
    CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);
    pid_t writer = spawn_role("wait-write", NULL, -1);
    WAIT_UNTIL(sync_rwlock_waiting_writers(&s->rw) == 1 && (__atomic_load_n(&s->rw._state, __ATOMIC_SEQ_CST) & (1u << 29)));
    CHECK_EQ(kill(writer, SIGKILL), 0);
    CHECK(WIFSIGNALED(reap(writer)));
    pthread_t t;
    void *code;
    CHECK_EQ(pthread_create(&t, NULL, reader_beside, s), 0);
    CHECK_EQ(pthread_join(t, &code), 0);
    CHECK_EQ((int)(intptr_t)code, 0);
    CHECK_EQ(sync_rwlock_upgrade(&s->rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&s->rw), 0);               /* no mark left behind */
    CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
    munmap(s, sizeof *s);
    alarm(0);
}

/* SIGSTOP of a process mid-upgrade (it waits for this process's read): the others' timed waits
 * time out behind it; the read released and the process continued, its upgrade completes. */
static void *timed_behind_upgrade(void *arg) {
    struct shared *s = arg;
    int rd = sync_rwlock_rdlock_timed(&s->rw, 30 * MS), up = sync_rwlock_uprdlock_timed(&s->rw, 30 * MS);
    int wr = sync_rwlock_wrlock_timed(&s->rw, 30 * MS);
    return (void *)(intptr_t)(rd != ETIMEDOUT || up != ETIMEDOUT || wr != ETIMEDOUT);
}

static void test_stopped_mid_upgrade(void) {
    alarm(120);
    struct shared *s = new_shared(SYNC_RWLOCK_SHARED);
    CHECK_EQ(sync_rwlock_rdlock(&s->rw), 0);
    pid_t child = spawn_role("upgrade-and-write", NULL, -1);
    WAIT_UNTIL(atomic_load(&s->step) == 1 && upgrading(&s->rw));
    CHECK_EQ(kill(child, SIGSTOP), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_create(&t[i], NULL, timed_behind_upgrade, s), 0);
    for (int i = 0; i < 4; i++) {
        void *failed;
        CHECK_EQ(pthread_join(t[i], &failed), 0);
        CHECK(failed == NULL);
    }
    CHECK_EQ(sync_rwlock_waiting_writers(&s->rw), 0u);
    CHECK(upgrading(&s->rw));                                 /* the stopped upgrade still waits */
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);                /* wakes a stopped process */
    CHECK_EQ(kill(child, SIGCONT), 0);
    int status = reap(child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(s->value, 1);
    CHECK_EQ(s->rw._state, 0x80000000u);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- A stopped holder: the others time out, nothing is corrupted ---------------------------- */

static void *timed_waiter(void *arg) {
    struct shared *s = arg;
    int up = sync_rwlock_uprdlock_timed(&s->rw, 50 * MS);
    int wr = sync_rwlock_wrlock_timed(&s->rw, 50 * MS);
    int rd = sync_rwlock_rdlock_timed(&s->rw, SECOND * 30);    /* beside the upgradable read */
    if (rd == 0) rd = sync_rwlock_rdunlock(&s->rw);
    return (void *)(intptr_t)(up != ETIMEDOUT || wr != ETIMEDOUT || rd != 0);
}

static void test_stopped_holder(void) {
    alarm(120);
    struct shared *s = new_shared(SYNC_RWLOCK_SHARED);
    pid_t child = spawn_role("stopped", NULL, -1);
    WAIT_UNTIL(atomic_load(&s->step) == 1);
    CHECK_EQ(kill(child, SIGSTOP), 0);
    pthread_t t[8];
    for (int i = 0; i < 8; i++) CHECK_EQ(pthread_create(&t[i], NULL, timed_waiter, s), 0);
    for (int i = 0; i < 8; i++) {
        void *failed;
        CHECK_EQ(pthread_join(t[i], &failed), 0);
        CHECK(failed == NULL);
    }
    CHECK_EQ(sync_rwlock_waiting_writers(&s->rw), 0u);
    CHECK_EQ(sync_rwlock_try_rdlock(&s->rw), 0);               /* no mark left: readers get in */
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);
    atomic_store(&s->go, 1);
    CHECK_EQ(kill(child, SIGCONT), 0);
    int status = reap(child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(s->value, 1);
    CHECK_EQ(s->rw._state, 0x80000000u);
    CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_upgrade(&s->rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- os_unfair_lock misuse in an exec'd child: it stops with Apple's message --------------- */

static void expect_unfair_stop(const char *role, const char *message) {
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    pid_t pid = spawn_role(role, NULL, pipefd[1]);
    close(pipefd[1]);
    char err[8192];
    size_t got = 0;
    ssize_t n;
    char sink[4096];
    while ((n = got + 1 < sizeof err ? read(pipefd[0], err + got, sizeof err - 1 - got)
                                     : read(pipefd[0], sink, sizeof sink)) > 0)
        if (got + 1 < sizeof err) got += (size_t)n;
    err[got] = 0;
    close(pipefd[0]);
    int status = reap(pid);
    if (!WIFSIGNALED(status) || strstr(err, message) == NULL || strstr(err, "BUG IN CLIENT OF LIBSYNC") == NULL) {
        fprintf(stderr, "%s: expected a stop with \"%s\"; status %#x, stderr:\n%s\n", role, message, status, err);
        exit(1);
    }
    CHECK_PASSED();
}

static void test_unfair_misuse(void) {
    alarm(120);
    expect_unfair_stop("unfair-unlock-others", "Unlock of an os_unfair_lock not owned by current thread");
    expect_unfair_stop("unfair-unlock-twice", "Unlock of an os_unfair_lock not owned by current thread");
    expect_unfair_stop("unfair-relock", "Trying to recursively lock an os_unfair_lock");
    expect_unfair_stop("unfair-assert-owner", "Lock unexpectedly not owned by current thread");
    expect_unfair_stop("unfair-assert-not-owner", "Lock unexpectedly owned by current thread");
    expect_unfair_stop("unfair-unlock-dead", "Unlock of an os_unfair_lock not owned by current thread");
    alarm(0);
}

/* ---- The exec'd children ------------------------------------------------------------------- */

static os_unfair_lock unfair = {0};  /* not OS_UNFAIR_LOCK_INIT: GCC -Wpedantic rejects a static compound literal (lock.h) */
static atomic_int unfair_state;

static void *unfair_holder(void *arg) {
    (void)arg;
    os_unfair_lock_lock(&unfair);
    atomic_store(&unfair_state, 1);
    while (atomic_load(&unfair_state) != 2) usleep(1000);
    return NULL;  /* (exits holding it for "unfair-unlock-dead") */
}

static int unfair_child(const char *role) {
    pthread_t t;
    if (!strcmp(role, "unfair-unlock-others") || !strcmp(role, "unfair-assert-owner")
        || !strcmp(role, "unfair-unlock-dead")) {
        CHECK_EQ(pthread_create(&t, NULL, unfair_holder, NULL), 0);
        WAIT_UNTIL(atomic_load(&unfair_state) == 1);
        if (!strcmp(role, "unfair-unlock-dead")) {
            atomic_store(&unfair_state, 2);
            CHECK_EQ(pthread_join(t, NULL), 0);
        }
        if (os_unfair_lock_trylock(&unfair)) return 21;  /* false: held by the other; no stop */
        if (!strcmp(role, "unfair-assert-owner")) os_unfair_lock_assert_owner(&unfair);
        else os_unfair_lock_unlock(&unfair);
    } else if (!strcmp(role, "unfair-unlock-twice")) {
        os_unfair_lock_lock(&unfair);
        os_unfair_lock_unlock(&unfair);
        os_unfair_lock_unlock(&unfair);
    } else if (!strcmp(role, "unfair-relock")) {
        os_unfair_lock_lock(&unfair);
        if (os_unfair_lock_trylock(&unfair)) return 20;  /* the holder's trylock: false, no stop */
        os_unfair_lock_lock(&unfair);
    } else if (!strcmp(role, "unfair-assert-not-owner")) {
        os_unfair_lock_assert_not_owner(&unfair);
        os_unfair_lock_lock(&unfair);
        os_unfair_lock_assert_not_owner(&unfair);
    }
    return 10;  /* the misuse did not stop the program */
}

static int child_main(const char *role, int fd, const char *arg) {
    alarm(120);
    if (!strncmp(role, "unfair-", 7)) return unfair_child(role);
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(s != MAP_FAILED);
    if (!strcmp(role, "stress")) {
        run_stress(s, 8, 6000, (unsigned)atoi(arg));
        return 0;
    }
    if (!strcmp(role, "hold")) {              /* holds the upgradable read until killed */
        CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);
        atomic_store(&s->step, 1);
        for (;;) pause();
    }
    if (!strcmp(role, "wait-upgradable")) {   /* waits behind the holder until killed */
        atomic_store(&s->step, 2);
        sync_rwlock_uprdlock(&s->rw);
        return 11;
    }
    if (!strcmp(role, "upgrade")) {           /* upgrades, waiting for the parent's read: killed */
        CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);
        atomic_store(&s->step, 1);
        int code = sync_rwlock_upgrade(&s->rw);
        atomic_store(&s->step, 2);
        return 12 + code;
    }
    if (!strcmp(role, "wait-write")) {        /* waits behind the parent's upgradable read: killed */
        return 13 + sync_rwlock_wrlock(&s->rw);
    }
    if (!strcmp(role, "upgrade-and-write")) { /* upgrades behind the parent's read, is stopped, writes */
        CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);
        atomic_store(&s->step, 1);
        long seen = s->value;
        CHECK_EQ(sync_rwlock_upgrade(&s->rw), 0);
        s->value = seen + 1;
        CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
        return 0;
    }
    if (!strcmp(role, "stopped")) {           /* holds, is stopped, then upgrades and writes */
        CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);
        atomic_store(&s->step, 1);
        WAIT_UNTIL(atomic_load(&s->go));
        long seen = s->value;
        CHECK_EQ(sync_rwlock_upgrade(&s->rw), 0);
        s->value = seen + 1;
        CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
        return 0;
    }
    return 99;
}

int main(int argc, char **argv) {
    watchdog_install("test_rwlock_adversarial: watchdog: a test hung\n");
    if (argc >= 5 && !strcmp(argv[1], "child")) return child_main(argv[2], atoi(argv[3]), argv[4]);
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = 0;
    test_misuse();
    test_upgradable_reader_edges();
    test_timeouts();
    test_unfair_misuse();
    test_killed_upgradable_holder();
    test_killed_mid_upgrade();
    test_stopped_holder();
    test_killed_writer_behind_upgradable();
    test_stopped_mid_upgrade();
    test_many_threads();
    test_many_processes();
    DONE();
}
