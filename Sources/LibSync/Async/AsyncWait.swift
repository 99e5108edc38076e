import Glibc

/// What every async wait shares (the mutex's too): who asks, and the suspension with its
/// cancellation rule.
package enum AsyncWait {
    /// The calling task's identity (its address, 0 outside a task) and whether it is cancelled.
    @inline(__always)
    package static func currentTask() -> (task: UInt, cancelled: Bool) {
        let (task, cancelled) = AsyncHold.currentTaskAndCancelled()
        return (task, cancelled)
    }

    /// Queues `waiter` with the waker and suspends the task (no thread waits) until it
    /// completes; returns its result. A cancellation of the task withdraws a queued waiter
    /// (ECANCELED, nothing taken). A grant (0) that races the cancellation is given back by
    /// `giveBack` (a release, which passes it on) and becomes ECANCELED: a cancelled wait never
    /// returns holding what it waited for.
    package static func suspend(_ waiter: AsyncWaiter, giveBack: () -> Void) async -> Int32 {
        let runtime = AsyncRuntime.current
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                runtime.register(waiter) { _ in continuation.resume() }
            }
        } onCancel: {
            runtime.cancel(waiter)
        }
        let result = waiter.outcome.load(ordering: .acquiring)
        if result == 0 && Task.isCancelled {
            giveBack()
            return ECANCELED
        }
        return result
    }

    /// The error an async form throws for `result` (not 0): `CancellationError` for ECANCELED,
    /// else the blocking form's `LockError`.
    package static func error(_ result: Int32) -> any Error {
        result == ECANCELED ? CancellationError() : LockError(code: result)
    }

    /// An untimed async form's end: returns for `result` 0, else throws `error(result)`.
    package static func check(_ result: Int32) throws {
        if result != 0 { throw error(result) }
    }

    /// A timed async form's end: true for `result` 0, false for ETIMEDOUT (timed out), else
    /// throws `error(result)`.
    package static func timed(_ result: Int32) throws -> Bool {
        if result == ETIMEDOUT { return false }
        try check(result)
        return true
    }
}
