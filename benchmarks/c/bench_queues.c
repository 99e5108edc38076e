/* Seed 003's comparison made real: a shared property read 90% / written 10% by 2 and 8 threads,
 * through @synchronized (emulated as objc_sync_enter is: a recursive mutex found by the
 * object's address), pthread_mutex, pthread_rwlock, a serial queue (sync get + async set), a
 * concurrent queue (sync get + barrier async set) and the isolated value (read + async or sync
 * write), beside libsync's own @synchronized (sync_synchronized_enter/exit), mutex and rwlock. Adding a row is one PROPERTY_ROW line (plus its get/set functions). */
#include "bench.h"
#include <sync.h>
#include <stdint.h>

typedef struct {
    long (*get)(void);
    void (*set)(long);
} property;

static volatile long sink;

/* 9 reads, then 1 write, through the row's accessors. */
BENCH_BODY(property_body, const property *p = arg,
           if (bench_i % 10 == 9) p->set(bench_i); else sink = p->get())

#define PROPERTY_ROW(name, get, set) BENCH_ROW(name, property_body, (&(property){get, set}))

static _Alignas(64) long value;

/* @synchronized(self): objc_sync_enter hashes the object to one of a table of recursive locks. */
static pthread_mutex_t sync_table[64];
static pthread_mutex_t *sync_lock_for(const void *object) {
    return &sync_table[((uintptr_t)object >> 4) % 64];
}
static long synchronized_get(void) {
    pthread_mutex_t *m = sync_lock_for(&value);
    pthread_mutex_lock(m);
    long v = value;
    pthread_mutex_unlock(m);
    return v;
}
static void synchronized_set(long v) {
    pthread_mutex_t *m = sync_lock_for(&value);
    pthread_mutex_lock(m);
    value = v;
    pthread_mutex_unlock(m);
}

static _Alignas(64) pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static long mutex_get(void) { pthread_mutex_lock(&mutex); long v = value; pthread_mutex_unlock(&mutex); return v; }
static void mutex_set(long v) { pthread_mutex_lock(&mutex); value = v; pthread_mutex_unlock(&mutex); }

static _Alignas(64) pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
static long rwlock_get(void) { pthread_rwlock_rdlock(&rwlock); long v = value; pthread_rwlock_unlock(&rwlock); return v; }
static void rwlock_set(long v) { pthread_rwlock_wrlock(&rwlock); value = v; pthread_rwlock_unlock(&rwlock); }

/* libsync's locks, the same way. */
static long sync_synchronized_get(void) { sync_synchronized_enter(&value); long v = value; sync_synchronized_exit(&value); return v; }
static void sync_synchronized_set(long v) { sync_synchronized_enter(&value); value = v; sync_synchronized_exit(&value); }
static _Alignas(64) sync_mutex_t sync_mutex = SYNC_MUTEX_INIT;
static long sync_mutex_get(void) { sync_mutex_lock(&sync_mutex); long v = value; sync_mutex_unlock(&sync_mutex); return v; }
static void sync_mutex_set(long v) { sync_mutex_lock(&sync_mutex); value = v; sync_mutex_unlock(&sync_mutex); }
static _Alignas(64) sync_rwlock_t sync_rwlock = SYNC_RWLOCK_INIT;
static long sync_rwlock_get(void) { sync_rwlock_rdlock(&sync_rwlock); long v = value; sync_rwlock_rdunlock(&sync_rwlock); return v; }
static void sync_rwlock_set(long v) { sync_rwlock_wrlock(&sync_rwlock); value = v; sync_rwlock_wrunlock(&sync_rwlock); }

/* Queue work: read into *context / write the value carried in the context pointer. */
static void read_value(void *out) { *(long *)out = value; }
static void write_value(void *v) { value = (long)(intptr_t)v; }

static sync_queue_t *serial, *concurrent;
static long serial_get(void) { long v; sync_queue_sync(serial, read_value, &v); return v; }
static void serial_set(long v) { sync_queue_async(serial, write_value, (void *)(intptr_t)v); }
static long concurrent_get(void) { long v; sync_queue_sync(concurrent, read_value, &v); return v; }
static void concurrent_set(long v) { sync_queue_barrier_async(concurrent, write_value, (void *)(intptr_t)v); }

static sync_isolated_t *isolated;
static void isolated_read(void *value_, void *out) { *(long *)out = *(long *)value_; }
static void isolated_write(void *value_, void *v) { *(long *)value_ = (long)(intptr_t)v; }
static long isolated_get(void) { long v; sync_isolated_read(isolated, isolated_read, &v); return v; }
static void isolated_set_async(long v) { sync_isolated_write_async(isolated, isolated_write, (void *)(intptr_t)v); }
static void isolated_set_sync(long v) { sync_isolated_write_sync(isolated, isolated_write, (void *)(intptr_t)v); }

int main(int argc, char **argv) {
    long scale = argc > 1 ? atol(argv[1]) : 1; /* iterations multiplier */
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    for (int i = 0; i < 64; i++) pthread_mutex_init(&sync_table[i], &recursive);
    sync_queue_create(&serial, "bench.serial", SYNC_QUEUE_SERIAL);
    sync_queue_create(&concurrent, "bench.concurrent", SYNC_QUEUE_CONCURRENT);
    sync_isolated_create(&isolated, &value);

    int thread_counts[] = {2, 8};
    for (int t = 0; t < 2; t++) {
        int threads = thread_counts[t];
        bench_row rows[] = {
            PROPERTY_ROW("@synchronized (recursive mutex by address)", synchronized_get, synchronized_set),
            PROPERTY_ROW("pthread_mutex", mutex_get, mutex_set),
            PROPERTY_ROW("pthread_rwlock", rwlock_get, rwlock_set),
            PROPERTY_ROW("libsync sync_synchronized (enter/exit)", sync_synchronized_get, sync_synchronized_set),
            PROPERTY_ROW("libsync sync_mutex", sync_mutex_get, sync_mutex_set),
            PROPERTY_ROW("libsync sync_rwlock", sync_rwlock_get, sync_rwlock_set),
            PROPERTY_ROW("serial queue: sync get, async set", serial_get, serial_set),
            PROPERTY_ROW("concurrent queue: sync get, barrier async set", concurrent_get, concurrent_set),
            PROPERTY_ROW("isolated value: read, async write", isolated_get, isolated_set_async),
            PROPERTY_ROW("isolated value: read, sync write", isolated_get, isolated_set_sync),
        };
        int count = (int)(sizeof rows / sizeof rows[0]);
        bench_table("Property 90% read / 10% write (C ABI)", rows, count, threads, 40000L * scale / threads, 1);
    }
    sync_isolated_destroy(isolated);
    sync_queue_destroy(serial);
    sync_queue_destroy(concurrent);
    return 0;
}
