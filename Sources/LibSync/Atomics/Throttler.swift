import Glibc
import Synchronization

// The throttler: at most `limit` holders at once; `tryEnter` fails fast and never blocks;
// `enter` may wait for a slot until a deadline. Admission is a compare-and-swap that only
// succeeds below the limit (never an increment undone after the fact), so `holders` never
// exceeds the limit even transiently, and `exit` refuses to go below zero: the counter cannot
// drift.
//
// A full throttler's fail-fast path only reads (like sem_trywait): one load of `holders`, then
// one increment of the calling thread's own rejection count (ThreadRecord, in TLS), summed on
// read, so refusals on several cores never contend. Counters are keyed by the throttler's
// address and a generation given at initialisation (memory reused by a new throttler starts
// from zero).
//
// Layout of C's sync_throttler_t (caller memory, 8-byte aligned):
//   Int32 holders | Int32 waiters | Int32 limit | Int32 generation | Int64 rejections (timed-out
//   waits, and refusals by threads whose 8 per-thread counters are taken)
// A word the library never writes (limit < 1, holders outside 0...limit) gets EINVAL from every
// operation that reads it, and is never changed.

@usableFromInline package enum ThrottlerWord {
    package static let size = 24

    @inlinable @inline(__always)
    static func holders(_ t: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int32>> { atomic(t, as: Int32.self) }
    @inlinable @inline(__always)
    static func waiters(_ t: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int32>> { atomic(t + 4, as: Int32.self) }
    @inlinable @inline(__always)
    package static func limit(_ t: UnsafeMutableRawPointer) -> Int32 { t.load(fromByteOffset: 8, as: Int32.self) }
    @inlinable @inline(__always)
    static func rejections(_ t: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int64>> { atomic(t + 16, as: Int64.self) }

    @inlinable @inline(__always)
    static func generation(_ t: UnsafeMutableRawPointer) -> Int32 { t.load(fromByteOffset: 12, as: Int32.self) }

    /// Generations of initialised throttlers (0: SYNC_THROTTLER_INIT's static ones).
    static let generations = Atomic<Int32>(0)

    /// Zeroes the throttler and sets its limit; EINVAL if `limit` < 1.
    package static func initialize(_ t: UnsafeMutableRawPointer, limit: Int32) -> Int32 {
        guard limit >= 1 else { return EINVAL }
        t.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        t.storeBytes(of: limit, toByteOffset: 8, as: Int32.self)
        var generation: Int32 = 0
        while generation == 0 { generation = generations.wrappingAdd(1, ordering: .relaxed).newValue }
        t.storeBytes(of: generation, toByteOffset: 12, as: Int32.self)
        return 0
    }

    /// Takes a slot if fewer than `limit` hold one: 0, EBUSY (counted as a rejection), or
    /// EINVAL (the limit is not >= 1, or the holders are not within 0...limit).
    ///
    /// A full throttler's refusal runs straight through, without a taken branch (admission pays
    /// one jump beside its compare-and-swap): the refusal is the path that must stay cheap
    /// under overload.
    @inlinable @inline(__always)
    package static func tryEnter(_ t: UnsafeMutableRawPointer) -> Int32 {
        let tag = t.load(fromByteOffset: 8, as: UInt64.self)  // limit | generation << 32: one load
        let limit = Int32(truncatingIfNeeded: tag), seen = holders(t).pointee.load(ordering: .relaxed)
        if _slowPath(seen != limit) {
            guard seen >= 0 && seen < limit else { return EINVAL }
            if holders(t).pointee.compareExchange(expected: seen, desired: seen + 1, ordering: .acquiring).exchanged { return 0 }
            return admitOrRefuse(t)
        }
        return refuse(t, tag: tag)
    }

    /// tryEnter after a lost race for a slot: takes one if still free, or refuses.
    @usableFromInline @inline(never)
    static func admitOrRefuse(_ t: UnsafeMutableRawPointer) -> Int32 {
        if admit(t) { return 0 }
        if !isValid(t) { return EINVAL }
        return refuse(t, tag: t.load(fromByteOffset: 8, as: UInt64.self))
    }

    /// Whether the limit and the holders are a state the library writes.
    static func isValid(_ t: UnsafeMutableRawPointer) -> Bool {
        let limit = limit(t), seen = holders(t).pointee.load(ordering: .relaxed)
        return limit >= 1 && seen >= 0 && seen <= limit
    }

    /// Counts a refusal in the calling thread's own entry (no contended write): EBUSY. A hit also
    /// vouches for the limit, checked when the entry was filled.
    @inlinable @inline(__always)
    static func refuse(_ t: UnsafeMutableRawPointer, tag: UInt64) -> Int32 {
        if ThreadRecord.countCached(t, tag: tag) { return EBUSY }
        return refuseUncached(t)
    }

    /// A refusal that missed the thread's entry: EINVAL for a bad limit; else counts it in the
    /// thread's counter for this throttler (or, if its 8 are taken, in the throttler's shared one)
    /// and returns EBUSY. Out of line (a tail call), so that the common path calls nothing and
    /// keeps no stack frame.
    @usableFromInline @inline(never)
    static func refuseUncached(_ t: UnsafeMutableRawPointer) -> Int32 {
        guard limit(t) >= 1 else { return EINVAL }
        if !ThreadRecord.count(t, generation(t), tag: t.load(fromByteOffset: 8, as: UInt64.self)) {
            rejections(t).pointee.wrappingAdd(1, ordering: .relaxed)
        }
        return EBUSY
    }

    /// Takes a slot while fewer than `limit` hold one, starting from `seen` holders (none if
    /// the holders are negative: an impossible word).
    @inlinable @inline(__always)
    static func admit(_ t: UnsafeMutableRawPointer, limit: Int32, seen: Int32) -> Bool {
        let word = holders(t)
        var current = seen
        while current < limit && current >= 0 {
            let (taken, now) = word.pointee.compareExchange(expected: current, desired: current + 1, ordering: .acquiring)
            if taken { return true }
            current = now
        }
        return false
    }

    @inlinable @inline(__always)
    static func admit(_ t: UnsafeMutableRawPointer) -> Bool { admit(t, limit: limit(t), seen: holders(t).pointee.load(ordering: .relaxed)) }

    /// Takes a slot, waiting until one frees or `deadline` (a `Deadline`) passes: 0, ETIMEDOUT
    /// (counted as a rejection), EINTR (`interruptible` and a signal handler ran: not counted,
    /// the caller may retry), or EINVAL (an impossible word).
    package static func enter(_ t: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        let result = wait(t, deadline: deadline, interruptible: interruptible)
        return result == ETIMEDOUT ? timedOut(t) : result
    }

    /// `enter` without counting a timeout: ETIMEDOUT is left to the caller, which counts it with
    /// `timedOut` once its own deadline (not a slice of it) has passed.
    package static func wait(_ t: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        if admit(t) { return 0 }
        if !isValid(t) { return EINVAL }
        let word = holders(t)
        waiters(t).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { waiters(t).pointee.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        while true {
            let seen = word.pointee.load(ordering: .sequentiallyConsistent)
            if seen < limit(t) {
                if admit(t) { return 0 }
                if !isValid(t) { return EINVAL }
                continue
            }
            if seen > limit(t) { return EINVAL }
            let result = Futex.wait(UnsafeMutableRawPointer(word), expected: UInt32(bitPattern: seen), deadline: deadline, shared: true)
            if result == EINTR && interruptible { return admit(t) ? 0 : EINTR }
            if result == ETIMEDOUT || Deadline.hasPassed(deadline) { return admit(t) ? 0 : ETIMEDOUT }
        }
    }

    /// Counts a wait that timed out as a rejection: ETIMEDOUT.
    package static func timedOut(_ t: UnsafeMutableRawPointer) -> Int32 {
        rejections(t).pointee.wrappingAdd(1, ordering: .relaxed)
        return ETIMEDOUT
    }

    /// Gives a slot back: 0, EPERM if nobody holds one (the counter never goes negative), or
    /// EINVAL (an impossible word: unchanged).
    @inlinable
    package static func exit(_ t: UnsafeMutableRawPointer) -> Int32 {
        let word = holders(t), limit = limit(t)
        var current = word.pointee.load(ordering: .relaxed)
        while true {
            guard current > 0 && current <= limit else { return current == 0 && limit >= 1 ? EPERM : EINVAL }
            let (released, now) = word.pointee.compareExchange(expected: current, desired: current - 1, ordering: .sequentiallyConsistent)
            if released { break }
            current = now
        }
        // Seen after our decrement (both sequentially consistent): a waiter that registered
        // before it is woken, one that registers after it sees the freed slot.
        if waiters(t).pointee.load(ordering: .sequentiallyConsistent) > 0 {
            Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: true)
        }
        return 0
    }

    @inlinable package static func holdersCount(_ t: UnsafeMutableRawPointer) -> Int32 { holders(t).pointee.load(ordering: .relaxed) }
    /// Timed-out waits and this process's refusals (per-thread counters are per process).
    package static func rejectionCount(_ t: UnsafeMutableRawPointer) -> Int64 {
        rejections(t).pointee.load(ordering: .relaxed) &+ ThreadRecord.sumCounters(t, generation(t), tag: t.load(fromByteOffset: 8, as: UInt64.self))
    }
}

// MARK: Swift front

/// Errors of the deprecated `SyncThrottler.enter(timeout:)` (`tryEnter(timeout:)` returns false).
public enum ThrottlerError: Error, Equatable {
    /// No slot freed before the timeout.
    case timedOut
}

/// At most `limit` concurrent holders. `throttledExec` fails fast:
/// it returns false at once when the throttler is full, never blocking.
public final class SyncThrottler: @unchecked Sendable {
    @usableFromInline let storage: UnsafeMutableRawPointer

    /// `limit` must be >= 1 (a precondition).
    public init(limit: Int) {
        require(limit >= 1 && limit <= Int(Int32.max), "SyncThrottler: the limit must be between 1 and \(Int32.max), not \(limit)")
        storage = .allocate(byteCount: ThrottlerWord.size, alignment: 8)
        _ = ThrottlerWord.initialize(storage, limit: Int32(limit))
    }
    deinit { storage.deallocate() }

    public var limit: Int { Int(ThrottlerWord.limit(storage)) }
    /// Current holders.
    public var holders: Int { Int(ThrottlerWord.holdersCount(storage)) }
    /// Attempts turned away (fail-fast refusals and timed-out waits).
    public var rejections: Int { Int(ThrottlerWord.rejectionCount(storage)) }

    /// Takes a slot if one is free; never blocks.
    @inlinable public func tryEnter() -> Bool { ThrottlerWord.tryEnter(storage) == 0 }

    /// Takes a slot, waiting as long as it takes.
    public func enter() {
        let code = ThrottlerWord.enter(storage, deadline: Deadline.none, interruptible: false)
        require(code == 0, "SyncThrottler.enter: error \(code) without a deadline")
    }

    /// Takes a slot, waiting up to `timeout`: false once it has passed (no slot taken), as every
    /// timed wait of the library reports a timeout.
    public func tryEnter(timeout: Duration) -> Bool {
        ThrottlerWord.enter(storage, deadline: Deadline.after(timeout), interruptible: false) == 0
    }

    @available(*, deprecated, message: "use enter(), or tryEnter(timeout:), which returns false on timeout")
    public func enter(timeout: Duration?) throws {
        let deadline = timeout.map { Deadline.after($0) } ?? Deadline.none
        if ThrottlerWord.enter(storage, deadline: deadline, interruptible: false) != 0 { throw ThrottlerError.timedOut }
    }

    /// Gives the slot back. Calling it without holding a slot is a precondition failure.
    public func exit() {
        require(ThrottlerWord.exit(storage) == 0, "SyncThrottler.exit: no slot is held")
    }

    /// Runs `body` if a slot is free and returns true; returns false at once otherwise.
    @discardableResult
    public func throttledExec(_ body: () throws -> Void) rethrows -> Bool {
        guard tryEnter() else { return false }
        defer { exit() }
        try body()
        return true
    }

    /// `body`'s result if a slot was free, nil at once otherwise.
    public func withSlot<R>(_ body: () throws -> R) rethrows -> R? {
        guard tryEnter() else { return nil }
        defer { exit() }
        return try body()
    }
}

/// The former name of `SyncThrottler`.
@available(*, deprecated, renamed: "SyncThrottler")
public typealias Throttler = SyncThrottler
