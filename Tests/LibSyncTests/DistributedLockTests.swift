import Glibc
import XCTest
import LibSync

final class DistributedLockTests: XCTestCase {
    private var directory = ""
    private var path: String { directory + "/resource.lock" }

    override func setUp() {
        var template = Array("/tmp/libsync-dlock-swift-XXXXXX".utf8CString)
        directory = String(cString: mkdtemp(&template)!)
    }

    override func tearDown() { _ = system("rm -rf '\(directory)'") }

    func testTryLockHolderAndUnlock() throws {
        let a = try DistributedLock(path: path), b = try DistributedLock(path: path)
        XCTAssertNil(try a.holder)
        XCTAssertNil(try a.lockDate)
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        XCTAssertTrue(try a.tryLock())
        XCTAssertFalse(try b.tryLock())
        XCTAssertTrue(a.isLocked)
        XCTAssertFalse(b.isLocked)
        XCTAssertThrowsError(try a.tryLock()) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        let holder = try XCTUnwrap(try b.holder)
        XCTAssertEqual(holder.pid, getpid())
        XCTAssertTrue(holder.isOnThisHost)
        XCTAssertFalse(holder.isStale)
        XCTAssertGreaterThan(holder.processStart, 0)
        XCTAssertEqual(try b.lockDate, holder.acquired)
        let seconds = holder.acquired.components.seconds
        XCTAssertTrue(seconds >= now.tv_sec - 1 && seconds < now.tv_sec + 60)
        XCTAssertFalse(try b.recoverStale())  // a live holder is not stale
        try a.unlock()
        XCTAssertNil(try a.holder)
        XCTAssertEqual(rmdir(path), 0)  // released: an empty directory
    }

    func testUnlockErrorsAreDistinct() throws {
        let a = try DistributedLock(path: path), b = try DistributedLock(path: path)
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        XCTAssertTrue(try a.tryLock())
        try b.breakLock()
        XCTAssertFalse(a.isLocked)
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
        XCTAssertTrue(try a.tryLock())
        try b.breakLock()
        XCTAssertTrue(try b.tryLock())
        XCTAssertThrowsError(try a.unlock()) {
            XCTAssertEqual($0 as? DistributedLockError, .brokenAndHeldByAnother)
            XCTAssertEqual(($0 as? DistributedLockError)?.code, EBUSY)
        }
        try b.unlock()
    }

    func testBadPaths() throws {
        func error(_ path: String) -> DistributedLockError? {
            do { _ = try DistributedLock(path: path); return nil } catch { return error }
        }
        XCTAssertEqual(error(directory + "/missing/lock"), .parentMissing(directory + "/missing/lock"))
        XCTAssertEqual(error(""), .invalidPath(""))
        let file = directory + "/file"
        close(open(file, O_CREAT | O_WRONLY, 0o644))
        XCTAssertEqual(error(file), .notALock(file))
        XCTAssertEqual(error(file + "/lock"), .parentNotADirectory(file + "/lock"))
        let foreign = directory + "/foreign"
        mkdir(foreign, 0o755)
        close(open(foreign + "/data.txt", O_CREAT | O_WRONLY, 0o644))
        XCTAssertEqual(error(foreign), .notALock(foreign))
        XCTAssertEqual(error(foreign).map { "\($0)" }, "'\(foreign)' exists and is not a lock (a file, or a directory with other content)")
    }

    func testWithLockAndTimeout() throws {
        let a = try DistributedLock(path: path), b = try DistributedLock(path: path)
        XCTAssertEqual(try a.withLock(timeout: .seconds(5)) { 42 }, 42)
        XCTAssertFalse(a.isLocked)
        struct Failure: Error {}
        XCTAssertThrowsError(try a.withLock { throw Failure() }) { XCTAssertTrue($0 is Failure) }
        XCTAssertFalse(a.isLocked)
        try b.lock()
        let start = ContinuousClock.now
        XCTAssertThrowsError(try a.lock(timeout: .milliseconds(100), pollInterval: .milliseconds(5))) {
            XCTAssertEqual($0 as? DistributedLockError, .timedOut)
        }
        let waited = ContinuousClock.now - start
        XCTAssertTrue(waited >= .milliseconds(99) && waited < .seconds(5))
        try b.unlock()
    }

    /// A forked child takes the lock and is killed: the lock is stale, and recovered.
    func testKilledHolderIsStaleAndRecovered() throws {
        let lock = try DistributedLock(path: path)
        var ready: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ready), 0)
        let child = fork()
        if child == 0 {
            let mine = try? DistributedLock(path: path)
            var ok: UInt8 = (try? mine?.tryLock()) == true ? 1 : 0
            _ = write(ready[1], &ok, 1)
            while true { pause() }
        }
        var ok: UInt8 = 0
        XCTAssertEqual(read(ready[0], &ok, 1), 1)
        XCTAssertEqual(ok, 1)
        XCTAssertEqual(try lock.holder?.pid, child)
        XCTAssertEqual(try lock.holder?.isStale, false)
        kill(child, SIGKILL)
        waitpid(child, nil, 0)
        XCTAssertEqual(try lock.holder?.isStale, true)
        XCTAssertFalse(try lock.tryLock())
        XCTAssertTrue(try lock.recoverStale())
        XCTAssertEqual(try lock.holder?.pid, getpid())
        try lock.unlock()
        close(ready[0])
        close(ready[1])
    }
}
