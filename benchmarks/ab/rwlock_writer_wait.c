/* How long a writer waits behind readers: readers loop taking the read lock and holding it for
 * 200 us; a writer takes the write lock 200 times (100 us apart) and the time each wrlock took
 * is recorded. libsync's rwlock beside glibc's writer-preferring one
 * (PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP), 1 and 3 readers, in one run. A writer that
 * readers overtake waits several hold times (or, with other threads runnable, time slices);
 * one that they do not waits about what is left of the current hold. Not run by
 * benchmarks/run.sh (an experiment: run it on an idle machine and beside CPU hogs):
 *
 *   cc -O2 -Iinclude -o build/rwlock_writer_wait benchmarks/ab/rwlock_writer_wait.c \
 *      -Lbuild -lsync -Wl,-rpath,$PWD/build -lpthread
 *   build/rwlock_writer_wait            # LD_LIBRARY_PATH=OLD/ to time another build
 *
 * Prints the median, 90th percentile and maximum wait of each. */
#define _GNU_SOURCE
#include <sync.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { WRITES = 200 };

static sync_rwlock_t rw = SYNC_RWLOCK_INIT;
static pthread_rwlock_t prw;
static int use_pthread;
static atomic_int stop;

static void read_lock(void) { if (use_pthread) pthread_rwlock_rdlock(&prw); else sync_rwlock_rdlock(&rw); }
static void read_unlock(void) { if (use_pthread) pthread_rwlock_unlock(&prw); else sync_rwlock_rdunlock(&rw); }
static void write_lock(void) { if (use_pthread) pthread_rwlock_wrlock(&prw); else sync_rwlock_wrlock(&rw); }
static void write_unlock(void) { if (use_pthread) pthread_rwlock_unlock(&prw); else sync_rwlock_wrunlock(&rw); }

static void *reader(void *unused) {
    (void)unused;
    while (!atomic_load(&stop)) {
        read_lock();
        usleep(200);
        read_unlock();
    }
    return NULL;
}

static int64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int compare(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void run(int readers) {
    pthread_t threads[readers];
    atomic_store(&stop, 0);
    for (int i = 0; i < readers; i++) pthread_create(&threads[i], NULL, reader, NULL);
    usleep(20000);
    int64_t waits[WRITES];
    for (int i = 0; i < WRITES; i++) {
        int64_t start = now();
        write_lock();
        waits[i] = now() - start;
        write_unlock();
        usleep(100);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < readers; i++) pthread_join(threads[i], NULL);
    qsort(waits, WRITES, sizeof waits[0], compare);
    printf("%-8s %d reader%s: writer's wait median %.2f ms, p90 %.2f ms, max %.2f ms\n",
           use_pthread ? "pthread" : "libsync", readers, readers == 1 ? " " : "s", waits[WRITES / 2] / 1e6,
           waits[WRITES * 9 / 10] / 1e6, waits[WRITES - 1] / 1e6);
}

int main(void) {
    pthread_rwlockattr_t attributes;
    pthread_rwlockattr_init(&attributes);
    pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&prw, &attributes);
    for (int round = 0; round < 2; round++) {
        for (int readers = 1; readers <= 3; readers += 2) {
            use_pthread = 0;
            run(readers);
            use_pthread = 1;
            run(readers);
        }
    }
    return 0;
}
