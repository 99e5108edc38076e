import Dispatch
import Glibc
import Synchronization
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
        XCTAssertTrue(a.isHeld)
        XCTAssertFalse(b.isHeld)
        XCTAssertThrowsError(try a.tryLock()) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        let holder = try XCTUnwrap(try b.holder)
        XCTAssertEqual(holder.pid, getpid())
        XCTAssertTrue(holder.isOnThisHost)
        XCTAssertFalse(holder.isStale)
        XCTAssertGreaterThan(holder.processStart, 0)
        XCTAssertEqual(try b.lockDate, holder.acquired)
        let seconds = holder.acquired.components.seconds
        XCTAssertTrue(seconds >= now.tv_sec - 1 && seconds < now.tv_sec + 60)
        XCTAssertFalse(try b.recover())  // a live holder is not stale
        try a.unlock()
        XCTAssertNil(try a.holder)
        XCTAssertEqual(rmdir(path), 0)  // released: an empty directory
    }

    func testUnlockErrorsAreDistinct() throws {
        let a = try DistributedLock(path: path), b = try DistributedLock(path: path)
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        XCTAssertTrue(try a.tryLock())
        try b.breakLock()
        XCTAssertFalse(a.isHeld)
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

    /// Acquiring again through a non-recursive object: `.alreadyHeld` while the hold is in place;
    /// once it was lost, the acquire ends it and throws `.broken` once, and the next acquires.
    func testAcquireAfterALostHoldReportsTheLossOnce() throws {
        let a = try DistributedLock(path: path), b = try DistributedLock(path: path)
        XCTAssertTrue(try a.tryLock())
        XCTAssertThrowsError(try a.tryLock()) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        try b.breakLock()
        XCTAssertThrowsError(try a.tryLock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
        XCTAssertEqual(a.lockCount, 0)
        XCTAssertTrue(try a.tryLock())
        try b.breakLock()
        XCTAssertTrue(try b.tryLock())  // lost, and another holds it now
        XCTAssertThrowsError(try a.tryLock(timeout: .seconds(10))) {
            XCTAssertEqual($0 as? DistributedLockError, .broken)
            XCTAssertEqual(($0 as? DistributedLockError)?.code, ESTALE)
        }
        XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        XCTAssertFalse(try a.tryLock())
        try b.unlock()
        try a.lock()
        try a.unlock()
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
        XCTAssertEqual(try a.withLockIfAvailable(timeout: .seconds(5)) { 42 }, 42)
        XCTAssertFalse(a.isHeld)
        struct Failure: Error {}
        XCTAssertThrowsError(try a.withLock { throw Failure() }) { XCTAssertTrue($0 is Failure) }
        XCTAssertFalse(a.isHeld)
        try b.lock()
        let start = ContinuousClock.now
        XCTAssertFalse(try a.tryLock(timeout: .milliseconds(100), pollInterval: .milliseconds(5)))
        XCTAssertNil(try a.withLockIfAvailable(timeout: .milliseconds(10)) { XCTFail("ran without the lock") })
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
        XCTAssertTrue(try lock.recover())
        XCTAssertEqual(try lock.holder?.pid, getpid())
        try lock.unlock()
        close(ready[0])
        close(ready[1])
    }

    /// Runs `body` on a thread other than the caller's, and waits for it.
    private func onAnotherThread(_ body: @escaping @Sendable () throws -> Void) {
        let done = DispatchGroup()
        DispatchQueue.global().async(group: done) {
            do { try body() } catch { XCTFail("\(error)") }
        }
        done.wait()
    }

    /// One object shared by threads: they take turns (the holder is the thread), none unlocks
    /// another's hold.
    func testThreadsShareOneObject() throws {
        let lock = try DistributedLock(path: path)
        final class Counter: @unchecked Sendable { var inside = 0, turns = 0 }
        let counter = Counter(), failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 6) { _ in
            for _ in 0..<25 {
                do {
                    guard try lock.tryLock(timeout: .seconds(60), pollInterval: .milliseconds(1)) else { throw DistributedLockError.timedOut }
                    if counter.inside != 0 { failures.add(1, ordering: .relaxed) }
                    counter.inside += 1
                    counter.turns += 1
                    counter.inside -= 1
                    try lock.unlock()
                } catch { failures.add(1, ordering: .relaxed) }
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0)
        XCTAssertEqual(counter.turns, 150)
        XCTAssertTrue(try lock.tryLock())
        onAnotherThread {
            XCTAssertFalse(lock.isHeld)
            XCTAssertEqual(lock.lockCount, 0)
            XCTAssertEqual(try? lock.tryLock(), false)
            XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .notHeld) }
        }
        XCTAssertThrowsError(try lock.tryLock()) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }
        try lock.unlock()
    }

    func testRecursiveProcessOwnedAndDeadlock() throws {
        let lock = try DistributedLock(path: path, options: [.recursive])
        for depth in 1...3 {
            try lock.lock()
            XCTAssertEqual(lock.lockCount, depth)
        }
        let other = try DistributedLock(path: path)
        XCTAssertThrowsError(try other.lock()) { XCTAssertEqual($0 as? DistributedLockError, .alreadyHeld) }  // would wait forever
        XCTAssertFalse(try other.tryLock(timeout: .milliseconds(10)))
        try lock.unlock()
        XCTAssertEqual(lock.lockCount, 2)
        try lock.unlockAll()
        XCTAssertEqual(lock.lockCount, 0)
        XCTAssertFalse(lock.isHeld)

        let shared = try DistributedLock(path: path, options: [.recursive, .processOwned])
        XCTAssertTrue(try shared.tryLock())
        onAnotherThread {
            XCTAssertEqual(try? shared.tryLock(), true)  // a re-entry: the process holds it
            XCTAssertEqual(shared.lockCount, 2)
            XCTAssertNoThrow(try shared.unlockAll())
        }
        XCTAssertFalse(shared.isHeld)
        XCTAssertThrowsError(try DistributedLock(path: path, mode: 0o1000)) { XCTAssertEqual($0 as? DistributedLockError, .invalidMode(0o1000)) }
    }

    func testMakeParentsModeAndRemoveOnRelease() throws {
        let nested = directory + "/made/here/x.lock"
        XCTAssertThrowsError(try DistributedLock(path: nested)) { XCTAssertEqual($0 as? DistributedLockError, .parentMissing(nested)) }
        let lock = try DistributedLock(path: nested, options: [.makeParents, .removeOnRelease], mode: 0o600)
        XCTAssertTrue(try lock.tryLock())
        var info = stat()
        XCTAssertEqual(stat(nested, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)
        try lock.unlock()
        XCTAssertNotEqual(stat(nested, &info), 0)  // removed on release
    }

    /// A forked child never holds its parent's lock: its unlock throws `.notHeld`, and its copy of
    /// a `.releaseOnDeinit` object going away touches nothing.
    func testForkedChildNeverHoldsTheParentsLock() throws {
        var lock: DistributedLock? = try DistributedLock(path: path, options: [.releaseOnDeinit])
        XCTAssertTrue(try lock!.tryLock())
        let child = fork()
        if child == 0 {
            var ok = !lock!.isHeld
            do { try lock!.unlock(); ok = false } catch { ok = ok && error == .notHeld }
            lock = nil  // deinit in the child
            _exit(ok ? 0 : 1)
        }
        var status: Int32 = 0
        XCTAssertEqual(waitpid(child, &status, 0), child)
        XCTAssertEqual(status, 0)
        XCTAssertEqual(try lock!.holder?.pid, getpid())
        XCTAssertTrue(lock!.isHeld)
        lock = nil  // .releaseOnDeinit: released here, in the parent
        XCTAssertNil(try DistributedLock(path: path).holder)
    }

    /// A path near PATH_MAX with a long file name: every operation works.
    func testPathAtPathMax() throws {
        var parent = directory + "/long"
        mkdir(parent, 0o755)
        let name = String(repeating: "n", count: 150)
        while parent.utf8.count + 1 + 200 + 1 + name.utf8.count <= Int(PATH_MAX) - 1 {
            parent += "/" + String(repeating: "d", count: 200)
            XCTAssertEqual(mkdir(parent, 0o755), 0)
        }
        parent += "/" + String(repeating: "e", count: Int(PATH_MAX) - 1 - parent.utf8.count - 2 - name.utf8.count)
        XCTAssertEqual(mkdir(parent, 0o755), 0)
        let long = parent + "/" + name
        XCTAssertEqual(long.utf8.count, Int(PATH_MAX) - 1)
        let a = try DistributedLock(path: long), b = try DistributedLock(path: long)
        XCTAssertTrue(try a.tryLock())
        XCTAssertEqual(try b.holder?.pid, getpid())
        try a.unlock()
        XCTAssertTrue(try b.tryLock(timeout: .seconds(1)))
        try a.breakLock()
        XCTAssertThrowsError(try b.unlock()) { XCTAssertEqual($0 as? DistributedLockError, .broken) }
    }
}
