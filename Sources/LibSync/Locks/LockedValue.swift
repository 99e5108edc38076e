import CSyncShim
import Glibc
import Synchronization

/// A value and its lock's words in one heap block: the value is the header, the words (4-byte
/// aligned, zeroed, then set up by the caller) the elements. Addresses are stable for the
/// block's life; lock-order checking forgets the lock when the block goes.
@usableFromInline final class LockBox<Value>: ManagedBuffer<Value, UInt32> {
    @inlinable
    static func make(_ value: Value, words: Int) -> LockBox<Value> {
        let box = unsafeDowncast(create(minimumCapacity: words) { _ in value }, to: LockBox<Value>.self)
        box.withUnsafeMutablePointerToElements { $0.initialize(repeating: 0, count: words) }
        return box
    }

    deinit {
        withUnsafeMutablePointerToElements { LockOrder.forget($0) }
    }
}

/// A value guarded by a mutex: the shape of `Synchronization.Mutex<Value>` (`withLock` lends
/// the value `inout`), on libsync's own mutex word, so that it is owner-checked and seen by
/// lock-order checking (`LockOrderChecking`). A reference: copies share the value and the lock.
///
///     let hits = SyncLockedValue([String: Int]())
///     hits.withLock { $0["home", default: 0] += 1 }
///
/// Calling `withLock` again from inside its own body (on the same thread) would wait forever:
/// it stops the program with a message instead, in every build. The value must not escape the
/// body (a reference to it, or an `inout` captured for later, would be used without the lock).
@frozen public struct SyncLockedValue<Value> {
    @usableFromInline let box: LockBox<Value>

    /// A lock guarding `value`.
    @inlinable public init(_ value: Value) { box = LockBox.make(value, words: 1) }

    /// Runs `body` with the value, holding the lock; returns its result or rethrows its error
    /// (the lock is released either way).
    @inlinable
    public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        try box.withUnsafeMutablePointers { (value, word) throws(E) -> R in
            let word = atomic(word)
            let result = MutexWord.lock(word)
            if result != 0 { lockedValueFailed(result, "SyncLockedValue.withLock") }
            defer { _ = MutexWord.unlock(word) }
            return try body(&value.pointee)
        }
    }

    /// Runs `body` holding the lock if it is free now, else returns nil without waiting (also
    /// when the caller holds it).
    @inlinable
    public func withLockIfAvailable<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R? {
        try box.withUnsafeMutablePointers { (value, word) throws(E) -> R? in
            let word = atomic(word)
            guard MutexWord.tryLock(word) == 0 else { return nil }
            defer { _ = MutexWord.unlock(word) }
            return try body(&value.pointee)
        }
    }

    /// Whether the calling thread holds the lock (inside `withLock`).
    @inlinable public var isHeldByCurrentThread: Bool {
        box.withUnsafeMutablePointerToElements { MutexWord.isOwnedByCaller(atomic($0)) }
    }
}

extension SyncLockedValue: @unchecked Sendable where Value: Sendable {}

/// A value guarded by a read-write lock (`SyncRWLock`, writer-preferring): many `read`s at
/// once, or one `write`; and beside the `read`s, one `upgradableRead` at a time, which reads
/// and may then write what it read with no other writer in between (parking_lot's
/// `upgradable_read`). A reference: copies share the value and the lock.
///
///     let config = SyncRWLockedValue(["mode": "fast"])
///     let mode = config.read { $0["mode"] }
///     config.write { $0["mode"] = "safe" }
///     config.upgradableRead { access in
///         if access.read({ $0["mode"] }) == nil { access.write { $0["mode"] = "fast" } }
///     }
///
/// Re-entry on the same thread stops the program with a message (in every build) instead of
/// waiting for itself: `read`, `write` or `upgradableRead` inside `write`, `read` or
/// `upgradableRead` (a nested read would wait forever once a writer queues). Use one `read`
/// for what you need, `write` for a read-modify-write, or `upgradableRead` to check, then
/// write, while plain readers go on reading. The value must not escape the body.
@frozen public struct SyncRWLockedValue<Value> {
    @usableFromInline let box: LockBox<Value>

    /// A lock guarding `value`.
    public init(_ value: Value) {
        box = LockBox.make(value, words: RWLockWords.size / 4)
        _ = box.withUnsafeMutablePointerToElements { RWLockWords.initialize(UnsafeMutableRawPointer($0), shared: false) }
    }

    /// Runs `body` with the value, holding a read lock (other reads may run at once); returns
    /// its result or rethrows its error.
    @inlinable
    public func read<R, E: Error>(_ body: (borrowing Value) throws(E) -> R) throws(E) -> R {
        try holding("SyncRWLockedValue.read", reading: true, take: { RWLockWords.readLock($0) },
                    release: { RWLockWords.readUnlock($0) }) { (value, _) throws(E) -> R in try body(value.pointee) }
    }

    /// Runs `body` with the value, holding the write lock (alone); returns its result or
    /// rethrows its error.
    @inlinable
    public func write<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        try holding("SyncRWLockedValue.write", reading: false, take: { RWLockWords.writeLock($0) },
                    release: { RWLockWords.writeUnlock($0) }) { (value, _) throws(E) -> R in try body(&value.pointee) }
    }

    /// Runs `body` holding the upgradable read: plain `read`s run beside it, no writer and no
    /// other upgradable read does. `body` reads the value through its `access` and may write
    /// it (`access.write`), each write an upgrade to the write lock with no release in between,
    /// so that what it read still holds. Returns `body`'s result or rethrows its error.
    @inlinable
    public func upgradableRead<R, E: Error>(_ body: (borrowing UpgradableAccess) throws(E) -> R) throws(E) -> R {
        try holding("SyncRWLockedValue.upgradableRead", reading: true, take: { RWLockWords.upgradableLock($0) },
                    release: { RWLockWords.upgradableUnlock($0) }) { (value, lock) throws(E) -> R in
            try body(UpgradableAccess(value: value, lock: lock))
        }
    }

    /// What `upgradableRead`'s body holds: the value to read, and `write`, which upgrades to
    /// the write lock for its own body (waiting for the plain readers to leave, new readers
    /// waiting meanwhile) and then returns to the upgradable read. It lives only in the body.
    @frozen public struct UpgradableAccess: ~Copyable {
        @usableFromInline let value: UnsafeMutablePointer<Value>
        @usableFromInline let lock: UnsafeMutableRawPointer

        @inlinable init(value: UnsafeMutablePointer<Value>, lock: UnsafeMutableRawPointer) {
            self.value = value
            self.lock = lock
        }

        /// Runs `body` with the value (plain readers may read it at the same time).
        @inlinable
        public func read<R, E: Error>(_ body: (borrowing Value) throws(E) -> R) throws(E) -> R {
            try body(value.pointee)
        }

        /// Upgrades to the write lock, runs `body` with the value, then turns the write lock
        /// back into the upgradable read (no writer gets in at either step); returns `body`'s
        /// result or rethrows its error. Not from inside its own `write` (that stops the program).
        @inlinable
        public func write<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
            let result = RWLockWords.upgrade(lock)
            if result != 0 { lockedValueFailed(result, "SyncRWLockedValue.UpgradableAccess.write") }
            defer { _ = RWLockWords.downgradeToUpgradable(lock) }
            return try body(&value.pointee)
        }
    }

    /// Runs `body` with the value and the lock's words, holding what `take` took (stopping the
    /// program if the caller reads this value already, or if `take` fails), released by
    /// `release`. `reading`: the caller counts as reading the value meanwhile.
    @inlinable @inline(__always)
    func holding<R, E: Error>(_ caller: StaticString, reading: Bool,
                              take: (UnsafeMutableRawPointer) -> Int32, release: (UnsafeMutableRawPointer) -> Int32,
                              _ body: (UnsafeMutablePointer<Value>, UnsafeMutableRawPointer) throws(E) -> R) throws(E) -> R {
        try box.withUnsafeMutablePointers { (value, words) throws(E) -> R in
            let lock = UnsafeMutableRawPointer(words)
            if sync_thread_reads(lock) != 0 { readerReentered(caller) }
            let result = take(lock)
            if result != 0 { lockedValueFailed(result, caller) }
            if reading { sync_thread_reading_push(lock) }
            defer {
                if reading { sync_thread_reading_pop() }
                _ = release(lock)
            }
            return try body(value, lock)
        }
    }
}

extension SyncRWLockedValue: @unchecked Sendable where Value: Sendable {}

/// Stops the program with a message (kept in optimized builds) for what a value lock's body
/// cannot survive: the caller already holds the lock, or a count would overflow.
@usableFromInline @inline(never)
func lockedValueFailed(_ code: Int32, _ caller: StaticString) -> Never {
    switch code {
    case EDEADLK: fatalError("\(caller): the calling thread already holds this lock (called again from inside its own body)")
    case EAGAIN: fatalError("\(caller): too many readers")
    default: fatalError("\(caller): lock failed (\(LockError(code: code)))")
    }
}

/// Stops the program: the calling thread reads the value it asks to read or write again.
@usableFromInline @inline(never)
func readerReentered(_ caller: StaticString) -> Never {
    fatalError("\(caller): the calling thread already reads this value (called again from inside a read of it; it would wait for itself)")
}
