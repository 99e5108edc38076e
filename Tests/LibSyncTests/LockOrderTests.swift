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
        if getenv("LIBSYNC_LOCK_ORDER_CHILD") != nil { return }  // a child: as loaded
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

    /// Each edge names the side of the rwlock taken on that edge, in both orders.
    func testEachEdgeNamesTheRWLockSideTakenOnIt() throws {
        for writeFirst in [true, false] {
            LockOrderChecking.reset()
            let cache = SyncRWLock(), m = SyncMutex()
            let cacheAddress = UInt(bitPattern: cache.memory.raw)
            if writeFirst { cache.withWriteLock { m.withLock {} } } else { cache.withReadLock { m.withLock {} } }
            m.withLock { if writeFirst { cache.withReadLock {} } else { cache.withWriteLock {} } }
            let (first, second) = writeFirst ? ("rwlock (write)", "rwlock (read)") : ("rwlock (read)", "rwlock (write)")
            guard let cycle = reports.all.last else { return XCTFail("no report") }
            let out = try XCTUnwrap(cycle.edges.first { $0.from == cacheAddress })
            let into = try XCTUnwrap(cycle.edges.first { $0.to == cacheAddress })
            XCTAssertEqual([out.fromKind, out.toKind], [first, "mutex"])
            XCTAssertEqual([into.fromKind, into.toKind], ["mutex", second])
        }
        XCTAssertEqual(reports.all.count, 2)
    }

    /// Labels and thread names are in the edges and the text of reports, and in the waits dump;
    /// a label goes with its object.
    func testLabelsAndThreadNamesAreInReports() throws {
        let accounts = SyncMutex(), cache = SyncRWLock()
        accounts.label = "accounts"
        cache.label = "cache"
        XCTAssertEqual(accounts.label, "accounts")
        let (a, c) = (address(accounts), UInt(bitPattern: cache.memory.raw))
        accounts.withLock { cache.withReadLock {} }
        let tid = ThreadIDs()
        JoinableThread {
            LockOrderChecking.threadName = "rotate log"
            tid.ids[0] = threadID()
            cache.withWriteLock { accounts.withLock {} }
        }.join()
        let cycle = try XCTUnwrap(reports.all.first)
        let out = try XCTUnwrap(cycle.edges.first { $0.from == c })
        XCTAssertEqual([out.fromName, out.toName, out.threadName], ["cache", "accounts", "rotate log"])
        XCTAssertTrue(cycle.description.contains(
            "rwlock (write) \"cache\" 0x\(String(c, radix: 16)) -> mutex \"accounts\" 0x\(String(a, radix: 16)), "
            + "first in this order in thread \(tid.ids[0]) \"rotate log\" at:"), cycle.description)
        LockOrderChecking.threadName = "main"
        XCTAssertEqual(LockOrderChecking.threadName, "main")
        accounts.withLock {
            XCTAssertTrue(LockOrderChecking.waitsDescription().contains(
                "thread \(threadID()) \"main\"\n      holds mutex \"accounts\" 0x\(String(a, radix: 16))"))
        }
        LockOrderChecking.threadName = nil
        accounts.label = nil
        XCTAssertNil(accounts.label)
        withExtendedLifetime(cache) {}
        let freed: UInt = { let lock = SyncSpinLock(); lock.label = "gone"; return UInt(bitPattern: lock.memory.raw) }()
        XCTAssertNil(LockOrder.name(of: UnsafeRawPointer(bitPattern: freed)!))
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

    func testLocksTakenInTheHandlerAreNotChecked() {
        let a = SyncMutex(), b = SyncMutex(), x = SyncMutex(), y = SyncMutex()
        let reports = reports
        LockOrderChecking.onCycle { cycle in
            reports.add(cycle)
            guard reports.all.count == 1 else { return }  // the second closes with x and y held
            LockOrderTests.inOrder(x, y)  // an inversion inside the handler: not checked
            LockOrderTests.inOrder(y, x)
        }
        inOrder(a, b)
        inOrder(b, a)
        XCTAssertEqual(reports.all.count, 1)
        inOrder(x, y)                     // outside: x and y have no orders yet
        XCTAssertEqual(reports.all.count, 1)
        inOrder(y, x)
        XCTAssertEqual(reports.all.count, 2)
    }

    func testResetWhileSynchronizedKeepsItsRelease() {
        final class Token {}
        let token = Token(), m = SyncMutex()
        synchronized(token) { LockOrderChecking.reset() }
        m.withLock {}
        m.withLock { synchronized(token) {} }  // m -> token, the only order
        XCTAssertEqual(reports.all.count, 0)
        XCTAssertFalse(LockOrderChecking.waitsDescription().contains("holds"))
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
        var a = try SyncMutex(at: memory, options: [], initialize: true), b = try SyncMutex(at: memory + 4, options: [], initialize: true)
        inOrder(a, b)
        a = try SyncMutex(at: memory + 4, options: [], initialize: true)
        b = try SyncMutex(at: memory, options: [], initialize: true)
        inOrder(a, b)  // the same addresses, the other way round: other locks
        XCTAssertEqual(reports.all.count, 0)

        // Not initialized again (initialize: false): the same locks, and the inversion is
        // reported (the checks above can fail).
        let c = try SyncMutex(at: memory, options: [], initialize: false)
        let d = try SyncMutex(at: memory + 4, options: [], initialize: false)
        inOrder(c, d)
        XCTAssertEqual(reports.all.count, 1)
    }

    // MARK: children

    // Each child is this test binary again, running one of the `child…` tests below with
    // LIBSYNC_LOCK_ORDER_CHILD naming it: a fresh process. A child of fork() that starts
    // threads without exec can hang in the Swift runtime (see docs/lock_order.md, Limits),
    // and ThreadSanitizer supports no threads there.

    /// Starts the child test `name` with the parent's environment and `environment`; returns
    /// its pid and the read end of a pipe from its stderr.
    func spawnChild(_ name: String, environment: [String] = []) -> (pid_t, Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)  // XCTest's own lines
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        var defaults = sigset_t()  // SIGQUIT and SIGABRT as by default, whatever the parent's
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGQUIT)
        sigaddset(&defaults, SIGABRT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF))
        let arguments = [CommandLine.arguments[0], "LibSyncTests.LockOrderTests/\(name)"]
        var inherited: [String] = []
        var cursor = environ
        while let variable = cursor.pointee {
            let text = String(cString: variable)
            if !text.hasPrefix("LIBSYNC_") { inherited.append(text) }
            cursor += 1
        }
        var argv = arguments.map { strdup($0) } + [nil]
        var envp = (inherited + environment + ["LIBSYNC_LOCK_ORDER_CHILD=\(name)"]).map { strdup($0) } + [nil]
        var pid: pid_t = 0
        XCTAssertEqual(posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, &argv, &envp), 0)
        posix_spawn_file_actions_destroy(&actions)
        posix_spawnattr_destroy(&attributes)
        (argv + envp).forEach { free($0) }
        close(fds[1])
        return (pid, fds[0])
    }

    /// Runs the child test `name` to its end; returns its wait status and its stderr.
    func runChild(_ name: String, environment: [String] = []) -> (Int32, String) {
        let (pid, fd) = spawnChild(name, environment: environment)
        let text = readAll(fd)
        close(fd)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        return (status, text)
    }

    /// Whether this process is the child `name` (else the child test returns at once).
    static func isChild(_ name: String) -> Bool {
        getenv("LIBSYNC_LOCK_ORDER_CHILD").map { String(cString: $0) == name } ?? false
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
        let (status, text) = runChild("testChildAbortsOnCycle")
        XCTAssertTrue(status & 0x7f == SIGABRT, "status \(status)")
        XCTAssertTrue(text.contains("potential deadlock"), text)
    }

    func testChildAbortsOnCycle() {
        guard Self.isChild(#function.replacingOccurrences(of: "()", with: "")) else { return }
        signal(SIGABRT, SIG_DFL)  // no crash reporter of the runtime: abort ends the child
        LockOrderChecking.isEnabled = true
        LockOrderChecking.abortsOnCycle = true
        let a = SyncMutex(), b = SyncMutex()
        inOrder(a, b)
        inOrder(b, a)
    }

    func testDefaultReportGoesToStderrInAChild() {
        let (status, text) = runChild("testChildReportsToStderr")
        XCTAssertEqual(status, 0)
        XCTAssertTrue(text.contains("potential deadlock: lock-order cycle of 2 locks"), text)
    }

    func testChildReportsToStderr() {
        guard Self.isChild(#function.replacingOccurrences(of: "()", with: "")) else { return }
        LockOrderChecking.isEnabled = true
        let a = SyncMutex(), b = SyncMutex()
        inOrder(a, b)
        inOrder(b, a)
    }

    /// The environment variable, read at load.
    func testEnvironmentVariableTurnsCheckingOnInAChild() throws {
        for (value, aborts) in [("1", false), ("abort", true)] {
            let (status, text) = runChild("testChildCheckingFromTheEnvironment",
                                          environment: ["LIBSYNC_CHECK_LOCK_ORDER=\(value)"])
            XCTAssertTrue(text.contains("potential deadlock"), text)
            if aborts { XCTAssertEqual(status & 0x7f, SIGABRT) } else { XCTAssertEqual(status & 0x7f, 0) }
        }
    }

    func testChildCheckingFromTheEnvironment() {
        guard Self.isChild(#function.replacingOccurrences(of: "()", with: "")) else { return }
        signal(SIGABRT, SIG_DFL)  // no crash reporter of the runtime: abort ends the child
        XCTAssertTrue(LockOrderChecking.isEnabled)  // no call turned it on
        let a = SyncMutex(), b = SyncMutex()
        inOrder(a, b)
        inOrder(b, a)
    }

    func testDumpWaitsShowsARealDeadlockInAChild() {
        let (pid, fd) = spawnChild("testChildDeadlocks")
        let text = readAll(fd) { $0.contains("deadlock: wait-for cycle") && $0.hasSuffix("\n") }
        close(fd)
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertTrue(text.contains("deadlock: wait-for cycle"), text)
        XCTAssertEqual(text.components(separatedBy: "<-- deadlock").count - 1, 2, text)
        // The child's locks, as it named them first.
        let named = text.split(separator: "\n").first { $0.hasPrefix("LOCKS ") }?.dropFirst(6)
            .split(separator: " ").map(String.init) ?? []
        XCTAssertEqual(named.count, 2, text)
        for lock in named { XCTAssertTrue(text.contains("mutex \(lock)"), text) }
    }

    func testChildDeadlocks() {
        guard Self.isChild(#function.replacingOccurrences(of: "()", with: "")) else { return }
        LockOrderChecking.isEnabled = true
        let a = SyncMutex(), b = SyncMutex()
        LockOrder.writeToStderr("LOCKS 0x\(String(address(a), radix: 16)) 0x\(String(address(b), radix: 16))\n")
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
}
