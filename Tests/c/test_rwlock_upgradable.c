/* The read-write lock's upgradable read: who may hold it beside whom, the return codes of every
 * call from every hold, an upgrade that no waiting writer gets in front of, downgrades, timed
 * and try forms, and the same across processes in shared memory. A watchdog turns a hang into
 * a failure with a message. */
#define _GNU_SOURCE
#include "check.h"
#include "test_support.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sync.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND 1000000000ull
#define MS 1000000ull

/* Everything the threads or processes of one test share (MAP_SHARED: forked children too). */
struct shared {
    sync_rwlock_t rw;
    atomic_int step, writer_in, reader_in, second_in, value, upgrader_saw;
    atomic_int result;
};

static struct shared *new_shared(int flags) {
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(s != MAP_FAILED);
    memset(s, 0, sizeof *s);
    CHECK_EQ(sync_rwlock_init(&s->rw, flags), 0);
    return s;
}

/* Runs `body(arg)` in a new thread (process == 0) or a forked process; returns a handle for join. */
typedef struct { pthread_t thread; pid_t pid; } runner;

static runner start(int process, void *(*body)(void *), void *arg) {
    runner r = {0, 0};
    if (process) {
        r.pid = fork();
        CHECK(r.pid >= 0);
        if (r.pid == 0) {
            alarm(60);
            _exit((int)(intptr_t)body(arg));
        }
    } else {
        CHECK_EQ(pthread_create(&r.thread, NULL, body, arg), 0);
    }
    return r;
}

static int join(runner r) {
    if (r.pid) {
        int status;
        CHECK_EQ(waitpid(r.pid, &status, 0), r.pid);
        CHECK(WIFEXITED(status));
        return WEXITSTATUS(status);
    }
    void *result;
    CHECK_EQ(pthread_join(r.thread, &result), 0);
    return (int)(intptr_t)result;
}

/* Whether an upgrade waits for the readers to leave (UPGRADING, bit 26 of the state word). */
static int upgrading(sync_rwlock_t *rw) { return (__atomic_load_n(&rw->_state, __ATOMIC_SEQ_CST) >> 26) & 1; }

/* Whether a plain reader is kept out now (a try that gets in releases at once). */
static int readers_kept_out(sync_rwlock_t *rw) {
    int code = sync_rwlock_try_rdlock(rw);
    if (code == 0) CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    return code == EBUSY;
}

/* ---- Return codes from every hold ---------------------------------------------------------- */

static void *other_thread_codes(void *arg) {
    sync_rwlock_t *rw = arg;  /* the main thread is the upgradable reader */
    int ok = sync_rwlock_upgrade(rw) == EDEADLK && sync_rwlock_try_upgrade(rw) == EDEADLK
        && sync_rwlock_upgrade_timed(rw, MS) == EDEADLK && sync_rwlock_uprdunlock(rw) == EPERM
        && sync_rwlock_uprd_downgrade(rw) == EPERM && sync_rwlock_try_uprdlock(rw) == EBUSY
        && sync_rwlock_uprdlock_timed(rw, MS) == ETIMEDOUT && sync_rwlock_try_wrlock(rw) == EBUSY
        && sync_rwlock_try_rdlock(rw) == 0;
    /* A plain reader's upgrade: EDEADLK, not a hang. */
    ok = ok && sync_rwlock_upgrade(rw) == EDEADLK && sync_rwlock_rdunlock(rw) == 0;
    return (void *)(intptr_t)!ok;
}

static void test_codes(void) {
    alarm(60);
    sync_rwlock_t l = SYNC_RWLOCK_INIT;
    /* Nothing held: no upgradable read to upgrade, release or downgrade. */
    CHECK_EQ(sync_rwlock_upgrade(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_try_upgrade(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_uprdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_uprd_downgrade(&l), EPERM);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&l), EPERM);
    /* The upgradable reader's own attempts. */
    CHECK_EQ(sync_rwlock_uprdlock(&l), 0);
    CHECK_EQ(sync_rwlock_uprdlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_uprdlock_timed(&l, MS), EDEADLK);
    CHECK_EQ(sync_rwlock_try_uprdlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_wrlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_wrlock_timed(&l, MS), EDEADLK);
    CHECK_EQ(sync_rwlock_try_wrlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_wrunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_rdunlock(&l), EPERM);       /* no plain reader holds it */
    CHECK_EQ(sync_rwlock_downgrade(&l), EPERM);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&l), EPERM);
    CHECK_EQ(sync_rwlock_try_rdlock(&l), 0);          /* a plain read beside it */
    CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
    pthread_t t;
    void *failed;
    CHECK_EQ(pthread_create(&t, NULL, other_thread_codes, &l), 0);
    CHECK_EQ(pthread_join(t, &failed), 0);
    CHECK(failed == NULL);
    /* Upgrade, a second upgrade, and back down. */
    CHECK_EQ(sync_rwlock_upgrade(&l), 0);
    CHECK_EQ(sync_rwlock_upgrade(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_try_upgrade(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_uprdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_uprd_downgrade(&l), EPERM);
    CHECK_EQ(sync_rwlock_try_uprdlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_uprdlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&l), 0);
    CHECK_EQ(sync_rwlock_try_upgrade(&l), 0);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&l), 0);
    CHECK_EQ(sync_rwlock_upgrade_timed(&l, MS), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&l), 0);
    CHECK_EQ(l._state, 0u);
    CHECK_EQ(l._writer, 0u);
    /* Upgradable -> plain reader: that reader's upgrade is EDEADLK; another may take it. */
    CHECK_EQ(sync_rwlock_uprdlock(&l), 0);
    CHECK_EQ(sync_rwlock_uprd_downgrade(&l), 0);
    CHECK_EQ(sync_rwlock_upgrade(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_uprdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_try_wrlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_try_uprdlock(&l), 0);
    CHECK_EQ(sync_rwlock_try_upgrade(&l), EBUSY);     /* its own plain read keeps it a reader */
    CHECK_EQ(sync_rwlock_upgrade_timed(&l, MS), ETIMEDOUT);
    CHECK_EQ(sync_rwlock_uprdunlock(&l), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
    CHECK_EQ(l._state, 0u);
    CHECK_EQ(l._writer, 0u);
    /* Bad pointers and impossible states. */
    CHECK_EQ(sync_rwlock_uprdlock(NULL), EINVAL);
    CHECK_EQ(sync_rwlock_upgrade(NULL), EINVAL);
    sync_rwlock_t bad = SYNC_RWLOCK_INIT;
    bad._state = 1u << 26;                            /* UPGRADING without UPGRADABLE */
    CHECK_EQ(sync_rwlock_uprdlock(&bad), EINVAL);
    CHECK_EQ(sync_rwlock_try_uprdlock(&bad), EINVAL);
    CHECK_EQ(sync_rwlock_uprdunlock(&bad), EINVAL);
    CHECK_EQ(sync_rwlock_upgrade(&bad), EINVAL);
    bad._state = (1u << 27) | (1u << 28);             /* UPGRADABLE with WRITER */
    CHECK_EQ(sync_rwlock_try_uprdlock(&bad), EINVAL);
    CHECK_EQ(sync_rwlock_try_wrlock(&bad), EINVAL);
    CHECK_EQ(sync_rwlock_try_rdlock(&bad), EINVAL);
    CHECK_EQ(sync_rwlock_wrunlock(&bad), EINVAL);
    CHECK_EQ(bad._state, (1u << 27) | (1u << 28));
    alarm(0);
}

/* ---- Who holds it beside whom -------------------------------------------------------------- */

static void *second_upgradable(void *arg) {
    struct shared *s = arg;
    int code = sync_rwlock_uprdlock(&s->rw);
    if (code) return (void *)(intptr_t)10;
    atomic_store(&s->second_in, 1);
    /* It is the only upgradable reader now: the first has released. */
    code = sync_rwlock_upgrade(&s->rw);
    if (code) return (void *)(intptr_t)11;
    return (void *)(intptr_t)(sync_rwlock_wrunlock(&s->rw) ? 12 : 0);
}

/* An upgradable reader beside plain readers; a second one waits (no deadlock: the first
 * upgrades, writes and releases, then the second gets in); a writer keeps it out. */
static void test_exclusion(int process) {
    alarm(60);
    struct shared *s = new_shared(process ? SYNC_RWLOCK_SHARED : 0);
    CHECK_EQ(sync_rwlock_rdlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_rdlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_uprdlock(&s->rw), 0);     /* beside two readers */
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);
    runner second = start(process, second_upgradable, s);
    usleep(20000);                                  /* room to get in wrongly */
    CHECK_EQ(atomic_load(&s->second_in), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_upgrade(&s->rw), 0);       /* the waiting one is no reader: no deadlock */
    CHECK_EQ(atomic_load(&s->second_in), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
    CHECK_EQ(join(second), 0);
    CHECK_EQ(atomic_load(&s->second_in), 1);
    /* A writer keeps the upgradable reader out. */
    CHECK_EQ(sync_rwlock_wrlock(&s->rw), 0);
    CHECK_EQ(sync_rwlock_try_uprdlock(&s->rw), EBUSY);
    CHECK_EQ(sync_rwlock_wrunlock(&s->rw), 0);
    CHECK_EQ(s->rw._state & ~0x80000000u, 0u);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- An upgrade that no writer gets in front of -------------------------------------------- */

static void *plain_reader(void *arg) {
    struct shared *s = arg;
    if (sync_rwlock_rdlock(&s->rw)) return (void *)(intptr_t)20;
    atomic_store(&s->reader_in, 1);
    while (atomic_load(&s->step) < 2) usleep(1000);  /* until told to leave */
    return (void *)(intptr_t)(sync_rwlock_rdunlock(&s->rw) ? 21 : 0);
}

static void *waiting_writer(void *arg) {
    struct shared *s = arg;
    if (sync_rwlock_wrlock(&s->rw)) return (void *)(intptr_t)30;
    atomic_store(&s->writer_in, 1);
    /* The upgrader wrote before this writer got in: value is 1, then this writer's 2. */
    int before = atomic_load(&s->value);
    atomic_store(&s->value, 2);
    if (sync_rwlock_wrunlock(&s->rw)) return (void *)(intptr_t)31;
    return (void *)(intptr_t)(before == 1 ? 0 : 32);
}

static void *upgrader(void *arg) {
    struct shared *s = arg;
    if (sync_rwlock_uprdlock(&s->rw)) return (void *)(intptr_t)40;  /* beside the reader */
    atomic_store(&s->second_in, 1);
    while (atomic_load(&s->step) < 1) usleep(1000);  /* until the writer waits */
    if (sync_rwlock_upgrade(&s->rw)) return (void *)(intptr_t)41;
    atomic_store(&s->upgrader_saw, atomic_load(&s->writer_in) || atomic_load(&s->value) ? 1 : 2);
    atomic_store(&s->value, 1);
    return (void *)(intptr_t)(sync_rwlock_wrunlock(&s->rw) ? 42 : 0);
}

/* The upgradable reader upgrades while a plain reader holds the lock and a writer waits: new
 * readers wait from the upgrade on; once the reader leaves, the upgrader writes before the
 * writer that waited (the state after: the writer's value over the upgrader's). */
static void test_upgrade_is_atomic(int process) {
    alarm(60);
    struct shared *s = new_shared(process ? SYNC_RWLOCK_SHARED : 0);
    runner reader = start(process, plain_reader, s);
    WAIT_UNTIL(atomic_load(&s->reader_in));
    runner up = start(process, upgrader, s);
    WAIT_UNTIL(atomic_load(&s->second_in));
    runner writer = start(process, waiting_writer, s);
    WAIT_UNTIL(sync_rwlock_waiting_writers(&s->rw) == 1);
    CHECK(readers_kept_out(&s->rw));                /* writer preference: the writer marked it */
    CHECK_EQ(sync_rwlock_try_uprdlock(&s->rw), EBUSY);
    atomic_store(&s->step, 1);                      /* the upgrade starts; then the reader leaves */
    WAIT_UNTIL(upgrading(&s->rw));          /* UPGRADING: the upgrade waits for the reader */
    CHECK_EQ(atomic_load(&s->writer_in), 0);
    atomic_store(&s->step, 2);
    CHECK_EQ(join(reader), 0);
    CHECK_EQ(join(up), 0);
    CHECK_EQ(join(writer), 0);
    CHECK_EQ(atomic_load(&s->upgrader_saw), 2);     /* no writer had been in, nothing written */
    CHECK_EQ(atomic_load(&s->value), 2);            /* then the writer, after it */
    CHECK_EQ(s->rw._state & ~0x80000000u, 0u);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- An upgrade that gives up -------------------------------------------------------------- */

static void on_signal(int signal) { (void)signal; }

static void *interrupted_upgrader(void *arg) {
    struct shared *s = arg;
    if (sync_rwlock_uprdlock(&s->rw)) return (void *)(intptr_t)50;
    atomic_store(&s->second_in, 1);
    int code = sync_rwlock_upgrade_interruptible(&s->rw, -1);  /* a reader holds it: ended by a signal */
    atomic_store(&s->result, code);
    while (atomic_load(&s->step) < 1) usleep(1000);
    return (void *)(intptr_t)(sync_rwlock_uprdunlock(&s->rw) ? 51 : 0);  /* still held */
}

static void *blocked_reader(void *arg) {
    struct shared *s = arg;
    if (sync_rwlock_rdlock(&s->rw)) return (void *)(intptr_t)60;
    atomic_store(&s->reader_in, 1);
    return (void *)(intptr_t)(sync_rwlock_rdunlock(&s->rw) ? 61 : 0);
}

/* An upgrade waiting for a reader keeps new readers out; ended by a signal (EINTR, as a
 * timeout), it keeps the upgradable read and lets the readers that waited in. */
static void test_abandoned_upgrade(void) {
    alarm(60);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    CHECK_EQ(sigaction(SIGUSR1, &action, NULL), 0);
    struct shared *s = new_shared(0);
    CHECK_EQ(sync_rwlock_rdlock(&s->rw), 0);        /* this thread's read keeps the upgrade waiting */
    pthread_t up, reader;
    CHECK_EQ(pthread_create(&up, NULL, interrupted_upgrader, s), 0);
    WAIT_UNTIL(upgrading(&s->rw));
    CHECK(readers_kept_out(&s->rw));
    CHECK_EQ(pthread_create(&reader, NULL, blocked_reader, s), 0);
    usleep(20000);                                  /* room to get in wrongly */
    CHECK_EQ(atomic_load(&s->reader_in), 0);
    while (atomic_load(&s->result) == 0) {          /* a signal may land before the sleep: again */
        pthread_kill(up, SIGUSR1);
        usleep(5000);
    }
    CHECK_EQ(atomic_load(&s->result), EINTR);
    void *result;
    CHECK_EQ(pthread_join(reader, &result), 0);     /* the waiting reader got in */
    CHECK(result == NULL);
    CHECK_EQ(atomic_load(&s->reader_in), 1);
    CHECK_EQ(sync_rwlock_try_uprdlock(&s->rw), EBUSY);  /* the upgrader still holds it */
    atomic_store(&s->step, 1);
    CHECK_EQ(pthread_join(up, &result), 0);
    CHECK(result == NULL);
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);
    CHECK_EQ(s->rw._state, 0u);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- Downgrades ---------------------------------------------------------------------------- */

static void *try_upgradable_then_release(void *arg) {
    sync_rwlock_t *rw = arg;
    int code = sync_rwlock_try_uprdlock(rw);
    if (code) return (void *)(intptr_t)code;
    return (void *)(intptr_t)(sync_rwlock_uprdunlock(rw) ? 70 : 0);
}

/* A writer downgraded to the upgradable read lets readers in but no writer; the upgradable
 * reader downgraded to a plain one lets another take the upgradable read. */
static void test_downgrades(void) {
    alarm(60);
    struct shared *s = new_shared(0);
    CHECK_EQ(sync_rwlock_wrlock(&s->rw), 0);
    pthread_t reader;
    CHECK_EQ(pthread_create(&reader, NULL, blocked_reader, s), 0);
    usleep(20000);
    CHECK_EQ(atomic_load(&s->reader_in), 0);
    CHECK_EQ(sync_rwlock_downgrade_to_uprd(&s->rw), 0);
    void *result;
    CHECK_EQ(pthread_join(reader, &result), 0);     /* the parked reader joined */
    CHECK(result == NULL);
    CHECK_EQ(sync_rwlock_try_wrlock(&s->rw), EBUSY);
    pthread_t other;
    CHECK_EQ(pthread_create(&other, NULL, try_upgradable_then_release, &s->rw), 0);
    CHECK_EQ(pthread_join(other, &result), 0);
    CHECK_EQ((int)(intptr_t)result, EBUSY);
    CHECK_EQ(sync_rwlock_uprd_downgrade(&s->rw), 0);
    CHECK_EQ(pthread_create(&other, NULL, try_upgradable_then_release, &s->rw), 0);
    CHECK_EQ(pthread_join(other, &result), 0);
    CHECK(result == NULL);
    CHECK_EQ(sync_rwlock_try_wrlock(&s->rw), EBUSY);
    CHECK_EQ(sync_rwlock_rdunlock(&s->rw), 0);
    CHECK_EQ(s->rw._state, 0u);
    CHECK_EQ(s->rw._writer, 0u);
    munmap(s, sizeof *s);
    alarm(0);
}

/* ---- Many threads: readers, upgraders, writers --------------------------------------------- */

enum { STRESS_THREADS = 6, STRESS_ROUNDS = 3000 };
static sync_rwlock_t stress = SYNC_RWLOCK_INIT;
static atomic_int stress_writers, stress_upgradables, stress_readers, stress_failures;
static long stress_counter;

static void *stress_worker(void *arg) {
    unsigned seed = (unsigned)(intptr_t)arg;
    for (int i = 0; i < STRESS_ROUNDS; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned kind = (seed >> 16) % 10;
        if (kind < 6) {
            if (sync_rwlock_rdlock(&stress)) atomic_fetch_add(&stress_failures, 1);
            atomic_fetch_add(&stress_readers, 1);
            if (atomic_load(&stress_writers)) atomic_fetch_add(&stress_failures, 1);
            atomic_fetch_sub(&stress_readers, 1);
            if (sync_rwlock_rdunlock(&stress)) atomic_fetch_add(&stress_failures, 1);
        } else if (kind < 9) {
            /* read, then upgrade and add one: the value read is the value written over */
            if (sync_rwlock_uprdlock(&stress)) atomic_fetch_add(&stress_failures, 1);
            if (atomic_fetch_add(&stress_upgradables, 1) || atomic_load(&stress_writers))
                atomic_fetch_add(&stress_failures, 1);
            long seen = stress_counter;
            atomic_fetch_sub(&stress_upgradables, 1);
            if (sync_rwlock_upgrade(&stress)) atomic_fetch_add(&stress_failures, 1);
            if (atomic_fetch_add(&stress_writers, 1) || atomic_load(&stress_readers) || stress_counter != seen)
                atomic_fetch_add(&stress_failures, 1);
            stress_counter = seen + 1;
            atomic_fetch_sub(&stress_writers, 1);
            if (kind == 8) {  /* and down again, to a plain read */
                if (sync_rwlock_downgrade_to_uprd(&stress) || sync_rwlock_uprd_downgrade(&stress))
                    atomic_fetch_add(&stress_failures, 1);
                if (sync_rwlock_rdunlock(&stress)) atomic_fetch_add(&stress_failures, 1);
            } else if (sync_rwlock_wrunlock(&stress)) {
                atomic_fetch_add(&stress_failures, 1);
            }
        } else {
            if (sync_rwlock_wrlock(&stress)) atomic_fetch_add(&stress_failures, 1);
            if (atomic_fetch_add(&stress_writers, 1) || atomic_load(&stress_readers) || atomic_load(&stress_upgradables))
                atomic_fetch_add(&stress_failures, 1);
            stress_counter++;
            atomic_fetch_sub(&stress_writers, 1);
            if (sync_rwlock_wrunlock(&stress)) atomic_fetch_add(&stress_failures, 1);
        }
    }
    return NULL;
}

static void test_stress(void) {
    alarm(120);
    pthread_t t[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, stress_worker, (void *)(intptr_t)(i + 1)), 0);
    for (int i = 0; i < STRESS_THREADS; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&stress_failures), 0);
    /* every upgrade and every write added one */
    long expected = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        unsigned seed = (unsigned)(i + 1);
        for (int j = 0; j < STRESS_ROUNDS; j++) {
            seed = seed * 1103515245u + 12345u;
            if ((seed >> 16) % 10 >= 6) expected++;
        }
    }
    CHECK_EQ(stress_counter, expected);
    CHECK_EQ(stress._state, 0u);
    alarm(0);
}

int main(void) {
    watchdog_install("test_rwlock_upgradable: watchdog: a test hung\n");
    test_codes();
    test_exclusion(0);
    test_exclusion(1);
    test_upgrade_is_atomic(0);
    test_upgrade_is_atomic(1);
    test_abandoned_upgrade();
    test_downgrades();
    test_stress();
    DONE();
}
