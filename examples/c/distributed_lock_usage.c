/* The distributed lock's calls from C: on a path in a temporary directory, or on the TARGET
 * given (a path, postgresql://user:pw@host:port/db?lock=NAME, redis://:pw@host:port/db?lock=NAME
 * or etcd://user:pw@host:port?lock=NAME).
 *   distributed_lock_usage [TARGET] */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    char dir[] = "/tmp/jobs-XXXXXX", path[64], command[96];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/jobs.lock", dir);
    const char *target = argc > 1 ? argv[1] : path;
    int failed = 0;

    sync_distributed_lock_t *lock;
    int err = sync_distributed_lock_create(target, &lock);  /* ENOENT, ENOTDIR, EACCES, EEXIST */
    if (err != 0) {                                         /* a URL: EINVAL, ECONNREFUSED, EACCES, ELIBACC */
        fprintf(stderr, "%s: %s\n", target, sync_distributed_lock_error_message());
        return 1;
    }
    if (sync_distributed_lock_try_lock(lock) == 0) {        /* or EBUSY: never waits */
        puts("held");
        failed |= sync_distributed_lock_unlock(lock);       /* EPERM, ESTALE, EBUSY */
    }
    err = sync_distributed_lock_lock(lock, 5000000000, 10000000);  /* 5 s, polling every 10 ms */
    sync_distributed_lock_holder_t who;                     /* host, pid, start, when */
    if (sync_distributed_lock_holder(lock, &who) == 0 && (who.flags & SYNC_DISTRIBUTED_LOCK_STALE))
        sync_distributed_lock_recover(lock);                /* atomic takeover */
    else
        printf("held by pid %d on %s\n", (int)who.pid, who.host);
    if (err == 0) failed |= sync_distributed_lock_unlock(lock);

    /* An absolute CLOCK_MONOTONIC deadline (the _until form), and the fencing token. */
    if (sync_distributed_lock_lock_until(lock, sync_monotonic_ns() + 5000000000LL, 10000000) == 0) {
        uint64_t token;
        sync_distributed_lock_token(lock, &token);          /* send it with every write */
        printf("fencing token %llu\n", (unsigned long long)token);
        if (sync_distributed_lock_unlock(lock) == ESTALE) { /* the hold was lost meanwhile */
            failed = 1;
        }
    } else {
        fprintf(stderr, "%s\n", sync_distributed_lock_error_message());  /* a server's reason */
        failed = 1;
    }
    sync_distributed_lock_destroy(lock);

    /* filelock's behaviour: recursive, parents made, released when destroyed, rwxrwxrwx */
    snprintf(path, sizeof path, "%s/a/b/jobs.lock", dir);
    failed |= sync_distributed_lock_create_with(argc > 1 ? argv[1] : path, SYNC_DISTRIBUTED_LOCK_RECURSIVE
        | SYNC_DISTRIBUTED_LOCK_MAKE_PARENTS | SYNC_DISTRIBUTED_LOCK_RELEASE_ON_DESTROY, 0666, &lock);
    failed |= sync_distributed_lock_lock(lock, -1, 10000000);      /* no timeout */
    failed |= sync_distributed_lock_lock(lock, -1, 10000000);      /* a re-entry */
    int depth = sync_distributed_lock_count(lock);                 /* the caller's acquisitions: 2 */
    failed |= sync_distributed_lock_unlock_all(lock);              /* however many */
    sync_distributed_lock_destroy(lock);
    printf("re-entered: depth %d\n", depth);

    snprintf(command, sizeof command, "rm -rf %s", dir);
    return failed || depth != 2 || system(command) != 0;
}
