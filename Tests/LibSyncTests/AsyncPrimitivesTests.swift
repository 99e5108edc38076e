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
}
