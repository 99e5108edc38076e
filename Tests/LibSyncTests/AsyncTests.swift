import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// The async forms of the mutex (docs/async.md): tasks suspend instead of parking threads; one
/// waker thread serves every waiting task; threads, tasks and other processes exclude one another.
final class AsyncTests: XCTestCase {
    final class Counter: @unchecked Sendable { var value = 0 }

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

    /// A fork()ed child's work: `rounds` blocking increments under `mutex`, then exit.
    static func blockingRounds(_ mutex: SyncMutex, _ count: UnsafeMutablePointer<Int>, _ rounds: Int) -> Never {
        alarm(300)
        for _ in 0..<rounds { mutex.withLock { count.pointee += 1 } }
        _exit(0)
    }

    /// A fork()ed child's work: takes `mutex` (blocking), says so on `fd`, waits to be killed.
    static func holdUntilKilled(_ mutex: SyncMutex, _ fd: Int32) -> Never {
        alarm(300)
        try? mutex.lock()
        var one: UInt8 = 1
        _ = write(fd, &one, 1)
        while true { pause() }
    }

    func word(_ mutex: SyncMutex) -> UInt32 { mutex.word.pointee.load(ordering: .relaxed) }

    func testLockUnlockAndOwnerQueries() async throws {
        for options in [LockOptions(), .shared, .robust, [.shared, .robust]] {
            let mutex = SyncMutex(options: options)
            try await mutex.lock()
            XCTAssertTrue(mutex.isHeldByCurrentTask)
            XCTAssertFalse(mutex.isHeldByCurrentThread)
            XCTAssertEqual(word(mutex) & MutexWord.holderMask, AsyncHold.token)
            try mutex.unlock()
            XCTAssertFalse(mutex.isHeldByCurrentTask)
            XCTAssertEqual(word(mutex) & MutexWord.holderMask, 0)
            let value = try await mutex.withLock { () async -> Int in
                await Task.yield()  // may resume on another thread, still holding it
                XCTAssertTrue(mutex.isHeldByCurrentTask)
                return 7
            }
            XCTAssertEqual(value, 7)
            XCTAssertFalse(MutexWord.isLocked(mutex.word))
        }
    }

    func testAcquireOfAHeldLockIsADeadlockError() async throws {
        let mutex = SyncMutex(options: .shared)
        try await mutex.lock()
        do {
            try await mutex.lock()
            XCTFail("a second lock by the holding task returned")
        } catch let error as LockError {
            XCTAssertEqual(error, .wouldDeadlock)
        }
        // The blocking form, called by the task that holds it: the same error, not a hang.
        XCTAssertThrowsError(try Self.blockingLock(mutex)) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try mutex.unlock()
    }

    static func blockingLock(_ mutex: SyncMutex) throws { try mutex.lock() }

    func testReleaseByANonHolderIsNotOwner() async throws {
        let mutex = SyncMutex()
        XCTAssertThrowsError(try mutex.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }  // free
        try await mutex.lock()
        // Another task, and a plain thread, are not the holder.
        let other = await Task.detached { () -> LockError? in
            do { try mutex.unlock(); return nil } catch { return error as? LockError }
        }.value
        XCTAssertEqual(other, .notOwner)
        let seen = Slot<LockError>()
        JoinableThread { do { try mutex.unlock() } catch { seen.value = error as? LockError } }.join()
        XCTAssertEqual(seen.value, .notOwner)
        XCTAssertTrue(mutex.isHeldByCurrentTask)
        try mutex.unlock()
    }

    func testTimeoutsFollowTheBlockingForm() async throws {
        let mutex = SyncMutex()
        let free = try await mutex.lock(timeout: .zero)  // free: one try succeeds
        XCTAssertTrue(free)
        try mutex.unlock()
        let holder = HeldOnThread(mutex)
        for timeout: Duration in [.zero, .nanoseconds(-1), .seconds(-5), .milliseconds(20)] {
            let taken = try await mutex.lock(timeout: timeout)
            XCTAssertFalse(taken, "timeout \(timeout)")
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
        XCTAssertTrue(MutexWord.isLocked(mutex.word))
        holder.release()
        let later = try await mutex.lock(timeout: .seconds(60))
        XCTAssertTrue(later)
        try mutex.unlock()
        XCTAssertEqual(word(mutex), 0)
    }

    func testCancelledTaskThrowsAndLeavesTheLockAlone() async throws {
        let mutex = SyncMutex(options: .shared)
        let holder = HeldOnThread(mutex)
        let waiting = Task { try await mutex.lock() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        waiting.cancel()
        do {
            try await waiting.value
            XCTFail("a cancelled acquire returned")
        } catch is CancellationError {}
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        holder.release()
        XCTAssertEqual(word(mutex) & MutexWord.holderMask, 0)
        // Cancelled before it starts: throws without taking the lock.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await mutex.lock()
        }
        do { try await early.value; XCTFail("acquired in a cancelled task") } catch is CancellationError {}
        XCTAssertFalse(MutexWord.isLocked(mutex.word))
    }

    /// 100,000 acquires by 8 tasks, each acquire in a task cancelled at a random point, while 2
    /// threads take the lock blocking: the guarded counter counts exactly the acquires that
    /// returned, and the lock ends free with nothing queued.
    func testCancellationStorm() async throws {
        let mutex = SyncMutex(options: .shared)
        let counter = Counter()
        let total = 100_000, workers = 8, threadRounds = 5_000
        // Threads block on the same lock meanwhile: a wakeup the waker takes for a withdrawn
        // waiter must reach them (or they hang).
        let threads = (0..<2).map { _ in
            JoinableThread { for _ in 0..<threadRounds { mutex.withLock { counter.value += 1 } } }
        }
        let succeeded = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<workers {
                group.addTask {
                    var mine = 0
                    for _ in 0..<(total / workers) {
                        let attempt = Task {
                            try await mutex.withLock {
                                counter.value += 1
                                if Int.random(in: 0..<4) == 0 { await Task.yield() }
                            }
                        }
                        switch Int.random(in: 0..<4) {
                        case 0: attempt.cancel()
                        case 1: await Task.yield(); attempt.cancel()
                        case 2: for _ in 0..<Int.random(in: 1...3) { await Task.yield() }; attempt.cancel()
                        default: break
                        }
                        if (try? await attempt.value) != nil { mine += 1 }
                    }
                    return mine
                }
            }
            return await group.reduce(0, +)
        }
        for thread in threads { thread.join() }
        XCTAssertEqual(counter.value, succeeded + 2 * threadRounds)
        XCTAssertGreaterThan(succeeded, 0)
        XCTAssertLessThan(succeeded, total)
        XCTAssertEqual(word(mutex) & ~MutexWord.waiters, MutexWord.shared)  // free (a stale WAITERS bit only costs a wake)
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
    }

    /// 10,000 tasks wait on one shared mutex; the process has at most 2 more threads than before
    /// they waited (the waker, started by a first wait, is counted before: the waiting itself
    /// adds none; the bound is the issue's).
    func testTenThousandWaitingTasksCostAtMostTwoThreads() async throws {
        let mutex = SyncMutex(options: .shared)
        let counter = Counter()
        let n = 10_000
        // Count before what the waiting does not add: the cooperative pool's threads, the
        // timer thread of Task.sleep (which `until` uses) and the waker, once started.
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<64 { group.addTask { try? await Task.sleep(for: .milliseconds(1)) } }
        }
        let warm = SyncMutex()
        try await warm.lock()
        let warming = Task { try await warm.lock(); try warm.unlock() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        try warm.unlock()
        try await warming.value
        try await mutex.lock()
        let before = threadCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<n { group.addTask { try await mutex.withLock { () async in counter.value += 1 } } }
            await until { AsyncRuntime.current.pendingCount == n }
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            try mutex.unlock()
            try await group.waitForAll()
        }
        XCTAssertEqual(counter.value, n)
        XCTAssertFalse(MutexWord.isLocked(mutex.word))
    }

    /// More distinct locks waited on than one futex_waitv watches (127): every waiter is served.
    func testMoreWaitedWordsThanOneWaitWatches() async throws {
        let mutexes = (0..<300).map { i in SyncMutex(options: i % 2 == 0 ? [] : .shared) }
        for mutex in mutexes { try await mutex.lock() }
        let served = Tally()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for mutex in mutexes {
                group.addTask { try await mutex.withLock { () async in _ = served.value.add(1, ordering: .relaxed) } }
            }
            await until { AsyncRuntime.current.pendingCount == mutexes.count }
            for mutex in mutexes.reversed() { try mutex.unlock() }
            try await group.waitForAll()
        }
        XCTAssertEqual(served.value.load(ordering: .relaxed), mutexes.count)
        for mutex in mutexes { XCTAssertFalse(MutexWord.isLocked(mutex.word)) }
    }

    /// Threads blocked in lock() and tasks awaiting lock() exclude one another on one lock.
    func testThreadsAndTasksContend() async throws {
        for options in [LockOptions(), .shared, .robust] {
            let mutex = SyncMutex(options: options)
            let counter = Counter()
            let threadRounds = 5_000, taskRounds = 2_000, threads = 2, tasks = 4
            let joined = (0..<threads).map { _ in
                JoinableThread { for _ in 0..<threadRounds { mutex.withLock { counter.value += 1 } } }
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<tasks {
                    group.addTask { for _ in 0..<taskRounds { try await mutex.withLock { () async in counter.value += 1 } } }
                }
                try await group.waitForAll()
            }
            for thread in joined { thread.join() }
            XCTAssertEqual(counter.value, threads * threadRounds + tasks * taskRounds, "\(options)")
            XCTAssertFalse(MutexWord.isLocked(mutex.word))
        }
    }

    /// A second process contends with tasks on a shared mutex in shared memory.
    func testTasksAndAnotherProcessContend() async throws {
        let size = 4096
        let mapping = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)!
        XCTAssertNotEqual(mapping, MAP_FAILED)
        defer { munmap(mapping, size) }
        let mutex = try SyncMutex(at: mapping, options: .shared, initialize: true)
        nonisolated(unsafe) let count = (mapping + 64).assumingMemoryBound(to: Int.self)
        count.pointee = 0
        let rounds = 3_000
        let pid = fork()
        if pid == 0 {
            Self.blockingRounds(mutex, count, rounds)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask { for _ in 0..<rounds { try await mutex.withLock { () async in count.pointee += 1 } } }
            }
            try await group.waitForAll()
        }
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(status, 0)
        XCTAssertEqual(count.pointee, 5 * rounds)
        XCTAssertFalse(MutexWord.isLocked(mutex.word))
    }

    /// fork() while a task waits: the child has no waiter and no waker thread, and its locks work.
    func testForkedChildHasNoWaitersAndNoWaker() async throws {
        let mutex = SyncMutex(options: .shared)
        let holder = HeldOnThread(mutex)
        let waiting = Task { try await mutex.lock(); try mutex.unlock() }
        await until { AsyncRuntime.current.pendingCount == 1 }
        let other = SyncMutex()
        let pid = fork()
        if pid == 0 { Self.checkForkedChild(other) }
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(status, 0, "the child found waiters, threads, or a lock that did not work")
        holder.release()
        try await waiting.value
        XCTAssertFalse(MutexWord.isLocked(mutex.word))
    }

    /// A fork()ed child's checks: exit status 0 if they hold.
    static func checkForkedChild(_ mutex: SyncMutex) -> Never {
        alarm(300)
        var tasks = 0
        if let dir = opendir("/proc/self/task") {
            while let entry = readdir(dir) {
                if entry.pointee.d_name.0 != 46 { tasks += 1 }  // not "." or ".."
            }
            closedir(dir)
        }
        let ok = AsyncRuntime.current.pendingCount == 0 && tasks == 1
            && (try? mutex.tryLock()) == true && (try? mutex.unlock()) != nil
        _exit(ok ? 0 : 1)
    }

    /// A robust shared mutex whose holder process is SIGKILLed: the awaiting task gets
    /// `.ownerDied` holding it; once consistent, it is usable again.
    func testKilledHolderProcessReachesTheAwaitingTask() async throws {
        let size = 4096
        let mapping = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)!
        defer { munmap(mapping, size) }
        let mutex = try SyncMutex(at: mapping, options: [.shared, .robust], initialize: true)
        var ready: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ready), 0)
        let pid = fork()
        if pid == 0 {
            Self.holdUntilKilled(mutex, ready[1])
        }
        var byte: UInt8 = 0
        XCTAssertEqual(read(ready[0], &byte, 1), 1)
        close(ready[0]); close(ready[1])
        // The task that gets .ownerDied holds the lock: it repairs, marks it consistent, releases.
        let waiting = Task { () -> (LockError?, Bool) in
            var seen: LockError? = nil
            do { try await mutex.lock() } catch { seen = error as? LockError }
            let held = mutex.isHeldByCurrentTask
            if seen == .ownerDied { try? mutex.consistent() }
            try? mutex.unlock()
            return (seen, held)
        }
        await until { AsyncRuntime.current.pendingCount == 1 }
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        let (error, held) = await waiting.value
        XCTAssertEqual(error, .ownerDied)
        XCTAssertTrue(held)
        let again = try await mutex.lock(timeout: .zero)  // consistent: usable again
        XCTAssertTrue(again)
        try mutex.unlock()
    }
}

/// A value a thread sets and its joiner reads (the join orders them).
final class Slot<T>: @unchecked Sendable { var value: T? }

/// A count threads share.
final class Tally: Sendable { let value = Atomic<Int>(0) }

/// A flag threads share.
final class Flag: Sendable {
    let value = Atomic<UInt32>(0)
    func set() { value.store(1, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) != 0 }
}

/// A lock (a mutex, or what `take` takes) held by a thread of its own until `release()`.
final class HeldOnThread: @unchecked Sendable {
    private let released = Flag()
    private var thread: JoinableThread?

    convenience init(_ mutex: SyncMutex) {
        self.init(take: { try! mutex.lock() }, release: { try! mutex.unlock() })
    }

    /// Held by `take` on a thread of its own until `release()`, which then calls `release`.
    init(take: @escaping @Sendable () -> Void, release: @escaping @Sendable () -> Void) {
        let taken = Flag(), released = released
        thread = JoinableThread {
            take()
            taken.set()
            while !released.isSet { usleep(1000) }
            release()
        }
        while !taken.isSet { usleep(100) }
    }

    func release() {
        released.set()
        thread?.join()
    }
}
