import Glibc

// The Swift faces of the condition family: each owns its C-layout state in LockMemory (stable
// address) and calls the same core functions as the C ABI. Timeouts are `Duration`s on the
// monotonic clock; `deadlineNanoseconds` forms take CLOCK_MONOTONIC ns (see `monotonicNow`).

/// A barrier wait that did not complete.
public enum BarrierError: Error, Equatable, Sendable {
    /// The barrier was broken (aborted, reset, timed out elsewhere, or its action failed).
    case broken
    /// This wait timed out; the barrier is now broken for everyone.
    case timedOut
}

/// A semaphore signal that would exceed the bound (or 2^32 - 1): nothing was added.
public struct SemaphoreOverflow: Error, Equatable, Sendable {}

/// A condition variable used with a `SyncMutex`, POSIX style. A wait returns only when a signal
/// took it (or its timeout passed): there are no spurious wakeups, `signal` wakes the oldest
/// waiter, and a thread that starts waiting after a signal is not woken by it. Still wait in a
/// loop on your predicate (or use `wait(on:until:)`, which does): another thread may take the
/// mutex first and change the state between the signal and the waiter's return.
///
///     mutex.lock(); while !ready { try cond.wait(on: mutex) }; ...; mutex.unlock()
public final class SyncConditionVariable: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 8)

    public init() {}

    /// Releases `mutex` (held by the caller), waits for a signal, takes `mutex` again.
    /// Throws `.notOwner` without waiting if the caller does not hold it; a robust mutex may
    /// also throw `.ownerDied` (taken again from a dead holder) or `.notRecoverable` (not held).
    public func wait(on mutex: SyncMutex) throws(LockError) {
        _ = try waited(ConditionWord.wait(memory.raw, mutex: mutex.word, deadline: -1, interruptible: false))
    }

    /// As `wait(on:)` for at most `timeout`; returns false if it timed out.
    public func wait(on mutex: SyncMutex, timeout: Duration) throws(LockError) -> Bool {
        try wait(on: mutex, deadlineNanoseconds: Deadline.after(timeout))
    }

    /// As `wait(on:)` until the monotonic clock reaches `deadlineNanoseconds`; false on timeout.
    public func wait(on mutex: SyncMutex, deadlineNanoseconds: Int64) throws(LockError) -> Bool {
        try waited(ConditionWord.wait(memory.raw, mutex: mutex.word, deadline: deadlineNanoseconds, interruptible: false))
    }

    /// Waits until `predicate` (checked with `mutex` held) is true.
    public func wait(on mutex: SyncMutex, until predicate: () throws -> Bool) throws {
        while try !predicate() { try wait(on: mutex) }
    }

    /// Waits until `predicate` is true or `timeout` passes; returns the predicate's last value.
    public func wait(on mutex: SyncMutex, timeout: Duration, until predicate: () throws -> Bool) throws -> Bool {
        let end = Deadline.after(timeout)
        while try !predicate() {
            if try !wait(on: mutex, deadlineNanoseconds: end) { return try predicate() }
        }
        return true
    }

    /// Wakes the oldest waiter, if any (a no-op costing one load when none waits).
    public func signal() { ConditionWord.signal(memory.raw) }
    /// Wakes up to `count` waiters, oldest first: exactly min(count, waiting).
    public func signal(count: Int) { ConditionWord.wake(memory.raw, count: UInt32(clamping: count)) }
    /// Wakes every waiter.
    public func broadcast() { ConditionWord.broadcast(memory.raw) }
}

/// 0 -> true, ETIMEDOUT -> false, other codes thrown.
@usableFromInline func waited(_ code: Int32) throws(LockError) -> Bool {
    if code == 0 { return true }
    if code == ETIMEDOUT { return false }
    throw LockError(code: code)
}

/// A mutex and a condition variable in one object (Foundation's `NSCondition`): lock it like a
/// mutex, wait on it like a condition. Listing 4-3:
///
///     try condition.lock(); while timeToDoWork <= 0 { try condition.wait() }; ...; try condition.unlock()
public final class SyncCondition: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 12)
    @usableFromInline var mutex: MutexWord.Word { atomic(memory.raw, as: UInt32.self) }
    @usableFromInline var condition: UnsafeMutableRawPointer { memory.raw + 4 }

    public init() {}

    public func lock() throws(LockError) { _ = try taken(MutexWord.lock(mutex)) }
    public func tryLock() -> Bool { MutexWord.tryLock(mutex) == 0 }
    public func unlock() throws(LockError) { _ = try taken(MutexWord.unlock(mutex)) }
    /// Waits for a signal (the caller holds the lock). Returns only when signalled: no spurious
    /// wakeups (see `SyncConditionVariable`).
    public func wait() throws(LockError) {
        _ = try waited(ConditionWord.wait(condition, mutex: mutex, deadline: -1, interruptible: false))
    }
    /// Waits at most `timeout`; returns whether it was woken (false: timed out).
    public func wait(timeout: Duration) throws(LockError) -> Bool {
        try wait(deadlineNanoseconds: Deadline.after(timeout))
    }
    /// Waits until the monotonic deadline (`NSCondition.wait(until:)`); false if it passed.
    public func wait(deadlineNanoseconds: Int64) throws(LockError) -> Bool {
        try waited(ConditionWord.wait(condition, mutex: mutex, deadline: deadlineNanoseconds, interruptible: false))
    }
    /// Wakes the oldest waiter, if any.
    public func signal() { ConditionWord.signal(condition) }
    /// Wakes every waiter.
    public func broadcast() { ConditionWord.broadcast(condition) }

    /// Runs `body` holding the lock; releases it even if `body` throws.
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        require(MutexWord.lock(mutex) == 0, "SyncCondition.withLock: the calling thread already holds this condition")
        defer { _ = MutexWord.unlock(mutex) }
        return try body()
    }
}

/// A lock carrying an integer condition (Foundation's `NSConditionLock`). A consumer:
///
///     try lock.lock(whenCondition: HAS_DATA); ...; try lock.unlock(withCondition: empty ? NO_DATA : HAS_DATA)
public final class SyncConditionLock: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 24)

    public init(condition: Int = 0) {
        ConditionLockWord.initialize(memory.raw, condition: Int64(condition), shared: false)
    }

    /// The condition now (a snapshot).
    public var condition: Int { Int(ConditionLockWord.condition(of: memory.raw)) }

    public func lock() throws(LockError) { _ = try take(nil, -1) }
    /// Takes the lock once the condition equals `condition`.
    public func lock(whenCondition condition: Int) throws(LockError) { _ = try take(condition, -1) }
    /// As `lock(whenCondition:)` for at most `timeout`; false (not holding it) on timeout.
    public func lock(whenCondition condition: Int, timeout: Duration) throws(LockError) -> Bool {
        try take(condition, Deadline.after(timeout))
    }
    /// As `lock(whenCondition:)` until the monotonic deadline (`lock(whenCondition:before:)`).
    public func lock(whenCondition condition: Int, deadlineNanoseconds: Int64) throws(LockError) -> Bool {
        try take(condition, deadlineNanoseconds)
    }
    /// As `lock()` for at most `timeout`.
    public func lock(timeout: Duration) throws(LockError) -> Bool { try take(nil, Deadline.after(timeout)) }
    public func tryLock() -> Bool { ConditionLockWord.tryLock(memory.raw, whenCondition: nil) == 0 }
    /// Takes the lock only if it is free and the condition equals `condition`; never waits.
    public func tryLock(whenCondition condition: Int) -> Bool {
        ConditionLockWord.tryLock(memory.raw, whenCondition: Int64(condition)) == 0
    }
    /// Releases the lock; throws `.notOwner` if the caller does not hold it.
    public func unlock() throws(LockError) { _ = try taken(ConditionLockWord.unlock(memory.raw, condition: nil)) }
    /// Sets the condition and releases the lock.
    public func unlock(withCondition condition: Int) throws(LockError) {
        _ = try taken(ConditionLockWord.unlock(memory.raw, condition: Int64(condition)))
    }

    @usableFromInline func take(_ condition: Int?, _ deadline: Int64) throws(LockError) -> Bool {
        try waited(ConditionLockWord.lock(memory.raw, whenCondition: condition.map(Int64.init), deadline: deadline,
                                          interruptible: false))
    }
}

/// A counting semaphore, optionally bounded (a signal past the bound throws).
public final class SyncSemaphore: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 16)

    /// A semaphore holding `value` units; at most `limit` if given (precondition: value <= limit).
    public init(value: UInt32 = 0, limit: UInt32? = nil) {
        require(SemaphoreWord.initialize(memory.raw, value: value, limit: limit, shared: false) == 0,
                "SyncSemaphore: initial value \(value) exceeds the limit")
    }

    public func wait() { _ = SemaphoreWord.wait(memory.raw, deadline: -1, interruptible: false) }
    public func tryWait() -> Bool { SemaphoreWord.tryWait(memory.raw) }
    /// Waits at most `timeout`; returns whether a unit was taken.
    public func wait(timeout: Duration) -> Bool {
        SemaphoreWord.wait(memory.raw, deadline: Deadline.after(timeout), interruptible: false) == 0
    }
    /// Adds `count` units, waking as many waiters; throws (adding nothing) past the bound.
    public func signal(count: UInt32 = 1) throws(SemaphoreOverflow) {
        if SemaphoreWord.signal(memory.raw, count: count) != 0 { throw SemaphoreOverflow() }
    }
    /// The count now (a snapshot).
    public var value: UInt32 { SemaphoreWord.value(memory.raw) }
}

/// A flag threads can wait for (Python's `threading.Event`). Every thread waiting when `set` is
/// called returns, even if `clear` follows at once.
public final class SyncEvent: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 8)

    public init() {}

    public var isSet: Bool { EventWord.isSet(memory.raw) }
    /// Sets the flag and wakes every waiter.
    public func set() { EventWord.set(memory.raw) }
    public func clear() { EventWord.clear(memory.raw) }
    public func wait() { _ = EventWord.wait(memory.raw, deadline: -1, interruptible: false) }
    /// Waits at most `timeout`; returns whether the flag was set meanwhile (false: timed out).
    public func wait(timeout: Duration) -> Bool {
        EventWord.wait(memory.raw, deadline: Deadline.after(timeout), interruptible: false) == 0
    }
}

/// A cyclic barrier (Python's `threading.Barrier`): `parties` threads meet in `wait` and leave
/// together; the last to arrive runs `action` first. A timeout or a throwing action breaks it.
public final class SyncBarrier: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 32)
    let action: (@Sendable () throws -> Void)?

    public init(parties: Int, action: (@Sendable () throws -> Void)? = nil) {
        require(parties >= 1 && parties <= Int(UInt32.max), "SyncBarrier: parties must be >= 1")
        self.action = action
        _ = BarrierWord.initialize(memory.raw, parties: UInt32(parties), hasAction: action != nil, shared: false)
    }

    /// Waits for all parties; returns the arrival index (0 ..< parties).
    @discardableResult
    public func wait() throws -> Int { try wait(deadlineNanoseconds: -1) }
    /// As `wait()` for at most `timeout` (then the barrier breaks: `BarrierError.timedOut`).
    @discardableResult
    public func wait(timeout: Duration) throws -> Int { try wait(deadlineNanoseconds: Deadline.after(timeout)) }

    func wait(deadlineNanoseconds: Int64) throws -> Int {
        let (result, index) = BarrierWord.wait(memory.raw, deadline: deadlineNanoseconds, interruptible: false)
        if result == ETIMEDOUT { throw BarrierError.timedOut }
        if result != 0 { throw BarrierError.broken }
        try runAction(index: index)
        return Int(index)
    }

    /// The last party's action, for the party with `index` (blocking or async): runs it and
    /// ends it (a throw breaks the barrier and is rethrown).
    func runAction(index: UInt32) throws {
        guard let action, Int(index) == parties - 1 else { return }
        do { try action() } catch {
            _ = BarrierWord.actionDone(memory.raw, succeeded: false)
            throw error
        }
        _ = BarrierWord.actionDone(memory.raw, succeeded: true)
    }

    /// Empties the barrier; threads waiting in it throw `BarrierError.broken`.
    public func reset() { _ = BarrierWord.reset(memory.raw) }
    /// Breaks the barrier: waits throw `BarrierError.broken` until `reset`.
    public func abort() { _ = BarrierWord.abort(memory.raw) }
    /// How many threads must meet.
    public var parties: Int { Int(status.parties) }
    /// How many threads wait in it now.
    public var waiting: Int { Int(status.waiting) }
    /// Whether it is broken (until `reset`).
    public var isBroken: Bool { status.broken }

    var status: (parties: UInt32, waiting: UInt32, broken: Bool) {
        // The memory is this object's own: only a memory-corrupting bug elsewhere fails this.
        guard let status = BarrierWord.status(memory.raw) else { misuse("SyncBarrier: corrupt state") }
        return status
    }
}

/// The former name of `SyncConditionVariable`.
@available(*, deprecated, renamed: "SyncConditionVariable")
public typealias ConditionVariable = SyncConditionVariable
