import Glibc
import Synchronization

/// The async acquires of a condition lock (`ConditionLockWord`: a mutex word, a condition
/// variable, an Int64 condition), for every front end: results as errno codes.
///
/// The holder is this process's async holder in the mutex word and the task (or C handle) in the
/// process's table, as for `SyncMutex` (AsyncHold), so the blocking forms' owner checks hold.
/// A pending acquire is queued on the mutex word. Blocked threads are not disturbed: a look that
/// does not match leaves the condition and the condition variable alone.
///
/// How the waker looks, and why no wakeup is lost (the hang of the first version, withdrawn in
/// 2ea7324, had two causes, both below). Facts used: (1) the condition changes only while the
/// mutex is held, and every release of the mutex whose word has WAITERS set issues a FUTEX_WAKE
/// of one sleeper and clears WAITERS; (2) a thread that sleeps on the mutex sets WAITERS first,
/// and a thread woken from that sleep takes the word with WAITERS set again (MutexWord.wait), so
/// each sleeper is owed a wake by whoever consumed the previous one; (3) the waker is one more
/// sleeper of the word (futex_waitv), and its sleep ends on any wake or if the word differs from
/// the value it sleeps on.
///
/// - Per pass, the waker looks ONCE for the whole queue (`attempt` of the first waiter it
///   tries; `settle` ends the look): it takes the mutex, reads the condition, grants the first
///   waiter that wants it (the mutex stays held, for that waiter's task) and, if none does,
///   releases with `releaseMarked` and sleeps on the value that returns; or, if the mutex is
///   held, every waiter of the pass waits on that one value (held, WAITERS set). Every waiter
///   of a pass is so judged on one snapshot. Cause 1 of the hang: each waiter was tried on its
///   own (take, compare, release, or find it held), and the pass slept on the value the LAST
///   try left. A thread's release between two tries (setting the condition an earlier waiter
///   wanted, its wake going nowhere: the waker was not asleep) was then hidden: a later try
///   took the free word for a waiter that wanted another value and put it back to free |
///   WAITERS, the waker slept on that, and nothing woke it again (the thread waited on the
///   condition variable for the tasks, the tasks for the waker). Traced: the first waiters
///   saw the mutex held by the thread, the last one took it after the thread's release (the
///   condition the first ones wanted) and released it marked.
/// - The waker takes the word with WAITERS set (`AsyncHold.take(markWaiters: true)`), as a
///   woken thread does (fact 2): the wake it consumed may have been a blocked thread's turn
///   (one relocking inside `ConditionWord.wait`), and `releaseMarked` passes it on (it wakes
///   one sleeper when WAITERS was set), or the granted task's release does. Cause 2: the first
///   version took a free word without WAITERS, so a mismatch released it without a wake, and
///   the thread slept on in its relock.
/// - Only the waker leaves the word free with WAITERS set (`releaseMarked`). Every other
///   release clears WAITERS (fact 1), so once the waker has computed its sleep value V (free |
///   WAITERS), any later lock and unlock leaves the word different from V until the waker
///   itself looks again: its futex_waitv then returns at once. The first, immediate try of a
///   task (`tryFirst`, on the task's thread) releases a mismatched look the ordinary way
///   (`AsyncHold.release`: WAITERS cleared, one sleeper woken if set) for that reason: a
///   `releaseMarked` there could rebuild V exactly, between a release that changed the
///   condition and the waker's sleep. (A process-shared lock's word can also be rebuilt by
///   another process's waker: the waker sleeps on shared words in slices, so that costs one
///   slice at most, never a hang.)
/// - A look that finds the mutex held sets WAITERS on it (`take(markWaiters:)`) and sleeps on
///   that value: the holder's release then wakes a sleeper, and every woken sleeper honours
///   fact 2 (threads by taking with WAITERS, the waker by the bullets above), so the wake
///   reaches the waker in turn while it still waits.
/// - Registration and cancellation poke the waker's own word (a new pass); a withdrawn last
///   waiter passes a consumed wake on (`AsyncRuntime.cancel`).
package enum AsyncConditionLock {
    static func mutex(_ base: UnsafeMutableRawPointer) -> MutexWord.Word { atomic(base, as: UInt32.self) }

    static func matches(_ wanted: Int64?, _ condition: Int64) -> Bool { wanted == nil || wanted == condition }

    /// The first try of a task (`tryFirst`, not the waker): takes the mutex at `base` for
    /// `holder` if free and the condition is `wanted` (nil: any). 0 (taken, recorded); EBUSY
    /// (held, or taken and released the ordinary way: the condition differs); EINVAL.
    static func take(_ base: UnsafeMutableRawPointer, wanted: Int64?, holder: UInt, runtime: AsyncRuntime) -> Int32 {
        guard ConditionLockWord.isPossible(base) else { return EINVAL }
        let word = mutex(base)
        var observed: UInt32 = 0
        let result = AsyncHold.take(word, markWaiters: false, observed: &observed)
        guard result == 0 else { return result }
        if !matches(wanted, ConditionLockWord.value(base).pointee.load(ordering: .relaxed)) {
            AsyncHold.release(word)
            return EBUSY
        }
        runtime.addHold(UInt(bitPattern: word), task: holder)
        return 0
    }

    /// The waker's look at one lock during a pass: the mutex taken for it and the condition
    /// read (`taken`), or the mutex found held (`held`: the word, WAITERS set, to sleep on).
    package enum Look {
        case taken(condition: Int64)
        case held(observed: UInt32)
    }

    /// The waker's try for `waiter`, inside its pass over the lock's queue (see above): the
    /// first try of the pass looks (takes the mutex with WAITERS set and keeps it for the pass,
    /// or finds it held); every try of the pass is judged on that look. 0 (granted: the mutex
    /// taken for the look is the waiter's); EBUSY with `observed` (held, or the condition
    /// differs: `settle` ends the look); EINVAL.
    static func look(_ waiter: Waiter, runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
        let base = waiter.base, word = mutex(base), address = UInt(bitPattern: word)
        switch runtime.looks[address] {
        case .held(let value)?:
            observed = value
            return EBUSY
        case .taken(let condition)?:
            observed = word.pointee.load(ordering: .relaxed)
            guard matches(waiter.wanted, condition) else { return EBUSY }
            // The mutex is the waiter's now; the rest of the pass finds it held.
            runtime.looks[address] = .held(observed: observed)
            runtime.addHold(address, task: waiter.task)
            return 0
        case nil:
            guard ConditionLockWord.isPossible(base) else { return EINVAL }
            let result = AsyncHold.take(word, markWaiters: true, observed: &observed)
            if result == EBUSY { runtime.looks[address] = .held(observed: observed) }
            guard result == 0 else { return result }
            let condition = ConditionLockWord.value(base).pointee.load(ordering: .relaxed)
            observed = word.pointee.load(ordering: .relaxed)
            if matches(waiter.wanted, condition) {
                runtime.looks[address] = .held(observed: observed)
                runtime.addHold(address, task: waiter.task)
                return 0
            }
            runtime.looks[address] = .taken(condition: condition)
            return EBUSY
        }
    }

    /// Ends the pass's look at `base`: a mutex taken for it that no waiter got is released with
    /// WAITERS (`releaseMarked`), and the value returned is the one to sleep on; nil: the
    /// tries' value stands (the mutex was held, or granted).
    static func settle(_ base: UnsafeMutableRawPointer, runtime: AsyncRuntime) -> UInt32? {
        let word = mutex(base)
        guard case .taken? = runtime.looks.removeValue(forKey: UInt(bitPattern: word)) else { return nil }
        return releaseMarked(word)
    }

    /// Releases the mutex the waker took for a look, leaving WAITERS set: the next holder
    /// keeps it and its release wakes the waker, and the word differs from the value returned
    /// (the one to sleep on) from the moment anyone takes it. Wakes one sleeper of the mutex if
    /// the word had WAITERS set (always, as the waker takes it so): the wake the waker consumed
    /// may have been a blocked thread's turn.
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
        let result = take(base, wanted: wanted, holder: holder, runtime: runtime)
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
            look(self, runtime: runtime, observed: &observed)
        }

        override package func settle(_ runtime: AsyncRuntime) -> UInt32? {
            AsyncConditionLock.settle(base, runtime: runtime)
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
