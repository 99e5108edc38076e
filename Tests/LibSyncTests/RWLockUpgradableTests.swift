import Dispatch
import Foundation
import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// The error `body` throws, or nil (typed throws inside an XCTAssert's autoclosure in a
/// non-throwing closure does not compile).
private func failure(_ body: () throws -> Void) -> LockError? {
    do { try body(); return nil } catch { return error as? LockError ?? .other(-1) }
}

/// What `body` returns, or nil if it throws.
private func outcome(_ body: () throws -> Bool) -> Bool? {
    do { return try body() } catch { return nil }
}

/// SyncRWLock's upgradable read: exclusion, an upgrade no waiting writer gets in front of,
/// downgrades, timed and try forms, misuse, and lock-order modes.
final class RWLockUpgradableTests: XCTestCase {
    /// Polls `condition`; fails after 60 s (a guard against hangs, not a timing bound).
    func waitUntil(_ what: String, _ condition: () -> Bool) {
        let end = Date().addingTimeInterval(60)
        while !condition() {
            if Date() > end { XCTFail("timed out waiting for \(what)"); return }
            usleep(1000)
        }
    }

    /// Runs `body` on a new thread and waits for it.
    func onOtherThread(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { body(); done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "a thread hung")
    }

    func testMisuseThrows() throws {
        let rw = SyncRWLock()
        XCTAssertEqual(failure { _ = try rw.upgrade() }, .wouldDeadlock)
        XCTAssertEqual(failure { _ = try rw.upgradableReadUnlock() }, .notOwner)
        XCTAssertEqual(failure { _ = try rw.downgradeUpgradableRead() }, .notOwner)
        XCTAssertEqual(failure { _ = try rw.downgradeToUpgradableRead() }, .notOwner)
        // A plain reader's upgrade: wouldDeadlock, not a hang.
        try rw.readLock()
        XCTAssertEqual(failure { _ = try rw.upgrade() }, .wouldDeadlock)
        XCTAssertEqual(failure { _ = try rw.tryUpgrade() }, .wouldDeadlock)
        try rw.readUnlock()
        try rw.upgradableReadLock()
        XCTAssertEqual(failure { _ = try rw.upgradableReadLock() }, .wouldDeadlock)
        XCTAssertEqual(failure { _ = try rw.writeLock() }, .wouldDeadlock)
        XCTAssertFalse(rw.tryUpgradableReadLock())
        onOtherThread {
            XCTAssertEqual(failure { _ = try rw.upgradableReadUnlock() }, .notOwner)
            XCTAssertEqual(failure { _ = try rw.upgrade() }, .wouldDeadlock)
            XCTAssertEqual(outcome { try rw.upgradableReadLock(timeout: .milliseconds(1)) }, false)
        }
        try rw.upgrade()
        // A second upgrade.
        XCTAssertEqual(failure { _ = try rw.upgrade() }, .wouldDeadlock)
        XCTAssertEqual(failure { _ = try rw.upgradableReadUnlock() }, .notOwner)
        try rw.writeUnlock()
        XCTAssertTrue(rw.tryWriteLock())
        try rw.writeUnlock()
    }

    func testExclusionAndASecondUpgradableReaderWaits() throws {
        let rw = SyncRWLock()
        try rw.readLock()
        try rw.upgradableReadLock()  // beside a reader
        let secondIn = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            XCTAssertFalse(rw.tryWriteLock())
            XCTAssertTrue(rw.tryReadLock())  // plain readers beside it
            XCTAssertNil(failure { _ = try rw.readUnlock() })
            XCTAssertNil(failure { _ = try rw.upgradableReadLock() })  // waits for the first: no deadlock
            secondIn.store(true, ordering: .sequentiallyConsistent)
            XCTAssertNil(failure { _ = try rw.upgradableReadUnlock() })
            done.signal()
        }
        usleep(20_000)  // room to get in wrongly
        XCTAssertFalse(secondIn.load(ordering: .sequentiallyConsistent))
        try rw.readUnlock()
        try rw.upgrade()
        XCTAssertFalse(secondIn.load(ordering: .sequentiallyConsistent))
        try rw.writeUnlock()
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(secondIn.load(ordering: .sequentiallyConsistent))
    }

    /// A writer waits while the upgradable reader upgrades behind a plain reader: the upgrader
    /// writes first, the writer after it.
    func testUpgradeLetsNoWaitingWriterIn() throws {
        let rw = SyncRWLock()
        let value = Atomic<Int>(0), writerSaw = Atomic<Int>(-1)
        let readerMayLeave = DispatchSemaphore(value: 0), writerDone = DispatchSemaphore(value: 0)
        let readerIn = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            XCTAssertNil(failure { _ = try rw.readLock() })
            readerIn.signal()
            readerMayLeave.wait()
            XCTAssertNil(failure { _ = try rw.readUnlock() })
        }
        readerIn.wait()
        try rw.upgradableReadLock()
        Thread.detachNewThread {
            XCTAssertNil(failure { _ = try rw.writeLock() })
            writerSaw.store(value.load(ordering: .sequentiallyConsistent), ordering: .sequentiallyConsistent)
            value.store(2, ordering: .sequentiallyConsistent)
            XCTAssertNil(failure { _ = try rw.writeUnlock() })
            writerDone.signal()
        }
        waitUntil("the writer to wait") { RWLockWords.waitingWriters(rw.memory.raw) == 1 }
        XCTAssertFalse(try rw.tryUpgrade())               // the reader holds it
        XCTAssertFalse(try rw.upgrade(timeout: .milliseconds(1)))
        readerMayLeave.signal()
        try rw.upgrade()
        XCTAssertEqual(writerSaw.load(ordering: .sequentiallyConsistent), -1)
        value.store(1, ordering: .sequentiallyConsistent)
        try rw.writeUnlock()
        XCTAssertEqual(writerDone.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(writerSaw.load(ordering: .sequentiallyConsistent), 1)
        XCTAssertEqual(value.load(ordering: .sequentiallyConsistent), 2)
    }

    func testDowngrades() throws {
        let rw = SyncRWLock()
        try rw.writeLock()
        try rw.downgradeToUpgradableRead()
        onOtherThread {
            XCTAssertTrue(rw.tryReadLock())
            XCTAssertNil(failure { _ = try rw.readUnlock() })
            XCTAssertFalse(rw.tryUpgradableReadLock())
            XCTAssertFalse(rw.tryWriteLock())
        }
        try rw.downgradeUpgradableRead()
        onOtherThread {
            XCTAssertTrue(rw.tryUpgradableReadLock())
            XCTAssertNil(failure { _ = try rw.upgradableReadUnlock() })
        }
        try rw.readUnlock()
        XCTAssertTrue(rw.tryWriteLock())
        try rw.writeUnlock()
    }

    /// withUpgradableReadLock releases whichever hold its body ends with.
    func testWithUpgradableReadLock() throws {
        let rw = SyncRWLock()
        var table = ["a": 1]
        for key in ["a", "b"] {
            let found = rw.withUpgradableReadLock { () -> Int in
                if let v = table[key] { return v }
                try! rw.upgrade()
                table[key] = 2
                return 2
            }
            XCTAssertEqual(found, table[key])
        }
        rw.withUpgradableReadLock { try! rw.upgrade(); try! rw.downgradeToUpgradableRead(); try! rw.downgradeUpgradableRead() }
        XCTAssertTrue(rw.tryWriteLock())
        try rw.writeUnlock()
    }

    // MARK: a body that releases the hold itself stops the program

    /// A thread that takes a plain read of `rw` and leaves it held (another reader's hold, which
    /// no release of the caller's may take away).
    func leaveAnotherReader(_ rw: SyncRWLock) {
        onOtherThread { XCTAssertTrue(rw.tryReadLock()) }
    }

    func expectStop(_ name: String, file: StaticString = #filePath, line: UInt = #line) {
        let (status, text) = ChildTest.run("RWLockUpgradableTests", name)
        XCTAssertTrue(ChildTest.trapped(status), "status \(status): \(text)", file: file, line: line)
        XCTAssertTrue(text.contains("SyncRWLock.withUpgradableReadLock: the body released the lock itself"), text,
                      file: file, line: line)
    }

    /// Releasing the upgradable read, the write lock after an upgrade, or the read lock after a
    /// downgrade inside the body: the block's end would release another reader's hold (or
    /// nothing); it stops the program instead.
    func testBodyThatReleasesTheHoldStopsTheProgram() {
        expectStop("testChildReleasesUpgradable")
        expectStop("testChildReleasesWriteAfterUpgrade")
        expectStop("testChildReleasesDowngradedRead")
    }

    func testChildReleasesUpgradable() {
        guard ChildTest.isChild("testChildReleasesUpgradable") else { return }
        let rw = SyncRWLock()
        leaveAnotherReader(rw)
        rw.withUpgradableReadLock { try! rw.upgradableReadUnlock() }
    }

    func testChildReleasesWriteAfterUpgrade() {
        guard ChildTest.isChild("testChildReleasesWriteAfterUpgrade") else { return }
        let rw = SyncRWLock()
        rw.withUpgradableReadLock { try! rw.upgrade(); try! rw.writeUnlock() }
    }

    func testChildReleasesDowngradedRead() {
        guard ChildTest.isChild("testChildReleasesDowngradedRead") else { return }
        let rw = SyncRWLock()
        leaveAnotherReader(rw)
        rw.withUpgradableReadLock { try! rw.downgradeUpgradableRead(); try! rw.readUnlock() }
    }

    /// The reads a body takes and releases itself are its own: the block's end releases the
    /// one hold it took (here a read, after a downgrade, a release and a new read), and another
    /// reader's hold stays. Nested blocks, on two locks or on the same one, keep their counts
    /// apart.
    func testBodyReadsAreCountedPerLock() throws {
        let rw = SyncRWLock(), other = SyncRWLock()
        leaveAnotherReader(rw)
        rw.withUpgradableReadLock {
            try! rw.downgradeUpgradableRead()
            try! rw.readUnlock()
            try! rw.readLock()
            other.withUpgradableReadLock {
                try! other.readLock()          // a read of its own beside the upgradable read
                try! other.readUnlock()
                try! rw.readLock()             // the outer lock's: released below, in the body
                try! rw.readUnlock()
            }
            // Holding a read, the thread may take the upgradable read again in a nested block:
            // that block releases its own hold, the outer one its read.
            rw.withUpgradableReadLock { try! rw.downgradeUpgradableRead() }
        }
        XCTAssertFalse(rw.tryWriteLock())      // the other reader still holds it
        XCTAssertEqual(RWLockWords.state(rw.memory.raw).pointee.load(ordering: .relaxed), 1)
        XCTAssertEqual(RWLockWords.state(other.memory.raw).pointee.load(ordering: .relaxed), 0)
    }

    /// Process-shared, in memory a forked child shares: the child is not the parent's upgradable
    /// reader (misuse codes), reads beside it, then waits for it and upgrades after it.
    func testAcrossProcesses() throws {
        let size = 4096
        let mapping = try XCTUnwrap(mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0))
        XCTAssertNotEqual(mapping, MAP_FAILED)
        defer { munmap(mapping, size) }
        let m = mapping
        let value = (mapping + 64).assumingMemoryBound(to: Int32.self)
        RWLockWords.initialize(m, shared: true)
        XCTAssertEqual(RWLockWords.upgradableLock(m), 0)
        let pid = fork()
        if pid == 0 {
            alarm(60)
            var ok = RWLockWords.tryUpgradableLock(m) == EBUSY && RWLockWords.upgradableUnlock(m) == EPERM
                && RWLockWords.upgrade(m) == EDEADLK && RWLockWords.tryReadLock(m) == 0 && RWLockWords.readUnlock(m) == 0
            ok = ok && RWLockWords.upgradableLock(m) == 0 && RWLockWords.upgrade(m) == 0 && value.pointee == 1
            value.pointee = 2
            ok = ok && RWLockWords.writeUnlock(m) == 0
            _exit(ok ? 0 : 1)
        }
        usleep(20_000)  // room to get in wrongly
        XCTAssertEqual(RWLockWords.upgrade(m), 0)
        XCTAssertEqual(value.pointee, 0)
        value.pointee = 1
        XCTAssertEqual(RWLockWords.writeUnlock(m), 0)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(status, 0)
        XCTAssertEqual(value.pointee, 2)
        // A dead upgradable reader's thread id, reused by this thread: not the holder here.
        m.storeBytes(of: RWLockWords.shared | RWLockWords.upgradable, as: UInt32.self)
        (m + 8).storeBytes(of: threadID(), as: UInt32.self)
        XCTAssertEqual(RWLockWords.upgradableUnlock(m), EPERM)
        XCTAssertEqual(RWLockWords.upgrade(m), EDEADLK)
        XCTAssertEqual(RWLockWords.downgradeUpgradable(m), EPERM)
        XCTAssertEqual(RWLockWords.upgradableLock(m, deadline: Deadline.after(.milliseconds(1))), ETIMEDOUT)
    }

    /// Lock-order checking knows the upgradable side, and the mode after an upgrade.
    func testLockOrderModes() throws {
        final class Kinds: @unchecked Sendable { var seen: [[String]] = [] }
        let kinds = Kinds()
        LockOrderChecking.reset()
        LockOrderChecking.onCycle { cycle in kinds.seen.append(cycle.edges.map { "\($0.fromKind)>\($0.toKind)" }) }
        LockOrderChecking.isEnabled = true
        defer { LockOrderChecking.isEnabled = false; LockOrderChecking.onCycle(nil); LockOrderChecking.reset() }
        let cache = SyncRWLock(), m = SyncMutex()
        try cache.upgradableReadLock()
        m.withLock {}
        try cache.upgradableReadUnlock()
        try cache.upgradableReadLock()
        try cache.upgrade()
        try cache.writeUnlock()
        m.withLock {
            XCTAssertNil(failure { try cache.upgradableReadLock(); try cache.upgrade(); try cache.writeUnlock() })
        }
        XCTAssertEqual(kinds.seen.count, 1)
        XCTAssertEqual(Set(kinds.seen.first ?? []),
                       ["rwlock (upgradable read)>mutex", "mutex>rwlock (upgradable read)"])
        // After an upgrade the hold is the write side: its next edge says so.
        let n = SyncMutex()
        try cache.upgradableReadLock()
        try cache.upgrade()
        n.withLock {}
        try cache.downgradeToUpgradableRead()
        try cache.upgradableReadUnlock()
        n.withLock { cache.withReadLock {} }
        XCTAssertEqual(kinds.seen.count, 2)
        XCTAssertEqual(Set(kinds.seen.last ?? []), ["rwlock (write)>mutex", "mutex>rwlock (read)"])
        withExtendedLifetime(cache) {}
    }
}
