#define _GNU_SOURCE
#include "sync_shim.h"

#include <errno.h>
#include <execinfo.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
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

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

int sync_futex_waitv(uint32_t *const *addrs, const uint32_t *values, const uint8_t *shared, int count,
                     int64_t deadline_ns) {
    if (count < 1 || count > FUTEX_WAITV_MAX) return -EINVAL;
    struct futex_waitv waiters[FUTEX_WAITV_MAX];
    for (int i = 0; i < count; i++) {
        waiters[i] = (struct futex_waitv){
            .val = values[i], .uaddr = (uintptr_t)addrs[i],
            .flags = FUTEX_32 | (shared[i] ? 0 : FUTEX_PRIVATE_FLAG), .__reserved = 0};
    }
    struct timespec ts, *tsp = NULL;
    if (deadline_ns >= 0) {
        ts.tv_sec = (time_t)(deadline_ns / 1000000000);
        ts.tv_nsec = (long)(deadline_ns % 1000000000);
        tsp = &ts;
    }
    long n = syscall(SYS_futex_waitv, waiters, (unsigned)count, 0u, tsp, CLOCK_MONOTONIC);
    return n >= 0 ? (int)n : -errno;
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
__thread int sync_async_local_fd __attribute__((tls_model("initial-exec")));
__thread void *sync_async_local_granted __attribute__((tls_model("initial-exec")));
__thread const void *sync_thread_reading[SYNC_READING_MAX] __attribute__((tls_model("initial-exec")));
__thread uint32_t sync_thread_reading_depth __attribute__((tls_model("initial-exec")));
__thread const void *sync_thread_upgradable[SYNC_UPGRADABLE_MAX] __attribute__((tls_model("initial-exec")));
__thread intptr_t sync_thread_upgradable_reads[SYNC_UPGRADABLE_MAX] __attribute__((tls_model("initial-exec")));
__thread uint32_t sync_thread_upgradable_depth __attribute__((tls_model("initial-exec")));
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

// ---- Lock-order checking (see sync_shim.h) ----

int sync_lock_order_flag;
int sync_lock_order_env;

// Read once, when the library is loaded, before any lock can be taken.
__attribute__((constructor)) static void read_lock_order_env(void) {
    const char *value = getenv("LIBSYNC_CHECK_LOCK_ORDER");
    if (value == NULL || value[0] == 0 || strcmp(value, "0") == 0) return;
    if (strcmp(value, "1") == 0) sync_lock_order_env = 1;
    else if (strcmp(value, "abort") == 0) sync_lock_order_env = 2;
    else {
        sync_lock_order_env = -1;
        fprintf(stderr, "libsync: LIBSYNC_CHECK_LOCK_ORDER=%s is not understood (use 1 or abort): "
                "lock-order checking stays off\n", value);
        return;
    }
    sync_lock_order_set(1);
}

int sync_backtrace(void **frames, int capacity) { return backtrace(frames, capacity); }
char **sync_backtrace_symbols(void *const *frames, int count) { return backtrace_symbols(frames, count); }

static sem_t sigquit_wakeup;
static void (*sigquit_dump)(void);
static int sigquit_installed;
static pthread_mutex_t sigquit_install_lock = PTHREAD_MUTEX_INITIALIZER;

static void sigquit_handler(int signo) {
    if (!sync_lock_order_on()) {
        int saved = errno;
        signal(signo, SIG_DFL);
        raise(signo);
        errno = saved;
        return;
    }
    sem_post(&sigquit_wakeup);  // async-signal-safe
}

static void *sigquit_thread(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_setname_np(pthread_self(), "libsync-sigquit");
    for (;;) {
        if (sem_wait(&sigquit_wakeup) != 0) continue;  // EINTR
        sigquit_dump();
    }
    return NULL;
}

static int start_sigquit_thread(void) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    // The thread blocks every signal from its start: SIGQUIT must not be sent to it.
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved);
    int made = pthread_create(&thread, &attr, sigquit_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    pthread_attr_destroy(&attr);
    return made;
}

// A fork()ed child has the handler but not the thread: it gets one of its own when it next
// uses lock-order checking while it is on (sync_lock_order_sigquit_check), not in the fork
// handler, as most children exec at once.
static int sigquit_thread_missing;
static void sigquit_after_fork_in_child(void) {
    pthread_mutex_init(&sigquit_install_lock, NULL);
    sem_init(&sigquit_wakeup, 0, 0);
    __atomic_store_n(&sigquit_thread_missing, 1, __ATOMIC_RELAXED);
}

void sync_lock_order_sigquit_check(void) {
    // Only while checking is on: a child that merely makes or frees locks starts no thread.
    if (!__atomic_load_n(&sigquit_thread_missing, __ATOMIC_RELAXED) || !sync_lock_order_on()) return;
    pthread_mutex_lock(&sigquit_install_lock);
    if (sigquit_thread_missing && start_sigquit_thread() == 0) __atomic_store_n(&sigquit_thread_missing, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&sigquit_install_lock);
}

int sync_lock_order_install_sigquit(void (*dump)(void)) {
    pthread_mutex_lock(&sigquit_install_lock);
    int result = 1;
    if (!sigquit_installed) {
        struct sigaction old;
        if (sigaction(SIGQUIT, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) {
            result = 0;
        } else {
            sigquit_dump = dump;
            sem_init(&sigquit_wakeup, 0, 0);
            int made = start_sigquit_thread();
            if (made != 0) {
                result = -1;
            } else {
                struct sigaction action;
                memset(&action, 0, sizeof action);
                action.sa_handler = sigquit_handler;
                sigemptyset(&action.sa_mask);
                action.sa_flags = SA_RESTART;
                sigaction(SIGQUIT, &action, NULL);
                sigquit_installed = 1;
                pthread_atfork(NULL, NULL, sigquit_after_fork_in_child);
            }
        }
    }
    pthread_mutex_unlock(&sigquit_install_lock);
    return result;
}
