/* The distributed lock's acquire+release, and a busy try_lock, beside flock(2) on a lock file
 * (kept open, as a long-lived process would; and opened/closed each time, as filelock does) and
 * beside a bare mkdir+rmdir (the floor of any directory-based lock). One thread, uncontended:
 * the latency a process pays per critical section. The files live in $BENCH_DIR (default /tmp).
 *
 * Servers (private ones from scripts/servers.sh, or $LIBSYNC_TEST_SERVERS's): the PostgreSQL and
 * Redis backends' try_lock+unlock beside the floor, the two round trips the operation needs made
 * with the same client library (libpq: two SELECT 1; hiredis: two PINGs), with the spread of the
 * runs. The client libraries are opened with dlopen here too, as libsync does. */
#include "bench.h"
#include <dlfcn.h>
#include <poll.h>
#include <sys/time.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sync.h>
#include <unistd.h>

static sync_distributed_lock_t *lock, *other;
static char lock_path[256], flock_path[256], dir_path[256];
static int flock_fd, flock_other_fd;

static void check(int ok, const char *what) {
    if (!ok) { perror(what); exit(1); }
}

BENCH_BODY(dl_cycle, , check(sync_distributed_lock_try_lock(lock) == 0, "try_lock"); sync_distributed_lock_unlock(lock))
BENCH_BODY(flock_open_fd, , flock(flock_fd, LOCK_EX); flock(flock_fd, LOCK_UN))
BENCH_BODY(flock_reopen, int fd,
           fd = open(flock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644); flock(fd, LOCK_EX); flock(fd, LOCK_UN); close(fd))
BENCH_BODY(mkdir_rmdir, , check(mkdir(dir_path, 0777) == 0, "mkdir"); rmdir(dir_path))

BENCH_BODY(dl_busy, , check(sync_distributed_lock_try_lock(other) == EBUSY, "busy try_lock"))
BENCH_BODY(flock_busy, , check(flock(flock_other_fd, LOCK_EX | LOCK_NB) == -1, "busy flock"))

/* ---- Servers ---- */

typedef void *(*pq_connectdb)(const char *);
typedef int (*pq_status)(const void *);
typedef void *(*pq_exec)(void *, const char *);
typedef void (*pq_clear)(void *);
typedef void *(*redis_connect)(const char *, int);
typedef void *(*redis_command)(void *, const char *, ...);
typedef void (*redis_free_reply)(void *);
static pq_exec pq_exec_fn;
static pq_clear pq_clear_fn;
static redis_command redis_command_fn;
static redis_free_reply redis_free_reply_fn;
static void *pg_conn, *redis_context;
static sync_distributed_lock_t *pg_lock, *redis_lock;

/* One round trip as libsync makes it: send, then poll() with a timeout (a thread that sleeps with
 * a timer armed and one that sleeps without one wake at different speeds on some VMs: the floor
 * and libsync must sleep alike), then read the result. */
typedef int (*pq_send)(void *, const char *);
typedef int (*pq_int)(void *);
typedef void *(*pq_result)(void *);
static pq_send pq_send_fn;
static pq_int pq_socket_fn, pq_consume_fn, pq_busy_fn;
static pq_result pq_get_result_fn;
static void pg_round_trip(const char *sql) {
    pq_send_fn(pg_conn, sql);
    while (pq_busy_fn(pg_conn)) {
        struct pollfd p = {pq_socket_fn(pg_conn), POLLIN, 0};
        poll(&p, 1, 5000);
        pq_consume_fn(pg_conn);
    }
    void *result;
    while ((result = pq_get_result_fn(pg_conn)) != NULL) pq_clear_fn(result);
}
static void pg_select_twice(void) {
    pg_round_trip("SELECT 1");
    pg_round_trip("SELECT 1");
}
static void redis_ping_twice(void) {
    redis_free_reply_fn(redis_command_fn(redis_context, "PING"));
    redis_free_reply_fn(redis_command_fn(redis_context, "PING"));
}
/* libsync's own requests, made raw through the client library: what the server's work costs
 * beyond a round trip (the token, the holder's name, the compare-and-delete), without libsync. */
static char redis_acquire_sha[64], redis_release_sha[64];
static void pg_same_statements(void) {
    pg_round_trip("SELECT CASE WHEN pg_try_advisory_lock(4242) THEN nextval('public.libsync_fencing_token') END, "
                  "set_config('application_name', 'libsync 1 1 1 bench', false)");
    pg_round_trip("SELECT pg_advisory_unlock(4242)");
}
static void redis_same_scripts(void) {
    redis_free_reply_fn(redis_command_fn(redis_context, "EVALSHA %s 3 libsync:lock:bench-raw libsync:fence:bench-raw libsync:abandoned:entry entry 10000", redis_acquire_sha));
    redis_free_reply_fn(redis_command_fn(redis_context, "EVALSHA %s 1 libsync:lock:bench-raw entry", redis_release_sha));
}
static void load_script(const char *script, char *sha) {
    struct { int type; long long integer; size_t len; char *str; } *reply = redis_command_fn(redis_context, "SCRIPT LOAD %s", script);
    snprintf(sha, 64, "%s", reply->str);  /* (hiredis 0.14's redisReply layout) */
    redis_free_reply_fn(reply);
}

static void pg_cycle(void) { check(sync_distributed_lock_try_lock(pg_lock) == 0, "pg try_lock"); sync_distributed_lock_unlock(pg_lock); }
static void redis_cycle(void) { check(sync_distributed_lock_try_lock(redis_lock) == 0, "redis try_lock"); sync_distributed_lock_unlock(redis_lock); }

static void read_line(const char *dir, const char *name, char *out, size_t size) {
    char file[512];
    snprintf(file, sizeof file, "%s/%s", dir, name);
    FILE *f = fopen(file, "r");
    check(f != NULL, file);
    check(fgets(out, (int)size, f) != NULL, file);
    out[strcspn(out, "\n")] = 0;
    fclose(f);
}

static void servers(void) {
    char dir[256], command[600], url[512], target[600];
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    if (given) snprintf(dir, sizeof dir, "%s", given);
    else {
        snprintf(dir, sizeof dir, "/tmp/libsync-bench-servers-XXXXXX");
        check(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(command, sizeof command, "scripts/servers.sh start %s", dir);
        if (system(command) != 0) { printf("(no PostgreSQL/Redis servers: scripts/servers.sh could not start them)\n"); return; }
    }
    void *pq = dlopen("libpq.so.5", RTLD_NOW), *hiredis = dlopen("libhiredis.so.0.14", RTLD_NOW);
    if (!hiredis) hiredis = dlopen("libhiredis.so.1.1.0", RTLD_NOW);
    check(pq && hiredis, "dlopen libpq / hiredis");
    pq_exec_fn = (pq_exec)dlsym(pq, "PQexec");
    pq_clear_fn = (pq_clear)dlsym(pq, "PQclear");
    pq_send_fn = (pq_send)dlsym(pq, "PQsendQuery");
    pq_socket_fn = (pq_int)dlsym(pq, "PQsocket");
    pq_consume_fn = (pq_int)dlsym(pq, "PQconsumeInput");
    pq_busy_fn = (pq_int)dlsym(pq, "PQisBusy");
    pq_get_result_fn = (pq_result)dlsym(pq, "PQgetResult");
    redis_command_fn = (redis_command)dlsym(hiredis, "redisCommand");
    redis_free_reply_fn = (redis_free_reply)dlsym(hiredis, "freeReplyObject");

    read_line(dir, "postgres.url", url, sizeof url);
    pg_conn = ((pq_connectdb)dlsym(pq, "PQconnectdb"))(url);
    check(((pq_status)dlsym(pq, "PQstatus"))(pg_conn) == 0, "PQconnectdb");
    snprintf(target, sizeof target, "%s?lock=bench-c", url);
    check(sync_distributed_lock_create(target, &pg_lock) == 0, "create (PostgreSQL)");
    bench_server_row pg[] = {{"floor: 2 round trips (libpq SELECT 1 x2)", pg_select_twice, NULL},
                              {"libsync's 2 statements, raw through libpq", pg_same_statements, NULL},
                              {"libsync try_lock+unlock (PostgreSQL)", pg_cycle, NULL}};
    bench_server_table("PostgreSQL: acquire+release, uncontended, loopback", pg, 3, 3000, 44);

    char port[16];
    read_line(dir, "redis.port", port, sizeof port);
    redis_context = ((redis_connect)dlsym(hiredis, "redisConnect"))("127.0.0.1", atoi(port));
    redis_free_reply_fn(redis_command_fn(redis_context, "AUTH secret"));
    ((int (*)(void *, struct timeval))dlsym(hiredis, "redisSetTimeout"))(redis_context, (struct timeval){5, 0});  /* (as libsync's) */
    read_line(dir, "redis.url", url, sizeof url);
    snprintf(target, sizeof target, "%s?lock=bench-c", url);
    check(sync_distributed_lock_create(target, &redis_lock) == 0, "create (Redis)");
    load_script("if redis.call('exists', KEYS[3]) == 1 then return 0 end if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) or (redis.call('get', KEYS[1]) == ARGV[1] and "
                "redis.call('pexpire', KEYS[1], ARGV[2]) == 1) then local t = redis.call('time') local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, "
                "tonumber(t[1]) * 1000000 + tonumber(t[2])) redis.call('set', KEYS[2], string.format('%.0f', token)) return token end return 0",
                redis_acquire_sha);
    load_script("local v = redis.call('get', KEYS[1]) if v == ARGV[1] then redis.call('del', KEYS[1]) return 1 "
                "elseif v then return 2 else return 0 end", redis_release_sha);
    bench_server_row redis[] = {{"floor: 2 round trips (hiredis PING x2)", redis_ping_twice, NULL},
                                 {"libsync's 2 scripts, raw through hiredis", redis_same_scripts, NULL},
                                 {"libsync try_lock+unlock (Redis)", redis_cycle, NULL}};
    bench_server_table("Redis: acquire+release, uncontended, loopback", redis, 3, 3000, 44);

    sync_distributed_lock_destroy(pg_lock);
    sync_distributed_lock_destroy(redis_lock);
    if (!given) {
        snprintf(command, sizeof command, "scripts/servers.sh stop %s; rm -rf %s", dir, dir);
        if (system(command) != 0) printf("(stopping the servers failed)\n");
    }
}

int main(int argc, char **argv) {
    long iterations = 4000 * (argc > 1 ? atol(argv[1]) : 1);
    const char *dir = getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "/tmp";
    snprintf(lock_path, sizeof lock_path, "%s/bench-%d.dlock", dir, (int)getpid());
    snprintf(flock_path, sizeof flock_path, "%s/bench-%d.flock", dir, (int)getpid());
    snprintf(dir_path, sizeof dir_path, "%s/bench-%d.dir", dir, (int)getpid());
    check(sync_distributed_lock_create(lock_path, &lock) == 0, "create");
    check(sync_distributed_lock_create(lock_path, &other) == 0, "create");
    flock_fd = open(flock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    flock_other_fd = open(flock_path, O_RDWR | O_CLOEXEC);
    check(flock_fd >= 0 && flock_other_fd >= 0, "open");

    bench_row cycle[] = {BENCH_ROW("flock LOCK_EX+LOCK_UN (fd kept open)", flock_open_fd, NULL),
                         BENCH_ROW("flock with open+close (as filelock)", flock_reopen, NULL),
                         BENCH_ROW("bare mkdir+rmdir", mkdir_rmdir, NULL),
                         BENCH_ROW("libsync distributed lock try_lock+unlock", dl_cycle, NULL)};
    bench_table("Acquire+release, uncontended", cycle, 4, 1, iterations, 0);

    check(sync_distributed_lock_try_lock(lock) == 0 && flock(flock_fd, LOCK_EX) == 0, "hold");
    bench_row busy[] = {BENCH_ROW("flock LOCK_NB on a held lock", flock_busy, NULL),
                        BENCH_ROW("libsync try_lock on a held lock", dl_busy, NULL)};
    bench_table("Try-lock that finds the lock busy", busy, 2, 1, iterations, 0);
    sync_distributed_lock_unlock(lock);
    sync_distributed_lock_break(lock); /* removes the (empty) lock directory */
    sync_distributed_lock_destroy(lock);
    sync_distributed_lock_destroy(other);
    unlink(flock_path);
    if (!getenv("BENCH_NO_SERVERS")) servers();
    return 0;
}
