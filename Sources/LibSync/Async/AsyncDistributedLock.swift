import Glibc
import Synchronization

// The async forms of the distributed lock (docs/async.md): a waiting task is suspended between
// tries (Task.sleep), never parks a thread. Each try is the blocking wait's own
// (`DistributedLock.step`), and the pauses between tries follow its schedule (`PollBackoff`).
//
// The holder is the task: `DistributedLock.caller()` names the task the caller runs in, so a
// hold taken by a task is the task's on whatever thread it resumes, and its `unlock()` (blocking
// or from `withLock`) finds it. Where the blocking wait sleeps on the object's futex word (a
// release by another thread or task of this process), which no task can wait on without a
// thread, the async wait polls the object's state by the same schedule instead. On PostgreSQL
// it queues a request in the server as the blocking wait does, and looks at its answer by that
// schedule (`LockSession.queueWait`); cancelled, it withdraws it.

extension DistributedLock {
    /// Acquires the lock, suspending the task between tries for as long as it takes: for
    /// another holder (of this object or not) it tries again after a pause that starts at the
    /// backend's first pause (Redis 1 ms, else `pollInterval`) and doubles up to `pollInterval`,
    /// and takes over a stale holder's lock (see `recover`).
    ///
    /// The holder is the calling task, on whatever thread it resumes: release it from the same
    /// task with `unlock()`. Throws `CancellationError` if the task is cancelled before or while
    /// it waits: the lock is then not held through this call (a try that succeeded as the task
    /// was cancelled is released again). Throws `.alreadyHeld` (the task holds it through this
    /// non-recursive object, or through another object of this process), `.broken`, and the
    /// backends' errors, as the blocking form.
    public func lock(pollInterval: Duration = .milliseconds(10)) async throws {
        let code = try await lockCode(deadline: Deadline.none, pollInterval: pollInterval)
        try check(code, .lock)  // (no await since the last try: the message is this thread's)
    }

    /// As the async `lock(pollInterval:)` for at most `timeout`: false once it has passed (the
    /// task holds nothing new), as the blocking `tryLock(timeout:pollInterval:)`. A zero or
    /// negative timeout is one try (which takes a free lock).
    public func tryLock(timeout: Duration, pollInterval: Duration = .milliseconds(10)) async throws -> Bool {
        let code = try await lockCode(deadline: Deadline.after(timeout), pollInterval: pollInterval)
        if code == ETIMEDOUT { return false }
        try check(code, .lock)
        return true
    }

    /// Runs `body` holding the lock (the async `lock(pollInterval:)`), which it may hold across
    /// `await`s, then releases it and returns `body`'s value; rethrows `body`'s error (releasing
    /// the lock first). Throws as the async `lock`, `CancellationError` included (then `body`
    /// does not run).
    public func withLock<R>(pollInterval: Duration = .milliseconds(10), _ body: () async throws -> R) async throws -> R {
        try await lock(pollInterval: pollInterval)
        return try await holding(body)
    }

    /// As the async `withLock`, waiting at most `timeout` (the async `tryLock(timeout:)`): nil,
    /// without running `body`, once it has passed.
    public func withLockIfAvailable<R>(timeout: Duration, pollInterval: Duration = .milliseconds(10),
                                       _ body: () async throws -> R) async throws -> R? {
        guard try await tryLock(timeout: timeout, pollInterval: pollInterval) else { return nil }
        return try await holding(body)
    }

    private func holding<R>(_ body: () async throws -> R) async throws -> R {
        let result: R
        do { result = try await body() } catch { try? unlock(); throw error }
        try unlock()
        return result
    }

    /// A request queued in the store (PostgreSQL), looked at by the polling schedule until it
    /// is answered: `LockSession.queueWait`'s code, after no await (its message is this
    /// thread's). Throws `CancellationError`, leaving the request for the caller to withdraw.
    private func queuedWait(_ session: any LockSession, _ deadline: Int64, _ backoff: inout PollBackoff) async throws -> Int32 {
        while true {
            let code = session.queueWait(deadline: deadline)
            if code != EBUSY { return code }
            let pause = max(0, backoff.next(until: deadline, now: monotonicNow()))
            try await Task.sleep(nanoseconds: UInt64(pause))
        }
    }

    /// The async wait until the monotonic `deadline` (< 0: none): the blocking wait's tries
    /// (`step`), the task suspended between them. 0, ETIMEDOUT, or an errno of the last try (its
    /// message recorded on the current thread, with no await since); throws `CancellationError`.
    private func lockCode(deadline: Int64, pollInterval: Duration) async throws -> Int32 {
        try await lockCode(deadline: deadline, pollNanoseconds: Deadline.nanoseconds(pollInterval), caller: Self.caller())
    }

    /// The async wait for `caller` (the holder it records: a task's identity, or the owner an
    /// async acquire from C or Python names) until the monotonic `deadline` (< 0: none).
    ///
    /// Before each try a `WakeTicket` is armed (AsyncWake.swift): a hold through this object
    /// ending in this process fires it, and on the file system so does any release of the lock
    /// on this host (inotify). Found held where a ticket will tell of its release (this
    /// object's other holder; the file system), the task sleeps on the ticket, and after at
    /// most `pollNanoseconds` tries again anyway (a holder on another NFS client, or one that
    /// died, is seen by a try); elsewhere (a server holder) it pauses by the blocking wait's
    /// schedule (`PollBackoff`), a ticket still ending a pause early. 0, ETIMEDOUT, or an errno
    /// of the last try (its message recorded on the current thread, with no await since);
    /// throws `CancellationError` (a try that took the lock as the task was cancelled released).
    package func lockCode(deadline: Int64, pollNanoseconds poll: Int64, caller: UInt) async throws -> Int32 {
        try Task.checkCancellation()
        DistributedLockMessage.clear()
        if poll <= 0 { return EINVAL }
        let side = sides.current()
        var backoff = PollBackoff(poll: poll, first: backend.firstPollNanoseconds)
        var first = true
        while true {
            // As the blocking wait: a first try however little time is left, then the deadline.
            DistributedLockMessage.clear()
            if !first && Deadline.hasPassed(deadline) { return timedOut() }
            first = false
            let ticket = WakeTicket()
            side.wakes.add(ticket)
            let watched = backend.armWake(ticket)
            defer {
                side.wakes.remove(ticket)
                if watched { backend.disarmWake(ticket) }
            }
            let told: Bool  // a ticket will tell of the release
            switch step(side, deadline, caller, storeWaits: backend.queuesAsyncWaits) {
            case .done(let code):
                if code == 0 && Task.isCancelled {
                    _ = release(all: false, anyThread: false, caller: caller)  // the try raced the cancellation
                    throw CancellationError()
                }
                return code
            case .again(let fresh):
                first = fresh
                continue
            case .inStore:
                guard let session = beginStoreWait(side) else { continue }  // the object's state changed: look again
                let code: Int32
                do {
                    code = try await queuedWait(session, deadline, &backoff)
                } catch {
                    endStoreWait(side, ECANCELED, caller: caller, withdrawing: true)  // withdraws the request
                    throw error
                }
                endStoreWait(side, code, caller: caller, withdrawing: code != 0)
                if code == 0 && Task.isCancelled {
                    _ = release(all: false, anyThread: false, caller: caller)  // granted as the task was cancelled
                    throw CancellationError()
                }
                return code == ETIMEDOUT ? timedOut() : code
            case .heldHere: told = true
            case .busy: told = watched
            }
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) {
                DistributedLockMessage.clear()
                return timedOut()
            }
            let pause = told ? min(poll, Deadline.remaining(deadline, now: now) ?? poll) : backoff.next(until: deadline, now: now)
            await ticket.wait(pause: max(0, pause))
            try Task.checkCancellation()
        }
    }
}

extension DistributedLock {
    /// Whether an async acquire makes its first try on the caller's thread: a file system's try
    /// is a few system calls; a server's is a round trip, which runs in the acquire's task.
    var triesAtOnce: Bool { backend is FileBackend }

    /// The first try of an async acquire for `caller`, on the caller's thread: its code when
    /// the acquire ends with it (0 held; ETIMEDOUT held elsewhere and the monotonic `deadline`
    /// passed; an errno), or nil when it must wait.
    func firstTryCode(deadline: Int64, caller: UInt) -> Int32? {
        DistributedLockMessage.clear()
        let side = sides.current()
        while true {
            switch step(side, deadline, caller, storeWaits: false) {
            case .done(let code): return code
            case .again: continue
            case .heldHere, .busy, .inStore: return Deadline.hasPassed(deadline) ? timedOut() : nil
            }
        }
    }
}

/// An async acquire of a distributed lock started outside Swift's tasks (sync/async.h:
/// sync_distributed_lock_lock_async): the async wait (`DistributedLock.lockCode`) runs in a
/// task of its own for the holder the caller names, and reports its result once, unless it was
/// cancelled first. A grant that races the cancellation is released by the task: the lock is
/// never left held for a holder that gave up. No thread waits for it (the task is suspended
/// between tries).
package final class DistributedLockAcquire: Sendable {
    /// EINPROGRESS while pending; then the acquire's result, or ECANCELED once cancelled.
    package let result = Atomic<Int32>(EINPROGRESS)
    private let task = Mutex<Task<Void, Never>?>(nil)

    private init() {}

    /// Starts acquiring `lock` for `holder` until the monotonic `deadline` (< 0: none),
    /// polling a server holder every `pollNanoseconds` at most: (nil, code) when it ended at
    /// once (0: `holder` holds it; ETIMEDOUT; EINVAL for a poll interval <= 0; the blocking
    /// form's errors), or (acquire, EINPROGRESS): `completed` is then called once with the
    /// result (0, ETIMEDOUT, an errno), on a thread of Swift's pool, unless `cancel` withdrew
    /// it first. A file system's first try is made here, on the caller's thread.
    package static func start(_ lock: DistributedLock, deadline: Int64, pollNanoseconds: Int64, holder: UInt,
                              completed: @escaping @Sendable (Int32) -> Void) -> (DistributedLockAcquire?, Int32) {
        DistributedLockMessage.clear()
        if pollNanoseconds <= 0 { return (nil, EINVAL) }
        if lock.triesAtOnce, let code = lock.firstTryCode(deadline: deadline, caller: holder) { return (nil, code) }
        let acquire = DistributedLockAcquire()
        let task = Task.detached {
            let code: Int32
            do {
                code = try await lock.lockCode(deadline: deadline, pollNanoseconds: pollNanoseconds, caller: holder)
            } catch {
                code = ECANCELED
            }
            if acquire.result.compareExchange(expected: EINPROGRESS, desired: code, ordering: .acquiringAndReleasing).exchanged {
                completed(code)
            } else if code == 0 {
                _ = lock.release(all: false, anyThread: false, caller: holder)  // granted as it was cancelled: given back
            }
        }
        acquire.task.withLock { $0 = task }
        return (acquire, EINPROGRESS)
    }

    /// Withdraws the acquire if it is pending: true (its result is ECANCELED, `completed` is
    /// never called; a try under way that takes the lock releases it again), or false if it had
    /// completed (`result` says how).
    package func cancel() -> Bool {
        guard result.compareExchange(expected: EINPROGRESS, desired: ECANCELED, ordering: .acquiringAndReleasing).exchanged else {
            return false
        }
        task.withLock { $0 }?.cancel()
        return true
    }
}
