import Glibc
import Synchronization

/// The async wait on a condition variable (`ConditionWord`), for every front end: results as
/// errno codes. A wait by the holder of a mutex (a task, or a C owner or handle, holding it
/// through an async form) goes in three steps, as a blocking wait does:
///
/// 1. it enters the variable's queue (a `Waiter` in memory of its own) while it still holds the
///    mutex, then releases the mutex: a signal after the release reaches it;
/// 2. it waits, suspended, until a signal takes it, its deadline passes or it is cancelled: the
///    waker watches the waiter's own futex word (process-private mode: a signal marks exactly
///    the waiters it takes), or the variable's sequence (process-shared mode);
/// 3. it leaves the queue and takes the mutex again for the same holder, asynchronously and
///    whatever ended the wait (a cancellation does not cut this step short): the holder holds
///    the mutex again when the wait completes, also on a timeout or a cancellation.
///
/// Results: 0 (signalled), ETIMEDOUT, ECANCELED, or the re-acquire's EOWNERDEAD (held, from a
/// dead holder) or ENOTRECOVERABLE (not held); EPERM (the holder does not hold the mutex) and
/// EINVAL (impossible words) without waiting or releasing anything.
///
/// Signals are not lost: a signal that takes a waiter whose wait then times out counts (0, as
/// for the blocking form); a signal that takes a waiter as it is cancelled is passed on (the
/// wait signals the variable once more, waking the next waiter if one waits), and the wait
/// reports ECANCELED.
@usableFromInline package enum AsyncCondition {
    /// How many async condition waits of this process are in step 2. While any are, a
    /// process-private wake that took waiters pokes the waker (`ConditionWord.wake`): the waker
    /// may not be watching the word of the waiter it took (it watches at most 127 words at a
    /// time), and the poke makes it look at every one.
    static let waiting = Atomic<Int>(0)

    /// Called by a process-private wake that took waiters.
    @usableFromInline static func tookWaiters() {
        if waiting.load(ordering: .relaxed) != 0, let runtime = AsyncRuntime.existing { runtime.poke() }
    }

    /// Whether `holder` (nonzero) may wait with `mutex`: it holds it through an async form
    /// (owned mode), or the mutex is held at all (unowned mode, where anyone may release it).
    package static func holds(_ mutex: MutexWord.Word, holder: UInt) -> Bool {
        let value = mutex.pointee.load(ordering: .relaxed)
        if value & MutexWord.unowned != 0 { return MutexWord.isLocked(mutex) }
        return holder != 0 && value & MutexWord.holderMask == AsyncHold.token
            && asyncHolds.holder(of: UInt(bitPattern: mutex)) == holder
    }

    /// Wakes up to `count` waiters if `holder` may wait with `mutex` (`holds`): 0, or EPERM
    /// waking nobody (ConditionWord.wake(_:holding:count:) for an async holder).
    package static func wake(_ base: UnsafeMutableRawPointer, holding mutex: MutexWord.Word, holder: UInt,
                             count: UInt32) -> Int32 {
        guard holds(mutex, holder: holder) else { return EPERM }
        return ConditionWord.wake(base, count: count)
    }

    /// Step 2's waiter: done once the signal took the waiter (private: its state word is
    /// `signalled`; shared: the sequence moved since it entered).
    package final class SignalWaiter: AsyncWaiter, @unchecked Sendable {
        let slot: Waiter
        let sequenceWord: MutexWord.Word?

        init(_ base: UnsafeMutableRawPointer, slot: Waiter, shared: Bool, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            self.slot = slot
            sequenceWord = shared ? Words(base)[0] : nil
            super.init(watching: shared ? Words(base)[0] : slot.state, shared: shared, task: task, deadline: deadline,
                       keepAlive: keepAlive)
        }

        override package var inOrder: Bool { false }

        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            if let sequenceWord {
                let now = sequenceWord.pointee.load(ordering: .sequentiallyConsistent)
                if now != slot.sequence {
                    slot.state.pointee.store(Waiter.signalled, ordering: .relaxed)
                    return 0
                }
                observed = now
                return EBUSY
            }
            let state = slot.state.pointee.load(ordering: .acquiring)
            if state == Waiter.signalled { return 0 }
            observed = state
            return EBUSY
        }
    }

    /// One wait, from its start to the completion that finds the mutex held again.
    package final class Operation: @unchecked Sendable {
        let base: UnsafeMutableRawPointer
        let mutex: MutexWord.Word
        let holder: UInt
        let deadline: Int64
        let keepAlive: AnyObject?
        let memory: UnsafeMutableRawPointer
        let slot: Waiter
        let shared: Bool
        let signalWaiter: SignalWaiter
        /// The completion of a wait that `start` left pending (nil until then).
        private var done: (@Sendable (Int32) -> Void)?
        /// The result of a pending wait, stored (releasing) by the thread that took the mutex
        /// again for the holder before `done` is called: the holder reads it (acquiring) and so
        /// sees everything the mutex's previous holder did, whatever thread resumes it
        /// (ThreadSanitizer sees the edge too, which a continuation's resume does not show it).
        package let outcome = Atomic<Int32>(EINPROGRESS)

        /// `holder`: the mutex's holder (a task's identity, or a C owner or handle); `keepAlive`
        /// owns the variable's and the mutex's memory while the wait lasts.
        package init(_ base: UnsafeMutableRawPointer, mutex: MutexWord.Word, holder: UInt, deadline: Int64,
                     keepAlive: AnyObject?) {
            self.base = base
            self.mutex = mutex
            self.holder = holder
            self.deadline = deadline
            self.keepAlive = keepAlive
            memory = .allocate(byteCount: Waiter.size, alignment: 8)
            memory.initializeMemory(as: UInt8.self, repeating: 0, count: Waiter.size)
            slot = Waiter(memory)
            shared = ConditionWord.isShared(base)
            signalWaiter = SignalWaiter(base, slot: slot, shared: shared, task: holder, deadline: deadline,
                                        keepAlive: keepAlive)
        }

        deinit {
            // Idle by now (a completed wait left the queue), unless it never started.
            memory.deallocate()
        }

        /// Steps 1 and 2: enters the queue, releases the mutex and registers the wait with the
        /// waker. Returns the result of a wait that ended at once (EPERM, EINVAL: nothing done;
        /// a deadline already passed: the mutex was released and is held again), or nil: the
        /// wait is pending, and `done` will be called once, with its result, when the holder
        /// holds the mutex again (possibly before `start` returns).
        package func start(_ done: @escaping @Sendable (Int32) -> Void) -> Int32? {
            guard holds(mutex, holder: holder) else { return EPERM }
            // Counted before it can be signalled: a wake that takes it sees the count (the
            // bucket's lock orders them) and pokes the waker.
            AsyncCondition.waiting.add(1, ordering: .relaxed)
            let entered = ConditionWord.enter(base, slot)
            guard entered == 0 else {
                AsyncCondition.waiting.subtract(1, ordering: .relaxed)
                return entered
            }
            if AsyncHold.unlock(mutex, holder: holder) != 0 {  // not held any more: someone else released it
                _ = leave(cancelled: true)
                return EPERM
            }
            if Deadline.hasPassed(deadline) {  // one look: leave at once, take the mutex again
                let left = leave(cancelled: false)
                let relocked = AsyncMutex.tryFirst(mutex, deadline: Deadline.none, holder: holder)
                if let relocked { return combine(left, relocked) }
                self.done = done
                relock(left)
                return nil
            }
            self.done = done
            AsyncRuntime.current.register(signalWaiter) { [self] result in
                relock(leave(cancelled: result == ECANCELED, result: result))
            }
            return nil
        }

        /// Cancels step 2 if it is still under way: the wait goes on to step 3 at once and
        /// completes with ECANCELED (unless the mutex's re-acquire fails). Returns whether it did
        /// (false: the wait had been signalled or timed out already, or it is done).
        @discardableResult
        package func cancel() -> Bool { AsyncRuntime.current.cancel(signalWaiter) }

        /// Leaves the queue after step 2 ended with `result`: the wait's result before the
        /// re-acquire. A signal that took the waiter counts, except for a cancelled wait, which
        /// passes it on.
        private func leave(cancelled: Bool, result: Int32 = ETIMEDOUT) -> Int32 {
            if shared && slot.state.pointee.load(ordering: .relaxed) != Waiter.signalled
                && Words(base)[0].pointee.load(ordering: .sequentiallyConsistent) != slot.sequence {
                slot.state.pointee.store(Waiter.signalled, ordering: .relaxed)  // the sequence moved: signalled
            }
            let signalled = ConditionWord.leave(slot) == 0
            AsyncCondition.waiting.subtract(1, ordering: .relaxed)
            if cancelled {
                if signalled { ConditionWord.signal(base) }
                return ECANCELED
            }
            return signalled ? 0 : result == 0 ? 0 : ETIMEDOUT
        }

        /// Step 3: takes the mutex again for the holder, then completes with `waited` (or the
        /// re-acquire's failure). Not cancellable.
        private func relock(_ waited: Int32) {
            if let relocked = AsyncMutex.tryFirst(mutex, deadline: Deadline.none, holder: holder) {
                return finish(combine(waited, relocked))
            }
            let waiter = AsyncWaiter(word: mutex, task: holder, deadline: Deadline.none, keepAlive: keepAlive)
            AsyncRuntime.current.register(waiter) { [self] relocked in finish(combine(waited, relocked)) }
        }

        private func finish(_ result: Int32) {
            outcome.store(result, ordering: .releasing)
            let done = self.done
            self.done = nil
            done?(result)
        }

        /// The wait's result: the re-acquire's failure (EOWNERDEAD held, ENOTRECOVERABLE not
        /// held), else how the wait ended.
        private func combine(_ waited: Int32, _ relocked: Int32) -> Int32 { relocked != 0 ? relocked : waited }
    }

    /// Waits on the variable at `base` with `mutex` held by the calling task (through an async
    /// form), suspending the task; the task holds the mutex again when this returns, whatever
    /// the result. 0, ETIMEDOUT, ECANCELED (the task was cancelled: at once if it was before
    /// the call, without releasing the mutex), EOWNERDEAD, ENOTRECOVERABLE; EPERM, EINVAL.
    package static func wait(_ base: UnsafeMutableRawPointer, mutex: MutexWord.Word, deadline: Int64,
                             keepAlive: AnyObject?) async -> Int32 {
        let (task, cancelled) = AsyncWait.currentTask()
        guard holds(mutex, holder: task) else { return EPERM }
        if cancelled { return ECANCELED }
        let operation = Operation(base, mutex: mutex, holder: task, deadline: deadline, keepAlive: keepAlive)
        let atOnce = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int32?, Never>) in
                if let result = operation.start({ _ in continuation.resume(returning: nil) }) {
                    continuation.resume(returning: result)
                }
            }
        } onCancel: {
            operation.cancel()
        }
        return atOnce ?? operation.outcome.load(ordering: .acquiring)
    }
}

/// The async forms: a task that waits is suspended, not a thread. The task must hold the mutex
/// through an async form (`try await mutex.lock()`, `withLock`); threads' signals and
/// broadcasts wake waiting tasks, and tasks' wake waiting threads, oldest first.
extension SyncConditionVariable {
    /// Releases `mutex` (held by the calling task), waits for a signal, takes `mutex` again:
    /// the task holds it when this returns or throws. Throws `CancellationError` if the task
    /// is cancelled (a signal it had been given is passed on to the next waiter), `.notOwner`
    /// without waiting if the task does not hold it (a lock taken with the blocking `lock()`
    /// is the thread's, not the task's), and a robust mutex's `.ownerDied` (held) or
    /// `.notRecoverable` (not held).
    nonisolated(nonsending) public func wait(on mutex: SyncMutex) async throws {
        try AsyncWait.check(await AsyncCondition.wait(memory.raw, mutex: mutex.word, deadline: Deadline.none,
                                                     keepAlive: KeepBoth(memory, mutex.memory)))
    }

    /// As `wait(on:)` for at most `timeout`; false if it timed out (holding `mutex` again). A
    /// zero or negative timeout releases and takes the mutex again, as the blocking form.
    nonisolated(nonsending) public func wait(on mutex: SyncMutex, timeout: Duration) async throws -> Bool {
        try AsyncWait.timed(await AsyncCondition.wait(memory.raw, mutex: mutex.word, deadline: Deadline.after(timeout),
                                                     keepAlive: KeepBoth(memory, mutex.memory)))
    }

    /// Waits until `predicate` (checked with `mutex` held) is true.
    nonisolated(nonsending) public func wait(on mutex: SyncMutex, until predicate: () throws -> Bool) async throws {
        while try !predicate() { try await wait(on: mutex) }
    }

    /// Waits until `predicate` is true or `timeout` passes; returns the predicate's last value.
    nonisolated(nonsending) public func wait(on mutex: SyncMutex, timeout: Duration,
                                             until predicate: () throws -> Bool) async throws -> Bool {
        let end = Deadline.after(timeout)
        while try !predicate() {
            let waited = try AsyncWait.timed(await AsyncCondition.wait(memory.raw, mutex: mutex.word, deadline: end,
                                                                      keepAlive: KeepBoth(memory, mutex.memory)))
            if !waited { return try predicate() }
        }
        return true
    }
}

/// What a wait keeps alive: the variable's memory and the mutex's.
final class KeepBoth: @unchecked Sendable {
    let first: AnyObject
    let second: AnyObject
    init(_ first: AnyObject, _ second: AnyObject) {
        self.first = first
        self.second = second
    }
}

/// The async forms of `SyncCondition` (a mutex and a condition variable in one): a task takes
/// its lock with `try await lock()` and waits with `try await wait()`; `unlock()`, `signal()`
/// and `broadcast()` are the blocking type's (they never wait).
extension SyncCondition {
    /// Takes the lock for the calling task, suspending it while the lock is held. Throws
    /// `CancellationError` if the task is cancelled first (not held), `.wouldDeadlock` if the
    /// task holds it already.
    nonisolated(nonsending) public func lock() async throws {
        var (result, task) = AsyncMutex.start(mutex, deadline: Deadline.none)
        if result == nil { result = await AsyncMutex.wait(mutex, deadline: Deadline.none, task: task, keepAlive: memory) }
        if result == ECANCELED { throw CancellationError() }
        _ = try taken(result!)
    }

    /// Waits for a signal with the lock held by the calling task (taken with `lock()` async),
    /// suspending the task; the task holds the lock again when this returns or throws (as
    /// `SyncConditionVariable.wait(on:)`). Throws `CancellationError`, or `.notOwner` without
    /// waiting.
    nonisolated(nonsending) public func wait() async throws {
        try AsyncWait.check(await AsyncCondition.wait(condition, mutex: mutex, deadline: Deadline.none, keepAlive: memory))
    }

    /// As `wait()` for at most `timeout`; false if it timed out (holding the lock again).
    nonisolated(nonsending) public func wait(timeout: Duration) async throws -> Bool {
        try AsyncWait.timed(await AsyncCondition.wait(condition, mutex: mutex, deadline: Deadline.after(timeout),
                                                     keepAlive: memory))
    }
}
