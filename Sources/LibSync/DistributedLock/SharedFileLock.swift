import Glibc

// The shared/exclusive (read/write) lock on the file system: many readers or one writer,
// writer-preferring, with fencing tokens ordered across both sides and stale-holder recovery of
// dead readers and writers. It builds on the exclusive lock's directory protocol (see
// FileBackend.swift) and adds one directory beside the lock:
//
//   path                  the GATE: the exclusive lock, exactly as DistributedLock's (a
//                         directory holding one holder entry while held).
//   .<name>.readers/      the SHARES: one holder entry (an empty directory named
//                         `<pid>.<start>.<acquired>.<serial>.<machine>@<host>`) per reader.
//   .<name>.fence         the fencing counter, as the exclusive lock's; written only by the
//                         gate's holder, so every token (reader or writer) is drawn in one order.
//
//   read acquire   take the gate (mkdir carrier/<entry>; rename(carrier, path)), draw a token,
//                  then rename(path/<entry>, .readers/<entry>): one step that frees the gate and
//                  registers the share. A reader holds the gate only for these steps.
//   read release   rename(.readers/<entry>, new carrier): the share is gone.
//   write acquire  take the gate and keep it (a pending writer: no new reader can enter, so
//                  readers cannot starve it), then wait until .readers/ has no live entry;
//                  then draw a token: it holds. A writer that gives up releases the gate.
//   write release  release the gate, as the exclusive lock.
//   recovery       a stale gate holder (its process on this host is gone) is taken over by the
//                  next acquirer, reader or writer, as the exclusive lock's (one rename); a stale
//                  share is removed by the writer that holds the gate (rmdir): only the gate's
//                  holder removes shares, so two recoverers never race.
//   break          removes the gate's holder entry and every share.
//
// Mutual exclusion: a reader registers its share while it holds the gate, and a writer looks at
// the shares only while it holds the gate; so when a writer finds no share, none can appear
// until it releases. Token order: every token is drawn by the gate's holder (a reader draws its
// token before it leaves the gate), so tokens increase across readers and writers in the order
// they acquired; a writer's token is larger than that of every reader that held before it, and a
// reader's larger than that of every writer before it.
//
// The same `path` must be used by read/write lock objects only: a plain DistributedLock on it
// would take the gate without waiting for the readers.

extension LockDirectory {
    /// The readers' directory beside the lock: `.<name>.readers`, or for a name too long for
    /// that, its first 100 bytes and a hash of the whole (as `fenceName`).
    var readersName: String {
        let plain = "." + base + ".readers"
        if plain.utf8.count <= Int(NAME_MAX) { return plain }
        return carrierPrefix.dropLast(4) + String(stableHash(base), radix: 16) + ".readers"
    }

    /// Moves the gate hold `entry` into the readers' directory (made if missing): 0 (`s.held`
    /// nil: the gate is free, the share registered), ESTALE (the gate hold was broken
    /// meanwhile), or an errno (still holding the gate).
    func enterShare(_ entry: String, _ s: inout DiskHold) -> Int32 {
        withParent({ $0 }) { dir in
            let share = readersName + "/" + entry
            var made = false
            while true {
                if renameat(dir.fd, dir.name(base + "/" + entry), dir.fd, dir.name(share)) == 0
                    || (errno == ENOENT && exists(dir, share)) {  // (an NFS retry of a rename that did happen)
                    s.held = nil
                    return 0
                }
                let code = errno
                if code == ENOENT && !made && !exists(dir, readersName) {
                    let mk = makeDirectory(dir, readersName)
                    if mk != 0 && mk != EEXIST { return mk }
                    made = true
                    continue
                }
                if code == ENOENT { s.held = nil; return ESTALE }
                return code
            }
        }
    }

    /// Ends the share `entry`: 0 (moved out: the object's next carrier, or removed), ESTALE
    /// (it was removed meanwhile: broken), or an errno.
    func leaveShare(_ entry: String, _ s: inout DiskHold, as me: ProcessIdentity) -> Int32 {
        withParent({ $0 }) { dir in
            let share = readersName + "/" + entry
            if s.carrier == nil {
                let carrier = carrierName(me)
                if renameat(dir.fd, dir.name(share), dir.fd, dir.name(carrier)) == 0
                    || (errno == ENOENT && exists(dir, carrier)) {
                    s.carrier = carrier
                    return 0
                }
                if errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST { return errno }
                if errno == ENOENT { return ESTALE }
            }
            if unlinkat(dir.fd, dir.name(share), AT_REMOVEDIR) == 0 { return 0 }
            return errno == ENOENT ? ESTALE : errno
        }
    }

    /// The shares in place, after removing those whose holder is stale (`me.isStale`): (live
    /// count, 0) or (0, errno). Called by the gate's holder only.
    func liveShares(as me: ProcessIdentity) -> (Int, Int32) {
        withParent({ (0, $0) }) { dir in
            let fd = openat(dir.fd, dir.name(readersName), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 { return (0, errno == ENOENT ? 0 : errno) }
            guard let stream = fdopendir(fd) else { close(fd); return (0, errno) }
            defer { closedir(stream) }
            var live = 0
            var stale: [String] = []
            while let item = readdir(stream) {
                let name = withUnsafePointer(to: &item.pointee.d_name) {
                    String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                }
                if name == "." || name == ".." { continue }
                if parseEntry(name) != nil && me.isStale(entry: name) { stale.append(name) } else { live += 1 }
            }
            for name in stale where unlinkat(dir.fd, dir.name(readersName + "/" + name), AT_REMOVEDIR) != 0 && errno != ENOENT {
                live += 1  // (could not remove it: still counts)
            }
            return (live, 0)
        }
    }

    /// Removes every share (break): 0 or an errno.
    func breakShares() -> Int32 {
        withParent({ $0 }) { dir in
            let fd = openat(dir.fd, dir.name(readersName), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 { return errno == ENOENT ? 0 : errno }
            guard let stream = fdopendir(fd) else { close(fd); return errno }
            var names: [String] = []
            while let item = readdir(stream) {
                let name = withUnsafePointer(to: &item.pointee.d_name) {
                    String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                }
                if name != "." && name != ".." && parseEntry(name) != nil { names.append(name) }
            }
            closedir(stream)
            for name in names where unlinkat(dir.fd, dir.name(readersName + "/" + name), AT_REMOVEDIR) != 0 && errno != ENOENT {
                return errno
            }
            return 0
        }
    }
}

/// A shared/exclusive lock on the file system (see the top of this file for the protocol), or
/// for a `postgresql://`, `redis://` or `etcd://` URL on that server (ServerReadWriteLock.swift):
/// many readers or one writer, writer-preferring, a fencing token on both sides.
///
/// One object is one holder: its read hold is re-entered by any of its threads (counted), its
/// write hold only by the thread that took it (any thread, with `.processOwned`); asking for the other kind while it holds is
/// `.alreadyHeld` (no upgrade or downgrade, as filelock's `ReadWriteLock`). A forked child never
/// holds, nor releases, its parent's hold. Thread-safe.
public final class DistributedReadWriteLock: @unchecked Sendable {
    /// Which side of the lock.
    public enum Kind: Int32, Sendable {
        /// Shared: many readers at a time.
        case read = 1
        /// Exclusive: one writer, and no reader.
        case write = 2
    }

    /// The lock's path: absolute, its parent directory resolved.
    public let path: String
    /// `path` as a C string, for the C API (immutable; freed with the object).
    package let cPath: UnsafeMutablePointer<CChar>
    /// The file system's lock (nil: a server's).
    private let disk: LockDirectory?
    private var directory: LockDirectory { disk! }
    /// A server's lock (ServerReadWriteLock.swift), for a URL.
    private let server: ServerReadWriteLock?
    /// `.processOwned`: the write hold is the process's, not the thread's.
    private let processOwned: Bool
    private let guardLock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    // The state, under guardLock.
    private var hold = DiskHold()
    private var kind: Kind?
    private var level = 0
    private var share: String?
    private var writer: pthread_t?
    private var pending = false
    private var token: UInt64 = 0
    private var pid = getpid()

    /// Validates `path` as DistributedLock does (options: `.makeParents`, and `.processOwned`: any
    /// thread of the process re-enters and releases the write hold, and continues or cancels a
    /// waiting write claim; `mode` as DistributedLock's). A `postgresql://`, `redis://` or
    /// `etcd://` URL (the grammar of DistributedLock's) makes the lock on that server, and
    /// connects to it now (`.makeParents` and `mode` are the file system's: ignored, and refused).
    public convenience init(path: String, options: DistributedLock.Options = [], mode: UInt32? = nil) throws(DistributedLockError) {
        let (lock, code) = Self.make(path, options: options, mode: mode)
        guard let lock else {
            throw DistributedLockError(code: code, operation: .create, path: path, detail: DistributedLockMessage.detail)
        }
        self.init(lock.disk, lock.server, path: lock.path, processOwned: options.contains(.processOwned))
    }

    /// As `init(path:options:mode:)`.
    public convenience init(_ target: String, options: DistributedLock.Options = []) throws(DistributedLockError) {
        try self.init(path: target, options: options)
    }

    /// (lock, 0) or (nil, EINVAL / a creation errno): the C ABI's create.
    package static func make(_ path: String, options: DistributedLock.Options, mode: UInt32?) -> (DistributedReadWriteLock?, Int32) {
        DistributedLockMessage.clear()
        if !options.isSubset(of: [.makeParents, .processOwned]) { return (nil, EINVAL) }
        if DistributedLock.isURL(path) {
            if mode != nil {
                return (nil, DistributedLockMessage.fail(EINVAL, "a permission mode is for a file-system lock, not the URL '\(LockURL.redacted(path))'"))
            }
            let (server, code) = ServerReadWriteLock.make(url: path, processOwned: options.contains(.processOwned))
            return (server.map { DistributedReadWriteLock(nil, $0, path: $0.name, processOwned: options.contains(.processOwned)) }, code)
        }
        let (place, code) = Self.place(path, options: options, mode: mode)
        return (place.map { DistributedReadWriteLock($0, nil, path: $0.path, processOwned: options.contains(.processOwned)) }, code)
    }

    private static func place(_ path: String, options: DistributedLock.Options, mode: UInt32?) -> (LockDirectory?, Int32) {
        if path.contains("://") {
            return (nil, DistributedLockMessage.fail(EINVAL, "'\(path)' is neither a path nor a postgresql://, redis:// or etcd:// URL"))
        }
        if let mode, mode > 0o777 { return (nil, EINVAL) }
        return LockDirectory.locate(path, mode: mode.map { mode_t($0) }, options: options)
    }

    private init(_ disk: LockDirectory?, _ server: ServerReadWriteLock?, path: String, processOwned: Bool) {
        self.disk = disk
        self.server = server
        self.processOwned = processOwned
        self.path = path
        cPath = strdup(path)!
        pthread_mutex_init(guardLock, nil)
    }

    deinit {
        if disk != nil && pid == getpid() {
            if level > 0 { level = 1; _ = releaseHeld() }
            giveUpClaim()
            if let carrier = hold.carrier { directory.removeCarrier(carrier) }
        }
        pthread_mutex_destroy(guardLock)
        guardLock.deallocate()
        free(cPath)
    }

    private func guarded<R>(_ body: () -> R) -> R {
        pthread_mutex_lock(guardLock)
        defer { pthread_mutex_unlock(guardLock) }
        if pid != getpid() {  // a forked child: the parent's hold is not this process's
            (hold, kind, level, share, writer, pending, token, pid) = (DiskHold(), nil, 0, nil, nil, false, 0, getpid())
        }
        return body()
    }

    private var me: ProcessIdentity { ProcessIdentity.identities.current() }

    private func isWriter() -> Bool {
        guard let writer else { return false }
        return processOwned || pthread_equal(writer, pthread_self()) != 0
    }

    /// One try (under guardLock): 0, EBUSY (held by others, or this thread's write claim waits
    /// for readers), EDEADLK, EAGAIN, EEXIST or an errno.
    private func tryOnce(_ wanted: Kind) -> Int32 {
        if level > 0 {
            if wanted != kind {
                return DistributedLockMessage.fail(EDEADLK, "already holding a \(kind == .read ? "read" : "write") lock "
                                                   + "(\(wanted == .read ? "downgrade" : "upgrade") not allowed)")
            }
            if wanted == .write && !isWriter() {
                return DistributedLockMessage.fail(EDEADLK, "the write lock is held by another thread of this object")
            }
            if level == Int(Int32.max) { return EAGAIN }
            level += 1
            return 0
        }
        if pending {
            if wanted == .read || !isWriter() { return EBUSY }  // another thread's write claim: wait behind it
        } else {
            var code = directory.acquire(&hold, as: me)
            if code == EBUSY {
                code = directory.recoverStale(&hold, as: me)
                if code == ENOENT { code = directory.acquire(&hold, as: me) }  // (released meanwhile)
            }
            if code != 0 { return code }
            guard let entry = hold.held else { return EIO }
            if wanted == .read {
                let (drawn, fault) = directory.nextToken()
                let moved = fault == 0 ? directory.enterShare(entry, &hold) : fault
                if moved == ESTALE { return EBUSY }  // the gate was broken meanwhile: try again
                if moved != 0 {
                    _ = directory.release(entry, &hold, as: me)
                    hold.held = nil
                    return moved
                }
                (share, kind, level, token) = (entry, .read, 1, drawn)
                return 0
            }
            pending = true
            writer = pthread_self()
        }
        let (live, code) = directory.liveShares(as: me)
        if code != 0 { giveUpClaim(); return code }
        if live > 0 { return EBUSY }
        if hold.held.map({ directory.holds($0) }) != true { giveUpClaim(); return EBUSY }  // the gate was broken: start again
        let (drawn, fault) = directory.nextToken()
        if fault != 0 { giveUpClaim(); return fault }
        (pending, kind, level, token) = (false, .write, 1, drawn)
        return 0
    }

    /// Releases a write claim that still waits for readers (under guardLock).
    private func giveUpClaim() {
        guard pending else { return }
        if let entry = hold.held { _ = directory.release(entry, &hold, as: me) }
        (hold.held, pending, writer) = (nil, false, nil)
    }

    /// Releases the disk hold (under guardLock, level 1): 0, ESTALE (broken meanwhile) or
    /// EBUSY (broken, and another holds the lock now), or an errno.
    private func releaseHeld() -> Int32 {
        var code: Int32 = 0
        if kind == .read, let share {
            code = directory.leaveShare(share, &hold, as: me)
        } else if let entry = hold.held {
            code = directory.release(entry, &hold, as: me)
            if code == 0 || code == ESTALE || code == EBUSY { hold.held = nil }
        }
        if code == 0 || code == ESTALE || code == EBUSY { (kind, level, share, writer, token) = (nil, 0, nil, nil, 0) }
        return code
    }

    /// Acquires `wanted`, trying every `pollNanoseconds` until `deadline` (CLOCK_MONOTONIC ns; < 0:
    /// none; passed: one try). A writer keeps the gate while it waits for readers. With
    /// `interruptible`, returns EINTR after at most `Deadline.interruptSlice` of sleep, a write
    /// claim kept for the next call (or `cancel()`). Returns 0, ETIMEDOUT, EINTR, EDEADLK,
    /// EAGAIN, EINVAL (poll ≤ 0), EEXIST or an errno.
    package func lockCode(_ wanted: Kind, deadline: Int64, pollNanoseconds: Int64, interruptible: Bool = false) -> Int32 {
        if let server { return server.lockCode(wanted, deadline: deadline, pollNanoseconds: pollNanoseconds, interruptible: interruptible) }
        if pollNanoseconds <= 0 { return EINVAL }
        DistributedLockMessage.clear()
        var slept: Int64 = 0
        while true {
            let code = guarded { tryOnce(wanted) }
            if code != EBUSY { return code }
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) {
                guarded { if isWriter() { giveUpClaim() } }
                return ETIMEDOUT
            }
            if interruptible && slept >= Deadline.interruptSlice { return EINTR }
            var nap = pollNanoseconds
            if deadline >= 0 { nap = min(nap, deadline - now) }
            if interruptible { nap = min(nap, Deadline.interruptSlice - slept) }
            var pause = timespec(tv_sec: Int(nap / 1_000_000_000), tv_nsec: Int(nap % 1_000_000_000))
            if nanosleep(&pause, nil) != 0 && interruptible { return EINTR }
            slept += nap
        }
    }

    /// One try: 0, EBUSY (held by others, or a writer waits for it), or lockCode's errors.
    package func tryLockCode(_ wanted: Kind) -> Int32 {
        if let server { return server.tryLockCode(wanted) }
        let code = lockCode(wanted, deadline: 0, pollNanoseconds: 1)
        return code == ETIMEDOUT ? EBUSY : code
    }

    /// Gives up this thread's write claim that waits for readers (after an interrupted wait).
    package func cancel() {
        if let server { return server.cancel() }
        guarded { if isWriter() { giveUpClaim() } }
    }

    /// Ends one acquisition (the last releases): 0, EPERM (not held through this object by the
    /// caller), ESTALE / EBUSY (the hold was broken meanwhile; it is released), or an errno.
    package func unlockCode(all: Bool = false) -> Int32 {
        if let server { return server.unlockCode(all: all) }
        DistributedLockMessage.clear()
        return guarded {
            if level == 0 || (kind == .write && !isWriter()) { return EPERM }
            if all { level = 1 }
            if level > 1 { level -= 1; return 0 }
            return releaseHeld()
        }
    }

    /// The caller's hold: its kind (nil: none) and count.
    package var state: (kind: Kind?, count: Int) { server?.state ?? guarded { (kind, level) } }

    /// The token of the hold: (token, 0) or (0, EPERM) when not held.
    package func tokenCode() -> (UInt64, Int32) { server?.tokenCode() ?? guarded { level > 0 ? (token, 0) : (0, EPERM) } }

    /// Removes the lock whoever holds it (its gate holder and every share): 0 or an errno.
    package func breakCode() -> Int32 {
        DistributedLockMessage.clear()
        if let server { return server.breakCode() }
        let code = directory.breakLock()
        return code != 0 ? code : directory.breakShares()
    }

    // MARK: Swift API

    /// Tries once to acquire `kind`: false when another holds the lock.
    public func tryLock(_ kind: Kind) throws(DistributedLockError) -> Bool {
        let code = tryLockCode(kind)
        if code == EBUSY { return false }
        try check(code, .tryLock)
        return true
    }

    /// Acquires `kind`, trying every `pollInterval` while another holds it.
    public func lock(_ kind: Kind, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) {
        try check(lockCode(kind, deadline: Deadline.none, pollNanoseconds: max(1, Deadline.nanoseconds(pollInterval))), .lock)
    }

    /// As `lock(_:pollInterval:)` for at most `timeout`: false once it has passed (the timeout
    /// convention of every Swift type, CONTRIBUTING.md); throws for the other errors.
    public func tryLock(_ kind: Kind, timeout: Duration, pollInterval: Duration = .milliseconds(10)) throws(DistributedLockError) -> Bool {
        let code = lockCode(kind, deadline: Deadline.after(timeout), pollNanoseconds: max(1, Deadline.nanoseconds(pollInterval)))
        if code == ETIMEDOUT { return false }
        try check(code, .lock)
        return true
    }

    /// Ends one acquisition; the last releases the lock.
    public func unlock() throws(DistributedLockError) { try check(unlockCode(), .unlock) }

    /// The kind the caller holds through this object, or nil.
    public var heldKind: Kind? { state.kind }

    /// The fencing token of the hold (nil when not held): larger than every earlier reader's and
    /// writer's token.
    public var fencingToken: UInt64? {
        let (token, code) = tokenCode()
        return code == 0 ? token : nil
    }

    /// Removes the lock whoever holds it.
    public func breakLock() throws(DistributedLockError) { try check(breakCode(), .breakLock) }

    // MARK: Loss notification (servers)

    /// Tells `handler` what this process learns of the object's holds, read or write, after
    /// acquiring them: `.lost` (the lease ended, the session broke, the lock was broken),
    /// `.suspended` and `.resumed`, as `DistributedLock.setEventHandler` (its notifier thread,
    /// its rules); nil stops. For a server's lock; a file-system lock throws `.system(ENOTSUP)`
    /// (it has no detector: its release says ESTALE).
    public func setEventHandler(_ handler: (@Sendable (DistributedReadWriteLock, DistributedLockEvent) -> Void)?) throws(DistributedLockError) {
        try check(setEventHandlerCode(handler), .lock)
    }

    /// 0, or ENOTSUP for a file-system lock.
    package func setEventHandlerCode(_ handler: (@Sendable (DistributedReadWriteLock, DistributedLockEvent) -> Void)?) -> Int32 {
        DistributedLockMessage.clear()
        guard let server else {
            return DistributedLockMessage.fail(ENOTSUP, "loss notification is for a server's read/write lock; the file system's has none")
        }
        var forward: (@Sendable (DistributedLockEvent) -> Void)?
        if let handler { forward = { [weak self] event in if let self { handler(self, event) } } }
        server.setEventHandler(forward)
        return 0
    }

    /// The state of the object's latest hold in this process: 0 (in place, released, none; always
    /// for a file-system lock), `DistributedLockEvent.suspended` or `.lost` (raw values).
    package func holdStateCode() -> Int32 { server?.holdStateCode() ?? 0 }

    /// Whether the object's latest hold (read or write) was lost, as far as this process has
    /// learned (a server's lock; false for a file-system one). Reset by the next acquisition.
    public var isLost: Bool { holdStateCode() == DistributedLockEvent.lost.rawValue }

    private func check(_ code: Int32, _ operation: DistributedLockOperation) throws(DistributedLockError) {
        if code != 0 { throw DistributedLockError(code: code, operation: operation, path: path, detail: DistributedLockMessage.detail) }
    }
}
