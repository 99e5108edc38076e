/* Lock-order checking (sync/debug.h) in child processes: the default report on stderr, the
 * abort action, LIBSYNC_CHECK_LOCK_ORDER read at load, and the waits dump (sync_debug_dump_waits
 * and SIGQUIT) of a real deadlock in a child that is killed afterwards. Apart from
 * test_lock_order.c because ThreadSanitizer does not support threads started in the child of a
 * multithreaded fork (scripts/sanitize.sh skips this one). */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static void order(void *first, void *second) {
    CHECK_EQ(sync_mutex_lock(first), 0);
    CHECK_EQ(sync_mutex_lock(second), 0);
    CHECK_EQ(sync_mutex_unlock(second), 0);
    CHECK_EQ(sync_mutex_unlock(first), 0);
}

/* ---- child processes: the default report, abort, the environment variable ---- */

/* Runs `body` in a child whose stderr is read into `err`; returns its wait status. */
static int in_child(void (*body)(void), char *const argv[], char *const envp[], char *err, size_t size) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (argv != NULL) {  /* the environment and `envp`'s variables (a sanitizer's options too) */
            for (char *const *variable = envp; variable != NULL && *variable != NULL; variable++) putenv(*variable);
            execv("/proc/self/exe", argv);
            _exit(126);
        }
        body();
        _exit(0);
    }
    close(fds[1]);
    size_t length = 0;
    ssize_t n;
    while ((n = read(fds[0], err + length, size - 1 - length)) > 0 || (n < 0 && errno == EINTR)) {
        if (n > 0) length += (size_t)n;
        if (length == size - 1) break;
    }
    err[length] = 0;
    close(fds[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

static void inversion(void) {
    sync_mutex_t a = SYNC_MUTEX_INIT, b = SYNC_MUTEX_INIT;
    order(&a, &b);
    order(&b, &a);
}

static void inversion_with_default_report(void) {
    sync_debug_lock_order_set_handler(NULL, NULL);
    sync_debug_lock_order(true);
    inversion();
}

/* abort() is the default action of SIGABRT here: no crash reporter of a runtime (Swift's
 * backtracer in sanitizer builds) keeps the child's stderr open after it dies. */
static void default_abort(void) { signal(SIGABRT, SIG_DFL); }

static void inversion_with_abort(void) {
    default_abort();
    sync_debug_lock_order_set_handler(NULL, NULL);
    CHECK_EQ(sync_debug_lock_order_set_action(SYNC_LOCK_ORDER_ABORT), 0);
    sync_debug_lock_order(true);
    inversion();
}

static char child_err[65536];

/* CHECK, printing the child's stderr first if it fails. */
#define CHECK_CHILD(cond) do { \
    if (!(cond)) fprintf(stderr, "the child's stderr:\n%s\n", child_err); \
    CHECK(cond); } while (0)

static void test_children(void) {
    int status = in_child(inversion_with_default_report, NULL, NULL, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_CHILD(strstr(child_err, "potential deadlock: lock-order cycle of 2 locks") != NULL);
    CHECK_CHILD(strstr(child_err, "order") != NULL);

    status = in_child(inversion_with_abort, NULL, NULL, child_err, sizeof child_err);
    CHECK_CHILD(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);

    /* The environment variable, read at load: this program again, as "env-child". */
    char *argv[] = {"test_lock_order_children", "env-child", NULL};
    char *on[] = {"LIBSYNC_CHECK_LOCK_ORDER=1", NULL};
    status = in_child(NULL, argv, on, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);

    char *abort_on[] = {"LIBSYNC_CHECK_LOCK_ORDER=abort", NULL};
    status = in_child(NULL, argv, abort_on, child_err, sizeof child_err);
    CHECK_CHILD(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);

    char *unknown[] = {"LIBSYNC_CHECK_LOCK_ORDER=yes please", NULL};
    status = in_child(NULL, argv, unknown, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_CHILD(strstr(child_err, "not understood") != NULL);
    CHECK_CHILD(strstr(child_err, "potential deadlock") == NULL);

    char *off[] = {"LIBSYNC_CHECK_LOCK_ORDER=0", NULL};
    status = in_child(NULL, argv, off, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(strlen(child_err), 0);
}

/* ---- a real deadlock: the waits dump shows the cycle ---- */

static sync_mutex_t dead_a = SYNC_MUTEX_INIT, dead_b = SYNC_MUTEX_INIT;
static atomic_int holding;

static void *hold_then_take(void *arg) {
    sync_mutex_t *first = arg == NULL ? &dead_a : &dead_b, *second = arg == NULL ? &dead_b : &dead_a;
    CHECK_EQ(sync_mutex_lock(first), 0);
    atomic_fetch_add(&holding, 1);
    while (atomic_load(&holding) < 2) sched_yield();
    sync_mutex_lock(second);  /* never returns: the other thread holds it and waits for ours */
    return NULL;
}

static void deadlock_child(void) {
    static char text[65536];
    sync_debug_lock_order_set_handler(NULL, NULL);
    sync_debug_lock_order(true);
    pthread_t one, two;
    CHECK_EQ(pthread_create(&one, NULL, hold_then_take, NULL), 0);
    CHECK_EQ(pthread_create(&two, NULL, hold_then_take, &one), 0);
    /* Wait (bounded, against a hang) until both threads wait for each other's lock. */
    for (int i = 0; i < 20000; i++) {
        sync_debug_format_waits(text, sizeof text);
        if (strstr(text, "deadlock: wait-for cycle") != NULL) break;
        usleep(1000);
    }
    CHECK_EQ(sync_debug_dump_waits(), 0);
    fprintf(stderr, "END OF DUMP\n");
    /* Then SIGQUIT prints it again, from libsync's own thread; the parent kills this process. */
    for (;;) pause();
}

static void test_dump_waits(void) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        deadlock_child();
        _exit(0);
    }
    close(fds[1]);
    size_t length = 0;
    int quit_sent = 0;
    ssize_t n;
    while ((n = read(fds[0], child_err + length, sizeof child_err - 1 - length)) > 0 || (n < 0 && errno == EINTR)) {
        if (n > 0) length += (size_t)n;
        child_err[length] = 0;
        char *end = strstr(child_err, "END OF DUMP\n");
        if (end != NULL && !quit_sent) {
            CHECK_EQ(kill(pid, SIGQUIT), 0);
            quit_sent = 1;
        }
        /* Done once the second dump and the report (which the thread closing the cycle writes
         * while the dumps may already show it waiting) are both in. */
        if (end != NULL && strstr(end, "deadlock: wait-for cycle") != NULL
            && strstr(child_err, "potential deadlock") != NULL) break;
        if (length == sizeof child_err - 1) break;
    }
    CHECK_EQ(kill(pid, SIGKILL), 0);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    close(fds[0]);
    char *end = strstr(child_err, "END OF DUMP\n");
    CHECK(end != NULL);
    /* The dump: both threads marked, each waiting for the other's lock. */
    char a[64], b[64];
    snprintf(a, sizeof a, "mutex %p", (void *)&dead_a);
    snprintf(b, sizeof b, "mutex %p", (void *)&dead_b);
    CHECK(strstr(child_err, "deadlock: wait-for cycle") < end);
    CHECK(strstr(child_err, a) != NULL && strstr(child_err, b) != NULL);
    int marked = 0;
    for (char *p = child_err; (p = strstr(p, "<-- deadlock")) != NULL && p < end; p++) marked++;
    CHECK_EQ(marked, 2);
    /* The inversion was also reported as a potential deadlock, before the threads blocked. */
    CHECK(strstr(child_err, "potential deadlock") != NULL);
    /* And SIGQUIT printed the dump again. */
    CHECK(strstr(end, "deadlock: wait-for cycle") != NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "env-child") == 0) {
        default_abort();
        inversion();  /* no call turns checking on: the environment did, or not */
        return 0;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    alarm(300);  /* against a hang only */
    test_children();
    test_dump_waits();
    DONE();
}
