/* libsync's locks from C: an owner-checked mutex that reports misuse, a read-write lock, and a
 * run-once initializer. No init call and nothing to destroy: each starts from its static
 * initializer. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sync.h>

static sync_mutex_t mutex = SYNC_MUTEX_INIT;
static sync_rwlock_t table_lock = SYNC_RWLOCK_INIT;
static sync_once_t once = SYNC_ONCE_INIT;
static int table[16], initialized, reads;

static void init_table(void *context) {
    (void)context;
    for (int i = 0; i < 16; i++) table[i] = i;
    initialized++;                                  /* runs once, whoever calls first */
}

static void *reader(void *arg) {
    (void)arg;
    sync_once(&once, init_table, NULL);             /* every caller returns after it ran */
    for (int i = 0; i < 1000; i++) {
        sync_rwlock_rdlock(&table_lock);            /* readers share the lock */
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += table[j];
        sync_rwlock_rdunlock(&table_lock);
        sync_mutex_lock(&mutex);
        reads += sum == 120;
        sync_mutex_unlock(&mutex);
    }
    return NULL;
}

int main(void) {
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, reader, NULL);
    sync_rwlock_wrlock(&table_lock);                /* a writer waits for the readers, alone */
    int tmp = table[0]; table[0] = table[1]; table[1] = tmp;   /* the sum stays 120 */
    sync_rwlock_wrunlock(&table_lock);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);

    sync_mutex_lock(&mutex);
    int again = sync_mutex_lock(&mutex);            /* the caller holds it: EDEADLK, not a hang */
    sync_mutex_unlock(&mutex);
    int extra = sync_mutex_unlock(&mutex);          /* not held: EPERM, nothing changes */
    int timed = sync_mutex_lock_timed(&mutex, 100000000);   /* free: 0 at once */
    sync_mutex_unlock(&mutex);

    printf("initialized %d time, %d consistent reads, relock: %s, extra unlock: %s, lock_timed: %d\n",
           initialized, reads, again == EDEADLK ? "EDEADLK" : "?", extra == EPERM ? "EPERM" : "?", timed);
    return initialized == 1 && reads == 4000 && again == EDEADLK && extra == EPERM && timed == 0 ? 0 : 1;
}
