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
 * Each object is one would-be holder: two objects for one path, in one process or not, exclude
 * each other; an object is not recursive (EDEADLK). The lock outlives the object and the
 * process: a holder that dies leaves it held. On the same host (same host name, boot and pid
 * namespace) such a holder is detected as stale (its process is gone, a zombie, or its pid
 * names a newer process) and sync_distributed_lock_recover takes the lock over atomically.
 * Holders on other hosts are never judged stale; sync_distributed_lock_break removes any lock.
 *
 * Timeouts use CLOCK_MONOTONIC; acquisition times are wall-clock (CLOCK_REALTIME), as hosts
 * share them. Polling is not fair: any waiter may take a released lock.
 *
 * Thread safety: every function may be called from any thread, also concurrently on one object
 * (its operations are serialized), except sync_distributed_lock_destroy, which must be the last.
 * NULL object or output pointers return EINVAL.
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
 * Makes a lock object for `path`, stored in *lock. Nothing is created on disk until the lock is
 * first acquired. The path's parent directory is resolved to an absolute path now.
 * Returns 0, or:
 *   EINVAL        path or lock is NULL, or path names no file ("", "/", ".", "..")
 *   ENAMETOOLONG  the file name is too long
 *   ENOENT        the parent directory does not exist
 *   ENOTDIR       the parent is not a directory
 *   EACCES/EROFS  this process may not create entries in the parent directory
 *   EEXIST        something that is not this lock is at path: a file, a symbolic link, or a
 *                 directory with other content
 * On failure *lock is NULL.
 */
int sync_distributed_lock_create(const char *path, sync_distributed_lock_t **lock);

/** Frees the object (NULL is ignored). It does NOT release a lock the object holds, which stays
 *  held on disk (as NSDistributedLock's): unlock first. */
void sync_distributed_lock_destroy(sync_distributed_lock_t *lock);

/** The lock's absolute path (valid until destroy). */
const char *sync_distributed_lock_path(const sync_distributed_lock_t *lock);

/**
 * Acquires the lock if it is free; never waits. Returns 0 (this object holds it), or:
 *   EBUSY    someone holds it
 *   EDEADLK  this object already holds it
 *   EEXIST   something that is not a lock is at the path
 *   another errno from mkdir/rename (EACCES, EROFS, ENOSPC, EIO...)
 */
int sync_distributed_lock_try_lock(sync_distributed_lock_t *lock);

/**
 * Acquires the lock, polling every poll_interval_ns, and taking over a stale holder's lock (see
 * sync_distributed_lock_recover). timeout_ns < 0 waits forever; 0 tries once. Returns 0, or:
 *   ETIMEDOUT  timeout_ns passed (CLOCK_MONOTONIC) and the lock is held
 *   EINTR      a signal handler ran while sleeping between polls: call again (with the
 *              remaining time) to keep waiting
 *   EINVAL     poll_interval_ns <= 0
 *   EDEADLK, EEXIST, or another errno as sync_distributed_lock_try_lock.
 */
int sync_distributed_lock_lock(sync_distributed_lock_t *lock, int64_t timeout_ns, int64_t poll_interval_ns);

/**
 * Releases the lock this object holds. Returns 0, or:
 *   EPERM   this object does not hold the lock
 *   ESTALE  the lock was broken since this object acquired it; nobody holds it now
 *   EBUSY   the lock was broken since this object acquired it, and someone else holds it now
 * After ESTALE or EBUSY the object no longer holds the lock.
 */
int sync_distributed_lock_unlock(sync_distributed_lock_t *lock);

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
 *   EBUSY    the holder is alive, or on another host, or another process took it over first
 *   ENOENT   the lock is free (use try_lock)
 *   EDEADLK  this object already holds it
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

/** Whether this object holds the lock now (checked on disk: false once it was broken). */
bool sync_distributed_lock_is_held(const sync_distributed_lock_t *lock);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_DISTRIBUTED_LOCK_H */
