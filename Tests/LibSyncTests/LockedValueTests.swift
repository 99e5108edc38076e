import Glibc
import Synchronization
import XCTest
import LibSync

/// SyncLockedValue and SyncRWLockedValue, in a file that imports Synchronization too: both
/// modules' types are used side by side without qualification (no name collides).
final class LockedValueTests: XCTestCase {
    func testBesideSynchronizationMutex() {
        let theirs = Mutex<Int>(0)
        let ours = SyncLockedValue(0)
        let rw = SyncRWLockedValue(0)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<5_000 {
                theirs.withLock { $0 += 1 }
                ours.withLock { $0 += 1 }
                rw.write { $0 += 1 }
                _ = rw.read { $0 }
            }
        }
        XCTAssertEqual(theirs.withLock { $0 }, 20_000)
        XCTAssertEqual(ours.withLock { $0 }, 20_000)
        XCTAssertEqual(rw.read { $0 }, 20_000)
    }

    func testWithLockReturnsRethrowsAndReleases() {
        struct Refused: Error {}
        let box = SyncLockedValue([String: Int]())
        XCTAssertEqual(box.withLock { $0["a", default: 0] += 1; return $0.count }, 1)
        XCTAssertThrowsError(try box.withLock { (_: inout [String: Int]) throws(Refused) -> Int in throw Refused() }) {
            XCTAssertTrue($0 is Refused)
        }
        XCTAssertFalse(box.isHeldByCurrentThread)      // released after the throw
        box.withLock { _ in XCTAssertTrue(box.isHeldByCurrentThread) }
        XCTAssertEqual(box.withLockIfAvailable { $0["a"] }, 1)
        box.withLock { _ in XCTAssertNil(box.withLockIfAvailable { $0.count } as Int?) }  // held: nil, no trap
    }

    func testReadersShareWritersExclude() {
        let value = SyncRWLockedValue(1)
        let inside = Atomic<Int>(0)
        let thread = JoinableThread {
            value.read { _ in
                inside.store(1, ordering: .releasing)
                while inside.load(ordering: .acquiring) != 2 { sched_yield() }
            }
        }
        while inside.load(ordering: .acquiring) != 1 { sched_yield() }
        XCTAssertEqual(value.read { $0 + 1 }, 2)       // a second reader gets in
        inside.store(2, ordering: .releasing)
        thread.join()
        value.write { $0 = 10 }
        XCTAssertEqual(value.read { $0 }, 10)
    }

    // MARK: upgradableRead

    /// The check-then-write of an upgradable read: it reads, writes what it read, reads its
    /// own write, and returns the body's result; a throwing body releases the lock.
    func testUpgradableReadReadsThenWrites() {
        struct Refused: Error {}
        let cache = SyncRWLockedValue([String: Int]())
        let filled = cache.upgradableRead { access -> Bool in
            guard access.read({ $0["a"] }) == nil else { return false }
            access.write { $0["a"] = 1 }
            XCTAssertEqual(access.read { $0["a"] }, 1)
            access.write { $0["b"] = 2 }    // a second write in the same body
            return true
        }
        XCTAssertTrue(filled)
        XCTAssertFalse(cache.upgradableRead { access in access.read { $0["a"] } == nil })
        XCTAssertEqual(cache.read { $0 }, ["a": 1, "b": 2])
        XCTAssertThrowsError(try cache.upgradableRead { (access: borrowing SyncRWLockedValue<[String: Int]>.UpgradableAccess) throws(Refused) in
            try access.write { (_: inout [String: Int]) throws(Refused) in throw Refused() }
        }) { XCTAssertTrue($0 is Refused) }
        cache.write { $0["c"] = 3 }         // released after the throw: a writer gets in
        XCTAssertEqual(cache.read { $0.count }, 3)
    }

    /// Plain readers read beside the upgradable reader; a second upgradable reader waits until
    /// the first one's body ends.
    func testUpgradableReadBesidePlainReadersExcludesAnother() {
        let value = SyncRWLockedValue(0)
        let stage = Atomic<Int>(0)
        let holder = JoinableThread {
            value.upgradableRead { _ in
                stage.store(1, ordering: .releasing)
                while stage.load(ordering: .acquiring) != 2 { sched_yield() }
            }
        }
        while stage.load(ordering: .acquiring) != 1 { sched_yield() }
        XCTAssertEqual(value.read { $0 }, 0)           // a plain reader gets in beside it
        let second = Atomic<Int>(0)
        let other = JoinableThread {
            value.upgradableRead { access in access.write { $0 += 1 } }
            second.store(1, ordering: .releasing)
        }
        // The second one waits while the first holds it (a bounded look, not a timing claim:
        // it cannot finish before stage 2 whatever the scheduler does).
        for _ in 0..<1_000 { sched_yield() }
        XCTAssertEqual(second.load(ordering: .acquiring), 0)
        XCTAssertEqual(value.read { $0 }, 0)
        stage.store(2, ordering: .releasing)
        holder.join()
        other.join()
        XCTAssertEqual(second.load(ordering: .acquiring), 1)
        XCTAssertEqual(value.read { $0 }, 1)
    }

    /// Check-then-increment from several threads through upgradable reads, beside plain
    /// readers and writers: no increment is lost (each write is the upgraded reader's alone).
    func testUpgradableReadsLoseNoUpdate() {
        let value = SyncRWLockedValue(0)
        DispatchQueue.concurrentPerform(iterations: 4) { index in
            for i in 0..<2_000 {
                switch (index + i) % 4 {
                case 0: value.write { $0 += 1 }
                case 1: _ = value.read { $0 }
                default:
                    value.upgradableRead { access in
                        let seen = access.read { $0 }
                        access.write { $0 = seen + 1 }    // still `seen` when it writes
                    }
                }
            }
        }
        XCTAssertEqual(value.read { $0 }, 4 * 2_000 * 3 / 4)
    }

    // MARK: re-entry stops the program with a message, in a child process

    func expectStop(_ name: String, _ message: String, file: StaticString = #filePath, line: UInt = #line) {
        let (status, text) = ChildTest.run("LockedValueTests", name)
        XCTAssertTrue(ChildTest.trapped(status), "status \(status): \(text)", file: file, line: line)
        XCTAssertTrue(text.contains(message), text, file: file, line: line)
    }

    func testReentryStopsTheProgram() {
        expectStop("testChildReentersWithLock",
                   "SyncLockedValue.withLock: the calling thread already holds this lock (called again from inside its own body)")
        expectStop("testChildWritesInsideWrite", "SyncRWLockedValue.write: the calling thread already holds this lock")
        expectStop("testChildReadsInsideWrite", "SyncRWLockedValue.read: the calling thread already holds this lock")
        expectStop("testChildWritesInsideRead", "SyncRWLockedValue.write: the calling thread already reads this value")
        expectStop("testChildReadsInsideRead", "SyncRWLockedValue.read: the calling thread already reads this value")
        expectStop("testChildReadsInsideUpgradable", "SyncRWLockedValue.read: the calling thread already reads this value")
        expectStop("testChildWritesInsideUpgradable", "SyncRWLockedValue.write: the calling thread already reads this value")
        expectStop("testChildUpgradableInsideRead",
                   "SyncRWLockedValue.upgradableRead: the calling thread already reads this value")
        expectStop("testChildUpgradableInsideWrite",
                   "SyncRWLockedValue.upgradableRead: the calling thread already holds this lock")
        expectStop("testChildUpgradeInsideUpgrade",
                   "SyncRWLockedValue.UpgradableAccess.write: the calling thread already holds this lock")
    }

    func testChildReadsInsideUpgradable() {
        guard ChildTest.isChild("testChildReadsInsideUpgradable") else { return }
        let value = SyncRWLockedValue(0)
        value.upgradableRead { _ in _ = value.read { $0 } }
    }

    func testChildWritesInsideUpgradable() {
        guard ChildTest.isChild("testChildWritesInsideUpgradable") else { return }
        let value = SyncRWLockedValue(0)
        value.upgradableRead { _ in value.write { $0 += 1 } }
    }

    func testChildUpgradableInsideRead() {
        guard ChildTest.isChild("testChildUpgradableInsideRead") else { return }
        let value = SyncRWLockedValue(0)
        value.read { _ in value.upgradableRead { _ in } }
    }

    func testChildUpgradableInsideWrite() {
        guard ChildTest.isChild("testChildUpgradableInsideWrite") else { return }
        let value = SyncRWLockedValue(0)
        value.write { _ in value.upgradableRead { _ in } }
    }

    func testChildUpgradeInsideUpgrade() {
        guard ChildTest.isChild("testChildUpgradeInsideUpgrade") else { return }
        let value = SyncRWLockedValue(0)
        value.upgradableRead { access in access.write { _ in access.write { $0 += 1 } } }
    }

    func testChildReentersWithLock() {
        guard ChildTest.isChild("testChildReentersWithLock") else { return }
        let box = SyncLockedValue(0)
        box.withLock { _ in box.withLock { $0 += 1 } }
    }

    func testChildWritesInsideWrite() {
        guard ChildTest.isChild("testChildWritesInsideWrite") else { return }
        let value = SyncRWLockedValue(0)
        value.write { _ in value.write { $0 += 1 } }
    }

    func testChildReadsInsideWrite() {
        guard ChildTest.isChild("testChildReadsInsideWrite") else { return }
        let value = SyncRWLockedValue(0)
        value.write { _ in _ = value.read { $0 } }
    }

    func testChildWritesInsideRead() {
        guard ChildTest.isChild("testChildWritesInsideRead") else { return }
        let value = SyncRWLockedValue(0)
        value.read { _ in value.write { $0 += 1 } }
    }

    func testChildReadsInsideRead() {
        guard ChildTest.isChild("testChildReadsInsideRead") else { return }
        let value = SyncRWLockedValue(0), other = SyncRWLockedValue(1)
        _ = value.read { a in other.read { b in a + b } }   // another value: fine
        _ = value.read { _ in value.read { $0 } }
    }

    /// Reads of other values nest (deeper than the recorded 8 too), and a read that threw is
    /// forgotten: the same thread may then write.
    func testNestedReadsOfOtherValuesAndThrowingReads() {
        struct Stop: Error {}
        let values = (0..<10).map { SyncRWLockedValue($0) }
        func sum(_ i: Int) -> Int { i == values.count ? 0 : values[i].read { $0 + sum(i + 1) } }
        XCTAssertEqual(sum(0), 45)
        XCTAssertThrowsError(try values[0].read { (_: borrowing Int) throws(Stop) -> Int in throw Stop() })
        values[0].write { $0 = 100 }
        XCTAssertEqual(values[0].read { $0 }, 100)
    }

    /// Lock-order checking sees the value locks: an inversion between two of them is reported.
    func testLockOrderSeesValueLocks() {
        let reports = SyncLockedValue([String]())
        LockOrderChecking.reset()
        LockOrderChecking.onCycle { cycle in reports.withLock { $0.append("\(cycle)") } }
        LockOrderChecking.isEnabled = true
        defer { LockOrderChecking.isEnabled = false; LockOrderChecking.onCycle(nil); LockOrderChecking.reset() }
        let a = SyncLockedValue(0), b = SyncRWLockedValue(0)
        a.withLock { _ in b.write { $0 += 1 } }
        b.write { _ in a.withLock { $0 += 1 } }
        XCTAssertEqual(reports.withLock { $0.count }, 1)
    }
}
