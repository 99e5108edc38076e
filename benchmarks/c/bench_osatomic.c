/* OSAtomicAdd32, OSAtomicCompareAndSwap32 and OSSpinLock lock+unlock through libsync's C ABI,
 * beside the same operation as an inline C11 atomic and as a non-inlined C function (and
 * pthread_mutex for the lock), on 1, 2 and 8 threads (8 oversubscribes a 2-core machine). */
#include "bench.h"
#include <libkern/OSAtomic.h>
#include <stdatomic.h>
#include <stdbool.h>

int32_t peer_add32(int32_t amount, _Atomic int32_t *value);
bool peer_cas32(int32_t old, int32_t new_, _Atomic int32_t *value);
void peer_spin_lock(_Atomic int32_t *lock);
void peer_spin_unlock(_Atomic int32_t *lock);

/* Each target on its own cache line. */
static _Alignas(64) int32_t shared_libsync;
static _Alignas(64) _Atomic int32_t shared_c11;
static _Alignas(64) _Atomic int32_t shared_peer;
static _Alignas(64) OSSpinLock spin = OS_SPINLOCK_INIT;
static _Alignas(64) _Atomic int32_t spin_word_c11;
static _Alignas(64) _Atomic int32_t spin_word_peer;
static _Alignas(64) pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) long guarded;

BENCH_BODY(add_libsync, , OSAtomicAdd32(1, &shared_libsync))
BENCH_BODY(add_c11, , atomic_fetch_add_explicit(&shared_c11, 1, memory_order_relaxed))
BENCH_BODY(add_peer, , peer_add32(1, &shared_peer))

/* A CAS loop incrementing the value: the usual way CAS is used, and contention shows. */
BENCH_BODY(cas_libsync, int32_t o, do { o = shared_libsync; } while (!OSAtomicCompareAndSwap32(o, o + 1, &shared_libsync)))
BENCH_BODY(cas_c11, int32_t o, do { o = atomic_load_explicit(&shared_c11, memory_order_relaxed); }
           while (!atomic_compare_exchange_strong_explicit(&shared_c11, &o, o + 1, memory_order_relaxed, memory_order_relaxed)))
BENCH_BODY(cas_peer, int32_t o, do { o = atomic_load_explicit(&shared_peer, memory_order_relaxed); } while (!peer_cas32(o, o + 1, &shared_peer)))

BENCH_BODY(spin_libsync, , OSSpinLockLock(&spin); guarded++; OSSpinLockUnlock(&spin))
BENCH_BODY(spin_c11, , while (atomic_exchange_explicit(&spin_word_c11, 1, memory_order_acquire))
               while (atomic_load_explicit(&spin_word_c11, memory_order_relaxed)) __builtin_ia32_pause();
           guarded++; atomic_store_explicit(&spin_word_c11, 0, memory_order_release))
BENCH_BODY(spin_peer, , peer_spin_lock(&spin_word_peer); guarded++; peer_spin_unlock(&spin_word_peer))
BENCH_BODY(spin_mutex, , pthread_mutex_lock(&mutex); guarded++; pthread_mutex_unlock(&mutex))

int main(int argc, char **argv) {
    long scale = argc > 1 ? atol(argv[1]) : 1; /* iterations multiplier */
    int thread_counts[] = {1, 2, 8};
    for (int t = 0; t < 3; t++) {
        int threads = thread_counts[t];
        long iterations = 2000000L * scale / threads;
        bench_row add[] = {BENCH_ROW("non-inlined C function (C11 atomic)", add_peer, NULL),
                           BENCH_ROW("libsync OSAtomicAdd32 (C ABI)", add_libsync, NULL),
                           BENCH_ROW("inline C11 atomic_fetch_add", add_c11, NULL)};
        bench_table("OSAtomicAdd32", add, 3, threads, iterations, 0);
        bench_row cas[] = {BENCH_ROW("non-inlined C function (C11 atomic)", cas_peer, NULL),
                           BENCH_ROW("libsync OSAtomicCompareAndSwap32 (C ABI)", cas_libsync, NULL),
                           BENCH_ROW("inline C11 compare_exchange", cas_c11, NULL)};
        bench_table("OSAtomicCompareAndSwap32 (increment loop)", cas, 3, threads, iterations, 0);
        long lock_iterations = (threads == 8 ? 200000L : 1000000L) * scale / threads;
        bench_row spin_rows[] = {BENCH_ROW("pthread_mutex (default)", spin_mutex, NULL),
                                 BENCH_ROW("libsync OSSpinLock (C ABI)", spin_libsync, NULL),
                                 BENCH_ROW("non-inlined C spin lock (TTAS)", spin_peer, NULL),
                                 BENCH_ROW("inline C11 spin lock (TTAS)", spin_c11, NULL)};
        bench_table("OSSpinLock lock+unlock (counter++ inside)", spin_rows, 4, threads, lock_iterations, 0);
    }
    return 0;
}
