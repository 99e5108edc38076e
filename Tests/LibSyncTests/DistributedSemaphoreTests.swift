import Foundation
import Glibc
import Synchronization
import XCTest
import LibSync

/// The distributed semaphore's Swift API on every backend: the file system, and private
/// PostgreSQL, Redis and etcd servers (scripts/servers.sh; skipped loudly where they cannot be
/// had). At most N holders among threads with objects of their own, tokens, timeouts, misuse,
/// a count that disagrees, loss. The process tests (contention, a SIGKILLed holder) are in C and
/// Python (test_distributed_semaphore).
final class DistributedSemaphoreTests: XCTestCase {
    nonisolated(unsafe) private static var servers = ""
    private static let script = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        + "/scripts/servers.sh"

    override class func setUp() {
        if let given = getenv("LIBSYNC_TEST_SERVERS"), access(String(cString: given) + "/etcd.url", R_OK) == 0 {
            servers = String(cString: given)
            return
        }
        var template = Array("/tmp/libsync-sem-swift-XXXXXX".utf8CString)
        servers = String(cString: mkdtemp(&template)!)
        if system("'\(script)' start '\(servers)' && '\(script)' start-etcd '\(servers)'") != 0 {
            _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'")
        }
    }

    override class func tearDown() {
        if servers.hasPrefix("/tmp/libsync-sem-swift-") { _ = system("'\(script)' stop '\(servers)'; rm -rf '\(servers)'") }
    }

    nonisolated(unsafe) private static var counter = 0

    /// A fresh target of `backend` ("file", "postgres", "redis", "etcd").
    private func target(_ backend: String) throws -> String {
        Self.counter += 1
        if backend == "file" {
            var template = Array("/tmp/libsync-sem-XXXXXX".utf8CString)
            let directory = String(cString: mkdtemp(&template)!)
            addTeardownBlock { _ = system("rm -rf '\(directory)'") }
            return directory + "/sem"
        }
        guard let file = fopen(Self.servers + "/\(backend).url", "r") else {
            throw XCTSkip("!!!!!! SKIPPING the \(backend) backend: scripts/servers.sh could not install or start it !!!!!!")
        }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        fgets(&line, Int32(line.count), file)
        let text = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text + "?lock=swiftsem\(getpid())-\(Self.counter)"
    }

    private static let backends = ["file", "postgres", "redis", "etcd"]

    func testAtMostNHoldersAmongThreads() throws {
        for backend in Self.backends {
            let target = try target(backend)
            let inside = Atomic<Int>(0), most = Atomic<Int>(0), failures = Atomic<Int>(0)
            let tokens = Mutex<[UInt64]>([])
            let threads = (0..<5).map { _ in
                Thread {
                    do {
                        let semaphore = try DistributedSemaphore(target, permits: 2)
                        for _ in 0..<10 {
                            try semaphore.acquire(pollInterval: .milliseconds(1))
                            let now = inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
                            most.max(now, ordering: .sequentiallyConsistent)
                            if let token = semaphore.token { tokens.withLock { $0.append(token) } }
                            sched_yield()
                            inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
                            try semaphore.release()
                        }
                    } catch {
                        print("\(backend): \(error)")
                        failures.wrappingAdd(1, ordering: .relaxed)
                    }
                }
            }
            threads.forEach { $0.start() }
            while threads.contains(where: { !$0.isFinished }) { usleep(1000) }
            XCTAssertEqual(failures.load(ordering: .relaxed), 0, backend)
            XCTAssertLessThanOrEqual(most.load(ordering: .relaxed), 2, backend)
            let all = tokens.withLock { $0 }
            XCTAssertEqual(all.count, 50, backend)
            XCTAssertEqual(Set(all).count, all.count, backend)
        }
    }

    func testTokensTimeoutsAndMisuse() throws {
        for backend in Self.backends {
            let target = try target(backend)
            let a = try DistributedSemaphore(target, permits: 2), b = try DistributedSemaphore(target, permits: 2)
            let waiter = try DistributedSemaphore(target, permits: 2)
            XCTAssertEqual(a.permits, 2)
            XCTAssertThrowsError(try a.release()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld, backend) }
            XCTAssertTrue(try a.tryAcquire())
            XCTAssertThrowsError(try a.tryAcquire()) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld, backend) }
            XCTAssertTrue(try b.tryAcquire())
            XCTAssertGreaterThan(b.token!, a.token!, backend)
            XCTAssertFalse(try waiter.tryAcquire())
            XCTAssertFalse(try waiter.tryAcquire(timeout: .milliseconds(200)))
            XCTAssertNil(waiter.token)
            let other = try DistributedSemaphore(target, permits: 3)
            XCTAssertThrowsError(try other.tryAcquire()) {
                guard case .invalidTarget(let message) = $0 as? DistributedLockError else { return XCTFail("\($0)") }
                XCTAssertTrue(message.contains("has 2 permits"), message)
            }
            let seen = b.token!
            try a.release()
            XCTAssertTrue(try waiter.tryAcquire(timeout: .seconds(60)))
            XCTAssertGreaterThan(waiter.token!, seen, backend)
            XCTAssertTrue(waiter.isHeld)
            try waiter.release()
            try b.release()
            XCTAssertFalse(b.isHeld)
            XCTAssertEqual(try other.withPermit { other.token != nil }, true)
        }
    }

    func testBadCounts() throws {
        for permits in [0, -1, DistributedSemaphore.maxPermits + 1] {
            XCTAssertThrowsError(try DistributedSemaphore("/tmp/libsync-sem-bad", permits: permits)) {
                guard case .invalidTarget(let message) = $0 as? DistributedLockError else { return XCTFail("\($0)") }
                XCTAssertTrue(message.contains("permits"), message)
            }
        }
        XCTAssertThrowsError(try DistributedSemaphore("/tmp/libsync-sem-bad", permits: 2, options: .recursive))
        XCTAssertThrowsError(try DistributedSemaphore("redis://127.0.0.1:1", permits: 2))  // no lock=NAME
    }

    func testBrokenPermitIsReportedLost() throws {
        for backend in Self.backends {
            let target = try target(backend)
            let holder = try DistributedSemaphore(backend == "redis" ? target + "&ttl=0.3" : target, permits: 1)
            let events = Mutex<[DistributedLockEvent]>([])
            holder.setEventHandler { _, event in events.withLock { $0.append(event) } }
            XCTAssertTrue(try holder.tryAcquire())
            try DistributedSemaphore(target, permits: 1).breakLock()
            let end = monotonicSeconds() + 60  // (a guard against a hang, not a timing)
            while !holder.isLost && monotonicSeconds() < end {
                if backend == "postgres" { _ = holder.isHeld }
                usleep(1000)
            }
            XCTAssertTrue(holder.isLost, backend)
            while !events.withLock({ $0.contains(.lost) }) && monotonicSeconds() < end { usleep(1000) }
            XCTAssertTrue(events.withLock { $0.contains(.lost) }, backend)
            XCTAssertThrowsError(try holder.release()) { XCTAssertEqual($0 as? DistributedLockError, .broken, backend) }
        }
    }

    private func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
