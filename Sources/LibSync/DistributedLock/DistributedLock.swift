import Glibc
import Synchronization

// A mutex between processes, possibly on several hosts (Apple's NSDistributedLock), kept in a
// store every user of the lock reaches: a file system (the default, for a path), a PostgreSQL
// server or a Redis server (for a URL). Every successful acquire gets a fencing token.
//
// Two layers. A `LockBackend` is the store's protocol (FileBackend.swift, PostgresBackend.swift,
// RedisBackend.swift), which knows nothing of threads: per process and object, a `LockSession`
// acquires, releases, recovers, breaks, reads the holder and checks a hold. `DistributedLock`
// keeps, per process, who holds the lock through the object (which thread, how many times) and
// lets the object's other threads wait for it without touching the store; it is the same for
// every backend.

/// Who holds a distributed lock (readable by anyone who can reach the store).
public struct DistributedLockHolder: Sendable, Equatable, CustomStringConvertible {
    /// The holder's host name.
    public let host: String
    /// The holder's process id (on its host, in its pid namespace).
    public let pid: Int32
    /// The holder process's start time, in clock ticks since its host booted
    /// (field 22 of /proc/<pid>/stat): with `pid`, it names one process for good.
    public let processStart: UInt64
    /// When the holder acquired the lock: wall-clock time since the Unix epoch (hosts share it).
    public let acquired: Duration
    /// The holder runs on this host (same host name, boot and pid namespace; PostgreSQL: same
    /// host name).
    public let isOnThisHost: Bool
    /// The holder is on this host and its process is gone (or its pid now names another
    /// process): the lock will never be released, and `recoverStale()` may take it over.
    /// (Never for PostgreSQL, whose server releases a dead holder's lock itself.)
    public let isStale: Bool

    /// `acquired` in nanoseconds, for the C API.
    package var acquiredNanoseconds: Int64 { nanoseconds(acquired) }

    public var description: String {
        "pid \(pid) on \(host), acquired \(acquired.components.seconds) s after the epoch"
            + (isStale ? " (stale: the process is gone)" : "")
    }
}

/// The errors of `DistributedLock`, each with the errno code the C API returns for it.
public enum DistributedLockError: Error, Equatable, CustomStringConvertible {
    /// The path is empty, names no file (`/`, `.`), or is not UTF-8. (EINVAL)
    case invalidPath(String)
    /// A URL target is malformed: its message says how. (EINVAL)
    case invalidTarget(String)
    /// The lock's file name is longer than NAME_MAX, or its directory's path than PATH_MAX. (ENAMETOOLONG)
    case nameTooLong(String)
    /// `mode` is not a set of permission bits (0...0o777). (EINVAL)
    case invalidMode(UInt32)
    /// The parent directory does not exist. (ENOENT)
    case parentMissing(String)
    /// The parent is not a directory. (ENOTDIR)
    case parentNotADirectory(String)
    /// This process may not create entries in the parent directory. (EACCES, EPERM, EROFS)
    case parentNotWritable(String)
    /// Something that is not a lock is in the way: a file, or a directory with other content. (EEXIST)
    case notALock(String)
    /// The backend's client library (libpq, hiredis) cannot be loaded: the message names the
    /// Debian package to install. (ELIBACC)
    case clientLibraryMissing(String)
    /// The server cannot be reached: refused, unknown or unreachable host, or no answer within
    /// the connect timeout. (ECONNREFUSED)
    case unreachable(String)
    /// The server refused this client: wrong password, unknown user, or a missing privilege. (EACCES)
    case accessDenied(String)
    /// The server failed a request, stopped answering, or the connection broke. (EIO)
    case server(String)
    /// The caller already holds the lock, so waiting would never end: through this object, which
    /// is not `.recursive`, or, waiting without a timeout, through another object. (EDEADLK)
    case alreadyHeld
    /// A recursive hold's count would overflow. (EAGAIN)
    case tooManyAcquisitions
    /// `unlock`: the caller does not hold the lock through this object (another thread of a
    /// thread-owned object does, or nobody, or the hold is a parent process's). (EPERM)
    case notHeld
    /// `unlock`: the hold was lost since this object acquired it (broken, its lease expired, or
    /// its server session ended); nobody else is known to hold it now. (ESTALE)
    case broken
    /// `unlock`: the hold was lost since this object acquired it, and someone else holds it now. (EBUSY)
    case brokenAndHeldByAnother
    /// `lock(timeout:)`: the timeout passed before the lock was acquired (the lock was held, or
    /// the server did not answer in time). (ETIMEDOUT)
    case timedOut
    /// A system call failed with this errno.
    case system(errno: Int32, operation: String)

    /// The errno code the C API returns for this error.
    public var code: Int32 {
        switch self {
        case .invalidPath, .invalidTarget: EINVAL
        case .nameTooLong: ENAMETOOLONG
        case .invalidMode: EINVAL
        case .parentMissing: ENOENT
        case .parentNotADirectory: ENOTDIR
        case .parentNotWritable: EACCES
        case .notALock: EEXIST
        case .clientLibraryMissing: ELIBACC
        case .unreachable: ECONNREFUSED
        case .accessDenied: EACCES
        case .server: EIO
        case .alreadyHeld: EDEADLK
        case .tooManyAcquisitions: EAGAIN
        case .notHeld: EPERM
        case .broken: ESTALE
        case .brokenAndHeldByAnother: EBUSY
        case .timedOut: ETIMEDOUT
        case .system(let code, _): code
        }
    }

    /// The error for `code`, returned by `operation` on the lock at `path`; `detail` is the
    /// backend's message for it (`DistributedLockMessage`), if it gave one.
    package init(code: Int32, operation: String, path: String, detail: String? = nil) {
        if let detail {
            switch code {
            case EINVAL: self = .invalidTarget(detail); return
            case ELIBACC: self = .clientLibraryMissing(detail); return
            case ECONNREFUSED: self = .unreachable(detail); return
            case EACCES where operation != "unlock", EPERM where operation != "unlock": self = .accessDenied(detail); return
            case EIO: self = .server(detail); return
            default: break
            }
        }
        switch (operation, code) {
        case ("create", EINVAL): self = .invalidPath(path)
        case ("create", ENAMETOOLONG): self = .nameTooLong(path)
        case ("create", ENOENT): self = .parentMissing(path)
        case ("create", ENOTDIR): self = .parentNotADirectory(path)
        case ("create", EACCES), ("create", EPERM), ("create", EROFS): self = .parentNotWritable(path)
        case (_, EEXIST): self = .notALock(path)
        case (_, EDEADLK): self = .alreadyHeld
        case (_, EAGAIN): self = .tooManyAcquisitions
        case ("unlock", EPERM): self = .notHeld
        case ("unlock", ESTALE): self = .broken
        case ("unlock", EBUSY): self = .brokenAndHeldByAnother
        case (_, ETIMEDOUT): self = .timedOut
        default: self = .system(errno: code, operation: operation)
        }
    }

    public var description: String {
        switch self {
        case .invalidPath(let p): "invalid lock path '\(p)' (empty, no file name, or not UTF-8)"
        case .invalidTarget(let m), .clientLibraryMissing(let m), .unreachable(let m), .accessDenied(let m), .server(let m): m
        case .nameTooLong(let p): "the lock path '\(p)' is too long (its file name over NAME_MAX, or its directory over PATH_MAX)"
        case .invalidMode(let m): "invalid lock mode 0o\(String(m, radix: 8)) (permission bits 0...0o777)"
        case .parentMissing(let p): "the parent directory of '\(p)' does not exist"
        case .parentNotADirectory(let p): "the parent of '\(p)' is not a directory"
        case .parentNotWritable(let p): "the parent directory of '\(p)' is not writable by this process"
        case .notALock(let p): "'\(p)' exists and is not a lock (a file, or a directory with other content)"
        case .alreadyHeld: "the caller already holds this DistributedLock (through this object, which is not recursive, or through another): waiting would never end"
        case .tooManyAcquisitions: "the DistributedLock's hold count would overflow"
        case .notHeld: "unlock of a DistributedLock the caller does not hold through this object"
        case .broken: "the lock was lost since this object acquired it (broken, lease expired, or server session ended); nobody else is known to hold it"
        case .brokenAndHeldByAnother: "the lock was lost since this object acquired it, and another holder has it now"
        case .timedOut: "timed out waiting for the lock"
        case .system(let code, let op): "\(op): \(String(cString: strerror(code))) (errno \(code))"
        }
    }
}

/// A lock between processes and hosts, kept in a shared file system (Apple's NSDistributedLock,
/// with stale-holder recovery), a PostgreSQL server (session advisory locks) or a Redis server
/// (leases renewed while held); each acquisition gets a fencing token (`token`). `tryLock`
/// never blocks; `lock(timeout:pollInterval:)` waits.
///
/// Holders: two objects for one target (in one process or not) exclude each other. Through one
/// object, the holder is the thread that acquired it: the object's other threads wait for it
/// (without touching the store) and may not unlock it; with `.processOwned` the holder is the
/// process, and any of its threads counts as the holder. Not recursive unless `.recursive`. A
/// forked child never holds its parent's lock: the child's unlock throws `.notHeld`, and its
/// copy of the object touches nothing of the parent's (it may acquire the lock for itself, over
/// a connection of its own). The lock outlives the object unless `.releaseOnDeinit`: release it
/// with `unlock()`. Thread-safe.
public final class DistributedLock: Sendable {
    /// How the object holds the lock.
    public struct Options: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        /// The holder may acquire it again; each acquisition needs its own unlock (filelock's).
        public static let recursive = Options(rawValue: 1)
        /// The holder is the process, not the thread that acquired it: any of its threads may
        /// unlock, and an acquisition by any of them while it is held is a re-entry (EDEADLK
        /// unless `.recursive`) instead of a wait (filelock's `thread_local=False`).
        public static let processOwned = Options(rawValue: 2)
        /// Missing parent directories are made, at creation and when acquiring (as filelock).
        /// (File system only.)
        public static let makeParents = Options(rawValue: 4)
        /// When the object goes away, a hold of this process through it is released, whichever
        /// thread acquired it (filelock's finalizer); by default it stays held (NSDistributedLock's;
        /// a server lock is then released when the process ends or its lease expires).
        public static let releaseOnDeinit = Options(rawValue: 8)
        /// Releasing also removes the lock's directory while it is empty, as filelock's
        /// SoftFileLock removes its file (one directory operation more; only an empty directory
        /// goes, and an acquirer's rename onto a missing path succeeds, so it is safe).
        /// (File system only.)
        public static let removeOnRelease = Options(rawValue: 16)
        package static let all: Options = [.recursive, .processOwned, .makeParents, .releaseOnDeinit, .removeOnRelease]
    }

    /// The lock's target: for a path, absolute, its parent directory resolved (symbolic links
    /// followed); for a URL, the URL without its password.
    public let path: String
    public let options: Options
    /// `path` as a C string, for the C API (immutable; freed with the object).
    nonisolated(unsafe) package let cPath: UnsafeMutablePointer<CChar>
    private let backend: any LockBackend
    /// Which lock `path` names, whatever its spelling (`LockIdentity`): the registry's key.
    private let identity: String
    /// This process's bookkeeping of the object (a forked child makes its own).
    private let sides: ProcessLocal<ProcessSide>
    /// What `setEventHandler` set.
    private let eventHandler = Mutex<EventHandler?>(nil)

    /// A lock at `path`, whose parent directory must exist (or, with `.makeParents`, is made)
    /// and be writable, and where nothing but this lock may be. `mode` (0...0o777) sets the
    /// permission bits of the directories the lock is made of, as a lock file's in filelock
    /// (each read bit adds the matching search bit): nil leaves them to the umask. Nothing but
    /// missing parents is created on disk until the lock is acquired. A `postgresql://` or
    /// `redis://` URL (see docs/distributed_lock.md) makes a lock on that server instead, and
    /// connects to it now.
    public convenience init(path: String, options: Options = [], mode: UInt32? = nil) throws(DistributedLockError) {
        if let mode, mode > 0o777 { throw .invalidMode(mode) }
        let (backend, code) = Self.backend(path, options: options.rawValue, mode: mode.map { Int32($0) } ?? -1)
        guard let backend else {
            throw DistributedLockError(code: code, operation: "create", path: path, detail: DistributedLockMessage.detail)
        }
        self.init(backend, options)
        let opened = open()
        if opened != 0 {
            throw DistributedLockError(code: opened, operation: "create", path: path, detail: DistributedLockMessage.detail)
        }
    }

    /// A lock on `target`: a path, or a `postgresql://` / `redis://` URL. A Redis URL's `ttl=S`
    /// (seconds, default 10) sets two bounds: a holder stopped for less than `ttl` keeps the
    /// lock, wherever the stop falls; a holder on another host that dies leaves it held for more
    /// than `ttl` and at most `ttl` + `ttl`/3 (on this host `lock` takes it over at once).
    public convenience init(_ target: String, options: Options = []) throws(DistributedLockError) {
        try self.init(path: target, options: options)
    }

    private init(_ backend: any LockBackend, _ options: Options) {
        self.backend = backend
        self.options = options
        path = backend.name
        identity = LockIdentity.of(backend.name)
        cPath = strdup(path)!
        sides = ProcessLocal { ProcessSide(pid: $0, backend: backend) }
    }

    deinit {
        // Only this process's own bookkeeping: a child's copy of a parent's object touches nothing.
        if let side = sides.ifCurrent() {
            side.state.withLock { s in
                if s.held { side.registry.remove(path: identity, lock: ObjectIdentifier(self)) }
                s.session.close(releasing: s.held && options.contains(.releaseOnDeinit))
            }
        }
        free(cPath)
    }

    /// Validates the target, `options` (raw bits) and `mode` (< 0: none) and makes the lock:
    /// (lock, 0) or (nil, an errno: see sync_distributed_lock_create_with). Failures with a
    /// detailed reason record it in `DistributedLockMessage`.
    package static func make(path: String, options: UInt32 = 0, mode: Int32 = -1) -> (DistributedLock?, Int32) {
        let (backend, code) = backend(path, options: options, mode: mode)
        guard let backend else { return (nil, code) }
        let lock = DistributedLock(backend, Options(rawValue: options))
        let opened = lock.open()
        return opened == 0 ? (lock, 0) : (nil, opened)
    }

    private static func backend(_ path: String, options: UInt32, mode: Int32) -> ((any LockBackend)?, Int32) {
        DistributedLockMessage.clear()
        if options & ~Options.all.rawValue != 0 || mode < -1 || mode > 0o777 { return (nil, EINVAL) }
        guard let scheme = urlScheme(path) else {
            return FileBackend.make(path, mode: mode < 0 ? nil : mode_t(mode), options: Options(rawValue: options))
        }
        switch scheme {
        case "postgresql", "postgres": return PostgresBackend.make(url: path)
        case "redis": return RedisBackend.make(url: path)
        case "etcd": return EtcdBackend.make(url: path)
        default:
            return (nil, DistributedLockMessage.fail(EINVAL, "unsupported lock URL scheme '\(scheme)://' (use a path, postgresql://, postgres://, redis:// or etcd://)"))
        }
    }

    /// A server lock connects at creation, so that a bad address or password is reported then.
    private func open() -> Int32 { sides.current().state.withLock { $0.session.open() } }

    /// The scheme of `target` if it is a URL (`letters://...`), else nil (a path).
    private static func urlScheme(_ target: String) -> String? {
        guard let end = target.firstRange(of: "://") else { return nil }
        let scheme = target[..<end.lowerBound]
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0 == "+") }) else { return nil }
        return scheme.lowercased()
    }

    // MARK: Who holds it through this object

    /// Whether the caller counts as the holder of `s`'s hold.
    private func heldByCaller(_ s: State) -> Bool {
        s.held && (options.contains(.processOwned) || s.owner == threadID())
    }

    private enum Attempt { case acquired, heldHere(UInt32), busy, failed(Int32) }

    /// One try: a re-entry, the object's other thread holding it or waiting for it in the store
    /// (with the release count to wait on), busy in the store, or acquired.
    private func attempt(_ side: ProcessSide, deadline: Int64 = -1) -> Attempt {
        side.state.withLock { s in
            if s.held {
                guard heldByCaller(s) else { return .heldHere(side.releases.pointee.load(ordering: .relaxed)) }
                guard options.contains(.recursive) else { return .failed(EDEADLK) }
                guard s.depth < Int(Int32.max) else { return .failed(EAGAIN) }
                s.depth += 1
                return .acquired
            }
            if s.waiting { return .heldHere(side.releases.pointee.load(ordering: .relaxed)) }
            let code = s.session.tryAcquire(deadline: deadline)
            if code == 0 { took(&s, side) }
            return code == 0 ? .acquired : code == EBUSY ? .busy : .failed(code)
        }
    }

    private func took(_ s: inout State, _ side: ProcessSide) {
        s.held = true
        s.owner = threadID()
        s.depth = 1
        side.registry.add(path: identity, thread: s.owner, lock: ObjectIdentifier(self))
        s.session.watch(HoldTicket(side: side, generation: side.beginHold(), lock: self))
    }

    /// Ends the hold (`all`: whatever its count; `anyThread`: whichever thread holds it).
    private func release(all: Bool, anyThread: Bool) -> Int32 {
        DistributedLockMessage.clear()
        guard let side = sides.ifCurrent() else { return EPERM }  // (a parent's object: nothing here is ours)
        let (code, freed) = side.state.withLock { s -> (Int32, Bool) in
            guard s.held, anyThread || heldByCaller(s) else { return (EPERM, false) }
            if !all && s.depth > 1 {
                s.depth -= 1
                return (0, false)
            }
            let generation = side.holdGeneration
            side.beginRelease(generation: generation)
            let code = s.session.release()
            if let event = side.endRelease(generation: generation, code: code) { Notifier.process.current().post(self, event) }
            if code != 0 && code != ESTALE && code != EBUSY { return (code, false) }  // still held: a retry may work
            (s.held, s.owner, s.depth) = (false, 0, 0)
            side.registry.remove(path: identity, lock: ObjectIdentifier(self))
            side.releases.pointee.add(1, ordering: .sequentiallyConsistent)
            return (code, true)
        }
        if freed { side.wakeOne() }
        return code
    }

    // MARK: Operations returning errno codes (the C API calls these; the Swift API wraps them).

    /// Acquires the lock if it is free; never blocks. 0; EBUSY (held: by another holder, or by
    /// another thread through this object); EDEADLK (the caller holds it, not recursive); EAGAIN
    /// (recursion count overflow); EEXIST (something that is not a lock is at `path`); a
    /// backend's error (ECONNREFUSED, EACCES, EIO, ELIBACC: see `DistributedLockMessage`); or a
    /// system errno.
    package func tryLockCode() -> Int32 {
        DistributedLockMessage.clear()
        switch attempt(sides.current()) {
        case .acquired: return 0
        case .heldHere, .busy: return EBUSY
        case .failed(let code): return code
        }
    }

    /// What a wait does when a signal handler runs.
    package enum Interrupts: Sendable {
        /// Returns EINTR if a signal handler ran while it slept.
        case reported
        /// Goes on waiting.
        case retried
        /// Returns EINTR if a signal handler ran, and at least every 50 ms.
        case sliced
    }

    /// Waits for the lock until the monotonic `deadline` (ns, < 0: none) passes: while another
    /// thread holds it through this object, sleeps until that hold ends; while another holder
    /// has it, waits in the store (PostgreSQL) or polls, pausing up to `pollNanoseconds`
    /// between tries (taking over a stale holder's lock). `interrupts` says what a signal does; `.sliced` also returns EINTR at
    /// least every 50 ms (a server-side wait's request stays queued for the next call, until
    /// `isHeldByCaller` or another operation withdraws it). 0,
    /// ETIMEDOUT, EINTR (a signal handler ran while sleeping: call again), EINVAL (poll interval
    /// <= 0), EDEADLK (the caller holds it through this non-recursive object, or, with no
    /// deadline, through another object of this process), EAGAIN, EEXIST, a backend's error, or
    /// a system errno.
    package func lockCode(deadline: Int64, pollNanoseconds: Int64, interrupts: Interrupts = .reported) -> Int32 {
        DistributedLockMessage.clear()
        if pollNanoseconds <= 0 { return EINVAL }
        let side = sides.current()
        // A sleeper woken by a release that leaves without the lock passes the wakeup on, so that
        // the object's other sleepers are never left waiting for a release that already happened.
        var slept = false
        let code = InterruptibleCall.run(interrupts == .sliced) { wait(side, deadline, pollNanoseconds, interrupts, &slept) }
        if code != 0 && slept { side.wakeOne() }
        if code == ETIMEDOUT && DistributedLockMessage.detail == nil {
            DistributedLockMessage.set("timed out waiting for the lock \(path): it is held")
        }
        return code
    }

    private func wait(_ side: ProcessSide, _ deadline: Int64, _ poll: Int64, _ interrupts: Interrupts,
                      _ slept: inout Bool) -> Int32 {
        let interruptible = interrupts == .sliced
        let sliceEnd = interruptible ? Deadline.after(nanoseconds: Deadline.interruptSlice) : Deadline.none
        var nap = min(poll, backend.firstPollNanoseconds ?? poll)
        var first = true
        while true {
            // A call makes its first try however little time is left (a server request answered
            // within connect_timeout if none is); after that, a passed deadline ends the wait.
            if !first && Deadline.hasPassed(deadline) { return ETIMEDOUT }
            first = false
            var heldHere: UInt32?
            switch attempt(side, deadline: deadline) {
            case .acquired: return 0
            case .failed(let code): return code
            case .heldHere(let releases): heldHere = releases
            case .busy:
                if deadline < 0 && heldElsewhereByCaller(side) {
                    return EDEADLK  // this thread holds it through another object: it would wait forever
                }
                if backend.waitsInStore {
                    if Deadline.hasPassed(deadline) { return ETIMEDOUT }
                    if let code = waitInStore(side, deadline, interruptible) { return code }
                    continue  // the object's state changed meanwhile: look again
                }
                let code = recoverStaleCode(deadline: deadline)
                if code == 0 || (code != EBUSY && code != ENOENT) { return code }
                if code == ENOENT { continue }  // released meanwhile: try again at once
            }
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) { return ETIMEDOUT }
            if Deadline.hasPassed(sliceEnd, now: now) { return EINTR }
            let end = Deadline.earliest(deadline, sliceEnd)
            if let releases = heldHere {
                slept = true
                if side.sleep(while: releases, deadline: end) == EINTR && interrupts != .retried { return EINTR }
            } else {
                let pause = min(nap, Deadline.remaining(end, now: now) ?? nap)
                nap = nap > poll / 2 ? poll : nap * 2  // (saturates: any poll up to Int64.max)
                var request = timespec(tv_sec: Int(pause / 1_000_000_000), tv_nsec: Int(pause % 1_000_000_000))
                if clock_nanosleep(CLOCK_MONOTONIC, 0, &request, nil) == EINTR && interrupts != .retried { return EINTR }
            }
        }
    }

    /// A wait in the store by this thread, for the object's session: the other threads of the
    /// object see `waiting` and sleep until it ends. nil if the object's state changed first.
    private func waitInStore(_ side: ProcessSide, _ deadline: Int64, _ interruptible: Bool) -> Int32? {
        let session: (any LockSession)? = side.state.withLock { s in
            if s.held || s.waiting { return nil }
            s.waiting = true
            return s.session
        }
        guard let session else { return nil }
        let code = session.waitAcquire(deadline: deadline, interruptible: interruptible)
        side.state.withLock { s in
            s.waiting = false
            if code == 0 { took(&s, side) }
        }
        side.releases.pointee.add(1, ordering: .sequentiallyConsistent)  // the sleepers look again
        side.wakeOne()
        return code
    }

    /// Ends one acquisition by the caller; the last one releases the lock. 0; EPERM (the caller
    /// does not hold it through this object); ESTALE (the hold was lost meanwhile: broken, lease
    /// expired, session ended); EBUSY (lost, and someone else holds it now); or another errno
    /// (still held: retry).
    package func unlockCode() -> Int32 { release(all: false, anyThread: false) }

    /// Releases the caller's hold whatever its count (filelock's `release(force=True)`); codes
    /// as `unlockCode`.
    package func unlockAllCode() -> Int32 { release(all: true, anyThread: false) }

    /// Runs `body` with a session of this process, or, while another thread of the object
    /// waits in the store through it, with a session of its own for the call.
    private func withIdleSession<R: Sendable>(_ body: (any LockSession) -> R) -> R {
        let side = sides.current()
        let busy = side.state.withLock { s in s.waiting ? nil : body(s.session) }
        if let busy { return busy }
        let spare = backend.makeSession(side.identity)
        defer { spare.close(releasing: false) }
        return body(spare)
    }

    /// Removes the lock whoever holds it (Apple's breakLock; PostgreSQL: ends the holder's
    /// session). 0 (broken, or it was free); EEXIST (something that is not a lock is at
    /// `path`), a backend's error, or a system errno.
    package func breakLockCode() -> Int32 {
        DistributedLockMessage.clear()
        return withIdleSession { $0.breakLock() }
    }

    /// If the lock's holder is stale (on this host, process gone), takes the lock over in one
    /// atomic step: the caller holds it then. 0 (taken over), EBUSY (the holder is alive, or on
    /// another host, or another breaker took it over first, or another thread holds it through
    /// this object), ENOENT (the lock is free), EDEADLK (the caller holds it), EEXIST, a
    /// backend's error, or a system errno. A server's answers are awaited until the monotonic
    /// `deadline` (a wait's: ETIMEDOUT once it passed) or connect_timeout, whichever is sooner.
    package func recoverStaleCode(deadline: Int64 = Deadline.none) -> Int32 {
        DistributedLockMessage.clear()
        let side = sides.current()
        return side.state.withLock { s in
            if s.held { return heldByCaller(s) ? EDEADLK : EBUSY }
            if s.waiting { return EBUSY }
            let code = s.session.recoverStale(deadline: deadline)
            if code == 0 { took(&s, side) }
            return code
        }
    }

    /// The current holder: (holder, 0), (nil, 0) when free, or (nil, EEXIST / errno).
    package func holderCode() -> (DistributedLockHolder?, Int32) {
        DistributedLockMessage.clear()
        return withIdleSession { $0.holder() }
    }

    /// Whether the caller holds the lock through this object now (checked in the store: false
    /// once it was broken, its lease lost or its session ended). While the object neither holds
    /// nor waits, it also withdraws what an interrupted interruptible wait left for its next call
    /// (`withdrawWait`): a caller that gives such a wait up calls this, which never waits.
    package func isHeldByCaller() -> Bool {
        guard let side = sides.ifCurrent() else { return false }
        return side.state.withLock { s in
            if !s.held && !s.waiting { s.session.withdrawWait() }
            return heldByCaller(s) && s.session.holds()
        }
    }

    /// Whether the calling thread holds the lock through another object of this process: a wait
    /// without a deadline through this object would never end (lockCode returns EDEADLK then).
    /// This process's bookkeeping only (no store access); false in a forked child for its
    /// parent's holds.
    package func isHeldElsewhereByCaller() -> Bool {
        guard let side = sides.ifCurrent() else { return false }
        return heldElsewhereByCaller(side)
    }

    private func heldElsewhereByCaller(_ side: ProcessSide) -> Bool {
        side.registry.holds(path: identity, thread: threadID(), lock: ObjectIdentifier(self))
    }

    /// The fencing token of the caller's hold: (token, 0), or (0, EPERM) when the caller does
    /// not hold the lock through this object.
    package func tokenCode() -> (UInt64, Int32) {
        guard let side = sides.ifCurrent() else { return (0, EPERM) }
        return side.state.withLock { s in heldByCaller(s) ? (s.session.token, 0) : (0, EPERM) }
    }

    /// How many of the caller's acquisitions through this object are not yet released (0 when
    /// it does not hold it).
    package func countHeldByCaller() -> Int {
        guard let side = sides.ifCurrent() else { return 0 }
        return side.state.withLock { s in heldByCaller(s) ? s.depth : 0 }
    }

    // MARK: The Swift API

    /// Acquires the lock if it is free, without blocking: true if the caller holds it now (a
    /// re-entry, with `.recursive`), false if someone else holds it.
    public func tryLock() throws(DistributedLockError) -> Bool {
        let code = tryLockCode()
        if code == EBUSY { return false }
        try check(code, "tryLock")
        return true
    }

    /// Acquires the lock: waits for another thread's hold through this object to end, waits in
    /// the server (PostgreSQL) or polls other holders every `pollInterval` at most (Redis backs
    /// off from 1 ms), and takes over a stale holder's lock (see `recoverStale`); throws
    /// `.timedOut` once `timeout` (nil: none) has passed.
    public func lock(timeout: Duration? = nil, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        let deadline = timeout.map { Deadline.after($0) } ?? Deadline.none
        try check(lockCode(deadline: deadline, pollNanoseconds: nanoseconds(pollInterval), interrupts: .retried), "lock")
    }

    /// Ends one acquisition (the last releases the lock). Throws `.notHeld`, `.broken` or
    /// `.brokenAndHeldByAnother` (the hold was lost meanwhile).
    public func unlock() throws(DistributedLockError) { try check(unlockCode(), "unlock") }

    /// Releases the caller's hold, however many acquisitions it counts.
    public func unlockAll() throws(DistributedLockError) { try check(unlockAllCode(), "unlock") }

    /// Removes the lock whoever holds it: only for a holder known to be dead (Apple's breakLock).
    public func breakLock() throws(DistributedLockError) { try check(breakLockCode(), "breakLock") }

    /// Takes over the lock if its holder is stale (`holder?.isStale`), atomically: of several
    /// processes doing so at once exactly one returns true and holds the lock.
    public func recoverStale() throws(DistributedLockError) -> Bool {
        let code = recoverStaleCode()
        if code == EBUSY || code == ENOENT { return false }
        try check(code, "recoverStale")
        return true
    }

    /// Who holds the lock now, or nil.
    public var holder: DistributedLockHolder? {
        get throws(DistributedLockError) {
            let (holder, code) = holderCode()
            try check(code, "holder")
            return holder
        }
    }

    /// When the current holder acquired the lock (wall clock since the Unix epoch), or nil.
    public var lockDate: Duration? { get throws(DistributedLockError) { try holder?.acquired } }

    /// Whether the caller holds the lock through this object now (false once it was lost).
    public var isLocked: Bool { isHeldByCaller() }

    /// How many of the caller's acquisitions are not yet released (filelock's `lock_counter`).
    public var lockCount: Int { countHeldByCaller() }

    /// Whether the object's latest hold in this process was lost (broken, taken over, its lease
    /// or server session ended), as far as this process has learned (see `setEventHandler`):
    /// one atomic load, no store access. Reset by the next acquisition.
    public var isLost: Bool { holdStateCode() == DistributedLockEvent.lost.rawValue }

    /// Whether the object's latest hold is in doubt: its store cannot be reached (Redis: a
    /// renewal got no answer). One atomic load; false again once `resumed` or `lost`.
    public var isSuspended: Bool { holdStateCode() == DistributedLockEvent.suspended.rawValue }

    /// Tells `handler` what this process learns of the object's holds after acquiring them:
    /// `.lost` (once per acquisition), `.suspended` and `.resumed`; nil stops. The handler runs
    /// on libsync's notifier thread (one per process, one call at a time, in order), never with
    /// a lock of libsync held: it may call this object (`unlock` too, for a `.processOwned`
    /// one; a thread-owned hold is ended by its thread's `unlock`, which throws `.broken` or
    /// `.brokenAndHeldByAnother`), and should return soon (it delays the process's other
    /// events). When this returns, the previous handler runs no more (unless called from it).
    /// How soon each backend notices: docs/distributed_lock.md.
    public func setEventHandler(_ handler: EventHandler?) {
        eventHandler.withLock { $0 = handler }
        Notifier.process.current().quiesce(self)
    }

    public typealias EventHandler = @Sendable (DistributedLock, DistributedLockEvent) -> Void

    package var hasEventHandler: Bool { eventHandler.withLock { $0 != nil } }

    /// Runs the handler for `event` (on the notifier thread).
    package func handleEvent(_ event: DistributedLockEvent) {
        if let handler = eventHandler.withLock({ $0 }) { handler(self, event) }
    }

    /// The state of the object's latest hold in this process: 0 (in place, released, or none),
    /// `DistributedLockEvent.suspended` or `.lost` (raw values). One atomic load.
    package func holdStateCode() -> Int32 {
        guard let side = sides.ifCurrent() else { return 0 }
        switch side.holdState {
        case HoldWord.lost: return DistributedLockEvent.lost.rawValue
        case HoldWord.suspended: return DistributedLockEvent.suspended.rawValue
        default: return 0
        }
    }

    /// The fencing token of the caller's hold, or nil when the caller does not hold the lock:
    /// it strictly increases from one acquisition of the lock to the next, whoever holds it, so
    /// a resource that remembers the largest token it saw can refuse a write from a holder that
    /// lost the lock (docs/distributed_lock.md).
    public var token: UInt64? {
        let (token, code) = tokenCode()
        return code == 0 ? token : nil
    }

    /// Runs `body` holding the lock (`lock(timeout:pollInterval:)`), releases it, and returns
    /// `body`'s value; rethrows `body`'s error.
    public func withLock<R>(timeout: Duration? = nil, pollInterval: Duration = .milliseconds(10),
                            _ body: () throws -> R) throws -> R {
        try lock(timeout: timeout, pollInterval: pollInterval)
        let result: R
        do { result = try body() } catch { try? unlock(); throw error }
        try unlock()
        return result
    }

    private func check(_ code: Int32, _ operation: String) throws(DistributedLockError) {
        if code != 0 {
            throw DistributedLockError(code: code, operation: operation, path: path, detail: DistributedLockMessage.detail)
        }
    }
}

// MARK: The backend protocol

/// Where a lock is kept: a file system, a PostgreSQL server, a Redis server.
protocol LockBackend: Sendable {
    /// The target as users see it: an absolute path, or a URL without its password.
    var name: String { get }
    /// Whether a wait is one request that the store answers when the lock is granted (else the
    /// waiter polls).
    var waitsInStore: Bool { get }
    /// A polling wait's first pause, doubled after each busy try up to the poll interval; nil:
    /// every pause is the poll interval.
    var firstPollNanoseconds: Int64? { get }
    /// A session for one process's side of one object (not connected yet).
    func makeSession(_ me: ProcessIdentity) -> any LockSession
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
    /// Hands the hold just acquired to the backend's detector, which reports its loss (and
    /// doubt) to `ticket` (HoldLoss.swift); it stops watching at release and close.
    func watch(_ ticket: HoldTicket)
}

extension LockSession {
    /// (Backends whose interrupted waits leave nothing behind.)
    func withdrawWait() {}
}

/// The reason for the calling thread's last failed distributed-lock call, when the backend gave
/// one (a server's message, a missing client library); per thread.
package enum DistributedLockMessage {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { free($0) }
        return key
    }()

    /// The detailed reason recorded since the last `clear()`, if any.
    package static var detail: String? {
        pthread_getspecific(key).map { String(cString: $0.assumingMemoryBound(to: CChar.self)) }
    }

    /// The recorded reason as a C string (valid until the thread's next distributed-lock call), or nil.
    package static var cString: UnsafePointer<CChar>? {
        pthread_getspecific(key).map { UnsafePointer($0.assumingMemoryBound(to: CChar.self)) }
    }

    package static func set(_ message: String) {
        let old = pthread_getspecific(key)
        pthread_setspecific(key, strdup(message))
        free(old)
    }

    /// Records `message` and returns `code`.
    static func fail(_ code: Int32, _ message: String) -> Int32 {
        set(message)
        return code
    }

    package static func clear() {
        if let old = pthread_getspecific(key) {
            pthread_setspecific(key, nil)
            free(old)
        }
    }
}

// MARK: Per-process bookkeeping

/// A process's hold through one object, and its session with the store.
struct State {
    var session: any LockSession
    /// This process holds the lock through the object.
    var held = false
    /// The thread that acquired it (a kernel thread id).
    var owner: UInt32 = 0
    /// Acquisitions not yet released (more than 1 only when recursive).
    var depth = 0
    /// A thread of the object is waiting in the store through `session` (outside the state lock).
    var waiting = false
}

/// Something of which each process has its own (`pid` says whose).
protocol ProcessBound: AnyObject, Sendable {
    var pid: Int32 { get }
}

/// A value of which each process has its own: a forked child never uses its parent's copy (a
/// parent thread may have been changing it at the fork, and what it records is the parent's),
/// but makes a fresh one on first use. The copy is never freed in the child while the object
/// lives (a child thread may still be reading it, to find it is not its process's).
final class ProcessLocal<Value: ProcessBound>: @unchecked Sendable {
    private let slot = Atomic<Unmanaged<Value>?>(nil)
    private let make: @Sendable (Int32) -> Value

    init(_ make: @escaping @Sendable (Int32) -> Value) {
        self.make = make
        slot.store(Unmanaged.passRetained(make(getpid())), ordering: .releasing)
    }

    deinit { slot.load(ordering: .acquiring)?.release() }

    /// This process's value (`pid`: this process's id), made now if it has none yet.
    func current(pid: Int32 = getpid()) -> Value {
        var seen = slot.load(ordering: .acquiring)
        while true {
            if let value = seen?.takeUnretainedValue(), value.pid == pid { return value }
            let fresh = Unmanaged.passRetained(make(pid))
            let (exchanged, found) = slot.compareExchange(expected: seen, desired: fresh, ordering: .acquiringAndReleasing)
            if exchanged { return fresh.takeUnretainedValue() }
            fresh.release()
            seen = found  // another thread of this process made one first
        }
    }

    /// This process's value, or nil if it has none (it holds nothing, then).
    func ifCurrent() -> Value? {
        guard let value = slot.load(ordering: .acquiring)?.takeUnretainedValue(), value.pid == getpid() else { return nil }
        return value
    }
}

/// One process's side of one object: its hold, and the object's threads waiting for it to end.
final class ProcessSide: ProcessBound, @unchecked Sendable {
    let pid: Int32
    /// This process as holder entries name it, and its registry of holds.
    let identity: ProcessIdentity
    let registry: HoldRegistry
    let state: Mutex<State>
    /// The latest hold's generation and state (`HoldWord`; HoldLoss.swift).
    let hold = Atomic<UInt64>(0)
    /// words[0]: bumped when a hold ends (a futex word); words[1]: threads sleeping on it.
    private let words = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 2)
    var releases: UnsafeMutablePointer<Atomic<UInt32>> { words }

    init(pid: Int32, backend: any LockBackend) {
        self.pid = pid
        identity = ProcessIdentity.identities.current(pid: pid)
        registry = Self.registries.current(pid: pid)
        state = Mutex(State(session: backend.makeSession(identity)))
        words.initialize(to: Atomic(0))
        (words + 1).initialize(to: Atomic(0))
    }

    deinit { words.deinitialize(count: 2); words.deallocate() }

    /// Sleeps until the release count moves from `seen` (read while the state showed the hold),
    /// or the deadline. Counting in before sleeping makes a releaser, which bumps the count and
    /// then reads the sleepers (both sequentially consistent), see this sleeper.
    func sleep(while seen: UInt32, deadline: Int64) -> Int32 {
        words[1].add(1, ordering: .sequentiallyConsistent)
        defer { words[1].subtract(1, ordering: .relaxed) }
        return Futex.wait(UnsafeMutableRawPointer(words), expected: seen, deadline: deadline, shared: false)
    }

    /// Wakes one sleeper, if any: it tries to acquire, and passes the wakeup on if it leaves
    /// without the lock.
    func wakeOne() {
        if words[1].load(ordering: .sequentiallyConsistent) != 0 {
            Futex.wake(UnsafeMutableRawPointer(words), count: 1, shared: false)
        }
    }

    /// Which thread holds which lock through which object, in this process: a thread that would
    /// wait forever for a lock it holds through another object gets EDEADLK instead.
    static let registries = ProcessLocal<HoldRegistry> { HoldRegistry(pid: $0) }
}

final class HoldRegistry: ProcessBound, @unchecked Sendable {
    let pid: Int32
    private let holds = Mutex<[String: [(thread: UInt32, lock: ObjectIdentifier)]]>([:])

    init(pid: Int32) { self.pid = pid }

    func add(path: String, thread: UInt32, lock: ObjectIdentifier) {
        holds.withLock { $0[path, default: []].append((thread, lock)) }
    }

    func remove(path: String, lock: ObjectIdentifier) {
        holds.withLock { holds in
            holds[path]?.removeAll { $0.lock == lock }
            if holds[path]?.isEmpty == true { holds[path] = nil }
        }
    }

    /// Whether `thread` holds `path` through an object other than `lock`.
    func holds(path: String, thread: UInt32, lock: ObjectIdentifier) -> Bool {
        holds.withLock { $0[path]?.contains { $0.thread == thread && $0.lock != lock } ?? false }
    }
}

func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    return overflow ? (seconds < 0 ? .min : .max) : whole &+ attoseconds / 1_000_000_000
}

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
