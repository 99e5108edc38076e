/* Locks through libsync's C ABI beside pthread's: mutex (uncontended; contended at 2 and 8
 * threads with ~20 ns inside and ~50 ns outside the critical section, fixed duration, with
 * fairness), recursive lock, read-write lock at 90% reads (and with 8% upgradable reads), spin lock. 8 threads oversubscribe
 * this 2-core machine. */
#include "bench.h"
#include <libkern/OSAtomic.h>
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

static _Alignas(64) sync_mutex_t mutex = SYNC_MUTEX_INIT;
static _Alignas(64) pthread_mutex_t pmutex = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) pthread_mutex_t padaptive;
static _Alignas(64) sync_recursive_lock_t recursive = SYNC_RECURSIVE_LOCK_INIT;
static _Alignas(64) pthread_mutex_t precursive;
static _Alignas(64) sync_rwlock_t rwlock = SYNC_RWLOCK_INIT;
static _Alignas(64) pthread_rwlock_t prwlock = PTHREAD_RWLOCK_INITIALIZER;
static _Alignas(64) sync_spinlock_t spin = SYNC_SPINLOCK_INIT;
static _Alignas(64) pthread_spinlock_t pspin;
static _Alignas(64) OSSpinLock osspin = OS_SPINLOCK_INIT;
static _Alignas(64) volatile long guarded;
static _Alignas(64) long writes[4];  /* writes done by the rw rows, to show writers get through */

#define CRITICAL(lock, unlock) lock; guarded++; delay(inside_loops); unlock; delay(outside_loops)

/* Uncontended: lock+unlock and nothing else. */
BENCH_BODY(mutex_bare, , sync_mutex_lock(&mutex); sync_mutex_unlock(&mutex))
BENCH_BODY(pmutex_bare, , pthread_mutex_lock(&pmutex); pthread_mutex_unlock(&pmutex))
BENCH_BODY(padaptive_bare, , pthread_mutex_lock(&padaptive); pthread_mutex_unlock(&padaptive))
BENCH_BODY(recursive_bare, , sync_recursive_lock_lock(&recursive); sync_recursive_lock_unlock(&recursive))
BENCH_BODY(precursive_bare, , pthread_mutex_lock(&precursive); pthread_mutex_unlock(&precursive))
BENCH_BODY(rd_bare, , sync_rwlock_rdlock(&rwlock); sync_rwlock_rdunlock(&rwlock))
BENCH_BODY(prd_bare, , pthread_rwlock_rdlock(&prwlock); pthread_rwlock_unlock(&prwlock))
BENCH_BODY(spin_bare, , sync_spinlock_lock(&spin); sync_spinlock_unlock(&spin))
BENCH_BODY(pspin_bare, , pthread_spin_lock(&pspin); pthread_spin_unlock(&pspin))
BENCH_BODY(osspin_bare, , OSSpinLockLock(&osspin); OSSpinLockUnlock(&osspin))

/* Contended, fixed duration. */
BENCH_TIMED_BODY(mutex_cs, , CRITICAL(sync_mutex_lock(&mutex), sync_mutex_unlock(&mutex)))
BENCH_TIMED_BODY(pmutex_cs, , CRITICAL(pthread_mutex_lock(&pmutex), pthread_mutex_unlock(&pmutex)))
BENCH_TIMED_BODY(padaptive_cs, , CRITICAL(pthread_mutex_lock(&padaptive), pthread_mutex_unlock(&padaptive)))
BENCH_TIMED_BODY(recursive_cs, , CRITICAL(sync_recursive_lock_lock(&recursive), sync_recursive_lock_unlock(&recursive)))
BENCH_TIMED_BODY(precursive_cs, , CRITICAL(pthread_mutex_lock(&precursive), pthread_mutex_unlock(&precursive)))
/* The ceiling: the same loop without a lock (what the threads' own work allows). */
BENCH_TIMED_BODY(nolock_cs, , delay(inside_loops); delay(outside_loops))
BENCH_TIMED_BODY(spin_cs, , CRITICAL(sync_spinlock_lock(&spin), sync_spinlock_unlock(&spin)))
BENCH_TIMED_BODY(pspin_cs, , CRITICAL(pthread_spin_lock(&pspin), pthread_spin_unlock(&pspin)))
BENCH_TIMED_BODY(osspin_cs, , CRITICAL(OSSpinLockLock(&osspin), OSSpinLockUnlock(&osspin)))

/* 90% reads: a per-thread xorshift picks 1 write in 10. */
#define RW(rd, rdun, wr, wrun, slot)                                                  \
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;                        \
    if (seed % 10 == 0) { CRITICAL(wr, wrun); __atomic_fetch_add(&writes[slot], 1, __ATOMIC_RELAXED); } \
    else { rd; (void)guarded; delay(inside_loops); rdun; delay(outside_loops); }
BENCH_TIMED_BODY(rw_cs, uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(bench_c->index + 1),
                 RW(sync_rwlock_rdlock(&rwlock), sync_rwlock_rdunlock(&rwlock),
                    sync_rwlock_wrlock(&rwlock), sync_rwlock_wrunlock(&rwlock), 0))
BENCH_TIMED_BODY(prw_cs, uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(bench_c->index + 1),
                 RW(pthread_rwlock_rdlock(&prwlock), pthread_rwlock_unlock(&prwlock),
                    pthread_rwlock_wrlock(&prwlock), pthread_rwlock_unlock(&prwlock), 1))
BENCH_TIMED_BODY(pmrw_cs, uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(bench_c->index + 1),
                 RW(pthread_mutex_lock(&pmutex), pthread_mutex_unlock(&pmutex),
                    pthread_mutex_lock(&pmutex), pthread_mutex_unlock(&pmutex), 2))

/* 90% reads, 8% upgradable reads (a check that writes one time in four: read, then upgrade and
 * write), 2% writes. pthread_rwlock cannot upgrade: its check-then-write takes the write lock
 * for the whole check (`up` is then wrlock and `upgrade` nothing). */
#define RWU(rd, rdun, up, upun, upgrade, upwrun, wr, wrun)                            \
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;                        \
    unsigned pick_ = (unsigned)(seed % 100);                                          \
    if (pick_ < 2) { CRITICAL(wr, wrun); }                                            \
    else if (pick_ < 10) {                                                            \
        up; (void)guarded; delay(inside_loops);                                       \
        if (pick_ < 4) { upgrade; guarded++; upwrun; } else { upun; }                 \
        delay(outside_loops);                                                         \
    } else { rd; (void)guarded; delay(inside_loops); rdun; delay(outside_loops); }
BENCH_TIMED_BODY(rwu_cs, uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(bench_c->index + 1),
                 RWU(sync_rwlock_rdlock(&rwlock), sync_rwlock_rdunlock(&rwlock),
                     sync_rwlock_uprdlock(&rwlock), sync_rwlock_uprdunlock(&rwlock),
                     sync_rwlock_upgrade(&rwlock), sync_rwlock_wrunlock(&rwlock),
                     sync_rwlock_wrlock(&rwlock), sync_rwlock_wrunlock(&rwlock)))
BENCH_TIMED_BODY(rwuw_cs, uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(bench_c->index + 1),
                 RWU(sync_rwlock_rdlock(&rwlock), sync_rwlock_rdunlock(&rwlock),
                     sync_rwlock_wrlock(&rwlock), sync_rwlock_wrunlock(&rwlock),
                     (void)0, sync_rwlock_wrunlock(&rwlock),
                     sync_rwlock_wrlock(&rwlock), sync_rwlock_wrunlock(&rwlock)))
BENCH_TIMED_BODY(prwu_cs, uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(bench_c->index + 1),
                 RWU(pthread_rwlock_rdlock(&prwlock), pthread_rwlock_unlock(&prwlock),
                     pthread_rwlock_wrlock(&prwlock), pthread_rwlock_unlock(&prwlock),
                     (void)0, pthread_rwlock_unlock(&prwlock),
                     pthread_rwlock_wrlock(&prwlock), pthread_rwlock_unlock(&prwlock)))

int main(int argc, char **argv) {
    int ms = argc > 1 ? atoi(argv[1]) : 100;  /* duration of each timed run */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&padaptive, &attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&precursive, &attr);
    pthread_spin_init(&pspin, PTHREAD_PROCESS_PRIVATE);
    calibrate();

    bench_row bare[] = {BENCH_ROW("pthread_mutex (default)", pmutex_bare, NULL),
                        BENCH_ROW("libsync sync_mutex", mutex_bare, NULL),
                        BENCH_ROW("pthread_mutex (adaptive)", padaptive_bare, NULL),
                        BENCH_ROW("pthread_mutex (recursive)", precursive_bare, NULL),
                        BENCH_ROW("libsync sync_recursive_lock", recursive_bare, NULL),
                        BENCH_ROW("pthread_rwlock read", prd_bare, NULL),
                        BENCH_ROW("libsync sync_rwlock read", rd_bare, NULL),
                        BENCH_ROW("pthread_spin", pspin_bare, NULL),
                        BENCH_ROW("libsync sync_spinlock", spin_bare, NULL),
                        BENCH_ROW("OSSpinLock (libsync)", osspin_bare, NULL)};
    bench_table("Uncontended lock+unlock", bare, 10, 1, 5000000, 0);

    int counts[] = {2, 8};
    for (int c = 0; c < 2; c++) {
        int threads = counts[c];
        bench_row mutexes[] = {BENCH_ROW("pthread_mutex (default)", pmutex_cs, NULL),
                               BENCH_ROW("libsync sync_mutex", mutex_cs, NULL),
                               BENCH_ROW("pthread_mutex (adaptive)", padaptive_cs, NULL),
                               BENCH_ROW("pthread_mutex (recursive)", precursive_cs, NULL),
                               BENCH_ROW("libsync sync_recursive_lock", recursive_cs, NULL),
                               BENCH_ROW("no lock (ceiling: the delays alone)", nolock_cs, NULL)};
        bench_timed_table("Contended mutex (20 ns in, 50 ns out)", mutexes, 6, threads, ms, 0);

        memset(writes, 0, sizeof writes);
        bench_row rw[] = {BENCH_ROW("pthread_rwlock (default)", prw_cs, NULL),
                          BENCH_ROW("libsync sync_rwlock (writer-preferring)", rw_cs, NULL),
                          BENCH_ROW("pthread_mutex for both sides", pmrw_cs, NULL)};
        bench_timed_table("Read-write lock, 90% reads", rw, 3, threads, ms, 0);
        if (bench_selected("Read-write lock")) printf("  writes completed (all runs): pthread_rwlock %ld, libsync %ld, pthread_mutex %ld\n",
               writes[1], writes[0], writes[2]);

        bench_row rwu[] = {BENCH_ROW("pthread_rwlock (write lock for the check)", prwu_cs, NULL),
                           BENCH_ROW("libsync sync_rwlock (upgradable read)", rwu_cs, NULL),
                           BENCH_ROW("libsync sync_rwlock (write lock, check)", rwuw_cs, NULL)};
        bench_timed_table("Read-write lock, 90% reads, 8% upgradable, 2% writes", rwu, 3, threads, ms, 0);

        bench_row spins[] = {BENCH_ROW("pthread_spin", pspin_cs, NULL),
                             BENCH_ROW("libsync sync_spinlock", spin_cs, NULL),
                             BENCH_ROW("OSSpinLock (libsync)", osspin_cs, NULL)};
        bench_timed_table("Spin lock (20 ns in, 50 ns out)", spins, 3, threads, ms, 0);
    }
    return 0;
}
