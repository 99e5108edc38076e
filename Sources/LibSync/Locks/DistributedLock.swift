import Glibc
import Synchronization

// NSDistributedLock: a mutex between processes, possibly on several hosts, kept in a file
// system every user can write (NFS included), with stale-holder recovery.
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
    /// The path is empty, names no file (`/`, `.`), or is too long. (EINVAL, ENAMETOOLONG)
    case invalidPath(String)
    /// The parent directory does not exist. (ENOENT)
    case parentMissing(String)
    /// The parent is not a directory. (ENOTDIR)
    case parentNotADirectory(String)
    /// This process may not create entries in the parent directory. (EACCES, EPERM, EROFS)
    case parentNotWritable(String)
    /// Something that is not a lock is in the way: a file, or a directory with other content. (EEXIST)
    case notALock(String)
    /// This object already holds the lock (it is not recursive). (EDEADLK)
    case alreadyHeld
    /// `unlock`: this object does not hold the lock. (EPERM)
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
        case .parentMissing: ENOENT
        case .parentNotADirectory: ENOTDIR
        case .parentNotWritable: EACCES
        case .notALock: EEXIST
        case .alreadyHeld: EDEADLK
        case .notHeld: EPERM
        case .broken: ESTALE
        case .brokenAndHeldByAnother: EBUSY
        case .timedOut: ETIMEDOUT
        case .system(let code, _): code
        }
    }

    package init(code: Int32, operation: String, path: String) {
        switch (operation, code) {
        case ("create", EINVAL), ("create", ENAMETOOLONG): self = .invalidPath(path)
        case ("create", ENOENT): self = .parentMissing(path)
        case ("create", ENOTDIR): self = .parentNotADirectory(path)
        case ("create", EACCES), ("create", EPERM), ("create", EROFS): self = .parentNotWritable(path)
        case (_, EEXIST): self = .notALock(path)
        case (_, EDEADLK): self = .alreadyHeld
        case ("unlock", EPERM): self = .notHeld
        case ("unlock", ESTALE): self = .broken
        case ("unlock", EBUSY): self = .brokenAndHeldByAnother
        case (_, ETIMEDOUT): self = .timedOut
        default: self = .system(errno: code, operation: operation)
        }
    }

    public var description: String {
        switch self {
        case .invalidPath(let p): "invalid lock path '\(p)' (empty, no file name, or too long)"
        case .parentMissing(let p): "the parent directory of '\(p)' does not exist"
        case .parentNotADirectory(let p): "the parent of '\(p)' is not a directory"
        case .parentNotWritable(let p): "the parent directory of '\(p)' is not writable by this process"
        case .notALock(let p): "'\(p)' exists and is not a lock (a file, or a directory with other content)"
        case .alreadyHeld: "this DistributedLock object already holds the lock (it is not recursive)"
        case .notHeld: "unlock of a DistributedLock this object does not hold"
        case .broken: "the lock was broken since this object acquired it (nobody holds it now)"
        case .brokenAndHeldByAnother: "the lock was broken since this object acquired it, and another holder has it now"
        case .timedOut: "timed out waiting for the lock"
        case .system(let code, let op): "\(op): \(String(cString: strerror(code))) (errno \(code))"
        }
    }
}

/// A lock between processes and hosts on a shared file system (Apple's NSDistributedLock), with
/// stale-holder recovery. `tryLock` never blocks; `lock(timeout:pollInterval:)` polls. Each
/// object is one would-be holder: two objects for one path (in one process or not) exclude
/// each other. Thread-safe; not recursive. The lock outlives the object: release it with
/// `unlock()` (a holder that dies leaves it held, which `recoverStale()` or `breakLock()` undo).
public final class DistributedLock: Sendable {
    /// The lock's path: absolute, its parent directory resolved (symbolic links followed).
    public let path: String
    /// `path` as a C string, for the C API (immutable; freed with the object).
    nonisolated(unsafe) package let cPath: UnsafeMutablePointer<CChar>
    /// Where temporary directories are built: beside the lock, so that rename(2) can move them.
    private let tmpPrefix: String
    private let state = Mutex(State())

    private struct State {
        /// The holder entry of this object's acquisition, while it holds the lock.
        var held: String?
        /// This object's empty directory beside the lock, and the process that made it.
        var carrier: String?
        var carrierPid: Int32 = 0
    }

    /// A lock at `path`, whose parent directory must exist and be writable, and where nothing
    /// but this lock may be. Nothing is created on disk until the lock is acquired.
    public convenience init(path: String) throws(DistributedLockError) {
        let (place, code) = DistributedLock.locate(path)
        guard let place else { throw DistributedLockError(code: code, operation: "create", path: path) }
        self.init(place)
    }

    private init(_ place: (path: String, tmpPrefix: String)) {
        path = place.path
        tmpPrefix = place.tmpPrefix
        cPath = strdup(path)!
    }

    deinit {
        state.withLock { s in if let carrier = s.carrier, s.carrierPid == getpid() { rmdir(carrier) } }
        free(cPath)
    }

    /// Validates `path` and makes the lock: (lock, 0) or (nil, EINVAL, ENAMETOOLONG, ENOENT,
    /// ENOTDIR, EACCES, EROFS, EEXIST).
    package static func make(path: String) -> (DistributedLock?, Int32) {
        let (place, code) = locate(path)
        return (place.map(DistributedLock.init), code)
    }

    private static func locate(_ path: String) -> ((path: String, tmpPrefix: String)?, Int32) {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let slash = trimmed.lastIndex(of: "/")
        let base = String(slash.map { trimmed[trimmed.index(after: $0)...] } ?? trimmed)
        let given = slash.map { $0 == trimmed.startIndex ? "/" : String(trimmed[..<$0]) } ?? "."
        if base.isEmpty || base == "." || base == ".." || path.utf8.contains(0) { return (nil, EINVAL) }
        if base.utf8.count > Int(NAME_MAX) { return (nil, ENAMETOOLONG) }
        var info = stat()
        if stat(given, &info) != 0 { return (nil, errno) }
        if info.st_mode & S_IFMT != S_IFDIR { return (nil, ENOTDIR) }
        if faccessat(AT_FDCWD, given, W_OK | X_OK, AT_EACCESS) != 0 { return (nil, errno) }
        // Absolute, so that a later chdir does not move the lock.
        guard let resolved = realpath(given, nil) else { return (nil, errno) }
        let parent = String(cString: resolved)
        free(resolved)
        let full = (parent == "/" ? "" : parent) + "/" + base
        if lstat(full, &info) == 0 {
            if info.st_mode & S_IFMT != S_IFDIR { return (nil, EEXIST) }
            if let names = entries(of: full) {
                if names.contains(where: { parseEntry($0) == nil }) { return (nil, EEXIST) }
            } else if errno != ENOENT {  // (ENOENT: a lock released meanwhile)
                return (nil, errno == ENOTDIR ? EEXIST : errno)
            }
        }
        return ((full, (parent == "/" ? "" : parent) + "/." + String(base.prefix(100)) + ".tmp."), 0)
    }

    // MARK: Operations returning errno codes (the C API calls these; the Swift API wraps them).

    /// Acquires the lock if it is free; never blocks. 0, EBUSY (held), EDEADLK (this object
    /// holds it), EEXIST (something that is not a lock is at `path`), or a system errno.
    package func tryLockCode() -> Int32 {
        state.withLock { s in
            if s.held != nil { return EDEADLK }
            if visiblyHeld() { return EBUSY }
            let me = ProcessIdentity.current
            if s.carrier == nil || s.carrierPid != me.pid {  // (after a fork, the parent's is not ours)
                guard let carrier = newCarrier(me, create: true) else { return errno }
                (s.carrier, s.carrierPid) = (carrier, me.pid)
            }
            let carrier = s.carrier!, entry = me.newEntry()
            if mkdir(carrier + "/" + entry, 0o755) != 0 {
                if errno == ENOENT { s.carrier = nil }  // removed behind our back: the next try makes one
                return errno
            }
            if rename(carrier, path) == 0 || (errno == ENOENT && exists(path + "/" + entry)) {
                (s.held, s.carrier) = (entry, nil)  // (ENOENT and our entry in place: an NFS retry of a rename that did happen)
                return 0
            }
            let code = errno
            rmdir(carrier + "/" + entry)
            switch code {
            case EEXIST, ENOTEMPTY: return EBUSY
            case ENOTDIR: return EEXIST  // a non-directory is at `path`
            default: return code
            }
        }
    }

    /// A cheap early "busy": `path` is a directory with a subdirectory (the holder entry), by its
    /// link count. (File systems that do not count subdirectories, as btrfs, never say so.) The
    /// open revalidates NFS's cached attributes.
    private func visiblyHeld() -> Bool {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 { return false }
        defer { close(fd) }
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_nlink >= 3
    }

    /// A fresh carrier name for this process, made on disk if `create` (nil with errno).
    private func newCarrier(_ me: ProcessIdentity, create: Bool) -> String? {
        while true {
            let carrier = tmpPrefix + me.carrierTag + "." + String(ProcessIdentity.nextSerial())
            if !create { return carrier }
            if mkdir(carrier, 0o777) == 0 { return carrier }
            if errno != EEXIST { return nil }  // EEXIST: left by a dead process that had our pid
        }
    }

    /// Polls `tryLockCode` (and takes over a stale holder's lock) every `pollNanoseconds` until
    /// it succeeds or the monotonic `deadline` (ns, < 0: none) passes. 0, ETIMEDOUT, EINTR (a
    /// signal handler ran while sleeping: call again), EINVAL (poll interval <= 0), EDEADLK,
    /// EEXIST, or a system errno.
    package func lockCode(deadline: Int64, pollNanoseconds: Int64) -> Int32 {
        if pollNanoseconds <= 0 { return EINVAL }
        while true {
            var code = tryLockCode()
            if code != EBUSY { return code }
            code = recoverStaleCode()
            if code == 0 || (code != EBUSY && code != ENOENT) { return code }
            if code == ENOENT { continue }  // released meanwhile: try again at once
            let now = monotonicNow()
            if deadline >= 0 && now >= deadline { return ETIMEDOUT }
            let nap = deadline >= 0 ? min(pollNanoseconds, deadline - now) : pollNanoseconds
            var request = timespec(tv_sec: Int(nap / 1_000_000_000), tv_nsec: Int(nap % 1_000_000_000))
            if clock_nanosleep(CLOCK_MONOTONIC, 0, &request, nil) == EINTR { return EINTR }
        }
    }

    /// The monotonic deadline `timeout` ns from now (< 0: none, -1).
    package static func deadline(afterNanoseconds timeout: Int64) -> Int64 {
        if timeout < 0 { return -1 }
        let (deadline, overflow) = monotonicNow().addingReportingOverflow(timeout)
        return overflow ? .max : deadline
    }

    /// Releases the lock this object holds. 0; EPERM (not held by this object); ESTALE (it was
    /// broken meanwhile and is free); EBUSY (it was broken and someone else holds it now).
    package func unlockCode() -> Int32 {
        state.withLock { s in
            guard let entry = s.held else { return EPERM }
            let me = ProcessIdentity.current
            var code = ENOTEMPTY
            if s.carrier == nil || s.carrierPid != me.pid, let carrier = newCarrier(me, create: false) {
                // Move the entry out: the lock is free, and the entry is the next carrier.
                if rename(path + "/" + entry, carrier) == 0 || (errno == ENOENT && exists(carrier)) {
                    (s.held, s.carrier, s.carrierPid) = (nil, carrier, me.pid)
                    return 0
                }
                code = errno
            }
            if code != ENOENT {  // we have a carrier already (after a takeover), or a name clash
                if rmdir(path + "/" + entry) == 0 {
                    s.held = nil
                    return 0
                }
                code = errno
                if code != ENOENT { return code }
            }
            s.held = nil
            return holderEntry().entry != nil ? EBUSY : ESTALE
        }
    }

    /// Removes the lock whoever holds it (Apple's breakLock). 0 (broken, or it was free);
    /// EEXIST (something that is not a lock is at `path`), or a system errno.
    package func breakLockCode() -> Int32 {
        let (entry, code) = holderEntry()
        if code != 0 { return code }
        if let entry, rmdir(path + "/" + entry) != 0 && errno != ENOENT { return errno }
        rmdir(path)
        return 0
    }

    /// If the lock's holder is stale (on this host, process gone), takes the lock over in one
    /// atomic step: this object holds it then. 0 (taken over), EBUSY (the holder is alive, or
    /// on another host, or another breaker took it over first), ENOENT (the lock is free),
    /// EDEADLK, EEXIST, or a system errno.
    package func recoverStaleCode() -> Int32 {
        state.withLock { s in
            if s.held != nil { return EDEADLK }
            let (stale, code) = holderEntry()
            if code != 0 { return code }
            guard let stale else { return ENOENT }
            if !ProcessIdentity.isStale(entry: stale) { return EBUSY }
            let entry = ProcessIdentity.current.newEntry()
            if rename(path + "/" + stale, path + "/" + entry) == 0 || (errno == ENOENT && exists(path + "/" + entry)) {
                s.held = entry
                return 0
            }
            if errno != ENOENT { return errno }
            return holderEntry().entry != nil ? EBUSY : ENOENT  // another breaker won (or it was released)
        }
    }

    /// The current holder: (holder, 0), (nil, 0) when free, or (nil, EEXIST / errno).
    package func holderCode() -> (DistributedLockHolder?, Int32) {
        let (entry, code) = holderEntry()
        guard let entry, let parsed = parseEntry(entry) else { return (nil, code) }
        let me = ProcessIdentity.current
        let local = parsed.machine == me.machine && parsed.host == me.host
        return (DistributedLockHolder(host: String(parsed.host), pid: parsed.pid, processStart: parsed.start,
                                      acquired: .nanoseconds(parsed.acquired), isOnThisHost: local,
                                      isStale: ProcessIdentity.isStale(entry: entry)), 0)
    }

    /// Whether this object holds the lock now (checked on disk: false once it was broken).
    package func isHeldByThisObject() -> Bool {
        state.withLock { s in s.held.map { exists(path + "/" + $0) } ?? false }
    }

    /// The holder entry's name, or nil when free (no directory, or an empty one). Code EEXIST
    /// when the directory holds something else, or an errno.
    private func holderEntry() -> (entry: String?, code: Int32) {
        guard let names = entries(of: path) else { return (nil, errno == ENOENT ? 0 : errno == ENOTDIR ? EEXIST : errno) }
        // A readdir racing a takeover's rename may list the old and the new name: the newer holds.
        let holders = names.compactMap { name in parseEntry(name).map { (name, $0.acquired) } }
        if holders.count < names.count { return (nil, EEXIST) }
        return (holders.max { $0.1 < $1.1 }?.0, 0)
    }

    // MARK: The Swift API

    /// Acquires the lock if it is free, without blocking: true if this object holds it now,
    /// false if someone holds it.
    public func tryLock() throws(DistributedLockError) -> Bool {
        let code = tryLockCode()
        if code == EBUSY { return false }
        try check(code, "tryLock")
        return true
    }

    /// Acquires the lock, polling every `pollInterval` and taking over a stale holder's lock
    /// (see `recoverStale`); throws `.timedOut` once `timeout` (nil: none) has passed.
    public func lock(timeout: Duration? = nil, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        let deadline = timeout.map { Self.deadline(afterNanoseconds: max(0, nanoseconds($0))) } ?? -1
        var code: Int32
        repeat { code = lockCode(deadline: deadline, pollNanoseconds: nanoseconds(pollInterval)) } while code == EINTR
        try check(code, "lock")
    }

    /// Releases the lock. Throws `.notHeld`, `.broken` or `.brokenAndHeldByAnother`.
    public func unlock() throws(DistributedLockError) { try check(unlockCode(), "unlock") }

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

    /// Whether this object holds the lock now (false once it was broken).
    public var isLocked: Bool { isHeldByThisObject() }

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

// MARK: Holder entries and process identity

private struct ParsedEntry {
    var pid: Int32, start: UInt64, acquired: Int64, machine: Substring, host: Substring
}

/// `<pid>.<start>.<acquired>.<serial>.<machine>@<host>`, or nil for any other name.
private func parseEntry(_ name: String) -> ParsedEntry? {
    guard let at = name.firstIndex(of: "@") else { return nil }
    let fields = name[..<at].split(separator: ".", omittingEmptySubsequences: false)
    guard fields.count == 5, let pid = Int32(fields[0]), let start = UInt64(fields[1]),
          let acquired = Int64(fields[2]), UInt64(fields[3]) != nil else { return nil }
    return ParsedEntry(pid: pid, start: start, acquired: acquired, machine: fields[4],
                       host: name[name.index(after: at)...])
}

/// This process, as a lock holder names it. Cached per process id (a fork makes a new one).
private struct ProcessIdentity: Sendable {
    let pid: Int32
    let start: UInt64
    /// Boot id and pid namespace: processes with equal `machine` see the same pids.
    let machine: String
    let host: String

    private static let cache = Mutex<ProcessIdentity?>(nil)
    private static let serial = Atomic<UInt64>(0)

    static var current: ProcessIdentity {
        let pid = getpid()
        return cache.withLock { cached in
            if let cached, cached.pid == pid { return cached }
            let me = ProcessIdentity(pid: pid)
            cached = me
            return me
        }
    }

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
    static func isStale(entry: String) -> Bool {
        guard let parsed = parseEntry(entry) else { return false }
        let me = current
        guard !me.machine.isEmpty, parsed.machine == me.machine, parsed.host == me.host else { return false }
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

/// The names in a directory (without . and ..), or nil with errno set.
private func entries(of path: String) -> [String]? {
    guard let dir = opendir(path) else { return nil }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafePointer(to: &entry.pointee.d_name) {
            String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

private func exists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}

private func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    return overflow ? (seconds < 0 ? .min : .max) : whole &+ attoseconds / 1_000_000_000
}
