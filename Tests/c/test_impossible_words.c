/* Memory the library never wrote, and arguments no caller can mean: the throttler, once, spin
 * lock, dictionary and atomic reference answer EINVAL (or stop with a message), never hang,
 * crash without a word, or change the memory. Each case that used to hang or crash runs in a
 * child process with a bound, so that it fails instead of stopping the suite. */
#define _GNU_SOURCE
#include "check.h"
#include <sync.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Runs body in a child (its own process group); returns its exit status, or -1 if it was
 * killed by a signal or had not exited within 10 s (then the group is killed: a guard against a
 * hang, not a timing assertion). The start of the child's stderr goes to `err` (NUL-terminated;
 * may be NULL); the pipe is drained as it fills, and never waited on once the child is gone (a
 * crash reporter it started may hold it open). */
static int in_child(void (*body)(void), char *err, size_t size) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        setpgid(0, 0);
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        body();
        _exit(0);
    }
    setpgid(child, child);
    close(pipefd[1]);
    CHECK(fcntl(pipefd[0], F_SETFL, O_NONBLOCK) == 0);
    char sink[4096];
    size_t got = 0;
    int status = 0, done = 0;
    for (int i = 0; i < 10000 && !done; i++) {
        if (waitpid(child, &status, WNOHANG) == child) done = 1;
        else { struct timespec ts = {0, 1000000}; nanosleep(&ts, NULL); }
        ssize_t n;
        while ((n = err && got + 1 < size ? read(pipefd[0], err + got, size - 1 - got)
                                          : read(pipefd[0], sink, sizeof sink)) > 0)
            if (err && got + 1 < size) got += (size_t)n;
    }
    kill(-child, SIGKILL);
    if (!done) waitpid(child, &status, 0);
    if (err) err[got] = 0;
    close(pipefd[0]);
    return done && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define EXPECT(call, code) do { if ((call) != (code)) { fprintf(stderr, "%s != %s\n", #call, #code); _exit(1); } } while (0)

/* ---- Throttler: holders outside 0...limit, limit < 1 ---- */

static void throttler_cases(void) {
    int32_t holders[] = {-1, INT32_MIN, 3, INT32_MAX}, limits[] = {2, 2, 2, 2};
    for (int i = 0; i < 4; i++) {
        sync_throttler_t t = SYNC_THROTTLER_INIT(limits[i]);
        t.holders = holders[i];
        sync_throttler_t before = t;
        EXPECT(sync_throttler_try_enter(&t), EINVAL);
        EXPECT(sync_throttler_enter(&t, -1), EINVAL);        /* used to admit, or to wait forever */
        EXPECT(sync_throttler_enter(&t, 1000000), EINVAL);
        EXPECT(sync_throttler_exit(&t), EINVAL);
        EXPECT(sync_throttler_exec(&t, NULL, NULL), false);
        if (memcmp(&t, &before, sizeof t) != 0) _exit(2);
    }
    sync_throttler_t zero = SYNC_THROTTLER_INIT(0), negative = SYNC_THROTTLER_INIT(-3);
    EXPECT(sync_throttler_try_enter(&zero), EINVAL);
    EXPECT(sync_throttler_enter(&zero, 0), EINVAL);
    EXPECT(sync_throttler_exit(&zero), EINVAL);
    EXPECT(sync_throttler_try_enter(&negative), EINVAL);
    EXPECT(sync_throttler_exit(&negative), EINVAL);
    EXPECT(sync_throttler_holders(&negative), 0);
    /* A sound one beside them still works. */
    sync_throttler_t fine = SYNC_THROTTLER_INIT(1);
    EXPECT(sync_throttler_try_enter(&fine), 0);
    EXPECT(sync_throttler_try_enter(&fine), EBUSY);
    EXPECT(sync_throttler_exit(&fine), 0);
    EXPECT(sync_throttler_exit(&fine), EPERM);
}

/* ---- Once: sleepers but no runner, done with sleepers, a runner that is no thread ---- */

static void noop(void *context) { (void)context; }

static void once_cases(void) {
    uint32_t words[] = {0x80000000u, 0xFFFFFFFFu, 0x7FFFFFFEu, 0x00400000u, 0x80400001u};
    for (int i = 0; i < 5; i++) {
        sync_once_t once = {words[i]};
        EXPECT(sync_once(&once, noop, NULL), EINVAL);           /* used to wait forever */
        EXPECT(sync_once_begin(&once), EINVAL);
        EXPECT(sync_once_begin_interruptible(&once), EINVAL);
        EXPECT(sync_once_end(&once, 1), EINVAL);
        if (once._word != words[i]) _exit(2);
    }
    sync_once_t fine = SYNC_ONCE_INIT;
    EXPECT(sync_once_end(&fine, 1), EPERM);
    EXPECT(sync_once(&fine, noop, NULL), 0);
    EXPECT(sync_once_begin(&fine), 0);
}

/* ---- Spin lock: a holder that is no thread ---- */

static void spinlock_cases(void) {
    uint32_t words[] = {0xFFFFFFFFu, 0x00400000u, 0x80000001u};
    for (int i = 0; i < 3; i++) {
        sync_spinlock_t lock = {words[i]};
        EXPECT(sync_spinlock_try_lock(&lock), EINVAL);
        EXPECT(sync_spinlock_lock(&lock), EINVAL);              /* used to nap forever */
        EXPECT(sync_spinlock_lock_until(&lock, -1), EINVAL);
        EXPECT(sync_spinlock_lock_interruptible(&lock, -1), EINVAL);
        EXPECT(sync_spinlock_unlock(&lock), EINVAL);
        if (lock._word != words[i]) _exit(2);
    }
    EXPECT(sync_spinlock_lock(NULL), EINVAL);
    sync_spinlock_t fine = SYNC_SPINLOCK_INIT;
    EXPECT(sync_spinlock_unlock(&fine), EPERM);
    EXPECT(sync_spinlock_lock(&fine), 0);
    EXPECT(sync_spinlock_lock(&fine), EDEADLK);
    EXPECT(sync_spinlock_unlock(&fine), 0);
}

/* ---- Dictionary: a byte key longer than any buffer ---- */

static void retain_nothing(void *object) { (void)object; }

static void dictionary_cases(void) {
    sync_dictionary_t *d;
    EXPECT(sync_dictionary_create(&d, retain_nothing, retain_nothing), 0);
    static int value;
    const char key[] = "k";
    EXPECT(sync_dictionary_set(d, key, SIZE_MAX, &value), EINVAL);  /* used to crash copying it */
    EXPECT(sync_dictionary_set(d, key, (size_t)PTRDIFF_MAX + 1, &value), EINVAL);
    if (sync_dictionary_get(d, key, SIZE_MAX) != NULL) _exit(2);
    if (sync_dictionary_get_or(d, key, SIZE_MAX, &value) != &value) _exit(3);
    EXPECT(sync_dictionary_remove(d, key, SIZE_MAX), EINVAL);
    EXPECT((long)sync_dictionary_count(d), 0);
    EXPECT(sync_dictionary_set(d, key, 1, &value), 0);
    if (sync_dictionary_get(d, key, 1) != &value) _exit(4);
    sync_dictionary_destroy(d);
}

/* ---- Atomic reference never initialized: no error channel, so a stop with a message ---- */

static void uninitialized_reference(void) {
    sync_atomic_ref_t r;
    memset(&r, 0, sizeof r);
    (void)sync_atomic_ref_get(&r);
    _exit(0);  /* not reached */
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    CHECK_EQ(in_child(throttler_cases, NULL, 0), 0);
    CHECK_EQ(in_child(once_cases, NULL, 0), 0);
    CHECK_EQ(in_child(spinlock_cases, NULL, 0), 0);
    CHECK_EQ(in_child(dictionary_cases, NULL, 0), 0);
    char err[4096];
    CHECK_EQ(in_child(uninitialized_reference, err, sizeof err), -1);  /* stopped by a signal */
    CHECK(strstr(err, "sync_atomic_ref_get: retain/release are NULL") != NULL);
    DONE();
}
