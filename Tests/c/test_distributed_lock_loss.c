/* Loss notification from C (sync_distributed_lock_set_event_handler, sync_distributed_lock_lost,
 * sync_distributed_lock_hold_state) through real faults on each backend: the file system's lock
 * broken by another process while its holder is stopped; PostgreSQL's session terminated by
 * another process, and its server restarted; Redis's key deleted, its lease run out while the
 * holder was stopped, and its server stopped (SUSPENDED) and resumed. A hold released normally is
 * never reported; destroy waits for a running handler. Private servers from scripts/servers.sh
 * (or LIBSYNC_TEST_SERVERS); the bounds only guard against a hang. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "distributed_support.h"

#ifndef LIBSYNC_SOURCE_DIR
#error "LIBSYNC_SOURCE_DIR: the source tree (for scripts/servers.sh)"
#endif

enum backend { FILES, POSTGRES, REDIS };
static const char *names[] = {"file system", "PostgreSQL", "Redis"};
static char servers[256];
static char base[3][512];
static char scratch[64];
static int lock_serial;
static const int64_t S = 1000000000LL;

static void target(enum backend b, const char *extra, char *out, size_t size) {
    int n = ++lock_serial;
    if (b == FILES) snprintf(out, size, "%s/lock%d", scratch, n);
    else snprintf(out, size, "%s?lock=loss%d-%d%s", base[b], (int)getpid(), n, extra ? extra : "");
}

static void control(const char *what, enum backend b) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh %s %s %s", LIBSYNC_SOURCE_DIR, what,
             b == POSTGRES ? "postgres" : "redis", servers);
    CHECK_EQ(system(command), 0);
}

/* What a handler saw: the events in order (a pipe, so a test can wait for the next one). */
struct seen {
    int pipe[2];
    sync_distributed_lock_t *lock;
    atomic_int wrong_lock;
    atomic_int lost_at_call;  /* sync_distributed_lock_lost() as the handler saw it, for LOST */
};

static void record(sync_distributed_lock_t *lock, int event, void *context) {
    struct seen *seen = context;
    if (lock != seen->lock) atomic_store(&seen->wrong_lock, 1);
    if (event == SYNC_DISTRIBUTED_LOCK_LOST) atomic_store(&seen->lost_at_call, sync_distributed_lock_lost(lock));
    char byte = (char)event;
    if (write(seen->pipe[1], &byte, 1) != 1) abort();
}

static void watch(struct seen *seen, sync_distributed_lock_t *lock) {
    memset(seen, 0, sizeof *seen);
    CHECK_EQ(pipe(seen->pipe), 0);
    seen->lock = lock;
    CHECK_EQ(sync_distributed_lock_set_event_handler(lock, record, seen), 0);
}

static void unwatch(struct seen *seen) {
    close(seen->pipe[0]);
    close(seen->pipe[1]);
}

/* The next event, waiting up to `seconds` (0: none came). */
static int next_event(struct seen *seen, int seconds) {
    struct timeval until = {seconds, 0};
    fd_set ready;
    FD_ZERO(&ready);
    FD_SET(seen->pipe[0], &ready);
    if (select(seen->pipe[0] + 1, &ready, NULL, NULL, &until) != 1) return 0;
    char byte = 0;
    CHECK_EQ(read(seen->pipe[0], &byte, 1), 1);
    return byte;
}

/* Another object breaks the hold (file: removes the entry; PostgreSQL: pg_terminate_backend of
 * the holder's session; Redis: DEL): LOST once, `lost` set; unlock says ESTALE; the next
 * acquisition starts afresh. */
static void test_broken(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    struct seen seen;
    watch(&seen, a);
    CHECK_EQ(sync_distributed_lock_hold_state(a), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK(!sync_distributed_lock_lost(a));
    CHECK_EQ(sync_distributed_lock_break(c), 0);
    CHECK_EQ(next_event(&seen, 60), SYNC_DISTRIBUTED_LOCK_LOST);
    CHECK(atomic_load(&seen.lost_at_call));
    CHECK(!atomic_load(&seen.wrong_lock));
    CHECK(sync_distributed_lock_lost(a));
    CHECK_EQ(sync_distributed_lock_hold_state(a), SYNC_DISTRIBUTED_LOCK_LOST);
    CHECK_EQ(sync_distributed_lock_unlock(a), ESTALE);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK(!sync_distributed_lock_lost(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK(!sync_distributed_lock_lost(a));
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
    CHECK_EQ(next_event(&seen, 0), 0);  /* (destroy returned: no handler call can follow) */
    unwatch(&seen);
}

/* Holds released normally, short and past the detectors' looks, are never reported. */
static void test_released_is_not_lost(enum backend b) {
    char t[600];
    target(b, b == REDIS ? "&ttl=0.3" : NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    struct seen seen;
    watch(&seen, a);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
        usleep(600000);  /* past the file watcher's look (250 ms) and two Redis renewals */
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        for (int i = 0; i < 100; i++) {
            CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
            CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        }
    }
    usleep(600000);
    CHECK_EQ(next_event(&seen, 0), 0);
    CHECK(!sync_distributed_lock_lost(a));
    sync_distributed_lock_destroy(a);
    unwatch(&seen);
}

/* A child holds `t` with a handler that writes each event to `out`, then stops itself. */
static pid_t spawn_stopped_holder(const char *t, int out) {
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(120);
        sync_distributed_lock_t *lock = make_lock(t);
        static struct seen seen;
        seen.pipe[1] = out;
        seen.lock = lock;
        sync_distributed_lock_set_event_handler(lock, record, &seen);
        report_try_lock(ready[1], lock);
        raise(SIGSTOP);
        for (;;) pause();
    }
    expect_holding(ready[0]);
    close(ready[0]);
    close(ready[1]);
    int status;
    CHECK_EQ(waitpid(child, &status, WUNTRACED), child);
    CHECK(WIFSTOPPED(status));
    return child;
}

/* The holder is stopped; meanwhile it loses the lock to another process (file: broken and
 * taken; Redis: its lease runs out and another takes it). Resumed, it is told LOST. */
static void test_stopped_holder(enum backend b) {
    char t[600];
    target(b, b == REDIS ? "&ttl=0.3" : NULL, t, sizeof t);
    struct seen seen;
    memset(&seen, 0, sizeof seen);
    CHECK_EQ(pipe(seen.pipe), 0);
    pid_t holder = spawn_stopped_holder(t, seen.pipe[1]);
    sync_distributed_lock_t *c = make_lock(t);
    if (b == FILES) CHECK_EQ(sync_distributed_lock_break(c), 0);
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() + 60 * S, 1000000), 0);
    kill(holder, SIGCONT);
    CHECK_EQ(next_event(&seen, 60), SYNC_DISTRIBUTED_LOCK_LOST);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    sync_distributed_lock_destroy(c);
    unwatch(&seen);
}

/* PostgreSQL: a restart ends the holder's session: LOST. */
static void test_postgres_restart(void) {
    char t[600];
    target(POSTGRES, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    struct seen seen;
    watch(&seen, a);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    control("restart", POSTGRES);
    CHECK_EQ(next_event(&seen, 60), SYNC_DISTRIBUTED_LOCK_LOST);
    CHECK(sync_distributed_lock_lost(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), ESTALE);
    sync_distributed_lock_destroy(a);
    unwatch(&seen);
}

/* Redis: a stopped server makes the hold SUSPENDED (a renewal got no answer: the connect
 * timeout is below the ttl), and once it answers again RESUMED (the lease outlived the pause;
 * on a machine that stalled for the whole ttl, LOST instead, which is also a correct report). */
static void test_redis_suspended(void) {
    char t[600];
    target(REDIS, "&ttl=3&connect_timeout=0.2", t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    struct seen seen;
    watch(&seen, a);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    control("pause", REDIS);
    int first = next_event(&seen, 60);
    int state = sync_distributed_lock_hold_state(a);
    control("resume", REDIS);
    CHECK_EQ(first, SYNC_DISTRIBUTED_LOCK_SUSPENDED);
    CHECK_EQ(state, SYNC_DISTRIBUTED_LOCK_SUSPENDED);
    int second = next_event(&seen, 60);
    CHECK(second == SYNC_DISTRIBUTED_LOCK_RESUMED || second == SYNC_DISTRIBUTED_LOCK_LOST);
    if (second == SYNC_DISTRIBUTED_LOCK_RESUMED) {
        CHECK_EQ(sync_distributed_lock_hold_state(a), 0);
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    }
    sync_distributed_lock_destroy(a);
    unwatch(&seen);
}

/* destroy waits for a running handler (its context may be freed after it), and a handler may
 * destroy its own object. */
static atomic_int in_handler, handler_done;

static void slow(sync_distributed_lock_t *lock, int event, void *context) {
    (void)lock; (void)event; (void)context;
    atomic_store(&in_handler, 1);
    usleep(200000);
    atomic_store(&handler_done, 1);
}

static void self_destroying(sync_distributed_lock_t *lock, int event, void *context) {
    (void)event;
    sync_distributed_lock_destroy(lock);
    atomic_store((atomic_int *)context, 1);
}

static void test_destroy_waits_for_the_handler(void) {
    char t[600];
    target(FILES, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    CHECK_EQ(sync_distributed_lock_set_event_handler(a, slow, NULL), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_break(c), 0);
    while (!atomic_load(&in_handler)) usleep(1000);
    sync_distributed_lock_destroy(a);
    CHECK(atomic_load(&handler_done));  /* destroy returned after the handler did */

    atomic_int destroyed = 0;
    sync_distributed_lock_t *d = make_lock(t);
    CHECK_EQ(sync_distributed_lock_set_event_handler(d, self_destroying, &destroyed), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(d), 0);
    CHECK_EQ(sync_distributed_lock_break(c), 0);
    for (int i = 0; i < 60000 && !atomic_load(&destroyed); i++) usleep(1000);
    CHECK(atomic_load(&destroyed));
    CHECK_EQ(sync_distributed_lock_set_event_handler(NULL, slow, NULL), EINVAL);
    CHECK_EQ(sync_distributed_lock_hold_state(NULL), 0);
    CHECK(!sync_distributed_lock_lost(NULL));
    sync_distributed_lock_destroy(c);
}

/* A handler that ends its thread (pthread_exit; Python does so to a thread that asks for the GIL
 * while the interpreter exits) counts as returned: set_event_handler and destroy do not wait
 * forever, and the next event is handled on a new thread. */
static atomic_int ended, handled_after;

static void ending(sync_distributed_lock_t *lock, int event, void *context) {
    (void)lock; (void)event; (void)context;
    atomic_store(&ended, 1);
    pthread_exit(NULL);
}

static void counting(sync_distributed_lock_t *lock, int event, void *context) {
    (void)lock; (void)context;
    if (event == SYNC_DISTRIBUTED_LOCK_LOST) atomic_store(&handled_after, 1);
}

static void test_handler_that_ends_its_thread(void) {
    char t[600];
    target(FILES, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    CHECK_EQ(sync_distributed_lock_set_event_handler(a, ending, NULL), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_break(c), 0);
    for (int i = 0; i < 60000 && !atomic_load(&ended); i++) usleep(1000);
    CHECK(atomic_load(&ended));
    CHECK_EQ(sync_distributed_lock_set_event_handler(a, NULL, NULL), 0);  /* returns: no handler runs */
    sync_distributed_lock_destroy(a);

    sync_distributed_lock_t *d = make_lock(t);
    CHECK_EQ(sync_distributed_lock_set_event_handler(d, counting, NULL), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(d), 0);
    CHECK_EQ(sync_distributed_lock_break(c), 0);
    for (int i = 0; i < 60000 && !atomic_load(&handled_after); i++) usleep(1000);
    CHECK(atomic_load(&handled_after));  /* a new notifier thread */
    sync_distributed_lock_destroy(d);
    sync_distributed_lock_destroy(c);
}

static void read_url(const char *name, char *out, size_t size) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s.url", servers, name);
    FILE *file = fopen(path, "r");
    CHECK(file != NULL);
    CHECK(fgets(out, (int)size, file) != NULL);
    fclose(file);
    out[strcspn(out, "\n")] = 0;
}

static void stop_servers(void) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s; rm -rf %s", LIBSYNC_SOURCE_DIR, servers, servers);
    (void)!system(command);
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/libsync-loss-XXXXXX");
    CHECK(mkdtemp(scratch) != NULL);
    int have_servers = 1;
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    if (given) {
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-servers-XXXXXX");
        CHECK(mkdtemp(servers) != NULL);
        char command[600];
        snprintf(command, sizeof command, "%s/scripts/servers.sh start %s", LIBSYNC_SOURCE_DIR, servers);
        int status = system(command);
        if (status != 0) {
            have_servers = 0;
            fprintf(stderr, "\n!!!!!! SKIPPING the PostgreSQL and Redis backends: their servers could not be "
                            "installed or started (scripts/servers.sh: status %d) !!!!!!\n\n", status);
        } else {
            atexit(stop_servers);
        }
    }
    if (have_servers) {
        read_url("postgres", base[POSTGRES], sizeof base[POSTGRES]);
        read_url("redis", base[REDIS], sizeof base[REDIS]);
    }
    for (int b = FILES; b <= (have_servers ? REDIS : FILES); b++) {
        printf("== %s\n", names[b]);
        fflush(stdout);
        test_broken(b);
        test_released_is_not_lost(b);
        if (b != POSTGRES) test_stopped_holder(b);
    }
    test_destroy_waits_for_the_handler();
    test_handler_that_ends_its_thread();
    if (have_servers) {
        test_postgres_restart();
        test_redis_suspended();
    }
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", scratch);
    CHECK_EQ(system(command), 0);
    if (!have_servers) {
        printf("test_distributed_lock_loss: the server backends were SKIPPED\n");
        return 77;
    }
    DONE();
}
