/* The read/write distributed lock's read side on each server backend (PostgreSQL, Redis, etcd):
 * read try_lock+unlock beside the exclusive lock's try_lock+unlock on the same server, in the
 * same run (the target: the read side within 1.2x of the exclusive lock); the write side
 * too. Uncontended, one process, private servers on loopback (scripts/servers.sh, or
 * $LIBSYNC_TEST_SERVERS's). Every call is timed alone and the rows take turns in blocks of 50
 * calls; each row is its median call with the spread, as bench_distributed_lock's tables. */
#define _GNU_SOURCE
#include "bench.h"
#include <sync.h>
#include <unistd.h>

static void check(int ok, const char *what) {
    if (!ok) { fprintf(stderr, "%s failed: %s\n", what, sync_distributed_lock_error_message()); exit(1); }
}

static sync_distributed_lock_t *exclusive;
static sync_distributed_rwlock_t *rw;

static void exclusive_cycle(void) {
    check(sync_distributed_lock_try_lock(exclusive) == 0, "try_lock");
    check(sync_distributed_lock_unlock(exclusive) == 0, "unlock");
}

static void read_cycle(void) {
    check(sync_distributed_rwlock_try_lock(rw, SYNC_DISTRIBUTED_RWLOCK_READ) == 0, "read try_lock");
    check(sync_distributed_rwlock_unlock(rw) == 0, "read unlock");
}

static void write_cycle(void) {
    check(sync_distributed_rwlock_try_lock(rw, SYNC_DISTRIBUTED_RWLOCK_WRITE) == 0, "write try_lock");
    check(sync_distributed_rwlock_unlock(rw) == 0, "write unlock");
}

static void table(const char *servers, const char *file, const char *backend, long calls) {
    char path[600], url[512], target[700];
    snprintf(path, sizeof path, "%s/%s", servers, file);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(url, sizeof url, f)) {
        printf("(no %s: skipped)\n", file);
        if (f) fclose(f);
        return;
    }
    fclose(f);
    url[strcspn(url, "\n")] = 0;
    snprintf(target, sizeof target, "%s?lock=bench-rw-%d", url, (int)getpid());
    check(sync_distributed_lock_create(target, &exclusive) == 0, "create");
    check(sync_distributed_rwlock_create(target, 0, -1, &rw) == 0, "create (read/write)");
    char names[3][80], title[120];
    snprintf(names[0], sizeof names[0], "exclusive lock try_lock+unlock (%s)", backend);
    snprintf(names[1], sizeof names[1], "read/write lock, read try_lock+unlock (%s)", backend);
    snprintf(names[2], sizeof names[2], "read/write lock, write try_lock+unlock (%s)", backend);
    bench_server_row rows[] = {{names[0], exclusive_cycle, NULL}, {names[1], read_cycle, NULL}, {names[2], write_cycle, NULL}};
    snprintf(title, sizeof title, "%s: read/write lock vs exclusive lock, uncontended, loopback", backend);
    bench_server_table(title, rows, 3, calls, 52);
    sync_distributed_rwlock_destroy(rw);
    sync_distributed_lock_destroy(exclusive);
}

int main(void) {
    char dir[256] = "", command[700];
    const char *servers = getenv("LIBSYNC_TEST_SERVERS");
    if (!servers) {
        snprintf(dir, sizeof dir, "/tmp/libsync-bench-rw-XXXXXX");
        check(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(command, sizeof command, "scripts/servers.sh start %s && scripts/servers.sh start-etcd %s", dir, dir);
        if (system(command) != 0) printf("(some servers could not be started)\n");
        servers = dir;
    }
    long calls = bench_quick() ? 300 : 3000;
    table(servers, "postgres.url", "PostgreSQL", calls);
    table(servers, "redis.url", "Redis", calls);
    table(servers, "etcd.url", "etcd", calls / 3);
    if (dir[0]) {
        snprintf(command, sizeof command, "scripts/servers.sh stop %s; rm -rf %s", dir, dir);
        if (system(command) != 0) printf("(stopping the servers failed)\n");
    }
    return 0;
}
