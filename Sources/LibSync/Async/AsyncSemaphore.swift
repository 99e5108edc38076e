import Glibc
import Synchronization

/// The async wait of a counting semaphore (`SemaphoreWord`), for every front end: results as
/// errno codes. A pending wait is counted in word 1 as a blocked thread is (so `signal` wakes
/// the waker) and queued on the count word; the waker takes a unit for the oldest pending wait
/// first. A unit granted to a wait that is cancelled at the same moment is signalled back.
package enum AsyncSemaphore {
    /// The first, immediate try: 0 (a unit taken), EINVAL (impossible words), ETIMEDOUT once
    /// `deadline` has passed, or nil if the caller must wait.
    package static func tryFirst(_ base: UnsafeMutableRawPointer, deadline: Int64) -> Int32? {
        let result = SemaphoreWord.tryTake(base)
        if result != EAGAIN { return result }
        return Deadline.hasPassed(deadline) ? ETIMEDOUT : nil
    }

    /// A pending wait: counted in word 1 while queued; queued on the count (word 0).
    package final class Waiter: AsyncWaiter, @unchecked Sendable {
        let base: UnsafeMutableRawPointer

        package init(_ base: UnsafeMutableRawPointer, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            self.base = base
            let words = Words(base)
            super.init(watching: words[0], shared: words[1].pointee.load(ordering: .relaxed) & processSharedFlag != 0,
                       task: task, deadline: deadline, keepAlive: keepAlive)
        }

        override package func queued() { Words(base)[1].pointee.wrappingAdd(1, ordering: .sequentiallyConsistent) }

        override package func withdrawn() { Words(base).uncount() }

        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            if SemaphoreWord.validLimit(Words(base)) == nil {
                Words(base).uncount()
                return EINVAL
            }
            if SemaphoreWord.takeUnit(base) {
                Words(base).uncount()
                return 0
            }
            observed = 0
            return EBUSY
        }
    }

    /// Takes a unit for the calling task, suspending it while the count is 0. 0, ECANCELED
    /// (nothing taken), ETIMEDOUT, EINVAL.
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, keepAlive: AnyObject?) async -> Int32 {
        let (task, cancelled) = AsyncWait.currentTask()
        if cancelled { return ECANCELED }
        if let first = tryFirst(base, deadline: deadline) { return first }
        let waiter = Waiter(base, task: task, deadline: deadline, keepAlive: keepAlive)
        return await AsyncWait.suspend(waiter) { _ = SemaphoreWord.signal(base, count: 1) }
    }
}

/// The async forms: a task that waits for a unit is suspended, not a thread; threads blocked in
/// `wait()`, tasks and other processes take the units in their turn.
extension SyncSemaphore {
    /// Takes a unit, suspending the task while there is none. Throws `CancellationError` if the
    /// task is cancelled first (no unit is then taken: a unit granted at the same moment is
    /// signalled back).
    public func wait() async throws {
        try await AsyncWait.check(AsyncSemaphore.wait(memory.raw, deadline: Deadline.none, keepAlive: memory))
    }

    /// As `wait()`, false once `timeout` has passed; a zero or negative timeout is one try.
    public func wait(timeout: Duration) async throws -> Bool {
        try await AsyncWait.timed(AsyncSemaphore.wait(memory.raw, deadline: Deadline.after(timeout),
                                                      keepAlive: memory))
    }

    /// Takes a unit, runs `body` (which may `await`) and signals the unit back, even if `body`
    /// throws. Throws `CancellationError` if the task is cancelled before a unit is granted.
    public func withUnit<R>(_ body: () async throws -> R) async throws -> R {
        try await AsyncWait.check(AsyncSemaphore.wait(memory.raw, deadline: Deadline.none, keepAlive: memory))
        defer { _ = SemaphoreWord.signal(memory.raw, count: 1) }
        return try await body()
    }
}
