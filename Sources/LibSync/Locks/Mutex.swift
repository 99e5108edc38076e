import CSyncShim
import Glibc
import Synchronization

/// The modes of a mutex or recursive lock (the C flags' values).
public struct LockOptions: OptionSet, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    /// The lock lives in memory that processes share (a MAP_SHARED mapping): its futex uses the
    /// shared namespace.
    public static let shared = LockOptions(rawValue: LockFlags.shared)
    /// Robust: a holder that dies holding the lock (its thread exits, its process is killed) is
    /// reported to the next locker, who gets `LockError.ownerDied` holding the lock. 16 bytes.
    public static let robust = LockOptions(rawValue: LockFlags.robust)
}

/// Memory for a lock of `kind` with `options`: the caller's (checked, initialized unless
/// `initialize` is false: the initializer's EBUSY, for shared memory in use, is thrown), or a new
/// block.
func makeLockMemory(_ memory: UnsafeMutableRawPointer?, size: Int, options: LockOptions, initialize: Bool,
                _ initializer: (UnsafeMutableRawPointer) -> Int32) throws(LockError) -> LockMemory {
    let robust = options.contains(.robust)
    let size = robust ? 16 : size
    guard let memory else {
        let owned = LockMemory(size: size)
        let result = initializer(owned.raw)
        require(result == 0, "LockMemory: initialization failed (\(result))")
        return owned
    }
    guard Int(bitPattern: memory) & (robust ? 7 : 3) == 0 else { throw .other(EINVAL) }
    if initialize {
        let result = initializer(memory)
        if result != 0 { throw LockError(code: result) }
    } else {
        let word = atomic(memory, as: UInt32.self).pointee.load(ordering: .relaxed)
        let modes = (robust ? MutexWord.robust : 0) | (options.contains(.shared) ? MutexWord.shared : 0)
        guard word & (MutexWord.robust | MutexWord.shared | MutexWord.unowned) == modes else { throw .other(EINVAL) }
    }
    return LockMemory(borrowing: memory, size: size)
}

/// A mutual-exclusion lock that knows its owner: locking it again from the owning thread throws
/// `LockError.wouldDeadlock` instead of hanging, unlocking it from another thread throws
/// `LockError.notOwner`. Four bytes of state; uncontended lock/unlock is one CAS each.
///
///     let mutex = SyncMutex()
///     let value = mutex.withLock { counter += 1; return counter }
///
/// Robust (`SyncMutex(options: .robust)`, or in shared memory with `init(at:options:initialize:)`): when
/// a holder dies holding it, the next locker's `lock` throws `LockError.ownerDied` *holding the
/// lock*; it repairs the guarded state and calls `consistent()` before `unlock()`, or the lock
/// becomes `.notRecoverable` for everyone.
public final class SyncMutex: @unchecked Sendable {
    @usableFromInline let memory: LockMemory
    @usableFromInline var word: MutexWord.Word { atomic(memory.raw, as: UInt32.self) }

    /// A mutex in memory of its own (`.robust`: a thread that exits holding it is reported).
    public init(options: LockOptions = []) {
        memory = try! makeLockMemory(nil, size: 4, options: options, initialize: true) {
            MutexWord.initialize($0, shared: options.contains(.shared), unowned: false, robust: options.contains(.robust))
        }
    }

    /// A mutex in the caller's memory, such as a MAP_SHARED mapping that processes share:
    /// `byteCount(for: options)` bytes, 4-aligned (robust: 8-aligned), that outlive this object.
    /// The caller chooses, as no default is safe: `initialize: true` in the one process that
    /// creates it (the memory is zeroed or holds a mutex nobody uses), `initialize: false` with
    /// the same options in the others, which attach to it. Throws `.other(EINVAL)` for misaligned
    /// memory, or (`initialize: false`) memory whose mutex has other options; with `.shared` and
    /// `initialize: true`, `.other(EBUSY)`, changing nothing, if the mutex there is held or has
    /// waiters (an attach written as a create would have reset another process's lock).
    public init(at memory: UnsafeMutableRawPointer, options: LockOptions, initialize: Bool) throws(LockError) {
        self.memory = try makeLockMemory(memory, size: 4, options: options, initialize: initialize) {
            MutexWord.initialize($0, shared: options.contains(.shared), unowned: false, robust: options.contains(.robust))
        }
    }

    /// The bytes a mutex with `options` takes: 4, or 16 if robust.
    public static func byteCount(for options: LockOptions) -> Int { options.contains(.robust) ? 16 : 4 }

    /// Takes the lock, waiting as long as it takes.
    @inlinable public func lock() throws(LockError) {
        _ = try taken(MutexWord.lock(word))
    }
    /// Takes the lock if it is free; returns whether it did. Throws only for a robust lock
    /// (`.ownerDied` holding it, `.notRecoverable`).
    @inlinable public func tryLock() throws(LockError) -> Bool { try taken(MutexWord.tryLock(word)) }
    /// Takes the lock unless `timeout` passes first (monotonic clock); returns whether it did.
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(MutexWord.lock(word, deadline: Deadline.after(timeout)))
    }
    /// Takes the lock unless the monotonic clock reaches `deadline` (ns) first.
    @inlinable public func lock(deadlineNanoseconds: Int64) throws(LockError) -> Bool {
        try taken(MutexWord.lock(word, deadline: deadlineNanoseconds))
    }
    /// Releases the lock; throws `.notOwner` if the caller does not hold it.
    @inlinable public func unlock() throws(LockError) {
        _ = try taken(MutexWord.unlock(word))
    }
    /// Robust: marks the guarded state repaired after `.ownerDied`, so that `unlock()` leaves
    /// the lock usable. Throws `.notOwner` if the caller does not hold it, `.other(EINVAL)` if
    /// the lock is not robust or not marked.
    public func consistent() throws(LockError) {
        _ = try taken(MutexWord.consistent(word))
    }
    /// Whether the calling thread holds the lock.
    @inlinable public var isHeldByCurrentThread: Bool { MutexWord.isOwnedByCaller(word) }

    /// Runs `body` holding the lock and returns its value; releases the lock even if it throws.
    /// What it cannot return traps with a message: calling it again from inside `body`, and on
    /// a robust lock a dead previous holder (use `lock()` to handle `.ownerDied`).
    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = MutexWord.lock(word)
        if result != 0 { lockFailed(result, "SyncMutex.withLock") }
        defer { _ = MutexWord.unlock(word) }
        return try body()
    }
}

/// A lock its owner may take again; each lock balanced by an unlock, others wait until the
/// count returns to zero (`NSRecursiveLock`). Robust as `SyncMutex`: `.ownerDied` leaves the
/// caller holding it once.
public final class SyncRecursiveLock: @unchecked Sendable {
    @usableFromInline let memory: LockMemory

    /// A lock in memory of its own (`.robust`: a thread that exits holding it is reported).
    public init(options: LockOptions = []) {
        memory = try! makeLockMemory(nil, size: 8, options: options, initialize: true) {
            RecursiveWord.initialize($0, shared: options.contains(.shared), robust: options.contains(.robust))
        }
    }

    /// A lock in the caller's memory, as `SyncMutex.init(at:options:initialize:)` (the same
    /// choice, the same errors): `byteCount(for: options)` bytes.
    public init(at memory: UnsafeMutableRawPointer, options: LockOptions, initialize: Bool) throws(LockError) {
        self.memory = try makeLockMemory(memory, size: 8, options: options, initialize: initialize) {
            RecursiveWord.initialize($0, shared: options.contains(.shared), robust: options.contains(.robust))
        }
    }

    /// The bytes a recursive lock with `options` takes: 8, or 16 if robust.
    public static func byteCount(for options: LockOptions) -> Int { options.contains(.robust) ? 16 : 8 }

    @inlinable public func lock() throws(LockError) { _ = try taken(RecursiveWord.lock(memory.raw)) }
    @inlinable public func tryLock() throws(LockError) -> Bool { try taken(RecursiveWord.tryLock(memory.raw)) }
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RecursiveWord.lock(memory.raw, deadline: Deadline.after(timeout)))
    }
    @inlinable public func unlock() throws(LockError) { _ = try taken(RecursiveWord.unlock(memory.raw)) }
    /// Robust: as `SyncMutex.consistent()`.
    public func consistent() throws(LockError) { _ = try taken(RecursiveWord.consistent(memory.raw)) }
    /// How many times the calling thread holds the lock (0: not at all).
    @inlinable public var depth: Int { Int(RecursiveWord.depthHeldByCaller(memory.raw)) }

    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RecursiveWord.lock(memory.raw)
        if result != 0 { lockFailed(result, "SyncRecursiveLock.withLock") }
        defer { _ = RecursiveWord.unlock(memory.raw) }
        return try body()
    }
}
