/* The distributed lock's acquire+release, and a busy try_lock, beside flock(2) on a lock file
 * (kept open, as a long-lived process would; and opened/closed each time, as filelock does) and
 * beside a bare mkdir+rmdir (the floor of any directory-based lock). One thread, uncontended:
 * the latency a process pays per critical section. The files live in $BENCH_DIR (default /tmp). */
#include "bench.h"
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
    return 0;
}
