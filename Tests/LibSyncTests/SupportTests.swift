import XCTest
@testable import LibSync

/// The shared pieces of Support/: the one time model and the one spin policy.
final class SupportTests: XCTestCase {
    func testDeadlineNoneIsEveryNegativeValue() {
        XCTAssertEqual(Deadline.until(-1), Deadline.none)
        XCTAssertEqual(Deadline.until(Int64.min), Deadline.none)
        XCTAssertEqual(Deadline.until(0), 0)
        XCTAssertEqual(Deadline.after(nanoseconds: Int64(-5)), Deadline.none)
        XCTAssertFalse(Deadline.hasPassed(Deadline.none))
        XCTAssertNil(Deadline.remaining(Deadline.none, now: 123))
    }

    func testPastDeadlinesHavePassed() {
        XCTAssertTrue(Deadline.hasPassed(0))
        XCTAssertTrue(Deadline.hasPassed(Deadline.after(.seconds(-1))))
        XCTAssertTrue(Deadline.hasPassed(Deadline.after(.milliseconds(-1))))
        XCTAssertEqual(Deadline.remaining(10, now: 20), 0)
        XCTAssertEqual(Deadline.remaining(30, now: 20), 10)
    }

    func testRelativeTimeoutsSaturate() {
        XCTAssertEqual(Deadline.after(nanoseconds: UInt64.max), Int64.max)
        XCTAssertEqual(Deadline.after(nanoseconds: Int64.max), Int64.max)
        XCTAssertEqual(Deadline.after(.seconds(Int64.max)), Int64.max)
        let before = monotonicNow()
        let deadline = Deadline.after(.seconds(3600))
        XCTAssertGreaterThanOrEqual(deadline, before + 3_600_000_000_000)
        XCTAssertFalse(Deadline.hasPassed(deadline))
    }

    func testEarliestIgnoresNone() {
        XCTAssertEqual(Deadline.earliest(Deadline.none, Deadline.none), Deadline.none)
        XCTAssertEqual(Deadline.earliest(Deadline.none, 7), 7)
        XCTAssertEqual(Deadline.earliest(7, -3), 7)
        XCTAssertEqual(Deadline.earliest(9, 7), 7)
    }

    func testSpinWaitParksAfterItsRounds() {
        var spin = SpinWait()
        var rounds = 0
        while spin.spin() { rounds += 1 }
        XCTAssertEqual(rounds, SpinWait.pauseRounds + SpinWait.yieldRounds)
        XCTAssertFalse(spin.spin())
        spin.reset()
        XCTAssertTrue(spin.spin())
    }

    func testThreadRecordLayout() {
        XCTAssertEqual(MemoryLayout<ThreadRecordLayout>.size, ThreadRecord.size)
        XCTAssertEqual(ThreadRecord.size % 64, 0)
        XCTAssertEqual(MemoryLayout<ThreadRecordLayout.Counter>.stride, 32)
        XCTAssertEqual(MemoryLayout<CounterCacheLayout>.size, 32)  // the shim's 4 words of TLS
        XCTAssertLessThanOrEqual(MemoryLayout<WaitBucketLayout>.size, 64)
    }
}
