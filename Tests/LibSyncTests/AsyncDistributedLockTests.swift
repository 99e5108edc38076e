import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// The async forms of the distributed lock (docs/async.md) on the three backends: the file
/// system always, PostgreSQL and Redis against private servers (scripts/servers.sh; skipped
/// loudly where they cannot be installed). A waiting task is suspended between tries, the holder
/// is the task, and cancellation never leaves the lock taken or lost.
final class AsyncDistributedLockTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    nonisolated(unsafe) private static var directory = ""
    private static let script = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        + "/scripts/servers.sh"

    override class func setUp() {
        var lockTemplate = Array("/tmp/libsync-async-dlock-XXXXXX".utf8CString)
        directory = String(cString: mkdtemp(&lockTemplate)!)
        if let given = getenv("LIBSYNC_TEST_SERVERS") {
            servers = String(cString: given)
            return
        }
        var template = Array("/tmp/libsync-servers-swift-async-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        // Each writes its servers' URL files where it could start them (a missing one: skipped).
        _ = system("'\(script)' start '\(servers)'")
        _ = system("'\(script)' start-etcd '\(servers)'")
    }

    override class func tearDown() {
        _ = system("rm -rf '\(directory)'")
        if getenv("LIBSYNC_TEST_SERVERS") == nil {
            _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
        }
    }

    nonisolated(unsafe) private static var counter = 0
    private static func serial() -> Int { counter += 1; return counter }

    /// A fresh lock target on `backend`: "file" (a path in a private directory), "postgres",
    /// "redis" or "etcd" (the private server's URL, with a fresh lock name).
    private func target(_ backend: String) throws -> String {
        if backend == "file" { return Self.directory + "/lock-\(Self.serial())" }
        guard let file = fopen(Self.servers + "/\(backend).url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING the \(backend) backend: scripts/servers.sh could not install or start it !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        let text = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text + "?lock=swift-async\(getpid())-\(backend)-\(Self.serial())"
    }

    /// Waits (suspended) until `condition` holds.
    private func until(_ condition: () -> Bool) async {
        while !condition() { try? await Task.sleep(for: .milliseconds(1)) }
    }

    /// The process's threads now (/proc/self/task).
    private func threadCount() -> Int {
        guard let dir = opendir("/proc/self/task") else { return -1 }
        defer { closedir(dir) }
        var count = 0
        while let entry = readdir(dir) {
            if entry.pointee.d_name.0 != 46 { count += 1 }  // not "." or ".."
        }
        return count
    }

    /// Whether a fresh object (so no task or thread of this test) takes the lock at once.
    private func isFree(_ target: String) throws -> Bool {
        let probe = try DistributedLock(target)
        guard try probe.tryLock() else { return false }
        try probe.unlock()
        return true
    }

    /// Expects `body` to throw a `DistributedLockError` with errno `code`.
    private func expect(_ code: Int32, _ body: () async throws -> Void,
                        file: StaticString = #filePath, line: UInt = #line) async {
        do {
            try await body()
            XCTFail("no error, expected errno \(code)", file: file, line: line)
        } catch {
            XCTAssertEqual((error as? DistributedLockError)?.code, code, "\(error)", file: file, line: line)
        }
    }

    // MARK: each backend

    func testFile() async throws { try await checkBackend("file", stormRounds: 2_000) }

    func testPostgreSQL() async throws { try await checkBackend("postgres", stormRounds: 200) }

    func testRedis() async throws { try await checkBackend("redis", stormRounds: 200) }

    /// etcd (whose async wait polls: docs/async.md).
    func testEtcd() async throws { try await checkBackend("etcd", stormRounds: 200) }

    private func checkBackend(_ backend: String, stormRounds: Int) async throws {
        try await checkAcquireRelease(try target(backend))
        try await checkTimeouts(try target(backend))
        try await checkCancellation(try target(backend))
        try await checkContention(try target(backend), threadRounds: backend == "file" ? 300 : 50,
                                  taskRounds: backend == "file" ? 150 : 25)
        try await checkStorm(try target(backend), total: stormRounds)
    }

    /// The task is the holder across awaits (on whatever thread it resumes); another task or a
    /// thread is not; a second acquire by the task is `.alreadyHeld`; unlock frees it.
    private func checkAcquireRelease(_ target: String) async throws {
        let lock = try DistributedLock(target)
        try await lock.lock()
        for _ in 0..<10 { try await Task.sleep(for: .milliseconds(1)) }  // may resume elsewhere
        XCTAssertTrue(lock.isHeld)
        XCTAssertNotNil(lock.token)
        XCTAssertFalse(try isFree(target))
        await expect(EDEADLK) { _ = try await lock.tryLock(timeout: .zero) }
        await expect(EDEADLK) { try await lock.lock() }
        let (otherSees, otherUnlock) = await Task { () -> (Bool, DistributedLockError?) in
            do { try lock.unlock() } catch { return (lock.isHeld, error as? DistributedLockError) }
            return (lock.isHeld, nil)
        }.value
        XCTAssertFalse(otherSees)
        XCTAssertEqual(otherUnlock, .notHeld)
        let threadUnlock = ErrorSlot()
        JoinableThread { do { try lock.unlock() } catch { threadUnlock.value = error as? DistributedLockError } }.join()
        XCTAssertEqual(threadUnlock.value, .notHeld)
        try lock.unlock()
        XCTAssertTrue(try isFree(target))

        // withLock: the body awaits while holding; its error releases the lock.
        let value = try await lock.withLock { () async throws -> Int in
            try await Task.sleep(for: .milliseconds(1))
            XCTAssertTrue(lock.isHeld)
            return 7
        }
        XCTAssertEqual(value, 7)
        struct Failure: Error {}
        do {
            _ = try await lock.withLock { () async throws -> Int in throw Failure() }
            XCTFail("no error")
        } catch is Failure {}
        XCTAssertTrue(try isFree(target))

        // Recursive: each async acquire counts, each unlock ends one.
        let recursive = try DistributedLock(target, options: .recursive)
        try await recursive.lock()
        let again = try await recursive.tryLock(timeout: .zero)
        XCTAssertTrue(again)
        XCTAssertEqual(recursive.lockCount, 2)
        try recursive.unlock()
        XCTAssertFalse(try isFree(target))
        try recursive.unlock()
        XCTAssertTrue(try isFree(target))
    }

    /// Timeouts follow the blocking form: false once passed; zero and negative are one try
    /// (which takes a free lock); the same through an object another task holds.
    private func checkTimeouts(_ target: String) async throws {
        let holder = try DistributedLock(target), waiter = try DistributedLock(target)
        XCTAssertTrue(try holder.tryLock())
        for timeout: Duration in [.milliseconds(30), .zero, .milliseconds(-5), .seconds(Int64.min / 2)] {
            let taken = try await waiter.tryLock(timeout: timeout)
            XCTAssertFalse(taken, "timeout \(timeout)")
            XCTAssertFalse(waiter.isHeld)
            let ran: Int? = try await waiter.withLockIfAvailable(timeout: timeout) { () async in
                XCTFail("the body ran")
                return 1
            }
            XCTAssertNil(ran)
        }
        // Through the holder's own object, from another task: it waits, then times out.
        let sameObject = await Task { try await holder.tryLock(timeout: .milliseconds(20)) }.result
        XCTAssertEqual(try sameObject.get(), false)
        await expect(EINVAL) { try await waiter.lock(pollInterval: .zero) }  // as the blocking form:
        XCTAssertThrowsError(try { try waiter.lock(pollInterval: .zero) }()) { XCTAssertEqual(($0 as? DistributedLockError)?.code, EINVAL) }
        try holder.unlock()
        let taken = try await waiter.tryLock(timeout: .zero)  // free: the one try takes it
        XCTAssertTrue(taken)
        XCTAssertTrue(waiter.isHeld)
        try waiter.unlock()
        let value = try await waiter.withLockIfAvailable(timeout: .milliseconds(-1)) { () async in 5 }
        XCTAssertEqual(value, 5)
        XCTAssertTrue(try isFree(target))
    }

    /// A waiting task that is cancelled throws CancellationError and holds nothing; one cancelled
    /// before it asks does not take even a free lock.
    private func checkCancellation(_ target: String) async throws {
        let holder = try DistributedLock(target), waiter = try DistributedLock(target)
        XCTAssertTrue(try holder.tryLock())
        let started = Atomic<Bool>(false)
        let pending = Task {
            started.store(true, ordering: .releasing)
            try await waiter.lock()
        }
        await until { started.load(ordering: .acquiring) }
        pending.cancel()
        do {
            try await pending.value
            XCTFail("a cancelled wait acquired the lock")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        try holder.unlock()
        XCTAssertTrue(try isFree(target))

        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await waiter.withLock { XCTFail("the body ran in a cancelled task") }  // (the async form: a plain closure too)
        }
        do {
            try await early.value
            XCTFail("a cancelled task acquired the lock")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        XCTAssertTrue(try isFree(target))
    }

    /// A thread (blocking) and four tasks (async, two per object, so both the store and the
    /// object's own exclusion count) increment a counter with an await between its read and
    /// its write: the count is exact.
    private func checkContention(_ target: String, threadRounds: Int, taskRounds: Int) async throws {
        let threadLock = try DistributedLock(target)
        let taskLocks = [try DistributedLock(target), try DistributedLock(target)]
        let counter = Box()
        let thread = JoinableThread {
            for _ in 0..<threadRounds {
                try! threadLock.withLock(pollInterval: .milliseconds(1)) {
                    let seen = counter.value
                    sched_yield()
                    counter.value = seen + 1
                }
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<4 {
                group.addTask {
                    for _ in 0..<taskRounds {
                        try await taskLocks[i % 2].withLock(pollInterval: .milliseconds(1)) {
                            let seen = counter.value
                            await Task.yield()
                            counter.value = seen + 1
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        thread.join()
        XCTAssertEqual(counter.value, threadRounds + 4 * taskRounds)
        XCTAssertTrue(try isFree(target))
    }

    /// 8 workers each run acquires in tasks they cancel at random points: the guarded counter
    /// counts exactly the bodies that ran, and the lock is free at the end.
    private func checkStorm(_ target: String, total: Int) async throws {
        let locks = [try DistributedLock(target), try DistributedLock(target)]
        let counter = Box(), ran = Count(), cancelled = Count()
        await withTaskGroup(of: Void.self) { group in
            for w in 0..<8 {
                group.addTask {
                    for round in 0..<(total / 8) {
                        let lock = locks[(w + round) % 2]
                        let attempt = Task {
                            try await lock.withLock(pollInterval: .milliseconds(1)) {
                                counter.value += 1
                                await Task.yield()
                            }
                        }
                        for _ in 0..<Int.random(in: 0..<4) { await Task.yield() }
                        attempt.cancel()
                        do {
                            try await attempt.value
                            ran.value.add(1, ordering: .relaxed)
                        } catch is CancellationError {
                            cancelled.value.add(1, ordering: .relaxed)
                        } catch {
                            XCTFail("\(error)")
                        }
                    }
                }
            }
        }
        XCTAssertEqual(counter.value, ran.value.load(ordering: .relaxed))
        XCTAssertEqual(ran.value.load(ordering: .relaxed) + cancelled.value.load(ordering: .relaxed), total / 8 * 8)
        XCTAssertTrue(try isFree(target))
    }

    // MARK: file only

    /// 1000 tasks wait on one lock (through one object, and through the store for the holder's
    /// other object): the process gains at most 2 threads while they wait (none is parked per
    /// task); released, they take it in turn, and cancelled, the rest leave without it.
    func testThousandWaitingTasksParkNoThreads() async throws {
        let target = try target("file")
        let holder = try DistributedLock(target), shared = try DistributedLock(target)
        let n = 1000
        // Count before what the waiting does not add: the cooperative pool's threads (all of
        // them: tasks that each block a while, more than the pool is wide) and the timer of
        // Task.sleep.
        let width = 2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<width { group.addTask { usleep(20_000) } }
            for _ in 0..<64 { group.addTask { try? await Task.sleep(for: .milliseconds(1)) } }
        }
        XCTAssertTrue(try holder.tryLock())
        let before = threadCount()
        let counter = Box(), asked = Count(), done = Count(), ran = Count()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<n {
                group.addTask {
                    asked.value.add(1, ordering: .relaxed)
                    try await shared.withLock(pollInterval: .milliseconds(50)) {
                        counter.value += 1
                        await Task.yield()
                    }
                    done.value.add(1, ordering: .relaxed)
                }
            }
            await until { asked.value.load(ordering: .relaxed) == n }
            try await Task.sleep(for: .milliseconds(100))  // (lets them reach their pauses; the count holds anyway)
            let during = threadCount()
            XCTAssertLessThanOrEqual(during - before, 2, "threads: \(before) before, \(during) with \(n) tasks waiting")
            XCTAssertEqual(counter.value, 0)
            // Release; once a few have had it, cancel the rest (at once: their pauses end).
            try holder.unlock()
            await until { done.value.load(ordering: .relaxed) >= 10 }
            group.cancelAll()
            while let outcome = await group.nextResult() {
                switch outcome {
                case .success: ran.value.add(1, ordering: .relaxed)
                case .failure(let error): XCTAssertTrue(error is CancellationError, "\(error)")
                }
            }
        }
        XCTAssertGreaterThanOrEqual(ran.value.load(ordering: .relaxed), 10)
        XCTAssertEqual(counter.value, ran.value.load(ordering: .relaxed))
        XCTAssertTrue(try isFree(target))
    }
}

/// A count guarded by the lock under test (plain: the lock orders it).
private final class Box: @unchecked Sendable { var value = 0 }

/// A count tasks share.
private final class Count: Sendable { let value = Atomic<Int>(0) }

/// An error a thread sets and its joiner reads (the join orders them).
private final class ErrorSlot: @unchecked Sendable { var value: DistributedLockError? }
