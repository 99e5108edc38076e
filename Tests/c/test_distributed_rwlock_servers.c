/* The shared/exclusive (read/write) distributed lock on servers, from C: PostgreSQL, Redis and
 * etcd (scripts/servers.sh starts private ones; or LIBSYNC_TEST_SERVERS names a directory with
 * running ones' postgres.url, redis.url and etcd.url). For each backend: readers share, a writer
 * excludes, tokens ordered across both sides, a waiting writer stops new readers (writer
 * preference), a SIGKILLed reader or writer recovered, timeouts and try, loss notification,
 * bad input. Exit 77: no servers could be had. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "distributed_support.h"

#ifndef LIBSYNC_SOURCE_DIR
#error "LIBSYNC_SOURCE_DIR: the source tree (for scripts/servers.sh)"
#endif

#define READ SYNC_DISTRIBUTED_RWLOCK_READ
#define WRITE SYNC_DISTRIBUTED_RWLOCK_WRITE

static char servers[256];
static int started;  /* this test started the servers */
static int serial;   /* a fresh lock name per test */

/* The URL of a fresh lock on `base` (with `extra` parameters, "" for none). */
static void fresh(char *out, size_t size, const char *base, const char *extra) {
    snprintf(out, size, "%s%slock=rwtest-%d-%d%s", base, strchr(base, '?') ? "&" : "?", (int)getpid(), ++serial, extra);
}

static sync_distributed_rwlock_t *make_rw(const char *url) {
    sync_distributed_rwlock_t *lock = NULL;
    int err = sync_distributed_rwlock_create(url, 0, -1, &lock);
    if (err) fprintf(stderr, "create %s: %d: %s\n", url, err, sync_distributed_lock_error_message());
    CHECK_EQ(err, 0);
    return lock;
}

static uint64_t token_of(sync_distributed_rwlock_t *lock) {
    uint64_t token = 0;
    CHECK_EQ(sync_distributed_rwlock_token(lock, &token), 0);
    return token;
}

/* Readers share; a writer excludes readers and writers; tokens increase across both sides. */
static void test_share_exclude_tokens(const char *base) {
    char url[512];
    fresh(url, sizeof url, base, "");
    sync_distributed_rwlock_t *a = make_rw(url), *b = make_rw(url), *w = make_rw(url);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), 0);
    CHECK_EQ(sync_distributed_rwlock_lock(b, READ, 5000000000LL, 1000000), 0);
    CHECK_EQ(sync_distributed_rwlock_kind(a), READ);
    CHECK_EQ(sync_distributed_rwlock_count(b), 1);
    uint64_t ta = token_of(a), tb = token_of(b);
    CHECK(ta != tb);
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, WRITE), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_lock(w, WRITE, 50000000, 1000000), ETIMEDOUT);
    CHECK_EQ(sync_distributed_rwlock_unlock(a), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, WRITE), EBUSY);  /* b still reads */
    CHECK_EQ(sync_distributed_rwlock_unlock(b), 0);
    CHECK_EQ(sync_distributed_rwlock_lock(w, WRITE, 5000000000LL, 1000000), 0);
    CHECK_EQ(sync_distributed_rwlock_kind(w), WRITE);
    uint64_t tw = token_of(w);
    CHECK(tw > ta && tw > tb);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_lock(a, READ, 50000000, 1000000), ETIMEDOUT);
    CHECK_EQ(sync_distributed_rwlock_try_lock(b, WRITE), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_unlock(w), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), 0);
    CHECK(token_of(a) > tw);
    /* Re-entry of a read hold is counted; one unlock_all ends it. */
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), 0);
    CHECK_EQ(sync_distributed_rwlock_count(a), 2);
    CHECK_EQ(sync_distributed_rwlock_unlock_all(a), 0);
    CHECK_EQ(sync_distributed_rwlock_count(a), 0);
    sync_distributed_rwlock_destroy(a);
    sync_distributed_rwlock_destroy(b);
    sync_distributed_rwlock_destroy(w);
}

struct waiter { sync_distributed_rwlock_t *lock; int kind; int code; uint64_t token; };

static void *wait_for(void *arg) {
    struct waiter *w = arg;
    w->code = sync_distributed_rwlock_lock(w->lock, w->kind, 60000000000LL, 1000000);
    if (w->code == 0) {
        w->token = token_of(w->lock);
        CHECK_EQ(sync_distributed_rwlock_unlock(w->lock), 0);
    }
    return NULL;
}

/* A writer waiting for a reader stops new readers (they cannot starve it); it gets the lock when
 * the reader leaves, with a larger token, and the reader that waited behind it gets a larger one. */
static void test_writer_preference(const char *base) {
    char url[512];
    fresh(url, sizeof url, base, "");
    sync_distributed_rwlock_t *r1 = make_rw(url), *r2 = make_rw(url), *probe = make_rw(url);
    CHECK_EQ(sync_distributed_rwlock_try_lock(r1, READ), 0);
    uint64_t t1 = token_of(r1);
    struct waiter writer = { make_rw(url), WRITE, -1, 0 };
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, wait_for, &writer), 0);
    /* Until the writer's wait is in place, a new reader may still enter (and is let go again). */
    int code;
    while ((code = sync_distributed_rwlock_try_lock(probe, READ)) == 0) {
        CHECK_EQ(sync_distributed_rwlock_unlock(probe), 0);
        usleep(1000);
    }
    CHECK_EQ(code, EBUSY);
    /* The writer waits; readers keep being refused while r1 reads (as many tries as we like). */
    for (int i = 0; i < 20; i++) CHECK_EQ(sync_distributed_rwlock_try_lock(r2, READ), EBUSY);
    CHECK_EQ(writer.code, -1);
    struct waiter reader = { r2, READ, -1, 0 };
    pthread_t second;
    CHECK_EQ(pthread_create(&second, NULL, wait_for, &reader), 0);
    CHECK_EQ(sync_distributed_rwlock_unlock(r1), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(pthread_join(second, NULL), 0);
    CHECK_EQ(writer.code, 0);
    CHECK_EQ(reader.code, 0);
    CHECK(writer.token > t1);
    sync_distributed_rwlock_destroy(writer.lock);
    sync_distributed_rwlock_destroy(r1);
    sync_distributed_rwlock_destroy(r2);
    sync_distributed_rwlock_destroy(probe);
}

/* A child that holds `kind` of `url` until killed; returns its pid once it holds it. */
static pid_t spawn_rw_holder(const char *url, int kind) {
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(120);
        sync_distributed_rwlock_t *lock = NULL;
        char ok = sync_distributed_rwlock_create(url, 0, -1, &lock) == 0 && sync_distributed_rwlock_lock(lock, kind, -1, 1000000) == 0
                  ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(3);
        for (;;) pause();
    }
    expect_holding(ready[0]);
    close(ready[0]);
    close(ready[1]);
    return child;
}

/* A SIGKILLed reader's share and a SIGKILLed writer's hold are recovered (PostgreSQL: the session
 * ends; Redis and etcd: on this host the next acquirer removes a dead holder's entry, elsewhere
 * its lease ends); tokens keep increasing. */
static void test_killed_holders(const char *base) {
    char url[512];
    fresh(url, sizeof url, base, strncmp(base, "postgres", 8) == 0 ? "" : "&ttl=1");
    sync_distributed_rwlock_t *lock = make_rw(url);
    pid_t reader = spawn_rw_holder(url, READ);
    CHECK_EQ(sync_distributed_rwlock_try_lock(lock, WRITE), EBUSY);
    CHECK_EQ(kill(reader, SIGKILL), 0);
    CHECK_EQ(waitpid(reader, NULL, 0), reader);
    CHECK_EQ(sync_distributed_rwlock_lock(lock, WRITE, 60000000000LL, 1000000), 0);
    uint64_t tw = token_of(lock);
    CHECK_EQ(sync_distributed_rwlock_unlock(lock), 0);
    pid_t writer = spawn_rw_holder(url, WRITE);
    CHECK_EQ(sync_distributed_rwlock_try_lock(lock, READ), EBUSY);
    CHECK_EQ(kill(writer, SIGKILL), 0);
    CHECK_EQ(waitpid(writer, NULL, 0), writer);
    CHECK_EQ(sync_distributed_rwlock_lock(lock, READ, 60000000000LL, 1000000), 0);
    CHECK(token_of(lock) > tw);
    CHECK_EQ(sync_distributed_rwlock_unlock(lock), 0);
    sync_distributed_rwlock_destroy(lock);
}

/* A stopped holder (alive on this host, so not stale: a holder on another host that died, as
 * far as the others can tell) keeps its share or its write hold only for its lease (Redis,
 * etcd: ttl=1): the other side gets the lock when the lease ends. */
static void test_stopped_holder_lease_ends(const char *base, int kind) {
    char url[512];
    fresh(url, sizeof url, base, "&ttl=1");
    sync_distributed_rwlock_t *lock = make_rw(url);
    int other = kind == READ ? WRITE : READ;
    pid_t holder = spawn_rw_holder(url, kind);
    CHECK_EQ(kill(holder, SIGSTOP), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(lock, other), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_lock(lock, other, 60000000000LL, 1000000), 0);
    CHECK_EQ(sync_distributed_rwlock_unlock(lock), 0);
    CHECK_EQ(kill(holder, SIGKILL), 0);
    CHECK_EQ(waitpid(holder, NULL, 0), holder);
    sync_distributed_rwlock_destroy(lock);
}

/* Processes take the lock for reading or writing in turns and count who is inside in shared
 * memory: a writer inside with anyone else is a violation; a writer's token must exceed every
 * token drawn before it (readers' and writers'), and a reader's every writer's before it. */
struct shared { atomic_int readers, writers, violations; atomic_uint_fast64_t last_write, max_read; };

static void hammer(const char *url, struct shared *s, unsigned seed, int rounds) {
    sync_distributed_rwlock_t *lock = NULL;
    if (sync_distributed_rwlock_create(url, 0, -1, &lock) != 0) _exit(2);
    for (int i = 0; i < rounds; i++) {
        seed = seed * 1103515245u + 12345u;
        int kind = (seed >> 16) % 4 == 0 ? WRITE : READ;
        if (sync_distributed_rwlock_lock(lock, kind, -1, 1000000) != 0) _exit(3);
        uint64_t t = 0;
        sync_distributed_rwlock_token(lock, &t);
        if (kind == WRITE) {
            if (atomic_fetch_add(&s->writers, 1) != 0 || atomic_load(&s->readers) != 0) atomic_fetch_add(&s->violations, 1);
            if (t <= atomic_load(&s->last_write) || t <= atomic_load(&s->max_read)) atomic_fetch_add(&s->violations, 1);
            atomic_store(&s->last_write, t);
            usleep(200);
            atomic_fetch_sub(&s->writers, 1);
        } else {
            atomic_fetch_add(&s->readers, 1);
            if (atomic_load(&s->writers) != 0) atomic_fetch_add(&s->violations, 1);
            if (t <= atomic_load(&s->last_write)) atomic_fetch_add(&s->violations, 1);
            uint_fast64_t seen = atomic_load(&s->max_read);
            while (seen < t && !atomic_compare_exchange_weak(&s->max_read, &seen, t)) {}
            usleep(200);
            atomic_fetch_sub(&s->readers, 1);
        }
        if (sync_distributed_rwlock_unlock(lock) != 0) _exit(4);
    }
    sync_distributed_rwlock_destroy(lock);
}

static void test_processes_never_overlap_a_writer(const char *base) {
    char url[512];
    fresh(url, sizeof url, base, "");
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(s != MAP_FAILED);
    memset(s, 0, sizeof *s);
    enum { N = 4 };
    pid_t children[N];
    for (int i = 0; i < N; i++) {
        children[i] = fork();
        CHECK(children[i] >= 0);
        if (children[i] == 0) {
            alarm(300);
            hammer(url, s, 7u + (unsigned)i, 40);
            _exit(0);
        }
    }
    for (int i = 0; i < N; i++) wait_ok(children[i]);
    CHECK_EQ(atomic_load(&s->violations), 0);
    CHECK(atomic_load(&s->last_write) > 0 && atomic_load(&s->max_read) > 0);  /* both sides were taken */
    munmap(s, sizeof *s);
}

static atomic_int events_lost;

static void on_event(sync_distributed_rwlock_t *lock, int event, void *context) {
    (void)lock;
    (void)context;
    if (event == SYNC_DISTRIBUTED_LOCK_LOST) atomic_fetch_add(&events_lost, 1);
}

/* A hold broken by another is reported lost (handler and state), and its release says so. */
static void test_loss_notification(const char *base, int kind) {
    char url[512];
    fresh(url, sizeof url, base, strncmp(base, "postgres", 8) == 0 ? "" : "&ttl=1");
    sync_distributed_rwlock_t *holder = make_rw(url), *breaker = make_rw(url);
    atomic_store(&events_lost, 0);
    CHECK_EQ(sync_distributed_rwlock_set_event_handler(holder, on_event, NULL), 0);
    CHECK_EQ(sync_distributed_rwlock_lock(holder, kind, 5000000000LL, 1000000), 0);
    CHECK(!sync_distributed_rwlock_lost(holder));
    CHECK_EQ(sync_distributed_rwlock_break(breaker), 0);
    while (!sync_distributed_rwlock_lost(holder)) usleep(10000);  /* (the ctest TIMEOUT bounds a missed loss) */
    while (atomic_load(&events_lost) == 0) usleep(10000);
    CHECK_EQ(sync_distributed_rwlock_hold_state(holder), SYNC_DISTRIBUTED_LOCK_LOST);
    int code = sync_distributed_rwlock_unlock(holder);
    CHECK(code == ESTALE || code == EBUSY);
    CHECK_EQ(sync_distributed_rwlock_count(holder), 0);
    /* Acquiring again clears the state. */
    CHECK_EQ(sync_distributed_rwlock_lock(holder, kind, 5000000000LL, 1000000), 0);
    CHECK(!sync_distributed_rwlock_lost(holder));
    CHECK_EQ(sync_distributed_rwlock_unlock(holder), 0);
    CHECK_EQ(sync_distributed_rwlock_set_event_handler(holder, NULL, NULL), 0);
    sync_distributed_rwlock_destroy(holder);
    sync_distributed_rwlock_destroy(breaker);
}

/* Bad input: a clear errno, nothing held. */
static void test_bad_input(const char *base) {
    char url[512];
    fresh(url, sizeof url, base, "");
    sync_distributed_rwlock_t *lock = make_rw(url), *other = make_rw(url), *bad = (sync_distributed_rwlock_t *)1;
    CHECK_EQ(sync_distributed_rwlock_unlock(lock), EPERM);      /* a release by a non-holder */
    CHECK_EQ(sync_distributed_rwlock_unlock_all(lock), EPERM);
    CHECK_EQ(sync_distributed_rwlock_try_lock(other, READ), 0);
    CHECK_EQ(sync_distributed_rwlock_unlock(lock), EPERM);      /* another object's share is not ours */
    uint64_t token = 0;
    CHECK_EQ(sync_distributed_rwlock_token(lock, &token), EPERM);
    CHECK_EQ(sync_distributed_rwlock_try_lock(lock, 3), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_lock(lock, READ, 0, 0), EINVAL);  /* poll 0 */
    CHECK_EQ(sync_distributed_rwlock_try_lock(other, WRITE), EDEADLK);  /* no upgrade */
    CHECK_EQ(sync_distributed_rwlock_unlock(other), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(other, WRITE), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(other, READ), EDEADLK);  /* no downgrade */
    CHECK_EQ(sync_distributed_rwlock_unlock(other), 0);
    CHECK_EQ(sync_distributed_rwlock_create(url, 0, 0644, &bad), EINVAL);  /* a mode with a URL */
    CHECK(bad == NULL);
    char nolock[512];
    snprintf(nolock, sizeof nolock, "%s", base);
    bad = (sync_distributed_rwlock_t *)1;
    CHECK_EQ(sync_distributed_rwlock_create(nolock, 0, -1, &bad), EINVAL);  /* no lock= */
    CHECK(bad == NULL);
    CHECK(strstr(sync_distributed_lock_error_message(), "lock=") != NULL);
    CHECK_EQ(sync_distributed_rwlock_create("ftp://h?lock=x", 0, -1, &bad), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_create(url, 0x80, -1, &bad), EINVAL);  /* unknown flag */
    sync_distributed_rwlock_destroy(lock);
    sync_distributed_rwlock_destroy(other);
}

/* The file-system lock has no loss detector: ENOTSUP, state 0. */
static void test_file_has_no_detector(void) {
    char path[] = "/tmp/libsync-rwsrv-XXXXXX";
    CHECK(mkdtemp(path) != NULL);
    char target[300];
    snprintf(target, sizeof target, "%s/lock", path);
    sync_distributed_rwlock_t *lock = NULL;
    CHECK_EQ(sync_distributed_rwlock_create(target, 0, -1, &lock), 0);
    CHECK_EQ(sync_distributed_rwlock_set_event_handler(lock, on_event, NULL), ENOTSUP);
    CHECK_EQ(sync_distributed_rwlock_hold_state(lock), 0);
    CHECK(!sync_distributed_rwlock_lost(lock));
    CHECK_EQ(sync_distributed_rwlock_set_event_handler(NULL, on_event, NULL), EINVAL);
    sync_distributed_rwlock_destroy(lock);
    rmdir(path);
}

static void stop_servers(void) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s; rm -rf %s", LIBSYNC_SOURCE_DIR, servers, servers);
    if (system(command) != 0) fprintf(stderr, "stopping the servers failed\n");
}

static int read_url(const char *name, char *out, size_t size) {
    char file[400];
    snprintf(file, sizeof file, "%s/%s", servers, name);
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    int ok = fgets(out, (int)size, f) != NULL;
    fclose(f);
    out[strcspn(out, "\n")] = 0;
    return ok;
}

int main(void) {
    test_file_has_no_detector();
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    if (given) {
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-servers-rw-XXXXXX");
        CHECK(mkdtemp(servers) != NULL);
        char command[600];
        snprintf(command, sizeof command, "%s/scripts/servers.sh start %s && %s/scripts/servers.sh start-etcd %s",
                 LIBSYNC_SOURCE_DIR, servers, LIBSYNC_SOURCE_DIR, servers);
        atexit(stop_servers);
        started = 1;
        int status = system(command);
        if (status != 0) {
            fprintf(stderr, "\n!!!!!! SKIPPING the read/write lock on servers: they could not be installed or started "
                            "(scripts/servers.sh: status %d) !!!!!!\n\n", status);
            return 77;
        }
    }
    const char *files[] = { "postgres.url", "redis.url", "etcd.url" };
    int tested = 0;
    for (int i = 0; i < 3; i++) {
        char base[400];
        if (!read_url(files[i], base, sizeof base)) {
            fprintf(stderr, "!! no %s in %s: that backend is SKIPPED\n", files[i], servers);
            continue;
        }
        fprintf(stderr, "== %s\n", files[i]);
        test_share_exclude_tokens(base);
        test_writer_preference(base);
        test_processes_never_overlap_a_writer(base);
        test_killed_holders(base);
        if (strncmp(base, "postgres", 8) != 0) {  /* (PostgreSQL: no lease) */
            test_stopped_holder_lease_ends(base, READ);
            test_stopped_holder_lease_ends(base, WRITE);
        }
        test_loss_notification(base, READ);
        test_loss_notification(base, WRITE);
        test_bad_input(base);
        tested++;
    }
    if (tested == 0) return 77;
    DONE();
}
