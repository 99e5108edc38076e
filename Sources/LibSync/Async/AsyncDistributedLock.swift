import Glibc

// The async forms of the distributed lock (docs/async.md): a waiting task is suspended between
// tries (Task.sleep), never parks a thread. Each try is the blocking wait's own
// (`DistributedLock.step`), and the pauses between tries follow its schedule (`PollBackoff`).
//
// The holder is the task: `DistributedLock.caller()` names the task the caller runs in, so a
// hold taken by a task is the task's on whatever thread it resumes, and its `unlock()` (blocking
// or from `withLock`) finds it. Where the blocking wait sleeps on something no task can wait on
// without a thread (the object's futex word for a release by another thread of this process; a
// PostgreSQL request queued in the server), the async wait polls by the same schedule instead.

extension DistributedLock {
    /// Acquires the lock, suspending the task between tries: for another holder (of this
    /// object or not) it tries again after a pause that starts at the backend's first pause (Redis
    /// 1 ms, else `pollInterval`) and doubles up to `pollInterval`, and takes over a stale
    /// holder's lock (see `recoverStale`). `timeout` (nil: none) as the blocking form's: zero or
    /// negative is one try; throws `DistributedLockError.timedOut` once it has passed.
    ///
    /// The holder is the calling task, on whatever thread it resumes: release it from the same
    /// task with `unlock()`. Throws `CancellationError` if the task is cancelled before or while
    /// it waits: the lock is then not held through this call (a try that succeeded as the task
    /// was cancelled is released again). Throws `.alreadyHeld` (the task holds it through this
    /// non-recursive object, or, with no timeout, through another object of this process),
    /// `.broken`, and the backends' errors, as the blocking form.
    public func lock(timeout: Duration? = nil, pollInterval: Duration = .milliseconds(10)) async throws {
        let deadline = timeout.map { Deadline.after($0) } ?? Deadline.none
        try Task.checkCancellation()
        let poll = Deadline.nanoseconds(pollInterval)
        if poll <= 0 { try check(EINVAL, .lock) }
        let caller = Self.caller()
        let side = sides.current()
        var backoff = PollBackoff(poll: poll, first: backend.firstPollNanoseconds)
        var first = true
        while true {
            // As the blocking wait: a first try however little time is left, then the deadline.
            if !first && Deadline.hasPassed(deadline) { try check(timedOut(), .lock) }
            first = false
            DistributedLockMessage.clear()
            switch step(side, deadline, caller, storeWaits: false) {
            case .done(let code):
                if code == 0 && Task.isCancelled {
                    _ = release(all: false, anyThread: false, caller: caller)  // the try raced the cancellation
                    throw CancellationError()
                }
                try check(code, .lock)  // (no await since the try: the message is this thread's)
                return
            case .again(let fresh):
                first = fresh
                continue
            case .heldHere, .busy, .inStore: break
            }
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) {
                DistributedLockMessage.clear()
                try check(timedOut(), .lock)
            }
            let pause = backoff.next(until: deadline, now: now)
            try await Task.sleep(nanoseconds: UInt64(pause))  // throws CancellationError when cancelled
        }
    }

    /// Runs `body` holding the lock (`lock(timeout:pollInterval:)`, async), which it may hold
    /// across `await`s, then releases it and returns `body`'s value; rethrows `body`'s error
    /// (releasing the lock first). Throws as the async `lock`, `CancellationError` included
    /// (then `body` does not run).
    public func withLock<R>(timeout: Duration? = nil, pollInterval: Duration = .milliseconds(10),
                            _ body: () async throws -> R) async throws -> R {
        try await lock(timeout: timeout, pollInterval: pollInterval)
        let result: R
        do { result = try await body() } catch { try? unlock(); throw error }
        try unlock()
        return result
    }
}
