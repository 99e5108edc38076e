/* The distributed lock from an event loop (sync/async.h, sync_distributed_lock_lock_async) on
 * every backend: the file system, and private PostgreSQL, Redis and etcd servers
 * (scripts/servers.sh starts them, or LIBSYNC_TEST_SERVERS names running ones). Per backend:
 * taken at once or pending, completion by eventfd and by callback, a release by another
 * object (and, for files, another process) completing a pending acquire, a timeout, a
 * cancellation, a grant racing a cancellation (never left held), owners (re-entry refused,
 * release by the owner only, tokens), a killed holder (files: recovered), bad input. No test
 * asserts a time: each waits for an observable state, with bounds that only guard a hang. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "distributed_support.h"

#ifndef LIBSYNC_SOURCE_DIR
#error "LIBSYNC_SOURCE_DIR: the source tree (for scripts/servers.sh)"
#endif

enum backend { FILES, POSTGRES, REDIS, ETCD, BACKENDS };
static const char *names[] = {"file system", "PostgreSQL", "Redis", "etcd"};
static const char *url_names[] = {"", "postgres", "redis", "etcd"};
static char base[BACKENDS][512];   /* per backend: the target without the lock's name ("" none) */
static char scratch[64];
static char servers[256];
static int started_servers, started_etcd, lock_serial;

static const int64_t S = 1000000000LL, MS = 1000000LL;

static void target(enum backend b, char *out, size_t size) {
    int n = ++lock_serial;
    if (b == FILES) snprintf(out, size, "%s/lock%d", scratch, n);
    else snprintf(out, size, "%s%slock=async%d-%d", base[b], strchr(base[b], '?') ? "&" : "?", (int)getpid(), n);
}

/* Waits (a minute at most: a hang guard) until `handle` completes, its eventfd `fd` readable;
 * returns its result. */
static int await_completion(sync_async_t *handle, int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int waited = 0; sync_async_result(handle) == EINPROGRESS; waited++) {
        CHECK(waited < 600);
        if (poll(&p, 1, 100) == 1) {
            uint64_t n;
            CHECK_EQ(read(fd, &n, 8), 8);
        }
    }
    return sync_async_result(handle);
}

/* Starts an acquire of `lock` and waits for its outcome: 0 (held by the returned handle) or the error. */
static int acquire(sync_distributed_lock_t *lock, int64_t deadline, int fd, sync_async_t **handle) {
    int rc = sync_distributed_lock_lock_async(lock, deadline, 10 * MS, fd, NULL, NULL, handle);
    if (rc != EINPROGRESS) return rc;
    return await_completion(*handle, fd);
}

/* Bad input: EINVAL, nothing made. */
static void test_bad_input(void) {
    char t[600];
    target(FILES, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t);
    sync_async_t *handle = (sync_async_t *)1;
    CHECK_EQ(sync_distributed_lock_lock_async(NULL, -1, MS, -1, NULL, NULL, &handle), EINVAL);
    CHECK(handle == NULL);
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, MS, -1, NULL, NULL, NULL), EINVAL);
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, 0, -1, NULL, NULL, &handle), EINVAL);
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, -5, -1, NULL, NULL, &handle), EINVAL);
    CHECK_EQ(sync_distributed_lock_lock_async_owner(lock, -1, MS, -1, NULL, NULL, 0, &handle), EINVAL);
    CHECK(handle == NULL);
    CHECK_EQ(sync_distributed_lock_unlock_async(lock, 0), EINVAL);
    CHECK_EQ(sync_distributed_lock_unlock_async(NULL, 7), EINVAL);
    CHECK_EQ(sync_distributed_lock_unlock_async(lock, 7), EPERM);
    CHECK_EQ(sync_distributed_lock_count_async(lock, 7), 0);
    CHECK(!sync_distributed_lock_is_held_async(lock, 7));
    uint64_t token;
    CHECK_EQ(sync_distributed_lock_token_async(lock, 7, &token), EPERM);
    CHECK_EQ(sync_distributed_lock_token_async(lock, 7, NULL), EINVAL);
    sync_distributed_lock_destroy(lock);
}

/* Free: taken (files at once, servers after EINPROGRESS); the handle holds it, not the thread. */
static void test_free_and_holder(enum backend b, int fd) {
    char t[600];
    target(b, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t), *other = make_lock(t);
    sync_async_t *handle = NULL;
    int rc = sync_distributed_lock_lock_async(lock, -1, 10 * MS, fd, NULL, NULL, &handle);
    CHECK(handle != NULL);
    if (b == FILES) CHECK_EQ(rc, 0);
    else CHECK_EQ(rc, EINPROGRESS);
    CHECK_EQ(await_completion(handle, fd), 0);
    uintptr_t me = (uintptr_t)handle;
    CHECK_EQ(sync_distributed_lock_count_async(lock, me), 1);
    CHECK(sync_distributed_lock_is_held_async(lock, me));
    uint64_t token = 0;
    CHECK_EQ(sync_distributed_lock_token_async(lock, me, &token), 0);
    CHECK(token > 0);
    CHECK_EQ(sync_distributed_lock_try_lock(other), EBUSY);
    CHECK_EQ(sync_distributed_lock_unlock(lock), EPERM);    /* the thread is not the holder */
    CHECK_EQ(sync_async_free(handle), EBUSY);               /* it holds the lock */
    CHECK_EQ(sync_async_cancel(handle), EALREADY);
    CHECK_EQ(sync_async_result(handle), 0);
    CHECK_EQ(sync_async_unlock(other, handle), EPERM);      /* another lock's object */
    CHECK_EQ(sync_async_unlock(lock, handle), 0);
    CHECK_EQ(sync_async_unlock(lock, handle), EPERM);
    CHECK_EQ(sync_async_free(handle), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    sync_distributed_lock_destroy(other);
    sync_distributed_lock_destroy(lock);
}

/* Held by another object: pending; its release completes the acquire (eventfd), or the
 * deadline (ETIMEDOUT, nothing held). */
static void test_pending_then_granted_or_timed_out(enum backend b, int fd) {
    char t[600];
    target(b, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t), *other = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    sync_async_t *handle = NULL;
    CHECK_EQ(acquire(lock, sync_monotonic_ns() + 30 * MS, fd, &handle), ETIMEDOUT);
    if (handle) CHECK_EQ(sync_async_free(handle), 0);
    handle = NULL;
    CHECK_EQ(sync_distributed_lock_lock_async(lock, sync_monotonic_ns() - S, 10 * MS, fd, NULL, NULL, &handle) == ETIMEDOUT
                 || await_completion(handle, fd) == ETIMEDOUT, 1);  /* a passed deadline: one try */
    if (handle) CHECK_EQ(sync_async_free(handle), 0);
    handle = NULL;
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, 10 * MS, fd, NULL, NULL, &handle), EINPROGRESS);
    CHECK_EQ(sync_async_free(handle), EBUSY);  /* pending */
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    CHECK_EQ(await_completion(handle, fd), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(other), EBUSY);
    CHECK_EQ(sync_async_unlock(lock, handle), 0);
    CHECK_EQ(sync_async_free(handle), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    sync_distributed_lock_destroy(other);
    sync_distributed_lock_destroy(lock);
}

/* Cancelled while pending: 0, ECANCELED, no completion; the lock is free for others after. */
static void test_cancel(enum backend b, int fd) {
    char t[600];
    target(b, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t), *other = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    sync_async_t *handle = NULL;
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, 10 * MS, fd, NULL, NULL, &handle), EINPROGRESS);
    CHECK_EQ(sync_async_cancel(handle), 0);
    CHECK_EQ(sync_async_result(handle), ECANCELED);
    CHECK_EQ(sync_async_cancel(handle), EALREADY);
    CHECK_EQ(sync_async_free(handle), 0);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    /* Nobody holds it for the withdrawn acquire: another object takes it (a minute: a hang guard). */
    CHECK_EQ(sync_distributed_lock_lock_until(other, sync_monotonic_ns() + 60 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    sync_distributed_lock_destroy(other);
    sync_distributed_lock_destroy(lock);
}

struct seen {
    atomic_int calls, result;
};

static void record(sync_async_t *handle, int result, void *context) {
    struct seen *seen = context;
    CHECK(handle != NULL);
    atomic_store(&seen->result, result);
    atomic_fetch_add(&seen->calls, 1);
}

/* A release and a cancel racing: either the cancel wins (ECANCELED, no callback, and the grant,
 * if the try was under way, released) or the grant does (EALREADY, result 0, the handle holds
 * it). Either way, afterwards another object takes the lock: it was never left held. */
static void test_grant_racing_cancel(enum backend b, int rounds) {
    char t[600];
    target(b, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t), *other = make_lock(t);
    int cancelled = 0, granted = 0;
    for (int round = 0; round < rounds; round++) {
        CHECK_EQ(sync_distributed_lock_lock_until(other, sync_monotonic_ns() + 60 * S, MS), 0);
        struct seen seen = {0};
        sync_async_t *handle = NULL;
        CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, MS, -1, record, &seen, &handle), EINPROGRESS);
        CHECK_EQ(sync_distributed_lock_unlock(other), 0);
        if (round % 3 == 1) usleep((useconds_t)(round % 7) * 100);  /* vary where the cancel lands */
        int rc = sync_async_cancel(handle);
        if (rc == 0) {
            cancelled++;
            CHECK_EQ(sync_async_result(handle), ECANCELED);
            CHECK_EQ(sync_async_free(handle), 0);
        } else {
            CHECK_EQ(rc, EALREADY);
            granted++;
            CHECK_EQ(sync_async_result(handle), 0);
            for (int waited = 0; atomic_load(&seen.calls) == 0; waited++) {  /* its delivery may be under way */
                CHECK(waited < 60000);
                usleep(1000);
            }
            CHECK_EQ(atomic_load(&seen.result), 0);
            CHECK_EQ(sync_async_unlock(lock, handle), 0);
            CHECK_EQ(sync_async_free(handle), 0);
        }
        /* The lock is taken by the other object: a cancelled grant was given back. */
        CHECK_EQ(sync_distributed_lock_lock_until(other, sync_monotonic_ns() + 60 * S, MS), 0);
        CHECK_EQ(sync_distributed_lock_unlock(other), 0);
        if (rc == 0) CHECK_EQ(atomic_load(&seen.calls), 0);  /* a cancelled acquire reports nothing */
    }
    CHECK_EQ(cancelled + granted, rounds);
    sync_distributed_lock_destroy(other);
    sync_distributed_lock_destroy(lock);
}

/* Owners: the lock held for an owner value, re-entry refused (EDEADLK), released by it only. */
static void test_owners(enum backend b, int fd) {
    char t[600];
    target(b, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t);
    uintptr_t owner = 0x5151, stranger = 0x6161;
    sync_async_t *handle = NULL;
    int rc = sync_distributed_lock_lock_async_owner(lock, -1, 10 * MS, fd, NULL, NULL, owner, &handle);
    if (rc == EINPROGRESS) rc = await_completion(handle, fd);
    CHECK_EQ(rc, 0);
    CHECK_EQ(sync_async_free(handle), 0);  /* the owner holds it, not the handle */
    CHECK_EQ(sync_distributed_lock_count_async(lock, owner), 1);
    CHECK_EQ(sync_distributed_lock_count_async(lock, stranger), 0);
    handle = NULL;
    rc = sync_distributed_lock_lock_async_owner(lock, -1, 10 * MS, fd, NULL, NULL, owner, &handle);
    if (rc == EINPROGRESS) rc = await_completion(handle, fd);
    CHECK_EQ(rc, EDEADLK);
    if (handle) CHECK_EQ(sync_async_free(handle), 0);
    CHECK_EQ(sync_distributed_lock_unlock_async(lock, stranger), EPERM);
    CHECK_EQ(sync_distributed_lock_unlock(lock), EPERM);
    /* A stranger waits for the owner's release, through the same object. */
    handle = NULL;
    CHECK_EQ(sync_distributed_lock_lock_async_owner(lock, -1, 10 * MS, fd, NULL, NULL, stranger, &handle), EINPROGRESS);
    CHECK_EQ(sync_distributed_lock_unlock_async(lock, owner), 0);
    CHECK_EQ(await_completion(handle, fd), 0);
    CHECK_EQ(sync_async_free(handle), 0);
    CHECK(sync_distributed_lock_is_held_async(lock, stranger));
    CHECK_EQ(sync_distributed_lock_unlock_all_async(lock, stranger), 0);
    CHECK(!sync_distributed_lock_is_held_async(lock, stranger));
    sync_distributed_lock_destroy(lock);

    /* Recursive: each acquire by the owner counts. */
    sync_distributed_lock_t *recursive = NULL;
    CHECK_EQ(sync_distributed_lock_create_with(t, SYNC_DISTRIBUTED_LOCK_RECURSIVE, -1, &recursive), 0);
    for (int i = 0; i < 2; i++) {
        handle = NULL;
        rc = sync_distributed_lock_lock_async_owner(recursive, -1, 10 * MS, fd, NULL, NULL, owner, &handle);
        if (rc == EINPROGRESS) rc = await_completion(handle, fd);
        CHECK_EQ(rc, 0);
        CHECK_EQ(sync_async_free(handle), 0);
    }
    CHECK_EQ(sync_distributed_lock_count_async(recursive, owner), 2);
    CHECK_EQ(sync_distributed_lock_unlock_async(recursive, owner), 0);
    CHECK_EQ(sync_distributed_lock_unlock_async(recursive, owner), 0);
    CHECK_EQ(sync_distributed_lock_unlock_async(recursive, owner), EPERM);
    sync_distributed_lock_destroy(recursive);
}

/* Files: a holder in another process releases (woken through inotify), then one is SIGKILLed
 * while holding (its lock taken over by a later try). */
static void test_other_process(int fd) {
    char t[600];
    target(FILES, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t);
    int go[2], ready[2];
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(120);
        sync_distributed_lock_t *mine = make_lock(t);
        report_try_lock(ready[1], mine);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(3);
        _exit(sync_distributed_lock_unlock(mine) == 0 ? 0 : 4);
    }
    expect_holding(ready[0]);
    sync_async_t *handle = NULL;
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, 60 * S, fd, NULL, NULL, &handle), EINPROGRESS);
    CHECK_EQ(write(go[1], "g", 1), 1);
    CHECK_EQ(await_completion(handle, fd), 0);  /* woken by the release, not the minute's poll */
    wait_ok(child);
    CHECK_EQ(sync_async_unlock(lock, handle), 0);
    CHECK_EQ(sync_async_free(handle), 0);

    pid_t holder = spawn_holder(t);
    handle = NULL;
    CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, 5 * MS, fd, NULL, NULL, &handle), EINPROGRESS);
    kill(holder, SIGKILL);
    CHECK_EQ(waitpid(holder, NULL, 0), holder);
    CHECK_EQ(await_completion(handle, fd), 0);  /* the dead holder's lock taken over */
    CHECK_EQ(sync_async_unlock(lock, handle), 0);
    CHECK_EQ(sync_async_free(handle), 0);
    close(go[0]); close(go[1]); close(ready[0]); close(ready[1]);
    sync_distributed_lock_destroy(lock);
}

/* Many pending acquires of one object, one eventfd: each granted in turn, one at a time. */
static void test_many_pending(enum backend b, int fd) {
    char t[600];
    target(b, t, sizeof t);
    sync_distributed_lock_t *lock = make_lock(t), *other = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    enum { N = 16 };
    sync_async_t *handles[N];
    for (int i = 0; i < N; i++) CHECK_EQ(sync_distributed_lock_lock_async(lock, -1, MS, fd, NULL, NULL, &handles[i]), EINPROGRESS);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int done = 0, waited = 0; done < N; waited++) {
        CHECK(waited < 6000);
        if (poll(&p, 1, 10) == 1) {
            uint64_t n;
            CHECK_EQ(read(fd, &n, 8), 8);
        }
        int holding = 0;
        for (int i = 0; i < N; i++) {
            if (!handles[i] || sync_async_result(handles[i]) == EINPROGRESS) continue;
            CHECK_EQ(sync_async_result(handles[i]), 0);
            holding++;
        }
        CHECK(holding <= 1);  /* one holder at a time */
        for (int i = 0; i < N; i++) {
            if (!handles[i] || sync_async_result(handles[i]) == EINPROGRESS) continue;
            CHECK_EQ(sync_async_unlock(lock, handles[i]), 0);
            CHECK_EQ(sync_async_free(handles[i]), 0);
            handles[i] = NULL;
            done++;
        }
    }
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    sync_distributed_lock_destroy(other);
    sync_distributed_lock_destroy(lock);
}

static void stop_servers(void) {
    char command[700];
    if (started_servers) {
        snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s", LIBSYNC_SOURCE_DIR, servers);
        if (system(command) != 0) fprintf(stderr, "stopping the servers failed\n");
    }
    if (started_servers || started_etcd) {
        snprintf(command, sizeof command, "rm -rf %s", servers);
        if (system(command) != 0) fprintf(stderr, "removing %s failed\n", servers);
    }
}

static void read_base(enum backend b) {
    char file[400];
    snprintf(file, sizeof file, "%s/%s.url", servers, url_names[b]);
    FILE *f = fopen(file, "r");
    if (!f) return;
    if (fgets(base[b], sizeof base[b], f) == NULL) base[b][0] = 0;
    base[b][strcspn(base[b], "\n")] = 0;
    fclose(f);
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/libsync-dasync-XXXXXX");
    CHECK(mkdtemp(scratch) != NULL);
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    char command[700];
    if (given) {
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-servers-XXXXXX");
        CHECK(mkdtemp(servers) != NULL);
        atexit(stop_servers);
        snprintf(command, sizeof command, "%s/scripts/servers.sh start %s", LIBSYNC_SOURCE_DIR, servers);
        started_servers = system(command) == 0;
    }
    snprintf(command, sizeof command, "%s/%s.url", servers, "etcd");
    if (!given && access(command, R_OK) != 0) {
        snprintf(command, sizeof command, "%s/scripts/servers.sh start-etcd %s", LIBSYNC_SOURCE_DIR, servers);
        started_etcd = system(command) == 0;
        started_servers |= started_etcd;
    }
    for (int b = POSTGRES; b < BACKENDS; b++) read_base(b);
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    CHECK(fd >= 0);
    test_bad_input();
    int skipped = 0;
    for (int b = FILES; b < BACKENDS; b++) {
        if (b != FILES && !base[b][0]) {
            fprintf(stderr, "\n!!!!!! SKIPPING %s: its server could not be started !!!!!!\n\n", names[b]);
            skipped = 1;
            continue;
        }
        printf("== %s\n", names[b]);
        fflush(stdout);
        test_free_and_holder(b, fd);
        test_pending_then_granted_or_timed_out(b, fd);
        test_cancel(b, fd);
        test_grant_racing_cancel(b, b == FILES ? 200 : 40);
        test_owners(b, fd);
        test_many_pending(b, fd);
        if (b == FILES) test_other_process(fd);
    }
    close(fd);
    snprintf(command, sizeof command, "rm -rf %s", scratch);
    CHECK_EQ(system(command), 0);
    if (skipped) {
        printf("test_distributed_lock_async: some server backends were SKIPPED\n");
        return 77;
    }
    DONE();
}
