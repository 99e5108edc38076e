// System calls that Swift cannot make directly (syscall(2) is variadic), and the storage Swift
// cannot declare (initial-exec thread-locals, and tables a fork handler must reset without
// running Swift code). No logic lives here, and no layout beyond plain words and bytes: the
// Swift core (Sources/LibSync/Support) types the bytes and builds every primitive on top.
#ifndef SYNC_SHIM_H
#define SYNC_SHIM_H

#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Sleeps while *addr == expected, until woken or until the CLOCK_MONOTONIC deadline
/// (nanoseconds; deadline_ns < 0 = no deadline). process_shared selects the shared futex
/// namespace (memory mapped by several processes). Returns 0 when woken (or the value
/// differed), or ETIMEDOUT / EINTR.
int sync_futex_wait(uint32_t *addr, uint32_t expected, int64_t deadline_ns, int process_shared);

/// futex_waitv(2) (Linux >= 5.16): sleeps until one of `count` (1..128) 32-bit words is woken,
/// while each `addrs[i]` still holds `values[i]`, or until the CLOCK_MONOTONIC deadline
/// (nanoseconds; < 0: none). `shared[i]` selects the shared futex namespace for word i.
/// Returns the index of a woken word (>= 0), or a negated errno: -EAGAIN (a word differed),
/// -ETIMEDOUT, -EINTR, -ENOSYS (kernel too old).
int sync_futex_waitv(uint32_t *const *addrs, const uint32_t *values, const uint8_t *shared, int count,
                     int64_t deadline_ns);

/// Wakes up to count threads sleeping on addr. Returns the number woken.
int sync_futex_wake(uint32_t *addr, int count, int process_shared);

/// How many threads sleep on addr now, waking none: FUTEX_CMP_REQUEUE with nr_wake 0 moves
/// every sleeper from addr onto addr itself, where the kernel leaves each in its place, and
/// returns how many it moved. -1 if the kernel refuses the call (the count is unknown).
int sync_futex_sleepers(uint32_t *addr, int process_shared);

/// Whether thread `tid` belongs to process `tgid` (tgkill with signal 0): 0 if it does, else
/// the errno (ESRCH: no such thread in that process; EPERM: it exists).
int sync_tgkill_probe(int32_t tgid, int32_t tid);

/// CLOCK_MONOTONIC now, in nanoseconds.
int64_t sync_monotonic_now_ns(void);

/// The calling thread's cached kernel id, 0 until first asked (and in a fork()ed child, whose
/// id differs from its parent's). initial-exec TLS: one %fs-relative load, no function call.
#if defined(__has_attribute) && __has_attribute(swift_attr)
#define SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((swift_attr("nonisolated(unsafe)")))
#else
#define SYNC_SWIFT_NONISOLATED_UNSAFE
#endif
/// Swift reads it directly (threadID() in Futex.swift): per thread, so nonisolated(unsafe) is safe.
extern __thread uint32_t sync_thread_id_cache SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));
uint32_t sync_thread_id_slow(void);

/// The calling thread's kernel id (never 0), cached per thread: lock words store it as owner.
static inline uint32_t sync_thread_id(void) {
    uint32_t tid = sync_thread_id_cache;
    return tid != 0 ? tid : sync_thread_id_slow();
}

/// The kernel ids the calling thread had in the processes it was fork()ed from, newest first
/// (0: none): the thread of a fork()ed child continues the parent's forking thread, so it still
/// holds the process-private locks that thread held. Set by the library's fork handler.
#define SYNC_ANCESTOR_IDS 4
extern __thread uint32_t sync_thread_ancestor_ids[SYNC_ANCESTOR_IDS] SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));

/// The process's id (its main thread's kernel id), kept current across fork().
extern uint32_t sync_process_id SYNC_SWIFT_NONISOLATED_UNSAFE;

/// The running Swift task (its address; NULL outside a task) and whether it is cancelled, through
/// the concurrency runtime's exported entry points (swiftcall), called from C: Swift's own
/// `withUnsafeCurrentTask` retains and releases the task around its body, which cost an async
/// acquire+release more than its lock (and declaring these with @_silgen_name in Swift clashes
/// with _Concurrency's own declarations). Only the address is used: no reference is taken.
/// Declared for Swift's importer (clang) only: C compilers without the swiftcall convention
/// (gcc) never call them.
#if defined(__clang__)
void *swift_task_getCurrent(void) __attribute__((swiftcall));
_Bool swift_task_isCancelled(void *task) __attribute__((swiftcall));
static inline uintptr_t sync_current_task(void) { return (uintptr_t)swift_task_getCurrent(); }
static inline int sync_task_is_cancelled(uintptr_t task) { return swift_task_isCancelled((void *)task); }
#endif

/// sync_mutex_unlock_local's delivery slot, per thread (storage only): while the thread releases
/// through that function, its event loop's eventfd + 1 (0: none), and the handle of an acquire
/// of that eventfd that the release completed, which the caller then delivers (nothing is
/// written to the eventfd).
extern __thread int sync_async_local_fd SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));
extern __thread void *sync_async_local_granted SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));

/// Whether `id` (nonzero) is one of the calling thread's ancestor ids.
static inline int sync_thread_is_ancestor(uint32_t id) {
    for (int i = 0; i < SYNC_ANCESTOR_IDS; i++) {
        if (sync_thread_ancestor_ids[i] == id) return 1;
    }
    return 0;
}

/// The wait queues of process-private condition variables: SYNC_WAIT_BUCKETS buckets of
/// SYNC_WAIT_BUCKET_SIZE bytes (LibSync's WaitBucketLayout), all zero when empty. Storage only,
/// kept here so that the fork handler can empty it in the child without running Swift code.
#define SYNC_WAIT_BUCKETS 256
#define SYNC_WAIT_BUCKET_SIZE 64
extern unsigned char sync_wait_buckets[SYNC_WAIT_BUCKETS * SYNC_WAIT_BUCKET_SIZE] SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((aligned(64)));
static inline void *sync_wait_table(void) { return sync_wait_buckets; }

/// The calling thread's record of hazard slots and counters (LibSync's ThreadRecord), NULL until
/// it takes one. initial-exec TLS like the thread id: Swift reads and writes it directly, one
/// %fs-relative access.
extern __thread void *sync_thread_record_cache SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));

/// How many of its record's hazard slots the calling thread is using (nested readers take the
/// following ones). In TLS, not in the record: a writer scanning the records for hazards reads
/// them, and a count written there at every read would cost the reader a cache-line transfer
/// (and its fenced publish a stall) after each scan.
extern __thread intptr_t sync_thread_hazard_depth SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));

/// The calling thread's counter cache for the throttler that refused it last: 32 bytes, the
/// storage of LibSync's CounterCacheLayout (Support/ThreadRecord.swift), where its fields and
/// their rules are. In TLS, so that counting a refusal is %fs-relative accesses only.
#define SYNC_COUNTER_CACHE_WORDS 4
extern __thread uint64_t sync_thread_counter_cache[SYNC_COUNTER_CACHE_WORDS] SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec"), aligned(64)));
/// Its address, taken in C: Swift's `&sync_thread_counter_cache` would be a formal access of the
/// whole variable for as long as the pointer lives, which races (for TSan) with another thread's
/// atomic read of one of its fields through a published pointer.
static inline uint64_t *sync_thread_counter_cache_address(void) { return sync_thread_counter_cache; }

/// Does nothing, out of the Swift optimizer's sight: no retain or release is moved across a call
/// to it (the call might release anything). ReferenceCell.unprotect calls it before clearing a
/// hazard slot; otherwise ARC may sink a reader's retain past the slot's release store, after
/// which a writer may already have freed the object.
void sync_arc_barrier(void);

/// One spin-wait hint to the CPU (x86 PAUSE); inline so that spin loops stay tight.
static inline void sync_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/// rt_tgsigqueueinfo(2) (no glibc wrapper): queues `info` to one thread of a process. Returns 0
/// or an errno code.
int sync_rt_tgsigqueueinfo(int32_t pid, int32_t tid, int signo, siginfo_t *info);

/// Names the calling thread (pthread_setname_np: at most 15 characters), for ps and debuggers.
void sync_thread_set_name(const char *name);

/// The state the signal-forwarding handler reads; LibSync's SignalRouter writes it (with atomic
/// stores) before it installs the handler and after it removes it.
struct sync_signal_forwarding {
    int32_t process;         ///< the routing process's pid (a fork()ed child differs: see the handler)
    int32_t receiver;        ///< the kernel id of the routing thread (libsync's signal thread)
    uint32_t in_flight;      ///< handlers running now (a futex word: woken when it drops to 0)
    int32_t routed[65];      ///< 1 while signal n is routed (1..64)
};
struct sync_signal_forwarding *sync_signal_forwarding_state(void);

/// si_errno of a signal forwarded to the routing thread: tells it from one the kernel queued.
/// ..._CODE: sent as SI_QUEUE, its own si_code in si_value.sival_int (the kernel lets a thread
/// queue codes >= 0 and SI_TKILL only to itself).
#define SYNC_SIGNAL_FORWARDED 0x53594e43
#define SYNC_SIGNAL_FORWARDED_CODE 0x53594e44

/// The sa_sigaction of a routed signal, for threads that have it unblocked (threads that existed
/// before routing, or that unblocked it): forwards it, siginfo intact, to the routing thread. In C
/// because it runs in signal-handler context: atomics and system calls only (Swift's runtime is
/// not async-signal-safe). Exactly once: routed -> the routing thread's queue; no longer routed
/// (unrouted after the kernel picked this handler) -> raised again in this thread, for the
/// action now in force; in a fork()ed child before its reset -> kept pending and blocked in this
/// thread, for the action the reset restores.
void sync_signal_forward(int signo, siginfo_t *info, void *ucontext);

/// Lock-order checking (LibSync's LockOrder, Sources/LibSync/Debug). Nonzero while checking is
/// on: every lock's hooks load it once and do nothing else while it is 0. Written only by
/// LockOrder (and, before any other code runs, by the load-time reading of
/// LIBSYNC_CHECK_LOCK_ORDER below). The hooks read it as a plain load (Swift does not inline
/// the accessor below): an int's load is atomic on every target, and a stale 0 only delays
/// checking by an operation.
extern int sync_lock_order_flag SYNC_SWIFT_NONISOLATED_UNSAFE;
static inline int sync_lock_order_on(void) { return __atomic_load_n(&sync_lock_order_flag, __ATOMIC_RELAXED); }
static inline void sync_lock_order_set(int on) { __atomic_store_n(&sync_lock_order_flag, on, __ATOMIC_RELAXED); }

/// What LIBSYNC_CHECK_LOCK_ORDER asked for when the library was loaded: 0 nothing (unset, empty
/// or "0"), 1 checking on ("1"), 2 on and abort after a report ("abort"), -1 a value not
/// understood (checking stays off; the load says so on stderr).
extern int sync_lock_order_env SYNC_SWIFT_NONISOLATED_UNSAFE;

/// backtrace(3) and backtrace_symbols(3) (execinfo.h, which Swift's Glibc module lacks). The
/// symbols array is one malloc'd block: free() it.
int sync_backtrace(void **frames, int capacity);
char **sync_backtrace_symbols(void *const *frames, int count);

/// Lock-order checking's SIGQUIT: if SIGQUIT's disposition is the default, installs a handler
/// that wakes a dedicated thread, which calls `dump` (never in signal-handler context). While
/// sync_lock_order_flag is 0 the handler restores the default action and raises SIGQUIT again,
/// so the signal then quits as usual. Returns 1 if installed (now or before), 0 if SIGQUIT had
/// another disposition (left alone), or -1 if the thread could not be made.
int sync_lock_order_install_sigquit(void (*dump)(void));

/// In a fork()ed child of a process that installed it: starts the child's SIGQUIT thread (the
/// parent's did not survive the fork). Cheap when there is nothing to do.
void sync_lock_order_sigquit_check(void);

/// The read-write value locks (LibSync's SyncRWLockedValue) the calling thread reads, outermost
/// first: sync_thread_reading_depth of them, the first SYNC_READING_MAX recorded (deeper ones are
/// counted only). A write or a second read of a value the thread already reads would wait for
/// itself (forever, once a writer waits): the value lock stops the program instead.
#define SYNC_READING_MAX 8
extern __thread const void *sync_thread_reading[SYNC_READING_MAX] SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));
extern __thread uint32_t sync_thread_reading_depth SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));

/// Whether the calling thread reads the value lock at `lock` (one recorded).
static inline int sync_thread_reads(const void *lock) {
    uint32_t depth = sync_thread_reading_depth;
    if (depth > SYNC_READING_MAX) depth = SYNC_READING_MAX;
    for (uint32_t i = 0; i < depth; i++) {
        if (sync_thread_reading[i] == lock) return 1;
    }
    return 0;
}
static inline void sync_thread_reading_push(const void *lock) {
    uint32_t depth = sync_thread_reading_depth;
    if (depth < SYNC_READING_MAX) sync_thread_reading[depth] = lock;
    sync_thread_reading_depth = depth + 1;
}
static inline void sync_thread_reading_pop(void) { sync_thread_reading_depth -= 1; }

/// The SyncRWLock.withUpgradableReadLock blocks the calling thread is in (LibSync's
/// `UpgradableScopes`), outermost first: sync_thread_upgradable_depth of them, the first
/// SYNC_UPGRADABLE_MAX recorded (deeper ones are counted only). For each, its lock's memory and
/// the plain reads the thread took on that lock inside the block less those it released there
/// (never below 0): what the block's end may release after the body downgraded.
#define SYNC_UPGRADABLE_MAX 8
extern __thread const void *sync_thread_upgradable[SYNC_UPGRADABLE_MAX] SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));
extern __thread intptr_t sync_thread_upgradable_reads[SYNC_UPGRADABLE_MAX] SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));
extern __thread uint32_t sync_thread_upgradable_depth SYNC_SWIFT_NONISOLATED_UNSAFE __attribute__((tls_model("initial-exec")));

#ifdef __cplusplus
}
#endif
#endif
