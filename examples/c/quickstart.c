/* Apple's header, unchanged: code written for macOS compiles as it is. */
#include <libkern/OSAtomic.h>
#include <pthread.h>
#include <stdio.h>

static volatile int32_t hits;

static void *worker(void *arg) {
    for (int i = 0; i < 100000; i++) OSAtomicIncrement32Barrier(&hits);
    return arg;
}

int main(void) {
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    printf("hits = %d\n", (int)hits);  /* 400000: no increment lost */
    return hits == 400000 ? 0 : 1;
}
