/* A cache filled on a miss: each thread looks a key up under the upgradable read (plain readers
 * keep reading beside it) and, on a miss, upgrades to insert it. No other writer can get in
 * between the look and the insert, so each key is computed once, however many threads miss it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sync.h>

enum { KEYS = 8, THREADS = 4 };
static sync_rwlock_t cache_lock = SYNC_RWLOCK_INIT;
static int cache[KEYS];          /* 0: not computed yet */
static int computed;             /* how many values were computed (under the write lock) */

static int lookup(int key) {
    sync_rwlock_uprdlock(&cache_lock);
    int value = cache[key];
    if (value == 0) {
        sync_rwlock_upgrade(&cache_lock);      /* no writer gets in first: still missing */
        value = cache[key] = key * key + 1;
        computed++;
        sync_rwlock_wrunlock(&cache_lock);
    } else {
        sync_rwlock_uprdunlock(&cache_lock);
    }
    return value;
}

static void *worker(void *arg) {
    (void)arg;
    for (int round = 0; round < 1000; round++)
        if (lookup(round % KEYS) != (round % KEYS) * (round % KEYS) + 1) return (void *)1;
    return NULL;
}

int main(void) {
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, NULL);
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        void *result;
        pthread_join(threads[i], &result);
        failed |= result != NULL;
    }
    /* Misuse is reported, not a hang: a plain reader cannot upgrade. */
    sync_rwlock_rdlock(&cache_lock);
    int code = sync_rwlock_upgrade(&cache_lock);
    sync_rwlock_rdunlock(&cache_lock);
    printf("%d values computed once each; a plain reader's upgrade: %s\n", computed,
           code == EDEADLK ? "EDEADLK" : "?");
    return failed || computed != KEYS || code != EDEADLK;
}
