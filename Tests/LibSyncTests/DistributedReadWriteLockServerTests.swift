import Glibc
import Synchronization
import XCTest
import LibSync

/// The shared/exclusive (read/write) lock on PostgreSQL, Redis and etcd from Swift, against
/// private servers (scripts/servers.sh; skipped loudly where they cannot be had): readers share,
/// a writer excludes, tokens ordered across both sides, a waiting writer stops new readers,
/// timeouts, loss notification, bad input. The bounds only guard against a hang.
final class DistributedReadWriteLockServerTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    private static let script = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        + "/scripts/servers.sh"

    override class func setUp() {
        if let given = getenv("LIBSYNC_TEST_SERVERS"), access(String(cString: given) + "/etcd.url", R_OK) == 0 {
            servers = String(cString: given)
            return
        }
        var template = Array("/tmp/libsync-rw-swift-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        if system("'\(script)' start '\(servers)' && '\(script)' start-etcd '\(servers)'") != 0 {
            _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
        }
    }

    override class func tearDown() {
        if servers.hasPrefix("/tmp/libsync-rw-swift-") { _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'") }
    }

    /// A fresh lock's URL on the server `name` (postgres, redis, etcd).
    private func url(_ name: String) throws -> String {
        guard let file = fopen(Self.servers + "/\(name).url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING the \(name) read/write lock: scripts/servers.sh could not install or start it !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        let base = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return base + "?lock=swift-rw-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" + (name == "postgres" ? "" : "&ttl=1")
    }

    func testPostgreSQL() throws { try check(try url("postgres")) }
    func testRedis() throws { try check(try url("redis")) }
    func testEtcd() throws { try check(try url("etcd")) }

    private func check(_ target: String) throws {
        try checkShareExcludeTokens(target)
        try checkWriterPreference(target)
        try checkLoss(target, .read)
        try checkLoss(target, .write)
        try checkBadInput(target)
    }

    private func checkShareExcludeTokens(_ target: String) throws {
        let a = try DistributedReadWriteLock(target), b = try DistributedReadWriteLock(target), w = try DistributedReadWriteLock(target)
        XCTAssertFalse(a.path.contains("secret"))  // shown without its password
        XCTAssertTrue(try a.tryLock(.read))
        XCTAssertTrue(try b.tryLock(.read, timeout: .seconds(60)))
        let reads = [try XCTUnwrap(a.fencingToken), try XCTUnwrap(b.fencingToken)]
        XCTAssertFalse(try w.tryLock(.write))
        XCTAssertFalse(try w.tryLock(.write, timeout: .milliseconds(50), pollInterval: .milliseconds(1)))
        try a.unlock()
        try b.unlock()
        XCTAssertTrue(try w.tryLock(.write, timeout: .seconds(60)))
        XCTAssertEqual(w.heldKind, .write)
        let written = try XCTUnwrap(w.fencingToken)
        XCTAssertGreaterThan(written, reads.max()!)
        XCTAssertFalse(try a.tryLock(.read, timeout: .milliseconds(50), pollInterval: .milliseconds(1)))
        try w.unlock()
        try a.lock(.read)
        XCTAssertGreaterThan(try XCTUnwrap(a.fencingToken), written)
        try a.unlock()
    }

    private func checkWriterPreference(_ target: String) throws {
        let first = try DistributedReadWriteLock(target), later = try DistributedReadWriteLock(target)
        let probe = try DistributedReadWriteLock(target), writer = try DistributedReadWriteLock(target)
        try first.lock(.read)
        let got = Mutex<UInt64?>(nil)
        let thread = JoinableThread {
            guard (try? writer.tryLock(.write, timeout: .seconds(60), pollInterval: .milliseconds(1))) == true else { return }
            got.withLock { $0 = writer.fencingToken }
            try? writer.unlock()
        }
        while try probe.tryLock(.read) { try probe.unlock() }  // until the writer's wait is in place
        for _ in 0..<20 { XCTAssertFalse(try later.tryLock(.read)) }
        XCTAssertNil(got.withLock { $0 })
        let held = try XCTUnwrap(first.fencingToken)
        try first.unlock()
        thread.join()
        XCTAssertGreaterThan(got.withLock { $0 }!, held)
    }

    private func checkLoss(_ target: String, _ kind: DistributedReadWriteLock.Kind) throws {
        let holder = try DistributedReadWriteLock(target), breaker = try DistributedReadWriteLock(target)
        let lost = Atomic<Int>(0)
        try holder.setEventHandler { _, event in if event == .lost { lost.add(1, ordering: .relaxed) } }
        try holder.lock(kind)
        XCTAssertFalse(holder.isLost)
        try breaker.breakLock()
        while !holder.isLost || lost.load(ordering: .relaxed) == 0 { usleep(10_000) }
        XCTAssertThrowsError(try holder.unlock()) { error in
            XCTAssertTrue([.broken, .brokenAndHeldByAnother].contains(error as? DistributedLockError))
        }
        XCTAssertNil(holder.heldKind)
        try holder.setEventHandler(nil)
    }

    private func checkBadInput(_ target: String) throws {
        let lock = try DistributedReadWriteLock(target), other = try DistributedReadWriteLock(target)
        XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        try other.lock(.read)
        XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        XCTAssertThrowsError(try other.tryLock(.write)) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        try other.unlock()
        XCTAssertThrowsError(try DistributedReadWriteLock(path: target, mode: 0o644)) {
            XCTAssertEqual(($0 as? DistributedLockError)?.code, EINVAL)
        }
        XCTAssertThrowsError(try DistributedReadWriteLock(String(target.prefix { $0 != "?" }))) {
            XCTAssertEqual(($0 as? DistributedLockError)?.code, EINVAL)
        }
    }

    func testFileLockHasNoDetector() throws {
        var template = Array("/tmp/libsync-rw-file-XXXXXX".utf8CString)
        let directory = String(cString: mkdtemp(&template)!)
        defer { rmdir(directory) }
        let lock = try DistributedReadWriteLock(path: directory + "/lock")
        XCTAssertThrowsError(try lock.setEventHandler { _, _ in }) { XCTAssertEqual(($0 as? DistributedLockError)?.code, ENOTSUP) }
        XCTAssertFalse(lock.isLost)
    }
}
