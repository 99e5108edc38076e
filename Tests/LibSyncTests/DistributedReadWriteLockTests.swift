import Dispatch
import Glibc
import Synchronization
import XCTest
import LibSync

/// The file system's shared/exclusive lock (SharedFileLock.swift): readers share, a writer
/// excludes all, a pending writer stops new readers, tokens order across both sides, a dead
/// reader's share and a dead writer's hold are recovered.
final class DistributedReadWriteLockTests: XCTestCase {
    private var directory = ""
    private var path: String { directory + "/data.lock" }

    override func setUp() {
        var template = Array("/tmp/libsync-drw-swift-XXXXXX".utf8CString)
        directory = String(cString: mkdtemp(&template)!)
    }

    override func tearDown() { _ = system("rm -rf '\(directory)'") }

    func testReadersShareAndAWriterExcludesThem() throws {
        let a = try DistributedReadWriteLock(path: path), b = try DistributedReadWriteLock(path: path)
        let w = try DistributedReadWriteLock(path: path)
        XCTAssertTrue(try a.tryLock(.read))
        XCTAssertTrue(try b.tryLock(.read))
        XCTAssertFalse(try w.tryLock(.write))
        XCTAssertEqual(a.heldKind, .read)
        let first = try XCTUnwrap(a.fencingToken), second = try XCTUnwrap(b.fencingToken)
        XCTAssertLessThan(first, second)
        try a.unlock()
        XCTAssertFalse(try w.tryLock(.write))
        try b.unlock()
        XCTAssertTrue(try w.tryLock(.write))
        XCTAssertGreaterThan(try XCTUnwrap(w.fencingToken), second)
        XCTAssertFalse(try a.tryLock(.read))
        XCTAssertFalse(try b.tryLock(.write))
        let written = try XCTUnwrap(w.fencingToken)
        try w.unlock()
        XCTAssertTrue(try a.tryLock(.read))
        XCTAssertGreaterThan(try XCTUnwrap(a.fencingToken), written)
        try a.unlock()
        XCTAssertNil(a.heldKind)
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
    }

    func testReentryWithoutUpgradeOrDowngrade() throws {
        let lock = try DistributedReadWriteLock(path: path)
        try lock.lock(.read)
        try lock.lock(.read)
        XCTAssertThrowsError(try lock.lock(.write)) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        try lock.unlock()
        XCTAssertEqual(lock.heldKind, .read)
        try lock.unlock()
        try lock.lock(.write)
        try lock.lock(.write)
        XCTAssertThrowsError(try lock.lock(.read)) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        try lock.unlock()
        try lock.unlock()
        XCTAssertNil(lock.heldKind)
    }

    /// A writer waiting for a reader keeps the gate: a new reader waits behind it (no starving
    /// the writer); when the reader leaves, the writer gets it, then the new reader.
    func testAPendingWriterStopsNewReaders() throws {
        let reader = try DistributedReadWriteLock(path: path), late = try DistributedReadWriteLock(path: path)
        try reader.lock(.read)
        let readToken = try XCTUnwrap(reader.fencingToken)
        let gate = try DistributedLock(path: path)
        let writerHolds = DispatchSemaphore(value: 0), writerMayGo = DispatchSemaphore(value: 0)
        let writerToken = Atomic<UInt64>(0)
        let path = self.path
        DispatchQueue.global().async {
            let writer = try! DistributedReadWriteLock(path: path)
            XCTAssertTrue(try! writer.tryLock(.write, timeout: .seconds(60), pollInterval: .milliseconds(1)))
            writerToken.store(writer.fencingToken ?? 0, ordering: .relaxed)
            writerHolds.signal()
            writerMayGo.wait()
            try! writer.unlock()
        }
        // The writer's claim is visible as the gate's holder (bound: only against a hang).
        var waited = 0
        while try gate.holder == nil && waited < 60_000 { usleep(1000); waited += 1 }
        XCTAssertNotNil(try gate.holder)
        XCTAssertFalse(try late.tryLock(.read))  // behind the pending writer
        try reader.unlock()
        XCTAssertEqual(writerHolds.wait(timeout: .now() + 60), .success)
        XCTAssertGreaterThan(writerToken.load(ordering: .relaxed), readToken)
        XCTAssertFalse(try late.tryLock(.read))
        writerMayGo.signal()
        XCTAssertTrue(try late.tryLock(.read, timeout: .seconds(60), pollInterval: .milliseconds(1)))
        XCTAssertGreaterThan(try XCTUnwrap(late.fencingToken), writerToken.load(ordering: .relaxed))
        try late.unlock()
    }

    /// A reader or a writer killed while holding: the next writer (reader) recovers it.
    func testDeadHoldersAreRecovered() throws {
        for kind in [DistributedReadWriteLock.Kind.read, .write] {
            var ready: [Int32] = [0, 0]
            XCTAssertEqual(pipe(&ready), 0)
            let child = fork()
            if child == 0 {
                let mine = try? DistributedReadWriteLock(path: path)
                var ok: UInt8 = (try? mine?.tryLock(kind)) == true ? 1 : 0
                _ = write(ready[1], &ok, 1)
                while true { pause() }
            }
            var ok: UInt8 = 0
            XCTAssertEqual(read(ready[0], &ok, 1), 1)
            XCTAssertEqual(ok, 1)
            let other = try DistributedReadWriteLock(path: path)
            XCTAssertFalse(try other.tryLock(kind == .read ? .write : .read))
            kill(child, SIGKILL)
            waitpid(child, nil, 0)
            XCTAssertTrue(try other.tryLock(.write))  // the dead holder's share or hold is recovered
            try other.unlock()
            XCTAssertTrue(try other.tryLock(.read))
            try other.unlock()
            close(ready[0])
            close(ready[1])
        }
    }

    func testBadInput() throws {
        XCTAssertThrowsError(try DistributedReadWriteLock(path: "ftp://127.0.0.1?lock=x")) {
            guard case .invalidTarget = $0 as? DistributedLockError else { return XCTFail("\($0)") }
        }
        XCTAssertThrowsError(try DistributedReadWriteLock(path: directory + "/missing/x"))
        XCTAssertThrowsError(try DistributedReadWriteLock(path: path, options: .recursive))
        let lock = try DistributedReadWriteLock(path: directory + "/made/x", options: .makeParents)
        XCTAssertTrue(try lock.tryLock(.read))
        try lock.breakLock()
        XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
    }
}
