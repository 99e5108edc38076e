/* Signals routed to an executor or a queue through the C ABI: 1,000 real-time signals from
 * another process in order on the executor's thread, queue targets, a standard signal during a
 * busy handler, unroute restoring the previous action and mask, threads that existed before the
 * route (forwarding, exactly once), unroute during a running handler and from the handler,
 * route/unroute churn under a flood, fork, and the error codes. Waits are for observable
 * counts; their bounds only guard against hangs. */
#define _GNU_SOURCE
#include "check.h"
#include <sync.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Waits (at most ~60 s: a hang guard only) until cond holds. */
#define WAIT_FOR(cond) do { for (int i_ = 0; !(cond) && i_ < 60000; i_++) nap_ms(1); } while (0)
/* Waits for cond, then checks it. */
#define CHECK_EVENTUALLY(cond) do { WAIT_FOR(cond); CHECK(cond); } while (0)

static void noop(void *context) { (void)context; }

static int is_blocked_here(int signo) {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    return sigismember(&mask, signo);
}

/* Whether signo is pending for this thread or for the process. */
static int pending(int signo) {
    sigset_t set;
    sigpending(&set);
    return sigismember(&set, signo);
}

/* Whether signo's action is handler (SA_SIGINFO), or the plain disposition (SIG_DFL, SIG_IGN). */
static int action_is(int signo, void (*handler)(int, siginfo_t *, void *)) {
    struct sigaction action;
    sigaction(signo, NULL, &action);
    return (action.sa_flags & SA_SIGINFO) && action.sa_sigaction == handler;
}
static int action_is_plain(int signo, void (*disposition)(int)) {
    struct sigaction action;
    sigaction(signo, NULL, &action);
    return !(action.sa_flags & SA_SIGINFO) && action.sa_handler == disposition;
}

/* A previous action that counts what reaches it. */
static atomic_long previous_calls[65];
static void previous_handler(int signo, siginfo_t *info, void *uc) {
    (void)info; (void)uc;
    atomic_fetch_add(&previous_calls[signo], 1);
}
static void install_previous(int signo) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = previous_handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    CHECK_EQ(sigaction(signo, &action, NULL), 0);
}

/* A child process that sigqueues values first..first+count-1 to the parent, then exits. */
static pid_t queue_from_child(int signo, int first, int count) {
    pid_t parent = getpid(), child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        for (int i = first; i < first + count; i++) {
            union sigval value;
            memset(&value, 0, sizeof value);
            value.sival_int = i;
            while (sigqueue(parent, signo, value) != 0)
                if (errno != EAGAIN) _exit(2); else sched_yield();
        }
        _exit(0);
    }
    return child;
}

static void reap(pid_t child) {
    int status = 0;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

/* ---- A log of deliveries: values in arrival order, on which thread ---- */

enum { MAX_LOG = 2048 };
struct log {
    sync_executor_t *executor;   /* deliveries must run on its thread */
    sync_queue_t *queue;         /* ... or as work of this queue */
    int values[MAX_LOG];
    sync_signal_info_t last;
    atomic_long count;
    atomic_long wrong_place;
};

static void record(const sync_signal_info_t *info, void *context) {
    struct log *log = context;
    if (log->executor && !sync_executor_is_current(log->executor)) atomic_fetch_add(&log->wrong_place, 1);
    if (log->queue && sync_queue_sync(log->queue, noop, NULL) != EDEADLK) atomic_fetch_add(&log->wrong_place, 1);
    long n = atomic_load(&log->count);
    if (n < MAX_LOG) log->values[n] = info->value;
    log->last = *info;
    atomic_store(&log->count, n + 1);  /* one delivery at a time: the target is serial */
}

static void test_errors(void) {
    struct log log = {0};
    sync_executor_t *executor;
    CHECK_EQ(sync_executor_create(&executor), 0);
    sync_signal_target_t target = {executor, NULL, record, &log};
    int unroutable[] = {0, -1, 65, 1000, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
                        SIGSYS, SIGABRT, SIGPIPE, SIGXFSZ, 32, 33};
    for (size_t i = 0; i < sizeof unroutable / sizeof unroutable[0]; i++) {
        CHECK_EQ(sync_signal_route(unroutable[i], &target), EINVAL);
        CHECK_EQ(sync_signal_unroute(unroutable[i]), EINVAL);
        CHECK(!sync_signal_is_routable(unroutable[i]));
    }
    CHECK(sync_signal_is_routable(SIGUSR1) && sync_signal_is_routable(SIGINT) && sync_signal_is_routable(SIGRTMIN)
          && sync_signal_is_routable(SIGRTMAX) && sync_signal_is_routable(SIGCHLD));
    CHECK_EQ(sync_signal_route(SIGUSR1, NULL), EINVAL);
    sync_signal_target_t no_handler = {executor, NULL, NULL, NULL};
    CHECK_EQ(sync_signal_route(SIGUSR1, &no_handler), EINVAL);
    sync_signal_target_t no_place = {NULL, NULL, record, &log};
    CHECK_EQ(sync_signal_route(SIGUSR1, &no_place), EINVAL);
    sync_queue_t *queue;
    CHECK_EQ(sync_queue_create(&queue, "two places", SYNC_QUEUE_SERIAL), 0);
    sync_signal_target_t two_places = {executor, queue, record, &log};
    CHECK_EQ(sync_signal_route(SIGUSR1, &two_places), EINVAL);
    CHECK_EQ(sync_signal_unroute(SIGUSR1), ENOENT);
    /* Nothing above changed the signal's action or this thread's mask. */
    CHECK(action_is_plain(SIGUSR1, SIG_DFL));
    CHECK(!is_blocked_here(SIGUSR1));

    CHECK_EQ(sync_signal_route(SIGUSR1, &target), 0);
    CHECK_EQ(sync_signal_route(SIGUSR1, &target), EBUSY);
    CHECK_EQ(sync_signal_unroute(SIGUSR1), 0);
    CHECK_EQ(sync_signal_unroute(SIGUSR1), ENOENT);
    CHECK(action_is_plain(SIGUSR1, SIG_DFL));
    CHECK_EQ(sync_queue_destroy(queue), 0);
    CHECK_EQ(sync_executor_destroy(executor), 0);
}

/* libsync's own threads never take a process's asynchronous signals (so they never break a
 * route's order), but keep the faults a thread raises itself. */
static int executor_mask[4];
static void read_executor_mask(void *context) {
    (void)context;
    executor_mask[0] = is_blocked_here(SIGUSR1);
    executor_mask[1] = is_blocked_here(SIGRTMIN + 1);
    executor_mask[2] = is_blocked_here(SIGSEGV);
    executor_mask[3] = is_blocked_here(SIGPIPE);
}

static void test_executor_threads_block_asynchronous_signals(void) {
    sync_executor_t *executor;
    CHECK(!is_blocked_here(SIGUSR1));
    CHECK_EQ(sync_executor_create(&executor), 0);
    CHECK(!is_blocked_here(SIGUSR1));   /* the creator's mask is back */
    CHECK_EQ(sync_executor_sync(executor, read_executor_mask, NULL), 0);
    CHECK(executor_mask[0] && executor_mask[1] && !executor_mask[2] && !executor_mask[3]);
    CHECK_EQ(sync_executor_destroy(executor), 0);
}

/* The test: 1,000 real-time signals sigqueued by another process, values 0..999, all
 * arrive, in order, on the executor's thread, with the sender's siginfo. */
static void test_thousand_in_order_from_another_process(void) {
    static struct log log;
    memset(&log, 0, sizeof log);
    int signo = SIGRTMIN + 1;
    CHECK_EQ(sync_executor_create(&log.executor), 0);
    sync_signal_target_t target = {log.executor, NULL, record, &log};
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    pid_t child = queue_from_child(signo, 0, 1000);
    reap(child);
    CHECK_EVENTUALLY((atomic_load(&log.count) >= 1000));
    CHECK_EQ(atomic_load(&log.count), 1000);
    for (int i = 0; i < 1000; i++) CHECK_EQ(log.values[i], i);
    CHECK_EQ(atomic_load(&log.wrong_place), 0);
    CHECK_EQ(log.last.signo, signo);
    CHECK_EQ(log.last.code, SI_QUEUE);
    CHECK_EQ(log.last.pid, child);
    CHECK_EQ(log.last.uid, getuid());
    CHECK_EQ(sync_signal_unroute(signo), 0);
    CHECK_EQ(sync_executor_destroy(log.executor), 0);
}

/* Serial and concurrent queues as targets: the handler runs as work of the queue. */
static void test_queue_targets(void) {
    for (int kind = SYNC_QUEUE_SERIAL; kind <= SYNC_QUEUE_CONCURRENT; kind++) {
        static struct log log;
        memset(&log, 0, sizeof log);
        int signo = SIGRTMIN + 2;
        CHECK_EQ(sync_queue_create(&log.queue, "signals", kind), 0);
        sync_signal_target_t target = {NULL, log.queue, record, &log};
        CHECK_EQ(sync_signal_route(signo, &target), 0);
        for (int i = 0; i < 50; i++) {
            union sigval value = {.sival_int = i};
            CHECK_EQ(sigqueue(getpid(), signo, value), 0);
        }
        CHECK_EVENTUALLY((atomic_load(&log.count) >= 50));
        CHECK_EQ(atomic_load(&log.count), 50);
        for (int i = 0; i < 50; i++) CHECK_EQ(log.values[i], i);
        CHECK_EQ(atomic_load(&log.wrong_place), 0);
        CHECK_EQ(log.last.pid, getpid());
        CHECK_EQ(sync_signal_unroute(signo), 0);
        CHECK_EQ(sync_queue_destroy(log.queue), 0);
    }
}

/* A standard signal sent while the handler is busy is not lost: one more delivery follows. */
static atomic_int busy_entered, busy_release;
static atomic_long busy_count;
static void busy_handler(const sync_signal_info_t *info, void *context) {
    (void)info; (void)context;
    if (atomic_fetch_add(&busy_count, 1) == 0) {
        atomic_store(&busy_entered, 1);
        WAIT_FOR(atomic_load(&busy_release));
    }
}

static void test_standard_signal_during_busy_handler(void) {
    sync_executor_t *executor;
    CHECK_EQ(sync_executor_create(&executor), 0);
    sync_signal_target_t target = {executor, NULL, busy_handler, NULL};
    CHECK_EQ(sync_signal_route(SIGUSR1, &target), 0);
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    CHECK_EVENTUALLY((atomic_load(&busy_entered)));
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);  /* the handler is busy with the first */
    atomic_store(&busy_release, 1);
    CHECK_EVENTUALLY((atomic_load(&busy_count) >= 2));
    CHECK_EQ(sync_signal_unroute(SIGUSR1), 0);
    CHECK_EQ(sync_executor_destroy(executor), 0);
}

/* Unroute restores the previous action (raise then runs it) and the blocked state. */
static void test_unroute_restores_previous_action_and_mask(void) {
    struct log log = {0};
    CHECK_EQ(sync_executor_create(&log.executor), 0);
    sync_signal_target_t target = {log.executor, NULL, record, &log};

    install_previous(SIGUSR2);
    CHECK(!is_blocked_here(SIGUSR2));
    CHECK_EQ(sync_signal_route(SIGUSR2, &target), 0);
    CHECK(!action_is(SIGUSR2, previous_handler));
    CHECK(is_blocked_here(SIGUSR2));
    CHECK_EQ(sync_signal_unroute(SIGUSR2), 0);
    CHECK(action_is(SIGUSR2, previous_handler));
    CHECK(!is_blocked_here(SIGUSR2));
    CHECK_EQ(raise(SIGUSR2), 0);
    CHECK_EQ(atomic_load(&previous_calls[SIGUSR2]), 1);
    CHECK_EQ(atomic_load(&log.count), 0);

    /* A signal this thread had blocked stays blocked; SIG_IGN comes back as SIG_IGN. */
    int signo = SIGRTMIN + 3;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(signo, SIG_IGN);
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    CHECK_EQ(sync_signal_unroute(signo), 0);
    CHECK(is_blocked_here(signo));
    CHECK(action_is_plain(signo, SIG_IGN));
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    signal(signo, SIG_DFL);
    CHECK_EQ(sync_executor_destroy(log.executor), 0);
}

/* Threads that existed before the route, with the signal unblocked: every real-time signal
 * still reaches the executor exactly once, with its siginfo: those the kernel gives them from the
 * process queue, and those sent to them directly (which only they can take: forwarded), by
 * pthread_sigqueue (SI_QUEUE, a value) and by pthread_kill (SI_TKILL, a code the kernel lets a
 * thread queue only to itself). */
enum { BYSTANDERS = 3, DIRECT = 300, KILLED = 150 };
static pthread_mutex_t bystander_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bystander_cond = PTHREAD_COND_INITIALIZER;
static int bystanders_done;
static void *bystander(void *arg) {
    (void)arg;
    pthread_mutex_lock(&bystander_mutex);
    while (!bystanders_done) pthread_cond_wait(&bystander_cond, &bystander_mutex);
    pthread_mutex_unlock(&bystander_mutex);
    return NULL;
}

struct coded_log { struct log log; int codes[MAX_LOG]; int32_t pids[MAX_LOG]; };
static void record_code(const sync_signal_info_t *info, void *context) {
    struct coded_log *coded = context;
    long n = atomic_load(&coded->log.count);
    if (n < MAX_LOG) coded->codes[n] = info->code, coded->pids[n] = info->pid;
    record(info, &coded->log);
}

static void test_threads_created_before_the_route(void) {
    static struct coded_log coded;
    memset(&coded, 0, sizeof coded);
    struct log *log = &coded.log;
    int signo = SIGRTMIN + 4;
    CHECK(!is_blocked_here(signo));
    pthread_t threads[BYSTANDERS];
    for (int i = 0; i < BYSTANDERS; i++) CHECK_EQ(pthread_create(&threads[i], NULL, bystander, NULL), 0);
    CHECK_EQ(sync_executor_create(&log->executor), 0);
    sync_signal_target_t target = {log->executor, NULL, record_code, &coded};
    CHECK_EQ(sync_signal_route(signo, &target), 0);

    pid_t child = queue_from_child(signo, 0, 1000);
    for (int j = 0; j < DIRECT; j++) {
        union sigval value = {.sival_int = 1000 + j};
        while (pthread_sigqueue(threads[j % BYSTANDERS], signo, value) == EAGAIN) sched_yield();
    }
    for (int j = 0; j < KILLED; j++)
        while (pthread_kill(threads[j % BYSTANDERS], signo) == EAGAIN) sched_yield();
    reap(child);
    long total = 1000 + DIRECT + KILLED;
    CHECK_EVENTUALLY((atomic_load(&log->count) >= total));
    CHECK_EQ(atomic_load(&log->count), total);
    static int seen[1000 + DIRECT];
    long killed = 0;
    for (long i = 0; i < total; i++) {
        if (coded.codes[i] == SI_TKILL) {
            killed++;
            CHECK_EQ(coded.pids[i], getpid());
            CHECK_EQ(log->values[i], 0);
            continue;
        }
        CHECK_EQ(coded.codes[i], SI_QUEUE);
        CHECK(log->values[i] >= 0 && log->values[i] < 1000 + DIRECT);
        CHECK_EQ(coded.pids[i], log->values[i] < 1000 ? child : getpid());
        seen[log->values[i]]++;
    }
    CHECK_EQ(killed, KILLED);
    for (int i = 0; i < 1000 + DIRECT; i++) CHECK_EQ(seen[i], 1);
    CHECK_EQ(atomic_load(&log->wrong_place), 0);
    CHECK_EQ(sync_signal_unroute(signo), 0);

    pthread_mutex_lock(&bystander_mutex);
    bystanders_done = 1;
    pthread_cond_broadcast(&bystander_cond);
    pthread_mutex_unlock(&bystander_mutex);
    for (int i = 0; i < BYSTANDERS; i++) CHECK_EQ(pthread_join(threads[i], NULL), 0);
    CHECK_EQ(sync_executor_destroy(log->executor), 0);
}

/* Unroute while the handler runs on the executor: unroute returns only after it has returned;
 * afterwards the handler never runs again (deliveries already queued are dropped), and none of
 * the arrivals sent before it reaches the previous action (some may not have been read from the
 * kernel yet: they are dropped too). Counts are exact: a previous action that got an arrival
 * from before the unroute would let the test restore SIG_DFL with its own arrival pending. */
static atomic_int slow_entered, unroute_called, slow_done;
static atomic_long slow_count;
static void slow_handler(const sync_signal_info_t *info, void *context) {
    (void)info; (void)context;
    atomic_fetch_add(&slow_count, 1);
    if (atomic_exchange(&slow_entered, 1) == 0) {
        WAIT_FOR(atomic_load(&unroute_called));
        nap_ms(100);  /* room for a wrong unroute to return early; correctness does not depend on it */
        atomic_store(&slow_done, 1);
    }
}

static atomic_int done_when_unroute_returned = -1;
static void *unrouter(void *arg) {
    atomic_store(&unroute_called, 1);
    CHECK_EQ(sync_signal_unroute((int)(long)arg), 0);
    atomic_store(&done_when_unroute_returned, atomic_load(&slow_done));
    return NULL;
}

static void test_unroute_waits_for_running_handler(void) {
    int signo = SIGRTMIN + 5;
    install_previous(signo);
    sync_executor_t *executor;
    CHECK_EQ(sync_executor_create(&executor), 0);
    sync_signal_target_t target = {executor, NULL, slow_handler, NULL};
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    for (int i = 0; i < 20; i++) CHECK_EQ(kill(getpid(), signo), 0);
    CHECK_EVENTUALLY((atomic_load(&slow_entered)));
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, unrouter, (void *)(long)signo), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(atomic_load(&done_when_unroute_returned), 1);
    CHECK_EQ(atomic_load(&previous_calls[signo]), 0);
    CHECK(!pending(signo));
    long after = atomic_load(&slow_count);
    CHECK_EQ(sync_executor_sync(executor, noop, NULL), 0);   /* anything still queued has run or been dropped */
    CHECK_EQ(atomic_load(&slow_count), after);
    /* The previous action has the signal again: exactly the one sent now. */
    CHECK_EQ(kill(getpid(), signo), 0);
    CHECK_EVENTUALLY((atomic_load(&previous_calls[signo]) >= 1));
    CHECK_EQ(atomic_load(&previous_calls[signo]), 1);
    CHECK(!pending(signo));
    CHECK_EQ(atomic_load(&slow_count), after);
    CHECK_EQ(sync_executor_destroy(executor), 0);
    signal(signo, SIG_DFL);
}

/* Deliveries queued behind other work when unroute is called are dropped. The executor is held
 * by a gate; the signals are read (no longer pending) and handed to it; unroute (which runs a
 * request on the internal thread after it has handed over everything it read) drops them. */
static atomic_int gate_open;
static void gate(void *context) { (void)context; WAIT_FOR(atomic_load(&gate_open)); }
static atomic_long dropped_count;
static void count_handler(const sync_signal_info_t *info, void *context) {
    (void)info; (void)context;
    atomic_fetch_add(&dropped_count, 1);
}

static void test_unroute_drops_queued_deliveries(void) {
    int signo = SIGRTMIN + 8;
    sync_executor_t *executor;
    CHECK_EQ(sync_executor_create(&executor), 0);
    sync_signal_target_t target = {executor, NULL, count_handler, NULL};
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    CHECK_EQ(sync_executor_async(executor, gate, NULL), 0);
    for (int i = 0; i < 20; i++) CHECK_EQ(kill(getpid(), signo), 0);
    WAIT_FOR(!pending(signo));
    CHECK(!pending(signo));
    CHECK_EQ(sync_signal_unroute(signo), 0);
    atomic_store(&gate_open, 1);
    CHECK_EQ(sync_executor_sync(executor, noop, NULL), 0);
    CHECK_EQ(atomic_load(&dropped_count), 0);
    CHECK_EQ(sync_executor_destroy(executor), 0);
}

/* Arrivals still pending in the kernel when unroute is called (the internal thread had not read
 * them) are dropped like deliveries not yet started: neither the handler nor the previous action
 * gets them, and none is left pending. To keep them unread, the internal thread is held in a
 * signal handler: a signal unrouted earlier whose previous action (stall) waits, and which only
 * the internal thread has unblocked (unroute handed it back there). It is let go once unroute
 * has stopped the signalfd from reading the routed signal (its /proc fdinfo shows the mask). */
static atomic_int stall_entered, stall_release;
static void stall(int signo, siginfo_t *info, void *uc) {
    (void)signo; (void)info; (void)uc;
    atomic_store(&stall_entered, 1);
    while (!atomic_load(&stall_release)) sched_yield();  /* atomics and a system call only */
}

/* Whether some signalfd of this process reads signo (-1: no signalfd found). */
static int signalfd_reads(int signo) {
    char path[300], target[64], line[256];
    int found = -1;
    DIR *fds = opendir("/proc/self/fd");
    struct dirent *fd;
    while (fds && (fd = readdir(fds))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", fd->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        if (strcmp(target, "anon_inode:[signalfd]") != 0) continue;
        snprintf(path, sizeof path, "/proc/self/fdinfo/%s", fd->d_name);
        FILE *info = fopen(path, "r");
        while (info && fgets(line, sizeof line, info))
            if (strncmp(line, "sigmask:", 8) == 0) {
                if (found < 0) found = 0;
                if ((strtoull(line + 8, NULL, 16) >> (signo - 1)) & 1) found = 1;
            }
        if (info) fclose(info);
    }
    if (fds) closedir(fds);
    return found;
}

static void test_unroute_drops_arrivals_pending_in_the_kernel(void) {
    int held = SIGRTMIN + 10, signo = SIGRTMIN + 9;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = stall;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    CHECK_EQ(sigaction(held, &action, NULL), 0);
    sync_executor_t *executor;
    CHECK_EQ(sync_executor_create(&executor), 0);
    /* `held`: routed and unrouted here, so the internal thread has it unblocked; blocked here. */
    sync_signal_target_t stall_target = {executor, NULL, count_handler, NULL};
    CHECK_EQ(sync_signal_route(held, &stall_target), 0);
    CHECK_EQ(sync_signal_unroute(held), 0);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, held);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);

    install_previous(signo);
    static struct log log;
    memset(&log, 0, sizeof log);
    log.executor = executor;
    sync_signal_target_t target = {executor, NULL, record, &log};
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    CHECK_EQ(signalfd_reads(signo), 1);
    CHECK_EQ(kill(getpid(), held), 0);
    CHECK_EVENTUALLY(atomic_load(&stall_entered));
    for (int i = 0; i < 20; i++) CHECK_EQ(kill(getpid(), signo), 0);
    CHECK(pending(signo));                 /* unread: the internal thread is held */

    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, unrouter, (void *)(long)signo), 0);
    CHECK_EVENTUALLY(action_is(signo, previous_handler) && signalfd_reads(signo) == 0);
    atomic_store(&stall_release, 1);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(sync_executor_sync(executor, noop, NULL), 0);
    CHECK_EQ(atomic_load(&log.count), 0);
    CHECK_EQ(atomic_load(&previous_calls[signo]), 0);
    CHECK(!pending(signo));

    /* From now on the previous action has it: exactly the arrivals sent after unroute. */
    CHECK_EQ(kill(getpid(), signo), 0);
    CHECK_EVENTUALLY((atomic_load(&previous_calls[signo]) >= 1));
    CHECK_EQ(atomic_load(&previous_calls[signo]), 1);
    CHECK(!pending(signo));
    CHECK_EQ(atomic_load(&log.count), 0);
    CHECK_EQ(sync_executor_destroy(executor), 0);
    signal(signo, SIG_DFL);
}

/* The handler unroutes its own signal: no deadlock; the next arrival goes to the previous action. */
static atomic_long self_count, self_unroute_status = -1;
static void self_unrouting_handler(const sync_signal_info_t *info, void *context) {
    (void)context;
    atomic_fetch_add(&self_count, 1);
    atomic_store(&self_unroute_status, sync_signal_unroute(info->signo));
}

static void test_handler_unroutes_itself(void) {
    int signo = SIGRTMIN + 7;
    install_previous(signo);
    sync_executor_t *executor;
    CHECK_EQ(sync_executor_create(&executor), 0);
    sync_signal_target_t target = {executor, NULL, self_unrouting_handler, NULL};
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    CHECK_EQ(kill(getpid(), signo), 0);
    CHECK_EVENTUALLY((atomic_load(&self_unroute_status) != -1));
    CHECK_EQ(atomic_load(&self_unroute_status), 0);
    CHECK_EQ(sync_signal_unroute(signo), ENOENT);
    CHECK_EQ(kill(getpid(), signo), 0);
    CHECK_EVENTUALLY((atomic_load(&previous_calls[signo]) >= 1));
    CHECK_EQ(sync_executor_sync(executor, noop, NULL), 0);
    CHECK_EQ(atomic_load(&self_count), 1);
    CHECK_EQ(sync_executor_destroy(executor), 0);
    signal(signo, SIG_DFL);
}

/* Whether libsync's internal thread ("libsync.signals") has signo pending for itself: forwarded
 * copies it never took back would stay there, blocked, and reach a later route. */
static int pending_on_signal_thread(int signo) {
    char path[300], line[256];
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;
    while (tasks && (task = readdir(tasks))) {
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", task->d_name);
        FILE *comm = fopen(path, "r");
        if (!comm) continue;
        int ours = fgets(line, sizeof line, comm) && strncmp(line, "libsync.signals", 15) == 0;
        fclose(comm);
        if (!ours) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", task->d_name);
        closedir(tasks);
        FILE *status = fopen(path, "r");
        unsigned long long mask = 0;
        while (status && fgets(line, sizeof line, status))
            if (strncmp(line, "SigPnd:", 7) == 0) mask = strtoull(line + 7, NULL, 16);
        if (status) fclose(status);
        return (mask >> (signo - 1)) & 1;
    }
    if (tasks) closedir(tasks);
    return -1;  /* no such thread */
}

/* Route and unroute 300 times while another thread (which has the signal unblocked, so it
 * forwards what it takes) floods the process with it: no crash, no hang, nothing left pending
 * on the internal thread, and once unrouted the handler never runs again. */
static atomic_int flooding;
static void *flooder(void *arg) {
    int signo = (int)(long)arg;
    while (atomic_load(&flooding)) kill(getpid(), signo);
    return NULL;
}

static void test_churn_under_flood(void) {
    int signo = SIGUSR2;
    install_previous(signo);
    struct log log = {0};
    CHECK_EQ(sync_executor_create(&log.executor), 0);
    sync_signal_target_t target = {log.executor, NULL, record, &log};
    atomic_store(&flooding, 1);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, flooder, (void *)(long)signo), 0);
    for (int i = 0; i < 300; i++) {
        CHECK_EQ(sync_signal_route(signo, &target), 0);
        CHECK_EQ(sync_signal_unroute(signo), 0);
        CHECK_EQ(pending_on_signal_thread(signo), 0);
    }
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    long before = atomic_load(&log.count);
    CHECK_EVENTUALLY((atomic_load(&log.count) > before));   /* routed: the flood reaches the executor */
    CHECK_EQ(sync_signal_unroute(signo), 0);
    long after = atomic_load(&log.count);
    CHECK_EQ(sync_executor_sync(log.executor, noop, NULL), 0);
    long previous = atomic_load(&previous_calls[signo]);
    CHECK_EVENTUALLY((atomic_load(&previous_calls[signo]) > previous));  /* unrouted: the previous action */
    CHECK_EQ(atomic_load(&log.count), after);
    atomic_store(&flooding, 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    CHECK_EQ(atomic_load(&log.wrong_place), 0);
    CHECK_EQ(sync_executor_destroy(log.executor), 0);
}

/* fork(): the child starts unrouted (previous action, mask as before the route) and can route
 * afresh; the parent's route is untouched. The library's other fork handler (the thread's
 * ancestor ids, empty wait queues) runs too: the child's thread still holds the private mutex the
 * forking thread held, and a parent thread's wait is not in the child's queue. */
static sync_mutex_t fork_mutex = SYNC_MUTEX_INIT;
static sync_cond_t fork_cond = SYNC_COND_INIT;
static atomic_int fork_waiting, fork_done;
static void *fork_cond_waiter(void *arg) {
    (void)arg;
    sync_mutex_lock(&fork_mutex);
    atomic_store(&fork_waiting, 1);
    while (!atomic_load(&fork_done)) sync_cond_wait(&fork_cond, &fork_mutex);
    sync_mutex_unlock(&fork_mutex);
    return NULL;
}

static void test_fork(void) {
    int signo = SIGRTMIN + 6;
    install_previous(signo);
    static struct log log;
    memset(&log, 0, sizeof log);
    CHECK_EQ(sync_executor_create(&log.executor), 0);
    sync_signal_target_t target = {log.executor, NULL, record, &log};
    CHECK_EQ(sync_signal_route(signo, &target), 0);
    pthread_t waiter;
    CHECK_EQ(pthread_create(&waiter, NULL, fork_cond_waiter, NULL), 0);
    CHECK_EVENTUALLY(atomic_load(&fork_waiting));
    CHECK_EQ(sync_mutex_lock(&fork_mutex), 0);  /* the waiter sleeps on fork_cond */
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        sync_mutex_t fresh = SYNC_MUTEX_INIT;  /* taken under the child's own id */
        if (sync_mutex_lock(&fresh) != 0 || fresh._word != (uint32_t)getpid() || sync_mutex_unlock(&fresh) != 0) _exit(24);
        if (sync_mutex_is_owner(&fork_mutex) != 1) _exit(20);
        if (sync_cond_signal(&fork_cond) != 0) _exit(21);  /* no parent thread in the queue */
        if (sync_cond_wait_timed(&fork_cond, &fork_mutex, 1000000) != ETIMEDOUT) _exit(22);
        if (sync_mutex_unlock(&fork_mutex) != 0 || sync_mutex_unlock(&fork_mutex) != EPERM) _exit(23);
        if (!action_is(signo, previous_handler)) _exit(10);
        if (is_blocked_here(signo)) _exit(11);
        long before = atomic_load(&previous_calls[signo]);
        raise(signo);
        if (atomic_load(&previous_calls[signo]) != before + 1) _exit(12);
        if (sync_signal_unroute(signo) != ENOENT) _exit(13);
        static struct log mine;
        if (sync_executor_create(&mine.executor) != 0) _exit(14);
        sync_signal_target_t again = {mine.executor, NULL, record, &mine};
        if (sync_signal_route(signo, &again) != 0) _exit(15);
        union sigval value = {.sival_int = 7};
        sigqueue(getpid(), signo, value);
        WAIT_FOR(atomic_load(&mine.count) == 1);
        if (atomic_load(&mine.count) != 1 || mine.values[0] != 7 || mine.wrong_place) _exit(16);
        if (sync_signal_unroute(signo) != 0) _exit(17);
        _exit(0);
    }
    reap(child);
    CHECK_EQ(sync_mutex_is_owner(&fork_mutex), 1);
    atomic_store(&fork_done, 1);
    CHECK_EQ(sync_cond_broadcast(&fork_cond), 0);
    CHECK_EQ(sync_mutex_unlock(&fork_mutex), 0);
    CHECK_EQ(pthread_join(waiter, NULL), 0);
    union sigval value = {.sival_int = 42};
    CHECK_EQ(sigqueue(getpid(), signo, value), 0);
    CHECK_EVENTUALLY((atomic_load(&log.count) == 1));
    CHECK_EQ(log.values[0], 42);
    CHECK_EQ(sync_signal_unroute(signo), 0);
    CHECK_EQ(sync_executor_destroy(log.executor), 0);
    signal(signo, SIG_DFL);
}

int main(void) {
    test_errors();
    test_executor_threads_block_asynchronous_signals();
    test_thousand_in_order_from_another_process();
    test_queue_targets();
    test_standard_signal_during_busy_handler();
    test_unroute_restores_previous_action_and_mask();
    test_threads_created_before_the_route();
    test_unroute_waits_for_running_handler();
    test_unroute_drops_queued_deliveries();
    test_unroute_drops_arrivals_pending_in_the_kernel();
    test_handler_unroutes_itself();
    test_churn_under_flood();
    test_fork();
    DONE();
}
