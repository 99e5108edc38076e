/* Apple's "Thread Safety and Signals" rule, on libsync: a signal handled by one chosen thread,
 * with ordinary code, in arrival order. A child process sends five real-time signals with
 * values; an executor's thread handles them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sync.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int handled;

static void on_signal(const sync_signal_info_t *info, void *context) {
    sync_executor_t *worker = context;
    /* Not a signal handler: printf, locks and malloc are fine here. */
    printf("signal %d, value %d, from pid %d (uid %u), on the worker's thread: %s\n", info->signo,
           info->value, (int)info->pid, (unsigned)info->uid, sync_executor_is_current(worker) ? "yes" : "NO");
    atomic_fetch_add(&handled, 1);
}

int main(void) {
    int signo = SIGRTMIN + 1;
    sync_executor_t *worker;
    if (sync_executor_create(&worker) != 0) return 1;
    sync_signal_target_t target = {0};
    target.executor = worker;
    target.handler = on_signal;
    target.context = worker;
    if (sync_signal_route(signo, &target) != 0) return 1;

    pid_t parent = getpid(), child = fork();
    if (child == 0) {
        for (int i = 1; i <= 5; i++) {
            union sigval value = {.sival_int = i * 10};
            sigqueue(parent, signo, value);
        }
        _exit(0);
    }
    waitpid(child, NULL, 0);
    for (int i = 0; i < 10000 && atomic_load(&handled) < 5; i++) {  /* at most ~10 s */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    sync_signal_unroute(signo);  /* the previous action is back */
    sync_executor_destroy(worker);
    printf("%d of 5 signals handled, in order, on one thread\n", atomic_load(&handled));
    return atomic_load(&handled) == 5 ? 0 : 1;
}
