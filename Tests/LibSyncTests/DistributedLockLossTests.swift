import Glibc
import Synchronization
import XCTest
import LibSync

/// Loss notification from Swift (`setEventHandler`, `isLost`, `isSuspended`) through real
/// faults: each backend's hold broken by another object (file: its entry removed; PostgreSQL:
/// pg_terminate_backend; Redis: DEL), a PostgreSQL restart, a stopped Redis server. The stopped
/// holder's cases (a process) are in C and Python (test_distributed_lock_loss). The bounds only
/// guard against a hang.
final class DistributedLockLossTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    private static let script = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        + "/scripts/servers.sh"

    override class func setUp() {
        if let given = getenv("LIBSYNC_TEST_SERVERS") {
            servers = String(cString: given)
            return
        }
        var template = Array("/tmp/libsync-servers-swift-loss-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        if system("'\(script)' start '\(servers)'") != 0 { _ = system("rm -rf '\(servers)'") }
    }

    override class func tearDown() {
        if getenv("LIBSYNC_TEST_SERVERS") == nil {
            _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
        }
    }

    private func url(_ name: String, _ extra: String = "") throws -> String {
        guard let file = fopen(Self.servers + "/\(name).url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING the \(name) backend: scripts/servers.sh could not install or start it !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        let text = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text + "?lock=swiftloss\(getpid())-\(name)-\(UInt32.random(in: 0...UInt32.max))" + extra
    }

    private func control(_ what: String, _ backend: String) {
        XCTAssertEqual(system("'\(Self.script)' \(what) \(backend) '\(Self.servers)'"), 0)
    }

    /// The events a handler saw, in order.
    final class Events: Sendable {
        private let seen = Mutex<[DistributedLockEvent]>([])
        func add(_ event: DistributedLockEvent) { seen.withLock { $0.append(event) } }
        /// The `index`th event, waiting for it (nil if none came within the hang guard).
        func wait(for index: Int) -> DistributedLockEvent? {
            for _ in 0..<60_000 {
                if let event = seen.withLock({ $0.count > index ? $0[index] : nil }) { return event }
                usleep(1000)
            }
            return nil
        }
        var count: Int { seen.withLock { $0.count } }
    }

    private func checkBroken(_ target: String) throws {
        let lock = try DistributedLock(target), other = try DistributedLock(target)
        let events = Events()
        lock.setEventHandler { held, event in
            XCTAssertTrue(held === lock)
            events.add(event)
        }
        XCTAssertTrue(try lock.tryLock())
        XCTAssertFalse(lock.isLost)
        try other.breakLock()
        XCTAssertEqual(events.wait(for: 0), .lost)
        XCTAssertTrue(lock.isLost)
        XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual(($0 as? DistributedLockError)?.code, ESTALE) }
        XCTAssertTrue(try lock.tryLock())
        XCTAssertFalse(lock.isLost)
        try lock.unlock()
        lock.setEventHandler(nil)
        XCTAssertEqual(events.count, 1)
    }

    func testFileHoldBrokenIsLost() throws {
        var template = Array("/tmp/libsync-dlock-loss-XXXXXX".utf8CString)
        let directory = String(cString: mkdtemp(&template)!)
        defer { _ = system("rm -rf '\(directory)'") }
        try checkBroken(directory + "/resource.lock")
    }

    func testPostgreSQLSessionTerminatedIsLost() throws { try checkBroken(try url("postgres")) }

    func testRedisKeyDeletedIsLost() throws { try checkBroken(try url("redis")) }

    func testPostgreSQLRestartIsLost() throws {
        let lock = try DistributedLock(try url("postgres"))
        let events = Events()
        lock.setEventHandler { _, event in events.add(event) }
        XCTAssertTrue(try lock.tryLock())
        control("restart", "postgres")
        XCTAssertEqual(events.wait(for: 0), .lost)
        XCTAssertTrue(lock.isLost)
        XCTAssertThrowsError(try lock.unlock())
    }

    /// A stopped server: suspended (a renewal got no answer), then resumed once it answers (or
    /// lost, on a machine that stalled for the whole ttl: also a correct report).
    func testRedisServerStoppedIsSuspendedThenResumed() throws {
        let lock = try DistributedLock(try url("redis", "&ttl=3&connect_timeout=0.2"))
        let events = Events()
        lock.setEventHandler { _, event in events.add(event) }
        XCTAssertTrue(try lock.tryLock())
        control("pause", "redis")
        let first = events.wait(for: 0)
        let suspended = lock.isSuspended
        control("resume", "redis")
        XCTAssertEqual(first, .suspended)
        XCTAssertTrue(suspended)
        let second = events.wait(for: 1)
        XCTAssertTrue(second == .resumed || second == .lost, "\(String(describing: second))")
        if second == .resumed {
            XCTAssertFalse(lock.isSuspended || lock.isLost)
            try lock.unlock()
        }
    }
}
