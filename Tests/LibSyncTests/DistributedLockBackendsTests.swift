import Glibc
import XCTest
import LibSync

/// The distributed lock's Swift API over each backend: fencing tokens, URL errors, and the
/// PostgreSQL and Redis backends against private servers (scripts/servers.sh; skipped loudly
/// where they cannot be installed). The process and fault tests of every backend are in C and
/// Python (test_distributed_lock_backends).
final class DistributedLockBackendsTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    private static let script = String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        .withLeadingSlash + "/scripts/servers.sh"

    override class func setUp() {
        if let given = getenv("LIBSYNC_TEST_SERVERS") {
            servers = String(cString: given)
            return
        }
        var template = Array("/tmp/libsync-servers-swift-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        if system("'\(script)' start '\(servers)'") != 0 { _ = system("rm -rf '\(servers)'") }
    }

    override class func tearDown() {
        if getenv("LIBSYNC_TEST_SERVERS") == nil {
            _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
        }
    }

    private func url(_ name: String) throws -> String {
        guard let file = fopen(Self.servers + "/\(name).url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING the \(name) backend: scripts/servers.sh could not install or start it !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        let text = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text + "?lock=swift\(getpid())-\(name)-\(Self.serial())"
    }

    nonisolated(unsafe) private static var counter = 0
    private static func serial() -> Int { counter += 1; return counter }

    func testFileTokensIncreaseAcrossHolders() throws {
        var template = Array("/tmp/libsync-dlock-tokens-XXXXXX".utf8CString)
        let directory = String(cString: mkdtemp(&template)!)
        defer { _ = system("rm -rf '\(directory)'") }
        try checkTokens(directory + "/resource.lock")
    }

    func testPostgreSQL() throws { try checkServer(try url("postgres")) }

    func testRedis() throws { try checkServer(try url("redis")) }

    /// Two objects take turns: tokens strictly increase; a bounded wait for a held lock times out.
    private func checkTokens(_ target: String) throws {
        let a = try DistributedLock(target), b = try DistributedLock(target)
        XCTAssertNil(a.token)
        var last: UInt64 = 0
        for holder in [a, b, a, b] {
            XCTAssertTrue(try holder.tryLock())
            let token = try XCTUnwrap(holder.token)
            XCTAssertGreaterThan(token, last)
            last = token
            XCTAssertEqual(try (holder === a ? b : a).holder?.pid, getpid())
            try holder.unlock()
            XCTAssertNil(holder.token)
        }
        try a.withLock {
            XCTAssertFalse(try b.tryLock(timeout: .milliseconds(50)))
        }
    }

    private func checkServer(_ target: String) throws {
        try checkTokens(target)
        let a = try DistributedLock(target), b = try DistributedLock(target)
        XCTAssertFalse(a.path.contains("secret"))  // shown without its password
        XCTAssertTrue(try a.tryLock())
        try b.breakLock()
        XCTAssertFalse(a.isHeld)
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual(($0 as? DistributedLockError)?.code, ESTALE) }
        let wrong = target.replacingFirst("secret", with: "wrong!")
        XCTAssertThrowsError(try DistributedLock(wrong)) {
            guard case .accessDenied(let message) = $0 as? DistributedLockError else { return XCTFail("\($0)") }
            XCTAssertFalse(message.contains("wrong!"))
        }
    }

    /// Redis: a missing password is refused at creation (a round trip: PING), and so is a NUL
    /// byte in the lock name.
    func testRedisRefusesAMissingPasswordAndANULAtCreation() throws {
        let target = try url("redis")
        XCTAssertThrowsError(try DistributedLock(target.replacingFirst(":secret@", with: ""))) {
            guard case .accessDenied(let message) = $0 as? DistributedLockError else { return XCTFail("\($0)") }
            XCTAssertTrue(message.contains("password"))
        }
        XCTAssertThrowsError(try DistributedLock(target + "%00x")) {  // (the URL ends with the lock name)
            guard case .invalidTarget(let message) = $0 as? DistributedLockError else { return XCTFail("\($0)") }
            XCTAssertTrue(message.contains("NUL"))
        }
    }

    func testBadURLs() {
        func error(_ target: String) -> DistributedLockError? {
            do { _ = try DistributedLock(target); return nil } catch { return error }
        }
        for target in ["redis://127.0.0.1:6379", "postgresql://u@127.0.0.1/db", "redis://127.0.0.1:0/?lock=x",
                       "redis://127.0.0.1/?lock=x&ttl=nope", "nosuch://127.0.0.1/?lock=x"] {
            guard case .invalidTarget(let message) = error(target) else { return XCTFail("\(target): \(String(describing: error(target)))") }
            XCTAssertFalse(message.isEmpty)
            XCTAssertEqual(error(target)?.code, EINVAL)
        }
    }
}

private extension String {
    var withLeadingSlash: String { hasPrefix("/") ? self : "/" + self }

    func replacingFirst(_ old: String, with new: String) -> String {
        guard let range = firstRange(of: old) else { return self }
        return self[..<range.lowerBound] + new + self[range.upperBound...]
    }
}
