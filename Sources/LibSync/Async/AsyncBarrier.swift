import Glibc
import Synchronization

/// The async wait of a barrier (`BarrierWord`), for every front end: results as errno codes.
///
/// A party's wait has two steps, as the blocking one's: it *enters* (counted in, with its
/// arrival index) once the previous cycle has drained (and its action has ended), then waits
/// until the barrier trips (the last party arrives), breaks or is reset. Each step is tried
/// under the barrier's inner lock: at once by the caller (`tryFirst`), then by the waker at every
/// wake of `Parts.asyncWord`, which every state change moves while a pending wait sleeps on it
/// (process-private: the barrier's own generation word, marked by the waker; process-shared: the
/// condition variable's sequence, the pending wait counted as one of its waiters). The waker
/// takes the inner lock as the blocking forms do: it is held for a few loads and stores, never
/// across a wait.
///
/// A party that gives up after it entered (cancelled, timed out) breaks the barrier, as a
/// blocking wait's timeout does (Python's `threading.Barrier`): the party can no longer be
/// complete as counted, so the others get ECANCELED (broken) rather than wait for a party that
/// left, or see its arrival index taken twice. If the barrier tripped before the party gave up,
/// the trip stands (the others pass) and the party has passed too (`Waiter.passed`). A party
/// that gives up while it still waits to enter changes nothing.
///
/// The last party of a barrier with an action runs it and then calls `BarrierWord.actionDone`;
/// an async party's action is recorded as this process's (`AsyncHold.token`), so it may end it
/// on whatever thread its task resumes.
package enum AsyncBarrier {
    /// One party's wait: entered (`index`) or not yet; results under the barrier's lock.
    package final class Waiter: AsyncWaiter, @unchecked Sendable {
        let base: UnsafeMutableRawPointer
        /// Guarded by the barrier's inner lock.
        package private(set) var entered = false
        package private(set) var index: UInt32 = 0
        /// Whether it has left the barrier (completed by the waker, or gave up).
        var left = false
        /// Whether the barrier tripped for it (it passed), even if it then gave up.
        package private(set) var passed = false
        /// Whether it left a broken (or reset) barrier.
        package private(set) var broke = false
        /// Whether it gave up (cancelled, timed out) after it entered.
        var gaveUp = false

        init(_ base: UnsafeMutableRawPointer, entered: Bool, index: UInt32, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            self.base = base
            self.entered = entered
            self.index = index
            let parts = BarrierWord.Parts(base)
            super.init(watching: parts.asyncWord, shared: parts.shared, task: task, deadline: deadline, keepAlive: keepAlive)
        }

        override package var inOrder: Bool { false }

        /// Process-shared: counted as a waiter of the condition variable while queued, so that
        /// its broadcasts move the sequence and wake the waker.
        override package func queued() {
            let parts = BarrierWord.Parts(base)
            if parts.shared { Words(parts.condition)[1].pointee.wrappingAdd(1, ordering: .sequentiallyConsistent) }
        }

        func uncount() {
            let parts = BarrierWord.Parts(base)
            if parts.shared { Words(parts.condition).uncount() }
        }

        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            let b = BarrierWord.Parts(base)
            guard b.lock() else {
                uncount()
                return EINVAL
            }
            defer { b.unlock() }
            if !entered {
                let (result, index) = enter(b)
                if let result {
                    if result == 0 { self.index = index; passed = true }
                    if result == ECANCELED { broke = true }
                    left = true
                    uncount()
                    return result
                }
                if b.state != .filling {  // still draining: wait to enter
                    observed = b.asyncMark()
                    return EBUSY
                }
                entered = true
                self.index = index
            }
            if b.state == .filling || b.state == .action {
                observed = b.asyncMark()
                return EBUSY
            }
            let result = leave(b)
            uncount()
            return result
        }

        /// Cancelled or timed out (outside the runtime's lock): counted out, and an entered party
        /// gives up (`giveUp`).
        override package func withdrawn() {
            uncount()
            giveUp()
        }

        /// Leaves the barrier after the party gave up, if it entered and has not left: breaks a
        /// barrier still filling (or running its action); a barrier that tripped meanwhile
        /// stands, and the party has `passed`. Idempotent.
        package func giveUp() {
            let b = BarrierWord.Parts(base)
            guard b.lock() else { return }
            defer { b.unlock() }
            guard entered && !left else { return }
            gaveUp = true
            if b.state == .filling {
                b.state = .broken
                b.wakeAll()
            }
            _ = leave(b)
        }

        /// Leaves a barrier that no longer fills (the lock held): 0 if it tripped (`passed`),
        /// ECANCELED if it broke or was reset.
        func leave(_ b: BarrierWord.Parts) -> Int32 {
            left = true
            let result: Int32 = b.state == .broken || b.state == .resetting ? ECANCELED : 0
            if result == 0 { passed = true } else { broke = true }
            b.leave()
            return result
        }
    }

    /// Enters a party (the lock held) unless the previous cycle still drains: (nil, index)
    /// entered and waiting; (0, index) entered last: the barrier tripped (or, with an action,
    /// the action is the caller's now); (ECANCELED, 0) broken; (EINVAL, 0) corrupt; (nil, 0) with
    /// the state not filling: it must wait to enter.
    static func enter(_ b: BarrierWord.Parts) -> (Int32?, UInt32) {
        if b.state == .draining || b.state == .resetting || b.state == .action { return (nil, 0) }
        if b.state == .broken { return (ECANCELED, 0) }
        guard b.count < b.parties else { return (EINVAL, 0) }
        let index = b.count
        b.count += 1
        if index + 1 == b.parties {
            if b.hasAction {
                b.state = .action
                b.actionRunner = AsyncHold.token
                return (0, index)
            }
            b.state = .draining
            b.wakeAll()
            b.leave()
            return (0, index)
        }
        return (nil, index)
    }

    /// The first, immediate try: enters if it can. (0, index) tripped; (ECANCELED, 0) broken;
    /// (EINVAL, 0); (ETIMEDOUT, index) once `deadline` has passed with the party entered but
    /// not the last (the barrier breaks, as the blocking form's timeout does); or (nil, index):
    /// wait, `entered` saying whether it is counted in.
    package static func tryFirst(_ base: UnsafeMutableRawPointer, deadline: Int64) -> (result: Int32?, index: UInt32, entered: Bool) {
        let b = BarrierWord.Parts(base)
        guard b.lock() else { return (EINVAL, 0, false) }
        defer { b.unlock() }
        let (result, index) = enter(b)
        if let result { return (result, index, false) }
        let entered = b.state == .filling
        if entered && Deadline.hasPassed(deadline) {
            b.state = .broken
            b.wakeAll()
            b.leave()
            return (ETIMEDOUT, index, false)
        }
        return (nil, index, entered)
    }

    /// A waiter for a wait `tryFirst` left pending.
    package static func waiter(_ base: UnsafeMutableRawPointer, entered: Bool, index: UInt32, task: UInt, deadline: Int64,
                               keepAlive: AnyObject?) -> Waiter {
        Waiter(base, entered: entered, index: index, task: task, deadline: deadline, keepAlive: keepAlive)
    }

    /// Waits, suspending the calling task, until the barrier trips: (0, index); ECANCELED
    /// (the task was cancelled: the barrier breaks unless it had tripped, see above; or the
    /// barrier is broken or reset: `broken` true), ETIMEDOUT (broken by this party), EINVAL.
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64,
                             keepAlive: AnyObject?) async -> (result: Int32, index: UInt32, broken: Bool) {
        let (task, cancelled) = AsyncWait.currentTask()
        if cancelled { return (ECANCELED, 0, false) }
        let (first, index, entered) = tryFirst(base, deadline: deadline)
        if let first { return (first, index, first == ECANCELED) }
        let waiter = Waiter(base, entered: entered, index: index, task: task, deadline: deadline, keepAlive: keepAlive)
        _ = await AsyncWait.suspend(waiter) {}
        // The outcome, not suspend's answer: a trip cannot be given back, so a party that
        // passed keeps its index even if the task was cancelled as it did.
        var result = waiter.outcome.load(ordering: .acquiring)
        if result != 0 {
            waiter.giveUp()  // cancelled before it was queued: it has not left yet
            if waiter.passed { result = 0 }
        }
        // ECANCELED from the waker's try: the barrier broke; from a cancellation: the task's.
        let broken = result == ECANCELED && waiter.broke && !waiter.gaveUp
        return (result, waiter.index, broken)
    }
}

/// The async form: a party that waits is suspended, not a thread; threads, tasks and (shared
/// barriers) other processes meet in the same barrier.
extension SyncBarrier {
    /// Waits for all parties, suspending the task; returns the arrival index (0 ..< parties).
    /// The last to arrive runs the action first (on its task). Throws `BarrierError.broken` if
    /// the barrier is or becomes broken (or is reset meanwhile). A cancelled task throws
    /// `CancellationError` and breaks the barrier, as a timeout does (the other parties throw
    /// `.broken`): a party that leaves cannot be waited for; if the barrier had tripped first,
    /// the wait returns its index instead. Cancelled before it entered (the previous cycle
    /// still draining), it leaves the barrier alone.
    @discardableResult
    public func wait() async throws -> Int { try await waitAsync(deadline: Deadline.none) }

    /// As `wait()` for at most `timeout` (then the barrier breaks: `BarrierError.timedOut`). A
    /// zero or negative timeout is one try, as for the blocking form: unless this party is the
    /// last, the barrier breaks.
    @discardableResult
    public func wait(timeout: Duration) async throws -> Int { try await waitAsync(deadline: Deadline.after(timeout)) }

    private func waitAsync(deadline: Int64) async throws -> Int {
        let (result, index, broken) = await AsyncBarrier.wait(memory.raw, deadline: deadline, keepAlive: memory)
        if result == ETIMEDOUT { throw BarrierError.timedOut }
        if result == ECANCELED { throw broken ? BarrierError.broken : CancellationError() }
        if result != 0 { throw BarrierError.broken }
        try runAction(index: index)
        return Int(index)
    }
}
