/* The distributed lock's backends from C, each against a real store: the file system, and private
 * PostgreSQL and Redis servers (scripts/servers.sh starts them, or LIBSYNC_TEST_SERVERS names
 * running ones). The same tests for every backend: mutual exclusion between processes, fencing
 * tokens, a SIGKILLed holder recovered; and for the servers: a stopped (SIGSTOP) server while
 * waiting, a restart while held, a lost lease, bad URLs, a wrong password, an unreachable
 * server, a missing client library, interruptible waits. */
#define _GNU_SOURCE
#include <sync.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "check.h"
#include "distributed_support.h"

#ifndef LIBSYNC_SOURCE_DIR
#error "LIBSYNC_SOURCE_DIR: the source tree (for scripts/servers.sh)"
#endif

enum backend { FILES, POSTGRES, REDIS };
static const char *names[] = {"file system", "PostgreSQL", "Redis"};
static char servers[256];      /* the servers' directory */
static char base[3][512];      /* per backend: the target without the lock's name */
static char scratch[64];       /* a fresh directory for files */
static int lock_serial;

static const int64_t S = 1000000000LL, MS = 1000000LL;

static void read_url(const char *directory, const char *name, char *out, size_t size);

/* A fresh lock target of `backend` (extra: more URL parameters). */
static void target(enum backend b, const char *extra, char *out, size_t size) {
    int n = ++lock_serial;
    if (b == FILES) snprintf(out, size, "%s/lock%d", scratch, n);
    else snprintf(out, size, "%s%slock=test%d-%d%s", base[b], strchr(base[b], '?') ? "&" : "?", (int)getpid(), n, extra ? extra : "");
}

static void control(const char *what, enum backend b) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh %s %s %s", LIBSYNC_SOURCE_DIR, what,
             b == POSTGRES ? "postgres" : "redis", servers);
    CHECK_EQ(system(command), 0);
}

/* Basics: busy, holder, tokens strictly increasing across holders and re-entries. */
static void test_basics_and_tokens(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    uint64_t token = 0, previous = 0;
    CHECK_EQ(sync_distributed_lock_token(a, &token), EPERM);
    CHECK_EQ(sync_distributed_lock_token(NULL, &token), EINVAL);
    sync_distributed_lock_holder_t h;
    CHECK_EQ(sync_distributed_lock_holder(a, &h), ENOENT);
    for (int round = 0; round < 20; round++) {
        sync_distributed_lock_t *holder = round % 2 ? c : a, *other = round % 2 ? a : c;
        CHECK_EQ(sync_distributed_lock_try_lock(holder), 0);
        CHECK_EQ(sync_distributed_lock_try_lock(other), EBUSY);
        CHECK(sync_distributed_lock_is_held(holder));
        CHECK(!sync_distributed_lock_is_held(other));
        CHECK_EQ(sync_distributed_lock_token(holder, &token), 0);
        CHECK(token > previous);
        previous = token;
        CHECK_EQ(sync_distributed_lock_token(other, &token), EPERM);
        CHECK_EQ(sync_distributed_lock_holder(other, &h), 0);
        CHECK_EQ(h.pid, getpid());
        CHECK(h.flags & SYNC_DISTRIBUTED_LOCK_THIS_HOST);
        CHECK(!(h.flags & SYNC_DISTRIBUTED_LOCK_STALE));
        CHECK_EQ(sync_distributed_lock_unlock(holder), 0);
        CHECK_EQ(sync_distributed_lock_unlock(holder), EPERM);
    }
    CHECK_EQ(sync_distributed_lock_holder(a, &h), ENOENT);
    /* A bounded wait for a busy lock times out; lock_until with a past deadline tries once. */
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_lock(c, 50 * MS, MS), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() - 1, MS), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_lock_until(c, 0, 0), EINVAL);  /* poll interval <= 0 */
    CHECK_EQ(sync_distributed_lock_break(c), 0);
    CHECK(!sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), ESTALE);          /* lost: broken */
    CHECK_EQ(sync_distributed_lock_lock_until(c, -5, MS), 0);   /* any negative deadline: none */
    CHECK_EQ(sync_distributed_lock_token(c, &token), 0);
    CHECK(token > previous);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* WORKERS processes take the lock ROUNDS times each (lock_until), logging "enter <token>" and
 * "exit": one holder at a time, and the tokens strictly increase in the order of the log. */
enum { WORKERS = 4, ROUNDS = 25 };

static void test_mutual_exclusion_and_fencing(enum backend b) {
    char t[600], log_path[128];
    target(b, NULL, t, sizeof t);
    snprintf(log_path, sizeof log_path, "%s/log%d", scratch, lock_serial);
    check_exclusion_between_processes(t, log_path, WORKERS, ROUNDS, 1);
}

/* A holder SIGKILLed: the lock is taken again (file system and Redis on this host: a stale
 * holder, taken over; PostgreSQL: the server ended its session), with a larger token. */
static void test_killed_holder(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    uint64_t first, second;
    CHECK_EQ(sync_distributed_lock_token(a, &first), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    pid_t holder = spawn_holder(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EBUSY);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 30 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_token(a, &second), 0);
    CHECK(second > first + 1);  /* the dead holder's token came between */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* A holder that forked a child and then died: the child (alive, which never held the lock) does not
 * keep the holder's lock (PostgreSQL: the child closed its copy of the session's socket at the
 * fork, else the server would keep the dead holder's session and lock while the child lives). */
static void test_dead_holders_child_keeps_nothing(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(120);
        sync_distributed_lock_t *lock = make_lock(t);
        if (sync_distributed_lock_try_lock(lock) != 0) _exit(3);
        pid_t child = fork();
        if (child == 0) {
            signal(SIGALRM, SIG_DFL);  /* (never outlives the test by much) */
            alarm(60);
            for (;;) pause();
        }
        if (write(ready[1], &child, sizeof child) != sizeof child) _exit(4);
        for (;;) pause();
    }
    pid_t child = 0;
    CHECK_EQ(read(ready[0], &child, sizeof child), (long)sizeof child);
    close(ready[0]);
    close(ready[1]);
    sync_distributed_lock_t *a = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EBUSY);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(kill(child, 0), 0);  /* the holder's child lives on */
    CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 20 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    kill(child, SIGKILL);
    sync_distributed_lock_destroy(a);
}

/* A wait with no time left (timeout 0, a deadline in the past, a tiny timeout) still makes its
 * one try: a free lock is taken, a held one is ETIMEDOUT, and the object goes on working. */
static void test_no_time_left_still_tries(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    uint64_t last = 0, token = 0;
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(sync_distributed_lock_lock(a, 0, MS), 0);
        CHECK_EQ(sync_distributed_lock_token(a, &token), 0);
        CHECK(token > last);
        last = token;
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        CHECK_EQ(sync_distributed_lock_lock_until(a, 0, MS), 0);                      /* long past */
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() - MS, MS), 0);
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        CHECK_EQ(sync_distributed_lock_lock(a, 1000, MS), 0);                         /* 1 us */
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    }
    CHECK_EQ(sync_distributed_lock_try_lock(c), 0);
    CHECK_EQ(sync_distributed_lock_lock(a, 0, MS), ETIMEDOUT);                        /* held */
    CHECK_EQ(sync_distributed_lock_lock_until(a, 0, MS), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    CHECK_EQ(sync_distributed_lock_lock(a, 0, MS), 0);  /* the failed tries left a working object */
    CHECK_EQ(sync_distributed_lock_token(a, &token), 0);
    CHECK(token > last);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

static void on_alarm(int signal) { (void)signal; }

/* The interruptible wait returns EINTR at least every 50 ms (and when a signal handler ran), and
 * ETIMEDOUT at its deadline; the plain wait never returns EINTR. */
static void test_interruptible(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    pid_t holder = spawn_holder(t);
    sync_distributed_lock_t *a = make_lock(t);
    int64_t deadline = sync_monotonic_ns() + 400 * MS;
    int interruptions = 0, err;
    while ((err = sync_distributed_lock_lock_interruptible(a, deadline, 5 * MS)) == EINTR) interruptions++;
    CHECK_EQ(err, ETIMEDOUT);
    CHECK(sync_monotonic_ns() >= deadline);
    CHECK(interruptions >= 2);  /* 400 ms in slices of at most 50 ms */
    /* no deadline: EINTR, not a wait forever */
    CHECK_EQ(sync_distributed_lock_lock_interruptible(a, -1, 5 * MS), EINTR);
    /* a signal handler during the plain wait: it goes on to its deadline */
    struct sigaction action = {0};
    action.sa_handler = on_alarm;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval timer = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &timer, NULL);
    CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 300 * MS, 5 * MS), ETIMEDOUT);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_lock_interruptible(a, sync_monotonic_ns() + 30 * S, 5 * MS) == 0 ||
             sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 30 * S, 5 * MS) == 0, 1);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* An interruptible wait whose server stops answering (SIGSTOP) returns EINTR when a signal
 * handler runs, not after connect_timeout (60 s here), whether the lock is free or held; and
 * the acquire it gave up takes nothing once the server answers again (Redis: the request was
 * sent, and is cancelled; a lease left behind would hold the lock for the 60 s ttl). */
static void test_interruptible_with_server_paused(enum backend b) {
    for (int held = 0; held <= 1; held++) {
        char t[600];
        target(b, b == REDIS ? "&connect_timeout=60&ttl=60" : "&connect_timeout=60", t, sizeof t);
        pid_t holder = held ? spawn_holder(t) : 0;
        sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
        if (!held) {  /* (connected, Redis's script loaded: the interrupted request is the acquire) */
            CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
            CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        }
        control("pause", b);
        struct sigaction action = {0};
        action.sa_handler = on_alarm;  /* no SA_RESTART */
        sigaction(SIGALRM, &action, NULL);
        /* every 100 ms: whenever the call starts waiting for the server, a signal comes during the wait */
        struct itimerval timer = {{0, 100000}, {0, 100000}}, off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &timer, NULL);
        int err = sync_distributed_lock_lock_interruptible(a, sync_monotonic_ns() + 120 * S, MS);
        setitimer(ITIMER_REAL, &off, NULL);
        control("resume", b);
        if (err != EINTR) fprintf(stderr, "%s (%s): %d: %s\n", names[b], held ? "held" : "free", err, sync_distributed_lock_error_message());
        CHECK_EQ(err, EINTR);
        if (holder) {
            kill(holder, SIGKILL);
            waitpid(holder, NULL, 0);
        }
        /* 30 s only guards against a hang (an orphaned lease would hold it for 60 s) */
        CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() + 30 * S, MS), 0);
        CHECK(!sync_distributed_lock_is_held(a));
        CHECK_EQ(sync_distributed_lock_unlock(c), 0);
        CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 30 * S, MS), 0);
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        sync_distributed_lock_destroy(a);
        sync_distributed_lock_destroy(c);
    }
}

/* The server stops (SIGSTOP) while a process waits: the wait ends at its deadline with ETIMEDOUT
 * wherever in it the pause lands (a try, a stale-holder check, a pause between polls); paused
 * before the wait, the message says the server did not answer; the lock works again once it
 * resumes. */
static void test_server_paused_while_waiting(enum backend b) {
    char t[600];
    target(b, "&connect_timeout=2", t, sizeof t);
    pid_t holder = spawn_holder(t);
    sync_distributed_lock_t *a = make_lock(t);
    int64_t start = sync_monotonic_ns();
    pid_t pauser = fork();
    if (pauser == 0) {
        usleep(200000);  /* (which point of the wait it meets is left to the scheduler: each must give ETIMEDOUT) */
        control("pause", b);
        _exit(0);
    }
    int64_t deadline = start + 1500 * MS;
    int err = sync_distributed_lock_lock_until(a, deadline, 5 * MS);
    int64_t end = sync_monotonic_ns();
    wait_ok(pauser);
    control("resume", b);
    printf("%s: server paused during the wait: %d after %lld ms: %s\n", names[b], err, (long long)((end - start) / MS),
           sync_distributed_lock_error_message());
    CHECK_EQ(err, ETIMEDOUT);
    CHECK(end >= deadline);
    CHECK(end < deadline + 10 * S);  /* (a hang guard, not a measurement) */
    sync_distributed_lock_holder_t who;
    CHECK_EQ(sync_distributed_lock_holder(a, &who), 0);  /* (connected again) */
    control("pause", b);
    deadline = sync_monotonic_ns() + 1500 * MS;
    err = sync_distributed_lock_lock_until(a, deadline, 5 * MS);
    end = sync_monotonic_ns();
    char message[1024];
    snprintf(message, sizeof message, "%s", sync_distributed_lock_error_message());
    int tried = sync_distributed_lock_try_lock(a);  /* try_lock meanwhile: EIO within connect_timeout, not a hang */
    control("resume", b);  /* (before any check) */
    printf("%s: server paused before the wait: %d: %s\n", names[b], err, message);
    CHECK_EQ(err, ETIMEDOUT);
    CHECK(end >= deadline);
    CHECK(end < deadline + 10 * S);  /* (a hang guard, not a measurement) */
    CHECK(strstr(message, "did not answer") != NULL);
    CHECK(tried == EIO || tried == ECONNREFUSED);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 30 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* The server restarts while the lock is held: the holder learns it lost the lock (unlock ESTALE:
 * PostgreSQL's session ended, Redis forgot the key), and the object goes on working. */
static void test_server_restarted_while_held(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    uint64_t before, after;
    CHECK_EQ(sync_distributed_lock_token(a, &before), 0);
    control("restart", b);
    CHECK(!sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() + 30 * S, MS), 0);  /* free again */
    CHECK_EQ(sync_distributed_lock_token(c, &after), 0);
    CHECK(after > before);  /* tokens survive the restart */
    int err = sync_distributed_lock_unlock(a);
    printf("%s: unlock after a restart: %d: %s\n", names[b], err, sync_distributed_lock_error_message());
    CHECK(err == ESTALE || err == EBUSY);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* Redis: a holder stopped longer than its lease loses the lock to another, and learns it at
 * unlock (EBUSY); a live holder keeps it however long it holds it (renewal). */
static void test_redis_lease(void) {
    char t[600];
    target(REDIS, "&ttl=0.3", t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    for (int i = 0; i < 12; i++) {  /* 1.2 s: four leases long */
        usleep(100000);
        CHECK_EQ(sync_distributed_lock_try_lock(c), EBUSY);
    }
    CHECK(sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);

    int report[2];
    CHECK_EQ(pipe(report), 0);
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        alarm(60);
        sync_distributed_lock_t *mine = make_lock(t);
        report_try_lock(ready[1], mine);
        raise(SIGSTOP);                                  /* longer than the lease */
        int code = sync_distributed_lock_unlock(mine);   /* after SIGCONT */
        if (write(report[1], &code, sizeof code) != sizeof code) _exit(4);
        _exit(0);
    }
    expect_holding(ready[0]);
    int status;
    CHECK_EQ(waitpid(holder, &status, WUNTRACED), holder);
    CHECK(WIFSTOPPED(status));
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() + 30 * S, MS), 0);  /* the lease ran out */
    kill(holder, SIGCONT);
    int code = 0;
    CHECK_EQ(read(report[0], &code, sizeof code), (long)sizeof code);
    CHECK_EQ(code, EBUSY);  /* lost, and held by another now */
    wait_ok(holder);
    CHECK(sync_distributed_lock_is_held(c));
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* Redis: each server's leases are renewed by a thread of their own, so a stopped (SIGSTOP) server
 * delays no other server's renewals: a live holder on a healthy server keeps its lock while the
 * stopped server's renewals wait for it. */
/* Redis: an acquire that gives up (its timeout) while the server does not answer leaves no lease
 * behind when the server answers again: its request is cancelled, so the lock is free. */
static void test_redis_abandoned_acquire(void) {
    char t[600];
    target(REDIS, "&ttl=60", t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);  /* (the script is loaded: the next acquire is one request) */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    control("pause", REDIS);
    CHECK_EQ(sync_distributed_lock_lock(a, 100 * MS, MS), ETIMEDOUT);  /* sent, never answered */
    control("resume", REDIS);
    /* An orphaned lease would hold it for the 60 s ttl: 30 s only guards against a hang. */
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() + 30 * S, MS), 0);
    CHECK(!sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* Whether the key exists on the test's Redis server (asked with redis-cli). */
static int redis_key_exists(const char *key) {
    char command[900];
    snprintf(command, sizeof command, "redis-cli -p %s -a secret --no-auth-warning EXISTS '%s' | grep -qx 1",
             strrchr(base[REDIS], ':') + 1, key);
    return system(command) == 0;
}

/* Redis: the keys are libsync:lock:NAME and libsync:fence:NAME, so no lock's name is another
 * lock's counter: locks N and N:fence are two locks, each free when released. */
static void test_redis_keys(void) {
    char name[64], t[700], fence_name[80], u[700], key[120];
    snprintf(name, sizeof name, "test%d-keys", (int)getpid());
    snprintf(fence_name, sizeof fence_name, "%s:fence", name);
    snprintf(t, sizeof t, "%s?lock=%s", base[REDIS], name);
    snprintf(u, sizeof u, "%s?lock=%s", base[REDIS], fence_name);
    sync_distributed_lock_t *n = make_lock(t), *f = make_lock(u);
    CHECK_EQ(sync_distributed_lock_try_lock(f), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(n), 0);
    CHECK(sync_distributed_lock_is_held(f));
    snprintf(key, sizeof key, "libsync:lock:%s", name);
    CHECK(redis_key_exists(key));
    snprintf(key, sizeof key, "libsync:fence:%s", name);
    CHECK(redis_key_exists(key));
    CHECK_EQ(sync_distributed_lock_unlock(n), 0);
    CHECK_EQ(sync_distributed_lock_unlock(f), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(n), 0);
    CHECK_EQ(sync_distributed_lock_unlock(n), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(f), 0);  /* N's counter is not in its way */
    CHECK_EQ(sync_distributed_lock_unlock(f), 0);
    sync_distributed_lock_destroy(n);
    sync_distributed_lock_destroy(f);
}

/* A plain connection to the test's Redis server, to watch its keys from outside. */
static int redis_port(void) { return atoi(strrchr(base[REDIS], ':') + 1); }

static int redis_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)redis_port())};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&address, sizeof address), 0);
    const char *auth = "*2\r\n$4\r\nAUTH\r\n$6\r\nsecret\r\n";
    CHECK_EQ(write(fd, auth, strlen(auth)), (long)strlen(auth));
    char reply[8] = {0};
    CHECK_EQ(read(fd, reply, 5), 5);
    CHECK(strncmp(reply, "+OK\r\n", 5) == 0);
    return fd;
}

/* `command` KEY's integer reply (PTTL, EXISTS). */
static long long redis_integer(int fd, const char *command, const char *key) {
    char request[400], reply[64];
    int n = snprintf(request, sizeof request, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(command), command, strlen(key), key);
    CHECK_EQ(write(fd, request, (size_t)n), (long)n);
    size_t got = 0;
    while (got < 3 || reply[got - 1] != '\n') {
        CHECK(got < sizeof reply - 1);
        CHECK_EQ(read(fd, reply + got, 1), 1);
        got++;
    }
    reply[got] = 0;
    CHECK_EQ(reply[0], ':');
    return atoll(reply + 1);
}

static int64_t since(int64_t start) { return sync_monotonic_ns() - start; }

/* SIGSTOPs the holder `pid` when its lease has the least time left that it ever has while held:
 * watching the key's time to live over two renewals (its jumps up), then stopping the holder
 * once it is within 1% of ttl of the lowest seen, just before the next renewal (or after 20 s
 * without that moment, anyway). */
static void stop_just_before_a_renewal(pid_t pid, int fd, const char *key, long long ttl_ms) {
    long long lowest = -1, previous = -1, left;
    for (int jumps = 0; jumps < 2; previous = left) {
        left = redis_integer(fd, "PTTL", key);
        CHECK(left > 0);
        if (previous >= 0 && left > previous + 10) jumps++;
        if (lowest < 0 || left < lowest) lowest = left;
        usleep(2000);
    }
    int64_t start = sync_monotonic_ns();
    while (redis_integer(fd, "PTTL", key) > lowest + ttl_ms / 100 && since(start) < 20 * S) usleep(2000);
    CHECK_EQ(kill(pid, SIGSTOP), 0);
}

/* Redis, the promise: a holder stopped for less than ttl keeps the lock, even one stopped just
 * before a renewal was due. Stopped there for 0.75 ttl: nobody else acquires it meanwhile, and
 * its unlock succeeds afterwards. */
static void test_redis_pause_below_ttl(void) {
    char t[600], key[200];
    target(REDIS, "&ttl=4", t, sizeof t);
    snprintf(key, sizeof key, "libsync:lock:%s", strstr(t, "lock=") + 5);
    *strchr(key, '&') = 0;
    int ready[2], go[2];
    CHECK_EQ(pipe(ready), 0);
    CHECK_EQ(pipe(go), 0);
    pid_t holder = fork();
    if (holder == 0) {
        alarm(120);
        sync_distributed_lock_t *mine = make_lock(t);
        report_try_lock(ready[1], mine);
        char go_byte;
        if (read(go[0], &go_byte, 1) != 1) _exit(4);    /* (after its pause) */
        int code = sync_distributed_lock_unlock(mine);
        if (write(ready[1], &code, sizeof code) != sizeof code) _exit(5);
        _exit(0);
    }
    expect_holding(ready[0]);
    sync_distributed_lock_t *other = make_lock(t);
    int fd = redis_connect();
    stop_just_before_a_renewal(holder, fd, key, 4000);
    int64_t stopped = sync_monotonic_ns();
    int taken = 0;
    while (!taken && since(stopped) < 3 * S) {  /* 0.75 ttl */
        taken = sync_distributed_lock_try_lock(other) == 0;
        usleep(10000);
    }
    kill(holder, SIGCONT);
    CHECK(!taken);
    CHECK_EQ(write(go[1], "y", 1), 1);
    int code = -1;
    CHECK_EQ(read(ready[0], &code, sizeof code), (long)sizeof code);
    CHECK_EQ(code, 0);  /* still its lock */
    wait_ok(holder);
    close(fd);
    for (int i = 0; i < 2; i++) { close(ready[i]); close(go[i]); }
    sync_distributed_lock_destroy(other);
}

/* Redis: a holder that dies leaves its lease for ttl to 4/3 ttl (on another host: on this host a
 * blocking acquire takes a dead holder's lock over at once, which try_lock never does): still
 * held 0.5 ttl after a SIGKILL, free 2 ttl after it. */
static void test_redis_killed_holder_bound(void) {
    char t[600];
    target(REDIS, "&ttl=2", t, sizeof t);
    pid_t holder = spawn_holder(t);
    sync_distributed_lock_t *other = make_lock(t);
    usleep(1000000);  /* (renewed meanwhile) */
    CHECK_EQ(kill(holder, SIGKILL), 0);
    int64_t killed = sync_monotonic_ns();
    CHECK_EQ(waitpid(holder, NULL, 0), holder);
    if (since(killed) < 1 * S) usleep((useconds_t)((1 * S - since(killed)) / 1000));
    CHECK_EQ(sync_distributed_lock_try_lock(other), EBUSY);
    if (since(killed) < 4 * S) usleep((useconds_t)((4 * S - since(killed)) / 1000));
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    sync_distributed_lock_destroy(other);
}

/* Whether a request of process `pid` waits, unread, in the receive queue of the Redis server
 * (from /proc: the server-side socket whose peer is one of `pid`'s sockets). */
static int request_queued(pid_t pid) {
    unsigned long inodes[64];
    int count = 0;
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *fds = opendir(path);
    CHECK(fds != NULL);
    for (struct dirent *e; (e = readdir(fds)) != NULL && count < 64;) {
        char item[400];
        snprintf(item, sizeof item, "%s/%s", path, e->d_name);
        ssize_t n = readlink(item, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (sscanf(link, "socket:[%lu]", &inodes[count]) == 1) count++;
    }
    closedir(fds);
    unsigned peers[64], local[512], remote[512], queued[512];
    int npeers = 0, rows = 0, port = redis_port();
    FILE *tcp = fopen("/proc/net/tcp", "r");
    CHECK(tcp != NULL);
    char line[512];
    while (fgets(line, sizeof line, tcp) && rows < 512) {
        unsigned l, r, q;
        unsigned long inode;
        if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %*x:%x %*x:%*x %*x %*u %*u %lu", &l, &r, &q, &inode) != 4) continue;
        for (int i = 0; i < count; i++)
            if (inodes[i] == inode && (int)r == port && npeers < 64) peers[npeers++] = l;
        local[rows] = l, remote[rows] = r, queued[rows] = q, rows++;
    }
    fclose(tcp);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < npeers; j++)
            if ((int)local[i] == port && remote[i] == peers[j] && queued[i] > 0) return 1;
    return 0;
}

/* Redis: a client stopped right after sending its acquire, whose lease the server grants and
 * then expires, and another client takes, before the first reads the answer: the first must not
 * report the lock as acquired (its try says EBUSY), and the other still holds it. */
static void test_redis_late_answer_refused(void) {
    char t[600], key[200];
    target(REDIS, "&ttl=1&connect_timeout=60", t, sizeof t);
    snprintf(key, sizeof key, "libsync:lock:%s", strstr(t, "lock=") + 5);
    *strchr(key, '&') = 0;
    int ready[2], go[2];
    CHECK_EQ(pipe(ready), 0);
    CHECK_EQ(pipe(go), 0);
    pid_t client = fork();
    if (client == 0) {
        alarm(120);
        sync_distributed_lock_t *mine = make_lock(t);
        int code = sync_distributed_lock_try_lock(mine);  /* (connected, script loaded: the try below is one request) */
        if (code == 0) code = sync_distributed_lock_unlock(mine);
        if (write(ready[1], &code, sizeof code) != sizeof code) _exit(3);
        char byte;
        if (read(go[0], &byte, 1) != 1) _exit(4);
        code = sync_distributed_lock_try_lock(mine);
        if (write(ready[1], &code, sizeof code) != sizeof code) _exit(5);
        _exit(0);
    }
    int code = -1;
    CHECK_EQ(read(ready[0], &code, sizeof code), (long)sizeof code);
    CHECK_EQ(code, 0);
    sync_distributed_lock_t *other = make_lock(t);
    int fd = redis_connect();
    control("pause", REDIS);
    CHECK_EQ(write(go[1], "g", 1), 1);
    int64_t start = sync_monotonic_ns();
    while (!request_queued(client)) {
        CHECK(since(start) < 60 * S);  /* (a hang guard) */
        usleep(1000);
    }
    CHECK_EQ(kill(client, SIGSTOP), 0);  /* sent, its answer not read */
    int status;
    CHECK_EQ(waitpid(client, &status, WUNTRACED), client);
    CHECK(WIFSTOPPED(status));
    control("resume", REDIS);
    while (redis_integer(fd, "EXISTS", key) == 0) { CHECK(since(start) < 60 * S); usleep(1000); }  /* granted... */
    while (redis_integer(fd, "EXISTS", key) == 1) { CHECK(since(start) < 60 * S); usleep(10000); }  /* ...and expired */
    CHECK_EQ(sync_distributed_lock_try_lock(other), 0);
    kill(client, SIGCONT);
    CHECK_EQ(read(ready[0], &code, sizeof code), (long)sizeof code);
    CHECK_EQ(code, EBUSY);
    wait_ok(client);
    CHECK(sync_distributed_lock_is_held(other));
    CHECK_EQ(sync_distributed_lock_unlock(other), 0);
    close(fd);
    for (int i = 0; i < 2; i++) { close(ready[i]); close(go[i]); }
    sync_distributed_lock_destroy(other);
}

static char async_postgres[64];  /* a PostgreSQL server's directory, with synchronous_commit=off */

static void stop_async_postgres(void) {
    char command[400];
    snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s; rm -rf %s", LIBSYNC_SOURCE_DIR, async_postgres, async_postgres);
    if (system(command) != 0) fprintf(stderr, "stopping the PostgreSQL server with synchronous_commit=off failed\n");
}

/* PostgreSQL: a server that commits asynchronously (synchronous_commit=off, its WAL writer
 * waiting 10 s between flushes) and crashes (pg_ctl stop -m immediate) right after handing out
 * tokens: every token issued after the crash is above every token issued before it. */
static void test_postgres_tokens_survive_crashes(void) {
    char command[900], url[512], t[600];
    snprintf(async_postgres, sizeof async_postgres, "/tmp/libsync-pg-async-XXXXXX");
    CHECK(mkdtemp(async_postgres) != NULL);
    snprintf(command, sizeof command, "%s/scripts/servers.sh start-postgres %s", LIBSYNC_SOURCE_DIR, async_postgres);
    CHECK_EQ(system(command), 0);
    atexit(stop_async_postgres);  /* (also when a check fails) */
    read_url(async_postgres, "postgres", url, sizeof url);
    snprintf(command, sizeof command, "psql -q -v ON_ERROR_STOP=1 '%s' -c 'ALTER SYSTEM SET synchronous_commit = off' "
             "-c \"ALTER SYSTEM SET wal_writer_delay = '10s'\" && %s/scripts/servers.sh restart postgres %s",
             url, LIBSYNC_SOURCE_DIR, async_postgres);
    CHECK_EQ(system(command), 0);
    snprintf(t, sizeof t, "%s?lock=crash", url);
    sync_distributed_lock_t *lock = make_lock(t);
    uint64_t issued = 0, token = 0;
    snprintf(command, sizeof command, "%s/scripts/servers.sh restart postgres %s", LIBSYNC_SOURCE_DIR, async_postgres);
    for (int crash = 0; crash <= 4; crash++) {
        for (int i = 0; i < (crash < 4 ? 40 : 1); i++) {  /* (a sequence logs ahead every 32 values) */
            CHECK_EQ(sync_distributed_lock_lock(lock, 30 * S, 10 * MS), 0);
            CHECK_EQ(sync_distributed_lock_token(lock, &token), 0);
            if (token <= issued) fprintf(stderr, "after crash %d: token %llu, issued before %llu\n", crash, (unsigned long long)token, (unsigned long long)issued);
            CHECK(token > issued);
            issued = token;
            CHECK_EQ(sync_distributed_lock_unlock(lock), 0);
        }
        if (crash < 4) CHECK_EQ(system(command), 0);  /* pg_ctl stop -m immediate; start */
    }
    sync_distributed_lock_destroy(lock);
}

static char second[128];  /* a second Redis server's directory */

static void stop_second(void) {
    char command[400];
    snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s; rm -rf %s", LIBSYNC_SOURCE_DIR, second, second);
    if (system(command) != 0) fprintf(stderr, "stopping the second Redis server failed\n");
}

static void test_redis_renewal_per_server(void) {
    char command[700], url[512], x[600], y[700];
    snprintf(second, sizeof second, "/tmp/libsync-redis2-XXXXXX");
    CHECK(mkdtemp(second) != NULL);
    snprintf(command, sizeof command, "%s/scripts/servers.sh start-redis %s", LIBSYNC_SOURCE_DIR, second);
    CHECK_EQ(system(command), 0);
    atexit(stop_second);  /* (also when a check fails) */
    read_url(second, "redis", url, sizeof url);
    target(REDIS, "&ttl=9", x, sizeof x);               /* renewed every 3 s, on the server stopped below */
    snprintf(y, sizeof y, "%s?lock=test%d-renewal&ttl=1", url, (int)getpid());  /* every 1/3 s */
    sync_distributed_lock_t *a = make_lock(x), *held = make_lock(y), *other = make_lock(y);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(held), 0);
    control("pause", REDIS);
    for (int i = 0; i < 50; i++) {  /* 5 s: five leases of y, and a renewal of x that waits 3 s */
        usleep(100000);
        CHECK_EQ(sync_distributed_lock_try_lock(other), EBUSY);
    }
    CHECK(sync_distributed_lock_is_held(held));
    control("resume", REDIS);
    CHECK_EQ(sync_distributed_lock_unlock(held), 0);
    int code = sync_distributed_lock_unlock(a);
    CHECK(code == 0 || code == ESTALE);  /* (x's lease may have run out while its server was stopped) */
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(held);
    sync_distributed_lock_destroy(other);
}

/* Bad URLs, a wrong password, nothing listening, a stopped server: a clear error at creation. */
static void test_bad_targets(enum backend b) {
    char t[700];
    const char *scheme = b == POSTGRES ? "postgresql" : "redis";
    snprintf(t, sizeof t, "%s://127.0.0.1:5432/x", scheme);                  /* no lock name */
    CHECK_EQ(create_error(t), EINVAL);
    CHECK(strstr(sync_distributed_lock_error_message(), "lock=NAME") != NULL);
    snprintf(t, sizeof t, "%s://127.0.0.1:99999/?lock=x", scheme);           /* a bad port */
    CHECK_EQ(create_error(t), EINVAL);
    CHECK_EQ(create_error("ftp://host/x"), EINVAL);                          /* an unknown scheme */
    if (b == POSTGRES) {  /* options libpq rejects before connecting: its message, at once */
        snprintf(t, sizeof t, "%s?lock=x&connect_timeout=2&sslmode=bogus", base[b]);
        CHECK_EQ(create_error(t), EINVAL);
        CHECK(strstr(sync_distributed_lock_error_message(), "sslmode") != NULL);
        snprintf(t, sizeof t, "%s?lock=x&connect_timeout=2&foo=bar", base[b]);
        CHECK_EQ(create_error(t), EINVAL);
        CHECK(strstr(sync_distributed_lock_error_message(), "foo") != NULL);
        snprintf(t, sizeof t, "%s?lock=x&connect_timeout=2&host=/nonexistent", base[b]);
        CHECK_EQ(create_error(t), ECONNREFUSED);
        CHECK(strstr(sync_distributed_lock_error_message(), "no answer") == NULL);
    }
    if (b == REDIS) {
        snprintf(t, sizeof t, "redis://127.0.0.1/?lock=x&ttl=0");
        CHECK_EQ(create_error(t), EINVAL);
        snprintf(t, sizeof t, "redis://127.0.0.1/?lock=x&color=red");
        CHECK_EQ(create_error(t), EINVAL);
        /* a NUL byte in the lock name or the password: refused (never a name or key cut short) */
        snprintf(t, sizeof t, "%s?lock=job%%00ABCDEFGHIJKLMNOP", base[b]);
        CHECK_EQ(create_error(t), EINVAL);
        CHECK(strstr(sync_distributed_lock_error_message(), "NUL") != NULL);
        char nul[600];
        snprintf(nul, sizeof nul, "%s", base[b]);
        char *at = strstr(nul, "secret@");
        CHECK(at != NULL);
        snprintf(t, sizeof t, "%.*ssec%%00ret%s?lock=x", (int)(at - nul), nul, at + 6);
        CHECK_EQ(create_error(t), EINVAL);
        CHECK(strstr(sync_distributed_lock_error_message(), "password") != NULL);
    }
    /* a wrong password */
    char wrong[600];
    snprintf(wrong, sizeof wrong, "%s", base[b]);
    char *secret = strstr(wrong, "secret");
    CHECK(secret != NULL);
    memcpy(secret, "wrong!", 6);
    snprintf(t, sizeof t, "%s?lock=x", wrong);
    CHECK_EQ(create_error(t), EACCES);
    printf("%s: wrong password: %s\n", names[b], sync_distributed_lock_error_message());
    CHECK(strstr(sync_distributed_lock_error_message(), "secret") == NULL);  /* never shown */
    if (b == REDIS) {  /* no password for a server that wants one: refused at creation too */
        char *login = strstr(base[b], ":secret@");
        CHECK(login != NULL);
        snprintf(t, sizeof t, "%.*s%s?lock=x", (int)(login - base[b]), base[b], login + 8);
        CHECK_EQ(create_error(t), EACCES);
        printf("%s: no password: %s\n", names[b], sync_distributed_lock_error_message());
    }
    /* nothing listens there (a port just released) */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    CHECK_EQ(bind(s, (struct sockaddr *)&address, sizeof address), 0);
    CHECK_EQ(getsockname(s, (struct sockaddr *)&address, &length), 0);
    close(s);
    snprintf(t, sizeof t, "%s://%s127.0.0.1:%d/%s?lock=x", scheme, b == POSTGRES ? "postgres:secret@" : "",
             ntohs(address.sin_port), b == POSTGRES ? "postgres" : "");
    CHECK_EQ(create_error(t), ECONNREFUSED);
    printf("%s: nothing listening: %s\n", names[b], sync_distributed_lock_error_message());
    /* the server stopped: connecting ends at connect_timeout */
    control("pause", b);
    snprintf(t, sizeof t, "%s?lock=x&connect_timeout=1", base[b]);
    int64_t start = sync_monotonic_ns();
    int err = create_error(t);
    int64_t took = sync_monotonic_ns() - start;
    control("resume", b);
    printf("%s: stopped server: %d after %lld ms: %s\n", names[b], err, (long long)(took / MS), sync_distributed_lock_error_message());
    CHECK(err == ECONNREFUSED || err == EIO);
    CHECK(took < 10 * S);  /* (a hang guard) */
}

/* The client libraries are loaded only when a lock of their backend is made, and a missing one is
 * ELIBACC with a message naming the Debian package (in children of a process that has loaded
 * neither: the loading is once per process). */
static int maps_contain(const char *name) {
    char command[128];
    snprintf(command, sizeof command, "grep -q '%s' /proc/%d/maps", name, (int)getpid());
    return system(command) == 0;
}

static void test_client_libraries(void) {
    pid_t child = fork();
    if (child == 0) {
        char t[600];
        target(FILES, NULL, t, sizeof t);
        sync_distributed_lock_t *lock = make_lock(t);
        int ok = !maps_contain("libpq") && !maps_contain("libhiredis");
        sync_distributed_lock_destroy(lock);
        target(POSTGRES, NULL, t, sizeof t);
        lock = make_lock(t);
        ok = ok && maps_contain("libpq.so.5") && !maps_contain("libhiredis");
        sync_distributed_lock_destroy(lock);
        target(REDIS, NULL, t, sizeof t);
        lock = make_lock(t);
        ok = ok && maps_contain("libhiredis");
        sync_distributed_lock_destroy(lock);
        if (!ok) fprintf(stderr, "the client libraries were loaded before their first use, or not at it\n");
        _exit(ok ? 0 : 1);
    }
    wait_ok(child);
    child = fork();
    if (child == 0) {
        setenv("LIBSYNC_HIREDIS", "/nonexistent/libhiredis.so.0.14", 1);
        setenv("LIBSYNC_LIBPQ", "/nonexistent/libpq.so.5", 1);
        char t[600];
        target(REDIS, NULL, t, sizeof t);
        int ok = create_error(t) == ELIBACC && strstr(sync_distributed_lock_error_message(), "apt install libhiredis0.14");
        printf("missing hiredis: %s\n", sync_distributed_lock_error_message());
        target(POSTGRES, NULL, t, sizeof t);
        ok = ok && create_error(t) == ELIBACC && strstr(sync_distributed_lock_error_message(), "apt install libpq5");
        printf("missing libpq: %s\n", sync_distributed_lock_error_message());
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    wait_ok(child);
}

/* `from` in `text` replaced by `to` (once), into out. */
static void replaced(const char *text, const char *from, const char *to, char *out, size_t size) {
    const char *at = strstr(text, from);
    CHECK(at != NULL);
    snprintf(out, size, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
}

/* A thread that holds a server lock through one object and waits for it with no timeout through
 * another gets EDEADLK however the URLs spell the lock (scheme alias, extra parameters, localhost
 * for 127.0.0.1, the default database): the lock's identity is compared, not the text. Another
 * database of the same server is another lock. (In a child with an alarm: a hang fails.) */
static void test_self_deadlock_across_spellings(enum backend b) {
    char t[600], same[4][700];
    int n = 0;
    snprintf(t, sizeof t, "%s%slock=spelling%d", base[b], strchr(base[b], '?') ? "&" : "?", (int)getpid());
    if (b == POSTGRES) replaced(t, "postgresql://", "postgres://", same[n++], sizeof same[0]);
    snprintf(same[n++], sizeof same[0], "%s&connect_timeout=7", t);
    replaced(t, "127.0.0.1", "localhost", same[n++], sizeof same[0]);
    if (b == REDIS) replaced(t, "?lock", "/0?lock", same[n++], sizeof same[0]);
    pid_t child = fork();
    if (child == 0) {
        alarm(30);
        sync_distributed_lock_t *a = make_lock(t);
        CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
        for (int i = 0; i < n; i++) {
            sync_distributed_lock_t *other = make_lock(same[i]);
            int err = sync_distributed_lock_lock(other, -1, MS);
            if (err != EDEADLK) fprintf(stderr, "%s: %s: %d\n", names[b], same[i], err);
            CHECK_EQ(err, EDEADLK);
            CHECK_EQ(sync_distributed_lock_lock(other, 0, MS), ETIMEDOUT);  /* it is the same lock */
            sync_distributed_lock_destroy(other);
        }
        if (b == REDIS) {
            char elsewhere[700];
            replaced(t, "?lock", "/1?lock", elsewhere, sizeof elsewhere);
            sync_distributed_lock_t *other = make_lock(elsewhere);
            CHECK_EQ(sync_distributed_lock_lock(other, -1, MS), 0);
            CHECK_EQ(sync_distributed_lock_unlock(other), 0);
            sync_distributed_lock_destroy(other);
        }
        CHECK_EQ(sync_distributed_lock_unlock(a), 0);
        sync_distributed_lock_destroy(a);
        _exit(0);
    }
    wait_ok(child);
}

/* A forked child never holds its parent's server lock, and takes it over its own connection. */
static void test_fork(enum backend b) {
    char t[600];
    target(b, NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(60);
        int ok = sync_distributed_lock_unlock(a) == EPERM && !sync_distributed_lock_is_held(a)
                 && sync_distributed_lock_try_lock(a) == EBUSY;
        sync_distributed_lock_destroy(a);
        _exit(ok ? 0 : 1);
    }
    wait_ok(child);
    CHECK(sync_distributed_lock_is_held(a));  /* the child's exit touched nothing of ours */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    child = fork();
    if (child == 0) {
        alarm(60);
        int ok = sync_distributed_lock_try_lock(a) == 0 && sync_distributed_lock_unlock(a) == 0;
        _exit(ok ? 0 : 1);
    }
    wait_ok(child);
    sync_distributed_lock_destroy(a);
}

static void stop_servers(void) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh stop %s; rm -rf %s", LIBSYNC_SOURCE_DIR, servers, servers);
    if (system(command) != 0) fprintf(stderr, "stopping the servers failed\n");
}

static void read_url(const char *directory, const char *name, char *out, size_t size) {
    char file[400];
    snprintf(file, sizeof file, "%s/%s.url", directory, name);
    FILE *f = fopen(file, "r");
    CHECK(f != NULL);
    CHECK(fgets(out, (int)size, f) != NULL);
    out[strcspn(out, "\n")] = 0;
    fclose(f);
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/libsync-backends-XXXXXX");
    CHECK(mkdtemp(scratch) != NULL);
    int have_servers = 1;
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    if (given) {
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-servers-XXXXXX");
        CHECK(mkdtemp(servers) != NULL);
        char command[600];
        snprintf(command, sizeof command, "%s/scripts/servers.sh start %s", LIBSYNC_SOURCE_DIR, servers);
        int status = system(command);
        if (status != 0) {
            have_servers = 0;
            fprintf(stderr, "\n!!!!!! SKIPPING the PostgreSQL and Redis backends: their servers could not be "
                            "installed or started (scripts/servers.sh: status %d) !!!!!!\n\n", status);
        } else {
            atexit(stop_servers);
        }
    }
    if (have_servers) {
        read_url(servers, "postgres", base[POSTGRES], sizeof base[POSTGRES]);
        read_url(servers, "redis", base[REDIS], sizeof base[REDIS]);
    }
    if (have_servers) test_client_libraries();  /* first: this process has loaded neither yet */
    for (int b = FILES; b <= (have_servers ? REDIS : FILES); b++) {
        printf("== %s\n", names[b]);
        fflush(stdout);
        test_basics_and_tokens(b);
        test_mutual_exclusion_and_fencing(b);
        test_killed_holder(b);
        test_dead_holders_child_keeps_nothing(b);
        test_no_time_left_still_tries(b);
        test_interruptible(b);
        test_fork(b);
        if (b != FILES) {
            test_bad_targets(b);
            test_self_deadlock_across_spellings(b);
            test_server_paused_while_waiting(b);
            test_interruptible_with_server_paused(b);
            test_server_restarted_while_held(b);
        }
    }
    if (have_servers) {
        test_redis_lease();
        test_redis_abandoned_acquire();
        test_redis_keys();
        test_redis_renewal_per_server();
        test_redis_pause_below_ttl();
        test_redis_killed_holder_bound();
        test_redis_late_answer_refused();
        test_postgres_tokens_survive_crashes();
    }
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", scratch);
    CHECK_EQ(system(command), 0);
    if (!have_servers) {
        printf("test_distributed_lock_backends: the server backends were SKIPPED\n");
        return 77;
    }
    DONE();
}
