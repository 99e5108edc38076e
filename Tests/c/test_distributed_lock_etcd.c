/* The distributed lock's etcd backend from C, against a private etcd (scripts/servers.sh
 * start-etcd, auth on; or LIBSYNC_TEST_SERVERS names a directory with a running one's etcd.url):
 * acquire and release, contention between processes with fencing tokens in order, timed and try
 * acquires, a waiter that watches instead of polling (counted on the server), a SIGKILLed holder
 * (on this host: stale, taken over; and its lease expiring by itself), loss notification when the
 * lease ends (a holder stopped past it) or the hold is broken, interruptible waits, an etcd
 * restart while held, a stopped etcd, bad URLs, a wrong or missing password, nothing listening.
 * The bounds only guard against a hang. */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "check.h"
#include "distributed_support.h"

#ifndef LIBSYNC_SOURCE_DIR
#error "LIBSYNC_SOURCE_DIR: the source tree (for scripts/servers.sh)"
#endif

static char servers[256];  /* the servers' directory */
static char base[512];     /* etcd://root:secret@127.0.0.1:PORT */
static char scratch[64];
static int lock_serial;
static const int64_t S = 1000000000LL, MS = 1000000LL;

static void target(const char *extra, char *out, size_t size) {
    snprintf(out, size, "%s?lock=ctest%d-%d%s", base, (int)getpid(), ++lock_serial, extra ? extra : "");
}

static void control(const char *what) {
    char command[600];
    snprintf(command, sizeof command, "%s/scripts/servers.sh %s etcd %s", LIBSYNC_SOURCE_DIR, what, servers);
    CHECK_EQ(system(command), 0);
}

static int port(void) { return atoi(strrchr(base, ':') + 1); }

/* Basics: busy, holder, tokens strictly increasing, a timed wait that times out, try with no
 * time left, break. */
static void test_basics_and_tokens(void) {
    char t[600];
    target(NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    uint64_t token = 0, previous = 0;
    sync_distributed_lock_holder_t h;
    CHECK_EQ(sync_distributed_lock_token(a, &token), EPERM);
    CHECK_EQ(sync_distributed_lock_holder(a, &h), ENOENT);
    CHECK(strstr(sync_distributed_lock_path(a), "secret") == NULL);
    for (int round = 0; round < 20; round++) {
        sync_distributed_lock_t *holder = round % 2 ? c : a, *other = round % 2 ? a : c;
        CHECK_EQ(round % 3 ? sync_distributed_lock_try_lock(holder) : sync_distributed_lock_lock(holder, 0, MS), 0);
        CHECK_EQ(sync_distributed_lock_try_lock(other), EBUSY);
        CHECK(sync_distributed_lock_is_held(holder));
        CHECK(!sync_distributed_lock_is_held(other));
        CHECK_EQ(sync_distributed_lock_token(holder, &token), 0);
        CHECK(token > previous);
        previous = token;
        CHECK_EQ(sync_distributed_lock_holder(other, &h), 0);
        CHECK_EQ(h.pid, getpid());
        CHECK(h.flags & SYNC_DISTRIBUTED_LOCK_THIS_HOST);
        CHECK(!(h.flags & SYNC_DISTRIBUTED_LOCK_STALE));
        CHECK_EQ(sync_distributed_lock_unlock(holder), 0);
        CHECK_EQ(sync_distributed_lock_unlock(holder), EPERM);
    }
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_lock(c, 50 * MS, MS), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() - 1, MS), ETIMEDOUT);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    /* the timed-out waits left nothing queued: a try takes the free lock */
    CHECK_EQ(sync_distributed_lock_try_lock(c), 0);
    CHECK_EQ(sync_distributed_lock_break(a), 0);
    CHECK(!sync_distributed_lock_is_held(c));
    CHECK_EQ(sync_distributed_lock_unlock(c), ESTALE);          /* lost: broken */
    CHECK_EQ(sync_distributed_lock_lock_until(c, -1, MS), 0);
    CHECK_EQ(sync_distributed_lock_token(c, &token), 0);
    CHECK(token > previous);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* WORKERS processes take the lock ROUNDS times each (blocking waits: the watch), logging "E
 * <token>" and "X": one holder at a time, and the tokens strictly increase in the log's order. */
enum { WORKERS = 4, ROUNDS = 25 };

static void test_mutual_exclusion_and_fencing(void) {
    char t[600], log_path[128];
    target(NULL, t, sizeof t);
    snprintf(log_path, sizeof log_path, "%s/log%d", scratch, lock_serial);
    check_exclusion_between_processes(t, log_path, WORKERS, ROUNDS, 0);
}

/* The server's count of KV requests (Range, Txn, Put, DeleteRange) started so far, from its
 * /metrics page (a plain HTTP GET). */
static long long kv_requests(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port()),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(s, (struct sockaddr *)&address, sizeof address), 0);
    const char *request = "GET /metrics HTTP/1.0\r\n\r\n";
    CHECK_EQ(write(s, request, strlen(request)), (long)strlen(request));
    static char page[1 << 20];
    size_t have = 0;
    ssize_t n;
    while ((n = read(s, page + have, sizeof page - 1 - have)) > 0) have += (size_t)n;
    close(s);
    page[have] = 0;
    long long total = 0;
    for (char *line = strtok(page, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "grpc_server_started_total{", 26) != 0 || !strstr(line, "etcdserverpb.KV")) continue;
        total += atoll(strrchr(line, ' ') + 1);
    }
    CHECK(total > 0);
    return total;
}

/* A waiter watches the key before its own instead of polling: while the lock stays held, a wait
 * of a second makes a handful of requests (queue, look, withdraw; a keep-alive's check), where
 * polling with a 1 ms backoff would make dozens. */
static void test_waiting_does_not_poll(void) {
    char t[600];
    target(NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    long long before = kv_requests();
    CHECK_EQ(sync_distributed_lock_lock(c, 1 * S, MS), ETIMEDOUT);
    long long made = kv_requests() - before;
    printf("a 1 s wait made %lld KV requests\n", made);
    CHECK(made <= 8);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* A holder SIGKILLed on this host: a blocking acquire sees it stale and takes the lock at once,
 * with a larger token. */
static void test_killed_holder_stale(void) {
    char t[600];
    target(NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    uint64_t first, second;
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_token(a, &first), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    pid_t holder = spawn_holder(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EBUSY);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    sync_distributed_lock_holder_t h;
    CHECK_EQ(sync_distributed_lock_holder(a, &h), 0);
    CHECK(h.flags & SYNC_DISTRIBUTED_LOCK_STALE);
    CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 30 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_token(a, &second), 0);
    CHECK(second > first + 1);  /* the dead holder's token came between */
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    /* sync_distributed_lock_recover takes a stale holder's lock over too */
    holder = spawn_holder(t);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_recover(a), 0);
    CHECK(sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK_EQ(sync_distributed_lock_recover(a), ENOENT);
    sync_distributed_lock_destroy(a);
}

/* A holder SIGKILLed and never judged stale (only tries are made, which take nothing over): its
 * lease expires on the server, which deletes its key, and the lock is free again. */
static void test_killed_holder_lease_expires(void) {
    char t[600];
    target("&ttl=1", t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    pid_t holder = spawn_holder(t);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_try_lock(a), EBUSY);  /* its lease runs yet */
    int64_t start = sync_monotonic_ns();
    int err;
    while ((err = sync_distributed_lock_try_lock(a)) == EBUSY) {
        CHECK(sync_monotonic_ns() - start < 60 * S);
        usleep(20000);
    }
    CHECK_EQ(err, 0);
    printf("a killed holder's lease (ttl 1 s) freed the lock after %lld ms\n", (long long)((sync_monotonic_ns() - start) / MS));
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
}

/* Loss notification: a holder (a child) stopped past its lease loses the lock to another; once
 * resumed, its keep-alive finds the lease gone and its handler hears LOST, and its unlock says
 * EBUSY (another holds it). A hold broken by another is LOST too. */
static int event_pipe[2];

static void record(sync_distributed_lock_t *lock, int event, void *context) {
    (void)lock;
    (void)context;
    char byte = (char)('0' + event);
    if (write(event_pipe[1], &byte, 1) != 1) abort();
}

static void test_loss_on_lease_end(void) {
    char t[600];
    target("&ttl=1", t, sizeof t);
    int ready[2], report[2];
    CHECK_EQ(pipe(ready), 0);
    CHECK_EQ(pipe(report), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(120);
        CHECK_EQ(pipe(event_pipe), 0);
        sync_distributed_lock_t *lock = make_lock(t);
        CHECK_EQ(sync_distributed_lock_set_event_handler(lock, record, NULL), 0);
        CHECK_EQ(sync_distributed_lock_try_lock(lock), 0);
        char byte = 'y';
        CHECK_EQ(write(ready[1], &byte, 1), 1);
        /* (stopped and resumed by the parent here) */
        char event = 0;
        while (event != '0' + SYNC_DISTRIBUTED_LOCK_LOST) CHECK_EQ(read(event_pipe[0], &event, 1), 1);
        CHECK(sync_distributed_lock_lost(lock));
        CHECK(!sync_distributed_lock_is_held(lock));
        int err = sync_distributed_lock_unlock(lock);
        char result = err == EBUSY ? 'b' : err == ESTALE ? 's' : 'x';
        CHECK_EQ(write(report[1], &result, 1), 1);
        _exit(0);
    }
    char byte;
    CHECK_EQ(read(ready[0], &byte, 1), 1);
    kill(child, SIGSTOP);
    sync_distributed_lock_t *a = make_lock(t);
    /* the stopped holder's lease runs out (2 s, or etcd's minimum): then the lock is free */
    CHECK_EQ(sync_distributed_lock_lock(a, 60 * S, MS), 0);
    kill(child, SIGCONT);
    CHECK_EQ(read(report[0], &byte, 1), 1);
    CHECK_EQ(byte, 'b');
    wait_ok(child);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    close(ready[0]); close(ready[1]); close(report[0]); close(report[1]);

    /* broken by another object */
    CHECK_EQ(pipe(event_pipe), 0);
    target("&ttl=1", t, sizeof t);
    sync_distributed_lock_t *held = make_lock(t), *breaker = make_lock(t);
    CHECK_EQ(sync_distributed_lock_set_event_handler(held, record, NULL), 0);
    CHECK_EQ(sync_distributed_lock_try_lock(held), 0);
    CHECK_EQ(sync_distributed_lock_break(breaker), 0);
    char event = 0;
    while (event != '0' + SYNC_DISTRIBUTED_LOCK_LOST) CHECK_EQ(read(event_pipe[0], &event, 1), 1);
    CHECK(sync_distributed_lock_lost(held));
    CHECK_EQ(sync_distributed_lock_unlock(held), ESTALE);
    /* a released hold is never reported */
    CHECK_EQ(sync_distributed_lock_try_lock(held), 0);
    CHECK(!sync_distributed_lock_lost(held));
    CHECK_EQ(sync_distributed_lock_unlock(held), 0);
    sync_distributed_lock_destroy(held);
    sync_distributed_lock_destroy(breaker);
    close(event_pipe[0]);
    close(event_pipe[1]);
}

static void on_alarm(int signal) { (void)signal; }

/* The interruptible wait returns EINTR at least every 50 ms, and ETIMEDOUT at its deadline; a
 * queued wait given up leaves nothing behind (is_held withdraws it); the plain wait never
 * returns EINTR; after the holder dies the wait gets the lock. */
static void test_interruptible(void) {
    char t[600];
    target(NULL, t, sizeof t);
    pid_t holder = spawn_holder(t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    int64_t deadline = sync_monotonic_ns() + 400 * MS;
    int interruptions = 0, err;
    while ((err = sync_distributed_lock_lock_interruptible(a, deadline, 5 * MS)) == EINTR) interruptions++;
    CHECK_EQ(err, ETIMEDOUT);
    CHECK(interruptions >= 2);
    CHECK_EQ(sync_distributed_lock_lock_interruptible(a, -1, 5 * MS), EINTR);  /* queued now */
    CHECK(!sync_distributed_lock_is_held(a));                                  /* withdrawn */
    struct sigaction action = {0};
    action.sa_handler = on_alarm;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval timer = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &timer, NULL);
    CHECK_EQ(sync_distributed_lock_lock_until(a, sync_monotonic_ns() + 300 * MS, 5 * MS), ETIMEDOUT);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sync_distributed_lock_lock_until(c, sync_monotonic_ns() + 30 * S, 5 * MS), 0);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    /* the withdrawn key is gone (deleted in the background): a try takes the free lock */
    int64_t start = sync_monotonic_ns();
    while ((err = sync_distributed_lock_try_lock(c)) == EBUSY) { CHECK(sync_monotonic_ns() - start < 30 * S); usleep(10000); }
    CHECK_EQ(err, 0);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* etcd restarted while held: the lease and key persist (etcd's data is on disk), the holder
 * still holds and releases it, and tokens keep increasing. A stopped etcd: a bounded wait
 * ends (ETIMEDOUT or EIO), and all works again once it resumes. */
static void test_server_faults(void) {
    char t[600];
    target("&connect_timeout=2", t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t), *c = make_lock(t);
    uint64_t before, after;
    int err;
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    CHECK_EQ(sync_distributed_lock_token(a, &before), 0);
    control("restart");
    err = sync_distributed_lock_try_lock(c);
    if (err != EBUSY) fprintf(stderr, "after the restart: %d %s\n", err, sync_distributed_lock_error_message());
    CHECK_EQ(err, EBUSY);
    CHECK(sync_distributed_lock_is_held(a));
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    CHECK_EQ(sync_distributed_lock_lock(c, 30 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_token(c, &after), 0);
    CHECK(after > before);
    control("pause");
    err = sync_distributed_lock_lock(a, 500 * MS, MS);
    control("resume");
    printf("a wait while etcd was stopped: %d (%s)\n", err, sync_distributed_lock_error_message());
    CHECK(err == ETIMEDOUT || err == EIO);
    CHECK_EQ(sync_distributed_lock_unlock(c), 0);
    CHECK_EQ(sync_distributed_lock_lock(a, 30 * S, MS), 0);
    CHECK_EQ(sync_distributed_lock_unlock(a), 0);
    sync_distributed_lock_destroy(a);
    sync_distributed_lock_destroy(c);
}

/* Bad URLs, a wrong or missing password, nothing listening, a stopped server: clear errors at
 * creation. */
static void test_bad_targets(void) {
    char t[700];
    CHECK_EQ(create_error("etcd://127.0.0.1:2379"), EINVAL);                 /* no lock name */
    CHECK(strstr(sync_distributed_lock_error_message(), "lock=NAME") != NULL);
    CHECK_EQ(create_error("etcd://127.0.0.1:99999?lock=x"), EINVAL);         /* a bad port */
    CHECK_EQ(create_error("etcd://127.0.0.1?lock=x&ttl=0.5"), EINVAL);       /* ttl below 1 s */
    CHECK_EQ(create_error("etcd://127.0.0.1?lock=x&color=red"), EINVAL);
    CHECK(strstr(sync_distributed_lock_error_message(), "color") != NULL);
    CHECK_EQ(create_error("etcd://127.0.0.1?lock=x&cacert=/etc/ca.pem"), EINVAL);  /* TLS options: etcds:// */
    printf("TLS option: %s\n", sync_distributed_lock_error_message());
    CHECK(strstr(sync_distributed_lock_error_message(), "etcds://") != NULL);
    /* etcds://'s bad options, before any connection (nothing listens on port 1) */
    CHECK_EQ(create_error("etcds://127.0.0.1:1?lock=x&cert=/etc/hostname"), EINVAL);
    CHECK(strstr(sync_distributed_lock_error_message(), "cert= without key=") != NULL);
    CHECK_EQ(create_error("etcds://127.0.0.1:1?lock=x&cacert=/nonexistent/ca.pem"), EINVAL);
    CHECK(strstr(sync_distributed_lock_error_message(), "cacert=/nonexistent/ca.pem") != NULL);
    CHECK_EQ(create_error("etcds://127.0.0.1:1?lock=x&cacert=/etc/hostname"), EINVAL);  /* no certificate in it */
    CHECK(strstr(sync_distributed_lock_error_message(), "holds no CA certificate") != NULL);
    snprintf(t, sizeof t, "%s", base);
    char *secret = strstr(t, "secret");
    CHECK(secret != NULL);
    memcpy(secret, "wrong!", 6);
    strcat(t, "?lock=x");
    CHECK_EQ(create_error(t), EACCES);
    printf("wrong password: %s\n", sync_distributed_lock_error_message());
    CHECK(strstr(sync_distributed_lock_error_message(), "wrong!") == NULL);
    snprintf(t, sizeof t, "etcd://127.0.0.1:%d?lock=x", port());
    CHECK_EQ(create_error(t), EACCES);
    printf("no password: %s\n", sync_distributed_lock_error_message());
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    CHECK_EQ(bind(s, (struct sockaddr *)&address, sizeof address), 0);
    CHECK_EQ(getsockname(s, (struct sockaddr *)&address, &length), 0);
    close(s);
    snprintf(t, sizeof t, "etcd://127.0.0.1:%d?lock=x", ntohs(address.sin_port));
    CHECK_EQ(create_error(t), ECONNREFUSED);
    printf("nothing listening: %s\n", sync_distributed_lock_error_message());
    control("pause");
    snprintf(t, sizeof t, "%s?lock=x&connect_timeout=1", base);
    int64_t start = sync_monotonic_ns();
    int err = create_error(t);
    int64_t took = sync_monotonic_ns() - start;
    control("resume");
    printf("stopped server: %d after %lld ms: %s\n", err, (long long)(took / MS), sync_distributed_lock_error_message());
    CHECK(err == ECONNREFUSED || err == EIO);
}

/* A forked child never holds its parent's lock, and takes it over its own connection. */
static void test_fork(void) {
    char t[600];
    target(NULL, t, sizeof t);
    sync_distributed_lock_t *a = make_lock(t);
    CHECK_EQ(sync_distributed_lock_try_lock(a), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(60);
        int ok = sync_distributed_lock_unlock(a) == EPERM && !sync_distributed_lock_is_held(a)
                 && sync_distributed_lock_try_lock(a) == EBUSY;
        _exit(ok ? 0 : 1);
    }
    wait_ok(child);
    CHECK(sync_distributed_lock_is_held(a));
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
    if (system(command) != 0) fprintf(stderr, "stopping etcd failed\n");
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/libsync-etcd-XXXXXX");
    CHECK(mkdtemp(scratch) != NULL);
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    char file[400];
    snprintf(file, sizeof file, "%s/etcd.url", given ? given : "");
    if (given && access(file, R_OK) == 0) {  /* (servers given without etcd: a private one) */
        snprintf(servers, sizeof servers, "%s", given);
    } else {
        snprintf(servers, sizeof servers, "/tmp/libsync-servers-etcd-XXXXXX");
        CHECK(mkdtemp(servers) != NULL);
        char command[600];
        snprintf(command, sizeof command, "%s/scripts/servers.sh start-etcd %s", LIBSYNC_SOURCE_DIR, servers);
        atexit(stop_servers);
        int status = system(command);
        if (status != 0) {
            fprintf(stderr, "\n!!!!!! SKIPPING the etcd backend: etcd could not be installed or started "
                            "(scripts/servers.sh: status %d) !!!!!!\n\n", status);
            return 77;
        }
    }
    snprintf(file, sizeof file, "%s/etcd.url", servers);
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "\n!!!!!! SKIPPING the etcd backend: no etcd.url in %s !!!!!!\n\n", servers);
        return 77;
    }
    CHECK(fgets(base, sizeof base, f) != NULL);
    base[strcspn(base, "\n")] = 0;
    fclose(f);
    test_basics_and_tokens();
    test_mutual_exclusion_and_fencing();
    test_waiting_does_not_poll();
    test_killed_holder_stale();
    test_killed_holder_lease_expires();
    test_loss_on_lease_end();
    test_interruptible();
    test_fork();
    test_bad_targets();
    test_server_faults();
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", scratch);
    CHECK_EQ(system(command), 0);
    DONE();
}
