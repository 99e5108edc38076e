/* Apple's os_unfair_lock (<os/lock.h>, libsync) beside sync_mutex and pthread_mutex: uncontended
 * lock+unlock, and contended at 2 and 8 threads with ~20 ns inside and ~50 ns outside the
 * critical section (bench_locks.c's workload), fixed duration. 8 threads oversubscribe this
 * 2-core machine. */
#include "bench.h"
#include <os/lock.h>
#include <sync.h>

static long inside_loops, outside_loops;  /* calibrated to ~20 ns and ~50 ns */
static inline void delay(long loops) { for (long i = 0; i < loops; i++) __asm__ __volatile__(""); }

static void calibrate(void) {
    long n = 50000000;
    double begin = bench_cpu_now();  /* CPU time: a preempted calibration would shorten the delays */
    delay(n);
    double per_loop = (bench_cpu_now() - begin) / (double)n;
    inside_loops = (long)(20 / per_loop + 0.5);
    outside_loops = (long)(50 / per_loop + 0.5);
    printf("calibration: %.2f ns per delay loop; inside %ld loops (~20 ns), outside %ld (~50 ns)\n",
           per_loop, inside_loops, outside_loops);
}

static _Alignas(64) os_unfair_lock unfair = {0};
static _Alignas(64) sync_mutex_t mutex = SYNC_MUTEX_INIT;
static _Alignas(64) pthread_mutex_t pmutex = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) volatile long guarded;

#define CRITICAL(lock, unlock) lock; guarded++; delay(inside_loops); unlock; delay(outside_loops)

BENCH_BODY(unfair_bare, , os_unfair_lock_lock(&unfair); os_unfair_lock_unlock(&unfair))
BENCH_BODY(mutex_bare, , sync_mutex_lock(&mutex); sync_mutex_unlock(&mutex))
BENCH_BODY(pmutex_bare, , pthread_mutex_lock(&pmutex); pthread_mutex_unlock(&pmutex))

BENCH_TIMED_BODY(unfair_cs, , CRITICAL(os_unfair_lock_lock(&unfair), os_unfair_lock_unlock(&unfair)))
BENCH_TIMED_BODY(mutex_cs, , CRITICAL(sync_mutex_lock(&mutex), sync_mutex_unlock(&mutex)))
BENCH_TIMED_BODY(pmutex_cs, , CRITICAL(pthread_mutex_lock(&pmutex), pthread_mutex_unlock(&pmutex)))

int main(int argc, char **argv) {
    int ms = argc > 1 ? atoi(argv[1]) : 100;  /* duration of each timed run */
    calibrate();
    bench_row bare[] = {BENCH_ROW("libsync sync_mutex", mutex_bare, NULL),
                        BENCH_ROW("os_unfair_lock (libsync)", unfair_bare, NULL),
                        BENCH_ROW("pthread_mutex (default)", pmutex_bare, NULL)};
    bench_table("os_unfair_lock, uncontended lock+unlock", bare, 3, 1, 5000000, 0);
    int counts[] = {2, 8};
    for (int c = 0; c < 2; c++) {
        bench_row contended[] = {BENCH_ROW("pthread_mutex (default)", pmutex_cs, NULL),
                                 BENCH_ROW("os_unfair_lock (libsync)", unfair_cs, NULL),
                                 BENCH_ROW("libsync sync_mutex", mutex_cs, NULL)};
        bench_timed_table("os_unfair_lock, contended (20 ns in, 50 ns out)", contended, 3, counts[c], ms, 0);
    }
    return 0;
}
