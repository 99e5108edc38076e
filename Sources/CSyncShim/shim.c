#define _GNU_SOURCE
#include "sync_shim.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
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

int sync_futex_sleepers(uint32_t *addr, int process_shared) {
    int op = FUTEX_CMP_REQUEUE | (process_shared ? 0 : FUTEX_PRIVATE_FLAG);
    for (int tries = 0; tries < 64; tries++) {
        // The comparison only guards the requeue: a word that changed since the load (EAGAIN)
        // is read again.
        uint32_t value = __atomic_load_n(addr, __ATOMIC_SEQ_CST);
        long n = syscall(SYS_futex, addr, op, 0, (long)INT32_MAX, addr, value);
        if (n >= 0) return (int)n;
        if (errno != EAGAIN) return -1;
    }
    return -1;
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
__thread uint64_t sync_thread_counter_cache[SYNC_COUNTER_CACHE_WORDS] __attribute__((tls_model("initial-exec"), aligned(64)));

__thread uint32_t sync_thread_ancestor_ids[SYNC_ANCESTOR_IDS] __attribute__((tls_model("initial-exec")));
uint32_t sync_process_id;
unsigned char sync_wait_buckets[SYNC_WAIT_BUCKETS * SYNC_WAIT_BUCKET_SIZE] __attribute__((aligned(64)));

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

int sync_rt_sigqueueinfo(int32_t pid, int signo, siginfo_t *info) {
    return syscall(SYS_rt_sigqueueinfo, pid, signo, info) == 0 ? 0 : errno;
}

int sync_rt_tgsigqueueinfo(int32_t pid, int32_t tid, int signo, siginfo_t *info) {
    return syscall(SYS_rt_tgsigqueueinfo, pid, tid, signo, info) == 0 ? 0 : errno;
}

void sync_thread_set_name(const char *name) { pthread_setname_np(pthread_self(), name); }

static struct sync_signal_forwarding forwarding;
struct sync_signal_forwarding *sync_signal_forwarding_state(void) { return &forwarding; }

void sync_signal_forward(int signo, siginfo_t *info, void *ucontext) {
    int saved_errno = errno;
    // Counted before `routed` is read: the router clears `routed`, then waits for in_flight == 0,
    // so either it sees this handler or this handler sees the signal unrouted (both seq_cst).
    __atomic_add_fetch(&forwarding.in_flight, 1, __ATOMIC_SEQ_CST);
    int32_t pid = (int32_t)getpid();
    if (pid != __atomic_load_n(&forwarding.process, __ATOMIC_SEQ_CST)) {
        sigaddset(&((ucontext_t *)ucontext)->uc_sigmask, signo);
        sync_rt_tgsigqueueinfo(pid, (int32_t)syscall(SYS_gettid), signo, info);
    } else if (signo > 0 && signo < 65 && __atomic_load_n(&forwarding.routed[signo], __ATOMIC_SEQ_CST)) {
        siginfo_t forwarded = *info;
        forwarded.si_errno = SYNC_SIGNAL_FORWARDED;
        if (info->si_code >= 0 || info->si_code == SI_TKILL) {
            // The kernel queues these codes (kill, tgkill, its own) only to the calling thread
            // itself: send an SI_QUEUE carrying the code in its value.
            forwarded.si_errno = SYNC_SIGNAL_FORWARDED_CODE;
            forwarded.si_code = SI_QUEUE;
            if (info->si_code > SI_USER && info->si_code < SI_KERNEL && signo != SIGCHLD)
                forwarded.si_pid = 0, forwarded.si_uid = 0;  // a layout without a sender (SIGIO's)
            forwarded.si_value.sival_ptr = NULL;
            forwarded.si_value.sival_int = info->si_code;
        }
        sync_rt_tgsigqueueinfo(pid, __atomic_load_n(&forwarding.receiver, __ATOMIC_SEQ_CST), signo, &forwarded);
    } else {
        // Unrouted after the kernel chose this handler: raise it again in this thread (any code
        // may be queued to oneself), for the action now in force.
        sync_rt_tgsigqueueinfo(pid, (int32_t)syscall(SYS_gettid), signo, info);
    }
    if (__atomic_sub_fetch(&forwarding.in_flight, 1, __ATOMIC_SEQ_CST) == 0)
        sync_futex_wake(&forwarding.in_flight, INT32_MAX, 0);
    errno = saved_errno;
}
