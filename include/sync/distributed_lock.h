/*
 * sync/distributed_lock.h — a lock between processes and hosts (Apple's NSDistributedLock),
 * kept in a file system that every user of the lock can write, NFS included; with holder
 * information readable by anyone and atomic recovery of a lock whose holder died.
 *
 *   sync_distributed_lock_t *lock;
 *   int err = sync_distributed_lock_create("/shared/jobs.lock", &lock);   // ENOENT, EACCES...
 *   if (sync_distributed_lock_try_lock(lock) == 0) {                      // or EBUSY
 *       ... use the shared resource ...
 *       sync_distributed_lock_unlock(lock);
 *   }
 *   sync_distributed_lock_destroy(lock);
 *
 * On disk the lock is a directory at the path, holding one entry that names its holder (host,
 * pid, process start time, acquisition time). Every step is one operation that NFS servers
 * perform atomically (mkdir, rename, rmdir), never flock/fcntl, which NFS mounts may ignore.
 * Acquiring renames a prepared directory onto the path: it appears with its holder's name.
 *
 * Holders. Two objects for one path, in one process or not, exclude each other. Through one
 * object, the holder is the THREAD that acquired it: the object's other threads wait for it in
 * sync_distributed_lock_lock (sleeping until its hold ends, without polling the disk) and may
 * not unlock it (EPERM); SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED makes the process the holder. The
 * holder acquiring again gets EDEADLK, or, with SYNC_DISTRIBUTED_LOCK_RECURSIVE, a counted
 * re-entry (each needs its unlock). A thread that waits without a timeout for a lock it holds
 * through another object of its process gets EDEADLK instead of waiting forever.
 *
 * Fork: the holder is the process that acquired the lock. A forked child never holds its
 * parent's lock: its unlock returns EPERM, its is_held false, and its destroy touches nothing on
 * disk; the child may acquire the lock for itself through its copy of the object.
 *
 * The lock outlives the object and the process: a holder that dies leaves it held. On the same
 * host (same host name, boot and pid namespace) such a holder is detected as stale (its process
 * is gone, a zombie, or its pid names a newer process) and sync_distributed_lock_recover takes
 * the lock over atomically. Holders on other hosts are never judged stale;
 * sync_distributed_lock_break removes any lock.
 *
 * Paths: every operation works on any path that creation accepts (names are used relative to
 * the parent directory, so a path near PATH_MAX with a long file name works throughout).
 *
 * Timeouts use CLOCK_MONOTONIC; acquisition times are wall-clock (CLOCK_REALTIME), as hosts
 * share them. Polling is not fair: any waiter may take a released lock.
 *
 * Thread safety: every function may be called from any thread, also concurrently on one object
 * (its operations are serialized), except sync_distributed_lock_destroy, which must be the last.
 * NULL object or output pointers return EINVAL (sync_distributed_lock_count: 0, is_held: false,
 * path: NULL).
 */
#ifndef SYNC_DISTRIBUTED_LOCK_H
#define SYNC_DISTRIBUTED_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A distributed lock object (heap; opaque). */
typedef struct sync_distributed_lock sync_distributed_lock_t;

/** flags of sync_distributed_lock_holder_t. */
#define SYNC_DISTRIBUTED_LOCK_THIS_HOST 1u /* the holder runs on this host */
#define SYNC_DISTRIBUTED_LOCK_STALE     2u /* ... and its process is gone: recover may take over */

/** flags of sync_distributed_lock_create_with (any other bit: EINVAL). */
#define SYNC_DISTRIBUTED_LOCK_RECURSIVE          1u /* the holder may acquire again (counted) */
#define SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED      2u /* the holder is the process, not the thread:
                                                       any of its threads may unlock, and an
                                                       acquire by any of them while held is a
                                                       re-entry (EDEADLK unless RECURSIVE) */
#define SYNC_DISTRIBUTED_LOCK_MAKE_PARENTS       4u /* make missing parent directories (0777 less
                                                       the umask), at creation and when acquiring */
#define SYNC_DISTRIBUTED_LOCK_RELEASE_ON_DESTROY 8u /* destroy releases a hold of this process
                                                       through the object, whichever thread took it */
#define SYNC_DISTRIBUTED_LOCK_REMOVE_ON_RELEASE 16u /* releasing also removes the lock's directory
                                                       while it is empty (one operation more; safe:
                                                       only an empty directory goes) */

/** Who holds a lock (280 bytes). */
typedef struct sync_distributed_lock_holder {
    int64_t acquired_ns;    /* when it acquired the lock: CLOCK_REALTIME, ns since the epoch */
    uint64_t process_start; /* its process's start, clock ticks since its host booted
                               (/proc/<pid>/stat field 22); with pid, it names one process */
    int32_t pid;            /* its process id on its host */
    uint32_t flags;         /* SYNC_DISTRIBUTED_LOCK_THIS_HOST, SYNC_DISTRIBUTED_LOCK_STALE */
    char host[256];         /* its host name, NUL-terminated */
} sync_distributed_lock_holder_t;

/**
 * Makes a lock object for `path`, stored in *lock: sync_distributed_lock_create_with(path, 0, -1,
 * lock) (thread-owned, not recursive, the parent must exist, destroy leaves a hold in place).
 */
int sync_distributed_lock_create(const char *path, sync_distributed_lock_t **lock);

/**
 * Makes a lock object for `path` (UTF-8), stored in *lock. Nothing but missing parents (with
 * SYNC_DISTRIBUTED_LOCK_MAKE_PARENTS) is created on disk until the lock is first acquired. The
 * path's parent directory is resolved to an absolute path now. flags: 0 or the
 * SYNC_DISTRIBUTED_LOCK_* creation flags above. mode: -1 leaves the permission bits of the
 * lock's directories to the umask (0777 less it); 0...0777 sets them as a lock file's mode, each
 * read bit adding the matching search bit (0644: rwxr-xr-x; 0666 lets every user recover or break
 * the lock).
 * Returns 0, or:
 *   EINVAL        path or lock is NULL; path names no file ("", "/", ".", "..") or is not UTF-8;
 *                 an unknown flag; mode outside -1...0777
 *   ENAMETOOLONG  the file name is longer than NAME_MAX, or the parent's path than PATH_MAX
 *   ENOENT        the parent directory does not exist (and MAKE_PARENTS is not set)
 *   ENOTDIR       the parent, or a component of its path, is not a directory
 *   EACCES/EROFS  this process may not create entries in the parent directory (or, with
 *                 MAKE_PARENTS, a missing parent)
 *   EEXIST        something that is not this lock is at path: a file, a symbolic link, or a
 *                 directory with other content
 *   another errno of mkdir(2) (MAKE_PARENTS: ENOSPC, EIO...)
 * On failure *lock is NULL.
 */
int sync_distributed_lock_create_with(const char *path, unsigned flags, int mode, sync_distributed_lock_t **lock);

/** Frees the object (NULL is ignored). It does NOT release a lock the object holds, which stays
 *  held on disk (as NSDistributedLock's): unlock first; unless the object was made with
 *  SYNC_DISTRIBUTED_LOCK_RELEASE_ON_DESTROY, when a hold of this process through it is
 *  released (whichever thread took it; in a forked child, nothing is touched). */
void sync_distributed_lock_destroy(sync_distributed_lock_t *lock);

/** The lock's absolute path (valid until destroy; NULL for a NULL object). */
const char *sync_distributed_lock_path(const sync_distributed_lock_t *lock);

/**
 * Acquires the lock if it is free; never waits. Returns 0 (the caller holds it; with RECURSIVE,
 * also a re-entry by the holder), or:
 *   EBUSY    someone else holds it (another thread through this object, unless PROCESS_OWNED)
 *   EDEADLK  the caller holds it through this object, which is not RECURSIVE
 *   EAGAIN   RECURSIVE: the holder's count would pass INT32_MAX
 *   EEXIST   something that is not a lock is at the path
 *   another errno from open/mkdir/rename (EACCES, EROFS, ENOSPC, EIO...)
 */
int sync_distributed_lock_try_lock(sync_distributed_lock_t *lock);

/**
 * Acquires the lock. While another thread holds it through this object, sleeps until that hold
 * ends; while another holder has it, polls every poll_interval_ns, taking over a stale holder's
 * lock (see sync_distributed_lock_recover). timeout_ns < 0 waits forever; 0 tries once.
 * Returns 0, or:
 *   ETIMEDOUT  timeout_ns passed (CLOCK_MONOTONIC) and the lock is held
 *   EINTR      a signal handler ran while sleeping: call again (with the remaining time) to keep
 *              waiting
 *   EINVAL     poll_interval_ns <= 0
 *   EDEADLK    the caller holds it through this object, which is not RECURSIVE; or timeout_ns < 0
 *              and the calling thread holds it through another object of this process
 *   EAGAIN, EEXIST, or another errno as sync_distributed_lock_try_lock.
 */
int sync_distributed_lock_lock(sync_distributed_lock_t *lock, int64_t timeout_ns, int64_t poll_interval_ns);

/**
 * Ends one acquisition by the caller (the holder thread, or with PROCESS_OWNED any thread of the
 * holding process); the last one releases the lock. Returns 0, or:
 *   EPERM   the caller does not hold the lock through this object (nobody does, another thread
 *           does, or the hold is a parent process's: a forked child never releases it)
 *   ESTALE  the lock was broken since this object acquired it; nobody holds it now
 *   EBUSY   the lock was broken since this object acquired it, and someone else holds it now
 *   another errno from rename/rmdir (EIO...): the lock is still held; unlock may be retried
 * After ESTALE or EBUSY the object no longer holds the lock.
 */
int sync_distributed_lock_unlock(sync_distributed_lock_t *lock);

/**
 * Releases the caller's hold however many acquisitions it counts (filelock's
 * release(force=True)). Returns 0, EPERM, ESTALE, EBUSY or another errno, as
 * sync_distributed_lock_unlock.
 */
int sync_distributed_lock_unlock_all(sync_distributed_lock_t *lock);

/**
 * How many of the caller's acquisitions through this object are not yet released: 0 when the
 * caller does not hold it (filelock's lock_counter). Not checked on disk. 0 for a NULL object.
 */
int sync_distributed_lock_count(const sync_distributed_lock_t *lock);

/**
 * Removes the lock whoever holds it (NSDistributedLock's breakLock): only for a holder known to
 * be dead, since the holder goes on as if it held the lock (its unlock reports ESTALE/EBUSY).
 * Prefer sync_distributed_lock_recover, which only takes a provably dead holder's lock.
 * Returns 0 (removed, or it was free), EEXIST (not a lock at the path), or another errno.
 */
int sync_distributed_lock_break(sync_distributed_lock_t *lock);

/**
 * If the lock's holder is stale (on this host, its process gone), takes the lock over in one
 * atomic rename: this object holds it then. Of several processes recovering one stale lock at
 * once exactly one gets 0; the others get EBUSY (and see the winner holding it). Returns 0, or:
 *   EBUSY    the holder is alive, or on another host, or another process took it over first,
 *            or another thread holds it through this object
 *   ENOENT   the lock is free (use try_lock)
 *   EDEADLK  the caller already holds it through this object
 *   EEXIST, or another errno.
 */
int sync_distributed_lock_recover(sync_distributed_lock_t *lock);

/**
 * Who holds the lock now, into *holder. Returns 0 (held; *holder filled), ENOENT (free),
 * EEXIST (not a lock at the path), or another errno.
 */
int sync_distributed_lock_holder(const sync_distributed_lock_t *lock, sync_distributed_lock_holder_t *holder);

/**
 * When the current holder acquired the lock (NSDistributedLock's lockDate), in *ns_since_epoch
 * (CLOCK_REALTIME). Returns 0, ENOENT (free), EEXIST, or another errno.
 */
int sync_distributed_lock_date(const sync_distributed_lock_t *lock, int64_t *ns_since_epoch);

/** Whether the caller holds the lock through this object now (checked on disk: false once it
 *  was broken; false in a forked child for its parent's hold). */
bool sync_distributed_lock_is_held(const sync_distributed_lock_t *lock);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_DISTRIBUTED_LOCK_H */
