/* The file system's read/write lock (sync/distributed_lock.h, sync_distributed_rwlock_*): readers
 * share, a writer excludes everyone, a waiting writer stops new readers, tokens increase across
 * both sides, and processes hammering one lock never overlap a writer with anyone. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { READ = SYNC_DISTRIBUTED_RWLOCK_READ, WRITE = SYNC_DISTRIBUTED_RWLOCK_WRITE };
static char dir[64], path[128];

static sync_distributed_rwlock_t *make(void) {
    sync_distributed_rwlock_t *lock = NULL;
    CHECK_EQ(sync_distributed_rwlock_create(path, 0, -1, &lock), 0);
    CHECK(lock != NULL);
    return lock;
}

static uint64_t token(sync_distributed_rwlock_t *lock) {
    uint64_t t = 0;
    CHECK_EQ(sync_distributed_rwlock_token(lock, &t), 0);
    return t;
}

static void test_bad_input(void) {
    sync_distributed_rwlock_t *lock = (sync_distributed_rwlock_t *)1;
    CHECK_EQ(sync_distributed_rwlock_create(NULL, 0, -1, &lock), EINVAL);
    CHECK(lock == NULL);
    CHECK_EQ(sync_distributed_rwlock_create(path, 0, -1, NULL), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_create("ftp://127.0.0.1/?lock=x", 0, -1, &lock), EINVAL);  /* (servers: test_distributed_rwlock_servers.c) */
    CHECK(strstr(sync_distributed_lock_error_message(), "unsupported lock URL scheme") != NULL);
    CHECK_EQ(sync_distributed_rwlock_create(path, SYNC_DISTRIBUTED_LOCK_RECURSIVE, -1, &lock), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_create(path, 0, 01000, &lock), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_create("/nonexistent-dir-libsync/x", 0, -1, &lock), ENOENT);
    lock = make();
    CHECK_EQ(sync_distributed_rwlock_try_lock(lock, 3), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_try_lock(NULL, READ), EINVAL);
    CHECK_EQ(sync_distributed_rwlock_lock(lock, READ, 0, 0), EINVAL);            /* poll <= 0 */
    CHECK_EQ(sync_distributed_rwlock_unlock(lock), EPERM);                        /* not held */
    uint64_t t;
    CHECK_EQ(sync_distributed_rwlock_token(lock, &t), EPERM);
    CHECK_EQ(sync_distributed_rwlock_kind(NULL), 0);
    sync_distributed_rwlock_destroy(lock);
    sync_distributed_rwlock_destroy(NULL);
}

static void test_sharing_exclusion_and_tokens(void) {
    sync_distributed_rwlock_t *a = make(), *b = make(), *w = make();
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(b, READ), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), 0);                        /* re-entry */
    CHECK_EQ(sync_distributed_rwlock_count(a), 2);
    CHECK_EQ(sync_distributed_rwlock_kind(a), READ);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, WRITE), EDEADLK);                 /* no upgrade */
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, WRITE), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_lock(w, WRITE, 1000000, 100000), ETIMEDOUT);  /* (gives its claim up) */
    CHECK_EQ(sync_distributed_rwlock_try_lock(b, READ), 0);                        /* the claim given up: readers enter */
    CHECK_EQ(sync_distributed_rwlock_unlock(b), 0);
    uint64_t ta = token(a), tb = token(b);
    CHECK(ta < tb);
    CHECK_EQ(sync_distributed_rwlock_unlock_all(a), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, WRITE), EBUSY);                   /* b still reads */
    CHECK_EQ(sync_distributed_rwlock_unlock(b), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, WRITE), 0);
    uint64_t tw = token(w);
    CHECK(tw > tb);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_try_lock(b, WRITE), EBUSY);
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, READ), EDEADLK);                  /* no downgrade */
    CHECK_EQ(sync_distributed_rwlock_unlock(w), 0);
    CHECK_EQ(sync_distributed_rwlock_kind(w), 0);
    CHECK_EQ(sync_distributed_rwlock_try_lock(a, READ), 0);
    CHECK(token(a) > tw);
    CHECK_EQ(sync_distributed_rwlock_break(w), 0);
    CHECK_EQ(sync_distributed_rwlock_unlock(a), ESTALE);                           /* broken meanwhile */
    sync_distributed_rwlock_destroy(a);
    sync_distributed_rwlock_destroy(b);
    sync_distributed_rwlock_destroy(w);
}

/* PROCESS_OWNED: another thread re-enters and releases the write hold; without it, EDEADLK and
 * EPERM. */
static void *unlock_from_thread(void *lock) {
    sync_distributed_rwlock_t *l = lock;
    intptr_t results = sync_distributed_rwlock_try_lock(l, WRITE) * 1000 + sync_distributed_rwlock_unlock(l);
    return (void *)results;
}

static void test_process_owned_write_hold(void) {
    for (int owned = 0; owned < 2; owned++) {
        sync_distributed_rwlock_t *lock = NULL;
        CHECK_EQ(sync_distributed_rwlock_create(path, owned ? SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED : 0, -1, &lock), 0);
        CHECK_EQ(sync_distributed_rwlock_try_lock(lock, WRITE), 0);
        pthread_t thread;
        void *results = NULL;
        CHECK_EQ(pthread_create(&thread, NULL, unlock_from_thread, lock), 0);
        CHECK_EQ(pthread_join(thread, &results), 0);
        CHECK_EQ((intptr_t)results, owned ? 0 : EDEADLK * 1000 + EPERM);
        CHECK_EQ(sync_distributed_rwlock_count(lock), 1);
        CHECK_EQ(sync_distributed_rwlock_unlock(lock), 0);
        sync_distributed_rwlock_destroy(lock);
    }
}

/* Processes take the lock for reading or writing in turns, and count who is inside in shared
 * memory: a writer inside with anyone else is a violation. A token must grow from one writer to
 * the next. */
struct shared { atomic_int readers, writers, violations; atomic_uint_fast64_t last_write_token; };

static void hammer(struct shared *s, unsigned seed, int rounds) {
    sync_distributed_rwlock_t *lock = make();
    for (int i = 0; i < rounds; i++) {
        seed = seed * 1103515245u + 12345u;
        int kind = (seed >> 16) % 4 == 0 ? WRITE : READ;
        if (sync_distributed_rwlock_lock(lock, kind, -1, 100000) != 0) _exit(3);
        uint64_t t = 0;
        sync_distributed_rwlock_token(lock, &t);
        if (kind == WRITE) {
            if (atomic_fetch_add(&s->writers, 1) != 0 || atomic_load(&s->readers) != 0) atomic_fetch_add(&s->violations, 1);
            if (t <= atomic_load(&s->last_write_token)) atomic_fetch_add(&s->violations, 1);
            atomic_store(&s->last_write_token, t);
            usleep(200);
            atomic_fetch_sub(&s->writers, 1);
        } else {
            atomic_fetch_add(&s->readers, 1);
            if (atomic_load(&s->writers) != 0) atomic_fetch_add(&s->violations, 1);
            if (t <= atomic_load(&s->last_write_token)) atomic_fetch_add(&s->violations, 1);
            usleep(200);
            atomic_fetch_sub(&s->readers, 1);
        }
        if (sync_distributed_rwlock_unlock(lock) != 0) _exit(4);
    }
    sync_distributed_rwlock_destroy(lock);
}

static void test_processes_never_overlap_a_writer(void) {
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(s != MAP_FAILED);
    memset(s, 0, sizeof *s);
    enum { N = 4 };
    pid_t children[N];
    for (int i = 0; i < N; i++) {
        children[i] = fork();
        CHECK(children[i] >= 0);
        if (children[i] == 0) {
            hammer(s, 7u + (unsigned)i, 150);
            _exit(0);
        }
    }
    for (int i = 0; i < N; i++) {
        int status = 0;
        CHECK_EQ(waitpid(children[i], &status, 0), children[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK_EQ(atomic_load(&s->violations), 0);
    munmap(s, sizeof *s);
}

/* A reader killed while it holds its share: a writer recovers the share (this host). */
static void test_dead_reader_recovered(void) {
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        sync_distributed_rwlock_t *lock = make();
        char ok = sync_distributed_rwlock_try_lock(lock, READ) == 0;
        if (write(ready[1], &ok, 1) != 1) _exit(2);
        for (;;) pause();
    }
    char ok = 0;
    CHECK_EQ(read(ready[0], &ok, 1), 1);
    CHECK(ok);
    sync_distributed_rwlock_t *w = make();
    CHECK_EQ(sync_distributed_rwlock_try_lock(w, WRITE), EBUSY);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK_EQ(sync_distributed_rwlock_lock(w, WRITE, -1, 100000), 0);
    CHECK_EQ(sync_distributed_rwlock_unlock(w), 0);
    sync_distributed_rwlock_destroy(w);
    close(ready[0]);
    close(ready[1]);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/libsync-drw-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/data.lock", dir);
    test_bad_input();
    test_sharing_exclusion_and_tokens();
    test_process_owned_write_hold();
    test_processes_never_overlap_a_writer();
    test_dead_reader_recovered();
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK_EQ(system(command), 0);
    DONE();
}
