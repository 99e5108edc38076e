import Glibc

/// The errors of the lock family, each the Swift face of the errno code the C API returns.
public enum LockError: Error, Equatable, Sendable, CustomStringConvertible {
    /// EDEADLK: the caller already holds the lock; waiting would never end.
    case wouldDeadlock
    /// EPERM: the caller does not hold the lock (or the side of it) it tried to release.
    case notOwner
    /// EAGAIN: a count would overflow (recursion depth, readers).
    case overflow
    /// EINTR: a signal interrupted an interruptible wait.
    case interrupted
    /// EOWNERDEAD (robust locks): the previous holder died holding the lock. The caller now holds
    /// it; the state it guards may be half-updated. Repair it and call `consistent()` before
    /// unlocking, or the unlock makes the lock `.notRecoverable`.
    case ownerDied
    /// ENOTRECOVERABLE (robust locks): a holder that got `.ownerDied` unlocked without calling
    /// `consistent()`. Every later lock fails so, until the lock is initialized again.
    case notRecoverable
    /// Any other code.
    case other(Int32)

    @usableFromInline package init(code: Int32) {
        switch code {
        case EDEADLK: self = .wouldDeadlock
        case EPERM: self = .notOwner
        case EAGAIN: self = .overflow
        case EINTR: self = .interrupted
        case EOWNERDEAD: self = .ownerDied
        case ENOTRECOVERABLE: self = .notRecoverable
        default: self = .other(code)
        }
    }

    /// What went wrong, in words: "the calling thread already holds this lock ...".
    public var description: String {
        switch self {
        case .wouldDeadlock: "the calling thread already holds this lock: waiting for it would never end"
        case .notOwner: "the calling thread does not hold this lock (or the side of it) that it tried to release"
        case .overflow: "a count of this lock would overflow (recursion depth, or readers)"
        case .interrupted: "a signal interrupted the wait for this lock"
        case .ownerDied: "the previous holder died holding this robust lock: the caller holds it now; repair the state it guards and call consistent() before unlocking"
        case .notRecoverable: "this robust lock is not recoverable: a holder unlocked it after its owner died without calling consistent()"
        case .other(let code): "lock operation failed: \(String(cString: strerror(code))) (errno \(code))"
        }
    }

    /// The same as `description`: what Foundation's `LocalizedError` reads, so that
    /// `localizedDescription` says it too once the type conforms (`extension LockError: LocalizedError {}`).
    public var errorDescription: String? { description }
}

/// Throws the code as a LockError unless it is 0 (or ETIMEDOUT/EBUSY, which the caller maps to
/// `false`); returns whether the lock was taken.
@inlinable @inline(__always)
func taken(_ code: Int32) throws(LockError) -> Bool {
    if code == 0 { return true }
    if code == ETIMEDOUT || code == EBUSY { return false }
    throw LockError(code: code)
}

/// Traps with a message for what `withLock` cannot return.
@usableFromInline func lockFailed(_ code: Int32, _ caller: StaticString) -> Never {
    switch code {
    case EDEADLK: misuse("\(caller): the calling thread already holds this lock")
    case EAGAIN: misuse("\(caller): recursion depth overflow")
    case EOWNERDEAD: misuse("\(caller): the previous holder died holding this robust lock; use lock() and handle LockError.ownerDied")
    case ENOTRECOVERABLE: misuse("\(caller): this robust lock is not recoverable")
    default: misuse("\(caller): lock failed (\(code))")
    }
}
