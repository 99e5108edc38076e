import Glibc
import Synchronization
import XCTest
import LibSync

/// The etcd backend over TLS (`etcds://`) from Swift, against a private etcd that requires client
/// certificates (scripts/servers.sh start-etcd-tls: a throwaway CA and certificates in its
/// temporary directory; skipped loudly where etcd cannot be installed): tokens in order, a waiter
/// woken through the watch stream over TLS, a server certificate that does not verify, bad TLS
/// options. The bounds only guard against a hang.
final class DistributedLockEtcdTLSTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    private static let script = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        + "/scripts/servers.sh"

    override class func setUp() {
        var template = Array("/tmp/libsync-etcd-tls-swift-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        if system("'\(script)' start-etcd-tls '\(servers)'") != 0 { _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'") }
    }

    override class func tearDown() {
        _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
    }

    /// The URL of a new lock, with the CA and the client certificate (`options` replace them).
    private func url(_ options: String? = nil) throws -> String {
        guard let file = fopen(Self.servers + "/etcd.url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING etcd over TLS: scripts/servers.sh could not install or start etcd !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        let base = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let tls = Self.servers + "/tls/"
        return base + "?lock=swift\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            + (options ?? "&cacert=\(tls)ca.pem&cert=\(tls)client.pem&key=\(tls)client-key.pem")
    }

    func testTokensAndAWaiterWokenOverTLS() throws {
        let target = try url()
        let a = try DistributedLock(target)
        XCTAssertTrue(try a.tryLock())
        let first = try XCTUnwrap(a.token)
        let got = Mutex<UInt64?>(nil)
        let waiter = Thread {
            let b = try! DistributedLock(target)
            XCTAssertTrue(try! b.tryLock(timeout: .seconds(60)))  // waits on the watch, over TLS
            got.withLock { $0 = b.token }
            try! b.unlock()
        }
        waiter.start()
        usleep(200_000)  // (queued or not yet: either way it must get the lock)
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

    func testRefusedCertificatesAndBadOptions() throws {
        let tls = Self.servers + "/tls/"
        // The client's certificate is no CA: the server's does not verify against it.
        XCTAssertThrowsError(try DistributedLock(try url("&cacert=\(tls)client.pem&cert=\(tls)client.pem&key=\(tls)client-key.pem"))) {
            guard case .unreachable(let message) = $0 as? DistributedLockError else { return XCTFail("\($0)") }
            XCTAssertTrue(message.contains("certificate did not verify"), message)
        }
        for (options, words) in [("&cacert=\(tls)ca.pem&cert=\(tls)client.pem", "cert= without key="),
                                 ("&cacert=/nonexistent.pem", "cannot read the file"),
                                 ("&cacert=\(tls)ca.pem&cert=\(tls)client.pem&key=\(tls)server-key.pem", "is not the key of"),
                                 ("&cacert=\(tls)ca.pem&sslmode=require", "for TLS use etcds://")] {
            XCTAssertThrowsError(try DistributedLock(try url(options)), options) {
                guard case .invalidTarget(let message) = $0 as? DistributedLockError else { return XCTFail("\(options): \($0)") }
                XCTAssertTrue(message.contains(words), "\(options): \(message)")
            }
        }
    }
}
