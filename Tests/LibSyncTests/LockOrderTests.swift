import Glibc
import XCTest
@testable import LibSync

/// Lock-order checking from Swift (the C suite, test_lock_order.c, has more of the same).
final class LockOrderTests: XCTestCase {
    /// The cycles the handler received.
    final class Reports: @unchecked Sendable {
        private let lock = NSLock()
        private var cycles: [LockOrderCycle] = []
        func add(_ cycle: LockOrderCycle) { lock.lock(); cycles.append(cycle); lock.unlock() }
        var all: [LockOrderCycle] { lock.lock(); defer { lock.unlock() }; return cycles }
    }
    var reports = Reports()

    override func setUp() {
        if getenv("LIBSYNC_LOCK_ORDER_CHILD") != nil { return }  // testEnvironmentChild: as loaded
        reports = Reports()
        let reports = reports
        LockOrderChecking.reset()
        LockOrderChecking.onCycle { reports.add($0) }
        LockOrderChecking.isEnabled = true
    }

    override func tearDown() {
        LockOrderChecking.isEnabled = false
        LockOrderChecking.onCycle(nil)
        LockOrderChecking.reset()
    }

    func address(_ mutex: SyncMutex) -> UInt { UInt(bitPattern: mutex.memory.raw) }

    func inOrder(_ first: SyncMutex, _ second: SyncMutex) { Self.inOrder(first, second) }
    static func inOrder(_ first: SyncMutex, _ second: SyncMutex) {
        first.withLock { second.withLock {} }
    }

    final class ThreadIDs: @unchecked Sendable { var ids: [UInt32] = [0, 0] }

    func testTwoThreadInversionIsReportedWithBothSites() {
        let a = SyncMutex(), b = SyncMutex()
        let tids = ThreadIDs()
        let first = JoinableThread { tids.ids[0] = threadID(); LockOrderTests.inOrder(a, b) }
        first.join()
        XCTAssertEqual(reports.all.count, 0)
        let second = JoinableThread { tids.ids[1] = threadID(); LockOrderTests.inOrder(b, a) }  // after the first: no deadlock
        second.join()
        XCTAssertEqual(reports.all.count, 1)
        guard let cycle = reports.all.first else { return }
        XCTAssertEqual(cycle.edges.count, 2)
        let ab = cycle.edges.first { $0.from == address(a) }!, ba = cycle.edges.first { $0.from == address(b) }!
        XCTAssertEqual(ab.to, address(b))
        XCTAssertEqual(ba.to, address(a))
        XCTAssertEqual(ab.thread, tids.ids[0])
        XCTAssertEqual(ba.thread, tids.ids[1])
        XCTAssertEqual(ab.fromKind, "mutex")
        XCTAssertFalse(ab.site.isEmpty)
        XCTAssertNotEqual(ab.site, ba.site)
        XCTAssertTrue(cycle.description.contains("potential deadlock"))
        // Once per cycle.
        inOrder(b, a)
        inOrder(a, b)
        XCTAssertEqual(reports.all.count, 1)
    }

    func testConsistentOrderOverAHundredLocksReportsNothing() {
        let locks = (0..<100).map { _ in SyncMutex() }
        let threads = (0..<4).map { t in
            JoinableThread {
                for round in 0..<10 {
                    let taken = locks.indices.filter { ($0 + round + t) % 3 != 0 }
                    for i in taken { try! locks[i].lock() }
                    for i in (round % 2 == 0 ? taken : taken.reversed()) { try! locks[i].unlock() }
                }
            }
        }
        threads.forEach { $0.join() }
        XCTAssertEqual(reports.all.count, 0)
        inOrder(locks[99], locks[0])  // one step against the order
        XCTAssertEqual(reports.all.count, 1)
    }

    func testThreeLockCycleAcrossKinds() throws {
        let a = SyncMutex(), b = SyncRWLock(), c = SyncSpinLock()
        a.withLock { b.withWriteLock {} }       // A -> B
        b.withReadLock { c.withLock {} }        // B -> C
        XCTAssertEqual(reports.all.count, 0)
        c.withLock { a.withLock {} }            // C -> A
        XCTAssertEqual(reports.all.count, 1)
        let edges = reports.all.first?.edges ?? []
        XCTAssertEqual(edges.count, 3)
        for i in edges.indices { XCTAssertEqual(edges[i].to, edges[(i + 1) % edges.count].from) }
        XCTAssertEqual(Set(edges.map(\.fromKind)).count, 3)
        XCTAssertTrue(Set(edges.map(\.from)).isSuperset(of: [address(a), UInt(bitPattern: b.memory.raw), UInt(bitPattern: c.memory.raw)]))
    }

    func testSynchronizedConditionAndRecursiveLock() throws {
        final class Token {}
        let token = Token(), recursive = SyncRecursiveLock(), condition = SyncCondition()
        synchronized(token) { recursive.withLock { recursive.withLock {} } }
        recursive.withLock { condition.withLock {} }
        XCTAssertEqual(reports.all.count, 0)
        condition.withLock { synchronized(token) {} }
        XCTAssertEqual(reports.all.count, 1)
        let edges = reports.all.first?.edges ?? []
        XCTAssertEqual(edges.count, 3)
        XCTAssertTrue(edges.contains { $0.fromKind == "synchronized" && $0.from == UInt(bitPattern: ObjectIdentifier(token).hashValue) })
    }

    func testTrylockAddsNoOrderIntoTheTriedLock() throws {
        let a = SyncMutex(), b = SyncMutex()
        try a.lock()
        XCTAssertTrue(try b.tryLock())
        try b.unlock()
        try a.unlock()
        inOrder(b, a)
        XCTAssertEqual(reports.all.count, 0)
    }

    func testDestroyedLocksAndReusedMemoryGiveNoFalseReport() throws {
        // Swift lock objects forget their lock when freed, whatever memory the next ones get.
        for _ in 0..<50 {
            let a = SyncMutex(), b = SyncMutex()
            inOrder(a, b)
        }
        for _ in 0..<50 {
            let a = SyncMutex(), b = SyncMutex()
            inOrder(b, a)
        }
        XCTAssertEqual(reports.all.count, 0)

        // Caller memory initialized again: new locks.
        let memory = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 8)
        defer { memory.deallocate() }
        var a = try SyncMutex(at: memory, options: []), b = try SyncMutex(at: memory + 4, options: [])
        inOrder(a, b)
        a = try SyncMutex(at: memory + 4, options: [])
        b = try SyncMutex(at: memory, options: [])
        inOrder(a, b)  // the same addresses, the other way round: other locks
        XCTAssertEqual(reports.all.count, 0)

        // Not initialized again (initialize: false): the same locks, and the inversion is
        // reported (the checks above can fail).
        let c = try SyncMutex(at: memory, options: [], initialize: false)
        let d = try SyncMutex(at: memory + 4, options: [], initialize: false)
        inOrder(c, d)
        XCTAssertEqual(reports.all.count, 1)
    }

    /// Forks a child that runs `body` with its stderr into a pipe; returns its wait status and
    /// what it wrote.
    func inChild(_ body: () -> Void) -> (Int32, String) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        let pid = fork()
        if pid == 0 {
            alarm(300)
            dup2(fds[1], 2)
            body()
            _exit(0)
        }
        close(fds[1])
        let text = readAll(fds[0])
        close(fds[0])
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        return (status, text)
    }

    func readAll(_ fd: Int32, until stop: (String) -> Bool = { _ in false }) -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            bytes += chunk[..<n]
            if stop(String(decoding: bytes, as: UTF8.self)) { break }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    func testAbortOptionAbortsInAChild() {
        let (status, text) = inChild {
            signal(SIGABRT, SIG_DFL)  // no crash reporter of the runtime: abort ends the child
            LockOrderChecking.onCycle(nil)
            LockOrderChecking.abortsOnCycle = true
            let a = SyncMutex(), b = SyncMutex()
            inOrder(a, b)
            inOrder(b, a)
        }
        XCTAssertTrue(status & 0x7f == SIGABRT, "status \(status)")
        XCTAssertTrue(text.contains("potential deadlock"), text)
    }

    func testDefaultReportGoesToStderrInAChild() {
        let (status, text) = inChild {
            LockOrderChecking.onCycle(nil)
            let a = SyncMutex(), b = SyncMutex()
            inOrder(a, b)
            inOrder(b, a)
        }
        XCTAssertEqual(status, 0)
        XCTAssertTrue(text.contains("potential deadlock: lock-order cycle of 2 locks"), text)
    }

    /// The environment variable, read at load: this test binary again, running only
    /// `testEnvironmentChild`, with LIBSYNC_CHECK_LOCK_ORDER set.
    func testEnvironmentVariableTurnsCheckingOnInAChild() throws {
        for (value, aborts) in [("1", false), ("abort", true)] {
            var fds: [Int32] = [0, 0]
            XCTAssertEqual(pipe(&fds), 0)
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
            posix_spawn_file_actions_addclose(&actions, fds[0])
            let arguments = [CommandLine.arguments[0], "LibSyncTests.LockOrderTests/testEnvironmentChild"]
            let environment = ["LIBSYNC_CHECK_LOCK_ORDER=\(value)", "LIBSYNC_LOCK_ORDER_CHILD=1"]
            var argv = arguments.map { strdup($0) } + [nil]
            var envp = environment.map { strdup($0) } + [nil]
            var pid: pid_t = 0
            XCTAssertEqual(posix_spawn(&pid, "/proc/self/exe", &actions, nil, &argv, &envp), 0)
            posix_spawn_file_actions_destroy(&actions)
            (argv + envp).forEach { free($0) }
            close(fds[1])
            let text = readAll(fds[0])
            close(fds[0])
            var status: Int32 = 0
            XCTAssertEqual(waitpid(pid, &status, 0), pid)
            XCTAssertTrue(text.contains("potential deadlock"), text)
            if aborts { XCTAssertEqual(status & 0x7f, SIGABRT) } else { XCTAssertEqual(status & 0x7f, 0) }
        }
    }

    /// Runs only as the child of the test above (otherwise it returns at once).
    func testEnvironmentChild() {
        guard getenv("LIBSYNC_LOCK_ORDER_CHILD") != nil else { return }
        // No setUp state: the environment turned checking on, the report goes to stderr.
        signal(SIGABRT, SIG_DFL)  // no crash reporter of the runtime: abort ends the child
        LockOrderChecking.onCycle(nil)
        XCTAssertTrue(LockOrderChecking.isEnabled)
        let a = SyncMutex(), b = SyncMutex()
        inOrder(a, b)
        inOrder(b, a)
    }

    func testDumpWaitsShowsARealDeadlockInAChild() {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        let a = SyncMutex(), b = SyncMutex()
        let pid = fork()
        if pid == 0 {
            alarm(300)
            dup2(fds[1], 2)
            LockOrderChecking.onCycle(nil)
            let holding = SyncSemaphore(value: 0)
            let go = SyncEvent()
            _ = JoinableThread { try! a.lock(); try! holding.signal(); go.wait(); try? b.lock() }
            _ = JoinableThread { try! b.lock(); try! holding.signal(); go.wait(); try? a.lock() }
            holding.wait()
            holding.wait()
            go.set()
            // Until both wait for each other (bounded against a hang).
            for _ in 0..<20_000 where !LockOrderChecking.waitsDescription().contains("deadlock: wait-for cycle") {
                usleep(1000)
            }
            LockOrderChecking.dumpWaits()
            while true { pause() }  // deadlocked: the test kills it
        }
        close(fds[1])
        let text = readAll(fds[0]) { $0.contains("deadlock: wait-for cycle") && $0.hasSuffix("\n") }
        close(fds[0])
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertTrue(text.contains("deadlock: wait-for cycle"), text)
        XCTAssertEqual(text.components(separatedBy: "<-- deadlock").count - 1, 2, text)
        XCTAssertTrue(text.contains("mutex 0x\(String(address(a), radix: 16))"), text)
        XCTAssertTrue(text.contains("mutex 0x\(String(address(b), radix: 16))"), text)
    }
}
