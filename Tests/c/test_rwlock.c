/* The read-write lock where simple tests do not reach: thousands of waiting writers, waiters
 * SIGKILLed in shared memory, timeouts racing releases, downgrades racing writers, the write
 * holder's own attempts, impossible states. A watchdog turns a hang (a lost wakeup) into a
 * failure with a message. */
#define _GNU_SOURCE
#include "check.h"
#include "test_support.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sync.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND 1000000000ull

/* Whether process or thread `pid` is asleep (state S in /proc/pid/stat): blocked in the kernel. */
static int asleep(pid_t pid) {
    char path[64], buffer[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    size_t n = fread(buffer, 1, sizeof buffer - 1, file);
    fclose(file);
    buffer[n] = 0;
    const char *end = strrchr(buffer, ')');  /* the command name may hold spaces */
    return end && end[1] == ' ' && end[2] == 'S';
}

/* ---- Thousands of waiting writers ---------------------------------------------------------- */

enum { MANY_WRITERS = 2500, MANY_READERS = 100 };
static sync_rwlock_t many = SYNC_RWLOCK_INIT;
static atomic_int many_writers_inside, many_readers_inside, many_done, many_failures;

static void *many_writer(void *arg) {
    (void)arg;
    if (sync_rwlock_wrlock(&many) != 0) { atomic_fetch_add(&many_failures, 1); return NULL; }
    if (atomic_fetch_add(&many_writers_inside, 1) != 0 || atomic_load(&many_readers_inside) != 0)
        atomic_fetch_add(&many_failures, 1);
    atomic_fetch_sub(&many_writers_inside, 1);
    if (sync_rwlock_wrunlock(&many) != 0) atomic_fetch_add(&many_failures, 1);
    atomic_fetch_add(&many_done, 1);
    return NULL;
}

static void *many_reader(void *arg) {
    (void)arg;
    if (sync_rwlock_rdlock(&many) != 0) { atomic_fetch_add(&many_failures, 1); return NULL; }
    atomic_fetch_add(&many_readers_inside, 1);
    if (atomic_load(&many_writers_inside) != 0) atomic_fetch_add(&many_failures, 1);
    atomic_fetch_sub(&many_readers_inside, 1);
    if (sync_rwlock_rdunlock(&many) != 0) atomic_fetch_add(&many_failures, 1);
    atomic_fetch_add(&many_done, 1);
    return NULL;
}

static void test_many_waiting_writers(void) {
    alarm(300);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    static pthread_t writers[MANY_WRITERS], readers[MANY_READERS];
    CHECK_EQ(sync_rwlock_wrlock(&many), 0);
    int created = 0;
    while (created < MANY_WRITERS && pthread_create(&writers[created], &attr, many_writer, NULL) == 0) created++;
    if (created <= 2048) printf("test_rwlock: only %d threads could be created; more than 2048 were wanted\n", created);
    /* Every writer counted and asleep behind the holder, the state intact. */
    WAIT_UNTIL(sync_rwlock_waiting_writers(&many) == (uint32_t)created);
    CHECK_EQ(sync_rwlock_try_rdlock(&many), EBUSY);
    CHECK_EQ(sync_rwlock_try_wrlock(&many), EBUSY);
    int readers_created = 0;
    while (readers_created < MANY_READERS && pthread_create(&readers[readers_created], &attr, many_reader, NULL) == 0)
        readers_created++;
    CHECK_EQ(sync_rwlock_wrunlock(&many), 0);
    for (int i = 0; i < created; i++) pthread_join(writers[i], NULL);
    for (int i = 0; i < readers_created; i++) pthread_join(readers[i], NULL);
    CHECK_EQ(atomic_load(&many_failures), 0);
    CHECK_EQ(atomic_load(&many_done), created + readers_created);
    CHECK_EQ(sync_rwlock_waiting_writers(&many), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&many), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&many), 0);
    CHECK_EQ(sync_rwlock_try_rdlock(&many), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&many), 0);
    pthread_attr_destroy(&attr);
    alarm(0);
}

/* ---- Waiters SIGKILLed in shared memory ---------------------------------------------------- */

enum { HOLD_READ, HOLD_WRITE };

static sync_rwlock_t *shared_rwlock(void) {
    sync_rwlock_t *rw = mmap(NULL, sizeof *rw, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(rw != MAP_FAILED);
    CHECK_EQ(sync_rwlock_init(rw, SYNC_RWLOCK_SHARED), 0);
    return rw;
}

/* A child process that waits for the write (or read) lock, then takes and releases it. */
static pid_t fork_waiter(sync_rwlock_t *rw, int write) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        if (write ? sync_rwlock_wrlock(rw) : sync_rwlock_rdlock(rw)) _exit(1);
        if (write ? sync_rwlock_wrunlock(rw) : sync_rwlock_rdunlock(rw)) _exit(2);
        _exit(0);
    }
    return pid;
}

static void expect_exit(pid_t pid, int signal) {
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (signal) CHECK(WIFSIGNALED(status) && WTERMSIG(status) == signal);
    else CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* New readers and writers get in, in this process and in another one. */
static void expect_usable(sync_rwlock_t *rw) {
    CHECK_EQ(sync_rwlock_rdlock_timed(rw, 10 * SECOND), 0);
    CHECK_EQ(sync_rwlock_try_rdlock(rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    CHECK_EQ(sync_rwlock_wrlock_timed(rw, 10 * SECOND), 0);
    CHECK_EQ(sync_rwlock_wrunlock(rw), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (sync_rwlock_rdlock_timed(rw, 10 * SECOND) || sync_rwlock_rdunlock(rw)) _exit(1);
        if (sync_rwlock_wrlock_timed(rw, 10 * SECOND) || sync_rwlock_wrunlock(rw)) _exit(2);
        _exit(0);
    }
    expect_exit(pid, 0);
}

/* A writer killed while it waits behind a holder (reading or writing): once the holder
 * releases, readers queued behind the dead writer go, and new readers and writers get in. */
static void test_killed_waiting_writer(int hold) {
    alarm(120);
    sync_rwlock_t *rw = shared_rwlock();
    CHECK_EQ(hold == HOLD_WRITE ? sync_rwlock_wrlock(rw) : sync_rwlock_rdlock(rw), 0);
    pid_t writer = fork_waiter(rw, 1);
    WAIT_UNTIL(sync_rwlock_waiting_writers(rw) == 1 && asleep(writer));
    if (hold == HOLD_READ) CHECK_EQ(sync_rwlock_try_rdlock(rw), EBUSY);  /* a live writer waits: readers wait */
    pid_t queued_reader = fork_waiter(rw, 0);                             /* blocks behind the writer */
    WAIT_UNTIL(asleep(queued_reader));
    CHECK_EQ(kill(writer, SIGKILL), 0);
    expect_exit(writer, SIGKILL);
    CHECK_EQ(hold == HOLD_WRITE ? sync_rwlock_wrunlock(rw) : sync_rwlock_rdunlock(rw), 0);
    expect_exit(queued_reader, 0);
    expect_usable(rw);
    munmap(rw, sizeof *rw);
    alarm(0);
}

/* Writers killed among live ones: the live writers keep their preference and all get in. */
static void test_killed_among_live_writers(void) {
    enum { WRITERS = 8 };
    alarm(120);
    sync_rwlock_t *rw = shared_rwlock();
    CHECK_EQ(sync_rwlock_rdlock(rw), 0);
    pid_t writers[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = fork_waiter(rw, 1);
        WAIT_UNTIL(sync_rwlock_waiting_writers(rw) == (uint32_t)i + 1 && asleep(writers[i]));
    }
    for (int i = 0; i < WRITERS; i += 2) {
        CHECK_EQ(kill(writers[i], SIGKILL), 0);
        expect_exit(writers[i], SIGKILL);
    }
    CHECK_EQ(sync_rwlock_try_rdlock(rw), EBUSY);  /* live writers wait: still writer-preferring */
    CHECK_EQ(sync_rwlock_rdunlock(rw), 0);
    for (int i = 1; i < WRITERS; i += 2) expect_exit(writers[i], 0);
    expect_usable(rw);
    munmap(rw, sizeof *rw);
    alarm(0);
}

/* A reader killed while it waits behind a writer leaves nothing behind. */
static void test_killed_waiting_reader(void) {
    alarm(120);
    sync_rwlock_t *rw = shared_rwlock();
    CHECK_EQ(sync_rwlock_wrlock(rw), 0);
    pid_t reader = fork_waiter(rw, 0);
    WAIT_UNTIL(asleep(reader));
    CHECK_EQ(kill(reader, SIGKILL), 0);
    expect_exit(reader, SIGKILL);
    CHECK_EQ(sync_rwlock_wrunlock(rw), 0);
    expect_usable(rw);
    munmap(rw, sizeof *rw);
    alarm(0);
}

/* ---- Timeouts racing releases -------------------------------------------------------------- */

enum { RACE_ITERATIONS = 4000 };
static sync_rwlock_t race = SYNC_RWLOCK_INIT;
static atomic_int race_writers_inside, race_readers_inside, race_failures;

/* Holds of 0-60 us now and then: longer than the waiters' spinning, so they sleep and time out. */
static void race_hold(int i) {
    if (i % 4 == 0) usleep((useconds_t)(i % 61));
}

static void race_write_section(int i) {
    if (atomic_fetch_add(&race_writers_inside, 1) != 0 || atomic_load(&race_readers_inside) != 0)
        atomic_fetch_add(&race_failures, 1);
    race_hold(i);
    atomic_fetch_sub(&race_writers_inside, 1);
    if (sync_rwlock_wrunlock(&race) != 0) atomic_fetch_add(&race_failures, 1);
}

static void race_read_section(int i) {
    atomic_fetch_add(&race_readers_inside, 1);
    if (atomic_load(&race_writers_inside) != 0) atomic_fetch_add(&race_failures, 1);
    race_hold(i);
    atomic_fetch_sub(&race_readers_inside, 1);
    if (sync_rwlock_rdunlock(&race) != 0) atomic_fetch_add(&race_failures, 1);
}

/* Timeouts of 0-63 us, about as long as a hold: waiters give up while being woken. */
static void *race_timed_writer(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < RACE_ITERATIONS; i++) {
        int r = sync_rwlock_wrlock_timed(&race, (uint64_t)(rand_r(&seed) % 64) * 1000);
        if (r == 0) race_write_section(i);
        else if (r != ETIMEDOUT) atomic_fetch_add(&race_failures, 1);
    }
    return NULL;
}

static void *race_timed_reader(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < RACE_ITERATIONS; i++) {
        int r = sync_rwlock_rdlock_timed(&race, (uint64_t)(rand_r(&seed) % 64) * 1000);
        if (r == 0) race_read_section(i);
        else if (r != ETIMEDOUT) atomic_fetch_add(&race_failures, 1);
    }
    return NULL;
}

/* Waits without a deadline: a lost wakeup hangs it (the watchdog reports it). */
static void *race_blocking_writer(void *arg) {
    (void)arg;
    for (int i = 0; i < RACE_ITERATIONS / 4; i++) {
        if (sync_rwlock_wrlock(&race) != 0) { atomic_fetch_add(&race_failures, 1); continue; }
        race_write_section(i);
    }
    return NULL;
}

static void *race_blocking_reader(void *arg) {
    (void)arg;
    for (int i = 0; i < RACE_ITERATIONS / 4; i++) {
        if (sync_rwlock_rdlock(&race) != 0) { atomic_fetch_add(&race_failures, 1); continue; }
        race_read_section(i);
    }
    return NULL;
}

/* The interruptible form ends each wait slice by giving up and coming back (slices end in the
 * process's main thread only: this one runs there). */
static void *race_interruptible_writer(void *arg) {
    (void)arg;
    for (int i = 0; i < RACE_ITERATIONS / 4; i++) {
        int r;
        while ((r = sync_rwlock_wrlock_interruptible(&race, -1)) == EINTR) {}
        if (r != 0) { atomic_fetch_add(&race_failures, 1); continue; }
        race_write_section(i);
    }
    return NULL;
}

static void test_timeouts_race_releases(void) {
    alarm(300);
    void *(*bodies[])(void *) = {race_timed_writer, race_timed_writer, race_timed_writer, race_timed_reader,
                                 race_timed_reader, race_blocking_writer, race_blocking_writer,
                                 race_blocking_reader};
    enum { N = sizeof bodies / sizeof bodies[0] };
    pthread_t t[N];
    for (int i = 0; i < N; i++) CHECK_EQ(pthread_create(&t[i], NULL, bodies[i], (void *)(uintptr_t)(i + 1)), 0);
    race_interruptible_writer(NULL);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&race_failures), 0);
    CHECK_EQ(sync_rwlock_waiting_writers(&race), 0);
    CHECK_EQ(sync_rwlock_try_rdlock(&race), 0);  /* no writer's mark left behind */
    CHECK_EQ(sync_rwlock_rdunlock(&race), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&race), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&race), 0);
    alarm(0);
}

/* The last waiting writer gives up while readers hold the lock: readers queued behind it get in
 * at once, without waiting for the holders to leave. */
static atomic_int reader_tids[8];
static sync_rwlock_t quitting = SYNC_RWLOCK_INIT;
static atomic_int stop_writer, writer_returned, queued_reader_in;
static void *quitting_writer(void *arg) {
    (void)arg;
    int r;
    while ((r = sync_rwlock_wrlock_interruptible(&quitting, -1)) == EINTR && !atomic_load(&stop_writer)) {}
    atomic_store(&writer_returned, 1);
    return (void *)(intptr_t)r;  /* EINTR: a signal handler ran while it slept, and it gave up */
}
static void on_interrupt(int signal) { (void)signal; }
static void *queued_reader(void *arg) {
    atomic_store(&reader_tids[0], (int)gettid());
    (void)arg;
    if (sync_rwlock_rdlock(&quitting) != 0) return (void *)1;
    atomic_store(&queued_reader_in, 1);
    return (void *)(intptr_t)sync_rwlock_rdunlock(&quitting);
}

static void test_last_writer_giving_up_lets_readers_in(void) {
    alarm(120);
    CHECK_EQ(sync_rwlock_rdlock(&quitting), 0);
    pthread_t writer, reader;
    CHECK_EQ(pthread_create(&writer, NULL, quitting_writer, NULL), 0);
    WAIT_UNTIL(sync_rwlock_waiting_writers(&quitting) == 1);
    atomic_store(&reader_tids[0], 0);
    CHECK_EQ(pthread_create(&reader, NULL, queued_reader, NULL), 0);
    WAIT_UNTIL(atomic_load(&reader_tids[0]) && asleep(atomic_load(&reader_tids[0])));
    /* A thread other than the main one waits in one piece: a signal handler interrupts it. A
     * signal that lands while it is not asleep interrupts nothing, so send until it returns. */
    struct sigaction action = { .sa_handler = on_interrupt }, previous;
    sigemptyset(&action.sa_mask);
    CHECK_EQ(sigaction(SIGUSR1, &action, &previous), 0);
    atomic_store(&stop_writer, 1);
    WAIT_UNTIL(atomic_load(&writer_returned) || (pthread_kill(writer, SIGUSR1), 0));
    void *r;
    pthread_join(writer, &r);
    CHECK_EQ(sigaction(SIGUSR1, &previous, NULL), 0);
    CHECK_EQ((intptr_t)r, EINTR);
    WAIT_UNTIL(atomic_load(&queued_reader_in));  /* while this thread still reads */
    pthread_join(reader, &r);
    CHECK(r == NULL);
    CHECK_EQ(sync_rwlock_waiting_writers(&quitting), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&quitting), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&quitting), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&quitting), 0);
    alarm(0);
}

/* ---- Downgrade ----------------------------------------------------------------------------- */

static sync_rwlock_t down = SYNC_RWLOCK_INIT;

static void *try_downgrade(void *arg) { return (void *)(intptr_t)sync_rwlock_downgrade(arg); }
static void *try_read_and_release(void *arg) {
    int r = sync_rwlock_try_rdlock(arg);
    if (r == 0) r = sync_rwlock_rdunlock(arg);
    return (void *)(intptr_t)r;
}
static int in_thread(void *(*body)(void *), void *arg) {
    pthread_t t;
    void *result;
    CHECK_EQ(pthread_create(&t, NULL, body, arg), 0);
    pthread_join(t, &result);
    return (int)(intptr_t)result;
}

static void test_downgrade_codes(void) {
    sync_rwlock_t l = SYNC_RWLOCK_INIT;
    CHECK_EQ(sync_rwlock_downgrade(NULL), EINVAL);
    CHECK_EQ(sync_rwlock_downgrade(&l), EPERM);                /* not held */
    CHECK_EQ(sync_rwlock_rdlock(&l), 0);
    CHECK_EQ(sync_rwlock_downgrade(&l), EPERM);                /* held for reading */
    CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
    CHECK_EQ(sync_rwlock_wrlock(&l), 0);
    CHECK_EQ(in_thread(try_downgrade, &l), EPERM);             /* another thread's write lock */
    CHECK_EQ(in_thread(try_read_and_release, &l), EBUSY);
    CHECK_EQ(sync_rwlock_downgrade(&l), 0);
    CHECK_EQ(sync_rwlock_downgrade(&l), EPERM);                /* now a reader */
    CHECK_EQ(sync_rwlock_wrunlock(&l), EPERM);
    CHECK_EQ(in_thread(try_read_and_release, &l), 0);          /* readers join */
    CHECK_EQ(sync_rwlock_try_wrlock(&l), EBUSY);                /* writers do not */
    CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
    CHECK_EQ(sync_rwlock_rdunlock(&l), EPERM);
    CHECK_EQ(sync_rwlock_try_wrlock(&l), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&l), 0);
}

static atomic_int joined, writer_got_in, let_go;
static void *joining_reader(void *arg) {
    atomic_store(&reader_tids[(intptr_t)arg], (int)gettid());
    if (sync_rwlock_rdlock_timed(&down, 60 * SECOND) != 0) return (void *)1;
    atomic_fetch_add(&joined, 1);
    while (!atomic_load(&let_go)) usleep(1000);
    return (void *)(intptr_t)sync_rwlock_rdunlock(&down);
}
static void *waiting_writer(void *arg) {
    (void)arg;
    if (sync_rwlock_wrlock_timed(&down, 60 * SECOND) != 0) return (void *)1;
    atomic_store(&writer_got_in, 1);
    return (void *)(intptr_t)sync_rwlock_wrunlock(&down);
}

/* Readers blocked behind the writer join the downgraded lock while its holder still reads. */
static void test_downgrade_lets_readers_join(void) {
    enum { READERS = 6 };
    alarm(120);
    pthread_t t[READERS];
    atomic_store(&joined, 0);
    atomic_store(&let_go, 0);
    CHECK_EQ(sync_rwlock_wrlock(&down), 0);
    for (int i = 0; i < READERS; i++) {
        atomic_store(&reader_tids[i], 0);
        CHECK_EQ(pthread_create(&t[i], NULL, joining_reader, (void *)(intptr_t)i), 0);
    }
    for (int i = 0; i < READERS; i++) WAIT_UNTIL(atomic_load(&reader_tids[i]) && asleep(atomic_load(&reader_tids[i])));
    CHECK_EQ(atomic_load(&joined), 0);
    CHECK_EQ(sync_rwlock_downgrade(&down), 0);
    WAIT_UNTIL(atomic_load(&joined) == READERS);
    CHECK_EQ(sync_rwlock_rdunlock(&down), 0);
    atomic_store(&let_go, 1);
    for (int i = 0; i < READERS; i++) { void *r; pthread_join(t[i], &r); CHECK(r == NULL); }
    CHECK_EQ(sync_rwlock_try_wrlock(&down), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&down), 0);
    alarm(0);
}

/* A writer that waits keeps its place: after the downgrade, it goes next, before new readers. */
static void test_downgrade_keeps_waiting_writer_next(void) {
    alarm(120);
    atomic_store(&writer_got_in, 0);
    CHECK_EQ(sync_rwlock_wrlock(&down), 0);
    pthread_t writer;
    CHECK_EQ(pthread_create(&writer, NULL, waiting_writer, NULL), 0);
    WAIT_UNTIL(sync_rwlock_waiting_writers(&down) == 1);
    CHECK_EQ(sync_rwlock_downgrade(&down), 0);
    CHECK_EQ(atomic_load(&writer_got_in), 0);                  /* it cannot: we read */
    CHECK_EQ(in_thread(try_read_and_release, &down), EBUSY);   /* new readers wait for the writer */
    CHECK_EQ(sync_rwlock_rdunlock(&down), 0);
    void *r;
    pthread_join(writer, &r);
    CHECK(r == NULL);
    CHECK_EQ(atomic_load(&writer_got_in), 1);
    alarm(0);
}

/* Downgraders, writers and readers race. `phase` says who is inside: 0 nobody exclusive, a
 * downgrader's id from its write phase through its read phase, -1 a writer. No writer may ever
 * find a downgrader inside, and a downgrader's read phase must still see its own id. */
enum { DOWNGRADE_ITERATIONS = 20000 };
static atomic_int phase, downgrade_failures;
static sync_rwlock_t racing = SYNC_RWLOCK_INIT;

static void *racing_downgrader(void *arg) {
    int me = (int)(intptr_t)arg;
    for (int i = 0; i < DOWNGRADE_ITERATIONS; i++) {
        if (sync_rwlock_wrlock(&racing) != 0) { atomic_fetch_add(&downgrade_failures, 1); continue; }
        if (atomic_exchange(&phase, me) != 0) atomic_fetch_add(&downgrade_failures, 1);
        if (sync_rwlock_downgrade(&racing) != 0) atomic_fetch_add(&downgrade_failures, 1);
        if (i % 16 == 0) sched_yield();
        if (atomic_load(&phase) != me) atomic_fetch_add(&downgrade_failures, 1);
        atomic_store(&phase, 0);
        if (sync_rwlock_rdunlock(&racing) != 0) atomic_fetch_add(&downgrade_failures, 1);
    }
    return NULL;
}

static void *racing_writer(void *arg) {
    (void)arg;
    for (int i = 0; i < DOWNGRADE_ITERATIONS; i++) {
        int r = i % 2 ? sync_rwlock_wrlock(&racing) : sync_rwlock_wrlock_timed(&racing, (uint64_t)(i % 50) * 1000);
        if (r == ETIMEDOUT) continue;
        if (r != 0) { atomic_fetch_add(&downgrade_failures, 1); continue; }
        if (atomic_exchange(&phase, -1) != 0) atomic_fetch_add(&downgrade_failures, 1);
        atomic_store(&phase, 0);
        if (sync_rwlock_wrunlock(&racing) != 0) atomic_fetch_add(&downgrade_failures, 1);
    }
    return NULL;
}

static void *racing_reader(void *arg) {
    (void)arg;
    for (int i = 0; i < DOWNGRADE_ITERATIONS; i++) {
        if (sync_rwlock_rdlock(&racing) != 0) { atomic_fetch_add(&downgrade_failures, 1); continue; }
        if (atomic_load(&phase) < 0) atomic_fetch_add(&downgrade_failures, 1);
        if (sync_rwlock_rdunlock(&racing) != 0) atomic_fetch_add(&downgrade_failures, 1);
    }
    return NULL;
}

static void test_downgrade_races_writers(void) {
    alarm(300);
    pthread_t t[6];
    CHECK_EQ(pthread_create(&t[0], NULL, racing_downgrader, (void *)1), 0);
    CHECK_EQ(pthread_create(&t[1], NULL, racing_downgrader, (void *)2), 0);
    CHECK_EQ(pthread_create(&t[2], NULL, racing_writer, NULL), 0);
    CHECK_EQ(pthread_create(&t[3], NULL, racing_writer, NULL), 0);
    CHECK_EQ(pthread_create(&t[4], NULL, racing_reader, NULL), 0);
    CHECK_EQ(pthread_create(&t[5], NULL, racing_reader, NULL), 0);
    for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&downgrade_failures), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&racing), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&racing), 0);
    alarm(0);
}

/* ---- The write holder's own attempts ------------------------------------------------------- */

/* A try says "held" (EBUSY) whoever holds it; a form that may wait says EDEADLK at once. */
static void test_holder_attempts(void) {
    alarm(60);  /* a form that waited out its 30 s timeout would fail the codes, not pass late */
    sync_rwlock_t l = SYNC_RWLOCK_INIT;
    CHECK_EQ(sync_rwlock_wrlock(&l), 0);
    CHECK_EQ(sync_rwlock_try_wrlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_try_rdlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_wrlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock(&l), EDEADLK);
    CHECK_EQ(sync_rwlock_wrlock_timed(&l, 30 * SECOND), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock_timed(&l, 30 * SECOND), EDEADLK);
    CHECK_EQ(sync_rwlock_wrlock_until(&l, now_ns() + 30 * (int64_t)SECOND), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock_until(&l, now_ns() + 30 * (int64_t)SECOND), EDEADLK);
    CHECK_EQ(sync_rwlock_wrlock_interruptible(&l, -1), EDEADLK);
    CHECK_EQ(sync_rwlock_rdlock_interruptible(&l, -1), EDEADLK);
    CHECK_EQ(sync_rwlock_wrunlock(&l), 0);
    CHECK_EQ(sync_rwlock_waiting_writers(&l), 0);
    alarm(0);
}

/* ---- Limits and impossible states ---------------------------------------------------------- */

static void test_reader_limit(void) {
    alarm(60);
    sync_rwlock_t l = SYNC_RWLOCK_INIT;
    l._state = (1u << 26) - 2;  /* 2^26-2 readers hold it */
    CHECK_EQ(sync_rwlock_rdlock(&l), 0);
    CHECK_EQ(sync_rwlock_rdlock(&l), EAGAIN);
    CHECK_EQ(sync_rwlock_try_rdlock(&l), EAGAIN);
    CHECK_EQ(sync_rwlock_rdlock_timed(&l, SECOND), EAGAIN);
    CHECK_EQ(l._state, (1u << 26) - 1);
    CHECK_EQ(sync_rwlock_try_wrlock(&l), EBUSY);
    CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
    alarm(0);
}

/* Every function on a state no sequence of calls produces: EINVAL, nothing changed, no crash,
 * no hang. In a child process, so that a crash is reported as such. */
static void expect_invalid(sync_rwlock_t bad) {
    sync_rwlock_t l = bad;
    int64_t soon = now_ns() + (int64_t)SECOND;
#define INVALID(call) do { CHECK_EQ(call, EINVAL); CHECK(memcmp(&l, &bad, sizeof l) == 0); } while (0)
    INVALID(sync_rwlock_rdlock(&l));
    INVALID(sync_rwlock_try_rdlock(&l));
    INVALID(sync_rwlock_rdlock_timed(&l, SECOND));
    INVALID(sync_rwlock_rdlock_until(&l, soon));
    INVALID(sync_rwlock_rdlock_interruptible(&l, soon));
    INVALID(sync_rwlock_rdunlock(&l));
    INVALID(sync_rwlock_wrlock(&l));
    INVALID(sync_rwlock_try_wrlock(&l));
    INVALID(sync_rwlock_wrlock_timed(&l, SECOND));
    INVALID(sync_rwlock_wrlock_until(&l, soon));
    INVALID(sync_rwlock_wrlock_interruptible(&l, soon));
    INVALID(sync_rwlock_wrunlock(&l));
    INVALID(sync_rwlock_downgrade(&l));
#undef INVALID
}

static void test_impossible_states(void) {
    const sync_rwlock_t bad[] = {
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},  /* all ones */
        {0x10000001u, 0, 0, 0},                                 /* a writer and a reader */
        {0x90000005u, 0, 0, 0},                                 /* the same, shared */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(60);
            expect_invalid(bad[i]);
            /* The owner word naming the caller: wrunlock and downgrade still change nothing. */
            sync_rwlock_t mine = bad[i];
            mine._writer = (uint32_t)gettid();
            expect_invalid(mine);
            _exit(0);
        }
        int status;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status)) fprintf(stderr, "state %zu: child killed by signal %d\n", i, WTERMSIG(status));
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* A free lock marked while no writer is counted (the last writer between giving up and
 * clearing the mark, or a word written by hand): a reader clears the mark and goes in, and a
 * writer takes it. */
static void test_orphaned_mark(void) {
    const sync_rwlock_t marked[] = {
        {0x20000000u, 0, 0, 0},  /* the writers' mark on a free lock */
        {0xe0000000u, 7, 0, 0},  /* the same, shared, with the parked readers' bit */
    };
    for (size_t i = 0; i < sizeof marked / sizeof marked[0]; i++) {
        alarm(60);
        sync_rwlock_t l = marked[i];
        CHECK_EQ(sync_rwlock_try_rdlock(&l), EBUSY);  /* a writer may come: a try does not wait */
        CHECK_EQ(sync_rwlock_rdlock(&l), 0);
        CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
        CHECK_EQ(sync_rwlock_try_wrlock(&l), 0);
        CHECK_EQ(sync_rwlock_wrunlock(&l), 0);
        l = marked[i];
        CHECK_EQ(sync_rwlock_wrlock(&l), 0);  /* a writer takes it at once */
        CHECK_EQ(sync_rwlock_wrunlock(&l), 0);
        CHECK_EQ(sync_rwlock_try_rdlock(&l), 0);
        CHECK_EQ(sync_rwlock_rdunlock(&l), 0);
        alarm(0);
    }
}

/* A reader that releases and at once reads again does not overtake the writer its release
 * woke: the lock stays marked for that writer. The reader's second read lock waits until the
 * writer has been in, whenever the threads run. */
static sync_rwlock_t handoff = SYNC_RWLOCK_INIT;
static atomic_int writer_was_in;
static void *handoff_writer(void *arg) {
    (void)arg;
    CHECK_EQ(sync_rwlock_wrlock(&handoff), 0);
    atomic_store(&writer_was_in, 1);
    CHECK_EQ(sync_rwlock_wrunlock(&handoff), 0);
    return NULL;
}

static void test_release_hands_the_lock_to_the_woken_writer(void) {
    alarm(120);
    for (int round = 0; round < 200; round++) {
        atomic_store(&writer_was_in, 0);
        CHECK_EQ(sync_rwlock_rdlock(&handoff), 0);
        pthread_t writer;
        CHECK_EQ(pthread_create(&writer, NULL, handoff_writer, NULL), 0);
        /* Until the writer has marked the lock (bit 29 of the state word: no reader gets in). */
        WAIT_UNTIL(__atomic_load_n(&handoff._state, __ATOMIC_SEQ_CST) & (1u << 29));
        CHECK_EQ(sync_rwlock_rdunlock(&handoff), 0);
        CHECK_EQ(sync_rwlock_rdlock(&handoff), 0);  /* waits for the writer, asleep or awake */
        CHECK_EQ(atomic_load(&writer_was_in), 1);
        CHECK_EQ(sync_rwlock_rdunlock(&handoff), 0);
        pthread_join(writer, NULL);
    }
    alarm(0);
}

/* A writer takes the lock after waiting and, before it uncounts itself, the only other writer
 * counted gives up: that one is not the last writer, so it leaves the mark; the taker then
 * uncounts itself. Here the caller plays the taker: it holds the write lock and counts itself
 * by hand (the window between takeAfterWaiting's CAS and its count), a timed writer gives up
 * meanwhile, and the caller uncounts itself by hand. A reader that parks behind the marked
 * lock must still get in once the caller releases: no writer is counted any more. */
static sync_rwlock_t stale = SYNC_RWLOCK_INIT;
static atomic_int stale_reader_in;
static void *stale_writer(void *arg) {
    (void)arg;
    CHECK_EQ(sync_rwlock_wrlock_timed(&stale, SECOND / 10), ETIMEDOUT);
    return NULL;
}
static void *stale_reader(void *arg) {
    (void)arg;
    CHECK_EQ(sync_rwlock_rdlock(&stale), 0);
    atomic_store(&stale_reader_in, 1);
    CHECK_EQ(sync_rwlock_rdunlock(&stale), 0);
    return NULL;
}

static void test_stale_mark_after_taker_and_quitter(void) {
    alarm(60);
    CHECK_EQ(sync_rwlock_wrlock(&stale), 0);
    pthread_t writer, reader;
    CHECK_EQ(pthread_create(&writer, NULL, stale_writer, NULL), 0);
    WAIT_UNTIL(__atomic_load_n(&stale._state, __ATOMIC_SEQ_CST) & (1u << 29));
    __atomic_fetch_add(&stale._waiting, 1, __ATOMIC_SEQ_CST);  /* the taker, still counted */
    pthread_join(writer, NULL);                                /* gave up: 2 -> 1, mark left */
    CHECK(__atomic_load_n(&stale._state, __ATOMIC_SEQ_CST) & (1u << 29));
    __atomic_fetch_sub(&stale._waiting, 1, __ATOMIC_SEQ_CST);  /* the taker uncounts itself */
    CHECK_EQ(pthread_create(&reader, NULL, stale_reader, NULL), 0);
    WAIT_UNTIL(__atomic_load_n(&stale._state, __ATOMIC_SEQ_CST) & (1u << 30));  /* parked */
    usleep(20000);
    CHECK_EQ(sync_rwlock_wrunlock(&stale), 0);
    int64_t end = now_ns() + 5 * (int64_t)SECOND;
    while (!atomic_load(&stale_reader_in) && now_ns() < end) usleep(1000);
    if (!atomic_load(&stale_reader_in))
        fprintf(stderr, "stale mark: reader parked on a free lock, state %#x waiting %u\n",
                __atomic_load_n(&stale._state, __ATOMIC_SEQ_CST), stale._waiting);
    CHECK(atomic_load(&stale_reader_in));
    pthread_join(reader, NULL);
    CHECK_EQ(sync_rwlock_try_wrlock(&stale), 0);  /* nothing left: free, unmarked */
    CHECK_EQ(sync_rwlock_wrunlock(&stale), 0);
    alarm(0);
}

int main(void) {
    watchdog_install("test_rwlock: watchdog: a test hung (a lost wakeup?)\n");
    test_holder_attempts();
    test_reader_limit();
    test_impossible_states();
    test_downgrade_codes();
    test_downgrade_lets_readers_join();
    test_downgrade_keeps_waiting_writer_next();
    test_downgrade_races_writers();
    test_killed_waiting_writer(HOLD_READ);
    test_killed_waiting_writer(HOLD_WRITE);
    test_killed_among_live_writers();
    test_killed_waiting_reader();
    test_timeouts_race_releases();
    test_last_writer_giving_up_lets_readers_in();
    test_many_waiting_writers();
    test_orphaned_mark();
    test_release_hands_the_lock_to_the_woken_writer();
    test_stale_mark_after_taker_and_quitter();
    DONE();
}
