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
//
// Files: this one holds the lock and its holder; DistributedLockError.swift its errors,
// LockBackend.swift the backend protocols, DistributedLockMessage.swift the per-thread error
// message, ProcessSide.swift the per-process bookkeeping.

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
    /// process): the lock will never be released, and `recover()` may take it over.
    /// (Never for PostgreSQL, whose server releases a dead holder's lock itself.)
    public let isStale: Bool

    /// `acquired` in nanoseconds, for the C API.
    package var acquiredNanoseconds: Int64 { Deadline.nanoseconds(acquired) }

    public var description: String {
        "pid \(pid) on \(host), acquired \(acquired.components.seconds) s after the epoch"
            + (isStale ? " (stale: the process is gone)" : "")
    }
}


/// A lock between processes and hosts, kept in a shared file system (Apple's NSDistributedLock,
/// with stale-holder recovery), a PostgreSQL server (session advisory locks) or a Redis server
/// (leases renewed while held); each acquisition gets a fencing token (`token`). `tryLock`
/// never blocks; `lock(pollInterval:)` and `tryLock(timeout:pollInterval:)` wait.
///
/// Holders: two objects for one target (in one process or not) exclude each other. Through one
/// object, the holder is the thread that acquired it (in a Swift task: the task, on whatever
/// thread it resumes; docs/async.md): the object's other threads wait for it
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
        /// A plain file at the lock's path, as filelock's `FileLock` leaves behind, is removed
        /// and the lock made there, if it is empty and no process holds a `flock` on it (checked
        /// by taking one until the file is gone); otherwise `.notALock`, with a message saying
        /// what to do. Without it, any file there is `.notALock`. (File system only.)
        public static let takeOverPlainFile = Options(rawValue: 32)
        package static let all: Options = [.recursive, .processOwned, .makeParents, .releaseOnDeinit, .removeOnRelease,
                                           .takeOverPlainFile]
    }

    /// The lock's target: for a path, absolute, its parent directory resolved (symbolic links
    /// followed); for a URL, the URL without its password.
    public let path: String
    public let options: Options
    /// `path` as a C string, for the C API (immutable; freed with the object).
    nonisolated(unsafe) package let cPath: UnsafeMutablePointer<CChar>
    let backend: any LockBackend
    /// Which lock `path` names, whatever its spelling (`LockIdentity`): the registry's key.
    private let identity: String
    /// This process's bookkeeping of the object (a forked child makes its own).
    let sides: ProcessLocal<ProcessSide>
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
            throw DistributedLockError(code: code, operation: .create, path: path, detail: DistributedLockMessage.detail)
        }
        self.init(backend, options)
        let opened = open()
        if opened != 0 {
            throw DistributedLockError(code: opened, operation: .create, path: path, detail: DistributedLockMessage.detail)
        }
    }

    /// A lock on `target`: a path, or a `postgresql://` / `redis://` URL. A Redis URL's `ttl=S`
    /// (seconds, default 10) sets two bounds: a holder stopped for less than `ttl` keeps the
    /// lock, wherever the stop falls; a holder on another host that dies leaves it held for more
    /// than `ttl` and at most `ttl` + `ttl`/3 (on this host `lock` takes it over at once).
    public convenience init(_ target: String, options: Options = []) throws(DistributedLockError) {
        try self.init(path: target, options: options)
    }

    private init(_ backend: any LockBackend, _ options: Options, identity: String? = nil) {
        self.backend = backend
        self.options = options
        path = backend.name
        self.identity = identity ?? LockIdentity.of(backend.name)
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

    /// An object over `backend` (a read/write lock's side: ServerReadWriteLock.swift; a
    /// distributed semaphore's permits: DistributedSemaphore.swift), connected now: (lock, 0) or
    /// (nil, errno). `identity` (nil: the backend's) keys its holds in the process's registry (a
    /// semaphore's objects each have their own: holding one permit never makes a wait for
    /// another one a deadlock).
    static func make(backend: any LockBackend, options: Options, identity: String? = nil) -> (DistributedLock?, Int32) {
        let lock = DistributedLock(backend, options, identity: identity)
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
        case "etcd", "etcds": return EtcdBackend.make(url: path)
        default:
            return (nil, DistributedLockMessage.fail(EINVAL, "unsupported lock URL scheme '\(scheme)://' (use a path, postgresql://, postgres://, redis://, etcd:// or etcds://)"))
        }
    }

    /// A server lock connects at creation, so that a bad address or password is reported then.
    private func open() -> Int32 { sides.current().state.withLock { $0.session.open() } }

    /// Whether `target` names a server (a URL: `scheme://...`, the scheme ASCII letters and `+`)
    /// rather than a path: the rule by which `init(path:)` chooses, for every front end.
    package static func isURL(_ target: String) -> Bool { urlScheme(target) != nil }

    /// The target `target` names, spelled as `path` of a lock made for it will be, without
    /// making one: a path absolute, trailing slashes dropped, its parent resolved as far as it
    /// exists (`LockDirectory.canonical`); a URL as given. nil for a path that names no file.
    package static func canonicalTarget(_ target: String) -> String? {
        isURL(target) ? target : LockDirectory.canonical(target)
    }

    /// The scheme of `target` if it is a URL (`letters://...`), else nil (a path).
    private static func urlScheme(_ target: String) -> String? {
        guard let end = target.firstRange(of: "://") else { return nil }
        let scheme = target[..<end.lowerBound]
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0 == "+") }) else { return nil }
        return scheme.lowercased()
    }

    // MARK: Who holds it through this object

    /// The caller as a holder: the Swift task it runs in (its address), so that a hold taken in
    /// a task stays the task's when it resumes on another thread; outside a task, its thread (a
    /// kernel thread id, below 2^22: never a task's address).
    static func caller() -> UInt {
        let task = AsyncHold.currentTask()
        return task != 0 ? task : UInt(threadID())
    }

    /// Whether `caller` counts as the holder of `s`'s hold.
    private func heldByCaller(_ s: State, _ caller: UInt = DistributedLock.caller()) -> Bool {
        s.held && (options.contains(.processOwned) || s.owner == caller)
    }

    private enum Attempt { case acquired, heldHere(UInt32), busy, failed(Int32), lost(code: Int32, freed: Bool) }

    /// One try: a re-entry, the object's other thread holding it or waiting for it in the store
    /// (with the release count to wait on), busy in the store, acquired, or the caller's lost
    /// hold ended (`lost`: `endHold`'s outcome, for `endedLostHold`).
    private func attempt(_ side: ProcessSide, deadline: Int64 = -1, caller: UInt = DistributedLock.caller()) -> Attempt {
        side.state.withLock { s in
            if s.held {
                guard heldByCaller(s, caller) else { return .heldHere(side.releases.pointee.load(ordering: .relaxed)) }
                guard options.contains(.recursive) else {
                    // The caller acquiring again: a deadlock while its hold is in place; once the
                    // hold was lost in the store, this acquire ends it and reports the loss.
                    if s.session.holds() { return .failed(EDEADLK) }
                    let (code, freed) = endHold(&s, side)
                    return .lost(code: code, freed: freed)
                }
                guard s.depth < Int(Int32.max) else { return .failed(EAGAIN) }
                s.depth += 1
                return .acquired
            }
            if s.waiting { return .heldHere(side.releases.pointee.load(ordering: .relaxed)) }
            let code = s.session.tryAcquire(deadline: deadline)
            if code == 0 { took(&s, side, caller) }
            return code == 0 ? .acquired : code == EBUSY ? .busy : .failed(code)
        }
    }

    private func took(_ s: inout State, _ side: ProcessSide, _ caller: UInt = DistributedLock.caller()) {
        s.held = true
        s.owner = caller
        s.depth = 1
        side.registry.add(path: identity, thread: s.owner, lock: ObjectIdentifier(self))
        s.session.watch(HoldTicket(side: side, generation: side.beginHold(), lock: self))
    }

    /// Ends the hold (`all`: whatever its count; `anyThread`: whichever thread holds it).
    func release(all: Bool, anyThread: Bool, caller: UInt = DistributedLock.caller()) -> Int32 {
        DistributedLockMessage.clear()
        guard let side = sides.ifCurrent() else { return EPERM }  // (a parent's object: nothing here is ours)
        let (code, freed) = side.state.withLock { s -> (Int32, Bool) in
            guard s.held, anyThread || heldByCaller(s, caller) else { return (EPERM, false) }
            if !all && s.depth > 1 {
                s.depth -= 1
                return (0, false)
            }
            return endHold(&s, side)
        }
        if freed { side.wakeOne() }
        return code
    }

    /// Releases the hold in the store, whatever its count (under the state lock): the session's
    /// code (0, ESTALE, EBUSY: the hold ended, `freed`; another errno: still held, a retry may
    /// work). The caller wakes one sleeper of the object if `freed`, outside the state lock.
    private func endHold(_ s: inout State, _ side: ProcessSide) -> (code: Int32, freed: Bool) {
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

    /// What an acquire returns after `attempt` ended the caller's lost hold: nil when the hold
    /// was in place after all and is released now (try again); ESTALE when it was lost (broken,
    /// lease expired, session ended; whether or not another holds the lock now: the message
    /// says); another errno when the release failed and the hold stays (as unlock's).
    private func endedLostHold(_ side: ProcessSide, _ code: Int32, _ freed: Bool) -> Int32? {
        if freed { side.wakeOne() }
        if code == 0 { return nil }
        guard code == ESTALE || code == EBUSY else { return code }
        if DistributedLockMessage.detail == nil {
            DistributedLockMessage.set("the hold on \(path) was lost since this object acquired it (broken, lease expired, "
                                       + "or server session ended); this call ended it"
                                       + (code == EBUSY ? ", and another holder has the lock now" : ""))
        }
        return ESTALE
    }

    // MARK: Operations returning errno codes (the C API calls these; the Swift API wraps them).

    /// Acquires the lock if it is free; never blocks. 0; EBUSY (held: by another holder, or by
    /// another thread through this object); EDEADLK (the caller holds it, not recursive); ESTALE
    /// (the caller's hold through this non-recursive object was lost in the store since it
    /// acquired it: this call ended it, acquiring nothing; the next call tries afresh); EAGAIN
    /// (recursion count overflow); EEXIST (something that is not a lock is at `path`); a
    /// backend's error (ECONNREFUSED, EACCES, EIO, ELIBACC: see `DistributedLockMessage`); or a
    /// system errno.
    package func tryLockCode() -> Int32 {
        DistributedLockMessage.clear()
        let side = sides.current()
        while true {
            switch attempt(side) {
            case .acquired: return 0
            case .heldHere, .busy: return EBUSY
            case .failed(let code): return code
            case .lost(let code, let freed): if let code = endedLostHold(side, code, freed) { return code }
            }
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
    /// deadline, through another object of this process), ESTALE (the caller's hold was lost: as
    /// `tryLockCode`), EAGAIN, EEXIST, a backend's error, or a system errno.
    ///
    /// `cancelled` (nil: none) is asked after each try that finds the lock held, before the wait
    /// goes on (in the store, on the futex, or pausing): true ends the wait with ECANCELED,
    /// withdrawing what a server-side wait left queued.
    package func lockCode(deadline: Int64, pollNanoseconds: Int64, interrupts: Interrupts = .reported,
                          cancelled: (() -> Bool)? = nil) -> Int32 {
        DistributedLockMessage.clear()
        if pollNanoseconds <= 0 { return EINVAL }
        let side = sides.current()
        // A sleeper woken by a release that leaves without the lock passes the wakeup on, so that
        // the object's other sleepers are never left waiting for a release that already happened.
        var slept = false
        let code = InterruptibleCall.run(interrupts == .sliced) {
            wait(side, deadline, pollNanoseconds, interrupts, cancelled, &slept)
        }
        if code != 0 && slept { side.wakeOne() }
        if code == ECANCELED { side.state.withLock { s in if !s.held && !s.waiting { s.session.withdrawWait() } } }
        return code == ETIMEDOUT ? timedOut() : code
    }

    /// What one try of a wait found (`step`).
    enum Step {
        /// The wait ends with this code (0: acquired).
        case done(Int32)
        /// Try again at once (`fresh`: as a first try, however little time is left).
        case again(fresh: Bool)
        /// Another thread or task of this process holds it through this object, or waits in the
        /// store for it: wait until the release count moves from this one.
        case heldHere(UInt32)
        /// Another holder has it: pause, then try again.
        case busy
        /// Another holder has it, and the store can queue a wait for it (`waitInStore`).
        case inStore
    }

    /// One try of a wait for `caller`: acquire, a re-entry, a lost hold ended, or busy; a polled
    /// busy lock is also taken over if its holder is stale. `storeWaits`: report `.inStore` for
    /// a backend that `waitsInStore` instead of polling it.
    func step(_ side: ProcessSide, _ deadline: Int64, _ caller: UInt, storeWaits: Bool) -> Step {
        switch attempt(side, deadline: deadline, caller: caller) {
        case .acquired: return .done(0)
        case .failed(let code): return .done(code)
        case .lost(let code, let freed):
            if let code = endedLostHold(side, code, freed) { return .done(code) }
            return .again(fresh: true)  // released after all: a fresh first try
        case .heldHere(let releases): return .heldHere(releases)
        case .busy:
            if deadline < 0 && heldElsewhereByCaller(side, caller) {
                // the caller holds it through another object: it would wait forever
                return .done(DistributedLockMessage.fail(EDEADLK, "the calling thread holds \(path) through another object of "
                                                         + "this process: a wait without a timeout would never end"))
            }
            if storeWaits && backend.waitsInStore { return .inStore }
            let code = recoverStaleCode(deadline: deadline, caller: caller)
            if code == 0 || (code != EBUSY && code != ENOENT) { return .done(code) }
            return code == ENOENT ? .again(fresh: false) : .busy  // ENOENT: released meanwhile
        }
    }

    /// ETIMEDOUT, with the reason unless a backend gave one.
    func timedOut() -> Int32 {
        if DistributedLockMessage.detail == nil { DistributedLockMessage.set("timed out waiting for the lock \(path): it is held") }
        return ETIMEDOUT
    }

    private func wait(_ side: ProcessSide, _ deadline: Int64, _ poll: Int64, _ interrupts: Interrupts,
                      _ cancelled: (() -> Bool)?, _ slept: inout Bool) -> Int32 {
        let interruptible = interrupts == .sliced
        let sliceEnd = interruptible ? Deadline.after(nanoseconds: Deadline.interruptSlice) : Deadline.none
        var backoff = PollBackoff(poll: poll, first: backend.firstPollNanoseconds)
        let caller = Self.caller()
        var first = true
        while true {
            // A call makes its first try however little time is left (a server request answered
            // within connect_timeout if none is); after that, a passed deadline ends the wait.
            if !first && Deadline.hasPassed(deadline) { return ETIMEDOUT }
            first = false
            var heldHere: UInt32?
            switch step(side, deadline, caller, storeWaits: true) {
            case .done(let code): return code
            case .again(let fresh):
                first = fresh
                continue
            case .heldHere(let releases): heldHere = releases
            case .inStore:
                if Deadline.hasPassed(deadline) { return ETIMEDOUT }
                if let cancelled, cancelled() { return ECANCELED }
                if let code = waitInStore(side, deadline, interruptible) { return code }
                continue  // the object's state changed meanwhile: look again
            case .busy: break
            }
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) { return ETIMEDOUT }
            if let cancelled, cancelled() { return ECANCELED }
            if Deadline.hasPassed(sliceEnd, now: now) { return EINTR }
            let end = Deadline.earliest(deadline, sliceEnd)
            if let releases = heldHere {
                slept = true
                if side.sleep(while: releases, deadline: end, interruptible: interrupts != .retried) == EINTR { return EINTR }
            } else {
                let pause = backoff.next(until: end, now: now)
                var request = timespec(tv_sec: Int(pause / 1_000_000_000), tv_nsec: Int(pause % 1_000_000_000))
                if clock_nanosleep(CLOCK_MONOTONIC, 0, &request, nil) == EINTR && interrupts != .retried { return EINTR }
            }
        }
    }

    /// A wait in the store by this thread, for the object's session: the other threads of the
    /// object see `waiting` and sleep until it ends. nil if the object's state changed first.
    private func waitInStore(_ side: ProcessSide, _ deadline: Int64, _ interruptible: Bool) -> Int32? {
        guard let session = beginStoreWait(side) else { return nil }
        let code = session.waitAcquire(deadline: deadline, interruptible: interruptible)
        endStoreWait(side, code, caller: Self.caller(), withdrawing: false)  // (EINTR keeps it queued)
        return code
    }

    /// The object's session, for a wait in the store by the caller (`waiting`: the object's other
    /// threads and tasks wait for it to end), or nil if it holds the lock or already waits.
    func beginStoreWait(_ side: ProcessSide) -> (any LockSession)? {
        side.state.withLock { s in
            if s.held || s.waiting { return nil }
            s.waiting = true
            return s.session
        }
    }

    /// Ends a wait in the store that ended with `code` (0: `caller` holds the lock; else, if
    /// `withdrawing`, what it left queued is withdrawn), and lets the object's sleepers look again.
    func endStoreWait(_ side: ProcessSide, _ code: Int32, caller: UInt, withdrawing: Bool) {
        side.state.withLock { s in
            s.waiting = false
            if code == 0 { took(&s, side, caller) } else if withdrawing { s.session.withdrawWait() }
        }
        side.releases.pointee.add(1, ordering: .sequentiallyConsistent)  // the sleepers look again
        side.wakeOne()
    }

    /// Ends one acquisition by the caller; the last one releases the lock. 0; EPERM (the caller
    /// does not hold it through this object); ESTALE (the hold was lost meanwhile: broken, lease
    /// expired, session ended); EBUSY (lost, and someone else holds it now); or another errno
    /// (still held: retry).
    package func unlockCode(caller: UInt = DistributedLock.caller()) -> Int32 {
        release(all: false, anyThread: false, caller: caller)
    }

    /// Releases the caller's hold whatever its count (filelock's `release(force=True)`); codes
    /// as `unlockCode`.
    package func unlockAllCode(caller: UInt = DistributedLock.caller()) -> Int32 {
        release(all: true, anyThread: false, caller: caller)
    }

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
    package func recoverStaleCode(deadline: Int64 = Deadline.none, caller: UInt = DistributedLock.caller()) -> Int32 {
        DistributedLockMessage.clear()
        let side = sides.current()
        return side.state.withLock { s in
            if s.held { return heldByCaller(s, caller) ? EDEADLK : EBUSY }
            if s.waiting { return EBUSY }
            let code = s.session.recoverStale(deadline: deadline)
            if code == 0 { took(&s, side, caller) }
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
    package func isHeldByCaller(_ caller: UInt = DistributedLock.caller()) -> Bool {
        guard let side = sides.ifCurrent() else { return false }
        return side.state.withLock { s in
            if !s.held && !s.waiting { s.session.withdrawWait() }
            return heldByCaller(s, caller) && s.session.holds()
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

    private func heldElsewhereByCaller(_ side: ProcessSide, _ caller: UInt = DistributedLock.caller()) -> Bool {
        side.registry.holds(path: identity, thread: caller, lock: ObjectIdentifier(self))
    }

    /// The fencing token of the caller's hold: (token, 0), or (0, EPERM) when the caller does
    /// not hold the lock through this object.
    package func tokenCode(caller: UInt = DistributedLock.caller()) -> (UInt64, Int32) {
        guard let side = sides.ifCurrent() else { return (0, EPERM) }
        return side.state.withLock { s in heldByCaller(s, caller) ? (s.session.token, 0) : (0, EPERM) }
    }

    /// How many of the caller's acquisitions through this object are not yet released (0 when
    /// it does not hold it).
    package func countHeldByCaller(_ caller: UInt = DistributedLock.caller()) -> Int {
        guard let side = sides.ifCurrent() else { return 0 }
        return side.state.withLock { s in heldByCaller(s, caller) ? s.depth : 0 }
    }

    /// Whether any thread of this process holds the lock through this object (its bookkeeping
    /// only), and how many acquisitions that hold counts (0: none).
    package var isHeldInProcess: Bool { depthInProcess > 0 }
    package var depthInProcess: Int {
        guard let side = sides.ifCurrent() else { return 0 }
        return side.state.withLock { s in s.held ? s.depth : 0 }
    }

    // MARK: The Swift API

    /// Acquires the lock if it is free, without blocking: true if the caller holds it now (a
    /// re-entry, with `.recursive`), false if someone else holds it. Throws `.alreadyHeld` if
    /// the caller holds it through this non-recursive object, and `.broken` once that hold was
    /// lost (this call ends it; the next one tries afresh).
    public func tryLock() throws(DistributedLockError) -> Bool {
        let code = tryLockCode()
        if code == EBUSY { return false }
        try check(code, .tryLock)
        return true
    }

    /// Acquires the lock: waits for another thread's hold through this object to end, waits in
    /// the server (PostgreSQL) or polls other holders every `pollInterval` at most (Redis backs
    /// off from 1 ms), and takes over a stale holder's lock (see `recover`), for as long as it
    /// takes; throws `.alreadyHeld` or `.broken` as `tryLock`.
    public func lock(pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        try check(lockCode(deadline: Deadline.none, pollNanoseconds: Deadline.nanoseconds(pollInterval), interrupts: .retried), .lock)
    }

    /// As `lock(pollInterval:)` for at most `timeout`: false once it has passed (the caller
    /// holds nothing new), as every timed wait of the library reports a timeout.
    public func tryLock(timeout: Duration, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) -> Bool {
        let code = lockCode(deadline: Deadline.after(timeout), pollNanoseconds: Deadline.nanoseconds(pollInterval), interrupts: .retried)
        if code == ETIMEDOUT { return false }
        try check(code, .lock)
        return true
    }

    @available(*, deprecated, message: "use lock(pollInterval:), or tryLock(timeout:pollInterval:), which returns false on timeout")
    public func lock(timeout: Duration?, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        let deadline = timeout.map { Deadline.after($0) } ?? Deadline.none
        try check(lockCode(deadline: deadline, pollNanoseconds: Deadline.nanoseconds(pollInterval), interrupts: .retried), .lock)
    }

    /// Ends one acquisition (the last releases the lock). Throws `.notHeld`, `.broken` or
    /// `.brokenAndHeldByAnother` (the hold was lost meanwhile).
    public func unlock() throws(DistributedLockError) { try check(unlockCode(), .unlock) }

    /// Releases the caller's hold, however many acquisitions it counts.
    public func unlockAll() throws(DistributedLockError) { try check(unlockAllCode(), .unlock) }

    /// Removes the lock whoever holds it: only for a holder known to be dead (Apple's breakLock).
    public func breakLock() throws(DistributedLockError) { try check(breakLockCode(), .breakLock) }

    /// Takes over the lock if its holder is stale (`holder?.isStale`), atomically: of several
    /// processes doing so at once exactly one returns true and holds the lock.
    public func recover() throws(DistributedLockError) -> Bool {
        let code = recoverStaleCode()
        if code == EBUSY || code == ENOENT { return false }
        try check(code, .recoverStale)
        return true
    }
    @available(*, deprecated, renamed: "recover()")
    public func recoverStale() throws(DistributedLockError) -> Bool { try recover() }

    /// Who holds the lock now, or nil.
    public var holder: DistributedLockHolder? {
        get throws(DistributedLockError) {
            let (holder, code) = holderCode()
            try check(code, .holder)
            return holder
        }
    }

    /// When the current holder acquired the lock (wall clock since the Unix epoch), or nil.
    public var lockDate: Duration? { get throws(DistributedLockError) { try holder?.acquired } }

    /// Whether the caller holds the lock through this object now (false once it was lost).
    public var isHeld: Bool { isHeldByCaller() }
    @available(*, deprecated, renamed: "isHeld", message: "isLocked reads as \"held by anyone\"")
    public var isLocked: Bool { isHeld }

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

    /// Runs `body` holding the lock (`lock(pollInterval:)`), releases it, and returns `body`'s
    /// value; rethrows `body`'s error. (In a task, `try await withLock` is the async form, for a
    /// plain closure too: AsyncDistributedLock.swift.)
    @_disfavoredOverload
    public func withLock<R>(pollInterval: Duration = .milliseconds(10), _ body: () throws -> R) throws -> R {
        try lock(pollInterval: pollInterval)
        return try holding(body)
    }

    /// As `withLock`, waiting at most `timeout` (`tryLock(timeout:pollInterval:)`): nil, without
    /// running `body`, once it has passed. (In a task, `try await` picks the async form.)
    @_disfavoredOverload
    public func withLockIfAvailable<R>(timeout: Duration, pollInterval: Duration = .milliseconds(10),
                                       _ body: () throws -> R) throws -> R? {
        guard try tryLock(timeout: timeout, pollInterval: pollInterval) else { return nil }
        return try holding(body)
    }

    @available(*, deprecated, message: "use withLock(pollInterval:_:), or withLockIfAvailable(timeout:pollInterval:_:), which returns nil on timeout")
    public func withLock<R>(timeout: Duration?, pollInterval: Duration = .milliseconds(10),
                            _ body: () throws -> R) throws -> R {
        let deadline = timeout.map { Deadline.after($0) } ?? Deadline.none
        try check(lockCode(deadline: deadline, pollNanoseconds: Deadline.nanoseconds(pollInterval), interrupts: .retried), .lock)
        return try holding(body)
    }

    /// `body`'s value, with the lock released after it (also when it throws).
    private func holding<R>(_ body: () throws -> R) throws -> R {
        let result: R
        do { result = try body() } catch { try? unlock(); throw error }
        try unlock()
        return result
    }

    func check(_ code: Int32, _ operation: DistributedLockOperation) throws(DistributedLockError) {
        if code != 0 {
            throw DistributedLockError(code: code, operation: operation, path: path, detail: DistributedLockMessage.detail)
        }
    }
}
