/* A bounded randomized model fuzz of the mutex, the read-write lock, the semaphore and the
 * condition lock, through the C ABI: threads (and, for process-shared mode, two processes)
 * make random calls, each checked against a model of what the documentation promises: the
 * return code a call may give from the caller's state (what it holds), mutual exclusion and
 * counts (shared counters bumped inside the critical sections), and the owner rules for misuse
 * (unlocking what the caller does not hold, locking what it holds). Checked after every step.
 *
 * SYNC_FUZZ_SECONDS: how long each primitive runs in each mode (default 0.5); SYNC_FUZZ_SEED:
 * the seed (default: from the clock), printed so that a failure can be replayed (the schedule
 * of threads is not replayed: a seed gives the same choices, not the same interleaving).
 * benchmarks/fuzz.sh runs it longer. */
#define _GNU_SOURCE
#include "check.h"
#include <sync.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { THREADS = 4, PROCESSES = 2, UNITS = 2, CONDITIONS = 4 };

/* Everything the workers share, in MAP_SHARED memory (so that forked processes share it too). */
struct arena {
    sync_mutex_t mutex;
    sync_rwlock_t rw;
    sync_semaphore_t sem;
    sync_condition_lock_t cl;
    atomic_int holders, readers, writers, upgradables, units;
    long guarded_a, guarded_b;        /* changed only inside a critical section: stay equal */
    int64_t condition;                /* the condition lock's value, set by its holder */
    atomic_int failed;
    char why[512];
    atomic_long ops;
};

static struct arena *arena;
static int64_t end_ns;
static uint64_t seed;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Records the first failure (with the seed), and makes every worker stop. */
static void fail(const char *format, ...) {
    if (atomic_exchange(&arena->failed, 1)) return;
    va_list args;
    va_start(args, format);
    int n = snprintf(arena->why, sizeof arena->why, "seed %" PRIu64 ": ", seed);
    vsnprintf(arena->why + n, sizeof arena->why - (size_t)n, format, args);
    va_end(args);
}

#define EXPECT(call, ok) do { int r_ = (call); if (!(ok)) { fail("%s returned %d (%s) at line %d", #call, r_, strerror(r_), __LINE__); return; } } while (0)
#define INVARIANT(cond) do { if (!(cond)) { fail("invariant %s broken at line %d", #cond, __LINE__); return; } } while (0)

struct rng { uint64_t s; };
static uint32_t next(struct rng *r, uint32_t n) {
    r->s ^= r->s << 13; r->s ^= r->s >> 7; r->s ^= r->s << 17;
    return (uint32_t)((r->s * 0x2545F4914F6CDD1DULL) >> 33) % n;
}
static uint64_t short_timeout(struct rng *r) { return 1000u * next(r, 200); }  /* 0-200 us */

/* Inside a critical section: the guarded pair is consistent, then changed. */
static int touch_guarded(void) {
    if (arena->guarded_a != arena->guarded_b) return 0;
    arena->guarded_a++;
    arena->guarded_b++;
    return 1;
}

/* ---- Mutex (owner-checked) ---- */

static void mutex_worker(struct rng *r) {
    int holding = 0;
    sync_mutex_t *m = &arena->mutex;
    while (!atomic_load(&arena->failed) && now_ns() < end_ns) {
        int r0 = -1, took = 0;
        switch (next(r, 7)) {
        case 0: r0 = sync_mutex_lock(m); EXPECT(r0, holding ? r0 == EDEADLK : r0 == 0); took = !holding; break;
        case 1: r0 = sync_mutex_try_lock(m); EXPECT(r0, holding ? r0 == EBUSY : r0 == 0 || r0 == EBUSY); took = !holding && r0 == 0; break;
        case 2: r0 = sync_mutex_lock_timed(m, short_timeout(r));
                EXPECT(r0, holding ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT); took = !holding && r0 == 0; break;
        case 3: r0 = sync_mutex_lock_until(m, now_ns() - 1);
                EXPECT(r0, holding ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT); took = !holding && r0 == 0; break;
        case 4: case 5:
            if (holding) {
                INVARIANT(touch_guarded());
                atomic_fetch_sub(&arena->holders, 1);
                holding = 0;
                EXPECT(sync_mutex_unlock(m), r_ == 0);
            } else {
                EXPECT(sync_mutex_unlock(m), r_ == EPERM);
            }
            break;
        case 6: EXPECT(sync_mutex_is_owner(m), r_ == holding); break;
        }
        if (took) {
            INVARIANT(atomic_fetch_add(&arena->holders, 1) == 0);
            INVARIANT(touch_guarded());
            holding = 1;
        }
        if (holding) INVARIANT(atomic_load(&arena->holders) == 1 && sync_mutex_is_owner(m) && sync_mutex_is_locked(m));
        atomic_fetch_add_explicit(&arena->ops, 1, memory_order_relaxed);
    }
    if (holding) {
        atomic_fetch_sub(&arena->holders, 1);
        EXPECT(sync_mutex_unlock(m), r_ == 0);
    }
}

/* ---- Read-write lock ---- */

enum { NONE, READING, WRITING, UPGRADABLE };

static int entered_read(void) {
    atomic_fetch_add(&arena->readers, 1);
    return atomic_load(&arena->writers) == 0;
}
static int entered_write(void) {
    return atomic_fetch_add(&arena->writers, 1) == 0 && atomic_load(&arena->readers) == 0
        && atomic_load(&arena->upgradables) == 0 && touch_guarded();
}
static int entered_upgradable(void) {
    return atomic_fetch_add(&arena->upgradables, 1) == 0 && atomic_load(&arena->writers) == 0;
}

static void rwlock_worker(struct rng *r) {
    int state = NONE;
    sync_rwlock_t *rw = &arena->rw;
    while (!atomic_load(&arena->failed) && now_ns() < end_ns) {
        int r0 = -1, took = NONE;
        switch (next(r, 14)) {
        case 0:  /* read lock: not while reading (a writer arriving in between would make it wait forever) */
            if (state == READING || state == UPGRADABLE) break;
            r0 = sync_rwlock_rdlock(rw); EXPECT(r0, state == WRITING ? r0 == EDEADLK : r0 == 0);
            if (state == NONE) took = READING;
            break;
        case 1:
            if (state == READING || state == UPGRADABLE) break;
            r0 = sync_rwlock_try_rdlock(rw); EXPECT(r0, state == WRITING ? r0 == EBUSY : r0 == 0 || r0 == EBUSY);
            if (state == NONE && r0 == 0) took = READING;
            break;
        case 2:
            if (state == READING || state == UPGRADABLE) break;
            r0 = sync_rwlock_rdlock_timed(rw, short_timeout(r));
            EXPECT(r0, state == WRITING ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT);
            if (state == NONE && r0 == 0) took = READING;
            break;
        case 3:  /* write lock: a reader's own read share keeps it out, so only timed then */
            if (state == READING) {
                EXPECT(sync_rwlock_wrlock_timed(rw, short_timeout(r)), r_ == ETIMEDOUT);
                break;
            }
            r0 = sync_rwlock_wrlock(rw); EXPECT(r0, state != NONE ? r0 == EDEADLK : r0 == 0);
            if (state == NONE) took = WRITING;
            break;
        case 4:
            r0 = sync_rwlock_try_wrlock(rw); EXPECT(r0, state != NONE ? r0 == EBUSY : r0 == 0 || r0 == EBUSY);
            if (state == NONE && r0 == 0) took = WRITING;
            break;
        case 5:
            if (state == READING) break;
            r0 = sync_rwlock_wrlock_timed(rw, short_timeout(r));
            EXPECT(r0, state != NONE ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT);
            if (state == NONE && r0 == 0) took = WRITING;
            break;
        case 6:  /* read unlock: from a reader; from the writer EPERM (no reader can hold it then) */
            if (state == READING) {
                atomic_fetch_sub(&arena->readers, 1);
                state = NONE;
                EXPECT(sync_rwlock_rdunlock(rw), r_ == 0);
            } else if (state == WRITING) {
                EXPECT(sync_rwlock_rdunlock(rw), r_ == EPERM);
            }  /* the upgradable reader's would release another thread's read lock */
            break;
        case 7:
            if (state == WRITING) {
                INVARIANT(touch_guarded());
                atomic_fetch_sub(&arena->writers, 1);
                state = NONE;
                EXPECT(sync_rwlock_wrunlock(rw), r_ == 0);
            } else {
                EXPECT(sync_rwlock_wrunlock(rw), r_ == EPERM);
            }
            break;
        case 8:  /* the upgradable read: not while reading (it could wait for a writer that waits for us) */
            if (state == READING) break;
            r0 = next(r, 2) ? sync_rwlock_uprdlock(rw) : sync_rwlock_uprdlock_timed(rw, short_timeout(r));
            EXPECT(r0, state != NONE ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT);
            if (state == NONE && r0 == 0) took = UPGRADABLE;
            break;
        case 9:
            if (state == READING) break;
            r0 = sync_rwlock_try_uprdlock(rw); EXPECT(r0, state != NONE ? r0 == EBUSY : r0 == 0 || r0 == EBUSY);
            if (state == NONE && r0 == 0) took = UPGRADABLE;
            break;
        case 10:  /* upgrade: only the upgradable reader; plain readers never wait while reading */
            switch (next(r, 3)) {
            case 0: r0 = sync_rwlock_upgrade(rw); break;
            case 1: r0 = sync_rwlock_try_upgrade(rw); break;
            default: r0 = sync_rwlock_upgrade_timed(rw, short_timeout(r)); break;
            }
            EXPECT(r0, state != UPGRADABLE ? r0 == EDEADLK : r0 == 0 || r0 == EBUSY || r0 == ETIMEDOUT);
            if (state == UPGRADABLE && r0 == 0) {
                atomic_fetch_sub(&arena->upgradables, 1);
                state = NONE;
                took = WRITING;
            }
            break;
        case 11:
            if (state == UPGRADABLE) {
                atomic_fetch_sub(&arena->upgradables, 1);
                state = NONE;
                EXPECT(sync_rwlock_uprdunlock(rw), r_ == 0);
            } else {
                EXPECT(sync_rwlock_uprdunlock(rw), r_ == EPERM);
            }
            break;
        case 12:  /* the upgradable reader becomes a plain reader (uncounted first, as for a release) */
            if (state == UPGRADABLE) atomic_fetch_sub(&arena->upgradables, 1);
            r0 = sync_rwlock_uprd_downgrade(rw); EXPECT(r0, state == UPGRADABLE ? r0 == 0 : r0 == EPERM);
            if (state == UPGRADABLE) { state = NONE; took = READING; }
            break;
        case 13:  /* the writer becomes the upgradable reader, or a plain one (uncounted first) */
            if (state == WRITING) {
                INVARIANT(touch_guarded());
                atomic_fetch_sub(&arena->writers, 1);
            }
            if (next(r, 2)) {
                r0 = sync_rwlock_downgrade_to_uprd(rw); EXPECT(r0, state == WRITING ? r0 == 0 : r0 == EPERM);
                if (state == WRITING) took = UPGRADABLE;
            } else {
                r0 = sync_rwlock_downgrade(rw); EXPECT(r0, state == WRITING ? r0 == 0 : r0 == EPERM);
                if (state == WRITING) took = READING;
            }
            if (state == WRITING) state = NONE;
            break;
        }
        if (took == READING) { state = READING; INVARIANT(entered_read()); }
        if (took == WRITING) { state = WRITING; INVARIANT(entered_write()); }
        if (took == UPGRADABLE) { state = UPGRADABLE; INVARIANT(entered_upgradable()); }
        if (state == READING) INVARIANT(atomic_load(&arena->writers) == 0);
        if (state == WRITING) INVARIANT(atomic_load(&arena->writers) == 1 && atomic_load(&arena->readers) == 0
                                        && atomic_load(&arena->upgradables) == 0);
        if (state == UPGRADABLE) INVARIANT(atomic_load(&arena->writers) == 0 && atomic_load(&arena->upgradables) == 1);
        atomic_fetch_add_explicit(&arena->ops, 1, memory_order_relaxed);
    }
    if (state == READING) { atomic_fetch_sub(&arena->readers, 1); EXPECT(sync_rwlock_rdunlock(rw), r_ == 0); }
    if (state == WRITING) { atomic_fetch_sub(&arena->writers, 1); EXPECT(sync_rwlock_wrunlock(rw), r_ == 0); }
    if (state == UPGRADABLE) { atomic_fetch_sub(&arena->upgradables, 1); EXPECT(sync_rwlock_uprdunlock(rw), r_ == 0); }
}

/* ---- Semaphore (bounded: UNITS units, never more) ---- */

static void semaphore_worker(struct rng *r) {
    int held = 0;
    sync_semaphore_t *sem = &arena->sem;
    while (!atomic_load(&arena->failed) && now_ns() < end_ns) {
        int r0 = -1;
        switch (next(r, 6)) {
        case 0:  /* an untimed wait only with no unit held: else all could wait with all units held */
            if (held) break;
            EXPECT(r0 = sync_semaphore_wait(sem), r_ == 0);
            break;
        case 1: r0 = sync_semaphore_try_wait(sem); EXPECT(r0, r0 == 0 || r0 == EAGAIN); break;
        case 2: r0 = sync_semaphore_wait_timed(sem, short_timeout(r)); EXPECT(r0, r0 == 0 || r0 == ETIMEDOUT); break;
        case 3: r0 = sync_semaphore_wait_until(sem, now_ns() - 1); EXPECT(r0, r0 == 0 || r0 == ETIMEDOUT); break;
        case 4: case 5:
            if (!held) break;
            atomic_fetch_sub(&arena->units, 1);
            held--;
            EXPECT(sync_semaphore_signal(sem, 1), r_ == 0);  /* a unit given back never passes the bound */
            break;
        }
        if (r0 == 0) {
            held++;
            INVARIANT(atomic_fetch_add(&arena->units, 1) < UNITS);
        }
        INVARIANT(atomic_load(&arena->units) <= UNITS && sync_semaphore_value(sem) <= UNITS);
        atomic_fetch_add_explicit(&arena->ops, 1, memory_order_relaxed);
    }
    for (; held > 0; held--) {
        atomic_fetch_sub(&arena->units, 1);
        EXPECT(sync_semaphore_signal(sem, 1), r_ == 0);
    }
}

/* ---- Condition lock ---- */

static void condition_lock_worker(struct rng *r) {
    int holding = 0;
    sync_condition_lock_t *cl = &arena->cl;
    while (!atomic_load(&arena->failed) && now_ns() < end_ns) {
        int r0 = -1, took = 0;
        int64_t wanted = next(r, CONDITIONS), when = -1;
        switch (next(r, 8)) {
        case 0: r0 = sync_condition_lock_lock(cl); EXPECT(r0, holding ? r0 == EDEADLK : r0 == 0); took = !holding; break;
        case 1: r0 = sync_condition_lock_try_lock(cl); EXPECT(r0, holding ? r0 == EBUSY : r0 == 0 || r0 == EBUSY); took = !holding && r0 == 0; break;
        case 2: r0 = sync_condition_lock_lock_until(cl, now_ns() + (int64_t)short_timeout(r));
                EXPECT(r0, holding ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT); took = !holding && r0 == 0; break;
        case 3: r0 = sync_condition_lock_lock_when_timed(cl, wanted, short_timeout(r));
                EXPECT(r0, holding ? r0 == EDEADLK : r0 == 0 || r0 == ETIMEDOUT);
                took = !holding && r0 == 0; when = wanted; break;
        case 4: r0 = sync_condition_lock_try_lock_when(cl, wanted);
                EXPECT(r0, holding ? r0 == EBUSY : r0 == 0 || r0 == EBUSY);
                took = !holding && r0 == 0; when = wanted; break;
        case 5:
            if (holding) {
                INVARIANT(touch_guarded());
                atomic_fetch_sub(&arena->holders, 1);
                holding = 0;
                EXPECT(sync_condition_lock_unlock(cl), r_ == 0);
            } else {
                EXPECT(sync_condition_lock_unlock(cl), r_ == EPERM);
            }
            break;
        case 6: case 7:
            if (holding) {
                INVARIANT(touch_guarded());
                arena->condition = wanted;
                atomic_fetch_sub(&arena->holders, 1);
                holding = 0;
                EXPECT(sync_condition_lock_unlock_with(cl, wanted), r_ == 0);
            } else {
                EXPECT(sync_condition_lock_unlock_with(cl, wanted), r_ == EPERM);
            }
            break;
        }
        if (took) {
            INVARIANT(atomic_fetch_add(&arena->holders, 1) == 0);
            INVARIANT(touch_guarded());
            holding = 1;
            if (when >= 0) INVARIANT(arena->condition == when);  /* lock_when: taken with that value */
        }
        if (holding) INVARIANT(atomic_load(&arena->holders) == 1 && sync_condition_lock_condition(cl) == arena->condition);
        atomic_fetch_add_explicit(&arena->ops, 1, memory_order_relaxed);
    }
    if (holding) {
        atomic_fetch_sub(&arena->holders, 1);
        EXPECT(sync_condition_lock_unlock(cl), r_ == 0);
    }
}

/* ---- Driver ---- */

struct run { void (*worker)(struct rng *); uint64_t stream; };

static void *thread_main(void *arg) {
    struct run *run = arg;
    struct rng r = {seed ^ (run->stream * 0x9E3779B97F4A7C15ULL) ^ 1};
    run->worker(&r);
    return NULL;
}

static void run_threads(void (*worker)(struct rng *), uint64_t stream) {
    pthread_t t[THREADS];
    struct run runs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        runs[i] = (struct run){worker, stream * THREADS + (uint64_t)i};
        CHECK(pthread_create(&t[i], NULL, thread_main, &runs[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static void initialize(int shared) {
    memset(arena, 0, sizeof *arena);
    CHECK_EQ(sync_mutex_init(&arena->mutex, shared ? SYNC_MUTEX_SHARED : 0), 0);
    CHECK_EQ(sync_rwlock_init(&arena->rw, shared ? SYNC_RWLOCK_SHARED : 0), 0);
    CHECK_EQ(sync_semaphore_init(&arena->sem, UNITS, UNITS, SYNC_SEMAPHORE_BOUNDED | (shared ? SYNC_PROCESS_SHARED : 0)), 0);
    CHECK_EQ(sync_condition_lock_init(&arena->cl, 0, shared ? SYNC_PROCESS_SHARED : 0), 0);
}

/* Runs worker on THREADS threads, or (shared) in PROCESSES processes of THREADS / 2 threads
 * each, until the deadline; then checks the quiescent state. */
static void fuzz(const char *name, void (*worker)(struct rng *), int shared, double seconds) {
    initialize(shared);
    end_ns = now_ns() + (int64_t)(seconds * 1e9);
    if (!shared) {
        run_threads(worker, 0);
    } else {
        pid_t children[PROCESSES];
        for (int p = 0; p < PROCESSES; p++) {
            children[p] = fork();
            CHECK(children[p] >= 0);
            if (children[p] == 0) {
                run_threads(worker, (uint64_t)p + 1);
                _exit(0);
            }
        }
        for (int p = 0; p < PROCESSES; p++) {
            int status = 0, done = 0;  /* a bound against a hang: the deadline and a minute */
            for (int64_t limit = end_ns + 60000000000LL; !done && now_ns() < limit; ) {
                if (waitpid(children[p], &status, WNOHANG) == children[p]) done = 1;
                else usleep(1000);
            }
            if (!done) {
                for (int q = 0; q < PROCESSES; q++) kill(children[q], SIGKILL);
                fail("%s: process %d hung", name, p);
                waitpid(children[p], &status, 0);
            } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                fail("%s: process %d died (status %#x)", name, p, status);
            }
        }
    }
    if (atomic_load(&arena->failed)) {
        fprintf(stderr, "%s (%s): %s\n", name, shared ? "shared" : "private", arena->why);
        exit(1);
    }
    /* Quiescent: everything released, counts back to their start. */
    CHECK_EQ(atomic_load(&arena->holders) + atomic_load(&arena->readers) + atomic_load(&arena->writers), 0);
    CHECK_EQ(atomic_load(&arena->units), 0);
    CHECK_EQ(arena->guarded_a, arena->guarded_b);
    CHECK_EQ(sync_mutex_is_locked(&arena->mutex), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&arena->rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&arena->rw), 0);
    CHECK_EQ(sync_semaphore_value(&arena->sem), UNITS);
    CHECK_EQ(sync_semaphore_signal(&arena->sem, 1), EOVERFLOW);  /* the bound holds */
    CHECK_EQ(sync_condition_lock_try_lock(&arena->cl), 0);
    CHECK_EQ(sync_condition_lock_condition(&arena->cl), arena->condition);
    CHECK_EQ(sync_condition_lock_unlock(&arena->cl), 0);
    printf("%-16s %-8s %8ld operations\n", name, shared ? "shared" : "private", atomic_load(&arena->ops));
}

int main(void) {
    const char *s = getenv("SYNC_FUZZ_SECONDS"), *given = getenv("SYNC_FUZZ_SEED");
    double seconds = s ? atof(s) : 0.5;
    seed = given ? strtoull(given, NULL, 0) : (uint64_t)now_ns();
    setvbuf(stdout, NULL, _IOLBF, 0);  /* lines in order with other output, none left for a fork */
    printf("test_fuzz: seed %" PRIu64 " (SYNC_FUZZ_SEED), %.2f s per primitive and mode\n", seed, seconds);
    arena = mmap(NULL, sizeof *arena, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(arena != MAP_FAILED);
    struct { const char *name; void (*worker)(struct rng *); } primitives[] = {
        {"mutex", mutex_worker}, {"rwlock", rwlock_worker},
        {"semaphore", semaphore_worker}, {"condition lock", condition_lock_worker},
    };
    for (int i = 0; i < 4; i++)
        for (int shared = 0; shared <= 1; shared++) fuzz(primitives[i].name, primitives[i].worker, shared, seconds);
    DONE();
}
