import Glibc

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
    /// is not `.recursive` (and the hold is still in place in the store), or, waiting without a
    /// timeout, through another object. (EDEADLK)
    case alreadyHeld
    /// A recursive hold's count would overflow. (EAGAIN)
    case tooManyAcquisitions
    /// `unlock`: the caller does not hold the lock through this object (another thread of a
    /// thread-owned object does, or nobody, or the hold is a parent process's). (EPERM)
    case notHeld
    /// `unlock`: the hold was lost since this object acquired it (broken, its lease expired, or
    /// its server session ended); nobody else is known to hold it now. `tryLock`, `lock`: the
    /// caller's hold through this non-recursive object was lost so, whether or not another
    /// holds the lock now; the call ended it. (ESTALE)
    case broken
    /// `unlock`: the hold was lost since this object acquired it, and someone else holds it now. (EBUSY)
    case brokenAndHeldByAnother
    /// The deprecated `lock(timeout:)` and `withLock(timeout:)`: the timeout passed before the
    /// lock was acquired (the lock was held, or the server did not answer in time); their
    /// replacements `tryLock(timeout:)` and `withLockIfAvailable(timeout:)` return false and nil
    /// instead. (ETIMEDOUT)
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
    package init(code: Int32, operation: DistributedLockOperation, path: String, detail: String? = nil) {
        if let detail {
            switch code {
            case EINVAL: self = .invalidTarget(detail); return
            case ELIBACC: self = .clientLibraryMissing(detail); return
            case ECONNREFUSED: self = .unreachable(detail); return
            case EACCES where operation != .unlock, EPERM where operation != .unlock: self = .accessDenied(detail); return
            case EIO: self = .server(detail); return
            default: break
            }
        }
        switch (operation, code) {
        case (.create, EINVAL): self = .invalidPath(path)
        case (.create, ENAMETOOLONG): self = .nameTooLong(path)
        case (.create, ENOENT): self = .parentMissing(path)
        case (.create, ENOTDIR): self = .parentNotADirectory(path)
        case (.create, EACCES), (.create, EPERM), (.create, EROFS): self = .parentNotWritable(path)
        case (_, EEXIST): self = .notALock(path)
        case (_, EDEADLK): self = .alreadyHeld
        case (_, EAGAIN): self = .tooManyAcquisitions
        case (.unlock, EPERM): self = .notHeld
        case (.unlock, ESTALE), (.tryLock, ESTALE), (.lock, ESTALE): self = .broken
        case (.unlock, EBUSY): self = .brokenAndHeldByAnother
        case (_, ETIMEDOUT): self = .timedOut
        default: self = .system(errno: code, operation: operation.rawValue)
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

/// The operation of a `DistributedLock` that returned an errno code: with the code, it decides
/// which `DistributedLockError` that is (its raw value names it in `.system`).
package enum DistributedLockOperation: String, Sendable {
    /// Making the object (`init(path:options:mode:)`): EINVAL and the parent's errors are the path's.
    case create
    case tryLock
    case lock
    /// `unlock` and `unlockAll`: EPERM, ESTALE and EBUSY say what became of the hold.
    case unlock
    case breakLock
    case recoverStale
    case holder
}
