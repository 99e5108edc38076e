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
