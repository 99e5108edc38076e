import Glibc
import Synchronization

// NSDistributedLock: a mutex between processes, possibly on several hosts, kept in a file
// system every user can write (NFS included), with stale-holder recovery.
//
// Two layers. `LockDirectory` is the on-disk protocol, which knows nothing of threads;
// `DistributedLock` keeps, per process, who holds the lock through the object (which thread, how
// many times) and lets the object's other threads wait for it without touching the disk.
//
// On disk, the lock at `path` is a directory. It is held while it contains the holder entry:
// an empty directory whose name says who holds it,
// `<pid>.<start>.<acquired>.<serial>.<machine>@<host>` (process id, process start time in clock
// ticks since boot, acquisition time in wall-clock ns since the epoch, a per-process serial,
// boot id + pid namespace, host name); an EMPTY directory (or none) is a free lock. The name is
// unique to one acquisition, so an operation on `path/<entry>` is conditional on that
// acquisition still being in place; and every step is one operation that NFS servers perform
// atomically (mkdir, rename, rmdir). Each object keeps a "carrier", an empty directory of its
// own beside the lock:
//
//   acquire   mkdir(carrier/<entry>); rename(carrier, path). The rename replaces an empty
//             directory (free) and fails on a non-empty one (held), so exactly one acquirer
//             wins, and the lock appears together with its holder's name: there is no instant
//             at which it is held by nobody known.
//   release   rename(path/<entry>, new carrier): moves the entry out (ENOENT if the acquisition
//             was broken), leaving an empty directory, a free lock; the moved entry is the
//             object's next carrier. Three operations per acquire+release in all.
//   recover   rename(path/<stale entry>, path/<my entry>): the breaker takes a stale lock over
//             in one step. Of two breakers exactly one rename finds the stale name; the other
//             fails with ENOENT and sees the winner holding the lock. A fresh acquirer cannot
//             slip in between (the directory never becomes empty), and a breaker that read an
//             old stale name can never touch a newer acquisition (the name is not there).
//   break     rmdir(path/<entry>) of whoever holds it, then rmdir(path).
//
// Names below the parent directory are at most `<lock>/<entry>` (2 * NAME_MAX + 1 bytes): they
// are used as absolute paths while those fit in PATH_MAX, else relative to a descriptor of the
// parent opened for the operation, so every operation works on any path that creation accepts,
// however close to PATH_MAX, and no descriptor is kept between calls.

/// Who holds a distributed lock, decoded from the lock's holder entry (readable by anyone).
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
    /// The holder runs on this host (same host name, boot and pid namespace).
    public let isOnThisHost: Bool
    /// The holder is on this host and its process is gone (or its pid now names another
    /// process): the lock will never be released, and `recoverStale()` may take it over.
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
    /// The caller already holds the lock, so waiting would never end: through this object, which
    /// is not `.recursive`, or, waiting without a timeout, through another object. (EDEADLK)
    case alreadyHeld
    /// A recursive hold's count would overflow. (EAGAIN)
    case tooManyAcquisitions
    /// `unlock`: the caller does not hold the lock through this object (another thread of a
    /// thread-owned object does, or nobody, or the hold is a parent process's). (EPERM)
    case notHeld
    /// `unlock`: the lock was broken since this object acquired it; nobody holds it now. (ESTALE)
    case broken
    /// `unlock`: the lock was broken since this object acquired it, and someone else holds it now. (EBUSY)
    case brokenAndHeldByAnother
    /// `lock(timeout:)`: the timeout passed before the lock was acquired. (ETIMEDOUT)
    case timedOut
    /// A system call failed with this errno.
    case system(errno: Int32, operation: String)

    /// The errno code the C API returns for this error.
    public var code: Int32 {
        switch self {
        case .invalidPath: EINVAL
        case .nameTooLong: ENAMETOOLONG
        case .invalidMode: EINVAL
        case .parentMissing: ENOENT
        case .parentNotADirectory: ENOTDIR
        case .parentNotWritable: EACCES
        case .notALock: EEXIST
        case .alreadyHeld: EDEADLK
        case .tooManyAcquisitions: EAGAIN
        case .notHeld: EPERM
        case .broken: ESTALE
        case .brokenAndHeldByAnother: EBUSY
        case .timedOut: ETIMEDOUT
        case .system(let code, _): code
        }
    }

    package init(code: Int32, operation: String, path: String) {
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
        case .nameTooLong(let p): "the lock path '\(p)' is too long (its file name over NAME_MAX, or its directory over PATH_MAX)"
        case .invalidMode(let m): "invalid lock mode 0o\(String(m, radix: 8)) (permission bits 0...0o777)"
        case .parentMissing(let p): "the parent directory of '\(p)' does not exist"
        case .parentNotADirectory(let p): "the parent of '\(p)' is not a directory"
        case .parentNotWritable(let p): "the parent directory of '\(p)' is not writable by this process"
        case .notALock(let p): "'\(p)' exists and is not a lock (a file, or a directory with other content)"
        case .alreadyHeld: "the caller already holds this DistributedLock (through this object, which is not recursive, or through another): waiting would never end"
        case .tooManyAcquisitions: "the DistributedLock's hold count would overflow"
        case .notHeld: "unlock of a DistributedLock the caller does not hold through this object"
        case .broken: "the lock was broken since this object acquired it (nobody holds it now)"
        case .brokenAndHeldByAnother: "the lock was broken since this object acquired it, and another holder has it now"
        case .timedOut: "timed out waiting for the lock"
        case .system(let code, let op): "\(op): \(String(cString: strerror(code))) (errno \(code))"
        }
    }
}

/// A lock between processes and hosts on a shared file system (Apple's NSDistributedLock), with
/// stale-holder recovery. `tryLock` never blocks; `lock(timeout:pollInterval:)` waits.
///
/// Holders: two objects for one path (in one process or not) exclude each other. Through one
/// object, the holder is the thread that acquired it: the object's other threads wait for it
/// (without polling the disk) and may not unlock it; with `.processOwned` the holder is the
/// process, and any of its threads counts as the holder. Not recursive unless `.recursive`. A
/// forked child never holds its parent's lock: the child's unlock throws `.notHeld`, and its
/// copy of the object touches nothing of the parent's (it may acquire the lock for itself).
/// The lock outlives the object unless `.releaseOnDeinit`: release it with `unlock()` (a holder
/// that dies leaves it held, which `recoverStale()` or `breakLock()` undo). Thread-safe.
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
        public static let makeParents = Options(rawValue: 4)
        /// When the object goes away, a hold of this process through it is released, whichever
        /// thread acquired it (filelock's finalizer); by default it stays held (NSDistributedLock's).
        public static let releaseOnDeinit = Options(rawValue: 8)
        /// Releasing also removes the lock's directory while it is empty, as filelock's
        /// SoftFileLock removes its file (one directory operation more; only an empty directory
        /// goes, and an acquirer's rename onto a missing path succeeds, so it is safe).
        public static let removeOnRelease = Options(rawValue: 16)
        package static let all: Options = [.recursive, .processOwned, .makeParents, .releaseOnDeinit, .removeOnRelease]
    }

    /// The lock's path: absolute, its parent directory resolved (symbolic links followed).
    public let path: String
    public let options: Options
    /// `path` as a C string, for the C API (immutable; freed with the object).
    nonisolated(unsafe) package let cPath: UnsafeMutablePointer<CChar>
    private let directory: LockDirectory
    /// This process's bookkeeping of the object (a forked child makes its own).
    private let sides = ProcessLocal<ProcessSide> { ProcessSide(pid: $0) }

    /// A lock at `path`, whose parent directory must exist (or, with `.makeParents`, is made)
    /// and be writable, and where nothing but this lock may be. `mode` (0...0o777) sets the
    /// permission bits of the directories the lock is made of, as a lock file's in filelock
    /// (each read bit adds the matching search bit): nil leaves them to the umask. Nothing but
    /// missing parents is created on disk until the lock is acquired.
    public convenience init(path: String, options: Options = [], mode: UInt32? = nil) throws(DistributedLockError) {
        if let mode, mode > 0o777 { throw .invalidMode(mode) }
        let (place, code) = LockDirectory.locate(path, mode: mode.map { mode_t($0) }, options: options)
        guard let place else { throw DistributedLockError(code: code, operation: "create", path: path) }
        self.init(place, options)
    }

    private init(_ directory: LockDirectory, _ options: Options) {
        self.directory = directory
        self.options = options
        path = directory.path
        cPath = strdup(path)!
    }

    deinit {
        // Only this process's own bookkeeping: a child's copy of a parent's object touches nothing.
        if let side = sides.ifCurrent() {
            side.state.withLock { s in
                if s.held != nil { side.registry.remove(path: path, lock: ObjectIdentifier(self)) }
                if options.contains(.releaseOnDeinit), let entry = s.held { _ = directory.release(entry, &s, as: side.identity) }
                if let carrier = s.carrier { directory.removeCarrier(carrier) }
            }
        }
        free(cPath)
    }

    /// Validates `path`, `options` (raw bits) and `mode` (< 0: none) and makes the lock: (lock, 0)
    /// or (nil, EINVAL, ENAMETOOLONG, ENOENT, ENOTDIR, EACCES, EROFS, EEXIST, or an errno of mkdir).
    package static func make(path: String, options: UInt32 = 0, mode: Int32 = -1) -> (DistributedLock?, Int32) {
        if options & ~Options.all.rawValue != 0 || mode < -1 || mode > 0o777 { return (nil, EINVAL) }
        let options = Options(rawValue: options)
        let (place, code) = LockDirectory.locate(path, mode: mode < 0 ? nil : mode_t(mode), options: options)
        return (place.map { DistributedLock($0, options) }, code)
    }

    // MARK: Who holds it through this object

    /// Whether the caller counts as the holder of `s`'s hold.
    private func heldByCaller(_ s: State) -> Bool {
        s.held != nil && (options.contains(.processOwned) || s.owner == threadID())
    }

    private enum Attempt { case acquired, heldHere(UInt32), busy, failed(Int32) }

    /// One try: a re-entry, the object's other thread holding it (with the release count to wait
    /// on), busy on disk, or acquired on disk.
    private func attempt(_ side: ProcessSide) -> Attempt {
        side.state.withLock { s in
            if s.held != nil {
                guard heldByCaller(s) else { return .heldHere(side.releases.pointee.load(ordering: .relaxed)) }
                guard options.contains(.recursive) else { return .failed(EDEADLK) }
                guard s.depth < Int(Int32.max) else { return .failed(EAGAIN) }
                s.depth += 1
                return .acquired
            }
            let code = directory.acquire(&s, as: side.identity)
            if code == 0 { took(&s, side) }
            return code == 0 ? .acquired : code == EBUSY ? .busy : .failed(code)
        }
    }

    private func took(_ s: inout State, _ side: ProcessSide) {
        s.owner = threadID()
        s.depth = 1
        side.registry.add(path: path, thread: s.owner, lock: ObjectIdentifier(self))
    }

    /// Ends the hold (`all`: whatever its count; `anyThread`: whichever thread holds it).
    private func release(all: Bool, anyThread: Bool) -> Int32 {
        guard let side = sides.ifCurrent() else { return EPERM }  // (a parent's object: nothing here is ours)
        let (code, freed) = side.state.withLock { s -> (Int32, Bool) in
            guard let entry = s.held, anyThread || heldByCaller(s) else { return (EPERM, false) }
            if !all && s.depth > 1 {
                s.depth -= 1
                return (0, false)
            }
            let code = directory.release(entry, &s, as: side.identity)
            if code != 0 && code != ESTALE && code != EBUSY { return (code, false) }  // still held: a retry may work
            (s.held, s.owner, s.depth) = (nil, 0, 0)
            side.registry.remove(path: path, lock: ObjectIdentifier(self))
            side.releases.pointee.add(1, ordering: .sequentiallyConsistent)
            return (code, true)
        }
        if freed { side.wakeOne() }
        return code
    }

    // MARK: Operations returning errno codes (the C API calls these; the Swift API wraps them).

    /// Acquires the lock if it is free; never blocks. 0; EBUSY (held: by another holder, or by
    /// another thread through this object); EDEADLK (the caller holds it, not recursive); EAGAIN
    /// (recursion count overflow); EEXIST (something that is not a lock is at `path`); or a
    /// system errno.
    package func tryLockCode() -> Int32 {
        switch attempt(sides.current()) {
        case .acquired: 0
        case .heldHere, .busy: EBUSY
        case .failed(let code): code
        }
    }

    /// Waits for the lock until the monotonic `deadline` (ns, < 0: none) passes: while another
    /// thread holds it through this object, sleeps until that hold ends; while another holder
    /// has it, polls every `pollNanoseconds` (taking over a stale holder's lock). 0, ETIMEDOUT,
    /// EINTR (a signal handler ran while sleeping: call again), EINVAL (poll interval <= 0),
    /// EDEADLK (the caller holds it through this non-recursive object, or, with no deadline,
    /// through another object of this process), EAGAIN, EEXIST, or a system errno.
    package func lockCode(deadline: Int64, pollNanoseconds: Int64) -> Int32 {
        if pollNanoseconds <= 0 { return EINVAL }
        let side = sides.current()
        // A sleeper woken by a release that leaves without the lock passes the wakeup on, so that
        // the object's other sleepers are never left waiting for a release that already happened.
        var slept = false
        let code = wait(side, deadline, pollNanoseconds, &slept)
        if code != 0 && slept { side.wakeOne() }
        return code
    }

    private func wait(_ side: ProcessSide, _ deadline: Int64, _ poll: Int64, _ slept: inout Bool) -> Int32 {
        while true {
            var heldHere: UInt32?
            switch attempt(side) {
            case .acquired: return 0
            case .failed(let code): return code
            case .heldHere(let releases): heldHere = releases
            case .busy:
                if deadline < 0 && side.registry.holds(path: path, thread: threadID(), lock: ObjectIdentifier(self)) {
                    return EDEADLK  // this thread holds it through another object: it would wait forever
                }
                let code = recoverStaleCode()
                if code == 0 || (code != EBUSY && code != ENOENT) { return code }
                if code == ENOENT { continue }  // released meanwhile: try again at once
            }
            let now = monotonicNow()
            if deadline >= 0 && now >= deadline { return ETIMEDOUT }
            if let releases = heldHere {
                slept = true
                if side.sleep(while: releases, deadline: deadline) == EINTR { return EINTR }
            } else {
                let nap = deadline >= 0 ? min(poll, deadline - now) : poll
                var request = timespec(tv_sec: Int(nap / 1_000_000_000), tv_nsec: Int(nap % 1_000_000_000))
                if clock_nanosleep(CLOCK_MONOTONIC, 0, &request, nil) == EINTR { return EINTR }
            }
        }
    }

    /// The monotonic deadline `timeout` ns from now (< 0: none, -1).
    package static func deadline(afterNanoseconds timeout: Int64) -> Int64 {
        if timeout < 0 { return -1 }
        let (deadline, overflow) = monotonicNow().addingReportingOverflow(timeout)
        return overflow ? .max : deadline
    }

    /// Ends one acquisition by the caller; the last one releases the lock. 0; EPERM (the caller
    /// does not hold it through this object); ESTALE (it was broken meanwhile and is free);
    /// EBUSY (it was broken and someone else holds it now); or a system errno (still held).
    package func unlockCode() -> Int32 { release(all: false, anyThread: false) }

    /// Releases the caller's hold whatever its count (filelock's `release(force=True)`); codes
    /// as `unlockCode`.
    package func unlockAllCode() -> Int32 { release(all: true, anyThread: false) }

    /// Removes the lock whoever holds it (Apple's breakLock). 0 (broken, or it was free);
    /// EEXIST (something that is not a lock is at `path`), or a system errno.
    package func breakLockCode() -> Int32 { directory.breakLock() }

    /// If the lock's holder is stale (on this host, process gone), takes the lock over in one
    /// atomic step: the caller holds it then. 0 (taken over), EBUSY (the holder is alive, or on
    /// another host, or another breaker took it over first, or another thread holds it through
    /// this object), ENOENT (the lock is free), EDEADLK (the caller holds it), EEXIST, or a
    /// system errno.
    package func recoverStaleCode() -> Int32 {
        let side = sides.current()
        return side.state.withLock { s in
            if s.held != nil { return heldByCaller(s) ? EDEADLK : EBUSY }
            let code = directory.recoverStale(&s, as: side.identity)
            if code == 0 { took(&s, side) }
            return code
        }
    }

    /// The current holder: (holder, 0), (nil, 0) when free, or (nil, EEXIST / errno).
    package func holderCode() -> (DistributedLockHolder?, Int32) {
        let (entry, code) = directory.holderEntry()
        guard let entry, let parsed = parseEntry(entry) else { return (nil, code) }
        let me = sides.current().identity
        let local = parsed.machine == me.machine && parsed.host == me.host
        return (DistributedLockHolder(host: String(parsed.host), pid: parsed.pid, processStart: parsed.start,
                                      acquired: .nanoseconds(parsed.acquired), isOnThisHost: local,
                                      isStale: me.isStale(entry: entry)), 0)
    }

    /// Whether the caller holds the lock through this object now (checked on disk: false once
    /// it was broken).
    package func isHeldByCaller() -> Bool {
        guard let side = sides.ifCurrent() else { return false }
        return side.state.withLock { s in heldByCaller(s) && directory.holds(s.held!) }
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

    /// Acquires the lock: waits for another thread's hold through this object to end, polls
    /// other holders every `pollInterval`, and takes over a stale holder's lock (see
    /// `recoverStale`); throws `.timedOut` once `timeout` (nil: none) has passed.
    public func lock(timeout: Duration? = nil, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        let deadline = timeout.map { Self.deadline(afterNanoseconds: max(0, nanoseconds($0))) } ?? -1
        var code: Int32
        repeat { code = lockCode(deadline: deadline, pollNanoseconds: nanoseconds(pollInterval)) } while code == EINTR
        try check(code, "lock")
    }

    /// Ends one acquisition (the last releases the lock). Throws `.notHeld`, `.broken` or
    /// `.brokenAndHeldByAnother`.
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

    /// Whether the caller holds the lock through this object now (false once it was broken).
    public var isLocked: Bool { isHeldByCaller() }

    /// How many of the caller's acquisitions are not yet released (filelock's `lock_counter`).
    public var lockCount: Int { countHeldByCaller() }

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
        if code != 0 { throw DistributedLockError(code: code, operation: operation, path: path) }
    }
}

// MARK: Per-process bookkeeping

/// A process's hold through one object, and the object's carrier.
private struct State {
    /// The holder entry, while this process holds the lock through the object.
    var held: String?
    /// The thread that acquired it (a kernel thread id).
    var owner: UInt32 = 0
    /// Acquisitions not yet released (more than 1 only when recursive).
    var depth = 0
    /// The object's empty directory beside the lock (its name in the parent directory).
    var carrier: String?
}

/// Something of which each process has its own (`pid` says whose).
private protocol ProcessBound: AnyObject, Sendable {
    var pid: Int32 { get }
}

/// A value of which each process has its own: a forked child never uses its parent's copy (a
/// parent thread may have been changing it at the fork, and what it records is the parent's),
/// but makes a fresh one on first use. The copy is never freed in the child while the object
/// lives (a child thread may still be reading it, to find it is not its process's).
private final class ProcessLocal<Value: ProcessBound>: @unchecked Sendable {
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
private final class ProcessSide: ProcessBound, @unchecked Sendable {
    let pid: Int32
    /// This process as holder entries name it, and its registry of holds.
    let identity: ProcessIdentity
    let registry: HoldRegistry
    let state = Mutex(State())
    /// words[0]: bumped when a hold ends (a futex word); words[1]: threads sleeping on it.
    private let words = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 2)
    var releases: UnsafeMutablePointer<Atomic<UInt32>> { words }

    init(pid: Int32) {
        self.pid = pid
        identity = ProcessIdentity.identities.current(pid: pid)
        registry = Self.registries.current(pid: pid)
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

private final class HoldRegistry: ProcessBound, @unchecked Sendable {
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

// MARK: The on-disk protocol

/// Where the lock is, and the directory operations of the protocol (see the top of the file).
private struct LockDirectory: Sendable {
    /// The parent directory: absolute, resolved.
    let parent: String
    /// The lock's name in it.
    let base: String
    /// The start of the carriers' names: hidden, and short whatever `base` is.
    let carrierPrefix: String
    /// The permission bits of the directories made (nil: 0o777 less the umask).
    let mode: mode_t?
    let makeParents: Bool
    let removeOnRelease: Bool

    var path: String { (parent == "/" ? "" : parent) + "/" + base }

    /// The longest name used below the parent: `<lock>/<entry>` (each at most NAME_MAX), or
    /// `<carrier>/<entry>` (shorter).
    static let longestName = 2 * Int(NAME_MAX) + 1

    /// Validates `path` and finds the lock's place: (place, 0), or (nil, EINVAL, ENAMETOOLONG,
    /// ENOENT, ENOTDIR, EACCES, EROFS, EEXIST, or an errno).
    static func locate(_ path: String, mode: mode_t?, options: DistributedLock.Options) -> (LockDirectory?, Int32) {
        let makeParents = options.contains(.makeParents)
        var trimmed = Substring(path)
        while trimmed.utf8.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let slash = trimmed.lastIndex(of: "/")
        let base = String(slash.map { trimmed[trimmed.index(after: $0)...] } ?? trimmed)
        let given = slash.map { $0 == trimmed.startIndex ? "/" : String(trimmed[..<$0]) } ?? "."
        if base.isEmpty || base == "." || base == ".." || path.utf8.contains(0) { return (nil, EINVAL) }
        if base.utf8.count > Int(NAME_MAX) { return (nil, ENAMETOOLONG) }
        if makeParents {
            let code = makeDirectories(given)
            if code != 0 { return (nil, code) }
        }
        var info = stat()
        if stat(given, &info) != 0 { return (nil, errno) }
        if info.st_mode & S_IFMT != S_IFDIR { return (nil, ENOTDIR) }
        if faccessat(AT_FDCWD, given, W_OK | X_OK, AT_EACCESS) != 0 { return (nil, errno) }
        // Absolute, so that a later chdir does not move the lock.
        guard let resolved = realpath(given, nil) else { return (nil, errno) }
        let parent = String(cString: resolved)
        free(resolved)
        var prefix = ""  // at most 100 bytes of the name, whole characters only
        for scalar in base.unicodeScalars {
            if prefix.utf8.count + String(scalar).utf8.count > 100 { break }
            prefix.unicodeScalars.append(scalar)
        }
        let place = LockDirectory(parent: parent, base: base, carrierPrefix: "." + prefix + ".tmp.", mode: mode,
                                  makeParents: makeParents, removeOnRelease: options.contains(.removeOnRelease))
        let code = place.withParent({ $0 }) { dir -> Int32 in
            if fstatat(dir.fd, dir.name(base), &info, AT_SYMLINK_NOFOLLOW) != 0 { return errno == ENOENT ? 0 : errno }
            if info.st_mode & S_IFMT != S_IFDIR { return EEXIST }
            let (_, code) = place.holderEntry(dir)  // (a lock released meanwhile is free: 0)
            return code
        }
        return code == 0 ? (place, 0) : (nil, code)
    }

    /// The parent directory for the *at calls: absolute names from AT_FDCWD while they fit in
    /// PATH_MAX, else names relative to a descriptor of the parent (opened per operation).
    struct Directory {
        let fd: Int32
        let prefix: String
        func name(_ relative: String) -> String { prefix + relative }
    }

    /// Runs `body` with the parent directory, or returns `failure(errno)` if it cannot be opened.
    func withParent<R>(_ failure: (Int32) -> R, _ body: (Directory) -> R) -> R {
        if parent.utf8.count + 1 + Self.longestName < Int(PATH_MAX) {
            return body(Directory(fd: AT_FDCWD, prefix: parent == "/" ? "/" : parent + "/"))
        }
        var fd = open(parent, openPath | O_DIRECTORY | O_CLOEXEC)
        if fd < 0 && errno == ENOENT && makeParents && makeDirectories(parent) == 0 {
            fd = open(parent, openPath | O_DIRECTORY | O_CLOEXEC)
        }
        if fd < 0 { return failure(errno) }
        defer { close(fd) }
        return body(Directory(fd: fd, prefix: ""))
    }

    /// mkdir with the lock's mode (0 or errno).
    private func makeDirectory(_ dir: Directory, _ name: String) -> Int32 {
        if mkdirat(dir.fd, dir.name(name), 0o777) != 0 { return errno }
        if let mode, fchmodat(dir.fd, dir.name(name), directoryMode(mode), 0) != 0 {
            let code = errno
            unlinkat(dir.fd, dir.name(name), AT_REMOVEDIR)
            return code
        }
        return 0
    }

    /// Acquires the lock if it is free: 0 (`s.held` set), EBUSY, EEXIST or an errno.
    func acquire(_ s: inout State, as me: ProcessIdentity) -> Int32 {
        withParent({ $0 }) { dir in
            if visiblyHeld(dir) { return EBUSY }
            while true {
                if s.carrier == nil {
                    let (carrier, code) = newCarrier(dir, me)
                    guard let carrier else { return code }
                    s.carrier = carrier
                }
                let carrier = s.carrier!, entry = me.newEntry()
                let made = makeDirectory(dir, carrier + "/" + entry)
                if made == ENOENT {  // the carrier was removed behind our back: make another
                    s.carrier = nil
                    continue
                }
                if made != 0 { return made }
                if renameat(dir.fd, dir.name(carrier), dir.fd, dir.name(base)) == 0
                    || (errno == ENOENT && exists(dir, base + "/" + entry)) {
                    (s.held, s.carrier) = (entry, nil)  // (ENOENT and our entry in place: an NFS retry of a rename that did happen)
                    return 0
                }
                let code = errno
                unlinkat(dir.fd, dir.name(carrier + "/" + entry), AT_REMOVEDIR)
                switch code {
                case EEXIST, ENOTEMPTY: return EBUSY
                case ENOTDIR: return EEXIST  // a non-directory is at `path`
                default: return code
                }
            }
        }
    }

    /// A cheap early "busy": the lock is a directory with a subdirectory (the holder entry), by
    /// its link count. (File systems that do not count subdirectories, as btrfs, never say so.)
    /// The open revalidates NFS's cached attributes.
    private func visiblyHeld(_ dir: Directory) -> Bool {
        let fd = openat(dir.fd, dir.name(base), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 { return false }
        defer { close(fd) }
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_nlink >= 3
    }

    /// A fresh carrier, made on disk (and the parent too, if it went missing and `makeParents`):
    /// (name, 0) or (nil, errno).
    private func newCarrier(_ dir: Directory, _ me: ProcessIdentity) -> (String?, Int32) {
        var remade = false
        while true {
            let carrier = carrierName(me)
            let code = makeDirectory(dir, carrier)
            if code == ENOENT && makeParents && !remade && makeDirectories(parent) == 0 {
                remade = true
                continue
            }
            if code != EEXIST { return code == 0 ? (carrier, 0) : (nil, code) }  // EEXIST: left by a dead process that had our pid
        }
    }

    private func carrierName(_ me: ProcessIdentity) -> String {
        carrierPrefix + me.carrierTag + "." + String(ProcessIdentity.nextSerial())
    }

    /// Releases the hold `entry`: 0 (the entry is `s.carrier` now); ESTALE (broken meanwhile,
    /// free); EBUSY (broken, held by another now); or an errno (still held).
    func release(_ entry: String, _ s: inout State, as me: ProcessIdentity) -> Int32 {
        withParent({ $0 }) { dir in
            let held = base + "/" + entry
            var code = ENOTEMPTY
            if s.carrier == nil {
                // Move the entry out: the lock is free, and the entry is the next carrier.
                let carrier = carrierName(me)
                if renameat(dir.fd, dir.name(held), dir.fd, dir.name(carrier)) == 0
                    || (errno == ENOENT && exists(dir, carrier)) {
                    s.carrier = carrier
                    if removeOnRelease { unlinkat(dir.fd, dir.name(base), AT_REMOVEDIR) }  // (fails, harmlessly, once someone holds it again)
                    return 0
                }
                code = errno
            }
            if code != ENOENT {  // we have a carrier already (after a takeover), or a name clash
                if unlinkat(dir.fd, dir.name(held), AT_REMOVEDIR) == 0 {
                    if removeOnRelease { unlinkat(dir.fd, dir.name(base), AT_REMOVEDIR) }
                    return 0
                }
                code = errno
                if code != ENOENT { return code }
            }
            return holderEntry(dir).entry != nil ? EBUSY : ESTALE
        }
    }

    /// Takes over a stale holder's lock: 0 (`s.held` set), EBUSY, ENOENT (free), EEXIST or an errno.
    func recoverStale(_ s: inout State, as me: ProcessIdentity) -> Int32 {
        withParent({ $0 }) { dir in
            let (stale, code) = holderEntry(dir)
            if code != 0 { return code }
            guard let stale else { return ENOENT }
            if !me.isStale(entry: stale) { return EBUSY }
            let entry = me.newEntry()
            if renameat(dir.fd, dir.name(base + "/" + stale), dir.fd, dir.name(base + "/" + entry)) == 0
                || (errno == ENOENT && exists(dir, base + "/" + entry)) {
                s.held = entry
                return 0
            }
            if errno != ENOENT { return errno }
            return holderEntry(dir).entry != nil ? EBUSY : ENOENT  // another breaker won (or it was released)
        }
    }

    /// Removes the lock whoever holds it: 0, EEXIST or an errno.
    func breakLock() -> Int32 {
        withParent({ $0 }) { dir in
            let (entry, code) = holderEntry(dir)
            if code != 0 { return code }
            if let entry, unlinkat(dir.fd, dir.name(base + "/" + entry), AT_REMOVEDIR) != 0 && errno != ENOENT { return errno }
            unlinkat(dir.fd, dir.name(base), AT_REMOVEDIR)
            return 0
        }
    }

    /// Removes the object's carrier.
    func removeCarrier(_ carrier: String) {
        _ = withParent({ $0 }) { dir in unlinkat(dir.fd, dir.name(carrier), AT_REMOVEDIR) }
    }

    /// Whether the hold `entry` is still in place.
    func holds(_ entry: String) -> Bool {
        withParent({ _ in false }) { exists($0, base + "/" + entry) }
    }

    func holderEntry() -> (entry: String?, code: Int32) {
        withParent({ (nil, $0) }) { holderEntry($0) }
    }

    /// The holder entry's name, or nil when free (no directory, or an empty one). Code EEXIST
    /// when something else is there (a non-directory, or other names), or an errno.
    func holderEntry(_ dir: Directory) -> (entry: String?, code: Int32) {
        let fd = openat(dir.fd, dir.name(base), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 { return (nil, errno == ENOENT ? 0 : errno == ENOTDIR || errno == ELOOP ? EEXIST : errno) }
        guard let stream = fdopendir(fd) else { close(fd); return (nil, errno) }
        defer { closedir(stream) }
        var holders: [(name: String, acquired: Int64)] = []
        while let item = readdir(stream) {
            let name = withUnsafePointer(to: &item.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if name == "." || name == ".." { continue }
            let type = item.pointee.d_type
            // Only directories named as entries are: anything else means this is not a lock.
            guard type == DT_DIR || type == DT_UNKNOWN, let parsed = parseEntry(name) else { return (nil, EEXIST) }
            holders.append((name, parsed.acquired))
        }
        // A readdir racing a takeover's rename may list the old and the new name: the newer holds.
        return (holders.max { $0.acquired < $1.acquired }?.name, 0)
    }
}

/// Linux's O_PATH (the same on every architecture Swift runs on; Glibc's module lacks it): the
/// descriptor names the parent for the *at calls, and needs no read permission on it.
private let openPath: Int32 = 0o10000000

/// The directory mode for a lock file mode: each read bit adds the matching search bit.
private func directoryMode(_ mode: mode_t) -> mode_t { mode | ((mode & 0o444) >> 2) }

/// mkdir -p (0 or errno); made directories get 0o777 less the umask, as filelock's.
private func makeDirectories(_ path: String) -> Int32 {
    var prefix = path.hasPrefix("/") ? "/" : ""
    for component in path.split(separator: "/") {
        prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + component
        if mkdir(prefix, 0o777) != 0 && errno != EEXIST { return errno }
    }
    return 0
}

private func exists(_ dir: LockDirectory.Directory, _ name: String) -> Bool {
    var info = stat()
    return fstatat(dir.fd, dir.name(name), &info, AT_SYMLINK_NOFOLLOW) == 0
}

// MARK: Holder entries and process identity

private struct ParsedEntry {
    var pid: Int32, start: UInt64, acquired: Int64, machine: Substring, host: Substring
}

/// `<pid>.<start>.<acquired>.<serial>.<machine>@<host>`, or nil for any other name.
private func parseEntry(_ name: String) -> ParsedEntry? {
    guard let at = name.firstIndex(of: "@") else { return nil }
    let fields = name[..<at].split(separator: ".", omittingEmptySubsequences: false)
    guard fields.count == 5, let pid = Int32(fields[0]), pid > 0, let start = UInt64(fields[1]),
          let acquired = Int64(fields[2]), UInt64(fields[3]) != nil else { return nil }
    return ParsedEntry(pid: pid, start: start, acquired: acquired, machine: fields[4],
                       host: name[name.index(after: at)...])
}

/// This process, as a lock holder names it (a forked child has its own).
private final class ProcessIdentity: ProcessBound {
    let pid: Int32
    let start: UInt64
    /// Boot id and pid namespace: processes with equal `machine` see the same pids.
    let machine: String
    let host: String

    static let identities = ProcessLocal<ProcessIdentity> { ProcessIdentity(pid: $0) }
    private static let serial = Atomic<UInt64>(0)

    static func nextSerial() -> UInt64 { serial.wrappingAdd(1, ordering: .relaxed).newValue }

    private init(pid: Int32) {
        self.pid = pid
        start = processStatus(pid)?.start ?? 0
        let boot = readSmallFile("/proc/sys/kernel/random/boot_id")?.filter(\.isHexDigit) ?? ""
        var link = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/self/ns/pid", &link, link.count - 1)
        let namespace = n > 0 ? String(decoding: link[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self).filter(\.isNumber) : ""
        // Without /proc, stale detection is off: an empty machine never matches.
        machine = boot.isEmpty || start == 0 ? "" : boot + "-" + namespace
        var name = [UInt8](repeating: 0, count: 256)
        gethostname(&name, name.count - 1)
        host = String(String(decoding: name.prefix { $0 != 0 }, as: UTF8.self).filter { $0 != "/" }.prefix(64))
    }

    /// Names this process's carrier directories, unique between hosts sharing the file system.
    var carrierTag: String { "\(pid).\(machine.prefix(8))" }

    /// A holder entry naming this process, acquiring now.
    func newEntry() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let acquired = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        return "\(pid).\(start).\(acquired).\(Self.nextSerial()).\(machine)@\(host)"
    }

    /// Whether `entry`'s holder is on this host and its process is gone, a zombie, or another
    /// process with the same pid.
    func isStale(entry: String) -> Bool {
        guard let parsed = parseEntry(entry) else { return false }
        guard !machine.isEmpty, parsed.machine == machine, parsed.host == host else { return false }
        guard let status = processStatus(parsed.pid) else { return true }
        return status.state == "Z" || status.state == "X" || status.start != parsed.start
    }
}

/// State letter and start time (clock ticks since boot) from /proc/<pid>/stat; nil if no such process.
private func processStatus(_ pid: Int32) -> (state: Character, start: UInt64)? {
    guard let stat = readSmallFile("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
    // After "pid (comm)" (comm may hold spaces and parentheses): field 3 is the state, 22 the start.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 19, let state = fields[0].first, let start = UInt64(fields[19]) else { return nil }
    return (state, start)
}

private func readSmallFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 1024)
    let n = read(fd, &buffer, buffer.count)
    return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : nil
}

private func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    return overflow ? (seconds < 0 ? .min : .max) : whole &+ attoseconds / 1_000_000_000
}
