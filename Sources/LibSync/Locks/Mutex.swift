import CSyncShim
import Glibc
import Synchronization

/// The errors of the lock family, each the Swift face of the errno code the C API returns.
public enum LockError: Error, Equatable, Sendable {
    /// EDEADLK: the caller already holds the lock; waiting would never end.
    case wouldDeadlock
    /// EPERM: the caller does not hold the lock (or the side of it) it tried to release.
    case notOwner
    /// EAGAIN: a count would overflow (recursion depth, readers).
    case overflow
    /// EINTR: a signal interrupted an interruptible wait.
    case interrupted
    /// Any other code.
    case other(Int32)

    @usableFromInline package init(code: Int32) {
        switch code {
        case EDEADLK: self = .wouldDeadlock
        case EPERM: self = .notOwner
        case EAGAIN: self = .overflow
        case EINTR: self = .interrupted
        default: self = .other(code)
        }
    }
}

/// Throws the code as a LockError unless it is 0 (or ETIMEDOUT/EBUSY, which the caller maps to
/// `false`); returns whether the lock was taken.
@inlinable @inline(__always)
func taken(_ code: Int32) throws(LockError) -> Bool {
    if code == 0 { return true }
    if code == ETIMEDOUT || code == EBUSY { return false }
    throw LockError(code: code)
}

/// A monotonic deadline `timeout` seconds from now (saturating; negative timeouts are now).
@inlinable
func deadline(after timeout: Duration) -> Int64 {
    let (seconds, attoseconds) = timeout.components
    if seconds < 0 { return monotonicNow() }
    let ns = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    if ns.overflow { return Int64.max }
    let total = ns.partialValue.addingReportingOverflow(attoseconds / 1_000_000_000 + monotonicNow())
    return total.overflow ? Int64.max : total.partialValue
}

/// The mutex: one 32-bit word of caller memory.
///
///     bits 0-28  holder: 0 free, else the holder's kernel thread id (ids fit: pid_max <= 2^22),
///                or `anonymous` in unowned mode
///     bit 29     UNOWNED mode: any thread may unlock (Python's threading.Lock semantics)
///     bit 30     SHARED mode: the futex uses the shared namespace (memory mapped by processes)
///     bit 31     WAITERS: some thread may sleep on the word; unlock must wake one
///
/// A default mutex is 0, so the fast paths are one CAS each: 0 -> tid to lock, tid -> 0 to
/// unlock. Any other value (held, waiters, a mode bit) takes the slow path, where the owner
/// checks (EDEADLK, EPERM) cost nothing on the fast path. Contended, a locker spins a little
/// (the holder usually leaves within a couple of hundred ns), then sleeps on the futex. Unlock does
/// not hand the lock to the woken thread: a running thread may take it first (barging), which
/// keeps the lock busy instead of idle while the woken thread is scheduled.
@usableFromInline package enum MutexWord {
    @usableFromInline static let holderMask: UInt32 = 0x1FFF_FFFF
    @usableFromInline static let unowned: UInt32 = 1 << 29
    @usableFromInline static let shared: UInt32 = 1 << 30
    @usableFromInline static let waiters: UInt32 = 1 << 31
    @usableFromInline static let modes: UInt32 = unowned | shared
    /// The holder recorded by an unowned-mode lock (never a kernel thread id).
    @usableFromInline static let anonymous: UInt32 = holderMask
    @usableFromInline static let spinLimit = 3
    /// A read of the word slower than this (cycles, ~150 ns at this EPYC's 2.6 GHz counter; ns
    /// where there is no cycle counter) found the line at a far core; longer ones count as the
    /// limit (~400 ns), so that a read a preemption stretched cannot make spinners wait long.
    static let farRead: UInt64 = 400
    static let farReadLimit: UInt64 = 1024

    @usableFromInline package typealias Word = UnsafeMutablePointer<Atomic<UInt32>>

    /// The initial word of a mutex in the given modes.
    package static func initial(shared isShared: Bool, unowned isUnowned: Bool) -> UInt32 {
        (isShared ? shared : 0) | (isUnowned ? unowned : 0)
    }

    /// 0, or EBUSY if held (also by the caller).
    @inlinable @inline(__always)
    package static func tryLock(_ word: Word) -> Int32 {
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged { return 0 }
        return tryLockSlow(word, me)
    }

    /// 0; ETIMEDOUT once `deadline` (monotonic ns, < 0: none) passes; EDEADLK if the caller
    /// holds it (owned mode); EINTR if `interruptible` and a signal interrupts the sleep.
    @inlinable @inline(__always)
    package static func lock(_ word: Word, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged { return 0 }
        return lockSlow(word, me, deadline: deadline, interruptible: interruptible)
    }

    /// 0, or EPERM if the caller does not hold it (unowned mode: if it is not held).
    @inlinable @inline(__always)
    package static func unlock(_ word: Word) -> Int32 {
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: me, desired: 0, ordering: .releasing).exchanged { return 0 }
        return unlockSlow(word, me)
    }

    /// Whether the lock is held (by anyone): a snapshot.
    @inlinable
    package static func isLocked(_ word: Word) -> Bool {
        word.pointee.load(ordering: .relaxed) & holderMask != 0
    }

    /// Whether the calling thread holds it (owned mode).
    @inlinable @inline(__always)
    package static func isOwnedByCaller(_ word: Word) -> Bool {
        let value = word.pointee.load(ordering: .relaxed)
        let held = value & holderMask
        return held == threadID() || (held != 0 && heldByAncestor(value))
    }

    /// Whether the holder of a process-private word is the calling thread under an id it had
    /// before fork() made it a child's thread (it still holds what it held). Never for a
    /// process-shared word: there the parent's thread still holds it.
    @usableFromInline @inline(never)
    static func heldByAncestor(_ value: UInt32) -> Bool {
        value & (shared | unowned) == 0 && value & holderMask != 0 && sync_thread_is_ancestor(value & holderMask) != 0
    }

    @usableFromInline @inline(__always)
    static func holder(for value: UInt32, me: UInt32) -> UInt32 {
        value & unowned != 0 ? anonymous : me
    }

    @usableFromInline @inline(never)
    static func tryLockSlow(_ word: Word, _ cached: UInt32) -> Int32 {
        let me = cached != 0 ? cached : threadID()
        var value = word.pointee.load(ordering: .relaxed)
        while value & holderMask == 0 {
            let (exchanged, now) = word.pointee.compareExchange(
                expected: value, desired: value | holder(for: value, me: me), ordering: .acquiring)
            if exchanged { return 0 }
            value = now
        }
        return EBUSY
    }

    @usableFromInline @inline(never)
    static func lockSlow(_ word: Word, _ cached: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        let me = cached != 0 ? cached : threadID()
        var value = word.pointee.load(ordering: .relaxed)
        if value & unowned == 0 && (value & holderMask == me || heldByAncestor(value)) { return EDEADLK }
        let mine = holder(for: value, me: me)
        let isShared = value & shared != 0
        // Spin while the holder is running and nobody sleeps: read before writing, and back off
        // (1, 2, 4 PAUSEs between reads, ~200 ns in all), so that a spinner seldom pulls the
        // line from the holder. Where the line lives at a far core (~450 ns round trips when
        // this VM's vCPUs sit on different CCDs, as across sockets), every read costs the
        // holder as much again: there, once a read finds the lock held, wait blind for 16 such
        // reads (at most ~6 us), look once more, and sleep if it is still held, so that the
        // holder runs whole bursts with its line at hand. How far is measured by timing the
        // reads of one contended lock in 8 (timing every read cost the near case ~10%). A timed
        // lock does not wait blind: its deadline may be near.
        let measuring = sync_thread_spin_estimate.countdown == 0
        if !measuring { sync_thread_spin_estimate.countdown -= 1 }
        var spins = 0
        while true {
            if value & holderMask == 0 {
                let (exchanged, now) = word.pointee.compareExchange(
                    expected: value, desired: value | mine, ordering: .acquiring)
                if exchanged { return 0 }
                value = now
                continue
            }
            if spins >= spinLimit || value & waiters != 0 { break }
            for _ in 0..<(1 << spins) { sync_cpu_relax() }
            spins += 1
            let far: UInt64
            if measuring {
                let start = sync_cpu_ticks()
                value = word.pointee.load(ordering: .relaxed)
                let took = sync_cpu_ticks_after_loads() &- start
                far = took > farRead ? min(took, farReadLimit) : 0
                sync_thread_spin_estimate.far_read = UInt32(far)
                if far != 0 || spins == spinLimit { sync_thread_spin_estimate.countdown = 8 }
            } else {
                value = word.pointee.load(ordering: .relaxed)
                far = UInt64(sync_thread_spin_estimate.far_read)
            }
            if far != 0 && value & holderMask != 0 && value & waiters == 0 && deadline < 0 {
                let now = sync_cpu_ticks(), until = now &+ far &* 16
                while case let ticks = sync_cpu_ticks(), ticks < until && ticks >= now { sync_cpu_relax() }
                value = word.pointee.load(ordering: .relaxed)
                spins = spinLimit
            }
        }
        // Sleep. A thread that has slept takes the lock with WAITERS set: others may still
        // sleep, and one spurious wake costs less than a lost one.
        while true {
            value = word.pointee.load(ordering: .relaxed)
            if value & holderMask == 0 {
                if word.pointee.compareExchange(expected: value, desired: value | waiters | mine,
                                                ordering: .acquiring).exchanged { return 0 }
                continue
            }
            if value & waiters == 0 {
                if !word.pointee.compareExchange(expected: value, desired: value | waiters,
                                                 ordering: .relaxed).exchanged { continue }
            }
            let result = Futex.wait(UnsafeMutableRawPointer(word), expected: value | waiters,
                                    deadline: deadline, shared: isShared)
            if result == ETIMEDOUT || (result == EINTR && interruptible) {
                return tryLockSlow(word, me) == 0 ? 0 : result
            }
        }
    }

    @usableFromInline @inline(never)
    static func unlockSlow(_ word: Word, _ cached: UInt32) -> Int32 {
        let me = cached != 0 ? cached : threadID()
        var value = word.pointee.load(ordering: .relaxed)
        while true {
            let held = value & holderMask
            if held == 0 || (value & unowned == 0 && held != me && !heldByAncestor(value)) { return EPERM }
            let (exchanged, now) = word.pointee.compareExchange(
                expected: value, desired: value & modes, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        if value & waiters != 0 {
            Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: value & shared != 0)
        }
        return 0
    }
}

/// The recursive lock: a mutex word and the owner's depth (8 bytes). Only the owner touches the
/// depth, so it needs no atomicity beyond the word's acquire/release.
@usableFromInline package enum RecursiveWord {
    @usableFromInline package typealias Memory = UnsafeMutableRawPointer

    @inlinable @inline(__always)
    static func word(_ memory: Memory) -> MutexWord.Word { atomic(memory, as: UInt32.self) }
    @inlinable @inline(__always)
    static func depth(_ memory: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(memory + 4, as: UInt32.self) }

    /// 0, ETIMEDOUT, EINTR (interruptible), or EAGAIN if the depth would overflow.
    @inlinable
    package static func lock(_ memory: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        if MutexWord.isOwnedByCaller(word(memory)) { return deepen(memory) }
        let result = MutexWord.lock(word(memory), deadline: deadline, interruptible: interruptible)
        if result == 0 { depth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    /// 0, EBUSY (held by another thread), or EAGAIN.
    @inlinable
    package static func tryLock(_ memory: Memory) -> Int32 {
        if MutexWord.isOwnedByCaller(word(memory)) { return deepen(memory) }
        let result = MutexWord.tryLock(word(memory))
        if result == 0 { depth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    /// 0, or EPERM if the caller does not hold it.
    @inlinable
    package static func unlock(_ memory: Memory) -> Int32 {
        guard MutexWord.isOwnedByCaller(word(memory)) else { return EPERM }
        let level = depth(memory).pointee.load(ordering: .relaxed)
        if level > 1 {
            depth(memory).pointee.store(level - 1, ordering: .relaxed)
            return 0
        }
        depth(memory).pointee.store(0, ordering: .relaxed)
        return MutexWord.unlock(word(memory))
    }

    /// How many times the caller holds it (0 if it does not).
    @inlinable
    package static func depthHeldByCaller(_ memory: Memory) -> UInt32 {
        MutexWord.isOwnedByCaller(word(memory)) ? depth(memory).pointee.load(ordering: .relaxed) : 0
    }

    @usableFromInline
    static func deepen(_ memory: Memory) -> Int32 {
        let level = depth(memory).pointee.load(ordering: .relaxed)
        if level == UInt32.max { return EAGAIN }
        depth(memory).pointee.store(level + 1, ordering: .relaxed)
        return 0
    }
}

// MARK: Swift types

/// Memory for a lock, with a stable address, zeroed or set to an initial word; freed on deinit.
@usableFromInline final class LockMemory: @unchecked Sendable {
    @usableFromInline let raw: UnsafeMutableRawPointer
    let size: Int
    init(size: Int, first: UInt32 = 0) {
        self.size = size
        raw = .allocate(byteCount: size, alignment: 64)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        raw.storeBytes(of: first, as: UInt32.self)
    }
    deinit { raw.deallocate() }
}

/// A mutual-exclusion lock that knows its owner: locking it again from the owning thread throws
/// `LockError.wouldDeadlock` instead of hanging, unlocking it from another thread throws
/// `LockError.notOwner`. Four bytes of state; uncontended lock/unlock is one CAS each.
///
///     let mutex = SyncMutex()
///     let value = mutex.withLock { counter += 1; return counter }
public final class SyncMutex: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 4)
    @usableFromInline var word: MutexWord.Word { atomic(memory.raw, as: UInt32.self) }

    public init() {}

    /// Takes the lock, waiting as long as it takes.
    @inlinable public func lock() throws(LockError) {
        _ = try taken(MutexWord.lock(word))
    }
    /// Takes the lock if it is free; returns whether it did.
    @inlinable public func tryLock() -> Bool { MutexWord.tryLock(word) == 0 }
    /// Takes the lock unless `timeout` passes first (monotonic clock); returns whether it did.
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(MutexWord.lock(word, deadline: deadline(after: timeout)))
    }
    /// Takes the lock unless the monotonic clock reaches `deadline` (ns) first.
    @inlinable public func lock(deadlineNanoseconds: Int64) throws(LockError) -> Bool {
        try taken(MutexWord.lock(word, deadline: deadlineNanoseconds))
    }
    /// Releases the lock; throws `.notOwner` if the caller does not hold it.
    @inlinable public func unlock() throws(LockError) {
        _ = try taken(MutexWord.unlock(word))
    }
    /// Whether the calling thread holds the lock.
    @inlinable public var isHeldByCurrentThread: Bool { MutexWord.isOwnedByCaller(word) }

    /// Runs `body` holding the lock and returns its value; releases the lock even if it throws.
    /// Calling it again from inside `body` would deadlock: that traps with a message instead.
    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = MutexWord.lock(word)
        precondition(result == 0, "SyncMutex.withLock: the calling thread already holds this mutex")
        defer { _ = MutexWord.unlock(word) }
        return try body()
    }
}

/// A lock its owner may take again; each lock balanced by an unlock, others wait until the
/// count returns to zero (`NSRecursiveLock`).
public final class SyncRecursiveLock: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 8)

    public init() {}

    @inlinable public func lock() throws(LockError) { _ = try taken(RecursiveWord.lock(memory.raw)) }
    @inlinable public func tryLock() -> Bool { RecursiveWord.tryLock(memory.raw) == 0 }
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RecursiveWord.lock(memory.raw, deadline: deadline(after: timeout)))
    }
    @inlinable public func unlock() throws(LockError) { _ = try taken(RecursiveWord.unlock(memory.raw)) }
    /// How many times the calling thread holds the lock (0: not at all).
    @inlinable public var depth: Int { Int(RecursiveWord.depthHeldByCaller(memory.raw)) }

    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RecursiveWord.lock(memory.raw)
        precondition(result == 0, "SyncRecursiveLock.withLock: recursion depth overflow")
        defer { _ = RecursiveWord.unlock(memory.raw) }
        return try body()
    }
}
