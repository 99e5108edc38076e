import Glibc
import Synchronization

/// The async acquires of a condition lock (`ConditionLockWord`: a mutex word, a condition
/// variable, an Int64 condition), for every front end: results as errno codes.
///
/// The holder is this process's async holder in the mutex word and the task (or C handle) in the
/// process's table, as for `SyncMutex` (AsyncHold), so the blocking forms' owner checks hold.
/// A pending acquire is queued on the mutex word: the waker takes the mutex for it and checks the
/// condition; if it differs, it releases the mutex again, WAITERS set, and sleeps until the word
/// changes. The condition only changes with the mutex held, and a release of a mutex whose
/// WAITERS bit is set wakes the waker: so every release after a change of the condition makes
/// the waker look again, and no wanted value is missed (`releaseMarked`). Blocked threads are not disturbed: a look that does not
/// match leaves the condition and the condition variable alone. Pending acquires of one lock
/// wait for different values: each is tried (inOrder false).
package enum AsyncConditionLock {
    static func mutex(_ base: UnsafeMutableRawPointer) -> MutexWord.Word { atomic(base, as: UInt32.self) }

    /// Takes the mutex at `base` for `holder` if free and the condition is `wanted` (nil: any).
    /// 0 (taken, recorded); EBUSY (held, or taken and released: the condition differs), with
    /// `observed` the word to sleep on if `markWaiters`; EINVAL.
    static func take(_ base: UnsafeMutableRawPointer, wanted: Int64?, holder: UInt, markWaiters: Bool,
                     runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
        guard ConditionLockWord.isPossible(base) else { return EINVAL }
        let word = mutex(base)
        var result = AsyncHold.take(word, markWaiters: false, observed: &observed)
        if result == EBUSY && markWaiters { result = AsyncHold.take(word, markWaiters: true, observed: &observed) }
        guard result == 0 else { return result }
        if let wanted, ConditionLockWord.value(base).pointee.load(ordering: .relaxed) != wanted {
            observed = releaseMarked(word)
            return EBUSY
        }
        runtime.addHold(UInt(bitPattern: word), task: holder)
        return 0
    }

    /// Releases the mutex taken for a look at the condition, leaving WAITERS set: the next
    /// holder keeps it and its release wakes the waker, and the word differs from the value
    /// returned (the one to sleep on) from the moment anyone takes it. (A plain release would
    /// leave the free word that a lock and an unlock before the waker sleeps restore exactly:
    /// the waker would sleep through the change it waits for.) Wakes a sleeper of the mutex if
    /// the word had WAITERS set: it was taken from them.
    static func releaseMarked(_ word: MutexWord.Word) -> UInt32 {
        var value = word.pointee.load(ordering: .relaxed), released: UInt32
        while true {
            released = value & MutexWord.modes | MutexWord.waiters
            let (exchanged, now) = word.pointee.compareExchange(expected: value, desired: released, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        if value & MutexWord.waiters != 0 {
            Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: value & MutexWord.shared != 0)
        }
        return released
    }

    /// The first, immediate try for `holder`: 0, EDEADLK (it holds the lock), EINVAL, ETIMEDOUT
    /// once `deadline` has passed, or nil if it must wait.
    package static func tryFirst(_ base: UnsafeMutableRawPointer, wanted: Int64?, deadline: Int64, holder: UInt) -> Int32? {
        guard ConditionLockWord.isPossible(base) else { return EINVAL }
        let runtime = AsyncRuntime.current, word = mutex(base)
        if word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == AsyncHold.token
            && runtime.holder(of: UInt(bitPattern: word)) == holder {
            return EDEADLK
        }
        var observed: UInt32 = 0
        let result = take(base, wanted: wanted, holder: holder, markWaiters: false, runtime: runtime, observed: &observed)
        if result != EBUSY { return result }
        return Deadline.hasPassed(deadline) ? ETIMEDOUT : nil
    }

    /// Sets the condition (if given) and releases the lock `holder` holds, waking the blocked
    /// waiters to re-check: 0; EPERM if it does not hold it; EINVAL.
    package static func unlock(_ base: UnsafeMutableRawPointer, holder: UInt, condition newValue: Int64?) -> Int32 {
        guard ConditionLockWord.isPossible(base) else { return EINVAL }
        let word = mutex(base)
        guard word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == AsyncHold.token, holder != 0,
              AsyncRuntime.current.holder(of: UInt(bitPattern: word)) == holder else { return EPERM }
        if let newValue { ConditionLockWord.value(base).pointee.store(newValue, ordering: .relaxed) }
        let result = AsyncHold.unlock(word, holder: holder)
        ConditionWord.broadcast(ConditionLockWord.condition(base))
        return result
    }

    /// Whether `holder` holds the lock at `base`.
    package static func isHeld(_ base: UnsafeMutableRawPointer, by holder: UInt) -> Bool {
        let word = mutex(base)
        return holder != 0 && word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == AsyncHold.token
            && AsyncRuntime.current.holder(of: UInt(bitPattern: word)) == holder
    }

    /// A pending acquire: queued on the mutex word.
    package final class Waiter: AsyncWaiter, @unchecked Sendable {
        let base: UnsafeMutableRawPointer
        let wanted: Int64?

        package init(_ base: UnsafeMutableRawPointer, wanted: Int64?, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            self.base = base
            self.wanted = wanted
            let shared = AsyncConditionLock.mutex(base).pointee.load(ordering: .relaxed) & MutexWord.shared != 0
            super.init(watching: AsyncConditionLock.mutex(base), shared: shared, task: task, deadline: deadline, keepAlive: keepAlive)
        }

        override package var inOrder: Bool { false }

        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            take(base, wanted: wanted, holder: task, markWaiters: true, runtime: runtime, observed: &observed)
        }
    }

    /// Takes the lock for the calling task once the condition is `wanted` (nil: any), suspending
    /// it meanwhile. 0, ECANCELED (not held), ETIMEDOUT, EDEADLK, EINVAL.
    package static func lock(_ base: UnsafeMutableRawPointer, wanted: Int64?, deadline: Int64, keepAlive: AnyObject?) async -> Int32 {
        let (task, cancelled) = AsyncWait.currentTask()
        if cancelled { return ECANCELED }
        if let first = tryFirst(base, wanted: wanted, deadline: deadline, holder: task) { return first }
        let waiter = Waiter(base, wanted: wanted, task: task, deadline: deadline, keepAlive: keepAlive)
        return await AsyncWait.suspend(waiter) { _ = unlock(base, holder: task, condition: nil) }
    }
}

/// The async forms. The holder is the task (docs/async.md): it releases the lock with
/// `unlock()` or `unlock(withCondition:)`, on whatever thread it runs; nobody else can.
extension SyncConditionLock {
    /// Takes the lock whatever the condition, suspending the task while it is held. Throws
    /// `CancellationError` if the task is cancelled first (the lock is then not held),
    /// `LockError.wouldDeadlock` if the task holds it already.
    public func lock() async throws {
        try await AsyncWait.check(AsyncConditionLock.lock(memory.raw, wanted: nil, deadline: Deadline.none,
                                                          keepAlive: memory))
    }

    /// Takes the lock once the condition equals `condition`, suspending the task meanwhile.
    /// Throws as `lock()`.
    public func lock(whenCondition condition: Int) async throws {
        try await AsyncWait.check(AsyncConditionLock.lock(memory.raw, wanted: Int64(condition), deadline: Deadline.none,
                                                          keepAlive: memory))
    }

    /// As `lock(whenCondition:)`, false (not holding it) once `timeout` has passed; a zero or
    /// negative timeout is one try.
    public func lock(whenCondition condition: Int, timeout: Duration) async throws -> Bool {
        try await AsyncWait.timed(AsyncConditionLock.lock(memory.raw, wanted: Int64(condition),
                                                          deadline: Deadline.after(timeout), keepAlive: memory))
    }

    /// Whether the calling task holds the lock (taken with an async form).
    public var isHeldByCurrentTask: Bool { AsyncConditionLock.isHeld(memory.raw, by: AsyncWait.currentTask().task) }

    /// Runs `body` holding the lock once the condition equals `condition` (nil: any); `body`
    /// may `await`, and returns the value and the condition to release the lock with (nil:
    /// unchanged). Releases the lock even if `body` throws (the condition then unchanged).
    /// Throws `CancellationError` if the task is cancelled before the lock is granted. Traps
    /// if the task holds the lock already.
    public func withLock<R>(whenCondition condition: Int? = nil,
                            _ body: () async throws -> (result: R, condition: Int?)) async throws -> R {
        let task = AsyncWait.currentTask().task
        let result = await AsyncConditionLock.lock(memory.raw, wanted: condition.map(Int64.init), deadline: Deadline.none,
                                                   keepAlive: memory)
        if result == ECANCELED { throw CancellationError() }
        if result != 0 { lockFailed(result, "SyncConditionLock.withLock") }
        var newCondition: Int? = nil
        defer { _ = AsyncConditionLock.unlock(memory.raw, holder: task, condition: newCondition.map(Int64.init)) }
        let (value, next) = try await body()
        newCondition = next
        return value
    }
}
