// Code written for Apple platforms against OSAllocatedUnfairLock: this file compiles and passes
// unchanged on macOS (`import os`) and on Linux (`import LibSync`). Keep it free of anything
// either side lacks.
#if canImport(os)
import os
#else
import LibSync
#endif
import Dispatch
import XCTest

final class OSAllocatedUnfairLockPortabilityTests: XCTestCase {
    /// A Sendable state, changed by many threads through withLock.
    func testCounterUnderContention() {
        let counter = OSAllocatedUnfairLock(initialState: 0)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<10_000 { counter.withLock { $0 += 1 } }
        }
        XCTAssertEqual(counter.withLock { $0 }, 40_000)
    }

    /// A struct state; withLock returns a Sendable result, and rethrows.
    func testStructStateAndThrowingBody() {
        struct Account: Sendable { var balance = 100; var history: [Int] = [] }
        struct Overdrawn: Error {}
        let account = OSAllocatedUnfairLock(initialState: Account())
        let after = account.withLock { state -> Int in
            state.balance -= 30
            state.history.append(-30)
            return state.balance
        }
        XCTAssertEqual(after, 70)
        XCTAssertThrowsError(try account.withLock { state -> Int in
            guard state.balance >= 500 else { throw Overdrawn() }
            state.balance -= 500
            return state.balance
        })
        XCTAssertEqual(account.withLock { $0.history }, [-30])
        XCTAssertEqual(account.withLockIfAvailable { $0.balance }, 70)
    }

    /// A state that is not Sendable: init(uncheckedState:) and the Unchecked forms.
    func testUncheckedForms() {
        final class Log { var lines: [String] = [] }
        let log = OSAllocatedUnfairLock(uncheckedState: Log())
        log.withLockUnchecked { $0.lines.append("one") }
        let count = log.withLockIfAvailableUnchecked { state -> Int in
            state.lines.append("two")
            return state.lines.count
        }
        XCTAssertEqual(count, 2)
        XCTAssertEqual(log.withLockUnchecked { $0.lines }, ["one", "two"])
    }

    /// A lock without state: lock/unlock, lockIfAvailable, preconditions, withLock around code.
    func testPlainLock() {
        let lock = OSAllocatedUnfairLock()
        lock.precondition(.notOwner)
        lock.lock()
        lock.precondition(.owner)
        lock.unlock()
        XCTAssertTrue(lock.lockIfAvailable())
        lock.precondition(.owner)
        lock.unlock()
        let answer = lock.withLock { () -> Int in
            lock.precondition(.owner)
            return 42
        }
        XCTAssertEqual(answer, 42)
        XCTAssertEqual(lock.withLockIfAvailable { 7 }, 7)
        lock.withLockUnchecked { lock.precondition(.owner) }
        XCTAssertEqual(lock.withLockIfAvailableUnchecked { 8 }, 8)
    }

    /// Copies share one lock and one state (it is a reference, as Apple documents).
    func testCopiesShareTheLock() {
        let lock = OSAllocatedUnfairLock(initialState: [Int]())
        let copy = lock
        copy.withLock { $0.append(1) }
        XCTAssertEqual(lock.withLock { $0 }, [1])
        let inside = lock.withLock { _ in copy.withLockIfAvailable { $0.count } }
        XCTAssertNil(inside)   // held (by the caller): nil, no trap
    }
}
