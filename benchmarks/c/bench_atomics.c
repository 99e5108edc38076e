/* The atomics family beside its peers, in the same run:
 *   AtomicInteger ops vs the raw OSAtomic call they wrap (target <= 1.2x);
 *   AtomicReference get (+1, then release) with 2 readers and 1 writer vs a mutex-protected
 *   reference (target >= 2x);
 *   Throttler fail-fast path vs a mutex-based throttler and sem_trywait on a full semaphore;
 *   dictionary reads with 2 reader threads vs a mutex-protected dictionary (target >= 1.5x). */
#include "bench.h"
#include <libkern/OSAtomic.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sync.h>

static _Alignas(64) sync_atomic_int32_t ai32;
static _Alignas(64) volatile int32_t raw32;
static _Alignas(64) sync_atomic_int64_t ai64;
static _Alignas(64) volatile OSAtomic_int64_aligned64_t raw64;

BENCH_BODY(ai32_inc, , sync_atomic_int32_increment_and_get(&ai32))
BENCH_BODY(raw32_inc, , OSAtomicIncrement32Barrier(&raw32))
BENCH_BODY(ai64_add, , sync_atomic_int64_add_and_get(&ai64, 3))
BENCH_BODY(raw64_add, , OSAtomicAdd64Barrier(3, &raw64))
BENCH_BODY(ai32_cas, int32_t o, do { o = sync_atomic_int32_get(&ai32); } while (!sync_atomic_int32_compare_and_set(&ai32, o, o + 1)))
BENCH_BODY(raw32_cas, int32_t o, do { o = raw32; } while (!OSAtomicCompareAndSwap32Barrier(o, o + 1, &raw32)))

/* ---- objects with an atomic reference count ---- */
typedef struct { atomic_long refs; char pad[56]; } object;
static void obj_retain(void *o) { atomic_fetch_add_explicit(&((object *)o)->refs, 1, memory_order_relaxed); }
static void obj_release(void *o) { atomic_fetch_sub_explicit(&((object *)o)->refs, 1, memory_order_acq_rel); }
static object objects[4];

static _Alignas(64) sync_atomic_ref_t ref = SYNC_ATOMIC_REF_INIT(obj_retain, obj_release);
static _Alignas(64) pthread_mutex_t ref_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) object *mutex_ref;

static void *mutex_get(void) {
    pthread_mutex_lock(&ref_mutex);
    object *o = mutex_ref;
    obj_retain(o);
    pthread_mutex_unlock(&ref_mutex);
    return o;
}
static void mutex_set(object *o) {
    obj_retain(o);
    pthread_mutex_lock(&ref_mutex);
    object *old = mutex_ref;
    mutex_ref = o;
    pthread_mutex_unlock(&ref_mutex);
    if (old) obj_release(old);
}
/* Thread 0 writes (a set every 16 operations), the others read. */
BENCH_BODY(ref_mixed, , if (bench_c->index == 0) { if (bench_i % 16 == 0) sync_atomic_ref_set(&ref, &objects[bench_i % 4]); }
                        else obj_release(sync_atomic_ref_get(&ref)))
BENCH_BODY(mutex_ref_mixed, , if (bench_c->index == 0) { if (bench_i % 16 == 0) mutex_set(&objects[bench_i % 4]); }
                              else obj_release(mutex_get()))

/* ---- throttlers, full: every attempt is refused ---- */
static _Alignas(64) sync_throttler_t throttler = SYNC_THROTTLER_INIT(1);
static _Alignas(64) pthread_mutex_t throttle_mutex = PTHREAD_MUTEX_INITIALIZER;
static long throttle_count = 1, throttle_limit = 1, throttle_rejections;
static _Alignas(64) sem_t semaphore;

static int mutex_try_enter(void) { /* the seed's "slightly better synchronized version" */
    pthread_mutex_lock(&throttle_mutex);
    int ok = throttle_count < throttle_limit;
    if (ok) throttle_count++; else throttle_rejections++;
    pthread_mutex_unlock(&throttle_mutex);
    return ok;
}
BENCH_BODY(throttle_libsync, , if (sync_throttler_try_enter(&throttler) == 0) abort())
BENCH_BODY(throttle_with_mutex, , if (mutex_try_enter()) abort())
BENCH_BODY(throttle_sem, , if (sem_trywait(&semaphore) == 0) abort())

/* ---- dictionaries: reads of a few keys ---- */
static sync_dictionary_t *dict;
static const char *keys[4] = {"alpha", "beta", "gamma", "delta"};
static _Alignas(64) pthread_mutex_t dict_mutex = PTHREAD_MUTEX_INITIALIZER;
/* The peer: a small open-addressing table of string keys under one mutex. */
enum { SLOTS = 64 };
static struct { const char *key; size_t len; void *value; } table[SLOTS];
static size_t hash_bytes(const char *k, size_t n) { size_t h = 1469598103934665603u; while (n--) h = (h ^ (unsigned char)*k++) * 1099511628211u; return h; }
static void *table_get(const char *k, size_t n) {
    pthread_mutex_lock(&dict_mutex);
    void *v = NULL;
    for (size_t i = hash_bytes(k, n) % SLOTS; table[i].key; i = (i + 1) % SLOTS)
        if (table[i].len == n && memcmp(table[i].key, k, n) == 0) { v = table[i].value; obj_retain(v); break; }
    pthread_mutex_unlock(&dict_mutex);
    return v;
}
static void table_put(const char *k, size_t n, void *v) {
    size_t i = hash_bytes(k, n) % SLOTS;
    while (table[i].key) i = (i + 1) % SLOTS;
    table[i].key = k; table[i].len = n; table[i].value = v;
}
BENCH_BODY(dict_libsync, , { const char *k = keys[bench_i & 3]; obj_release(sync_dictionary_get(dict, k, strlen(k))); })
BENCH_BODY(dict_with_mutex, , { const char *k = keys[bench_i & 3]; obj_release(table_get(k, strlen(k))); })

int main(int argc, char **argv) {
    long scale = argc > 1 ? atol(argv[1]) : 1;
    for (int threads = 1; threads <= 2; threads++) {
        long n = 2000000L * scale / threads;
        bench_row inc[] = {BENCH_ROW("OSAtomicIncrement32Barrier (raw)", raw32_inc, NULL),
                           BENCH_ROW("sync_atomic_int32_increment_and_get", ai32_inc, NULL)};
        bench_table("AtomicInteger32 incrementAndGet", inc, 2, threads, n, 0);
        bench_row add[] = {BENCH_ROW("OSAtomicAdd64Barrier (raw)", raw64_add, NULL),
                           BENCH_ROW("sync_atomic_int64_add_and_get", ai64_add, NULL)};
        bench_table("AtomicInteger64 addAndGet", add, 2, threads, n, 0);
        bench_row cas[] = {BENCH_ROW("OSAtomicCompareAndSwap32Barrier loop (raw)", raw32_cas, NULL),
                           BENCH_ROW("sync_atomic_int32 get + compare_and_set loop", ai32_cas, NULL)};
        bench_table("AtomicInteger32 compareAndSet (increment loop)", cas, 2, threads, n, 0);
    }

    for (int i = 0; i < 4; i++) atomic_init(&objects[i].refs, 1);
    sync_atomic_ref_set(&ref, &objects[0]);
    mutex_set(&objects[0]);
    bench_row refs[] = {BENCH_ROW("pthread_mutex-protected reference", mutex_ref_mixed, NULL),
                        BENCH_ROW("sync_atomic_ref (lock-free)", ref_mixed, NULL)};
    bench_table("AtomicReference get (+1, release): 2 readers + 1 writer", refs, 2, 3, 1000000L * scale, 0);

    sync_throttler_try_enter(&throttler); /* full from now on */
    sem_init(&semaphore, 0, 0);
    for (int threads = 1; threads <= 2; threads++) {
        bench_row th[] = {BENCH_ROW("mutex-based throttler (seed 004)", throttle_with_mutex, NULL),
                          BENCH_ROW("sem_trywait (full semaphore)", throttle_sem, NULL),
                          BENCH_ROW("sync_throttler_try_enter (counts rejections)", throttle_libsync, NULL)};
        bench_table("Throttler fail-fast path (full)", th, 3, threads, 2000000L * scale / threads, 0);
    }

    sync_dictionary_create(&dict, obj_retain, obj_release);
    for (int i = 0; i < 4; i++) {
        sync_dictionary_set(dict, keys[i], strlen(keys[i]), &objects[i]);
        table_put(keys[i], strlen(keys[i]), &objects[i]);
    }
    for (int threads = 1; threads <= 2; threads++) {
        bench_row d[] = {BENCH_ROW("pthread_mutex-protected hash table (C)", dict_with_mutex, NULL),
                         BENCH_ROW("sync_dictionary_get (+1, release)", dict_libsync, NULL)};
        bench_table("Dictionary reads", d, 2, threads, 1000000L * scale / threads, 0);
    }
    sync_dictionary_destroy(dict);
    return 0;
}
