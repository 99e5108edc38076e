/* The read/write distributed lock from C: many readers or one writer, fencing tokens on both
 * sides, a resource that refuses a stale writer.
 *
 *   distributed_rwlock [TARGET]
 *
 * TARGET: a path (default: one in a temporary directory), postgresql://user:pw@host:port/db?lock=NAME,
 * redis://:pw@host:port/db?lock=NAME&ttl=10 or etcd://user:pw@host:port?lock=NAME. Two readers
 * share the lock while a writer waits; the writer then writes with its token, and a write with an
 * older token (a writer that lost the lock without knowing) is refused. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The resource: it remembers the largest token it saw and refuses an older one. */
static uint64_t newest;
static int fenced_write(uint64_t token) {
    if (token < newest) return 0;
    newest = token;
    return 1;
}

static sync_distributed_rwlock_t *open_lock(const char *target) {
    sync_distributed_rwlock_t *lock = NULL;
    int err = sync_distributed_rwlock_create(target, 0, -1, &lock);
    if (err) {
        fprintf(stderr, "%s: %s\n", target, sync_distributed_lock_error_message());
        exit(1);
    }
    return lock;
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/rwlock-example-XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/catalog.lock", dir);
    const char *target = argc > 1 ? argv[1] : path;
    sync_distributed_rwlock_t *reader1 = open_lock(target), *reader2 = open_lock(target), *writer = open_lock(target);

    int ok = sync_distributed_rwlock_lock(reader1, SYNC_DISTRIBUTED_RWLOCK_READ, 10000000000LL, 10000000) == 0
             && sync_distributed_rwlock_lock(reader2, SYNC_DISTRIBUTED_RWLOCK_READ, 10000000000LL, 10000000) == 0;
    uint64_t read_token = 0, write_token = 0;
    ok = ok && sync_distributed_rwlock_token(reader1, &read_token) == 0;
    int busy = sync_distributed_rwlock_try_lock(writer, SYNC_DISTRIBUTED_RWLOCK_WRITE);  /* EBUSY: readers hold it */
    printf("two readers hold it (token %llu); a writer's try: %s\n", (unsigned long long)read_token,
           busy == EBUSY ? "busy" : "?");
    ok = ok && busy == EBUSY && sync_distributed_rwlock_unlock(reader1) == 0 && sync_distributed_rwlock_unlock(reader2) == 0;

    ok = ok && sync_distributed_rwlock_lock(writer, SYNC_DISTRIBUTED_RWLOCK_WRITE, 10000000000LL, 10000000) == 0
         && sync_distributed_rwlock_token(writer, &write_token) == 0;
    int accepted = fenced_write(write_token);
    int stale = fenced_write(read_token);  /* an older token: refused */
    printf("the writer's token %llu: %s; the older token %llu: %s\n", (unsigned long long)write_token,
           accepted ? "accepted" : "refused", (unsigned long long)read_token, stale ? "accepted" : "refused");
    ok = ok && accepted && !stale && write_token > read_token && sync_distributed_rwlock_unlock(writer) == 0;
    ok = ok && sync_distributed_rwlock_unlock(writer) == EPERM;  /* nothing held: EPERM */

    sync_distributed_rwlock_destroy(reader1);
    sync_distributed_rwlock_destroy(reader2);
    sync_distributed_rwlock_destroy(writer);
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    if (system(command) != 0) return 1;
    return ok ? 0 : 1;
}
