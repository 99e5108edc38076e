import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// Runs `total` attempts from `workers` tasks (total / workers each): each attempt is a task
/// that runs `attempt(worker, index)` and is cancelled at random (at once, after one yield,
/// after one to three, or not at all). Returns how many attempts returned true (not cancelled
/// first). AsyncTests.testCancellationStorm has the same storm for the mutex.
func cancellationStorm(total: Int, workers: Int,
                       _ attempt: @escaping @Sendable (_ worker: Int, _ index: Int) async throws -> Bool) async -> Int {
    await withTaskGroup(of: Int.self) { group in
        for worker in 0..<workers {
            group.addTask {
                var mine = 0
                for i in 0..<(total / workers) {
                    let task = Task { try await attempt(worker, i) }
                    switch Int.random(in: 0..<4) {
                    case 0: task.cancel()
                    case 1: await Task.yield(); task.cancel()
                    case 2: for _ in 0..<Int.random(in: 1...3) { await Task.yield() }; task.cancel()
                    default: break
                    }
                    if (try? await task.value) == true { mine += 1 }
                }
                return mine
            }
        }
        return await group.reduce(0, +)
    }
}

/// The async forms of the primitives beyond the mutex (docs/async.md): the read-write lock, the
/// semaphore, the event, the barrier and the condition lock. Tasks suspend on the waker; threads
/// blocked in the blocking forms share the same primitive.
final class AsyncPrimitivesTests: XCTestCase {
    final class Counter: @unchecked Sendable { var value = 0 }
    /// Two values a writer keeps equal; a reader that sees them differ overlapped a writer.
    final class Pair: @unchecked Sendable { var a = 0, b = 0, overlaps = 0 }

    /// The process's threads now (/proc/self/task).
    func threadCount() -> Int {
        guard let dir = opendir("/proc/self/task") else { return -1 }
        defer { closedir(dir) }
        var count = 0
        while let entry = readdir(dir) {
            if entry.pointee.d_name.0 != 46 { count += 1 }  // not "." or ".."
        }
        return count
    }

    /// Waits (suspended) until `condition` holds.
    func until(_ condition: () -> Bool) async {
        while !condition() { try? await Task.sleep(for: .milliseconds(1)) }
    }

    /// Starts the waker and the pool's threads, so that a count of threads taken next does not
    /// include them.
    func warmUp() async throws {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<64 { group.addTask { try? await Task.sleep(for: .milliseconds(1)) } }
        }
        let warm = SyncMutex()
        try await warm.lock()
        let warming = Task { try await warm.lock(); try warm.unlock() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        try warm.unlock()
        try await warming.value
    }

    // MARK: read-write lock

    func rwState(_ lock: SyncRWLock) -> UInt32 { RWLockWords.state(lock.memory.raw).pointee.load(ordering: .relaxed) }

    /// A read-write lock in its shared (process-shared futex) mode or not.
    func makeRWLock(shared: Bool) -> SyncRWLock {
        let lock = SyncRWLock()
        if shared { RWLockWords.initialize(lock.memory.raw, shared: true) }
        return lock
    }

    /// Whether the lock is free, with nothing marked or counted.
    func isFree(_ lock: SyncRWLock) -> Bool {
        rwState(lock) & ~(RWLockWords.shared | RWLockWords.readersParked) == 0 && RWLockWords.waitingWriters(lock.memory.raw) == 0
    }

    static func blockingReadLock(_ lock: SyncRWLock) throws { try lock.readLock() }
    static func blockingWriteLock(_ lock: SyncRWLock) throws { try lock.writeLock() }
    static func blockingWithWriteLock(_ lock: SyncRWLock, _ body: () -> Void) { lock.withWriteLock(body) }
    static func blockingWithReadLock(_ lock: SyncRWLock, _ body: () -> Void) { lock.withReadLock(body) }

    func testRWLockBothSidesAndOwnerQueries() async throws {
        for shared in [false, true] {
            let lock = makeRWLock(shared: shared)
            try await lock.writeLock()
            XCTAssertTrue(lock.isWriteLockedByCurrentTask)
            XCTAssertFalse(RWLockWords.isWriteLockedByCaller(lock.memory.raw))
            XCTAssertEqual(RWLockWords.owner(lock.memory.raw).pointee.load(ordering: .relaxed), AsyncHold.token)
            XCTAssertFalse(lock.tryReadLock())
            try lock.writeUnlock()
            XCTAssertFalse(lock.isWriteLockedByCurrentTask)
            XCTAssertTrue(isFree(lock))
            try await lock.readLock()
            try await lock.readLock()   // readers share it, the same task too
            XCTAssertFalse(lock.tryWriteLock())
            try lock.readUnlock()
            try lock.readUnlock()
            XCTAssertTrue(isFree(lock))
            let value = try await lock.withWriteLock { () async -> Int in
                await Task.yield()  // may resume on another thread, still holding it
                XCTAssertTrue(lock.isWriteLockedByCurrentTask)
                return 7
            }
            XCTAssertEqual(value, 7)
            let read = try await lock.withReadLock { () async -> Int in
                await Task.yield()
                XCTAssertFalse(lock.tryWriteLock())
                return 8
            }
            XCTAssertEqual(read, 8)
            XCTAssertTrue(isFree(lock))
        }
    }

    func testRWLockDowngradeOfATasksWriteLock() async throws {
        let lock = SyncRWLock()
        try await lock.writeLock()
        let reader = Task { try await lock.readLock(); try lock.readUnlock() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        try lock.downgrade()           // the task's write lock becomes a read lock: the reader joins
        try await reader.value
        XCTAssertFalse(lock.isWriteLockedByCurrentTask)
        XCTAssertFalse(lock.tryWriteLock())
        XCTAssertThrowsError(try lock.downgrade()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try lock.readUnlock()
        XCTAssertTrue(isFree(lock))
        // Inside withWriteLock: the read lock it ends with is released.
        try await lock.withWriteLock { () async throws in
            await Task.yield()
            try lock.downgrade()
            XCTAssertTrue(lock.tryReadLock())
            try lock.readUnlock()
        }
        XCTAssertTrue(isFree(lock))
    }

    func testRWLockAcquireWhileHoldingTheWriteLockIsADeadlockError() async throws {
        let lock = makeRWLock(shared: true)
        try await lock.writeLock()
        for attempt in 0..<4 {
            do {
                switch attempt {
                case 0: try await lock.writeLock()
                case 1: try await lock.readLock()
                case 2: _ = try await lock.writeLock(timeout: .seconds(60))
                default: _ = try await lock.readLock(timeout: .seconds(60))
                }
                XCTFail("acquire \(attempt) by the write holder returned")
            } catch let error as LockError {
                XCTAssertEqual(error, .wouldDeadlock)
            }
        }
        // The blocking forms, called by the task that holds it: the same error, not a hang.
        XCTAssertThrowsError(try Self.blockingReadLock(lock)) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        XCTAssertThrowsError(try Self.blockingWriteLock(lock)) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try lock.writeUnlock()
        XCTAssertTrue(isFree(lock))
    }

    func testRWLockReleaseByANonHolderIsNotOwner() async throws {
        let lock = SyncRWLock()
        XCTAssertThrowsError(try lock.writeUnlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertThrowsError(try lock.readUnlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try await lock.writeLock()
        let other = await Task.detached { () -> [LockError?] in
            var seen: [LockError?] = []
            do { try lock.writeUnlock(); seen.append(nil) } catch { seen.append(error as? LockError) }
            do { try lock.downgrade(); seen.append(nil) } catch { seen.append(error as? LockError) }
            do { try lock.readUnlock(); seen.append(nil) } catch { seen.append(error as? LockError) }
            return seen
        }.value
        XCTAssertEqual(other, [.notOwner, .notOwner, .notOwner])
        let seen = Slot<LockError>()
        JoinableThread { do { try lock.writeUnlock() } catch { seen.value = error as? LockError } }.join()
        XCTAssertEqual(seen.value, .notOwner)
        XCTAssertTrue(lock.isWriteLockedByCurrentTask)
        try lock.writeUnlock()
    }

    func testRWLockTimeoutsFollowTheBlockingForm() async throws {
        let lock = SyncRWLock()
        let free = try await lock.writeLock(timeout: .zero)  // free: one try succeeds
        XCTAssertTrue(free)
        try lock.writeUnlock()
        let read = try await lock.readLock(timeout: .nanoseconds(-1))
        XCTAssertTrue(read)
        for timeout: Duration in [.zero, .nanoseconds(-1), .seconds(-5), .milliseconds(20)] {
            let taken = try await lock.writeLock(timeout: timeout)   // a reader holds it
            XCTAssertFalse(taken, "timeout \(timeout)")
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
            XCTAssertTrue(lock.tryReadLock(), "a withdrawn writer left its mark")
            try lock.readUnlock()
        }
        try lock.readUnlock()
        let writer = HeldOnThread(take: { try! Self.blockingWriteLock(lock) }, release: { try! lock.writeUnlock() })
        for timeout: Duration in [.zero, .seconds(-5), .milliseconds(20)] {
            let taken = try await lock.readLock(timeout: timeout)
            XCTAssertFalse(taken, "timeout \(timeout)")
        }
        writer.release()
        XCTAssertTrue(isFree(lock))
    }

    func testRWLockCancelledWaitersLeaveTheLockAlone() async throws {
        let lock = SyncRWLock()
        try await lock.readLock()
        let writer = Task { try await lock.writeLock() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        await until { !lock.tryReadLock() }   // marked: new readers wait behind the writer
        let reader = Task { try await lock.readLock() }
        await until { AsyncRuntime.current.pendingCount == 2 }
        writer.cancel()
        do { try await writer.value; XCTFail("a cancelled write returned") } catch is CancellationError {}
        try await reader.value    // the mark went with the writer: the reader joins
        XCTAssertFalse(lock.isWriteLockedByCurrentTask)
        try lock.readUnlock()
        try lock.readUnlock()
        XCTAssertTrue(isFree(lock))
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await lock.writeLock()
        }
        do { try await early.value; XCTFail("acquired in a cancelled task") } catch is CancellationError {}
        XCTAssertTrue(isFree(lock))
    }

    /// Acquires of both sides by 8 tasks, each in a task cancelled at a random point, while 2
    /// threads take both sides blocking: the writes counted are exactly those that returned, no
    /// reader saw a writer, and the lock ends free with nothing counted or queued.
    func testRWLockCancellationStorm() async throws {
        for shared in [false, true] {
            let lock = makeRWLock(shared: shared)
            let pair = Pair()
            let total = 16_000, workers = 8, threadRounds = 2_000
            let threads = (0..<2).map { _ in
                JoinableThread {
                    for i in 0..<threadRounds {
                        if i % 2 == 0 { Self.blockingWithWriteLock(lock) { pair.a += 1; pair.b += 1 } }
                        else { Self.blockingWithReadLock(lock) { if pair.a != pair.b { pair.overlaps += 1 } } }
                    }
                }
            }
            let succeeded = await cancellationStorm(total: total, workers: workers) { worker, i in
                let write = (i + worker) % 3 != 0
                if write {
                    try await lock.withWriteLock {
                        pair.a += 1
                        if Int.random(in: 0..<4) == 0 { await Task.yield() }
                        pair.b += 1
                    }
                } else {
                    try await lock.withReadLock {
                        if pair.a != pair.b { pair.overlaps += 1 }
                        if Int.random(in: 0..<4) == 0 { await Task.yield() }
                        if pair.a != pair.b { pair.overlaps += 1 }
                    }
                }
                return write
            }
            for thread in threads { thread.join() }
            XCTAssertEqual(pair.a, succeeded + threadRounds, "shared \(shared)")
            XCTAssertEqual(pair.a, pair.b)
            XCTAssertEqual(pair.overlaps, 0)
            XCTAssertGreaterThan(succeeded, 0)
            XCTAssertTrue(isFree(lock), "state \(String(rwState(lock), radix: 16)), waiting \(RWLockWords.waitingWriters(lock.memory.raw))")
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
    }

    /// 2,000 tasks wait on one write-held lock, readers and writers: at most 2 threads more than
    /// before; all are served, writers one at a time.
    func testRWLockManyWaitingTasksCostNoThreads() async throws {
        try await warmUp()
        let lock = makeRWLock(shared: true)
        let pair = Pair()
        let n = 2_000
        try await lock.writeLock()
        let before = threadCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<n {
                if i % 4 == 0 {
                    group.addTask { try await lock.withWriteLock { () async in pair.a += 1; await Task.yield(); pair.b += 1 } }
                } else {
                    group.addTask { try await lock.withReadLock { () async in if pair.a != pair.b { pair.overlaps += 1 } } }
                }
            }
            await until { AsyncRuntime.current.pendingCount == n }
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            try lock.writeUnlock()
            try await group.waitForAll()
        }
        XCTAssertEqual(pair.a, n / 4)
        XCTAssertEqual(pair.b, n / 4)
        XCTAssertEqual(pair.overlaps, 0)
        XCTAssertTrue(isFree(lock))
    }

    // MARK: semaphore

    func waiters(_ memory: LockMemory) -> UInt32 {
        Words(memory.raw)[1].pointee.load(ordering: .relaxed) & ~processSharedFlag
    }

    func makeSemaphore(value: UInt32, shared: Bool) -> SyncSemaphore {
        let semaphore = SyncSemaphore(value: value)
        if shared { _ = SemaphoreWord.initialize(semaphore.memory.raw, value: value, limit: nil, shared: true) }
        return semaphore
    }

    func testSemaphoreWaitTimeoutsAndCancellation() async throws {
        let semaphore = SyncSemaphore(value: 1)
        try await semaphore.wait()        // a unit, at once
        XCTAssertEqual(semaphore.value, 0)
        for timeout: Duration in [.zero, .nanoseconds(-1), .seconds(-5), .milliseconds(20)] {
            let taken = try await semaphore.wait(timeout: timeout)
            XCTAssertFalse(taken, "timeout \(timeout)")
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
            XCTAssertEqual(waiters(semaphore.memory), 0)
        }
        let waiting = Task { try await semaphore.wait() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        waiting.cancel()
        do { try await waiting.value; XCTFail("a cancelled wait returned") } catch is CancellationError {}
        XCTAssertEqual(waiters(semaphore.memory), 0)
        try semaphore.signal()
        XCTAssertEqual(semaphore.value, 1)       // the cancelled wait took nothing
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await semaphore.wait()
        }
        do { try await early.value; XCTFail("a wait in a cancelled task returned") } catch is CancellationError {}
        XCTAssertEqual(semaphore.value, 1)
        let value = try await semaphore.withUnit { () async -> UInt32 in
            await Task.yield()
            return semaphore.value
        }
        XCTAssertEqual(value, 0)
        XCTAssertEqual(semaphore.value, 1)
        // A thread blocked in wait() and a task share the units.
        let empty = SyncSemaphore()
        let thread = JoinableThread { empty.wait() }
        while waiters(empty.memory) == 0 { usleep(1000) }
        let task = Task { try await empty.wait() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        try empty.signal(count: 2)
        try await task.value
        thread.join()
        XCTAssertEqual(empty.value, 0)
    }

    /// A pool of 3 units used by 8 tasks (each use in a task cancelled at a random point) and 2
    /// threads: at most 3 users at once, every use that returned counted, the units all back.
    func testSemaphoreCancellationStorm() async throws {
        for shared in [false, true] {
            let semaphore = makeSemaphore(value: 3, shared: shared)
            let inside = Tally(), most = Tally(), counter = Tally()
            let total = 16_000, workers = 8, threadRounds = 2_000
            @Sendable func use() {
                let now = inside.value.add(1, ordering: .relaxed).newValue
                if now > most.value.load(ordering: .relaxed) { most.value.store(now, ordering: .relaxed) }
                counter.value.add(1, ordering: .relaxed)
                inside.value.subtract(1, ordering: .relaxed)
            }
            let threads = (0..<2).map { _ in
                JoinableThread { for _ in 0..<threadRounds { semaphore.wait(); use(); try! semaphore.signal() } }
            }
            let succeeded = await cancellationStorm(total: total, workers: workers) { _, _ in
                try await semaphore.withUnit {
                    use()
                    if Int.random(in: 0..<4) == 0 { await Task.yield() }
                }
                return true
            }
            for thread in threads { thread.join() }
            XCTAssertEqual(counter.value.load(ordering: .relaxed), succeeded + 2 * threadRounds)
            XCTAssertLessThanOrEqual(most.value.load(ordering: .relaxed), 3)
            XCTAssertGreaterThan(succeeded, 0)
            XCTAssertEqual(semaphore.value, 3, "shared \(shared)")
            XCTAssertEqual(waiters(semaphore.memory), 0)
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
    }

    /// 2,000 tasks wait for units: at most 2 threads more than before; a signal of 2,000 serves all.
    func testSemaphoreManyWaitingTasksCostNoThreads() async throws {
        try await warmUp()
        let semaphore = makeSemaphore(value: 0, shared: true)
        let served = Tally()
        let n = 2_000
        let before = threadCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<n { group.addTask { try await semaphore.wait(); served.value.add(1, ordering: .relaxed) } }
            await until { AsyncRuntime.current.pendingCount == n }
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            XCTAssertEqual(waiters(semaphore.memory), UInt32(n))
            try semaphore.signal(count: UInt32(n))
            try await group.waitForAll()
        }
        XCTAssertEqual(served.value.load(ordering: .relaxed), n)
        XCTAssertEqual(semaphore.value, 0)
        XCTAssertEqual(waiters(semaphore.memory), 0)
    }

    // MARK: event

    func testEventWaitSetClearTimeoutsAndCancellation() async throws {
        let event = SyncEvent()
        for timeout: Duration in [.zero, .nanoseconds(-1), .milliseconds(20)] {
            let set = try await event.wait(timeout: timeout)
            XCTAssertFalse(set, "timeout \(timeout)")
        }
        XCTAssertEqual(waiters(event.memory), 0)
        let waiting = (0..<3).map { _ in Task { try await event.wait() } }
        let cancelled = Task { try await event.wait() }
        await until { AsyncRuntime.current.pendingCount == 4 }
        cancelled.cancel()
        do { try await cancelled.value; XCTFail("a cancelled wait returned") } catch is CancellationError {}
        event.set()
        event.clear()                // every waiter saw the set
        for task in waiting { try await task.value }
        XCTAssertEqual(waiters(event.memory), 0)
        event.set()
        try await event.wait()       // set: at once
        let now = try await event.wait(timeout: .zero)
        XCTAssertTrue(now)
    }

    /// Tasks wait for an event that a thread sets and clears over and over, each wait cancelled
    /// at a random point: every wait ends (returned or cancelled), and nothing stays counted.
    func testEventCancellationStorm() async throws {
        let event = SyncEvent()
        let stop = Flag()
        let setter = JoinableThread {
            while !stop.isSet { event.set(); event.clear(); usleep(50) }
        }
        let total = 8_000, workers = 8
        let ended = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<workers {
                group.addTask {
                    var mine = 0
                    for _ in 0..<(total / workers) {
                        let attempt = Task { try await event.wait() }
                        switch Int.random(in: 0..<3) {
                        case 0: attempt.cancel()
                        case 1: await Task.yield(); attempt.cancel()
                        default: break
                        }
                        do { try await attempt.value; mine += 1 } catch is CancellationError { mine += 1 } catch {}
                    }
                    return mine
                }
            }
            return await group.reduce(0, +)
        }
        stop.set()
        setter.join()
        XCTAssertEqual(ended, total)
        XCTAssertEqual(waiters(event.memory), 0)
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
    }

    /// 2,000 tasks wait for one event: at most 2 threads more than before; one set wakes all.
    func testEventManyWaitingTasksCostNoThreads() async throws {
        try await warmUp()
        let event = SyncEvent()
        let n = 2_000
        let before = threadCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<n { group.addTask { try await event.wait() } }
            await until { AsyncRuntime.current.pendingCount == n }
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            event.set()
            try await group.waitForAll()
        }
        XCTAssertEqual(waiters(event.memory), 0)
    }

    // MARK: condition lock

    static func blockingLock(_ lock: SyncConditionLock) throws { try lock.lock() }

    func testConditionLockOwnershipDeadlockAndTimeouts() async throws {
        let lock = SyncConditionLock(condition: 0)
        try await lock.lock()
        XCTAssertTrue(lock.isHeldByCurrentTask)
        XCTAssertFalse(lock.tryLock())
        do { try await lock.lock(whenCondition: 0); XCTFail("a second lock by the holding task returned") }
        catch let error as LockError { XCTAssertEqual(error, .wouldDeadlock) }
        XCTAssertThrowsError(try Self.blockingLock(lock)) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        let other = await Task.detached { () -> LockError? in
            do { try lock.unlock(); return nil } catch { return error as? LockError }
        }.value
        XCTAssertEqual(other, .notOwner)
        let seen = Slot<LockError>()
        JoinableThread { do { try lock.unlock(withCondition: 3) } catch { seen.value = error as? LockError } }.join()
        XCTAssertEqual(seen.value, .notOwner)
        XCTAssertEqual(lock.condition, 0)
        try lock.unlock(withCondition: 2)
        XCTAssertFalse(lock.isHeldByCurrentTask)
        XCTAssertEqual(lock.condition, 2)
        for timeout: Duration in [.zero, .nanoseconds(-1), .seconds(-5), .milliseconds(20)] {
            let taken = try await lock.lock(whenCondition: 1, timeout: timeout)   // free, but 2
            XCTAssertFalse(taken, "timeout \(timeout)")
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
        let now = try await lock.lock(whenCondition: 2, timeout: .zero)
        XCTAssertTrue(now)
        try lock.unlock()
        let value = try await lock.withLock(whenCondition: 2) { () async -> (result: Int, condition: Int?) in
            await Task.yield()
            XCTAssertTrue(lock.isHeldByCurrentTask)
            return (5, 7)
        }
        XCTAssertEqual(value, 5)
        XCTAssertEqual(lock.condition, 7)
        XCTAssertTrue(lock.tryLock())
        try lock.unlock()
        let waiting = Task { try await lock.lock(whenCondition: 100) }
        await until { AsyncRuntime.current.pendingCount == 1 }
        waiting.cancel()
        do { try await waiting.value; XCTFail("a cancelled acquire returned") } catch is CancellationError {}
        XCTAssertTrue(lock.tryLock())
        try lock.unlock()
    }

    /// A task's release of a condition lock is not handed straight to a task that waits for
    /// another condition (a release of a mutex word hands it only to the mutex's own waiters).
    func testConditionLockReleaseIsNotHandedToAWaiterForAnotherCondition() async throws {
        let lock = SyncConditionLock(condition: 0)
        try await lock.lock()
        let waiting = Task { () async throws -> Bool in
            try await lock.lock(whenCondition: 1)
            let wanted = lock.condition == 1
            try lock.unlock()
            return wanted
        }
        await until { AsyncRuntime.current.pendingCount == 1 }
        try lock.unlock(withCondition: 2)
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 1, "granted with the condition 2")
        try await lock.lock()
        try lock.unlock(withCondition: 1)
        let wanted = try await waiting.value
        XCTAssertTrue(wanted)
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
    }

    /// Producers (tasks and a thread) put an item when the condition is 0 (empty) and set 1;
    /// consumers (tasks, each acquire in a task cancelled at a random point) take it when 1 and
    /// set 0 (the last sets 1 again: the others see the end). Every item put is taken exactly
    /// once; the lock ends free.
    func testConditionLockProducerConsumerWithCancellation() async throws {
        let lock = SyncConditionLock(condition: 0)
        let produced = Counter(), consumed = Counter()
        let items = 4_000, threadItems = 1_000
        let producer = JoinableThread {
            for _ in 0..<threadItems {
                try! lock.lock(whenCondition: 0)
                produced.value += 1
                try! lock.unlock(withCondition: 1)
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for _ in 0..<(items - threadItems) {
                    try await lock.lock(whenCondition: 0)
                    produced.value += 1
                    try lock.unlock(withCondition: 1)
                }
            }
            for _ in 0..<4 {
                group.addTask {
                    while true {
                        let attempt = Task { () -> Bool in
                            try await lock.withLock(whenCondition: 1) { () async -> (result: Bool, condition: Int?) in
                                if consumed.value == items { return (true, 1) }   // all taken: pass the end on
                                consumed.value += 1
                                if Int.random(in: 0..<4) == 0 { await Task.yield() }
                                return consumed.value == items ? (true, 1) : (false, 0)
                            }
                        }
                        if Int.random(in: 0..<3) == 0 { await Task.yield(); attempt.cancel() }
                        if (try? await attempt.value) == true { break }
                    }
                }
            }
            try await group.waitForAll()
        }
        producer.join()
        XCTAssertEqual(produced.value, items)
        XCTAssertEqual(consumed.value, items)
        XCTAssertEqual(lock.condition, 1)   // the end, passed on
        XCTAssertTrue(lock.tryLock())
        try lock.unlock()
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
    }

    /// 1,000 tasks wait for one condition of a held condition lock: at most 2 threads more than
    /// before; setting the condition at the release serves them all, one holder at a time.
    func testConditionLockManyWaitingTasksCostNoThreads() async throws {
        try await warmUp()
        let lock = SyncConditionLock(condition: 0)
        let inside = Tally(), served = Tally()
        let n = 1_000
        try await lock.lock()
        let before = threadCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<n {
                group.addTask {
                    try await lock.lock(whenCondition: 1)
                    XCTAssertEqual(inside.value.add(1, ordering: .relaxed).newValue, 1)
                    served.value.add(1, ordering: .relaxed)
                    inside.value.subtract(1, ordering: .relaxed)
                    try lock.unlock(withCondition: 1)
                }
            }
            await until { AsyncRuntime.current.pendingCount == n }
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            try lock.unlock(withCondition: 1)
            try await group.waitForAll()
        }
        XCTAssertEqual(served.value.load(ordering: .relaxed), n)
        XCTAssertTrue(lock.tryLock(whenCondition: 1))
        try lock.unlock()
    }

    // MARK: barrier

    /// A barrier in its process-shared mode (the condition variable's sequence as the async
    /// futex word) or its private one (the barrier's own generation word).
    func makeBarrier(parties: Int, shared: Bool, action: (@Sendable () throws -> Void)? = nil) -> SyncBarrier {
        let barrier = SyncBarrier(parties: parties, action: action)
        if shared {
            XCTAssertEqual(BarrierWord.initialize(barrier.memory.raw, parties: UInt32(parties), hasAction: action != nil,
                                                  shared: true), 0)
        }
        return barrier
    }

    /// Two threads (blocking waits) and two tasks (async waits) meet in one barrier with an
    /// action, 300 cycles: every cycle hands out each index once, and runs the action once.
    func testBarrierThreadsAndTasksMeetCycleAfterCycle() async throws {
        for shared in [false, true] {
            let cycles = 300, parties = 4
            let actions = Tally()
            let barrier = makeBarrier(parties: parties, shared: shared) { actions.value.add(1, ordering: .relaxed) }
            let seen = (0..<(cycles * parties)).map { _ in Tally() }
            let threads = (0..<2).map { _ in
                JoinableThread {
                    for cycle in 0..<cycles {
                        let index = try! barrier.wait()
                        seen[cycle * parties + index].value.add(1, ordering: .relaxed)
                    }
                }
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        for cycle in 0..<cycles {
                            let index = try await barrier.wait()
                            seen[cycle * parties + index].value.add(1, ordering: .relaxed)
                            if Bool.random() { await Task.yield() }
                        }
                    }
                }
                try await group.waitForAll()
            }
            threads.forEach { $0.join() }
            XCTAssertEqual(seen.filter { $0.value.load(ordering: .relaxed) != 1 }.count, 0, "shared \(shared)")
            XCTAssertEqual(actions.value.load(ordering: .relaxed), cycles)
            XCTAssertFalse(barrier.isBroken)
            XCTAssertEqual(barrier.waiting, 0)
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
    }

    /// A cancelled party breaks the barrier (the others, a thread among them, get .broken);
    /// reset makes it usable again.
    func testBarrierCancelledPartyBreaksIt() async throws {
        for shared in [false, true] {
            let barrier = makeBarrier(parties: 4, shared: shared)
            let thread = Slot<BarrierError>()
            let blocked = JoinableThread {
                do { _ = try barrier.wait(); XCTFail("passed a broken barrier") } catch { thread.value = error as? BarrierError }
            }
            let other = Task { () -> BarrierError? in
                do { _ = try await barrier.wait(); return nil } catch { return error as? BarrierError }
            }
            let cancelled = Task { try await barrier.wait() }
            await until { AsyncRuntime.current.pendingCount == 2 && barrier.waiting == 3 }
            cancelled.cancel()
            do { _ = try await cancelled.value; XCTFail("a cancelled party passed") } catch is CancellationError {}
            let otherError = await other.value
            XCTAssertEqual(otherError, .broken)
            blocked.join()
            XCTAssertEqual(thread.value, .broken)
            XCTAssertTrue(barrier.isBroken)
            do { _ = try await barrier.wait(); XCTFail("waited on a broken barrier") } catch let error as BarrierError {
                XCTAssertEqual(error, .broken)
            }
            barrier.reset()
            XCTAssertFalse(barrier.isBroken)
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 { group.addTask { try await barrier.wait() } }
                var indices: [Int] = []
                for try await index in group { indices.append(index) }
                XCTAssertEqual(indices.sorted(), [0, 1, 2, 3], "shared \(shared)")
            }
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
    }

    /// A party cancelled while it waits to enter (the previous cycle's action still runs)
    /// leaves the barrier alone: that cycle and the next complete.
    func testBarrierPartyCancelledBeforeItEntersChangesNothing() async throws {
        let release = SyncEvent()
        let barrier = SyncBarrier(parties: 2) { release.wait() }
        let first = JoinableThread { _ = try! barrier.wait() }
        let second = JoinableThread { _ = try! barrier.wait() }  // one of the two runs the action
        await until { barrier.waiting == 0 && !barrier.isBroken && BarrierWord.Parts(barrier.memory.raw).state == .action }
        let early = Task { try await barrier.wait() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        early.cancel()
        do { _ = try await early.value; XCTFail("a cancelled party passed") } catch is CancellationError {}
        release.set()
        first.join()
        second.join()
        XCTAssertFalse(barrier.isBroken)
        let next = Task { try await barrier.wait() }
        let blocking = Slot<Int>()
        JoinableThread { blocking.value = try? barrier.wait() }.join()
        let other = try await next.value
        XCTAssertEqual([blocking.value ?? -1, other].sorted(), [0, 1])
    }

    /// Timeouts follow the blocking form: zero or negative is one try (the barrier breaks
    /// unless this party is the last); a timeout that runs out breaks it for the others.
    func testBarrierTimeoutsFollowTheBlockingForm() async throws {
        for shared in [false, true] {
            let barrier = makeBarrier(parties: 2, shared: shared)
            for timeout: Duration in [.zero, .nanoseconds(-1), .seconds(-5)] {
                do { _ = try await barrier.wait(timeout: timeout); XCTFail("passed alone") } catch let error as BarrierError {
                    XCTAssertEqual(error, .timedOut)
                }
                XCTAssertTrue(barrier.isBroken)
                barrier.reset()
            }
            let waiting = Task { try await barrier.wait() }
            await until { barrier.waiting == 1 }
            let last = try await barrier.wait(timeout: .zero)  // the last party: one try is enough
            let firstIndex = try await waiting.value
            XCTAssertEqual([firstIndex, last].sorted(), [0, 1])
            let left = Task { () -> BarrierError? in
                do { _ = try await barrier.wait(); return nil } catch { return error as? BarrierError }
            }
            await until { barrier.waiting == 1 }
            _ = try await barrier.wait(timeout: .milliseconds(20))  // the last party: it passes
            let leftError = await left.value
            XCTAssertNil(leftError)
            let alone = Task { () -> BarrierError? in
                do { _ = try await barrier.wait(timeout: .milliseconds(20)); return nil } catch { return error as? BarrierError }
            }
            let aloneError = await alone.value
            XCTAssertEqual(aloneError, .timedOut, "shared \(shared)")
            XCTAssertTrue(barrier.isBroken)
            barrier.reset()
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
    }

    /// Cancellations at random points in cycles of three tasks: each cycle either passes for
    /// all three (distinct indices) or for none; reset between cycles; nothing hangs.
    func testBarrierCancellationStorm() async throws {
        for shared in [false, true] {
            let barrier = makeBarrier(parties: 3, shared: shared)
            var passedCycles = 0
            for _ in 0..<300 {
                let parties = (0..<3).map { _ in Task { try await barrier.wait() } }
                let victim = parties[Int.random(in: 0..<3)]
                switch Int.random(in: 0..<4) {
                case 0: victim.cancel()
                case 1: await Task.yield(); victim.cancel()
                case 2: for _ in 0..<Int.random(in: 1...3) { await Task.yield() }; victim.cancel()
                default: break
                }
                // A victim cancelled before it entered left the barrier alone: the other two
                // would wait for a third party; abort frees them (a cycle passed by none).
                if case .failure = await victim.result, !barrier.isBroken { barrier.abort() }
                var indices: [Int] = []
                for party in parties { if let index = try? await party.value { indices.append(index) } }
                XCTAssertTrue(indices.isEmpty || indices.sorted() == [0, 1, 2], "indices \(indices)")
                if indices.count == 3 { passedCycles += 1 }
                XCTAssertEqual(barrier.waiting, 0)
                barrier.reset()
            }
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
            XCTAssertGreaterThan(passedCycles, 0)
        }
    }

    /// 1,000 tasks wait in a barrier for 1,001 parties: at most 2 threads more than before;
    /// the last party (this task) releases them all, each index once.
    func testBarrierManyWaitingTasksCostNoThreads() async throws {
        try await warmUp()
        let n = 1_000
        let barrier = SyncBarrier(parties: n + 1)
        let before = threadCount()
        let seen = (0...n).map { _ in Tally() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<n {
                group.addTask { seen[try await barrier.wait()].value.add(1, ordering: .relaxed) }
            }
            await until { barrier.waiting == n && AsyncRuntime.current.pendingCount == n }
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            seen[try await barrier.wait()].value.add(1, ordering: .relaxed)
            try await group.waitForAll()
        }
        XCTAssertEqual(seen.filter { $0.value.load(ordering: .relaxed) != 1 }.count, 0)
    }
}
