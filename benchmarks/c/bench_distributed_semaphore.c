/* One permit of the distributed semaphore (4 permits), taken and given back uncontended
 * (try_acquire+release), beside the exclusive distributed lock's try_lock+unlock on the same
 * backend, in the same run, the rows taking turns in blocks of 50 calls (each row: its median
 * call, the spread 10th...90th percentile): the file system (in $BENCH_DIR or /tmp), and private
 * PostgreSQL, Redis and etcd servers (scripts/servers.sh, or $LIBSYNC_TEST_SERVERS's). Target:
 * within 1.5x of the exclusive lock. */
#define _GNU_SOURCE
#include "bench.h"
#include <sync.h>
#include <unistd.h>

static void check(int ok, const char *what) {
    if (!ok) { fprintf(stderr, "%s failed: %s\n", what, sync_distributed_lock_error_message()); exit(1); }
}

static sync_distributed_lock_t *lock;
static sync_distributed_semaphore_t *semaphore;
static void lock_cycle(void) {
    check(sync_distributed_lock_try_lock(lock) == 0, "try_lock");
    check(sync_distributed_lock_unlock(lock) == 0, "unlock");
}
static void semaphore_cycle(void) {
    check(sync_distributed_semaphore_try_acquire(semaphore) == 0, "try_acquire");
    check(sync_distributed_semaphore_release(semaphore) == 0, "release");
}

static void compare(const char *name, const char *lock_target, const char *semaphore_target, long calls) {
    check(sync_distributed_lock_create(lock_target, &lock) == 0, lock_target);
    check(sync_distributed_semaphore_create(semaphore_target, 4, 0, &semaphore) == 0, semaphore_target);
    char title[128], first[96], second[96];
    snprintf(title, sizeof title, "%s: one permit vs the exclusive lock, uncontended", name);
    snprintf(first, sizeof first, "lock try_lock+unlock (%s)", name);
    snprintf(second, sizeof second, "semaphore(4) try_acquire+release (%s)", name);
    bench_server_row rows[] = {{first, lock_cycle, NULL}, {second, semaphore_cycle, NULL}};
    bench_server_table(title, rows, 2, calls, 52);
    sync_distributed_lock_destroy(lock);
    sync_distributed_semaphore_destroy(semaphore);
}

int main(void) {
    char dir[256], command[700], lock_path[300], semaphore_path[300];
    const char *base = getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/libsync-bench-sem-XXXXXX", base);
    check(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(lock_path, sizeof lock_path, "%s/lock", dir);
    snprintf(semaphore_path, sizeof semaphore_path, "%s/semaphore", dir);
    long calls = bench_quick() ? 300 : 3000;
    compare("file system", lock_path, semaphore_path, calls);
    snprintf(command, sizeof command, "rm -rf %s", dir);
    check(system(command) == 0, "rm");

    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    char servers[256], probe[400];
    snprintf(probe, sizeof probe, "%s/etcd.url", given ? given : "");
    int started = 0;
    if (given && access(probe, R_OK) == 0) {
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-bench-sem-servers-XXXXXX");
        check(mkdtemp(servers) != NULL, "mkdtemp");
        snprintf(command, sizeof command, "scripts/servers.sh start %s && scripts/servers.sh start-etcd %s", servers, servers);
        started = 1;
        if (system(command) != 0) { printf("(no servers: scripts/servers.sh could not start them)\n"); goto stop; }
    }
    static const char *names[] = {"PostgreSQL", "Redis", "etcd"}, *files[] = {"postgres", "redis", "etcd"};
    for (int i = 0; i < 3; i++) {
        char file[400], url[512], lock_target[700], semaphore_target[700];
        snprintf(file, sizeof file, "%s/%s.url", servers, files[i]);
        FILE *f = fopen(file, "r");
        check(f && fgets(url, sizeof url, f), file);
        fclose(f);
        url[strcspn(url, "\n")] = 0;
        snprintf(lock_target, sizeof lock_target, "%s?lock=bench-c-lock-%d", url, (int)getpid());
        snprintf(semaphore_target, sizeof semaphore_target, "%s?lock=bench-c-sem-%d", url, (int)getpid());
        compare(names[i], lock_target, semaphore_target, i == 2 ? calls / 3 : calls);
    }
stop:
    if (started) {
        snprintf(command, sizeof command, "scripts/servers.sh stop %s; rm -rf %s", servers, servers);
        if (system(command) != 0) printf("(stopping the servers failed)\n");
    }
    return 0;
}
