#define _GNU_SOURCE
#include "sync_shim.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int sync_futex_wait(uint32_t *addr, uint32_t expected, int64_t deadline_ns, int process_shared) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline, so retries after EINTR
    // never stretch the total wait.
    int op = FUTEX_WAIT_BITSET | (process_shared ? 0 : FUTEX_PRIVATE_FLAG);
    struct timespec ts, *tsp = NULL;
    if (deadline_ns >= 0) {
        ts.tv_sec = (time_t)(deadline_ns / 1000000000);
        ts.tv_nsec = (long)(deadline_ns % 1000000000);
        tsp = &ts;
    }
    if (syscall(SYS_futex, addr, op, expected, tsp, NULL, FUTEX_BITSET_MATCH_ANY) == 0) return 0;
    return errno == EAGAIN ? 0 : errno;
}

int sync_futex_wake(uint32_t *addr, int count, int process_shared) {
    int op = FUTEX_WAKE | (process_shared ? 0 : FUTEX_PRIVATE_FLAG);
    long n = syscall(SYS_futex, addr, op, count, NULL, NULL, 0);
    return n < 0 ? 0 : (int)n;
}

int64_t sync_monotonic_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__thread uint32_t sync_thread_id_cache __attribute__((tls_model("initial-exec")));
__thread void *sync_thread_record_cache __attribute__((tls_model("initial-exec")));
__thread intptr_t sync_thread_hazard_depth __attribute__((tls_model("initial-exec")));
__thread struct sync_spin_estimate sync_thread_spin_estimate __attribute__((tls_model("initial-exec")));
__thread struct sync_counter_cache sync_thread_counter_cache __attribute__((tls_model("initial-exec"), aligned(64)));

__thread uint32_t sync_thread_ancestor_ids[SYNC_ANCESTOR_IDS] __attribute__((tls_model("initial-exec")));
uint32_t sync_process_id;
struct sync_wait_bucket sync_wait_buckets[SYNC_WAIT_BUCKETS];
_Static_assert(sizeof(struct sync_wait_bucket) == 64, "LibSync's WaitQueue steps through the buckets 64 bytes at a time");

// In the child of fork(), the only thread continues the parent's forking thread under a new
// kernel id: it forgets the cached id and remembers the old one among its ancestors' (newest
// first). The wait queues hold only the parent's other threads, which the child does not have
// (and one of them may have held a bucket's lock): the child starts with them empty.
static void after_fork_in_child(void) {
    if (sync_thread_id_cache != 0) {
        for (int i = SYNC_ANCESTOR_IDS - 1; i > 0; i--) sync_thread_ancestor_ids[i] = sync_thread_ancestor_ids[i - 1];
        sync_thread_ancestor_ids[0] = sync_thread_id_cache;
    }
    sync_thread_id_cache = 0;
    sync_process_id = (uint32_t)getpid();
    memset(sync_wait_buckets, 0, sizeof sync_wait_buckets);
}
__attribute__((constructor)) static void register_atfork(void) {
    sync_process_id = (uint32_t)getpid();
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

uint32_t sync_thread_id_slow(void) {
    sync_thread_id_cache = (uint32_t)syscall(SYS_gettid);
    return sync_thread_id_cache;
}

void sync_arc_barrier(void) {}
