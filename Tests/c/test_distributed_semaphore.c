/* The distributed counting semaphore from C, on every backend against a real store: the file system,
 * and private PostgreSQL, Redis and etcd servers (scripts/servers.sh starts them, or
 * LIBSYNC_TEST_SERVERS names a directory with running ones' postgres.url, redis.url and etcd.url).
 * At most N holders under contention between processes, distinct tokens growing per holder, a
 * SIGKILLed holder's permit recovered, timeouts, a count that disagrees, bad input. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#ifndef LIBSYNC_SOURCE_DIR
#error "LIBSYNC_SOURCE_DIR: the source tree (for scripts/servers.sh)"
#endif

enum backend { FILES, POSTGRES, REDIS, ETCD };
static const char *names[] = {"file system", "PostgreSQL", "Redis", "etcd"};
static const char *files[] = {NULL, "postgres", "redis", "etcd"};
static char servers[256];
static char base[4][512];
static char scratch[64];
static int serial;

static const int64_t S = 1000000000LL, MS = 1000000LL;

static void target(enum backend b, const char *extra, char *out, size_t size) {
    int n = ++serial;
    if (b == FILES) snprintf(out, size, "%s/sem%d", scratch, n);
    else snprintf(out, size, "%s?lock=csem%d-%d%s", base[b], (int)getpid(), n, extra ? extra : "");
}

static sync_distributed_semaphore_t *make(const char *t, int permits) {
    sync_distributed_semaphore_t *s = NULL;
    int err = sync_distributed_semaphore_create(t, permits, 0, &s);
    if (err) fprintf(stderr, "create %s: %d: %s\n", t, err, sync_distributed_lock_error_message());
    CHECK_EQ(err, 0);
    return s;
}

/* Shared with the children: how many hold now, the most seen, and every token. */
enum { WORKERS = 5, ROUNDS = 12, PERMITS = 2 };
struct shared {
    atomic_int inside, most;
    uint64_t tokens[WORKERS][ROUNDS];
};

static void test_at_most_n(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    pid_t children[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        children[w] = fork();
        CHECK(children[w] >= 0);
        if (children[w] == 0) {
            sync_distributed_semaphore_t *s = make(t, PERMITS);
            for (int r = 0; r < ROUNDS; r++) {
                int err = sync_distributed_semaphore_acquire(s, 120 * S, MS);
                if (err) { fprintf(stderr, "acquire: %d %s\n", err, sync_distributed_lock_error_message()); _exit(2); }
                int now = atomic_fetch_add(&sh->inside, 1) + 1;
                int most = atomic_load(&sh->most);
                while (now > most && !atomic_compare_exchange_weak(&sh->most, &most, now)) {}
                if (sync_distributed_semaphore_token(s, &sh->tokens[w][r]) != 0) _exit(3);
                sched_yield();
                atomic_fetch_sub(&sh->inside, 1);
                if (sync_distributed_semaphore_release(s) != 0) _exit(4);
            }
            sync_distributed_semaphore_destroy(s);
            _exit(0);
        }
    }
    for (int w = 0; w < WORKERS; w++) {
        int status;
        CHECK_EQ(waitpid(children[w], &status, 0), children[w]);
        CHECK_EQ(status, 0);
    }
    CHECK(atomic_load(&sh->most) <= PERMITS);
    for (int w = 0; w < WORKERS; w++)
        for (int r = 0; r < ROUNDS; r++) {
            if (r > 0) CHECK(sh->tokens[w][r] > sh->tokens[w][r - 1]);
            for (int v = 0; v < WORKERS; v++)
                for (int q = 0; q < ROUNDS; q++)
                    if (v != w || q != r) CHECK(sh->tokens[w][r] != sh->tokens[v][q]);
        }
    munmap(sh, sizeof *sh);
}

static void test_try_timeout_release(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_semaphore_t *a = make(t, 2), *c = make(t, 2), *w = make(t, 2);
    CHECK_EQ(sync_distributed_semaphore_permits(a), 2);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(a), 0);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(c), 0);
    uint64_t ta, tc, tw;
    CHECK_EQ(sync_distributed_semaphore_token(a, &ta), 0);
    CHECK_EQ(sync_distributed_semaphore_token(c, &tc), 0);
    CHECK(tc > ta);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(w), EBUSY);
    CHECK_EQ(sync_distributed_semaphore_acquire(w, 200 * MS, MS), ETIMEDOUT);
    CHECK_EQ(sync_distributed_semaphore_token(w, &tw), EPERM);
    CHECK(!sync_distributed_semaphore_is_held(w));
    CHECK_EQ(sync_distributed_semaphore_release(a), 0);
    CHECK_EQ(sync_distributed_semaphore_acquire(w, 60 * S, MS), 0);
    CHECK_EQ(sync_distributed_semaphore_token(w, &tw), 0);
    CHECK(tw > tc);
    CHECK(sync_distributed_semaphore_is_held(w));
    CHECK_EQ(sync_distributed_semaphore_hold_state(w), 0);
    CHECK_EQ(sync_distributed_semaphore_release(w), 0);
    CHECK_EQ(sync_distributed_semaphore_release(c), 0);
    sync_distributed_semaphore_destroy(a);
    sync_distributed_semaphore_destroy(c);
    sync_distributed_semaphore_destroy(w);
}

static void test_killed_holder(enum backend b) {
    char t[600];
    target(b, b == REDIS || b == ETCD ? "&ttl=1" : NULL, t, sizeof t);
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        sync_distributed_semaphore_t *s = make(t, 1);
        if (sync_distributed_semaphore_try_acquire(s) != 0) _exit(2);
        (void)!write(ready[1], "h", 1);
        for (;;) pause();
    }
    char byte;
    CHECK_EQ(read(ready[0], &byte, 1), 1);
    sync_distributed_semaphore_t *s = make(t, 1);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(s), EBUSY);
    CHECK_EQ(kill(child, SIGKILL), 0);
    CHECK_EQ(waitpid(child, NULL, 0), child);
    CHECK_EQ(sync_distributed_semaphore_acquire(s, 60 * S, 10 * MS), 0);
    CHECK_EQ(sync_distributed_semaphore_release(s), 0);
    sync_distributed_semaphore_destroy(s);
    close(ready[0]);
    close(ready[1]);
}

static void test_misuse(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_semaphore_t *s = (sync_distributed_semaphore_t *)1;
    CHECK_EQ(sync_distributed_semaphore_create(t, 0, 0, &s), EINVAL);
    CHECK(s == NULL);
    CHECK_EQ(sync_distributed_semaphore_create(t, -3, 0, &s), EINVAL);
    CHECK_EQ(sync_distributed_semaphore_create(t, SYNC_DISTRIBUTED_SEMAPHORE_MAX_PERMITS + 1, 0, &s), EINVAL);
    CHECK(strstr(sync_distributed_lock_error_message(), "permits") != NULL);
    CHECK_EQ(sync_distributed_semaphore_create(t, 2, SYNC_DISTRIBUTED_LOCK_RECURSIVE, &s), EINVAL);
    CHECK_EQ(sync_distributed_semaphore_create(NULL, 2, 0, &s), EINVAL);
    CHECK_EQ(sync_distributed_semaphore_create(t, 2, 0, NULL), EINVAL);
    s = make(t, 3);
    CHECK_EQ(sync_distributed_semaphore_release(s), EPERM);
    CHECK_EQ(sync_distributed_semaphore_acquire(s, S, 0), EINVAL);  /* poll <= 0 */
    CHECK_EQ(sync_distributed_semaphore_try_acquire(s), 0);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(s), EDEADLK);
    sync_distributed_semaphore_t *other = make(t, 4);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(other), EINVAL);  /* the holders say 3 */
    CHECK(strstr(sync_distributed_lock_error_message(), "has 3 permits") != NULL);
    CHECK_EQ(sync_distributed_semaphore_acquire(other, S, MS), EINVAL);
    CHECK_EQ(sync_distributed_semaphore_release(s), 0);
    CHECK_EQ(sync_distributed_semaphore_release(s), EPERM);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(other), 0);  /* none held: 4 now */
    CHECK_EQ(sync_distributed_semaphore_release(other), 0);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(NULL), EINVAL);
    CHECK_EQ(sync_distributed_semaphore_release(NULL), EINVAL);
    CHECK_EQ(sync_distributed_semaphore_permits(NULL), -1);
    CHECK(sync_distributed_semaphore_path(NULL) == NULL);
    CHECK(strncmp(sync_distributed_semaphore_path(s), b == FILES ? "/" : files[b], b == FILES ? 1 : 4) == 0);
    sync_distributed_semaphore_destroy(s);
    sync_distributed_semaphore_destroy(other);
    sync_distributed_semaphore_destroy(NULL);
}

/* A broken permit: the holder's release says ESTALE, and its hold state says LOST first
 * (Redis: at its next renewal; the others at once or within their watch's period). */
static void test_broken(enum backend b) {
    char t[600];
    target(b, b == REDIS ? "&ttl=0.3" : NULL, t, sizeof t);
    sync_distributed_semaphore_t *s = make(t, 2), *breaker = make(t, 2);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(s), 0);
    CHECK_EQ(sync_distributed_semaphore_break(breaker), 0);
    for (int i = 0; i < 60000 && sync_distributed_semaphore_hold_state(s) != SYNC_DISTRIBUTED_LOCK_LOST; i++) {
        if (b == POSTGRES) (void)sync_distributed_semaphore_is_held(s);
        struct timespec pause_ = {0, 1000000};
        nanosleep(&pause_, NULL);
    }
    CHECK_EQ(sync_distributed_semaphore_hold_state(s), SYNC_DISTRIBUTED_LOCK_LOST);
    CHECK_EQ(sync_distributed_semaphore_release(s), ESTALE);
    CHECK_EQ(sync_distributed_semaphore_try_acquire(s), 0);
    CHECK_EQ(sync_distributed_semaphore_release(s), 0);
    sync_distributed_semaphore_destroy(s);
    sync_distributed_semaphore_destroy(breaker);
}

static void read_url(const char *name, char *out, size_t size) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s.url", servers, name);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    CHECK(fgets(out, (int)size, f) != NULL);
    out[strcspn(out, "\n")] = 0;
    fclose(f);
}

static void stop_servers(void) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s; rm -rf %s", LIBSYNC_SOURCE_DIR, servers, servers);
    (void)!system(command);
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/libsync-sem-XXXXXX");
    CHECK(mkdtemp(scratch) != NULL);
    int have_servers = 1;
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    char probe[400];
    snprintf(probe, sizeof probe, "%s/etcd.url", given ? given : "");
    if (given && access(probe, R_OK) == 0) {
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-servers-XXXXXX");
        CHECK(mkdtemp(servers) != NULL);
        char command[600];
        snprintf(command, sizeof command, "%s/scripts/servers.sh start %s && %s/scripts/servers.sh start-etcd %s",
                 LIBSYNC_SOURCE_DIR, servers, LIBSYNC_SOURCE_DIR, servers);
        int status = system(command);
        atexit(stop_servers);
        if (status != 0) {
            have_servers = 0;
            fprintf(stderr, "\n!!!!!! SKIPPING the server backends: scripts/servers.sh failed (status %d) !!!!!!\n\n", status);
        }
    }
    if (have_servers)
        for (int b = POSTGRES; b <= ETCD; b++) read_url(files[b], base[b], sizeof base[b]);
    for (int b = FILES; b <= (have_servers ? ETCD : FILES); b++) {
        printf("== %s\n", names[b]);
        fflush(stdout);
        test_misuse(b);
        test_try_timeout_release(b);
        test_at_most_n(b);
        test_killed_holder(b);
        test_broken(b);
    }
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", scratch);
    CHECK_EQ(system(command), 0);
    if (!have_servers) return 77;
    printf("test_distributed_semaphore: ok\n");
    return 0;
}
