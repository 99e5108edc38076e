/* Learning that a hold was lost, from C: on a path in a temporary directory, another object
 * breaks the holder's lock (an operator, say); the holder's handler runs on libsync's notifier
 * thread, and the critical section checks sync_distributed_lock_lost (one atomic load) before
 * each write. A Redis or PostgreSQL URL works the same way. */
#define _GNU_SOURCE
#include <sync.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void on_event(sync_distributed_lock_t *lock, int event, void *context) {
    (void)lock;
    if (event == SYNC_DISTRIBUTED_LOCK_LOST) atomic_store((atomic_bool *)context, true);  /* stop the work */
}

int main(void) {
    char dir[] = "/tmp/jobs-XXXXXX", path[64], command[96];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/jobs.lock", dir);
    sync_distributed_lock_t *lock, *operator;
    if (sync_distributed_lock_create(path, &lock) != 0 || sync_distributed_lock_create(path, &operator) != 0) return 1;

    atomic_bool stop = false;
    sync_distributed_lock_set_event_handler(lock, on_event, &stop);
    int written = 0;
    if (sync_distributed_lock_lock(lock, -1, 10000000) != 0) return 1;
    sync_distributed_lock_break(operator);                  /* someone else breaks it */
    while (written < 1000 && !sync_distributed_lock_lost(lock)) {
        written++;                                          /* write, with the token */
        usleep(10000);
    }
    int state = sync_distributed_lock_hold_state(lock);     /* 0, SYNC_DISTRIBUTED_LOCK_SUSPENDED, SYNC_DISTRIBUTED_LOCK_LOST */
    int unlocked = sync_distributed_lock_unlock(lock);      /* ESTALE: it was broken */
    for (int i = 0; i < 5000 && !atomic_load(&stop); i++) usleep(1000);  /* the handler runs on its own thread */
    printf("wrote %d items, then learned the hold was lost (state %d, unlock %d, handler told: %d)\n", written, state,
           unlocked, (int)atomic_load(&stop));
    sync_distributed_lock_destroy(lock);
    sync_distributed_lock_destroy(operator);
    snprintf(command, sizeof command, "rm -rf %s", dir);
    if (system(command) != 0) return 1;
    return written < 1000 && state == SYNC_DISTRIBUTED_LOCK_LOST && unlocked != 0 && atomic_load(&stop) ? 0 : 1;
}
