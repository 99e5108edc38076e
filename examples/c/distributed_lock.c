/* The distributed lock between processes, from C, with fencing tokens.
 *
 *   distributed_lock [TARGET ...]
 *
 * A TARGET is a path (default: one in a temporary directory), postgresql://user:pw@host:port/db?lock=NAME
 * or redis://:pw@host:port/db?lock=NAME. Four processes each add 1 to a counter in a shared file
 * five times, holding the lock; each write carries the holder's fencing token, and the file
 * refuses a token older than the last one it accepted. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

/* The resource: "<highest token> <value>" in a file; a write with an older token is refused. */
static int fenced_add(const char *store, uint64_t token, long add) {
    int fd = open(store, O_RDWR);
    flock(fd, LOCK_EX);
    char text[64] = {0};
    unsigned long long highest = 0;
    long value = 0;
    if (pread(fd, text, sizeof text - 1, 0) > 0) sscanf(text, "%llu %ld", &highest, &value);
    int accepted = token >= highest;
    if (accepted) {
        int n = snprintf(text, sizeof text, "%llu %ld\n", (unsigned long long)token, value + add);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) accepted = 0;
    }
    close(fd);
    return accepted;
}

static int run(const char *target) {
    sync_distributed_lock_t *lock;
    if (sync_distributed_lock_create(target, &lock) != 0) {
        fprintf(stderr, "%s: %s\n", target, sync_distributed_lock_error_message());
        return 1;
    }
    printf("== %s\n", sync_distributed_lock_path(lock));  /* (a URL is shown without its password) */
    char store[] = "/tmp/libsync-example-store-XXXXXX";
    close(mkstemp(store));
    for (int w = 0; w < 4; w++) {
        if (fork() != 0) continue;
        sync_distributed_lock_t *mine;  /* each process its own object (and connection) */
        if (sync_distributed_lock_create(target, &mine) != 0) _exit(2);
        for (int i = 0; i < 5; i++) {
            if (sync_distributed_lock_lock_until(mine, sync_monotonic_ns() + 30000000000LL, 1000000) != 0) _exit(3);
            uint64_t token;
            sync_distributed_lock_token(mine, &token);
            if (!fenced_add(store, token, 1)) _exit(4);
            if (sync_distributed_lock_unlock(mine) != 0) _exit(5);
        }
        _exit(0);
    }
    int failed = 0, status;
    while (wait(&status) > 0) failed |= status != 0;
    FILE *f = fopen(store, "r");
    unsigned long long highest = 0;
    long value = 0;
    if (!f || fscanf(f, "%llu %ld", &highest, &value) != 2) failed = 1;
    if (f) fclose(f);
    printf("   4 processes x 5 increments under the lock: counter = %ld (last token %llu)\n", value, highest);
    printf("   a write with an older token: %s\n", fenced_add(store, highest - 1, 100) ? "accepted" : "refused");
    unlink(store);
    sync_distributed_lock_destroy(lock);
    return failed || value != 20;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        int failed = 0;
        for (int i = 1; i < argc; i++) failed |= run(argv[i]);
        return failed;
    }
    char dir[] = "/tmp/libsync-example-XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/example.lock", dir);
    int failed = run(path);
    char command[96];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    return failed | (system(command) != 0);
}
