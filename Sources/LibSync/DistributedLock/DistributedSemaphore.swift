import Glibc

// The distributed counting semaphore: at most N holders of one name at a time, across processes
// and hosts, on every backend of the distributed lock. Each object holds at most one permit; each
// acquisition gets a fencing token, strictly larger than every earlier acquisition's of the
// semaphore (whichever permit), and the permit of a holder that dies is recovered (within its
// lease on Redis and etcd, at once on PostgreSQL and, on the holder's own host, on the file
// system).
//
// A permit is a hold of a `DistributedLock` whose backend is one of the permit backends below:
// the lock's machinery (threads of one object taking turns, waiting, timeouts, loss
// notification) is the same, and only the store's protocol differs. The protocols (also in
// docs/distributed_lock.md, "Distributed semaphore"):
//
// file system   the GATE is an exclusive lock at `path` (the lock's directory protocol); the
//               PERMITS are holder entries in `.<name>.permits/`, beside it, and `permits=N` (an
//               empty file there) records N. acquire: take the gate (taking over a stale gate
//               holder), remove the stale permits (this host, process gone), count the live ones,
//               check N, draw a token from `.<name>.fence` and move the gate entry into
//               `.permits/` (one rename: the permit is registered and the gate free) — or release
//               the gate (all taken). release: move the permit entry out. Only the gate's holder
//               counts, removes stale permits and draws tokens: tokens are drawn in one order.
// PostgreSQL    N session advisory locks (K, 0) ... (K, N-1), K a 32-bit hash of the name, tried in
//               one statement from a random slot on; the holder also holds the shared locks
//               (K', 0) and (K', N) (K' another hash), and an acquirer that sees (K', M) held
//               with M != N refuses (unless it found (K', 0) free: nobody holds a permit). Token: nextval of the lock's sequence. The server frees a dead holder's
//               slot when its session ends. The try is one statement, prepared once per connection.
// Redis         a Lua script: the set `libsync:semaphore:NAME` lists the holders' entries, each
//               with its lease, the key `libsync:permit:NAME:<entry>` (PX ttl + ttl/3, renewed every
//               ttl/3 by the lock's lease renewer); the script drops members whose lease is gone,
//               counts, checks N (`libsync:semaphore-permits:NAME`, while a permit is held),
//               adds the entry, and draws the token max(last + 1, server µs) from
//               `libsync:semaphore-fence:NAME`. One round trip.
// etcd          keys under `libsync/semaphore/NAME/` on the process's lease, value "N entry";
//               the first N keys by create revision hold, and the token is the key's create
//               revision. try: one txn (put mine and read the first N: a txn reads its own
//               put); wait: put mine, then watch the range for deletions (no polling) until
//               fewer than N keys precede it. The oldest key's N is the semaphore's: a key with
//               another N is refused.

/// A counting semaphore between processes and hosts: at most `permits` holders at a time, kept
/// in a file system (a path), a PostgreSQL, Redis or etcd server (a URL, as
/// `DistributedLock`'s). Each object holds at most one permit (a holder wanting two uses two
/// objects); its holder is the thread that acquired it (the process, with `.processOwned`).
/// Every acquisition gets a fencing token (`token`), larger than every earlier one of the
/// semaphore. Every client of one semaphore must give the same `permits`: while a permit is
/// held, an acquire giving another count fails with `.invalidTarget` (EINVAL); once none is held,
/// the next acquirer's count is the semaphore's. Thread-safe.
public final class DistributedSemaphore: Sendable {
    /// The largest count of permits: each permit is a holder with a connection or lease of its
    /// own, and a try reads up to N entries of the store (file: a directory of N entries;
    /// PostgreSQL: N try-locks; etcd: N keys), so a larger count is a mistake, not a need.
    public static let maxPermits = 10_000

    /// The target: an absolute path (parent resolved), or the URL without its password.
    public let path: String
    /// How many holders at a time.
    public let permits: Int
    /// The permit's hold, on a permit backend.
    let lock: DistributedLock
    /// `path` as a C string, for the C API (freed with the object).
    package var cPath: UnsafeMutablePointer<CChar> { lock.cPath }

    /// A semaphore of `permits` (1...`maxPermits`) at `target`: a path whose parent directory
    /// exists (or, with `.makeParents`, is made), or a `postgresql://`, `redis://`, `etcd://` or
    /// `etcds://` URL naming it with `lock=NAME` (connected now). Options: `.processOwned`, `.makeParents`,
    /// `.releaseOnDeinit`.
    public convenience init(_ target: String, permits: Int, options: DistributedLock.Options = []) throws(DistributedLockError) {
        let (made, code) = Self.make(target, permits: permits, options: options.rawValue)
        guard let made else {
            throw DistributedLockError(code: code, operation: .create, path: target, detail: DistributedLockMessage.detail)
        }
        self.init(made.lock, permits: permits)
    }

    private init(_ lock: DistributedLock, permits: Int) {
        self.lock = lock
        self.permits = permits
        path = lock.path
    }

    /// The options a semaphore takes.
    package static let allowedOptions: DistributedLock.Options = [.processOwned, .makeParents, .releaseOnDeinit]

    /// (semaphore, 0) or (nil, errno: EINVAL for a bad count, option or target, or the lock's
    /// creation errors), the reason recorded in `DistributedLockMessage`.
    package static func make(_ target: String, permits: Int, options: UInt32) -> (DistributedSemaphore?, Int32) {
        DistributedLockMessage.clear()
        guard permits >= 1 && permits <= maxPermits else {
            return (nil, DistributedLockMessage.fail(EINVAL, "a distributed semaphore has 1...\(maxPermits) permits, not \(permits)"))
        }
        let chosen = DistributedLock.Options(rawValue: options)
        guard chosen.isSubset(of: allowedOptions) else {
            return (nil, DistributedLockMessage.fail(EINVAL, "a distributed semaphore takes the options processOwned, makeParents and releaseOnDeinit only"))
        }
        let (backend, code) = permitBackend(target, permits: permits, options: chosen)
        guard let backend else { return (nil, code) }
        let identity = "semaphore \(ProcessIdentity.nextSerial()) " + LockIdentity.of(backend.name)
        let (lock, opened) = DistributedLock.make(backend: backend, options: chosen, identity: identity)
        guard let lock else { return (nil, opened) }
        return (DistributedSemaphore(lock, permits: permits), 0)
    }

    private static func permitBackend(_ target: String, permits: Int, options: DistributedLock.Options) -> ((any LockBackend)?, Int32) {
        guard let end = target.firstRange(of: "://"), DistributedLock.isURL(target) else {
            let (place, code) = LockDirectory.locate(target, mode: nil, options: options)
            return (place.map { FilePermitBackend(directory: $0, permits: permits) }, code)
        }
        switch target[..<end.lowerBound].lowercased() {
        case "postgresql", "postgres":
            let (base, code) = PostgresBackend.make(url: target)
            guard let base = base as? PostgresBackend else { return (nil, code) }
            return (PostgresPermitBackend(base: base, permits: permits), 0)
        case "redis":
            let (base, code) = RedisBackend.make(url: target)
            guard let base = base as? RedisBackend else { return (nil, code) }
            return (RedisPermitBackend(base: base, permits: permits), 0)
        case "etcd", "etcds":
            let (base, code) = EtcdBackend.make(url: target)
            guard let base = base as? EtcdBackend else { return (nil, code) }
            return (EtcdPermitBackend(lockBackend: base, permits: permits), 0)
        default:
            return (nil, DistributedLockMessage.fail(EINVAL, "unsupported semaphore URL scheme in '\(LockURL.redacted(target))' (use a path, postgresql://, postgres://, redis://, etcd:// or etcds://)"))
        }
    }

    // MARK: Operations returning errno codes (the C API calls these; the Swift API wraps them).

    /// Takes a permit if one is free; never waits (beyond the store's answer). 0, EBUSY (all
    /// taken, or another thread of this object holds its permit), EDEADLK (the caller holds this
    /// object's permit), EINVAL (the semaphore's holders gave another count), ESTALE (the
    /// caller's permit was lost: this call ended it), or the lock's errors.
    package func tryAcquireCode() -> Int32 { lock.tryLockCode() }

    /// Waits for a permit until the monotonic `deadline` (< 0: none), polling every
    /// `pollNanoseconds` at most (etcd waits on a watch). 0, ETIMEDOUT, EINVAL, or as `tryAcquireCode`.
    /// `interruptible`: returns EINTR when a signal handler ran, and at least every 50 ms (an
    /// etcd waiter's key stays queued for the next call).
    package func acquireCode(deadline: Int64, pollNanoseconds: Int64, interruptible: Bool = false) -> Int32 {
        lock.lockCode(deadline: deadline, pollNanoseconds: pollNanoseconds, interrupts: interruptible ? .sliced : .retried)
    }

    /// Releases the caller's permit: 0, EPERM (the caller holds none through this object),
    /// ESTALE (it was lost meanwhile: its lease ended, it was broken), or an errno (still held).
    package func releaseCode() -> Int32 {
        let code = lock.unlockCode()
        return code == EBUSY ? ESTALE : code
    }

    /// (token, 0), or (0, EPERM) when the caller holds no permit through this object.
    package func tokenCode() -> (UInt64, Int32) { lock.tokenCode() }

    /// Whether the caller holds a permit through this object now (asked of the store).
    package func isHeldByCaller() -> Bool { lock.isHeldByCaller() }

    /// 0, `DistributedLockEvent.suspended` or `.lost` (raw values): one atomic load.
    package func holdStateCode() -> Int32 { lock.holdStateCode() }

    /// Removes every permit and waiter, whoever holds them: 0 or an errno.
    package func breakCode() -> Int32 { lock.breakLockCode() }

    // MARK: Swift API

    /// Takes a permit if one is free: false when all are taken.
    public func tryAcquire() throws(DistributedLockError) -> Bool {
        let code = tryAcquireCode()
        if code == EBUSY { return false }
        try check(code, .tryLock)
        return true
    }

    /// Waits for a permit, polling at most every `pollInterval` (etcd: a watch).
    public func acquire(pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        try check(acquireCode(deadline: Deadline.none, pollNanoseconds: Deadline.nanoseconds(pollInterval)), .lock)
    }

    /// As `acquire(pollInterval:)` for at most `timeout`: false once it has passed, with nothing acquired.
    public func tryAcquire(timeout: Duration, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) -> Bool {
        let code = acquireCode(deadline: Deadline.after(timeout), pollNanoseconds: Deadline.nanoseconds(pollInterval))
        if code == ETIMEDOUT { return false }
        try check(code, .lock)
        return true
    }

    /// Gives the permit back. Throws `.notHeld` if the caller holds none through this object,
    /// `.broken` if it was lost meanwhile (its lease ended, or it was broken).
    public func release() throws(DistributedLockError) { try check(releaseCode(), .unlock) }

    /// The fencing token of the caller's permit (nil: it holds none).
    public var token: UInt64? {
        let (token, code) = tokenCode()
        return code == 0 ? token : nil
    }

    /// Whether the caller holds a permit through this object now (asked of the store).
    public var isHeld: Bool { isHeldByCaller() }

    /// Whether the latest permit's loss was noticed (its lease ended, its session broke, it was
    /// broken): one atomic load, no store access.
    public var isLost: Bool { holdStateCode() == DistributedLockEvent.lost.rawValue }

    /// Tells `handler` what this process learns of the object's permits (`.lost`, `.suspended`,
    /// `.resumed`), as `DistributedLock.setEventHandler`; nil stops.
    public func setEventHandler(_ handler: (@Sendable (DistributedSemaphore, DistributedLockEvent) -> Void)?) {
        guard let handler else { lock.setEventHandler(nil); return }
        lock.setEventHandler { [weak self] _, event in if let self { handler(self, event) } }
    }

    /// Removes every permit (and etcd's queued waiters), whoever holds them.
    public func breakLock() throws(DistributedLockError) { try check(breakCode(), .breakLock) }

    /// Runs `body` holding a permit, releases it, and returns `body`'s value; rethrows `body`'s
    /// error, else throws the release's (`.broken`: the permit was lost while `body` ran).
    public func withPermit<R>(pollInterval: Duration = .milliseconds(10), _ body: () throws -> R) throws -> R {
        try acquire(pollInterval: pollInterval)
        let result: R
        do { result = try body() } catch { try? release(); throw error }
        try release()
        return result
    }

    private func check(_ code: Int32, _ operation: DistributedLockOperation) throws(DistributedLockError) {
        if code != 0 { throw DistributedLockError(code: code, operation: operation, path: path, detail: DistributedLockMessage.detail) }
    }
}

/// The message of a count that disagrees with the semaphore's.
private func mismatch(_ name: String, recorded: Int, mine: Int) -> Int32 {
    DistributedLockMessage.fail(EINVAL, "the semaphore \(name) has \(recorded) permits (its holders say so), not \(mine): "
                                + "every client of a semaphore must give the same count")
}

// MARK: - File system

struct FilePermitBackend: LockBackend {
    let directory: LockDirectory
    let permits: Int
    var name: String { directory.path }
    var waitsInStore: Bool { false }
    var firstPollNanoseconds: Int64? { 1_000_000 }
    func makeSession(_ me: ProcessIdentity) -> any LockSession { FilePermitSession(self, me) }
}

extension LockDirectory {
    /// The permits' directory beside the gate: `.<name>.permits` (a long name: as `fenceName`).
    var permitsName: String {
        let plain = "." + base + ".permits"
        if plain.utf8.count <= Int(NAME_MAX) { return plain }
        return carrierPrefix.dropLast(4) + String(stableHash(base), radix: 16) + ".permits"
    }

    /// The permits' directory as a lock directory of its own, whose entries are the permits
    /// (for `HoldWatcher`, which looks for `base/entry`).
    var permitsDirectory: LockDirectory {
        LockDirectory(parent: parent, base: permitsName, carrierPrefix: carrierPrefix, mode: mode, makeParents: false,
                      removeOnRelease: false, takeOverPlainFile: false)
    }
}

private let permitsRecord = "permits="

final class FilePermitSession: LockSession {
    let backend: FilePermitBackend
    let me: ProcessIdentity
    var directory: LockDirectory { backend.directory }
    /// The gate hold (only during an acquire) and the object's carrier.
    var hold = DiskHold()
    /// The permit's entry in `.permits/`, while held.
    var permit: String?
    var token: UInt64 = 0
    private var watching: (id: UInt64, ticket: HoldTicket)?

    init(_ backend: FilePermitBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
    }

    func open() -> Int32 { 0 }

    /// Takes the gate: 0 or EBUSY (another acquirer has it: it keeps it for a few steps only, so
    /// a try yields and tries again, a bounded number of times), or an errno.
    private func takeGate() -> Int32 {
        var code = EBUSY
        for _ in 0..<64 {
            code = directory.acquire(&hold, as: me)
            if code == EBUSY {
                code = directory.recoverStale(&hold, as: me)
                if code == ENOENT { code = directory.acquire(&hold, as: me) }
            }
            if code != EBUSY { return code }
            sched_yield()
        }
        return code
    }

    func tryAcquire(deadline: Int64) -> Int32 {
        let gate = takeGate()
        if gate != 0 { return gate }
        guard let entry = hold.held else { return EIO }
        func giveBack(_ code: Int32) -> Int32 {
            _ = directory.release(entry, &hold, as: me)
            hold.held = nil
            return code
        }
        let (live, recorded, fault) = scan()
        if fault != 0 { return giveBack(fault) }
        if live > 0, let recorded, recorded != backend.permits {
            return giveBack(mismatch(directory.path, recorded: recorded, mine: backend.permits))
        }
        if live >= backend.permits { return giveBack(EBUSY) }
        if recorded != backend.permits {
            let written = record(replacing: recorded)
            if written != 0 { return giveBack(written) }
        }
        let (drawn, drawFault) = directory.nextToken()
        if drawFault != 0 { return giveBack(drawFault) }
        let moved = enter(entry)
        if moved == ESTALE { return EBUSY }  // the gate was broken meanwhile: nothing held
        if moved != 0 { return giveBack(moved) }
        (permit, token) = (entry, drawn)
        return 0
    }

    /// The permits in place, after removing the stale ones (this host, process gone), and the
    /// count recorded: (live, recorded, 0) or (0, nil, errno). By the gate's holder only.
    private func scan() -> (Int, Int?, Int32) {
        let name = directory.permitsName
        return directory.withParent({ (0, nil, $0) }) { dir in
            let fd = openat(dir.fd, dir.name(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 { return (0, nil, errno == ENOENT ? 0 : errno) }
            guard let stream = fdopendir(fd) else { Glibc.close(fd); return (0, nil, errno) }
            var live = 0, recorded: Int?
            var stale: [String] = []
            while let item = readdir(stream) {
                let entry = withUnsafePointer(to: &item.pointee.d_name) {
                    String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                }
                if entry == "." || entry == ".." { continue }
                if entry.hasPrefix(permitsRecord) {
                    recorded = Int(entry.dropFirst(permitsRecord.count))
                } else if parseEntry(entry) != nil && me.isStale(entry: entry) {
                    stale.append(entry)
                } else if parseEntry(entry) != nil {
                    live += 1
                }
            }
            closedir(stream)
            for entry in stale where unlinkat(dir.fd, dir.name(name + "/" + entry), AT_REMOVEDIR) != 0 && errno != ENOENT {
                live += 1  // (could not remove it: still counts)
            }
            return (live, recorded, 0)
        }
    }

    /// Records this object's count in `.permits/` (made if missing), replacing `old`.
    private func record(replacing old: Int?) -> Int32 {
        let name = directory.permitsName
        return directory.withParent({ $0 }) { dir in
            let made = directory.makeDirectory(dir, name)
            if made != 0 && made != EEXIST { return made }
            let fd = openat(dir.fd, dir.name(name + "/" + permitsRecord + String(backend.permits)),
                            O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, directory.mode ?? 0o666)
            if fd < 0 { return errno }
            Glibc.close(fd)
            if let old { unlinkat(dir.fd, dir.name(name + "/" + permitsRecord + String(old)), 0) }
            return 0
        }
    }

    /// Moves the gate entry into `.permits/`: 0 (registered, the gate free), ESTALE (the gate
    /// was broken meanwhile), or an errno (the gate still held).
    private func enter(_ entry: String) -> Int32 {
        let name = directory.permitsName
        return directory.withParent({ $0 }) { dir in
            let target = name + "/" + entry
            var made = false
            while true {
                if renameat(dir.fd, dir.name(directory.base + "/" + entry), dir.fd, dir.name(target)) == 0
                    || (errno == ENOENT && exists(dir, target)) {
                    hold.held = nil
                    return 0
                }
                let code = errno
                if code == ENOENT && !made && !exists(dir, name) {
                    let mk = directory.makeDirectory(dir, name)
                    if mk != 0 && mk != EEXIST { return mk }
                    made = true
                    continue
                }
                if code == ENOENT { hold.held = nil; return ESTALE }
                return code
            }
        }
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 { EINVAL }  // (polled: never called)

    func release() -> Int32 {
        guard let entry = permit else { return EPERM }
        unwatch()
        let name = directory.permitsName
        let code: Int32 = directory.withParent({ $0 }) { dir in
            let held = name + "/" + entry
            if hold.carrier == nil {
                let carrier = directory.carrierName(me)
                if renameat(dir.fd, dir.name(held), dir.fd, dir.name(carrier)) == 0 || (errno == ENOENT && exists(dir, carrier)) {
                    hold.carrier = carrier
                    return 0
                }
                if errno == ENOENT { return ESTALE }
            }
            if unlinkat(dir.fd, dir.name(held), AT_REMOVEDIR) == 0 { return 0 }
            return errno == ENOENT ? ESTALE : errno
        }
        if code == 0 || code == ESTALE { permit = nil }
        if code == ESTALE { DistributedLockMessage.set("the permit of \(directory.path) was lost: its entry is gone (broken)") }
        return code
    }

    func watch(_ ticket: HoldTicket) {
        unwatch()
        if let permit { watching = (HoldWatcher.process.current().watch(.entry(directory.permitsDirectory, permit), ticket), ticket) }
    }

    private func unwatch() {
        if let watching { HoldWatcher.process.current().unwatch(watching.id) }
        watching = nil
    }

    /// Stale permits are removed by every acquire: nothing to take over here.
    func recoverStale(deadline: Int64) -> Int32 { EBUSY }

    func breakLock() -> Int32 {
        let broken = directory.breakLock()
        if broken != 0 { return broken }
        let name = directory.permitsName
        return directory.withParent({ $0 }) { dir in
            let fd = openat(dir.fd, dir.name(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 { return errno == ENOENT ? 0 : errno }
            guard let stream = fdopendir(fd) else { Glibc.close(fd); return errno }
            var entries: [String] = []
            while let item = readdir(stream) {
                let entry = withUnsafePointer(to: &item.pointee.d_name) {
                    String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                }
                if entry != "." && entry != ".." { entries.append(entry) }
            }
            closedir(stream)
            for entry in entries {
                let flag = entry.hasPrefix(permitsRecord) ? Int32(0) : AT_REMOVEDIR
                if unlinkat(dir.fd, dir.name(name + "/" + entry), flag) != 0 && errno != ENOENT { return errno }
            }
            return 0
        }
    }

    func holder() -> (DistributedLockHolder?, Int32) { (nil, 0) }

    func holds() -> Bool {
        guard let permit else { return false }
        return directory.withParent({ _ in false }) { exists($0, directory.permitsName + "/" + permit) }
    }

    func close(releasing: Bool) {
        if releasing && permit != nil { _ = release() }
        unwatch()
        if let carrier = hold.carrier { directory.removeCarrier(carrier) }
    }
}

// MARK: - PostgreSQL

struct PostgresPermitBackend: LockBackend {
    let base: PostgresBackend
    let permits: Int
    var name: String { base.name }
    var waitsInStore: Bool { false }
    var firstPollNanoseconds: Int64? { 1_000_000 }
    /// The slots' namespace (the first key of each slot's advisory lock), and the count's.
    var slots: Int32 { Int32(truncatingIfNeeded: stableHash("libsync semaphore " + base.lockName)) }
    var counts: Int32 { Int32(truncatingIfNeeded: stableHash("libsync semaphore permits " + base.lockName)) }
    func makeSession(_ me: ProcessIdentity) -> any LockSession { PostgresPermitSession(self, me) }
}

final class PostgresPermitSession: LockSession {
    private let backend: PostgresPermitBackend
    /// The connection (a lock session that never holds a lock of its own).
    private let connection: PostgresSession
    private var slot: Int?
    var token: UInt64 = 0
    private var watching: UInt64?
    /// Who to tell that the permit is lost: the socket's watch does, unless a query of this
    /// session finds the connection broken first (it closes the socket: `noticeBroken`).
    private var ticket: HoldTicket?

    init(_ backend: PostgresPermitBackend, _ me: ProcessIdentity) {
        self.backend = backend
        connection = PostgresSession(backend.base, me)
    }

    private var server: String { "the PostgreSQL server" }
    private var ioDeadline: Int64 { Deadline.after(nanoseconds: backend.base.ioTimeout) }
    private var n: Int { backend.permits }
    private var database: String { "database = (SELECT oid FROM pg_database WHERE datname = current_database())" }
    /// The pg_locks condition for a count other than this object's, held.
    private var otherCount: String {
        "locktype = 'advisory' AND classid = \(UInt32(bitPattern: backend.counts)) AND objsubid = 2 AND objid <> \(n) AND objid <> 0 AND granted AND \(database)"
    }
    /// Gives back the count locks (after a try that took no slot, or at release).
    private var unlockCounts: String { "pg_advisory_unlock_shared(\(backend.counts), \(n)), pg_advisory_unlock_shared(\(backend.counts), 0)" }

    func open() -> Int32 { connection.open() }

    /// The try, one statement prepared once per connection (parsed and planned once): $1 is the
    /// slot tried first. Every holder holds (K', 0) shared ("a permit is held") and (K', N)
    /// shared (its count). A try first asks for (K', 0) exclusively until the statement ends: if
    /// granted, nobody holds a permit, and no other count can be in use (the fast path: no
    /// pg_locks). Else it takes (K', 0) shared (waiting, if need be, for such a statement to
    /// end) and its count, then refuses if pg_locks shows another count held. The slot: -3 the
    /// count locks were not granted (never), -1 another count is held, -2 all slots taken, else
    /// the slot taken; and the token.
    private var tryDefinition: String {
        let c = backend.counts
        let slotOf = "(g.i + $1) % \(n)"
        return "PREPARE libsync_semaphore_try(int) AS SELECT s.slot, CASE WHEN s.slot >= 0 THEN nextval('public.libsync_fencing_token') END "
            + "FROM (SELECT CASE WHEN NOT m.marked THEN -3 "
            + "WHEN NOT a.alone AND EXISTS (SELECT 1 FROM pg_locks WHERE \(otherCount)) THEN -1 "
            + "ELSE coalesce((SELECT \(slotOf) FROM generate_series(0, \(n - 1)) AS g(i) "
            + "WHERE pg_try_advisory_lock(\(backend.slots), \(slotOf)) LIMIT 1), -2) END AS slot "
            + "FROM (SELECT pg_try_advisory_xact_lock(\(c), 0) AS alone OFFSET 0) AS a, "
            + "LATERAL (SELECT a.alone IS NOT NULL AND (SELECT 1 FROM (SELECT pg_advisory_lock_shared(\(c), 0)) AS held) = 1 "
            + "AND pg_try_advisory_lock_shared(\(c), \(n)) AS marked OFFSET 0) AS m OFFSET 0) AS s"
    }
    /// Whether this connection has the try prepared (a new connection has not).
    private var prepared: Int32 = -1

    func tryAcquire(deadline: Int64) -> Int32 {
        for attempt in 0..<4 {
            let reconnected = !connection.isConnected
            let connected = connection.connect(deadline: -1, interruptible: false)
            if connected != 0 { return connected }
            let execute = "EXECUTE libsync_semaphore_try(\(Int.random(in: 0..<n)))"
            let fresh = prepared != connection.socketNumber
            let outcome = connection.run(fresh ? tryDefinition + "; " + execute : execute, deadline: ioDeadline)
            if fresh, case .rows = outcome { prepared = connection.socketNumber }
            switch outcome {
            case .rows(let row):
                guard let slotText = row.first ?? nil, let slot = Int(slotText) else {
                    return DistributedLockMessage.fail(EIO, "acquire: \(server) answered no slot")
                }
                if slot >= 0 {
                    guard row.count > 1, let text = row[1], let drawn = UInt64(text) else {
                        return DistributedLockMessage.fail(EIO, "acquire: bad token from \(server)")
                    }
                    (self.slot, token) = (slot, drawn)
                    return 0
                }
                let release = "SELECT " + unlockCounts
                if slot != -1 { _ = connection.run(release, deadline: ioDeadline); return EBUSY }
                let other = connection.run(release + "; SELECT min(objid) FROM pg_locks WHERE \(otherCount)", deadline: ioDeadline)
                var recorded = 0
                if case .rows(let found) = other, let text = found.first ?? nil { recorded = Int(text) ?? 0 }
                if recorded == 0 { continue }  // (released meanwhile: try again)
                return mismatch(backend.name, recorded: recorded, mine: n)
            case .refused("42P05", _):  // (prepared already on this connection)
                prepared = connection.socketNumber
            case .refused("26000", _):  // (not prepared on this connection: a new one)
                prepared = -1
            case .refused("42P01", _):  // no sequence yet: made now (any lock the statement took goes)
                _ = connection.run("SELECT pg_advisory_unlock_all(); CREATE SEQUENCE IF NOT EXISTS public.libsync_fencing_token",
                                   deadline: ioDeadline)
            case .refused(let state, let message):
                _ = connection.run("SELECT pg_advisory_unlock_all()", deadline: ioDeadline)
                return DistributedLockMessage.fail(state == "42501" ? EACCES : EIO, "acquire on \(server): \(message) (SQLSTATE \(state))")
            case .lost(let code, let message):
                prepared = -1
                if code == EIO && !reconnected && attempt == 0 { continue }  // an old connection broke: once more, afresh
                return DistributedLockMessage.fail(code == ETIMEDOUT && !Deadline.hasPassed(deadline) ? EIO : code, "acquire: \(message)")
            }
        }
        return DistributedLockMessage.fail(EIO, "acquire: \(server) keeps failing")
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 { EINVAL }  // (polled: never called)

    func release() -> Int32 {
        guard let held = slot else { return EPERM }
        noticeBroken()
        slot = nil
        unwatch()
        guard connection.isConnected else {
            return DistributedLockMessage.fail(ESTALE, "the permit of \(backend.name) was lost: the connection to \(server) broke while it was held")
        }
        switch connection.run("SELECT pg_advisory_unlock(\(backend.slots), \(held)), " + unlockCounts,
                              deadline: ioDeadline) {
        case .rows(let row) where row.first == "t": return 0
        case .rows: return DistributedLockMessage.fail(ESTALE, "the permit of \(backend.name) was lost: its session no longer held it")
        case .lost(_, let message):
            return DistributedLockMessage.fail(ESTALE, "the permit of \(backend.name) was lost: \(message)")
        case .refused(_, let message):
            connection.close(releasing: false)  // ending the session releases the permit for sure
            return DistributedLockMessage.fail(ESTALE, "the permit of \(backend.name) may have been lost: \(message); its session is closed")
        }
    }

    func recoverStale(deadline: Int64) -> Int32 { EBUSY }  // (the server frees a dead holder's slot)

    func breakLock() -> Int32 {
        let connected = connection.connect(deadline: -1, interruptible: false)
        if connected != 0 { return connected }
        let outcome = connection.run("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = "
                                     + "\(UInt32(bitPattern: backend.slots)) AND objsubid = 2 AND granted AND \(database) "
                                     + "AND pid <> pg_backend_pid()", deadline: ioDeadline)
        if case .rows = outcome { return 0 }
        if case .refused(let state, let message) = outcome { return DistributedLockMessage.fail(state == "42501" ? EACCES : EIO, "break: \(message)") }
        return DistributedLockMessage.fail(EIO, "break: \(server) did not answer")
    }

    func holder() -> (DistributedLockHolder?, Int32) { (nil, 0) }

    /// After a query: a connection that broke while a permit was held ended its session, and the permit.
    private func noticeBroken() {
        if slot != nil && !connection.isConnected, let ticket {
            unwatch()
            ticket.report(.lost)
        }
    }

    func holds() -> Bool {
        guard let held = slot, connection.isConnected else { return false }
        defer { noticeBroken() }
        let outcome = connection.run("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND classid = "
                                     + "\(UInt32(bitPattern: backend.slots)) AND objid = \(held) AND objsubid = 2 AND granted",
                                     deadline: ioDeadline)
        if case .rows(let row) = outcome { return (row.first ?? nil).flatMap { Int($0) } ?? 0 > 0 }
        return false
    }

    func close(releasing: Bool) {
        if slot != nil && releasing { _ = release() }
        unwatch()
        if slot != nil { return }  // kept open: the permit outlives the object until the process ends
        connection.close(releasing: false)
    }

    func watch(_ ticket: HoldTicket) {
        unwatch()
        self.ticket = ticket
        if connection.isConnected { watching = HoldWatcher.process.current().watch(.socket(connection.socketNumber), ticket) }
    }

    private func unwatch() {
        if let watching { HoldWatcher.process.current().unwatch(watching) }
        (watching, ticket) = (nil, nil)
    }
}

// MARK: - Redis

struct RedisPermitBackend: LockBackend {
    let base: RedisBackend
    let permits: Int
    var name: String { base.name }
    var waitsInStore: Bool { false }
    var firstPollNanoseconds: Int64? { 1_000_000 }
    /// The semaphore's name (the lock name of the URL).
    var semaphore: String { String(base.key.dropFirst("libsync:lock:".count)) }
    var holdersKey: String { "libsync:semaphore:" + semaphore }
    var fenceKey: String { "libsync:semaphore-fence:" + semaphore }
    var countKey: String { "libsync:semaphore-permits:" + semaphore }
    var permitPrefix: String { "libsync:permit:" + semaphore + ":" }
    /// The backend whose "lock" is the permit of `entry`: what the lock's lease renewer renews
    /// (and cancels, for an abandoned acquisition).
    func permitBackend(_ entry: String) -> RedisBackend {
        RedisBackend(name: base.name, address: base.address, key: permitPrefix + entry, fenceKey: fenceKey,
                     ttlMilliseconds: base.ttlMilliseconds, hiredis: base.hiredis)
    }
    func makeSession(_ me: ProcessIdentity) -> any LockSession { RedisPermitSession(self, me) }
}

enum RedisPermitScripts {
    /// KEYS: holders, fence, count, my permit, my abandon marker; ARGV: entry, lease ms, N, the
    /// permits' key prefix. The token; -1 all taken (or abandoned); -2 - M: the holders' count is M.
    /// (A permit already held by the entry is a retry whose answer was lost: acquired.)
    static let acquire = """
        if redis.call('exists', KEYS[5]) == 1 then return -1 end
        local n = tonumber(ARGV[3])
        if redis.call('get', KEYS[4]) ~= ARGV[1] then
          local live = 0
          for _, e in ipairs(redis.call('smembers', KEYS[1])) do
            if redis.call('exists', ARGV[4] .. e) == 1 then live = live + 1 else redis.call('srem', KEYS[1], e) end
          end
          local recorded = tonumber(redis.call('get', KEYS[3]) or '0')
          if live > 0 and recorded ~= n then return -2 - recorded end
          if live >= n then return -1 end
          redis.call('set', KEYS[3], ARGV[3])
          redis.call('sadd', KEYS[1], ARGV[1])
        end
        redis.call('set', KEYS[4], ARGV[1], 'PX', ARGV[2])
        local t = redis.call('time')
        local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
        redis.call('set', KEYS[2], string.format('%.0f', token))
        return token
        """
    /// KEYS: holders, the permit; ARGV: entry. 1 released, 0 it was gone.
    static let release = """
        redis.call('srem', KEYS[1], ARGV[1])
        if redis.call('get', KEYS[2]) == ARGV[1] then redis.call('del', KEYS[2]) return 1 end
        return 0
        """
    /// KEYS: holders, count; ARGV: the permits' key prefix. Removes every permit. 1.
    static let breakAll = """
        for _, e in ipairs(redis.call('smembers', KEYS[1])) do redis.call('del', ARGV[1] .. e) end
        redis.call('del', KEYS[1], KEYS[2])
        return 1
        """
}

final class RedisPermitSession: LockSession {
    private let backend: RedisPermitBackend
    private let me: ProcessIdentity
    private let connection: RedisConnection
    private let leaseID = ProcessIdentity.nextSerial()
    private lazy var renewer = LeaseRenewers.process.current().renewer(for: backend.base.address, backend.base.hiredis)
    private var entry: String?
    var token: UInt64 = 0

    init(_ backend: RedisPermitBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
        connection = RedisConnection(backend.base.hiredis, backend.base.address)
    }

    private var ioDeadline: Int64 { Deadline.after(nanoseconds: backend.base.address.ioTimeout) }

    private func failure(_ fault: RedisConnection.Fault, _ doing: String, deadline: Int64 = -1) -> Int32 {
        if fault.code == ETIMEDOUT && !Deadline.hasPassed(deadline) {
            return DistributedLockMessage.fail(EIO, "\(doing): \(fault.message) (within connect_timeout)")
        }
        return DistributedLockMessage.fail(fault.code, "\(doing): \(fault.message)")
    }

    func open() -> Int32 { connection.connect(deadline: -1) }

    func tryAcquire(deadline: Int64) -> Int32 {
        let answerBy = Deadline.hasPassed(deadline) ? ioDeadline : Deadline.earliest(deadline, ioDeadline)
        let mine = me.newEntry()
        let keys = [backend.holdersKey, backend.fenceKey, backend.countKey, backend.permitPrefix + mine,
                    backend.base.abandonedKey(mine)]
        let arguments = [mine, String(backend.base.leaseMilliseconds), String(backend.permits), backend.permitPrefix]
        var retried = false
        while true {
            switch connection.eval(RedisPermitScripts.acquire, keys: keys, arguments: arguments, deadline: answerBy) {
            case .success(.integer(let result)) where result > 0:
                entry = mine
                token = UInt64(result)
                renewer.add(Lease(backend: backend.permitBackend(mine), entry: mine), for: leaseID, since: connection.lastSent)
                return 0
            case .success(.integer(-1)): return EBUSY
            case .success(.integer(let result)): return mismatch(backend.name, recorded: Int(-2 - result), mine: backend.permits)
            case .success(let other): return DistributedLockMessage.fail(EIO, "acquire: \(connection.server) answered \(other)")
            case .failure(let fault) where fault.code == EIO && !retried:
                retried = true  // an old connection broke: once more (the same entry: idempotent)
            case .failure(let fault):
                if [ETIMEDOUT, EIO, EINTR].contains(fault.code) { renewer.abandon(Lease(backend: backend.permitBackend(mine), entry: mine)) }
                return failure(fault, "acquire", deadline: deadline)
            }
        }
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 { EINVAL }  // (polled: never called)

    func release() -> Int32 {
        guard let mine = entry else { return EPERM }
        switch connection.eval(RedisPermitScripts.release, keys: [backend.holdersKey, backend.permitPrefix + mine], arguments: [mine],
                               deadline: ioDeadline) {
        case .success(.integer(let result)):
            entry = nil
            renewer.remove(leaseID)
            if result == 1 { return 0 }
            return DistributedLockMessage.fail(ESTALE, "the permit of \(backend.name) was lost: its lease ended (expired, broken, or the server lost it)")
        case .success(let other): return DistributedLockMessage.fail(EIO, "release: \(connection.server) answered \(other)")
        case .failure(let fault): return failure(fault, "release")
        }
    }

    /// Removes the permits of stale holders (this host, process gone): ENOENT if it removed
    /// one (try again), else EBUSY.
    func recoverStale(deadline: Int64) -> Int32 {
        let by = Deadline.earliest(deadline, ioDeadline)
        guard case .success(.array(let members)) = connection.run(["SMEMBERS", backend.holdersKey], deadline: by) else { return EBUSY }
        var removed = false
        for case .string(let holder) in members where me.isStale(entry: holder) {
            if case .success(.integer(1)) = connection.eval(RedisPermitScripts.release, keys: [backend.holdersKey, backend.permitPrefix + holder],
                                                            arguments: [holder], deadline: by) {
                removed = true
            }
        }
        return removed ? ENOENT : EBUSY
    }

    func breakLock() -> Int32 {
        switch connection.eval(RedisPermitScripts.breakAll, keys: [backend.holdersKey, backend.countKey], arguments: [backend.permitPrefix],
                               deadline: ioDeadline) {
        case .success(.error(let message)): return DistributedLockMessage.fail(EIO, "break: \(message)")
        case .success: return 0
        case .failure(let fault): return failure(fault, "break")
        }
    }

    func holder() -> (DistributedLockHolder?, Int32) { (nil, 0) }

    func holds() -> Bool {
        guard let mine = entry else { return false }
        if case .success(.string(let value)) = connection.run(["GET", backend.permitPrefix + mine], deadline: ioDeadline) { return value == mine }
        return false
    }

    func close(releasing: Bool) {
        if entry != nil && releasing { _ = release() }
    }

    func watch(_ ticket: HoldTicket) {
        if let entry { renewer.watch(leaseID, entry: entry, ticket) }
    }
}

// MARK: - etcd

struct EtcdPermitBackend: LockBackend {
    /// The lock backend of the URL, its key range moved to `libsync/semaphore/NAME/`.
    let base: EtcdBackend
    let permits: Int
    init(lockBackend: EtcdBackend, permits: Int) {
        let name = lockBackend.prefix.dropFirst("libsync/lock/".count).dropLast()
        base = EtcdBackend(name: lockBackend.name, address: lockBackend.address, prefix: "libsync/semaphore/" + name + "/",
                           rangeEnd: "libsync/semaphore/" + name + "0", ttlNanoseconds: lockBackend.ttlNanoseconds)
        self.permits = permits
    }
    var name: String { base.name }
    var waitsInStore: Bool { true }
    var firstPollNanoseconds: Int64? { nil }
    func makeSession(_ me: ProcessIdentity) -> any LockSession { EtcdPermitSession(self, me) }
}

final class EtcdPermitSession: LockSession {
    private let backend: EtcdPermitBackend
    private let me: ProcessIdentity
    private let client: EtcdClient
    private let holdID = ProcessIdentity.nextSerial()
    private lazy var keeper = EtcdLeaseKeepers.process.current().keeper(for: backend.base)
    /// This session's key while it holds a permit (`held`) or waits in the queue.
    private var mine: (key: String, revision: Int64, lease: Int64)?
    private var held = false
    private var keyGeneration = 0
    private var watchStream: HTTPConnection?
    var token: UInt64 = 0

    init(_ backend: EtcdPermitBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
        client = EtcdClient(backend.base.address)
    }

    private var base: EtcdBackend { backend.base }
    private var server: String { base.address.server }
    private var ioDeadline: Int64 { Deadline.after(nanoseconds: base.address.ioTimeout) }
    private var value: String { "\(backend.permits) " + me.newEntry() }

    private func failure(_ fault: HTTPConnection.Fault, _ doing: String, deadline: Int64 = -1) -> Int32 {
        if fault.code == ETIMEDOUT && !Deadline.hasPassed(deadline) {
            return DistributedLockMessage.fail(EIO, "\(doing): \(fault.message) (within connect_timeout)")
        }
        return DistributedLockMessage.fail(fault.code, "\(doing): \(fault.message)")
    }

    func open() -> Int32 {
        client.open(range: base.prefix, end: base.rangeEnd)
    }

    private func newKey(_ lease: Int64) -> String {
        base.prefix + String(UInt64(bitPattern: lease), radix: 16) + "-" + String(holdID) + "." + String(keyGeneration)
    }

    private func abandon(_ key: String) {
        keyGeneration += 1
        keeper.abandon(key)
    }

    private func took() {
        guard let mine else { return }
        held = true
        token = UInt64(mine.revision)
        keeper.hold(holdID, key: mine.key, revision: mine.revision, lease: mine.lease)
    }

    /// The count a key's value gives ("N entry").
    private static func count(_ key: EtcdKey) -> Int? { key.value.split(separator: " ", maxSplits: 1).first.flatMap { Int($0) } }
    private static func entry(_ key: EtcdKey) -> String { String(key.value.split(separator: " ", maxSplits: 1).last ?? "") }

    /// Puts a key of this session's, and in the same txn reads the first N keys of the range
    /// (a txn's reads see its own put): (0, those keys) with `mine` set, or (errno, []).
    private func enqueue(_ by: Int64, _ deadline: Int64) -> (Int32, [EtcdKey]) {
        var lost = false
        while true {
            let (lease, fault) = keeper.lease(client, deadline: by)
            if let fault { return (failure(fault, "grant a lease", deadline: deadline), []) }
            let key = newKey(lease)
            let request = EtcdRequest.txn(compare: [EtcdRequest.createRevision(key, is: 0)],
                                          success: [EtcdRequest.op("request_put", EtcdRequest.put(key, value, lease: lease)),
                                                    EtcdRequest.op("request_range", EtcdRequest.range(base.prefix, end: base.rangeEnd,
                                                                                                      limit: backend.permits))])
            switch client.call("/v3/kv/txn", request, deadline: by) {
            case .success(let answer) where !answer.succeeded:
                abandon(key)  // (left by an earlier attempt)
            case .success(let answer):
                mine = (key, answer.revision, lease)
                return (0, answer.txnRanges.last ?? [])
            case .failure(let fault) where fault.message.contains("requested lease not found") && !lost:
                lost = true
                keeper.leaseGone(lease)
            case .failure(let fault):
                if [ETIMEDOUT, EIO, EINTR].contains(fault.code) { abandon(key) }
                return (failure(fault, "acquire", deadline: deadline), [])
            }
        }
    }

    /// Where the queued key stands: (code, revision read) with code 0 (held), EBUSY (behind N
    /// others; `stale`: one of them is a dead holder of this host, deleted now), ENOENT (the
    /// key is gone), EINVAL, or an errno.
    private func look(_ by: Int64, _ deadline: Int64) -> (Int32, Int64) {
        guard let queued = mine else { return (ENOENT, 0) }
        let request = EtcdRequest.txn(compare: [], success: [
            EtcdRequest.op("request_range", EtcdRequest.range(base.prefix, end: base.rangeEnd, limit: 1)),
            EtcdRequest.op("request_range", EtcdRequest.range(base.prefix, end: base.rangeEnd, limit: backend.permits,
                                                              maxCreate: queued.revision - 1)),
            EtcdRequest.op("request_range", EtcdRequest.range(queued.key)),
        ])
        switch client.call("/v3/kv/txn", request, deadline: by) {
        case .failure(let fault): return (failure(fault, "acquire", deadline: deadline), 0)
        case .success(let answer):
            let ranges = answer.txnRanges
            guard ranges.count == 3 else { return (DistributedLockMessage.fail(EIO, "acquire: \(server) answered a txn without its ranges"), 0) }
            if ranges[2].first?.createRevision != queued.revision { return (ENOENT, answer.revision) }
            if let oldest = ranges[0].first, oldest.key != queued.key, let recorded = Self.count(oldest), recorded != backend.permits {
                return (mismatch(base.name, recorded: recorded, mine: backend.permits), answer.revision)
            }
            let before = ranges[1]
            if before.count < backend.permits { return (0, answer.revision) }
            for key in before where me.isStale(entry: Self.entry(key)) {
                let delete = EtcdRequest.txn(compare: [EtcdRequest.createRevision(key.key, is: key.createRevision)],
                                             success: [EtcdRequest.op("request_delete_range", EtcdRequest.delete(key.key))])
                _ = client.call("/v3/kv/txn", delete, deadline: by)
                return (EAGAIN, answer.revision)  // look again at once
            }
            return (EBUSY, answer.revision)
        }
    }

    func tryAcquire(deadline: Int64) -> Int32 {
        let by = Deadline.hasPassed(deadline) ? ioDeadline : Deadline.earliest(deadline, ioDeadline)
        if mine == nil {  // one round trip: put, and read the first N keys
            let (queued, first) = enqueue(by, deadline)
            if queued != 0 { return queued }
            guard let key = mine?.key else { return EIO }
            if let oldest = first.first, oldest.key != key, let recorded = Self.count(oldest), recorded != backend.permits {
                withdraw()
                return mismatch(base.name, recorded: recorded, mine: backend.permits)
            }
            if first.contains(where: { $0.key == key }) { took(); return 0 }
            if InterruptibleCall.isActive && !Deadline.hasPassed(deadline) { return EBUSY }  // (queued: see below)
            withdraw()
            return EBUSY
        }
        while true {
            let (code, _) = look(by, deadline)
            if code == EAGAIN { continue }
            if code == 0 { took(); return 0 }
            if code == ENOENT { mine = nil; return EBUSY }
            // An interruptible wait's key stays queued between its calls, until its deadline.
            if code == EBUSY && InterruptibleCall.isActive && !Deadline.hasPassed(deadline) { return EBUSY }
            withdraw()
            return code
        }
    }

    private func closeWatch() {
        watchStream?.disconnect()
        watchStream = nil
    }

    private func withdraw() {
        closeWatch()
        guard let queued = mine, !held else { return }
        mine = nil
        if case .success = client.call("/v3/kv/deleterange", EtcdRequest.delete(queued.key), deadline: ioDeadline) { return }
        abandon(queued.key)
    }

    func withdrawWait() {
        closeWatch()
        guard let queued = mine, !held else { return }
        mine = nil
        abandon(queued.key)
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 {
        let sliceEnd = interruptible ? Deadline.after(nanoseconds: Deadline.interruptSlice) : Deadline.none
        while true {
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) { withdraw(); return ETIMEDOUT }
            if interruptible && now >= sliceEnd { closeWatch(); return EINTR }  // (the key stays queued)
            let by = Deadline.earliest(deadline, now + base.address.ioTimeout)
            if mine == nil {
                let (queued, _) = enqueue(by, deadline)
                if queued != 0 { return queued }
            }
            if watchStream == nil {
                let (code, revision) = look(by, deadline)
                if code == EAGAIN { continue }
                if code == 0 { took(); return 0 }
                if code == ENOENT { mine = nil; continue }  // its lease ended meanwhile: queue again
                if code != EBUSY {
                    if code == ETIMEDOUT && Deadline.hasPassed(deadline) { withdraw(); return ETIMEDOUT }
                    withdraw()
                    return code
                }
                // Watches the range for deletions after the revision read: one may let this key in.
                let stream = HTTPConnection(host: base.address.host, port: base.address.port, server: server,
                                            tls: base.address.tls)
                let body = "{\"create_request\":{\"key\":\"\(Base64.encode(base.prefix))\",\"range_end\":\"\(Base64.encode(base.rangeEnd))\","
                    + "\"start_revision\":\"\(revision + 1)\",\"filters\":[\"NOPUT\"]}}"
                switch stream.startStream("/v3/watch", body, headers: client.authorization, deadline: by) {
                case .failure(let fault):
                    if fault.code == ETIMEDOUT && Deadline.hasPassed(deadline) { withdraw(); return ETIMEDOUT }
                    withdraw()
                    return failure(fault, "watch", deadline: deadline)
                case .success(let status) where status != 200:
                    stream.disconnect()
                    withdraw()
                    return DistributedLockMessage.fail(EIO, "watch: \(server) answered HTTP status \(status)")
                case .success: watchStream = stream
                }
            }
            guard let stream = watchStream else { continue }
            switch stream.nextLine(deadline: Deadline.earliest(deadline, sliceEnd), interruptible: interruptible) {
            case .failure(let fault) where fault.code == ETIMEDOUT || fault.code == EINTR:
                if Deadline.hasPassed(deadline) { withdraw(); return ETIMEDOUT }
                if interruptible { closeWatch(); return EINTR }  // the slice's end or a signal: the key stays queued
            case .failure, .success(nil):
                closeWatch()  // (the server restarted, or closed the stream: look again)
                if !client.connection.isConnected { usleep(10_000) }
            case .success(let line?):
                guard let message = JSONValue.parse(line) else { closeWatch(); continue }
                let result = message["result"] ?? message
                if result["canceled"]?.bool == true || message["error"] != nil { closeWatch(); continue }
                if result["events"]?.array.isEmpty == false { closeWatch() }  // a deletion: look again
            }
        }
    }

    func release() -> Int32 {
        guard held, let hold = mine else { return EPERM }
        let request = "{\"key\":\"\(Base64.encode(hold.key))\",\"prev_kv\":true}"
        switch client.call("/v3/kv/deleterange", request, deadline: ioDeadline) {
        case .failure(let fault): return failure(fault, "release")
        case .success(let answer):
            held = false
            mine = nil
            keeper.drop(holdID)
            if (answer["prev_kvs"]?.array ?? []).first.flatMap(EtcdKey.init)?.createRevision == hold.revision { return 0 }
            return DistributedLockMessage.fail(ESTALE, "the permit of \(base.name) was lost: its key is gone (the lease ended, or it was broken)")
        }
    }

    func recoverStale(deadline: Int64) -> Int32 { EBUSY }  // (a wait deletes stale holders' keys)

    func breakLock() -> Int32 {
        let request = "{\"key\":\"\(Base64.encode(base.prefix))\",\"range_end\":\"\(Base64.encode(base.rangeEnd))\"}"
        if case .failure(let fault) = client.call("/v3/kv/deleterange", request, deadline: ioDeadline) { return failure(fault, "break") }
        return 0
    }

    func holder() -> (DistributedLockHolder?, Int32) { (nil, 0) }

    func holds() -> Bool {
        guard held, let hold = mine else { return false }
        switch client.call("/v3/kv/range", EtcdRequest.range(hold.key), deadline: ioDeadline) {
        case .success(let answer): return (answer["kvs"]?.array ?? []).first.flatMap(EtcdKey.init)?.createRevision == hold.revision
        case .failure: return false
        }
    }

    func close(releasing: Bool) {
        if held && releasing { _ = release() }
        if !held { withdrawWait() }
        client.disconnect()
    }

    func watch(_ ticket: HoldTicket) { keeper.watch(holdID, ticket) }
}
