import Glibc
import Synchronization

/// The async read and write acquires of a read-write lock (`RWLockWords`), for every front end:
/// results as errno codes.
///
/// Readers are counted in `state` as blocking readers are; an async reader is nobody's in
/// particular (a read lock has no owner check, async or blocking). An async writer writes the
/// process's async holder id (`AsyncHold.token`) into the `owner` word, and the process's table
/// of holds says which task (or C handle) it is, as for the mutex: every thread's owner check
/// reads "not mine", and `writeUnlock`, `downgrade` from the holding task find their way here.
///
/// Waiting: a pending reader is queued on `state` and the waker sets READERS_PARKED for it, as a
/// parked blocking reader does; a pending writer is counted in `waiting` while queued, and the
/// waker marks the lock (WRITERS_WAITING) for it and sleeps on `wakeups` with the sequence it
/// read before the state, as a blocking writer does. So the releases that wake blocking
/// waiters wake the waker: threads, tasks and other processes take the lock in their turn.
/// Withdrawn (cancelled, timed out), a writer counts itself out; the last writer out clears the
/// mark and wakes a writer or the parked readers, as a blocking writer that gives up does.
package enum AsyncRWLock {
    typealias Words = RWLockWords

    /// Whether `holder` (a task's identity, or a C handle's) holds the lock at `m` for writing.
    package static func isWriteLocked(_ m: UnsafeMutableRawPointer, by holder: UInt) -> Bool {
        holder != 0 && Words.state(m).pointee.load(ordering: .relaxed) & Words.writer != 0
            && Words.owner(m).pointee.load(ordering: .relaxed) == AsyncHold.token
            && AsyncRuntime.current.holder(of: UInt(bitPattern: m)) == holder
    }

    // MARK: first tries (on the caller's thread)

    /// The first, immediate try of an async read for `holder`: its result (0, EDEADLK if
    /// `holder` holds the write lock, EAGAIN, EINVAL, ETIMEDOUT once `deadline` has passed), or
    /// nil if it must wait.
    package static func tryReadFirst(_ m: UnsafeMutableRawPointer, deadline: Int64, holder: UInt) -> Int32? {
        let value = Words.state(m).pointee.load(ordering: .relaxed)
        if Words.isImpossible(value) { return EINVAL }
        if value & Words.writer != 0 && isWriteLocked(m, by: holder) { return EDEADLK }
        let result = Words.attemptRead(m)
        if result != EBUSY { return result }
        return Deadline.hasPassed(deadline) ? ETIMEDOUT : nil
    }

    /// The first, immediate try of an async write for `holder`: its result (0, EDEADLK if
    /// `holder` holds it already, EINVAL, ETIMEDOUT once `deadline` has passed), or nil if it
    /// must wait.
    package static func tryWriteFirst(_ m: UnsafeMutableRawPointer, deadline: Int64, holder: UInt) -> Int32? {
        var value = Words.state(m).pointee.load(ordering: .relaxed)
        if Words.isImpossible(value) { return EINVAL }
        if value & Words.writer != 0 && isWriteLocked(m, by: holder) { return EDEADLK }
        while value & (Words.writer | Words.readerMask | Words.upgradable | Words.writersWaiting) == 0 {
            let (exchanged, now) = Words.state(m).pointee.compareExchange(
                expected: value, desired: value | Words.writer, ordering: .acquiring)
            if exchanged {
                tookWrite(m, holder: holder, runtime: AsyncRuntime.current)
                return 0
            }
            value = now
        }
        if Words.isImpossible(value) { return EINVAL }
        return Deadline.hasPassed(deadline) ? ETIMEDOUT : nil
    }

    /// `holder` just took the write lock: the word names this process, the table the holder.
    static func tookWrite(_ m: UnsafeMutableRawPointer, holder: UInt, runtime: AsyncRuntime) {
        Words.owner(m).pointee.store(AsyncHold.token, ordering: .relaxed)
        runtime.addHold(UInt(bitPattern: m), task: holder)
    }

    // MARK: releases

    /// Releases the write lock `holder` holds: 0; EPERM if it does not hold it; EINVAL.
    package static func writeUnlock(_ m: UnsafeMutableRawPointer, holder: UInt) -> Int32 {
        let value = Words.state(m).pointee.load(ordering: .relaxed)
        if Words.isImpossible(value) { return EINVAL }
        guard value & Words.writer != 0, Words.owner(m).pointee.load(ordering: .relaxed) == AsyncHold.token,
              AsyncRuntime.current.removeHold(UInt(bitPattern: m), task: holder) else { return EPERM }
        Words.owner(m).pointee.store(0, ordering: .relaxed)
        return Words.writeUnlockSlow(m)
    }

    /// Turns the write lock `holder` holds into a read lock in one CAS (no writer gets in
    /// between; parked readers join unless a writer waits): 0; EPERM if it does not hold it
    /// for writing; EINVAL. The read lock is released as any read lock.
    package static func downgrade(_ m: UnsafeMutableRawPointer, holder: UInt) -> Int32 {
        var value = Words.state(m).pointee.load(ordering: .relaxed)
        if Words.isImpossible(value) { return EINVAL }
        guard value & Words.writer != 0, Words.owner(m).pointee.load(ordering: .relaxed) == AsyncHold.token,
              AsyncRuntime.current.removeHold(UInt(bitPattern: m), task: holder) else { return EPERM }
        Words.owner(m).pointee.store(0, ordering: .relaxed)
        while true {
            if value & Words.writer == 0 || Words.isImpossible(value) { return EINVAL }
            var next = (value & ~Words.writer) &+ 1
            if value & Words.writersWaiting == 0 { next &= ~Words.readersParked }
            let (exchanged, now) = Words.state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        Words.wakeParkedReaders(m, value)
        return 0
    }

    /// Releases a read lock (any reader's: read locks have no owner): as `RWLockWords.readUnlock`.
    package static func readUnlock(_ m: UnsafeMutableRawPointer) -> Int32 { Words.readUnlock(m) }

    // MARK: waiting

    /// A pending read: queued on `state`.
    package final class ReadWaiter: AsyncWaiter, @unchecked Sendable {
        let lock: UnsafeMutableRawPointer

        package init(_ m: UnsafeMutableRawPointer, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            lock = m
            let isShared = Words.state(m).pointee.load(ordering: .relaxed) & Words.shared != 0
            super.init(watching: Words.state(m), shared: isShared, task: task, deadline: deadline, keepAlive: keepAlive)
        }

        /// Takes a read lock if no writer holds or waits; else parks (READERS_PARKED) and sleeps
        /// on `state`, as a blocking reader (`waitAsReader`).
        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            let m = lock, blockers = Words.writer | Words.writersWaiting | Words.upgrading
            while true {
                let value = Words.state(m).pointee.load(ordering: .sequentiallyConsistent)
                if value & blockers == 0 {
                    let result = Words.attemptRead(m)
                    if result != EBUSY { return result }
                    continue
                }
                if Words.isImpossibleUpgrade(value) { return EINVAL }
                if value & (Words.writer | Words.readerMask | Words.upgradable | Words.writersWaiting) == Words.writersWaiting
                    && Words.waiting(m).pointee.load(ordering: .sequentiallyConsistent) == 0 {
                    Words.clearOrphanedMark(m, value)
                    continue
                }
                if value & Words.readersParked == 0 {
                    if !Words.state(m).pointee.compareExchange(expected: value, desired: value | Words.readersParked,
                                                               ordering: .relaxed).exchanged { continue }
                }
                observed = value | Words.readersParked
                return EBUSY
            }
        }
    }

    /// A pending write: counted in `waiting` while queued; queued on `wakeups`.
    package final class WriteWaiter: AsyncWaiter, @unchecked Sendable {
        let lock: UnsafeMutableRawPointer

        package init(_ m: UnsafeMutableRawPointer, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
            lock = m
            let isShared = Words.state(m).pointee.load(ordering: .relaxed) & Words.shared != 0
            super.init(watching: Words.wakeups(m), shared: isShared, task: task, deadline: deadline, keepAlive: keepAlive)
        }

        override package var goesFirst: Bool { true }

        /// Counts the writer in and marks a held lock at once, as a blocking writer does before it
        /// sleeps: readers that come later wait behind it, and the release wakes a writer.
        override package func queued() {
            let m = lock
            Words.countWaiting(m, by: 1)
            var value = Words.state(m).pointee.load(ordering: .sequentiallyConsistent)
            while value & (Words.writer | Words.readerMask | Words.upgradable) != 0 && value & Words.writersWaiting == 0
                    && !Words.isImpossible(value) {
                let (exchanged, now) = Words.state(m).pointee.compareExchange(
                    expected: value, desired: value | Words.writersWaiting, ordering: .sequentiallyConsistent)
                if exchanged { break }
                value = now
            }
        }

        override package func withdrawn() {
            let m = lock
            // The last writer out withdraws the mark (a writer counted in meanwhile is woken to
            // re-validate; else the parked readers go), as `abandonWrite`.
            if Words.countWaiting(m, by: UInt32.max) == 0 {
                let value = Words.state(m).pointee.bitwiseAnd(~Words.writersWaiting, ordering: .sequentiallyConsistent).oldValue
                Words.wakeWriterOrReaders(m, shared: value & Words.shared != 0)
            }
        }

        /// Takes the lock if free (marked or not: this writer is counted); else marks it and
        /// sleeps on `wakeups` with the sequence read before the state, as `writeLockSlow`.
        override package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
            let m = lock
            while true {
                let sequence = Words.wakeups(m).pointee.load(ordering: .sequentiallyConsistent)
                let value = Words.state(m).pointee.load(ordering: .sequentiallyConsistent)
                if Words.isImpossible(value) {
                    Words.countWaiting(m, by: UInt32.max)
                    return EINVAL
                }
                if value & (Words.writer | Words.readerMask | Words.upgradable) == 0 {
                    if takeCounted(value, runtime) { return 0 }
                    continue
                }
                if value & Words.writersWaiting == 0 {
                    if !Words.state(m).pointee.compareExchange(expected: value, desired: value | Words.writersWaiting,
                                                               ordering: .sequentiallyConsistent).exchanged { continue }
                }
                observed = sequence
                return EBUSY
            }
        }

        /// `RWLockWords.takeAfterWaiting` for this process's async holder.
        private func takeCounted(_ value: UInt32, _ runtime: AsyncRuntime) -> Bool {
            let m = lock
            let others = Words.waiting(m).pointee.load(ordering: .sequentiallyConsistent) != 1
            let next = (value & ~Words.writersWaiting) | Words.writer | (others ? Words.writersWaiting : 0)
            guard Words.state(m).pointee.compareExchange(expected: value, desired: next,
                                                         ordering: .sequentiallyConsistent).exchanged else { return false }
            tookWrite(m, holder: task, runtime: runtime)
            if Words.countWaiting(m, by: UInt32.max) == 0
                && Words.state(m).pointee.load(ordering: .sequentiallyConsistent) & Words.writersWaiting != 0 {
                Words.state(m).pointee.bitwiseAnd(~Words.writersWaiting, ordering: .sequentiallyConsistent)
                Words.wakeWriterOrReaders(m, shared: value & Words.shared != 0)
            }
            return true
        }
    }

    // MARK: for tasks

    /// Takes a read lock for the calling task, suspending it while a writer holds or waits.
    /// 0, ECANCELED (nothing held), ETIMEDOUT, EDEADLK, EAGAIN, EINVAL.
    package static func readLock(_ m: UnsafeMutableRawPointer, deadline: Int64, keepAlive: AnyObject?) async -> Int32 {
        let (task, cancelled) = AsyncWait.currentTask()
        if cancelled { return ECANCELED }
        if let first = tryReadFirst(m, deadline: deadline, holder: task) { return first }
        let waiter = ReadWaiter(m, task: task, deadline: deadline, keepAlive: keepAlive)
        return await AsyncWait.suspend(waiter) { _ = Words.readUnlock(m) }
    }

    /// Takes the write lock for the calling task, suspending it while the lock is held.
    /// 0, ECANCELED (nothing held), ETIMEDOUT, EDEADLK, EINVAL.
    package static func writeLock(_ m: UnsafeMutableRawPointer, deadline: Int64, keepAlive: AnyObject?) async -> Int32 {
        let (task, cancelled) = AsyncWait.currentTask()
        if cancelled { return ECANCELED }
        if let first = tryWriteFirst(m, deadline: deadline, holder: task) { return first }
        let waiter = WriteWaiter(m, task: task, deadline: deadline, keepAlive: keepAlive)
        return await AsyncWait.suspend(waiter) { _ = writeUnlock(m, holder: task) }
    }
}

/// The async forms. A task that waits is suspended, not a thread: threads, tasks and other
/// processes share the same lock (writer preference included). The write holder is the task
/// (docs/async.md): the task that took it releases it with `writeUnlock()` (or `downgrade()`),
/// on whatever thread it runs; nobody else can. A read lock has no owner, as in the blocking
/// form: release it with `readUnlock()`.
extension SyncRWLock {
    /// Takes a read lock, suspending the task while a writer holds or waits. Throws
    /// `CancellationError` if the task is cancelled first (no read lock is then held),
    /// `LockError.wouldDeadlock` if the task holds the write lock.
    public func readLock() async throws {
        try await AsyncWait.check(AsyncRWLock.readLock(memory.raw, deadline: Deadline.none, keepAlive: memory))
    }

    /// As `readLock()`, false once `timeout` has passed; a zero or negative timeout is one try.
    public func readLock(timeout: Duration) async throws -> Bool {
        try await AsyncWait.timed(AsyncRWLock.readLock(memory.raw, deadline: Deadline.after(timeout),
                                                       keepAlive: memory))
    }

    /// Takes the write lock, suspending the task while the lock is held. Throws
    /// `CancellationError` if the task is cancelled first (the lock is then not held),
    /// `LockError.wouldDeadlock` if the task holds it already.
    public func writeLock() async throws {
        try await AsyncWait.check(AsyncRWLock.writeLock(memory.raw, deadline: Deadline.none, keepAlive: memory))
    }

    /// As `writeLock()`, false once `timeout` has passed; a zero or negative timeout is one try.
    public func writeLock(timeout: Duration) async throws -> Bool {
        try await AsyncWait.timed(AsyncRWLock.writeLock(memory.raw, deadline: Deadline.after(timeout),
                                                        keepAlive: memory))
    }

    /// Whether the calling task holds the write lock (taken with an async form).
    public var isWriteLockedByCurrentTask: Bool {
        AsyncRWLock.isWriteLocked(memory.raw, by: AsyncWait.currentTask().task)
    }

    /// Runs `body` holding a read lock, which it may hold across `await`s; releases it even if
    /// `body` throws. Throws `CancellationError` if the task is cancelled before the lock is
    /// granted. Traps, as the blocking form, if the task holds the write lock.
    public func withReadLock<R>(_ body: () async throws -> R) async throws -> R {
        let result = await AsyncRWLock.readLock(memory.raw, deadline: Deadline.none, keepAlive: memory)
        if result == ECANCELED { throw CancellationError() }
        if result != 0 { lockFailed(result, "SyncRWLock.withReadLock") }
        defer { _ = RWLockWords.readUnlock(memory.raw) }
        return try await body()
    }

    /// Runs `body` holding the write lock, which it may hold across `await`s; releases it even
    /// if `body` throws. `body` may `downgrade()`: the read lock it then holds is released.
    /// Throws `CancellationError` if the task is cancelled before the lock is granted. Traps,
    /// as the blocking form, if the task holds it already.
    public func withWriteLock<R>(_ body: () async throws -> R) async throws -> R {
        let task = AsyncWait.currentTask().task
        let result = await AsyncRWLock.writeLock(memory.raw, deadline: Deadline.none, keepAlive: memory)
        if result == ECANCELED { throw CancellationError() }
        if result != 0 { lockFailed(result, "SyncRWLock.withWriteLock") }
        defer {
            if AsyncRWLock.isWriteLocked(memory.raw, by: task) { _ = AsyncRWLock.writeUnlock(memory.raw, holder: task) }
            else { _ = RWLockWords.readUnlock(memory.raw) }  // downgraded
        }
        return try await body()
    }
}
