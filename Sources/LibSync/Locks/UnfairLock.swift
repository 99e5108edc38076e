import CSyncShim
import Glibc
import Synchronization

/// Apple's `os_unfair_lock`: one 32-bit word of caller memory that names its owner, as Apple's
/// holds the owner's thread port (here the owner's kernel thread id, as in a PI futex word).
///
///     0                 free
///     tid               held by the thread whose kernel id is tid (1 ..< 2^22); nobody sleeps
///     tid | WAITERS     held, and some thread may sleep on the word: unlock wakes one
///     anything else     corrupt (never written by the lock): fatal
///
/// WAITERS is bit 31. Fast paths are one CAS each (0 -> tid, tid -> 0); everything else goes
/// to the slow paths, which also settle the owner checks. A contended locker spins
/// (`SpinWait`) while nobody sleeps, then sets WAITERS and sleeps on the (private) futex; a
/// thread that slept takes the lock with WAITERS set, as others may still sleep (one spurious
/// wake costs less than a lost one). Unlock frees the word and wakes one sleeper; a running
/// thread may take the lock first (unfair: throughput over order).
///
/// Misuse is fatal with a message, as Apple's (which has no error channel either): locking a
/// lock the caller holds, unlocking one it does not hold, a failed assertion, unknown options,
/// a corrupt word. The owner is exact: the caller's id, or one its thread had before fork()
/// made it a child's thread (it continues the forking thread and still holds what it held).
/// Process-private only, as Apple's. Lock-order checking (debug mode) sees it as a mutex.
@usableFromInline package enum UnfairLockWord {
    @usableFromInline package typealias Word = UnsafeMutablePointer<Atomic<UInt32>>

    @inlinable static var waiters: UInt32 { 1 << 31 }
    /// Apple's option bits (`os_unfair_lock_options_t`, `os_unfair_lock_flags_t`).
    @inlinable package static var dataSynchronization: UInt32 { 0x0001_0000 }
    @inlinable package static var adaptiveSpin: UInt32 { 0x0004_0000 }
    @inlinable static var knownOptions: UInt32 { dataSynchronization | adaptiveSpin }

    /// Takes the lock, waiting as long as it takes. `options`: Apple's bits, validated; both
    /// are hints that change nothing here (every locker spins briefly before it sleeps, which
    /// is what ADAPTIVE_SPIN asks; DATA_SYNCHRONIZATION speaks to Apple's workqueue).
    @inlinable @inline(__always)
    package static func lock(_ word: Word, options: UInt32 = 0) {
        let me = cachedThreadID()
        if options & ~knownOptions == 0 && me != 0
            && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged {
            LockOrder.acquired(word, .mutex)
            return
        }
        lockSlow(word, me, options: options)
    }

    /// Takes the lock if it is free (held by anyone, the caller included: false).
    @inlinable @inline(__always)
    package static func tryLock(_ word: Word) -> Bool {
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged {
            LockOrder.acquired(word, .mutex, tried: true)
            return true
        }
        return tryLockSlow(word, me)
    }

    /// Releases the lock; fatal unless the caller holds it.
    @inlinable @inline(__always)
    package static func unlock(_ word: Word) {
        if _slowPath(sync_lock_order_flag != 0) { return unlockHooked(word) }
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: me, desired: 0, ordering: .releasing).exchanged { return }
        unlockSlow(word, me)
    }

    /// Whether the calling thread holds the lock.
    @inlinable
    package static func isOwnedByCaller(_ word: Word) -> Bool {
        let holder = word.pointee.load(ordering: .relaxed) & ~waiters
        return holder != 0 && (holder == threadID() || isAncestor(holder))
    }

    /// Fatal unless the calling thread holds the lock.
    @inlinable
    package static func assertOwner(_ word: Word) {
        if !isOwnedByCaller(word) {
            fail(word, "Assertion failed: Lock unexpectedly not owned by current thread", "os_unfair_lock_assert_owner")
        }
    }

    /// Fatal if the calling thread holds the lock.
    @inlinable
    package static func assertNotOwner(_ word: Word) {
        if isOwnedByCaller(word) {
            fail(word, "Assertion failed: Lock unexpectedly owned by current thread", "os_unfair_lock_assert_not_owner")
        }
    }

    // MARK: slow paths

    /// Whether `holder` is an id the calling thread had before fork() made it a child's thread.
    @usableFromInline @inline(never)
    static func isAncestor(_ holder: UInt32) -> Bool { sync_thread_is_ancestor(holder) != 0 }

    /// Whether `value` is a state of the table above.
    @inline(__always)
    static func isCorrupt(_ value: UInt32) -> Bool {
        let holder = value & ~waiters
        return holder >= threadIDLimit || (holder == 0 && value != 0)
    }

    /// Stops the program: Apple's wording, then what it knows of the word.
    @usableFromInline @inline(never)
    static func fail(_ word: Word, _ message: String, _ function: StaticString) -> Never {
        let value = word.pointee.load(ordering: .relaxed)
        let holder = value & ~waiters
        let owner = isCorrupt(value) ? "corrupt word 0x\(String(value, radix: 16))"
                  : holder == 0 ? "not locked" : "owner thread \(holder)"
        fatalError("BUG IN CLIENT OF LIBSYNC: \(message) (\(function): lock \(word), \(owner), calling thread \(threadID()))")
    }

    @usableFromInline @inline(never)
    static func lockSlow(_ word: Word, _ cached: UInt32, options: UInt32) {
        if options & ~knownOptions != 0 {
            fatalError("BUG IN CLIENT OF LIBSYNC: Invalid options 0x\(String(options, radix: 16)) for an os_unfair_lock (known bits: 0x\(String(knownOptions, radix: 16)))")
        }
        let me = cached != 0 ? cached : threadID()
        var value = word.pointee.load(ordering: .relaxed)
        if isCorrupt(value) { fail(word, "os_unfair_lock is corrupt", "os_unfair_lock_lock") }
        let holder = value & ~waiters
        if holder == me || (holder != 0 && isAncestor(holder)) {
            fail(word, "Trying to recursively lock an os_unfair_lock", "os_unfair_lock_lock")
        }
        LockOrder.waiting(word, .mutex)
        // Spin while nobody sleeps (the mutex's spinning phase: a free word here is 0).
        if MutexWord.spinToTake(word, &value, holders: ~waiters, mine: me) { return taken(word) }
        // Sleep until the word is free, announcing the sleep with WAITERS.
        while true {
            value = word.pointee.load(ordering: .relaxed)
            if value == 0 {
                if word.pointee.compareExchange(expected: 0, desired: me | waiters, ordering: .acquiring).exchanged {
                    return taken(word)
                }
                continue
            }
            if isCorrupt(value) { fail(word, "os_unfair_lock is corrupt", "os_unfair_lock_lock") }
            if value & waiters == 0
                && !word.pointee.compareExchange(expected: value, desired: value | waiters, ordering: .relaxed).exchanged {
                continue
            }
            _ = Futex.wait(UnsafeMutableRawPointer(word), expected: value | waiters, shared: false)
        }
    }

    static func taken(_ word: Word) { LockOrder.acquired(word, .mutex) }

    @usableFromInline @inline(never)
    static func tryLockSlow(_ word: Word, _ cached: UInt32) -> Bool {
        let me = cached != 0 ? cached : threadID()
        guard word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged else { return false }
        LockOrder.acquired(word, .mutex, tried: true)
        return true
    }

    /// Unlock while lock-order checking is on: the hook off the fast path, then the unlock.
    @usableFromInline @inline(never)
    static func unlockHooked(_ word: Word) {
        LockOrder.releasing(word, .mutex)
        let me = threadID()
        if !word.pointee.compareExchange(expected: me, desired: 0, ordering: .releasing).exchanged { unlockSlow(word, me) }
    }

    @usableFromInline @inline(never)
    static func unlockSlow(_ word: Word, _ cached: UInt32) {
        let me = cached != 0 ? cached : threadID()
        let value = word.pointee.load(ordering: .relaxed)
        if isCorrupt(value) { fail(word, "os_unfair_lock is corrupt", "os_unfair_lock_unlock") }
        let holder = value & ~waiters
        guard holder != 0 && (holder == me || isAncestor(holder)) else {
            fail(word, "Unlock of an os_unfair_lock not owned by current thread", "os_unfair_lock_unlock")
        }
        // Only the holder changes the holder; waiters only add WAITERS.
        if word.pointee.exchange(0, ordering: .releasing) & waiters != 0 {
            Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: false)
        }
    }
}

// MARK: Apple's os_unfair_lock (os/lock.h), for Swift code written against `import os`

/// Apple's `os_unfair_lock`: 4 bytes, `os_unfair_lock()` (all zero) when free. Give it a stable
/// address (a global, a heap allocation, or `OSAllocatedUnfairLock`): a Swift `var` passed
/// with `&` may be moved, as Apple warns.
@frozen public struct os_unfair_lock: Sendable {
    public var _os_unfair_lock_opaque: UInt32
    @inlinable public init() { _os_unfair_lock_opaque = 0 }
    @inlinable public init(_os_unfair_lock_opaque: UInt32) { self._os_unfair_lock_opaque = _os_unfair_lock_opaque }
}
public typealias os_unfair_lock_s = os_unfair_lock
public typealias os_unfair_lock_t = UnsafeMutablePointer<os_unfair_lock>

/// Apple's `os_unfair_lock_flags_t` (macOS 15): hints for `os_unfair_lock_lock_with_flags`.
@frozen public struct os_unfair_lock_flags_t: OptionSet, Sendable {
    public var rawValue: UInt32
    @inlinable public init(rawValue: UInt32) { self.rawValue = rawValue }
}
public let OS_UNFAIR_LOCK_FLAG_NONE = os_unfair_lock_flags_t(rawValue: 0)
public let OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN = os_unfair_lock_flags_t(rawValue: UnfairLockWord.adaptiveSpin)

@inlinable @inline(__always)
func unfairWord(_ lock: UnsafePointer<os_unfair_lock>) -> UnfairLockWord.Word {
    UnsafeMutableRawPointer(mutating: lock).assumingMemoryBound(to: Atomic<UInt32>.self)
}

/// Takes the lock, waiting as long as it takes. Fatal if the caller already holds it.
@inlinable public func os_unfair_lock_lock(_ lock: os_unfair_lock_t) {
    UnfairLockWord.lock(unfairWord(lock))
}
/// `os_unfair_lock_lock` with Apple's flags (validated: unknown bits are fatal).
@inlinable public func os_unfair_lock_lock_with_flags(_ lock: os_unfair_lock_t, _ flags: os_unfair_lock_flags_t) {
    UnfairLockWord.lock(unfairWord(lock), options: flags.rawValue)
}
/// Takes the lock if it is free; returns whether it did (false if anyone holds it, the caller too).
@inlinable public func os_unfair_lock_trylock(_ lock: os_unfair_lock_t) -> Bool {
    UnfairLockWord.tryLock(unfairWord(lock))
}
/// Releases the lock. Fatal if the caller does not hold it.
@inlinable public func os_unfair_lock_unlock(_ lock: os_unfair_lock_t) {
    UnfairLockWord.unlock(unfairWord(lock))
}
/// Returns if the calling thread holds the lock; else stops the program with a message.
@inlinable public func os_unfair_lock_assert_owner(_ lock: UnsafePointer<os_unfair_lock>) {
    UnfairLockWord.assertOwner(unfairWord(lock))
}
/// Returns if the calling thread does not hold the lock; else stops the program with a message.
@inlinable public func os_unfair_lock_assert_not_owner(_ lock: UnsafePointer<os_unfair_lock>) {
    UnfairLockWord.assertNotOwner(unfairWord(lock))
}
