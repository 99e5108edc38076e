/* EINVAL must change nothing: an impossible state (WRITER and readers) whose writer word
 * holds the caller's own thread id. wrunlock and downgrade cleared the writer word (and, for
 * a shared lock, struck the lock off the caller's list) before returning EINVAL. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sync.h>

int main(void) {
    int failures = 0;
    unsigned me = (unsigned)syscall(SYS_gettid);
    const unsigned states[] = {0x10000001u, 0x90000005u};
    for (int i = 0; i < 2; i++) {
        sync_rwlock_t bad = {states[i], 0, me, 0}, l = bad;
        int r = sync_rwlock_wrunlock(&l);
        if (r != EINVAL || memcmp(&l, &bad, sizeof l)) { printf("wrunlock %#x: %d, writer %u -> %u\n", states[i], r, me, l._writer); failures++; }
        l = bad;
        r = sync_rwlock_downgrade(&l);
        if (r != EINVAL || memcmp(&l, &bad, sizeof l)) { printf("downgrade %#x: %d, writer %u -> %u\n", states[i], r, me, l._writer); failures++; }
    }
    /* Shared: the caller holds it; its state is overwritten, then restored: still the holder. */
    sync_rwlock_t l;
    sync_rwlock_init(&l, SYNC_RWLOCK_SHARED);
    sync_rwlock_wrlock(&l);
    unsigned held = l._state;
    l._state = held | 3;
    int r = sync_rwlock_wrunlock(&l);
    l._state = held;
    int r2 = sync_rwlock_wrunlock(&l);
    if (r != EINVAL || r2 != 0) { printf("shared: wrunlock on the overwritten state %d, then on the restored one %d (want EINVAL, 0)\n", r, r2); failures++; }
    printf(failures ? "FAIL\n" : "ok\n");
    return failures != 0;
}
