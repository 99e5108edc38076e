import Glibc
import Synchronization
import XCTest
import LibSync

/// The distributed lock's etcd backend from Swift, against a private etcd (scripts/servers.sh
/// start-etcd; skipped loudly where it cannot be installed): acquire and release, contention, a
/// timed and a try acquire, fencing tokens, a waiter woken by the release (the watch), bad URLs,
/// a wrong password, nothing listening, loss notification when the lease ends or the hold is
/// broken. The bounds only guard against a hang.
final class DistributedLockEtcdTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    private static let script = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        + "/scripts/servers.sh"

    override class func setUp() {
        if let given = getenv("LIBSYNC_TEST_SERVERS"), access(String(cString: given) + "/etcd.url", R_OK) == 0 {
            servers = String(cString: given)
            return
        }
        var template = Array("/tmp/libsync-etcd-swift-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        if system("'\(script)' start-etcd '\(servers)'") != 0 { _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'") }
    }

    override class func tearDown() {
        if servers.hasPrefix("/tmp/libsync-etcd-swift-") {
            _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
        }
    }

    /// The server's URL (without a lock).
    private func base() throws -> String {
        guard let file = fopen(Self.servers + "/etcd.url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING the etcd backend: scripts/servers.sh could not install or start etcd !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        return String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private func url(_ extra: String = "") throws -> String {
        try base() + "?lock=swift\(getpid())-\(UInt32.random(in: 0...UInt32.max))" + extra
    }

    private func control(_ what: String) {
        XCTAssertEqual(system("'\(Self.script)' \(what) etcd '\(Self.servers)'"), 0)
    }

    func testAcquireReleaseContentionAndTokens() throws {
        let target = try url()
        let a = try DistributedLock(target), b = try DistributedLock(target)
        XCTAssertFalse(a.path.contains("secret"))  // shown without its password
        XCTAssertNil(try a.holder)
        var last: UInt64 = 0
        for holder in [a, b, a, b, a] {
            XCTAssertTrue(try holder.tryLock())
            XCTAssertFalse(try (holder === a ? b : a).tryLock())
            let token = try XCTUnwrap(holder.token)
            XCTAssertGreaterThan(token, last)
            last = token
            XCTAssertEqual(try (holder === a ? b : a).holder?.pid, getpid())
            XCTAssertTrue(holder.isHeld)
            try holder.unlock()
            XCTAssertNil(holder.token)
            XCTAssertThrowsError(try holder.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        }
        try a.withLock {
            XCTAssertFalse(try b.tryLock(timeout: .milliseconds(50)))
        }
        // The timed-out wait left nothing queued: the lock is free to a try.
        XCTAssertTrue(try b.tryLock())
        XCTAssertGreaterThan(try XCTUnwrap(b.token), last)
        // Broken: the holder learns it at unlock.
        try a.breakLock()
        XCTAssertFalse(b.isHeld)
        XCTAssertThrowsError(try b.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
    }

    /// A waiter sleeps on the watch and takes the lock once the holder releases it; the waiter's
    /// token is larger.
    func testWaiterWokenByRelease() throws {
        let target = try url()
        let a = try DistributedLock(target)
        XCTAssertTrue(try a.tryLock())
        let first = try XCTUnwrap(a.token)
        let waiting = Atomic<Int>(0)
        let got = Mutex<UInt64?>(nil)
        let thread = Thread {
            let b = try! DistributedLock(target)
            waiting.store(1, ordering: .sequentiallyConsistent)
            XCTAssertTrue(try! b.tryLock(timeout: .seconds(60)))
            got.withLock { $0 = b.token }
            try! b.unlock()
        }
        thread.start()
        for _ in 0..<6000 where waiting.load(ordering: .sequentiallyConsistent) == 0 { usleep(1000) }
        usleep(100_000)  // (the waiter may or may not be queued yet: either way it must get the lock)
        XCTAssertNil(got.withLock { $0 })
        try a.unlock()
        var token: UInt64?
        for _ in 0..<60_000 {
            token = got.withLock { $0 }
            if token != nil { break }
            usleep(1000)
        }
        XCTAssertGreaterThan(try XCTUnwrap(token), first)
    }

    func testBadTargets() throws {
        for (target, words) in [("etcd://127.0.0.1:2379", "lock=NAME"), ("etcd://127.0.0.1:2379/x", "lock=NAME"),
                                ("etcd://127.0.0.1:2379/db?lock=x", "path"), ("etcd://127.0.0.1:99999?lock=x", "port"),
                                ("etcd://127.0.0.1?lock=x&ttl=0", "ttl"), ("etcd://127.0.0.1?lock=x&cacert=/tmp/ca.pem", "TLS"),
                                ("etcd://:pw@127.0.0.1?lock=x", "without a user")] {
            XCTAssertThrowsError(try DistributedLock(target), target) { error in
                guard case .invalidTarget(let message) = error as? DistributedLockError else { return XCTFail("\(target): \(error)") }
                XCTAssertTrue(message.contains(words), "\(target): \(message)")
            }
        }
        let good = try base()
        XCTAssertThrowsError(try DistributedLock(good.replacing("secret", with: "wrong!") + "?lock=x")) { error in
            guard case .accessDenied(let message) = error as? DistributedLockError else { return XCTFail("\(error)") }
            XCTAssertFalse(message.contains("wrong!"))
        }
        XCTAssertThrowsError(try DistributedLock(good.replacing("root:secret@", with: "") + "?lock=x")) { error in
            XCTAssertEqual((error as? DistributedLockError)?.code, EACCES, "\(error)")
        }
        // Nothing listening there (a port just released).
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: UInt32(0x7f00_0001).bigEndian),
                                  sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                XCTAssertEqual(bind(s, $0, length), 0)
                XCTAssertEqual(getsockname(s, $0, &length), 0)
            }
        }
        close(s)
        XCTAssertThrowsError(try DistributedLock("etcd://127.0.0.1:\(UInt16(bigEndian: address.sin_port))?lock=x")) { error in
            guard case .unreachable = error as? DistributedLockError else { return XCTFail("\(error)") }
        }
    }

    /// The event handler hears `lost` when the hold's key is deleted by another (break), and
    /// when the lease ends (revoked from outside, as its expiry would).
    func testLossNotification() throws {
        final class Events: Sendable {
            let seen = Mutex<[DistributedLockEvent]>([])
            func wait(for index: Int) -> DistributedLockEvent? {
                for _ in 0..<60_000 {
                    if let event = seen.withLock({ $0.count > index ? $0[index] : nil }) { return event }
                    usleep(1000)
                }
                return nil
            }
        }
        let target = try url("&ttl=3")  // a keep-alive every second
        let a = try DistributedLock(target), b = try DistributedLock(target)
        let events = Events()
        a.setEventHandler { _, event in events.seen.withLock { $0.append(event) } }
        XCTAssertTrue(try a.tryLock())
        try b.breakLock()
        XCTAssertEqual(events.wait(for: 0), .lost)
        XCTAssertTrue(a.isLost)
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
        // The lease revoked: etcd deletes its keys, and the keep-alive finds it gone.
        XCTAssertTrue(try a.tryLock())
        XCTAssertFalse(a.isLost)
        let port = try base().split(separator: ":").last!
        let revoke = "ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:\(port) --user root:secret lease list | grep -v found "
            + "| xargs -r -n1 env ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:\(port) --user root:secret lease revoke >/dev/null"
        XCTAssertEqual(system(revoke), 0)
        XCTAssertEqual(events.wait(for: 1), .lost)
        XCTAssertTrue(a.isLost)
        XCTAssertTrue(try b.tryLock())  // free again
        try b.unlock()
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
        // A new lease for the next acquisition.
        XCTAssertTrue(try a.tryLock())
        try a.unlock()
    }
}
