/*
 * sync/distributed_lock.h — a lock between processes and hosts (Apple's NSDistributedLock),
 * kept in a store every user of the lock reaches: a file system (NFS included), a PostgreSQL
 * server, a Redis server or an etcd cluster; with holder information readable by anyone, recovery of a lock
 * whose holder died, and a fencing token per acquisition.
 *
 *   sync_distributed_lock_t *lock;
 *   int err = sync_distributed_lock_create("/shared/jobs.lock", &lock);   // ENOENT, EACCES...
 *   if (sync_distributed_lock_try_lock(lock) == 0) {                      // or EBUSY
 *       uint64_t token;
 *       sync_distributed_lock_token(lock, &token);  // pass it to the resource (fencing)
 *       ... use the shared resource ...
 *       sync_distributed_lock_unlock(lock);
 *   }
 *   sync_distributed_lock_destroy(lock);
 *
 * Targets (the backend follows from the target):
 *   a path              the file system (below)
 *   postgresql://user[:password]@host[:port]/db?lock=NAME[&connect_timeout=S][&libpq options]
 *   postgres://...      the same: a session advisory lock on a 64-bit hash (FNV-1a) of NAME.
 *                       The server releases it when the holder's session ends (a dead holder's
 *                       lock is free at once; a holder whose host died or was cut off: the
 *                       server's side of the session probes it after connect_timeout, so within
 *                       about connect_timeout + 3 s); the holder is shown through its session's
 *                       application_name. Waits happen in the server (pg_advisory_lock under
 *                       lock_timeout), not by polling. Two names whose hashes collide share one
 *                       lock (they exclude each other: never less safe).
 *   redis://[[user]:password@]host[:port][/db]?lock=NAME[&ttl=S][&connect_timeout=S]
 *                       a lease: the key libsync:lock:NAME (SET NX PX, ttl + ttl/3 long; the
 *                       fencing counter is libsync:fence:NAME, so no lock's keys are another's),
 *                       renewed every ttl/3 while held by one thread per server and process,
 *                       so a server that stops answering delays no other server's renewals
 *                       (ttl: seconds, default 10, 0.1...86400). The two bounds of ttl: a
 *                       holder stopped (SIGSTOP, a pause) for less than ttl keeps the lock,
 *                       wherever the stop falls (the delay of its renewal after it resumes
 *                       counts as part of the stop; stopped for ttl + ttl/3 or longer it has
 *                       lost it); a holder on another host that dies leaves the lock held for
 *                       more than ttl and at most ttl + ttl/3 (on this host a blocking acquire
 *                       takes a dead holder's lock over at once). Leases are timed from before
 *                       the request is sent: an acquire whose answer comes ttl or more after
 *                       its request gives the lease back and tries once more (a second late
 *                       answer: EIO).
 *                       An acquire that ends without the server's answer (its deadline, a
 *                       broken connection) is cancelled by that thread, so a request that
 *                       reaches the server late never leaves a lease held by nobody. Waits poll
 *                       with backoff (1 ms, doubling, up to the poll interval).
 *   etcd://[user:password@]host[:port]?lock=NAME[&ttl=S][&connect_timeout=S]
 *   etcds://...?lock=NAME[&cacert=PEM][&cert=PEM&key=PEM]
 *                       etcd 3.4+ over its v3 JSON gateway (HTTP/1.1: no client library;
 *                       etcds:// over TLS with OpenSSL's libssl.so.3, loaded when first used
 *                       (ELIBACC without it): cacert= the CA certificates the server's must
 *                       chain to (default: the system's), cert= and key= a client certificate;
 *                       an unreadable file, a file libssl cannot read, cert= without key= or a
 *                       TLS option on etcd:// is EINVAL, saying so; a server certificate that
 *                       does not verify for the host is ECONNREFUSED). Each object puts its key
 *                       libsync/lock/NAME/<lease>-<serial> (a '/' or '%' in NAME escaped) on
 *                       its process's lease, granted with ttl + ttl/3 whole seconds (ttl:
 *                       1...86400, default 10) and kept alive every ttl/3 by one thread per
 *                       server and process. The holder is the range's key with the smallest
 *                       create revision, which is the fencing token. try_lock is a put if the
 *                       range is empty; a wait queues its key and watches the key before it (no
 *                       polling: poll_interval is unused), so waiters are served in order; a
 *                       dead holder's lock is free when its lease runs out (on this host, a wait
 *                       queued right behind it and recover take it over). A user and password
 *                       log in once per process and server (etcd's auth).
 *   connect_timeout (seconds, default 5) bounds connecting and waiting for any answer.
 *   libpq (libpq.so.5, Debian's libpq5) and hiredis (libhiredis.so.0.14 or .so.1.x, Debian's
 *   libhiredis0.14 / libhiredis1.1.0) are loaded with dlopen when a lock of that backend is first
 *   made; libsync.so does not depend on them (environment LIBSYNC_LIBPQ / LIBSYNC_HIREDIS name
 *   another file to load). Each process's side of an object has its own connection.
 *
 * Fencing token: every successful acquire gets a 64-bit token that is larger than every token
 * any earlier acquisition of the lock got, whoever held it (sync_distributed_lock_token). A
 * resource that remembers the largest token it saw and refuses smaller ones is safe from a
 * holder that lost the lock without knowing (paused past its lease, or broken).
 *
 * Errors with a reason beyond their code (a server's message, a missing client library) leave it
 * for sync_distributed_lock_error_message(). Server backends add these codes to every function
 * that reaches the server: ELIBACC (the client library is missing: the message names the Debian
 * package), ECONNREFUSED (cannot connect: refused, unknown or unreachable host, no answer within
 * connect_timeout), EACCES (wrong or missing password, unknown user, missing privilege: reported
 * at creation, which makes a round trip), EIO (the server
 * failed a request, did not answer within connect_timeout, or the connection broke).
 *
 * File system: the lock is a directory at the path, holding one entry that names its holder
 * (host, pid, process start time, acquisition time). Every step is one operation that NFS
 * servers perform atomically (mkdir, rename, rmdir), never flock/fcntl, which NFS mounts may
 * ignore. Acquiring renames a prepared directory onto the path: it appears with its holder's
 * name. The fencing counter is a file beside it, `.<name>.fence`.
 *
 * Holders. Two objects for one target, in one process or not, exclude each other. Through one
 * object, the holder is the THREAD that acquired it: the object's other threads wait for it in
 * sync_distributed_lock_lock (sleeping until its hold ends, without touching the store) and may
 * not unlock it (EPERM); SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED makes the process the holder. The
 * holder acquiring again gets EDEADLK, or, with SYNC_DISTRIBUTED_LOCK_RECURSIVE, a counted
 * re-entry (each needs its unlock; the token stays). A thread that waits without a timeout for a
 * lock it holds through another object of its process gets EDEADLK instead of waiting forever,
 * however the two targets spell the lock: a URL's lock is its engine (postgres:// is
 * postgresql://), host (localhost, 127.0.0.1 and ::1 are one), port, database and lock name, with
 * defaults filled in and other parameters ignored.
 *
 * Fork: the holder is the process that acquired the lock. A forked child never holds its
 * parent's lock: its unlock returns EPERM, its is_held false, and its destroy touches nothing of
 * the parent's (no file, no connection); the child may acquire the lock for itself through its
 * copy of the object (over a connection of its own).
 *
 * The lock outlives the object: a file-system holder that dies leaves it held; on the same host
 * (same host name, boot and pid namespace) such a holder is detected as stale (its process is
 * gone, a zombie, or its pid names a newer process) and sync_distributed_lock_recover takes the
 * lock over atomically (Redis too; PostgreSQL releases it itself). Holders on other hosts are
 * never judged stale; sync_distributed_lock_break removes any lock. A server lock whose object
 * is destroyed while held stays held until the process ends (PostgreSQL: its session is kept;
 * Redis: its lease is still renewed).
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
#include <stddef.h>
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
#define SYNC_DISTRIBUTED_LOCK_TAKE_OVER_FILE    32u /* an empty plain file at path (filelock's
                                                       FileLock leaves one) on which no process
                                                       holds a flock is removed and the lock made
                                                       there; a held or non-empty one: EEXIST,
                                                       with a message (error_message) saying
                                                       what to do */

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
 * Makes a lock object for `path` (UTF-8): a file-system path, or a postgresql://, postgres:// or
 * redis:// URL (see the top of this file; flags MAKE_PARENTS and REMOVE_ON_RELEASE and mode
 * apply to paths only), stored in *lock. A URL's server is connected to now. Nothing but missing parents (with
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
 *                 directory with other content (TAKE_OVER_FILE: a file that is held by a flock
 *                 or has content; sync_distributed_lock_error_message says which)
 *   another errno of mkdir(2) (MAKE_PARENTS: ENOSPC, EIO...)
 * URLs: EINVAL (malformed, no lock=NAME, an unknown parameter, a bad ttl or connect_timeout,
 * an unsupported scheme; Redis: a NUL byte, %00, in the lock name, user or password;
 * PostgreSQL: an option or value libpq refuses, e.g. sslmode=bogus, at
 * once with libpq's message), ELIBACC, ECONNREFUSED (also at once for a host=/socket/directory
 * where no server listens), EACCES, EIO (see the top); the reason is in
 * sync_distributed_lock_error_message().
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
 *   ESTALE   the caller's hold through this object, which is not RECURSIVE, was lost since it
 *            acquired it (broken; Redis: the lease expired; PostgreSQL: the session ended),
 *            whether or not someone else holds the lock now (the message says): this call
 *            ended that hold and acquired nothing; the next call tries afresh. Since 0.2 (before,
 *            EDEADLK until unlock reported the loss)
 *   EAGAIN   RECURSIVE: the holder's count would pass INT32_MAX
 *   EEXIST   something that is not a lock is at the path
 *   another errno from open/mkdir/rename or the fence file (EACCES, EROFS, ENOSPC, EIO...)
 *   a server backend's code: ELIBACC, ECONNREFUSED, EACCES, EIO (the server did not answer
 *            within connect_timeout, or the connection broke)
 */
int sync_distributed_lock_try_lock(sync_distributed_lock_t *lock);

/**
 * Acquires the lock. While another thread holds it through this object, sleeps until that hold
 * ends; while another holder has it, polls every poll_interval_ns (Redis: backing off from 1 ms
 * up to it), taking over a stale holder's lock (see sync_distributed_lock_recover), or, for
 * PostgreSQL, waits in the server. timeout_ns < 0 waits forever; 0 tries once: that try takes a
 * free lock whatever the time left (a server's answer is awaited up to connect_timeout). Any
 * poll_interval_ns > 0 is valid, up to INT64_MAX ("as rarely as possible"): the pauses never
 * outlast the timeout.
 * Returns 0, or:
 *   ETIMEDOUT  timeout_ns passed (CLOCK_MONOTONIC) and the lock is held (or the server did not
 *              answer: the message says so)
 *   EINTR      a signal handler ran while sleeping (file system, Redis): call again (with the
 *              remaining time) to keep waiting
 *   EINVAL     poll_interval_ns <= 0
 *   EDEADLK    the caller holds it through this object, which is not RECURSIVE; or timeout_ns < 0
 *              and the calling thread holds it through another object of this process
 *   ESTALE     the caller's hold through this object was lost: as sync_distributed_lock_try_lock
 *   EAGAIN, EEXIST, a server backend's code, or another errno as sync_distributed_lock_try_lock.
 */
int sync_distributed_lock_lock(sync_distributed_lock_t *lock, int64_t timeout_ns, int64_t poll_interval_ns);

/**
 * As sync_distributed_lock_lock, until an absolute CLOCK_MONOTONIC deadline (sync_monotonic_ns):
 * any negative deadline_ns waits forever, one in the past tries once (ETIMEDOUT if busy). Never
 * returns EINTR (it retries). PostgreSQL waits in the server (poll_interval_ns unused, but still
 * checked); a server that stops answering ends the wait at the deadline (ETIMEDOUT, the message
 * says the server did not answer; Redis: whichever request it was waiting for, a try or a
 * stale-holder check, each answered by the deadline) or, without one, after connect_timeout
 * (EIO). A call whose deadline has passed when it starts makes its one try as try_lock does:
 * its requests are answered within connect_timeout, so that it takes a free lock. A signal handler never extends a wait for a server. Returns 0,
 * ETIMEDOUT, EINVAL, EDEADLK, EAGAIN, EEXIST, a server backend's code, or another errno.
 */
int sync_distributed_lock_lock_until(sync_distributed_lock_t *lock, int64_t deadline_ns, int64_t poll_interval_ns);

/**
 * As sync_distributed_lock_lock_until, and returns EINTR when a signal handler ran during the
 * wait, and at least every 50 ms, so that an interpreter can run its signal handlers and call
 * again. PostgreSQL: the wait's request stays queued in the server at each EINTR, and the next
 * call goes on waiting for it (keeping its place, in the same session; the server logs one lock
 * timeout per connect_timeout at most). A caller that gives the wait up instead (it does not
 * call again) calls sync_distributed_lock_is_held (which never waits) or any other function on
 * the object: that withdraws the request, closing the session, so that the lock is never
 * granted to an idle object. PostgreSQL and Redis: every wait for the server in the call
 * (connecting, a request's answer: the try, Redis's stale-holder check) also ends with EINTR as
 * soon as a signal handler runs, so a server that stops answering never delays a signal by
 * connect_timeout; a Redis acquire request so abandoned is cancelled (as at a timeout), so it
 * never leaves a lease behind.
 * Returns the codes of lock_until and EINTR.
 */
int sync_distributed_lock_lock_interruptible(sync_distributed_lock_t *lock, int64_t deadline_ns, int64_t poll_interval_ns);

/**
 * As sync_distributed_lock_lock_interruptible, and asks cancelled(context) after each try that
 * finds the lock held (by another holder, or another thread through this object), before the wait
 * goes on: when it returns true, the call returns ECANCELED (a PostgreSQL request left queued is
 * withdrawn). Called on the calling thread, with no lock of libsync held, at least once per call
 * that does not acquire at its first try (and so at least every 50 ms while the caller calls
 * again after EINTR); never after the deadline passed (then ETIMEDOUT). cancelled NULL: never
 * cancelled (exactly sync_distributed_lock_lock_interruptible). For a caller with a condition of
 * its own to stop waiting (filelock's cancel_check), keeping the core's wait: its backoff, its
 * futex sleep for the object's other threads, its deadlock check.
 * Returns the codes of lock_interruptible and ECANCELED. Since 0.2.
 */
int sync_distributed_lock_lock_cancellable(sync_distributed_lock_t *lock, int64_t deadline_ns, int64_t poll_interval_ns,
                                           bool (*cancelled)(void *context), void *context);

/**
 * Whether target names a server (a URL, "scheme://...", the scheme made of ASCII letters and
 * '+') rather than a path: the rule sync_distributed_lock_create applies (a URL of another
 * scheme is then EINVAL; "é://x" is a path). False for NULL and for a target that is not UTF-8.
 * Touches nothing. Thread-safe. Since 0.2.
 */
bool sync_distributed_lock_is_url(const char *target);

/**
 * The target as sync_distributed_lock_path will spell the lock made for it, without making it:
 * a path absolute, trailing slashes dropped, its parent directory resolved (symbolic links
 * followed) as far as it exists, the missing rest as written less "." and ".." (so parents that
 * MAKE_PARENTS makes later read the same); a URL as given. Two spellings of one path get one
 * answer (a key for "the same lock file"). Writes it NUL-terminated into buffer (size bytes) and
 * its length without the NUL into *length (if length is not NULL, also on ERANGE).
 * Returns 0, EINVAL (target NULL, not UTF-8, or a path that names no file: empty, "/", ending in
 * "." or ".."), or ERANGE (buffer NULL or too small: call again with *length + 1 bytes).
 * Reads the file system (realpath), writes nothing. Thread-safe. Since 0.2.
 */
int sync_distributed_lock_canonical(const char *target, char *buffer, size_t size, size_t *length);

/**
 * The fencing token of the caller's hold into *token: strictly larger than the token of every
 * earlier acquisition of the lock, by any holder (file system: max(last + 1, wall-clock ns),
 * kept beside the lock; PostgreSQL: the sequence public.libsync_fencing_token of the database,
 * made on first use (a role that may not make or use it gets EACCES from the acquire, with the
 * message naming the CREATE SEQUENCE / GRANT USAGE to run once);
 * Redis: max(last + 1, server time in µs), in the key libsync:fence:NAME). A recursive re-entry keeps
 * the token. Returns 0, EPERM (the caller does not hold the lock through this object), EINVAL
 * (NULL). Not checked in the store: a lost hold keeps its token, which the resource then refuses.
 */
int sync_distributed_lock_token(const sync_distributed_lock_t *lock, uint64_t *token);

/**
 * The reason for the calling thread's last failed distributed-lock call, when it gave one beyond
 * its code (a server's message, a missing client library naming its Debian package, a malformed
 * URL, "the server did not answer"), else "". Valid until the thread's next distributed-lock
 * call; never NULL. Thread-local, so thread-safe.
 */
const char *sync_distributed_lock_error_message(void);

/**
 * Ends one acquisition by the caller (the holder thread, or with PROCESS_OWNED any thread of the
 * holding process); the last one releases the lock. Returns 0, or:
 *   EPERM   the caller does not hold the lock through this object (nobody does, another thread
 *           does, or the hold is a parent process's: a forked child never releases it)
 *   ESTALE  the hold was lost since this object acquired it (broken; Redis: the lease expired or
 *           the server lost it; PostgreSQL: the session ended, e.g. the server restarted), and
 *           nobody else is known to hold it now
 *   EBUSY   the hold was lost since this object acquired it, and someone else holds it now
 *   another errno (file system: of rename/rmdir; Redis: EIO, no answer): the lock is still
 *           held; unlock may be retried
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
 * PostgreSQL: ends the holder's session (pg_terminate_backend: needs the privilege to signal
 * it, else EACCES); Redis: deletes the key.
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

/** Whether the caller holds the lock through this object now (checked in the store: false once
 *  it was broken, its lease lost or its session ended; false in a forked child for its parent's
 *  hold). When the object neither holds nor waits, it also withdraws the request an interrupted
 *  sync_distributed_lock_lock_interruptible left queued in a PostgreSQL server (never waiting). */
bool sync_distributed_lock_is_held(const sync_distributed_lock_t *lock);

/** Whether the calling thread holds the lock through ANOTHER object of this process, so that
 *  sync_distributed_lock_lock through this one without a timeout returns EDEADLK (a caller that
 *  waits in its own loop of tries asks this instead). This process's bookkeeping only, no store
 *  access; false for NULL, and in a forked child for its parent's holds. Since 0.2. */
bool sync_distributed_lock_is_held_elsewhere(const sync_distributed_lock_t *lock);

/*
 * Loss notification. A holder whose hold is lost (file system: broken or taken over; Redis: its
 * lease expired, was deleted or taken; PostgreSQL: its session ended) learns it without asking
 * the store: sync_distributed_lock_lost() is one atomic load, and an event handler is called.
 * Redis also reports doubt: SUSPENDED when a renewal gets no answer (the server is stopped or
 * cut off: the lease may run out meanwhile), RESUMED when one succeeds again. How soon each
 * backend notices (docs/distributed_lock.md, "Learning that a hold was lost"):
 *   file system  a per-process thread looks at each hold's entry every 250 ms (one stat)
 *   PostgreSQL   the same thread polls each holding session's socket: a session the server
 *                ends (pg_terminate_backend, restart, crash) is noticed at once; a server host
 *                that vanishes, once the connection's keepalives give up (connect_timeout + 3 s)
 *   Redis        the lease's next renewal (one renewal interval: see redis:// above) finds it
 *                gone, or gets no answer within min(connect_timeout, the renewal interval)
 *   etcd         the lease's next keep-alive (every ttl/3) finds it gone (LOST), or gets no
 *                answer within min(connect_timeout, ttl/3) (SUSPENDED; RESUMED when one is
 *                answered again); after each keep-alive one read finds a deleted key (LOST)
 * and, on every backend, an unlock that returns ESTALE or EBUSY. A stopped or unreachable
 * PostgreSQL server is not reported: nobody else can take the lock from it meanwhile.
 */

/** Events of sync_distributed_lock_event_fn, and states of sync_distributed_lock_hold_state. */
#define SYNC_DISTRIBUTED_LOCK_SUSPENDED 1 /* Redis: a renewal got no answer: the hold is in doubt */
#define SYNC_DISTRIBUTED_LOCK_RESUMED   2 /* a renewal succeeded again after SUSPENDED (an event only) */
#define SYNC_DISTRIBUTED_LOCK_LOST      3 /* the hold is gone: another may hold the lock. Final. */

/** An event handler: `lock` is the object, `event` SUSPENDED, RESUMED or LOST, `context` the
 *  pointer given to sync_distributed_lock_set_event_handler. */
typedef void (*sync_distributed_lock_event_fn)(sync_distributed_lock_t *lock, int event, void *context);

/**
 * Calls handler(lock, event, context) for what this process learns of the object's holds after
 * acquiring them: LOST (at most once per acquisition), SUSPENDED and RESUMED (Redis). NULL stops.
 * Replaces any earlier handler; when this returns, the earlier one is not running and is never
 * called again (unless this is called from that handler itself), so its context may be freed.
 * sync_distributed_lock_destroy does the same.
 * Threading: the handler runs on libsync's notifier thread (one per process, all signals
 * blocked), one call at a time, in the order the events were noticed, and never with a lock of
 * libsync held. It may call any libsync function, on this object too: is_held, holder, and
 * unlock for a PROCESS_OWNED object (a thread-owned hold can only be ended by its holder
 * thread, whose unlock then returns ESTALE or EBUSY; the handler's unlock returns EPERM), and
 * set_event_handler or destroy. It should return soon: it delays the process's later events.
 * An event whose object has no handler when it is noticed is not queued (the state still
 * changes: sync_distributed_lock_hold_state). A forked child keeps the handler, for its own holds.
 * Returns 0, or EINVAL (lock is NULL). Since 0.2.
 */
int sync_distributed_lock_set_event_handler(sync_distributed_lock_t *lock, sync_distributed_lock_event_fn handler,
                                            void *context);

/**
 * The state of the object's latest hold in this process, as far as this process has learned:
 * 0 (in place; or released, or never held), SYNC_DISTRIBUTED_LOCK_SUSPENDED or
 * SYNC_DISTRIBUTED_LOCK_LOST. One atomic load, no store access: cheap enough to check before
 * each write of a critical section. The next acquisition starts again at 0. 0 for NULL.
 * Since 0.2.
 */
int sync_distributed_lock_hold_state(const sync_distributed_lock_t *lock);

/** sync_distributed_lock_hold_state(lock) == SYNC_DISTRIBUTED_LOCK_LOST (false for NULL). Since 0.2. */
bool sync_distributed_lock_lost(const sync_distributed_lock_t *lock);

/* ---- Read/write lock (shared/exclusive): file system, PostgreSQL, Redis, etcd -------------- *
 * Many readers or one writer, across processes and hosts sharing a file system (filelock's
 * ReadWriteLock), or a PostgreSQL, Redis or etcd server (a URL, as sync_distributed_lock_create's:
 * shared/exclusive advisory locks; a writer key and a readers' set on leases; etcd's RWMutex
 * recipe; docs/distributed_lock.md, "On the servers"). The file system's protocol (docs/distributed_lock.md, "Read/write lock"): the lock's
 * directory at `path` is a gate that a reader holds only while it registers its share in
 * `.<name>.readers/` beside it, and that a writer keeps while it waits for the readers to leave,
 * so new readers wait behind a writer (writer-preferring). Every token, a reader's or a
 * writer's, is drawn by the gate's holder from the lock's fencing counter: tokens increase
 * across both sides in the order the holds began. A dead holder on this host (reader or writer)
 * is recovered by the next acquirer. A path is used either by read/write lock objects or by
 * sync_distributed_lock_t objects, never both.
 *
 * One object is one holder: its read hold is re-entered by any of its threads (counted), its
 * write hold only by the thread that took it; asking for the other kind while it holds is
 * EDEADLK (no upgrade or downgrade). A forked child never holds or releases its parent's hold.
 * Every function is thread-safe. Reasons for errors: sync_distributed_lock_error_message(). */
typedef struct sync_distributed_rwlock sync_distributed_rwlock_t;

#define SYNC_DISTRIBUTED_RWLOCK_READ  1 /* shared */
#define SYNC_DISTRIBUTED_RWLOCK_WRITE 2 /* exclusive */

/**
 * Makes a read/write lock object for the file-system `path` (UTF-8), stored in *lock; nothing is
 * made on disk until the first acquire (but missing parents, with MAKE_PARENTS). A
 * `postgresql://`, `redis://` or `etcd://` URL (sync_distributed_lock_create_with's grammar)
 * makes the lock on that server instead, and connects now (mode must be -1; MAKE_PARENTS is
 * ignored): PostgreSQL shared/exclusive advisory locks, Redis and etcd as docs/distributed_lock.md
 * describes; a waiting writer stops new readers there too, and a dead holder's share or hold is
 * recovered within its lease (PostgreSQL: when its session ends). Since 1.7 for URLs. flags: 0 or
 * SYNC_DISTRIBUTED_LOCK_MAKE_PARENTS and SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED (the write hold is
 * the process's: any of its threads re-enters or releases it, and continues or cancels a waiting
 * write claim); mode as sync_distributed_lock_create_with's.
 * Returns 0, or sync_distributed_lock_create_with's creation errors (EINVAL also for another
 * flag, or mode outside -1...0777, or a mode with a URL).
 */
int sync_distributed_rwlock_create(const char *path, unsigned flags, int mode, sync_distributed_rwlock_t **lock);

/** Destroys the object (NULL: nothing); a hold of this process through it is released first. */
void sync_distributed_rwlock_destroy(sync_distributed_rwlock_t *lock);

/** The lock's target: an absolute path, or the URL without its password (valid until destroy;
 *  NULL for a NULL object). Since 1.7. */
const char *sync_distributed_rwlock_path(const sync_distributed_rwlock_t *lock);

/**
 * One try to acquire `kind` (SYNC_DISTRIBUTED_RWLOCK_READ or _WRITE).
 * Returns 0; EBUSY (another holds it, or a writer waits for it); EDEADLK (this object holds the
 * other kind, or another of its threads holds it for writing); EAGAIN (re-entry count overflow);
 * EINVAL (NULL lock, bad kind); EEXIST (something that is not a lock is at path); another errno.
 */
int sync_distributed_rwlock_try_lock(sync_distributed_rwlock_t *lock, int kind);

/**
 * Acquires `kind`, trying every poll_ns while others hold it, for up to timeout_ns (< 0: no
 * limit). A writer keeps the gate while it waits for readers. Returns try_lock's codes, but
 * ETIMEDOUT instead of EBUSY; EINVAL also for poll_ns <= 0.
 */
int sync_distributed_rwlock_lock(sync_distributed_rwlock_t *lock, int kind, int64_t timeout_ns, int64_t poll_ns);

/**
 * sync_distributed_rwlock_lock until the CLOCK_MONOTONIC deadline_ns (< 0: none), returning EINTR
 * after at most 50 ms of waiting so that the caller can run its signal handlers; call again to
 * go on (a writer's claim is kept between the calls), or sync_distributed_rwlock_cancel to give
 * the wait up.
 */
int sync_distributed_rwlock_lock_interruptible(sync_distributed_rwlock_t *lock, int kind, int64_t deadline_ns,
                                               int64_t poll_ns);

/** Gives up the calling thread's write claim kept by an interrupted wait (nothing if none). */
void sync_distributed_rwlock_cancel(sync_distributed_rwlock_t *lock);

/**
 * Ends one acquisition of the caller; the last releases the hold (unlock_all: all of them).
 * Returns 0; EPERM (the caller holds nothing through this object, or it is held for writing by
 * another of its threads); ESTALE (the hold was broken meanwhile: released); EBUSY (broken, and
 * another holds the lock now); EINVAL (NULL); another errno (still held).
 */
int sync_distributed_rwlock_unlock(sync_distributed_rwlock_t *lock);
int sync_distributed_rwlock_unlock_all(sync_distributed_rwlock_t *lock);

/** The kind held through this object (0: none), and how many acquisitions (0 for NULL). */
int sync_distributed_rwlock_kind(sync_distributed_rwlock_t *lock);
int sync_distributed_rwlock_count(sync_distributed_rwlock_t *lock);

/**
 * The fencing token of the object's hold, in *token: larger than the token of every hold of the
 * lock that began earlier, reader's or writer's. Returns 0, EPERM (not held), EINVAL (NULL).
 */
int sync_distributed_rwlock_token(sync_distributed_rwlock_t *lock, uint64_t *token);

/** Removes the lock whoever holds it (the gate's holder and every reader). Returns 0 or an errno. */
int sync_distributed_rwlock_break(sync_distributed_rwlock_t *lock);

/** An event handler of a read/write lock: `lock` is the object, `event` SUSPENDED, RESUMED or
 *  LOST (SYNC_DISTRIBUTED_LOCK_*), `context` the pointer given to the setter. */
typedef void (*sync_distributed_rwlock_event_fn)(sync_distributed_rwlock_t *lock, int event, void *context);

/**
 * Loss notification for a server's read/write lock (postgresql://, redis://, etcd://): calls
 * handler(lock, event, context) for what this process learns of the object's holds, read or
 * write, after acquiring them, as sync_distributed_lock_set_event_handler (same thread, same
 * rules); NULL handler: none. Returns 0; ENOTSUP for a file-system lock (it has no detector: its
 * unlock says ESTALE); EINVAL (lock is NULL). Since 1.7.
 */
int sync_distributed_rwlock_set_event_handler(sync_distributed_rwlock_t *lock, sync_distributed_rwlock_event_fn handler,
                                              void *context);

/** The state of the object's latest hold: 0 (in place, released, none; always for a file-system
 *  lock), SYNC_DISTRIBUTED_LOCK_SUSPENDED or SYNC_DISTRIBUTED_LOCK_LOST. One atomic load per side.
 *  Since 1.7. */
int sync_distributed_rwlock_hold_state(const sync_distributed_rwlock_t *lock);

/** sync_distributed_rwlock_hold_state(lock) == SYNC_DISTRIBUTED_LOCK_LOST (false for NULL). Since 1.7. */
bool sync_distributed_rwlock_lost(const sync_distributed_rwlock_t *lock);
/* ---- Distributed counting semaphore: at most N holders at a time (every backend) ----------
 *
 * A target as the lock's (a path, or a postgresql://, redis:// or etcd:// URL with lock=NAME)
 * and a count of permits, 1...SYNC_DISTRIBUTED_SEMAPHORE_MAX_PERMITS. Each object holds at most
 * one permit; its holder is the thread that acquired it (the process, with
 * SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED). Each acquisition gets a fencing token, larger than every
 * earlier acquisition's of the semaphore, whichever permit. A holder that dies gives its permit
 * back: PostgreSQL at once, Redis and etcd when its lease runs out (ttl to ttl + ttl/3), the file
 * system at the next acquire on its host. Every client must give the same count: while a permit
 * is held, an acquire with another count fails with EINVAL. The protocols are in
 * docs/distributed_lock.md. Every function is thread-safe. Reasons for errors:
 * sync_distributed_lock_error_message(). */
typedef struct sync_distributed_semaphore sync_distributed_semaphore_t;

#define SYNC_DISTRIBUTED_SEMAPHORE_MAX_PERMITS 10000

/**
 * Makes a semaphore object of `permits` for `target` (UTF-8), stored in *semaphore; a server
 * target is connected now. flags: 0 or SYNC_DISTRIBUTED_LOCK_PROCESS_OWNED, _MAKE_PARENTS,
 * _RELEASE_ON_DESTROY. Returns 0; EINVAL (NULL, permits outside 1...MAX_PERMITS, another flag, a
 * bad target); or sync_distributed_lock_create_with's errors for the target.
 */
int sync_distributed_semaphore_create(const char *target, int permits, unsigned flags,
                                      sync_distributed_semaphore_t **semaphore);

/** Destroys the object (NULL: nothing); with RELEASE_ON_DESTROY, its permit is given back first. */
void sync_distributed_semaphore_destroy(sync_distributed_semaphore_t *semaphore);

/** The target (a URL without its password), valid while the object lives; NULL for NULL. */
const char *sync_distributed_semaphore_path(const sync_distributed_semaphore_t *semaphore);

/** The count of permits the object was made with (-1 for NULL). */
int sync_distributed_semaphore_permits(const sync_distributed_semaphore_t *semaphore);

/**
 * Takes a permit if one is free; never waits but for the store's answer.
 * Returns 0; EBUSY (all taken, or another thread of this object holds its permit); EDEADLK (the
 * caller holds this object's permit); EINVAL (NULL, or the holders gave another count); ESTALE
 * (the caller's permit was lost: this call ended it); a backend's error (ECONNREFUSED, EACCES,
 * EIO, ELIBACC), or another errno.
 */
int sync_distributed_semaphore_try_acquire(sync_distributed_semaphore_t *semaphore);

/**
 * Waits for a permit for up to timeout_ns (< 0: no limit), polling at most every poll_ns (etcd
 * waits on a watch). Returns try_acquire's codes, but ETIMEDOUT instead of EBUSY; EINVAL also for
 * poll_ns <= 0.
 */
int sync_distributed_semaphore_acquire(sync_distributed_semaphore_t *semaphore, int64_t timeout_ns, int64_t poll_ns);

/** sync_distributed_semaphore_acquire until the CLOCK_MONOTONIC deadline_ns (< 0: none). */
int sync_distributed_semaphore_acquire_until(sync_distributed_semaphore_t *semaphore, int64_t deadline_ns,
                                             int64_t poll_ns);

/**
 * sync_distributed_semaphore_acquire_until, returning EINTR when a signal handler ran and at
 * least every 50 ms, so that the caller can run its handlers; call again to go on (an etcd
 * waiter's key stays queued between the calls, until the deadline).
 */
int sync_distributed_semaphore_acquire_interruptible(sync_distributed_semaphore_t *semaphore, int64_t deadline_ns,
                                                     int64_t poll_ns);

/**
 * Gives the caller's permit back. Returns 0; EPERM (the caller holds no permit through this
 * object); ESTALE (it was lost meanwhile: its lease ended, its session broke, it was broken; it
 * is released); EINVAL (NULL); another errno (still held: retry).
 */
int sync_distributed_semaphore_release(sync_distributed_semaphore_t *semaphore);

/** The fencing token of the caller's permit, in *token. Returns 0, EPERM (none held), EINVAL. */
int sync_distributed_semaphore_token(const sync_distributed_semaphore_t *semaphore, uint64_t *token);

/** Whether the caller holds a permit through this object now (asked of the store). */
bool sync_distributed_semaphore_is_held(const sync_distributed_semaphore_t *semaphore);

/**
 * The state of the object's latest permit in this process, one atomic load: 0 (in place,
 * released, or none), SYNC_DISTRIBUTED_LOCK_SUSPENDED or SYNC_DISTRIBUTED_LOCK_LOST (its loss was
 * noticed: lease ended, session broke, broken).
 */
int sync_distributed_semaphore_hold_state(const sync_distributed_semaphore_t *semaphore);

/** Removes every permit (and etcd's queued waiters), whoever holds them. Returns 0 or an errno. */
int sync_distributed_semaphore_break(sync_distributed_semaphore_t *semaphore);

#ifdef __cplusplus
}
#endif
#endif /* SYNC_DISTRIBUTED_LOCK_H */
