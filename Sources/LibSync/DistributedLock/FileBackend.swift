import Glibc
import Synchronization

// The file-system backend (NSDistributedLock's model): the lock is a directory in a file system
// every user can write (NFS included), with stale-holder recovery.
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
//   token     the fencing counter is a file beside the lock, `.<name>.fence`, read and rewritten
//             in place (one 21-byte pwrite) by each new holder only, after it acquired: the new
//             token is max(last + 1, wall-clock ns), so it survives the holder's crash (a write
//             is whole or absent) and even the loss of the file, unless the clock goes back.
//             Open and close around it give NFS's close-to-open consistency.
//
// Names below the parent directory are at most `<lock>/<entry>` (2 * NAME_MAX + 1 bytes): they
// are used as absolute paths while those fit in PATH_MAX, else relative to a descriptor of the
// parent opened for the operation, so every operation works on any path that creation accepts,
// however close to PATH_MAX, and no descriptor is kept between calls.

/// The file-system backend: a `LockDirectory`.
struct FileBackend: LockBackend {
    let directory: LockDirectory
    var name: String { directory.path }
    var waitsInStore: Bool { false }
    var firstPollNanoseconds: Int64? { nil }

    /// Validates `path` (see `LockDirectory.locate`): (backend, 0) or (nil, errno).
    static func make(_ path: String, mode: mode_t?, options: DistributedLock.Options) -> ((any LockBackend)?, Int32) {
        let (place, code) = LockDirectory.locate(path, mode: mode, options: options)
        return (place.map { FileBackend(directory: $0) }, code)
    }

    func makeSession(_ me: ProcessIdentity) -> any LockSession { FileSession(directory, me) }

    /// inotify on the parent directory (AsyncWake.swift: `FileWatch`).
    func armWake(_ ticket: WakeTicket) -> Bool { FileWatch.process.current().arm(directory, ticket) }
    func disarmWake(_ ticket: WakeTicket) { FileWatch.process.current().disarm(directory, ticket) }
}

/// A process's hold on disk: the holder entry, and the object's carrier.
struct DiskHold {
    /// The holder entry, while this process holds the lock through the object.
    var held: String?
    /// The object's empty directory beside the lock (its name in the parent directory).
    var carrier: String?
}

final class FileSession: LockSession {
    let directory: LockDirectory
    let me: ProcessIdentity
    var hold = DiskHold()
    var token: UInt64 = 0
    /// The watch of the hold's entry (HoldWatcher), and who it tells.
    private var watching: (id: UInt64, ticket: HoldTicket)?

    init(_ directory: LockDirectory, _ me: ProcessIdentity) {
        self.directory = directory
        self.me = me
    }

    func open() -> Int32 { 0 }

    func tryAcquire(deadline: Int64) -> Int32 { fenced(directory.acquire(&hold, as: me)) }

    /// After an acquisition (`code` 0), the new token; if it cannot be written, the hold is given back.
    private func fenced(_ code: Int32) -> Int32 {
        guard code == 0, let entry = hold.held else { return code }
        let (token, fault) = directory.nextToken()
        if fault == 0 {
            self.token = token
            return 0
        }
        _ = directory.release(entry, &hold, as: me)
        hold.held = nil
        return fault
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 { EINVAL }  // (polled: never called)

    func release() -> Int32 {
        guard let entry = hold.held else { return EPERM }
        let ticket = watching?.ticket
        unwatch()  // (before the entry goes: its absence is not a loss)
        let code = directory.release(entry, &hold, as: me)
        if code == 0 || code == ESTALE || code == EBUSY { hold.held = nil }
        if hold.held != nil, let ticket { watch(ticket) }  // still held
        return code
    }

    /// The watcher looks every HoldWatcher.fileCheckNanoseconds whether the entry is still there.
    func watch(_ ticket: HoldTicket) {
        unwatch()
        if let entry = hold.held { watching = (HoldWatcher.process.current().watch(.entry(directory, entry), ticket), ticket) }
    }

    private func unwatch() {
        if let watching { HoldWatcher.process.current().unwatch(watching.id) }
        watching = nil
    }

    func recoverStale(deadline: Int64) -> Int32 { fenced(directory.recoverStale(&hold, as: me)) }

    func breakLock() -> Int32 { directory.breakLock() }

    func holder() -> (DistributedLockHolder?, Int32) {
        let (entry, code) = directory.holderEntry()
        guard let entry, let parsed = parseEntry(entry) else { return (nil, code) }
        return (me.holder(parsed, entry: entry), 0)
    }

    func holds() -> Bool { hold.held.map { directory.holds($0) } ?? false }

    func close(releasing: Bool) {
        if releasing { _ = release() }
        unwatch()  // (nobody is left to tell)
        if let carrier = hold.carrier { directory.removeCarrier(carrier) }
    }
}

/// Where the lock is, and the directory operations of the protocol (see the top of the file).
struct LockDirectory: Sendable {
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
    let takeOverPlainFile: Bool

    var path: String { (parent == "/" ? "" : parent) + "/" + base }

    /// The fencing counter's name beside the lock: `.<name>.fence`, or, for a name too long for
    /// that, its first 100 bytes and a hash of the whole.
    var fenceName: String {
        let plain = "." + base + ".fence"
        if plain.utf8.count <= Int(NAME_MAX) { return plain }
        return carrierPrefix.dropLast(4) + String(stableHash(base), radix: 16) + ".fence"
    }

    /// Reads and advances the fencing counter (holder only): (token, 0) or (0, errno).
    func nextToken() -> (UInt64, Int32) {
        withParent({ (0, $0) }) { dir -> (UInt64, Int32) in
            let fd = openat(dir.fd, dir.name(fenceName), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode ?? 0o666)
            if fd < 0 { return (0, errno) }
            defer { close(fd) }
            if let mode { fchmod(fd, mode) }
            var text = [UInt8](repeating: 0, count: 32)
            let n = pread(fd, &text, 31, 0)
            if n < 0 { return (0, errno) }
            let last = UInt64(String(decoding: text[..<n].prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self)) ?? 0
            let token = max(last &+ 1, UInt64(max(0, wallClockNanoseconds())))
            let digits = String(token)
            let record = Array((String(repeating: "0", count: 20 - digits.count) + digits + "\n").utf8)
            if pwrite(fd, record, record.count, 0) != record.count { return (0, errno == 0 ? EIO : errno) }
            return (token, 0)
        }
    }

    /// The longest name used below the parent: `<lock>/<entry>` (each at most NAME_MAX), or
    /// `<carrier>/<entry>` (shorter).
    static let longestName = 2 * Int(NAME_MAX) + 1

    /// Validates `path` and finds the lock's place: (place, 0), or (nil, EINVAL, ENAMETOOLONG,
    /// ENOENT, ENOTDIR, EACCES, EROFS, EEXIST, or an errno).
    static func locate(_ path: String, mode: mode_t?, options: DistributedLock.Options) -> (LockDirectory?, Int32) {
        let makeParents = options.contains(.makeParents)
        guard let (given, base) = split(path) else { return (nil, EINVAL) }
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
                                  makeParents: makeParents, removeOnRelease: options.contains(.removeOnRelease),
                                  takeOverPlainFile: options.contains(.takeOverPlainFile))
        let code = place.withParent({ $0 }) { dir -> Int32 in
            if fstatat(dir.fd, dir.name(base), &info, AT_SYMLINK_NOFOLLOW) != 0 { return errno == ENOENT ? 0 : errno }
            if info.st_mode & S_IFMT == S_IFREG && place.takeOverPlainFile { return place.takeOver(dir) }
            if info.st_mode & S_IFMT != S_IFDIR { return EEXIST }
            let (_, code) = place.holderEntry(dir)  // (a lock released meanwhile is free: 0)
            return code
        }
        return code == 0 ? (place, 0) : (nil, code)
    }

    /// A lock path's parent directory as given ("." for none) and its file name, trailing
    /// slashes dropped; nil if it names no file (empty, `/`, `.`, `..`) or holds a NUL byte.
    static func split(_ path: String) -> (parent: String, base: String)? {
        let (given, base) = lastName(path)
        if base.isEmpty || base == "." || base == ".." || path.utf8.contains(0) { return nil }
        return (given, base)
    }

    /// `path`'s directory ("." for none, "/" for the root) and last name, trailing slashes
    /// dropped (the root's name is empty).
    private static func lastName(_ path: String) -> (parent: String, name: String) {
        var trimmed = Substring(path)
        while trimmed.utf8.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let slash = trimmed.lastIndex(of: "/")
        let name = String(slash.map { trimmed[trimmed.index(after: $0)...] } ?? trimmed)
        return (slash.map { $0 == trimmed.startIndex ? "/" : String(trimmed[..<$0]) } ?? ".", name)
    }

    /// The lock path `path` names, as `path` of the lock made for it will read, without touching
    /// the lock: absolute, trailing slashes dropped, the parent resolved (symbolic links
    /// followed) as far as it exists, the rest as written less `.` and `..` (so a parent that
    /// `makeParents` makes later reads the same). nil if `path` names no file (as `split`).
    static func canonical(_ path: String) -> String? {
        guard let (given, base) = split(path) else { return nil }
        let parent = resolved(given)
        return (parent == "/" ? "" : parent) + "/" + base
    }

    /// `directory` absolute, symbolic links followed as far as it exists (`realpath`), the
    /// missing rest appended as written, `.` dropped and `..` taking one name off.
    private static func resolved(_ directory: String) -> String {
        if let real = realpath(directory, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        let (parent, name) = lastName(directory)
        if name.isEmpty || (parent == "." && name == ".") { return directory }  // (the root, or a working directory gone)
        let above = resolved(parent)
        switch name {
        case ".": return above
        case "..":
            guard let cut = above.lastIndex(of: "/") else { return above }
            return cut == above.startIndex ? "/" : String(above[..<cut])
        default: return (above == "/" ? "" : above) + "/" + name
        }
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
    func makeDirectory(_ dir: Directory, _ name: String) -> Int32 {
        if mkdirat(dir.fd, dir.name(name), 0o777) != 0 { return errno }
        if let mode, fchmodat(dir.fd, dir.name(name), directoryMode(mode), 0) != 0 {
            let code = errno
            unlinkat(dir.fd, dir.name(name), AT_REMOVEDIR)
            return code
        }
        return 0
    }

    /// Acquires the lock if it is free: 0 (`s.held` set), EBUSY, EEXIST or an errno.
    func acquire(_ s: inout DiskHold, as me: ProcessIdentity) -> Int32 {
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
                case ENOTDIR:  // a non-directory is at `path`: filelock's lock file, left behind?
                    if !takeOverPlainFile { return EEXIST }
                    let taken = takeOver(dir)
                    if taken != 0 { return taken }
                default: return code
                }
            }
        }
    }

    /// Removes the plain file at the lock's path if it is one that filelock's `FileLock` leaves
    /// behind and nobody uses: a regular file (not a link), empty, on which no process holds a
    /// `flock` (checked by taking one, held until the file is gone, so a filelock process that
    /// acquires meanwhile is never robbed). 0 (removed, or gone already); EEXIST with the reason
    /// recorded (DistributedLockMessage) when it is held, has content, or is something else.
    func takeOver(_ dir: Directory) -> Int32 {
        let fd = openat(dir.fd, dir.name(base), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return 0 }  // gone meanwhile: the caller looks again
            return DistributedLockMessage.fail(EEXIST, "'\(path)' is a file that libsync cannot open (\(String(cString: strerror(errno)))): remove it; libsync's lock there is a directory")
        }
        defer { close(fd) }
        var opened = stat()
        if fstat(fd, &opened) != 0 { return errno }
        if opened.st_mode & S_IFMT == S_IFDIR { return 0 }  // a lock now: the caller looks again
        if opened.st_mode & S_IFMT != S_IFREG {
            return DistributedLockMessage.fail(EEXIST, "'\(path)' is not a lock (neither a directory nor a plain file): remove it")
        }
        if opened.st_size != 0 {
            return DistributedLockMessage.fail(EEXIST, "'\(path)' is a file with content (a filelock SoftFileLock's, or data), not a lock: "
                                               + "remove it once no filelock process uses it; libsync's lock there is a directory")
        }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EWOULDBLOCK || errno == EAGAIN {
                return DistributedLockMessage.fail(EEXIST, "'\(path)' is a plain lock file held by a filelock process (flock): "
                                                   + "libsync's lock there is a directory; stop the processes that use filelock on it, "
                                                   + "then acquire again (libsync takes over a plain file nobody holds)")
            }
            return DistributedLockMessage.fail(EEXIST, "'\(path)' is a plain lock file (filelock's) and this file system cannot tell "
                                               + "whether a process holds it (flock: \(String(cString: strerror(errno)))): remove it once "
                                               + "no filelock process uses it; libsync's lock there is a directory")
        }
        var now = stat()  // still the file we checked? (not replaced meanwhile)
        if fstatat(dir.fd, dir.name(base), &now, AT_SYMLINK_NOFOLLOW) != 0 { return errno == ENOENT ? 0 : errno }
        if now.st_dev != opened.st_dev || now.st_ino != opened.st_ino { return takeOver(dir) }
        if unlinkat(dir.fd, dir.name(base), 0) != 0 && errno != ENOENT { return errno }
        return 0
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
    func newCarrier(_ dir: Directory, _ me: ProcessIdentity) -> (String?, Int32) {
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

    func carrierName(_ me: ProcessIdentity) -> String {
        carrierPrefix + me.carrierTag + "." + String(ProcessIdentity.nextSerial())
    }

    /// Releases the hold `entry`: 0 (the entry is `s.carrier` now); ESTALE (broken meanwhile,
    /// free); EBUSY (broken, held by another now); or an errno (still held).
    func release(_ entry: String, _ s: inout DiskHold, as me: ProcessIdentity) -> Int32 {
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
    func recoverStale(_ s: inout DiskHold, as me: ProcessIdentity) -> Int32 {
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

    /// Whether the hold `entry` is gone for sure (its name is not there; an error looking is no answer).
    func lost(_ entry: String) -> Bool {
        withParent({ _ in false }) { dir in
            var info = stat()
            return fstatat(dir.fd, dir.name(base + "/" + entry), &info, AT_SYMLINK_NOFOLLOW) != 0 && (errno == ENOENT || errno == ENOTDIR)
        }
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

func exists(_ dir: LockDirectory.Directory, _ name: String) -> Bool {
    var info = stat()
    return fstatat(dir.fd, dir.name(name), &info, AT_SYMLINK_NOFOLLOW) == 0
}

// MARK: Holder entries and process identity

struct ParsedEntry {
    var pid: Int32, start: UInt64, acquired: Int64, machine: Substring, host: Substring
}

/// `<pid>.<start>.<acquired>.<serial>.<machine>@<host>`, or nil for any other name.
func parseEntry(_ name: String) -> ParsedEntry? {
    guard let at = name.firstIndex(of: "@") else { return nil }
    let fields = name[..<at].split(separator: ".", omittingEmptySubsequences: false)
    guard fields.count == 5, let pid = Int32(fields[0]), pid > 0, let start = UInt64(fields[1]),
          let acquired = Int64(fields[2]), UInt64(fields[3]) != nil else { return nil }
    return ParsedEntry(pid: pid, start: start, acquired: acquired, machine: fields[4],
                       host: name[name.index(after: at)...])
}

/// This process, as a lock holder names it (a forked child has its own).
final class ProcessIdentity: ProcessBound {
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
        start = ThreadStat.process(pid)?.start ?? 0
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
        let acquired = wallClockNanoseconds()
        return "\(pid).\(start).\(acquired).\(Self.nextSerial()).\(machine)@\(host)"
    }

    /// The holder that `entry` (parsed as `parsed`) names, as this process sees it.
    func holder(_ parsed: ParsedEntry, entry: String) -> DistributedLockHolder {
        DistributedLockHolder(host: String(parsed.host), pid: parsed.pid, processStart: parsed.start,
                              acquired: .nanoseconds(parsed.acquired),
                              isOnThisHost: parsed.machine == machine && parsed.host == host,
                              isStale: isStale(entry: entry))
    }

    /// Whether `entry`'s holder is on this host and its process is gone, a zombie, or another
    /// process with the same pid.
    func isStale(entry: String) -> Bool {
        guard let parsed = parseEntry(entry) else { return false }
        guard !machine.isEmpty, parsed.machine == machine, parsed.host == host else { return false }
        guard let status = ThreadStat.process(parsed.pid) else { return true }
        return status.state == UInt8(ascii: "Z") || status.state == UInt8(ascii: "X") || status.start != parsed.start
    }
}

private func readSmallFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 1024)
    let n = read(fd, &buffer, buffer.count)
    return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : nil
}
