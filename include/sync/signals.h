/*
 * sync/signals.h — signals routed to a chosen thread (an executor) or queue.
 *
 * A process-directed signal (kill, sigqueue, the terminal's ^C, a child's exit, a timer) goes to
 * whichever thread of the process the kernel picks among those that do not block it, and its
 * handler runs in signal-handler context, where almost nothing may be called. Routing a signal
 * makes every arrival of it run a plain C function, with its siginfo (sender pid and uid, code,
 * value), as work on a sync_executor_t's thread or a sync_queue_t: in arrival order, never in
 * signal-handler context, so the handler may lock, allocate and call anything.
 *
 *     static void on_usr1(const sync_signal_info_t *info, void *context) {
 *         printf("SIGUSR1 from pid %d, value %d\n", (int)info->pid, info->value);
 *     }
 *     sync_signal_target_t target = {0};
 *     target.executor = executor;  target.handler = on_usr1;  target.context = NULL;
 *     sync_signal_route(SIGUSR1, &target);
 *     ...
 *     sync_signal_unroute(SIGUSR1);
 *
 * How (docs/signals.md has the details):
 *   - The calling thread blocks the signal; threads it creates from then on inherit the block.
 *     libsync's own threads (executors, the internal thread) block asynchronous signals (the
 *     internal thread excepted for signals that sync_signal_unroute hands back to it).
 *   - One internal thread ("libsync.signals", started by the first route, kept until exit)
 *     receives the signal through a signalfd, in the kernel's queue order, and submits the
 *     handler to the target.
 *   - A thread that still has the signal unblocked (one that existed before the route, or that
 *     unblocked it) may be picked by the kernel: libsync's handler, installed for the signal,
 *     forwards that arrival to the internal thread with its siginfo intact (exactly once; but it
 *     is not ordered against arrivals in flight at that moment). For strict arrival order, make
 *     sure no other thread has the signal unblocked: route before starting threads, or block it
 *     in them with pthread_sigmask.
 *   - Standard signals (1-31) coalesce: arrivals while one is pending are merged into it (the
 *     handler then sees one). Real-time signals (SIGRTMIN..SIGRTMAX) queue, each with its own
 *     siginfo, up to RLIMIT_SIGPENDING: route a real-time signal to count arrivals or pass values.
 *   - Only arrivals the kernel gives the process (or a thread that does not block the signal)
 *     are routed: one sent to a specific thread that blocks it (pthread_kill, raise() in the
 *     routing thread) stays pending for that thread. Send to the process: kill(getpid(), sig).
 *   - While routed, do not change the signal's action (sigaction/signal) or wait for it yourself
 *     (sigwait, signalfd): that takes arrivals away from the route.
 *   - fork(): the child has no internal thread; libsync unroutes every signal in it (previous
 *     actions and the routing thread's blocked state back, as sync_signal_unroute). Route again
 *     in the child if it needs to. exec() keeps a blocked mask: a program started from a thread
 *     that blocks a routed signal starts with it blocked (posix_spawn: POSIX_SPAWN_SETSIGMASK).
 *
 * All functions are thread-safe; none is async-signal-safe (do not call them from a signal
 * handler). The handler may call sync_signal_route and sync_signal_unroute, for its own signal
 * too.
 */
#ifndef SYNC_SIGNALS_H
#define SYNC_SIGNALS_H

#include <stdbool.h>
#include <stdint.h>
#include "queues.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a name kept for compatibility (CONTRIBUTING.md, "Names"), as in sync/locks.h. */
#ifndef SYNC_DEPRECATED
#define SYNC_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#endif

/** One arrival of a routed signal: the fields of its siginfo_t. */
typedef struct sync_signal_info {
    int signo;
    /** si_code: SI_USER (kill), SI_QUEUE (sigqueue), SI_TKILL (tgkill, raise), SI_KERNEL (the
     *  kernel, e.g. the terminal), SI_TIMER, SI_MESGQ, or a signal-specific code (CLD_EXITED...). */
    int code;
    /** si_pid: the sender's process id (a pid_t; 0 when the kernel generated the signal). */
    int32_t pid;
    /** si_uid: the sender's real user id (a uid_t). */
    uint32_t uid;
    /** si_value.sival_int: the value a sigqueue(3) sender passed (0 for other senders). */
    int value;
    /** si_value.sival_ptr: the same union read as a pointer. */
    void *value_ptr;
} sync_signal_info_t;
typedef struct sync_signal_info sync_signal_info SYNC_DEPRECATED("sync_signal_info_t");

/** A routed signal's handler: called once per arrival with its info (valid during the call
 *  only) and the context given at routing. */
typedef void (*sync_signal_fn)(const sync_signal_info_t *info, void *context);

/** Where a routed signal's handler runs: exactly one of executor and queue is non-NULL. */
typedef struct sync_signal_target {
    /** The handler runs on this executor's thread, in its FIFO. */
    sync_executor_t *executor;
    /** The handler runs as work of this queue: on a serial queue, in order; on a concurrent
     *  queue as a barrier item (alone, in order). */
    sync_queue_t *queue;
    sync_signal_fn handler;
    void *context;
} sync_signal_target_t;
typedef struct sync_signal_target sync_signal_target SYNC_DEPRECATED("sync_signal_target_t");

/**
 * Routes signal signo to *target (copied): from now on each arrival runs
 * target->handler(&info, target->context) on the target, in arrival order. The route keeps the
 * executor or queue alive until unrouted; a stopped (or destroyed) executor drops deliveries.
 * Blocks signo in the calling thread and installs libsync's forwarding action for it (the
 * previous action and blocked state are kept for sync_signal_unroute).
 * Returns 0, or:
 *   EINVAL  signo cannot be routed: out of range (1..SIGRTMAX), SIGKILL, SIGSTOP, a signal the
 *           kernel raises in the thread that caused it (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
 *           SIGSYS, SIGPIPE, SIGXFSZ), SIGABRT (abort(3) terminates whatever a handler does),
 *           or 32/33 (glibc's own); or target is NULL, has no handler, or not exactly one of
 *           executor and queue;
 *   EBUSY   signo is routed already (or being unrouted);
 *   EMFILE, ENFILE, ENOMEM, EAGAIN  the first route could not create the internal thread or
 *           its descriptors (a signalfd and an eventfd).
 */
int sync_signal_route(int signo, const sync_signal_target_t *target);

/**
 * Unroutes signo: restores the action it had before sync_signal_route, and in the calling
 * thread the blocked state the routing thread had before (call it from the routing thread to
 * restore that thread exactly; a thread's mask can only be changed by the thread itself, so
 * threads created while routed keep the block they inherited). If the handler is running on
 * another thread, waits until it returns (from the handler itself, or from work it waits for, it
 * does not wait; do not call it while holding a lock the handler may wait for). After it returns
 * the handler is not running and never runs again, so its context may be freed.
 * Signals pending at unroute: every arrival sent before the call that the handler has not
 * started is dropped, whether the internal thread had read it already or it was still pending
 * in the kernel: none reaches the restored action (a SIG_DFL that terminates does not kill the
 * process for it), and none of them is left pending for the process when it returns. Arrivals
 * sent after it returns go to the restored action; one sent during the call runs once at most
 * (the handler, the restored action, or dropped). Not dropped: an arrival sent to one thread
 * (pthread_kill, raise) that stays pending for that thread, and one that a thread with the
 * signal unblocked takes while the call runs (it runs the restored action there).
 * Returns 0, or EINVAL (signo cannot be routed, as above), or ENOENT (signo is not routed).
 */
int sync_signal_unroute(int signo);

/** Whether signo can be routed at all (sync_signal_route's EINVAL list). */
bool sync_signal_is_routable(int signo);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_SIGNALS_H */
