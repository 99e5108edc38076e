/* Apple's os_unfair_lock on libsync, as written for macOS: a cache that threads fill under its
 * lock, with an owner assertion in the helper that expects the lock held. */
#include <os/lock.h>
#include <pthread.h>
#include <stdio.h>

struct cache {
    os_unfair_lock lock;
    long entries[16];
    long misses;
};

static long compute(int key) { return (long)key * key; }

/* Called with cache->lock held. */
static long lookup_locked(struct cache *cache, int key) {
    os_unfair_lock_assert_owner(&cache->lock);
    if (cache->entries[key] == 0) {
        cache->entries[key] = compute(key) + 1;
        cache->misses++;
    }
    return cache->entries[key] - 1;
}

static struct cache shared;
static long sums[4];

static void *worker(void *arg) {
    long *sum = arg;
    for (int i = 0; i < 100000; i++) {
        os_unfair_lock_lock(&shared.lock);
        *sum += lookup_locked(&shared, i % 16);
        os_unfair_lock_unlock(&shared.lock);
    }
    return NULL;
}

int main(void) {
    shared.lock = OS_UNFAIR_LOCK_INIT;
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, worker, &sums[i]);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    os_unfair_lock_assert_not_owner(&shared.lock);
    /* Each key is computed once; each thread sums 6250 rounds of 0^2 + ... + 15^2 = 1240. */
    printf("misses: %ld, sums: %ld %ld %ld %ld\n", shared.misses, sums[0], sums[1], sums[2], sums[3]);
    for (int i = 0; i < 4; i++) if (sums[i] != 6250L * 1240) return 1;
    return shared.misses == 16 ? 0 : 1;
}
