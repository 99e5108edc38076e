/* The etcd backend's acquire+release (try_lock+unlock), uncontended, one process, beside the
 * floor: the two round trips the operation needs, put-if-absent (a txn: the key's create
 * revision is 0, then put it with a lease) and delete, made by a plain HTTP/1.1 client over one
 * kept-alive connection to the same JSON gateway (the same login, the same server). A private
 * etcd from scripts/servers.sh start-etcd (or $LIBSYNC_TEST_SERVERS's etcd.url). Every call is
 * timed alone and the rows take turns in blocks of 50 calls; each row is its median call with
 * the spread (10th...90th percentile), as bench_distributed_lock's server tables. */
#define _GNU_SOURCE
#include "bench.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sync.h>
#include <sys/socket.h>
#include <unistd.h>

static void check(int ok, const char *what) {
    if (!ok) { fprintf(stderr, "%s failed\n", what); exit(1); }
}

static int fd = -1;
static char token[256];
static char lease[32];

/* One exchange: a POST of `body` to `path`, its answer's body into `out` (a Content-Length body,
 * as the gateway gives its unary answers). The wait is a poll() with a timeout, as libsync's. */
static void post(const char *path, const char *body, char *out, size_t size) {
    char request[2048];
    int n = snprintf(request, sizeof request,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s%s%s\r\n%s",
                     path, strlen(body), token[0] ? "Authorization: " : "", token, token[0] ? "\r\n" : "", body);
    check(send(fd, request, (size_t)n, MSG_NOSIGNAL) == n, "send");
    static char buffer[65536];
    size_t have = 0;
    char *end = NULL;
    long length = -1;
    for (;;) {
        if (!end) {
            buffer[have] = 0;
            end = strstr(buffer, "\r\n\r\n");
            if (end) {
                char *field = strcasestr(buffer, "Content-Length:");
                check(field != NULL && field < end, "Content-Length");
                length = atol(field + 15);
            }
        }
        if (end && (long)have >= end + 4 - buffer + length) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        check(poll(&p, 1, 5000) == 1, "poll");
        ssize_t got = recv(fd, buffer + have, sizeof buffer - 1 - have, 0);
        check(got > 0, "recv");
        have += (size_t)got;
    }
    size_t body_length = (size_t)length < size - 1 ? (size_t)length : size - 1;
    memcpy(out, end + 4, body_length);
    out[body_length] = 0;
}

/* The value of "name":"value" in a JSON text. */
static void field(const char *json, const char *name, char *out, size_t size) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", name);
    const char *at = strstr(json, pattern);
    check(at != NULL, name);
    at += strlen(pattern);
    size_t n = strcspn(at, "\"");
    check(n < size, name);
    memcpy(out, at, n);
    out[n] = 0;
}

/* "bench/raw" and "bench/raw0", base64. */
#define RAW_KEY "YmVuY2gvcmF3"
static void floor_ops(void) {
    char answer[4096], body[512];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"" RAW_KEY "\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"" RAW_KEY "\",\"value\":\"dg==\",\"lease\":\"%s\"}}]}", lease);
    post("/v3/kv/txn", body, answer, sizeof answer);
    check(strstr(answer, "\"succeeded\":true") != NULL, "put-if-absent");
    post("/v3/kv/deleterange", "{\"key\":\"" RAW_KEY "\"}", answer, sizeof answer);
}

/* libsync's two requests, the same bodies, through the plain client: a txn that puts the key if
 * the lock's range ("bench/raw2/" to "bench/raw20") is empty (else reads its first key), and a
 * delete that reads the deleted key back (its create revision: the put's). */
#define RAW2_PREFIX "YmVuY2gvcmF3Mi8="
#define RAW2_END "YmVuY2gvcmF3MjA="
#define RAW2_KEY "YmVuY2gvcmF3Mi9r"
static void same_requests(void) {
    char answer[4096], body[1024], revision[32];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"" RAW2_PREFIX "\",\"range_end\":\"" RAW2_END "\",\"result\":\"EQUAL\","
             "\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"" RAW2_KEY "\",\"value\":\"dg==\",\"lease\":\"%s\"}}],"
             "\"failure\":[{\"request_range\":{\"key\":\"" RAW2_PREFIX "\",\"range_end\":\"" RAW2_END "\",\"sort_order\":\"ASCEND\","
             "\"sort_target\":\"CREATE\",\"limit\":\"1\"}}]}", lease);
    post("/v3/kv/txn", body, answer, sizeof answer);
    check(strstr(answer, "\"succeeded\":true") != NULL, "put if the range is empty");
    field(answer, "revision", revision, sizeof revision);
    post("/v3/kv/deleterange", "{\"key\":\"" RAW2_KEY "\",\"prev_kv\":true}", answer, sizeof answer);
    check(strstr(answer, revision) != NULL, "delete, reading the deleted key back");
}

static sync_distributed_lock_t *lock;
static void libsync_cycle(void) {
    check(sync_distributed_lock_try_lock(lock) == 0, "try_lock");
    check(sync_distributed_lock_unlock(lock) == 0, "unlock");
}

int main(void) {
    char dir[256], command[600], url[512], file[600], target[700];
    const char *given = getenv("LIBSYNC_TEST_SERVERS");
    snprintf(file, sizeof file, "%s/etcd.url", given ? given : "");
    int started = 0;
    if (!given || access(file, R_OK) != 0) {
        snprintf(dir, sizeof dir, "/tmp/libsync-bench-etcd-XXXXXX");
        check(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(command, sizeof command, "scripts/servers.sh start-etcd %s", dir);
        if (system(command) != 0) { printf("(no etcd: scripts/servers.sh could not start it)\n"); return 0; }
        snprintf(file, sizeof file, "%s/etcd.url", dir);
        started = 1;
    }
    FILE *f = fopen(file, "r");
    check(f && fgets(url, sizeof url, f), file);
    fclose(f);
    url[strcspn(url, "\n")] = 0;
    int port = atoi(strrchr(url, ':') + 1);

    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    check(connect(fd, (struct sockaddr *)&address, sizeof address) == 0, "connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char answer[4096];
    post("/v3/auth/authenticate", "{\"name\":\"root\",\"password\":\"secret\"}", answer, sizeof answer);
    field(answer, "token", token, sizeof token);
    post("/v3/lease/grant", "{\"TTL\":\"3600\"}", answer, sizeof answer);
    field(answer, "ID", lease, sizeof lease);

    snprintf(target, sizeof target, "%s?lock=bench-c-%d", url, (int)getpid());
    check(sync_distributed_lock_create(target, &lock) == 0, "create (etcd)");
    bench_server_row rows[] = {{"floor: put-if-absent + delete (plain HTTP client)", floor_ops, NULL},
                                {"libsync's 2 requests, made raw (plain HTTP client)", same_requests, NULL},
                                {"libsync try_lock+unlock (etcd)", libsync_cycle, NULL}};
    bench_server_table("etcd: acquire+release, uncontended, loopback", rows, 3, bench_quick() ? 300 : 3000, 52);
    sync_distributed_lock_destroy(lock);
    close(fd);
    if (started) {
        snprintf(command, sizeof command, "scripts/servers.sh stop %s; rm -rf %s", dir, dir);
        if (system(command) != 0) printf("(stopping etcd failed)\n");
    }
    return 0;
}
