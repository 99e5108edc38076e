import Glibc
import Synchronization

/// The async wait of an event (`EventWord`), for every front end: results as errno codes. A
/// pending wait keeps the mark it read while the event was clear and completes once the word
/// differs (a `set` since, even if `clear` followed), as a blocked thread does; it is counted in
/// word 1 while queued, so that `set` wakes the waker. The waiters of one event are independent:
/// the waker completes every one whose mark has gone.
package enum AsyncEvent {
    /// The first, immediate try: 0 (set), EINVAL (impossible words), ETIMEDOUT once `deadline`
    /// has passed, or nil if the caller must wait (with `mark`).
    package static func tryFirst(_ base: UnsafeMutableRawPointer, deadline: Int64, mark: inout UInt32) -> Int32? {
        if Words(base).hasImpossibleCount { return EINVAL }
        mark = EventWord.mark(base)
        if mark & EventWord.flag != 0 { return 0 }
        return Deadline.hasPassed(deadline) ? ETIMEDOUT : nil
    }

    /// A pending wait: counted in word 1 while queued; queued on word 0.
    package final class Waiter: AsyncWaiter, @unchecked Sendable {
        let base: UnsafeMutableRawPointer
        let mark: UInt32

        package init(_ base: UnsafeMutableRawPointer, mark: UInt32, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            self.base = base
            self.mark = mark
            let words = Words(base)
            super.init(watching: words[0], shared: words[1].pointee.load(ordering: .relaxed) & processSharedFlag != 0,
                       task: task, deadline: deadline, keepAlive: keepAlive)
        }

        override package var inOrder: Bool { false }

        override package func queued() { Words(base)[1].pointee.wrappingAdd(1, ordering: .sequentiallyConsistent) }

        override package func withdrawn() { Words(base).uncount() }

        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            if EventWord.state(base).pointee.load(ordering: .sequentiallyConsistent) != mark {
                Words(base).uncount()
                return 0
            }
            observed = mark
            return EBUSY
        }
    }

    /// Waits, suspending the calling task, until the event is set. 0, ECANCELED, ETIMEDOUT, EINVAL.
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, keepAlive: AnyObject?) async -> Int32 {
        let (task, cancelled) = AsyncWait.currentTask()
        if cancelled { return ECANCELED }
        var mark: UInt32 = 0
        if let first = tryFirst(base, deadline: deadline, mark: &mark) { return first }
        let waiter = Waiter(base, mark: mark, task: task, deadline: deadline, keepAlive: keepAlive)
        return await AsyncWait.suspend(waiter) {}
    }
}

/// The async forms: a task that waits for the event is suspended, not a thread.
extension SyncEvent {
    /// Waits until the flag is set (returns at once if it is), suspending the task. Throws
    /// `CancellationError` if the task is cancelled first.
    public func wait() async throws {
        try await AsyncWait.check(AsyncEvent.wait(memory.raw, deadline: Deadline.none, keepAlive: memory))
    }

    /// As `wait()`; false once `timeout` has passed with the flag never set. A zero or negative
    /// timeout is one look.
    public func wait(timeout: Duration) async throws -> Bool {
        try await AsyncWait.timed(AsyncEvent.wait(memory.raw, deadline: Deadline.after(timeout),
                                                  keepAlive: memory))
    }
}
