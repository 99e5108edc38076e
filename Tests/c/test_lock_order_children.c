/* Lock-order checking (sync/debug.h) in child processes: the default report on stderr, the
 * abort action, LIBSYNC_CHECK_LOCK_ORDER read at load, and the waits dump (sync_debug_dump_waits
 * and SIGQUIT) of a real deadlock in a child that is killed afterwards. Every child is this
 * program again (fork, then exec with the child's name as argv[1]): a fresh process, as a
 * child of fork() that starts threads without exec can hang in the Swift runtime (its lock
 * for lazy initialization identifies the child's main thread by the parent's thread id; see
 * docs/lock_order.md, Limits). */
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

/* Starts this program as the child `name` (argv[1]), with the environment and `envp`'s
 * variables (a sanitizer's options too), its stderr into a pipe whose read end goes to `*err_fd`. */
static pid_t spawn_child(const char *name, char *const envp[], int *err_fd) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        signal(SIGQUIT, SIG_DFL);  /* as a shell's background job may have ignored it */
        for (char *const *variable = envp; variable != NULL && *variable != NULL; variable++) putenv(*variable);
        char *argv[] = {"test_lock_order_children", (char *)name, NULL};
        execv("/proc/self/exe", argv);
        _exit(126);
    }
    close(fds[1]);
    *err_fd = fds[0];
    return pid;
}

/* Runs the child `name` to its end, its stderr read into `err`; returns its wait status. */
static int in_child(const char *name, char *const envp[], char *err, size_t size) {
    int fd;
    pid_t pid = spawn_child(name, envp, &fd);
    size_t length = 0;
    ssize_t n;
    while ((n = read(fd, err + length, size - 1 - length)) > 0 || (n < 0 && errno == EINTR)) {
        if (n > 0) length += (size_t)n;
        if (length == size - 1) break;
    }
    err[length] = 0;
    close(fd);
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
    int status = in_child("default-report", NULL, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_CHILD(strstr(child_err, "potential deadlock: lock-order cycle of 2 locks") != NULL);
    CHECK_CHILD(strstr(child_err, "order") != NULL);

    status = in_child("abort", NULL, child_err, sizeof child_err);
    CHECK_CHILD(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);

    /* The environment variable, read at load. */
    char *on[] = {"LIBSYNC_CHECK_LOCK_ORDER=1", NULL};
    status = in_child("env-child", on, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);

    char *abort_on[] = {"LIBSYNC_CHECK_LOCK_ORDER=abort", NULL};
    status = in_child("env-child", abort_on, child_err, sizeof child_err);
    CHECK_CHILD(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);

    char *unknown[] = {"LIBSYNC_CHECK_LOCK_ORDER=yes please", NULL};
    status = in_child("env-child", unknown, child_err, sizeof child_err);
    CHECK_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_CHILD(strstr(child_err, "not understood") != NULL);
    CHECK_CHILD(strstr(child_err, "potential deadlock") == NULL);

    char *off[] = {"LIBSYNC_CHECK_LOCK_ORDER=0", NULL};
    status = in_child("env-child", off, child_err, sizeof child_err);
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
    fprintf(stderr, "LOCKS mutex %p, mutex %p\n", (void *)&dead_a, (void *)&dead_b);  /* for the parent */
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
    int fd;
    pid_t pid = spawn_child("deadlock", NULL, &fd);
    size_t length = 0;
    int quit_sent = 0;
    ssize_t n;
    while ((n = read(fd, child_err + length, sizeof child_err - 1 - length)) > 0 || (n < 0 && errno == EINTR)) {
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
    close(fd);
    char *end = strstr(child_err, "END OF DUMP\n");
    CHECK_CHILD(end != NULL);
    /* The dump: both threads marked, each waiting for the other's lock. */
    char a[64], b[64];  /* the child's locks, named as the dump names them */
    CHECK_CHILD(sscanf(child_err, "LOCKS %63[^,], %63[^\n]", a, b) == 2);
    CHECK_CHILD(strstr(child_err, "deadlock: wait-for cycle") < end);
    CHECK_CHILD(strstr(child_err, a) != NULL && strstr(child_err, b) != NULL);
    int marked = 0;
    for (char *p = child_err; (p = strstr(p, "<-- deadlock")) != NULL && p < end; p++) marked++;
    CHECK_CHILD(marked == 2);
    /* The inversion was also reported as a potential deadlock, before the threads blocked. */
    CHECK_CHILD(strstr(child_err, "potential deadlock") != NULL);
    /* And SIGQUIT printed the dump again. */
    CHECK_CHILD(strstr(end, "deadlock: wait-for cycle") != NULL);
}

/* ---- a forked child that only makes and frees locks starts no thread ---- */

static int thread_count(void) {
    FILE *status = fopen("/proc/self/status", "r");
    CHECK(status != NULL);
    char line[256];
    int threads = -1;
    while (fgets(line, sizeof line, status) != NULL) sscanf(line, "Threads: %d", &threads);
    fclose(status);
    return threads;
}

/* Checking was used in the parent (its dump thread runs there) and is off again: a child of
 * fork() that initializes locks again (which makes the checker forget them) stays
 * single-threaded. A dump thread there would surprise the child and kill it under TSan. */
static void test_forked_child_starts_no_thread(void) {
    sync_debug_lock_order_set_handler(NULL, NULL);
    sync_debug_lock_order(true);
    sync_mutex_t a = SYNC_MUTEX_INIT, b = SYNC_MUTEX_INIT;
    order(&a, &b);  /* the graph has nodes now */
    sync_debug_lock_order(false);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sync_mutex_t m;
        int ok = sync_mutex_init(&m, 0) == 0 && sync_mutex_lock(&m) == 0 && sync_mutex_unlock(&m) == 0
                 && sync_mutex_init(&m, 0) == 0 && thread_count() == 1;  /* init again: forgets it */
        _exit(ok ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
    if (argc > 1) {  /* a child (spawn_child) */
        if (strcmp(argv[1], "default-report") == 0) inversion_with_default_report();
        else if (strcmp(argv[1], "abort") == 0) inversion_with_abort();
        else if (strcmp(argv[1], "env-child") == 0) {
            default_abort();
            inversion();  /* no call turns checking on: the environment did, or not */
        } else if (strcmp(argv[1], "deadlock") == 0) deadlock_child();
        else return 2;
        return 0;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    alarm(300);  /* against a hang only */
    test_children();
    test_dump_waits();
    test_forked_child_starts_no_thread();
    DONE();
}
