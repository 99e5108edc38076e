import Glibc

// The store's side of a distributed lock: what every backend (FileBackend.swift,
// PostgresBackend.swift, RedisBackend.swift) implements, and the helpers they share.

/// Where a lock is kept: a file system, a PostgreSQL server, a Redis server.
protocol LockBackend: Sendable {
    /// The target as users see it: an absolute path, or a URL without its password.
    var name: String { get }
    /// Whether a wait is one request that the store answers when the lock is granted (else the
    /// waiter polls).
    var waitsInStore: Bool { get }
    /// Whether an async wait queues a request in the store too (`LockSession.queueWait`);
    /// else it polls. (Default: false.)
    var queuesAsyncWaits: Bool { get }
    /// A polling wait's first pause, doubled after each busy try up to the poll interval; nil:
    /// every pause is the poll interval.
    var firstPollNanoseconds: Int64? { get }
    /// A session for one process's side of one object (not connected yet).
    func makeSession(_ me: ProcessIdentity) -> any LockSession
    /// Arms `ticket` to be fired when the store tells this process that the lock may be free
    /// (AsyncWake.swift): true if armed (`disarmWake` it after the wait); false if the store
    /// tells nothing (the async wait polls). (Default: false.)
    func armWake(_ ticket: WakeTicket) -> Bool
    func disarmWake(_ ticket: WakeTicket)
}

/// One process's access to the store for one object: its connection, its hold and the hold's
/// token. Used under the object's state lock, or by the one thread that waits in the store
/// (`State.waiting`). Each returns 0 or an errno, recording a detailed reason for a backend's
/// failures in `DistributedLockMessage`.
protocol LockSession: AnyObject {
    /// Connects now (a server's session): 0 or an errno.
    func open() -> Int32
    /// One try: 0 (held, `token` set), EBUSY, or an errno. With no time left (the monotonic
    /// `deadline` passed; < 0: none) it still tries, so that a free lock is taken; a server that
    /// does not answer within its I/O timeout gives ETIMEDOUT when the deadline passed, else EIO.
    func tryAcquire(deadline: Int64) -> Int32
    /// Waits in the store until the monotonic `deadline` (ns, < 0: none): 0, ETIMEDOUT, EINTR
    /// (`interruptible`: a signal handler ran, or 50 ms passed), or an errno. Only for backends
    /// that `waitsInStore`.
    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32
    /// Ends the hold: 0; ESTALE (lost meanwhile, nobody else known to hold it); EBUSY (lost,
    /// another holds it); or an errno (still held).
    func release() -> Int32
    /// Takes over a stale holder's lock: 0, EBUSY, ENOENT (free), or an errno. A server's
    /// answers are awaited until the monotonic `deadline` (< 0: none; a wait's, which it never
    /// outlasts: ETIMEDOUT once it passed) or connect_timeout, whichever is sooner.
    func recoverStale(deadline: Int64) -> Int32
    /// Removes the lock whoever holds it: 0 or an errno.
    func breakLock() -> Int32
    /// The current holder: (holder, 0), (nil, 0) when free, or (nil, errno).
    func holder() -> (DistributedLockHolder?, Int32)
    /// Whether this session's hold is still in place in the store.
    func holds() -> Bool
    /// The fencing token of the current hold.
    var token: UInt64 { get }
    /// The object goes away in this process: releases the hold if `releasing`, frees the rest.
    func close(releasing: Bool)
    /// Withdraws what an interrupted interruptible wait left in the store for the next call to
    /// go on with (its queued request), without waiting for the server.
    func withdrawWait()
    /// An async wait's step, which never waits: queues a request in the store unless one is
    /// queued (or its server-side slice ended), else looks at its answer. 0 (granted: held),
    /// EBUSY (queued: look again later), ETIMEDOUT (the monotonic `deadline` passed: withdrawn),
    /// or an errno (withdrawn). `withdrawWait` withdraws it. Only for backends that
    /// `queuesAsyncWaits`.
    func queueWait(deadline: Int64) -> Int32
    /// Hands the hold just acquired to the backend's detector, which reports its loss (and
    /// doubt) to `ticket` (HoldLoss.swift); it stops watching at release and close.
    func watch(_ ticket: HoldTicket)
}

extension LockSession {
    /// (Backends whose interrupted waits leave nothing behind.)
    func withdrawWait() {}
    /// (Backends whose async waits poll.)
    func queueWait(deadline: Int64) -> Int32 { ENOTSUP }
}

extension LockBackend {
    var queuesAsyncWaits: Bool { false }
    func armWake(_ ticket: WakeTicket) -> Bool { false }
    func disarmWake(_ ticket: WakeTicket) {}
}

// MARK: Helpers of the backends

/// The wall clock in ns since the Unix epoch.
func wallClockNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}

/// FNV-1a, 64 bits: a hash of `text` that every process and host computes alike (lock names to
/// keys). Not collision-resistant against an adversary; see the backends for what a collision does.
func stableHash(_ text: String) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
    }
    return hash
}
