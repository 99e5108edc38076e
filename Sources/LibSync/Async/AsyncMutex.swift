import Glibc

/// The async acquire of a mutex word, for every front end: the result as an errno code.
package enum AsyncMutex {
    /// Takes the mutex at `word` for the calling task, suspending (no thread parked) while it is
    /// held. `deadline`: monotonic ns, < 0 none, at or before now one try. 0; EOWNERDEAD (robust:
    /// taken from a dead holder); ETIMEDOUT; ECANCELED (the task was cancelled before the lock
    /// was granted; a grant that races the cancellation is released, i.e. passed on); EDEADLK if
    /// the task already holds it; ENOTRECOVERABLE; EINVAL. `keepAlive` owns the word's memory.
    package static func lock(_ word: MutexWord.Word, deadline: Int64, keepAlive: AnyObject?) async -> Int32 {
        let (first, task) = start(word, deadline: deadline)
        if let first { return first }
        return await wait(word, deadline: deadline, task: task, keepAlive: keepAlive)
    }

    /// `lock`'s synchronous part (no executor switch): the calling task's identity, and the
    /// result, or nil if the task must `wait`.
    @inline(__always)
    package static func start(_ word: MutexWord.Word, deadline: Int64) -> (result: Int32?, task: UInt) {
        let (task, cancelled) = AsyncHold.currentTaskAndCancelled()
        if cancelled { return (ECANCELED, task) }
        return (tryFirst(word, deadline: deadline, holder: task), task)
    }

    /// `lock`'s waiting part, after `start` returned nil.
    package static func wait(_ word: MutexWord.Word, deadline: Int64, task: UInt, keepAlive: AnyObject?) async -> Int32 {
        let waiter = AsyncWaiter(word: word, task: task, deadline: deadline, keepAlive: keepAlive)
        // A grant as the task is cancelled is passed on. (EOWNERDEAD is kept: the task must
        // learn of the dead holder, and a release would make the lock not recoverable.)
        return await AsyncWait.suspend(waiter) { _ = AsyncHold.unlock(word, holder: task) }
    }
}

extension AsyncMutex {
    /// The first, immediate try of an async acquire for `holder` (a task's identity, or a C
    /// handle's): its result (0, EOWNERDEAD, EDEADLK if `holder` holds it already, ETIMEDOUT
    /// once `deadline` has passed, ENOTRECOVERABLE, EINVAL), or nil if it must wait.
    package static func tryFirst(_ word: MutexWord.Word, deadline: Int64, holder: UInt) -> Int32? {
        let address = UInt(bitPattern: word)
        if word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == AsyncHold.token && asyncHolds.holder(of: address) == holder {
            return EDEADLK
        }
        var observed: UInt32 = 0
        let first = AsyncHold.take(word, markWaiters: false, observed: &observed)
        if first == 0 || first == EOWNERDEAD {
            AsyncHold.taken(word, holder: holder)
            return first
        }
        if first != EBUSY { return first }
        return Deadline.hasPassed(deadline) ? ETIMEDOUT : nil
    }
}

/// The async forms. A task that waits is suspended, not a thread: a thread, a task and another
/// process exclude one another on the same mutex. The holder is the task (see docs/async.md):
/// the lock may be released by the task that took it, on whatever thread it runs, with
/// `unlock()`; by nobody else.
extension SyncMutex {
    /// Takes the lock, suspending the task while it is held. Throws `CancellationError` if the
    /// task is cancelled first (the lock is then not held), `LockError.wouldDeadlock` if the
    /// task holds it already, and robust: `.ownerDied` (holding it), `.notRecoverable`.
    nonisolated(nonsending) public func lock() async throws {
        var (result, task) = AsyncMutex.start(word, deadline: Deadline.none)
        if result == nil { result = await AsyncMutex.wait(word, deadline: Deadline.none, task: task, keepAlive: memory) }
        if result == ECANCELED { throw CancellationError() }
        _ = try taken(result!)
    }

    /// Takes the lock unless `timeout` passes first; returns whether it did. A zero or negative
    /// timeout is one try, as for the blocking form. Throws as `lock()`.
    nonisolated(nonsending) public func lock(timeout: Duration) async throws -> Bool {
        try await lockAsync(deadline: Deadline.after(timeout))
    }

    /// Whether the calling task holds the lock (taken with an async form).
    public var isHeldByCurrentTask: Bool { AsyncHold.isHeldByCurrentTask(word) }

    /// Runs `body` holding the lock, which it may hold across `await`s, and returns its value;
    /// releases the lock even if it throws. Throws `CancellationError` if the task is cancelled
    /// before the lock is granted. Traps, as the blocking form, for a task that holds it already
    /// and (robust) a dead previous holder: use `lock()` to handle `.ownerDied`.
    nonisolated(nonsending) public func withLock<R>(_ body: nonisolated(nonsending) () async throws -> R) async throws -> R {
        var (result, task) = AsyncMutex.start(word, deadline: Deadline.none)
        if result == nil { result = await AsyncMutex.wait(word, deadline: Deadline.none, task: task, keepAlive: memory) }
        if result == ECANCELED { throw CancellationError() }
        if result != 0 { lockFailed(result!, "SyncMutex.withLock") }
        defer { _ = AsyncHold.unlock(word, holder: task) }
        return try await body()
    }

    nonisolated(nonsending) private func lockAsync(deadline: Int64) async throws -> Bool {
        var (result, task) = AsyncMutex.start(word, deadline: deadline)
        if result == nil { result = await AsyncMutex.wait(word, deadline: deadline, task: task, keepAlive: memory) }
        if result == ECANCELED { throw CancellationError() }
        return try taken(result!)
    }
}
