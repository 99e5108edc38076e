/* sync_synchronized hands a token from one thread to the next even when the two use different
 * entries of the lock table (the entry of a token nobody holds may be reused for another token,
 * and the token gets a fresh entry): the next holder must still see everything the last one
 * wrote. Plain counters updated inside, tokens sharing one bucket so that entries churn. Under
 * ThreadSanitizer (scripts/sanitize.sh) a missing happens-before edge is reported even when the
 * hardware hides it; without it, the counts are checked. */
#include "check.h"
#include <sync.h>
#include <pthread.h>
#include <stdint.h>

enum { TOKENS = 8, THREADS = 8, ROUNDS = 20000 };
static char tokens[TOKENS * 65536];  /* 64 KiB apart: one bucket */
static long counts[TOKENS], inside[TOKENS];

/* Failures are counted per thread and checked after the join: a shared counter updated with
 * acquire/release ordering would itself order the threads and hide a missing edge from TSan. */
static void *worker(void *arg) {
    long self = (long)(intptr_t)arg, failures = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int k = (int)((i + self) % TOKENS);
        if (sync_synchronized_enter(&tokens[k * 65536]) != 0) failures++;
        if (inside[k]++ != 0) failures++;
        counts[k]++;
        inside[k]--;
        if (sync_synchronized_exit(&tokens[k * 65536]) != 0) failures++;
    }
    return (void *)(intptr_t)failures;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) {
        void *failures;
        pthread_join(t[i], &failures);
        CHECK_EQ((intptr_t)failures, 0);
    }
    long total = 0;
    for (int k = 0; k < TOKENS; k++) total += counts[k];
    CHECK_EQ(total, (long)THREADS * ROUNDS);
    DONE();
}
