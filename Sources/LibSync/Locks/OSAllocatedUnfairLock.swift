import Synchronization

/// Apple's `OSAllocatedUnfairLock<State>` (module `os`), with Apple's API and `Sendable` rules,
/// on libsync's `os_unfair_lock` word (`UnfairLockWord`): code written for Apple platforms
/// compiles on Linux with `import LibSync` in place of `import os`.
///
/// An unfair lock and the state it guards, in one heap block: a reference, so copies share
/// the lock and the state. `withLock` lends the state `inout`; its closure and result must be
/// `Sendable`, and `init(initialState:)` wants a `Sendable` state; the `Unchecked` forms drop
/// those checks (the caller answers for them).
///
///     let count = OSAllocatedUnfairLock(initialState: 0)
///     let now = count.withLock { $0 += 1; return $0 }
///
/// Misuse is fatal with a message, as on Apple platforms: locking it again on the thread that
/// holds it (also from inside `withLock`), `unlock()` from a thread that does not hold it, a
/// failed `precondition(_:)`. Unlock on the thread that locked: never across an `await`.
@frozen public struct OSAllocatedUnfairLock<State>: @unchecked Sendable {
    @usableFromInline let box: LockBox<State>

    /// Whether the calling thread holds the lock, for `precondition(_:)`.
    @frozen public enum Ownership: Hashable, Sendable {
        case owner
        case notOwner
    }

    /// A lock guarding `initialState`, which the caller vouches may cross threads.
    @inlinable public init(uncheckedState initialState: State) {
        box = LockBox.make(initialState, words: 1)
    }

    /// A lock guarding `initialState`.
    @inlinable public init(initialState: State) where State: Sendable {
        self.init(uncheckedState: initialState)
    }

    /// Runs `body` with the state, holding the lock; returns its result or rethrows its error.
    /// Sendability is not checked.
    @inlinable
    public func withLockUnchecked<R>(_ body: (inout State) throws -> R) rethrows -> R {
        try withLockUnchecked(flags: [], body)
    }

    /// `withLockUnchecked`, with Apple's lock flags.
    @inlinable
    public func withLockUnchecked<R>(flags: OSAllocatedUnfairLockFlags, _ body: (inout State) throws -> R) rethrows -> R {
        try box.withUnsafeMutablePointers { state, word in
            let word = atomic(word)
            UnfairLockWord.lock(word, options: flags.rawValue)
            defer { UnfairLockWord.unlock(word) }
            return try body(&state.pointee)
        }
    }

    /// Runs `body` with the state, holding the lock; returns its result or rethrows its error.
    @inlinable
    public func withLock<R: Sendable>(_ body: @Sendable (inout State) throws -> R) rethrows -> R {
        try withLockUnchecked(flags: [], body)
    }

    /// `withLock`, with Apple's lock flags.
    @inlinable
    public func withLock<R: Sendable>(flags: OSAllocatedUnfairLockFlags, _ body: @Sendable (inout State) throws -> R) rethrows -> R {
        try withLockUnchecked(flags: flags, body)
    }

    /// Runs `body` holding the lock if it is free now (nil if anyone holds it, the caller too).
    /// Sendability is not checked.
    @inlinable
    public func withLockIfAvailableUnchecked<R>(_ body: (inout State) throws -> R) rethrows -> R? {
        try box.withUnsafeMutablePointers { state, word in
            let word = atomic(word)
            guard UnfairLockWord.tryLock(word) else { return nil }
            defer { UnfairLockWord.unlock(word) }
            return try body(&state.pointee)
        }
    }

    /// Runs `body` holding the lock if it is free now (nil if anyone holds it, the caller too).
    @inlinable
    public func withLockIfAvailable<R: Sendable>(_ body: @Sendable (inout State) throws -> R) rethrows -> R? {
        try withLockIfAvailableUnchecked(body)
    }

    /// Returns if the calling thread's ownership of the lock is `condition`; else stops the
    /// program with a message.
    @inlinable
    public func precondition(_ condition: Ownership) {
        box.withUnsafeMutablePointerToElements { word in
            switch condition {
            case .owner: UnfairLockWord.assertOwner(atomic(word))
            case .notOwner: UnfairLockWord.assertNotOwner(atomic(word))
            }
        }
    }
}

extension OSAllocatedUnfairLock where State == () {
    /// A lock that guards no state (`lock()`/`unlock()`, or `withLock` around code).
    @inlinable public init() { self.init(uncheckedState: ()) }

    /// Takes the lock, waiting as long as it takes. Fatal if the caller already holds it.
    @inlinable public func lock() { lock(flags: []) }

    /// Takes the lock with Apple's flags.
    @inlinable public func lock(flags: OSAllocatedUnfairLockFlags) {
        box.withUnsafeMutablePointerToElements { UnfairLockWord.lock(atomic($0), options: flags.rawValue) }
    }

    /// Releases the lock. Fatal if the calling thread does not hold it.
    @inlinable public func unlock() {
        box.withUnsafeMutablePointerToElements { UnfairLockWord.unlock(atomic($0)) }
    }

    /// Takes the lock if it is free; returns whether it did.
    @inlinable public func lockIfAvailable() -> Bool {
        box.withUnsafeMutablePointerToElements { UnfairLockWord.tryLock(atomic($0)) }
    }

    /// Runs `body` holding the lock. Sendability is not checked.
    @inlinable
    public func withLockUnchecked<R>(_ body: () throws -> R) rethrows -> R {
        try withLockUnchecked(flags: []) { _ in try body() }
    }

    /// `withLockUnchecked`, with Apple's lock flags.
    @inlinable
    public func withLockUnchecked<R>(flags: OSAllocatedUnfairLockFlags, _ body: () throws -> R) rethrows -> R {
        try withLockUnchecked(flags: flags) { (_: inout ()) in try body() }
    }

    /// Runs `body` holding the lock.
    @inlinable
    public func withLock<R: Sendable>(_ body: @Sendable () throws -> R) rethrows -> R {
        try withLockUnchecked(flags: []) { _ in try body() }
    }

    /// `withLock`, with Apple's lock flags.
    @inlinable
    public func withLock<R: Sendable>(flags: OSAllocatedUnfairLockFlags, _ body: @Sendable () throws -> R) rethrows -> R {
        try withLockUnchecked(flags: flags) { (_: inout ()) in try body() }
    }

    /// Runs `body` holding the lock if it is free now. Sendability is not checked.
    @inlinable
    public func withLockIfAvailableUnchecked<R>(_ body: () throws -> R) rethrows -> R? {
        try withLockIfAvailableUnchecked { (_: inout ()) in try body() }
    }

    /// Runs `body` holding the lock if it is free now.
    @inlinable
    public func withLockIfAvailable<R: Sendable>(_ body: @Sendable () throws -> R) rethrows -> R? {
        try withLockIfAvailableUnchecked { (_: inout ()) in try body() }
    }
}

/// Apple's `OSAllocatedUnfairLockFlags` (macOS 15): hints for taking the lock. libsync's lock
/// always spins briefly before it sleeps, so `.adaptiveSpin` is how every lock behaves here.
@frozen public struct OSAllocatedUnfairLockFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    @inlinable public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Spin while the holder runs before sleeping (Apple: `OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN`).
    public static let adaptiveSpin = OSAllocatedUnfairLockFlags(rawValue: UnfairLockWord.adaptiveSpin)
}
