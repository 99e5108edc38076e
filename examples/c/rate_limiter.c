/* A cross-host rate limiter in C: at most N jobs at a time, wherever they run, with a distributed
 * semaphore of N permits, on a path in a temporary directory or on the TARGET given (a path, or a
 * postgresql://, redis:// or etcd:// URL with lock=NAME). Four worker processes share the
 * semaphore; shared memory counts who runs, and a results table records per job the token that
 * last claimed it, refusing an older one (a worker whose permit was lost).
 *   rate_limiter [TARGET] */
#define _GNU_SOURCE
#include <sync.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 2, WORKERS = 4, JOBS = 16 };

struct shared {
    atomic_int running, most;
    atomic_uint_least64_t claim[JOBS + 1]; /* per job: the token that last claimed it */
    int result[JOBS + 1];
};

/* Records `token` as the job's claim, unless a newer token claimed it: 0, or EPERM (stale). */
static int claim(struct shared *s, int job, uint64_t token) {
    uint_least64_t seen = atomic_load(&s->claim[job]);
    while (token >= seen)
        if (atomic_compare_exchange_weak(&s->claim[job], &seen, token)) return 0;
    return EPERM;
}

static void work(struct shared *s, const char *target, int first) {
    sync_distributed_semaphore_t *limiter;
    if (sync_distributed_semaphore_create(target, N, 0, &limiter) != 0) _exit(2);
    for (int job = first; job < JOBS; job += WORKERS) {
        if (sync_distributed_semaphore_acquire(limiter, -1, 1000000) != 0) _exit(3);  /* waits while N run */
        int now = atomic_fetch_add(&s->running, 1) + 1, most = atomic_load(&s->most);
        while (now > most && !atomic_compare_exchange_weak(&s->most, &most, now)) {}
        uint64_t token;
        sync_distributed_semaphore_token(limiter, &token);
        if (claim(s, job, token) == 0) s->result[job] = job * job;
        atomic_fetch_sub(&s->running, 1);
        if (sync_distributed_semaphore_release(limiter) != 0) _exit(4);
    }
    sync_distributed_semaphore_destroy(limiter);
    _exit(0);
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/jobs-XXXXXX", path[64], command[96];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/jobs.semaphore", dir);
    const char *target = argc > 1 ? argv[1] : path;
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) return 1;
    int failed = 0;
    for (int w = 0; w < WORKERS; w++)
        if (fork() == 0) work(s, target, w);
    for (int w = 0; w < WORKERS; w++) {
        int status;
        wait(&status);
        failed |= status != 0;
    }
    for (int job = 0; job < JOBS; job++) failed |= s->result[job] != job * job;
    failed |= atomic_load(&s->most) > N;
    printf("%d jobs, at most %d at a time\n", JOBS, atomic_load(&s->most));

    /* A permit lost mid-job (broken here; a lease that ran out does the same): the job is handed
     * to a newer permit, and the old holder's claim is refused. */
    sync_distributed_semaphore_t *slow, *fresh;
    uint64_t old_token, new_token;
    if (sync_distributed_semaphore_create(target, N, 0, &slow) != 0
        || sync_distributed_semaphore_create(target, N, 0, &fresh) != 0) {
        fprintf(stderr, "%s: %s\n", target, sync_distributed_lock_error_message());
        return 1;
    }
    failed |= sync_distributed_semaphore_try_acquire(slow);
    sync_distributed_semaphore_token(slow, &old_token);
    failed |= claim(s, JOBS, old_token);
    failed |= sync_distributed_semaphore_break(fresh);
    failed |= sync_distributed_semaphore_try_acquire(fresh);
    sync_distributed_semaphore_token(fresh, &new_token);
    failed |= claim(s, JOBS, new_token);
    failed |= claim(s, JOBS, old_token) != EPERM;                  /* the stale token is refused */
    failed |= sync_distributed_semaphore_release(slow) != ESTALE;  /* and its holder learns it */
    failed |= sync_distributed_semaphore_release(fresh);
    sync_distributed_semaphore_destroy(slow);
    sync_distributed_semaphore_destroy(fresh);
    snprintf(command, sizeof command, "rm -rf %s", dir);
    failed |= system(command) != 0;
    puts(failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
