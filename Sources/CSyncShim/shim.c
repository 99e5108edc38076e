#define _GNU_SOURCE
#include "sync_shim.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
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

int sync_tgkill_probe(int32_t tgid, int32_t tid) {
    return syscall(SYS_tgkill, tgid, tid, 0) == 0 ? 0 : errno;
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

// The child of fork() has a new kernel id but a copy of the parent's cache: forget it there.
static void forget_thread_id(void) { sync_thread_id_cache = 0; }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_thread_id); }

uint32_t sync_thread_id_slow(void) {
    pthread_once(&atfork_once, register_atfork);
    sync_thread_id_cache = (uint32_t)syscall(SYS_gettid);
    return sync_thread_id_cache;
}

void sync_arc_barrier(void) {}
