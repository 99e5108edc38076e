import Foundation
import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// The error `body` throws, or nil.
private func thrown(_ body: () throws -> Void) -> LockError? {
    do { try body(); return nil } catch { return error as? LockError ?? .other(-1) }
}

private struct Boom: Error {}

/// SyncRWLock's upgradable read and OSAllocatedUnfairLock used as an adversarial caller would:
/// many threads checking exclusion and the upgrade's atomicity, timeouts at their edges,
/// errors thrown out of `withUpgradableReadLock` after each transition, and
/// `withLockIfAvailable` and the ownership preconditions under contention (misuse in a child).
final class UpgradableAdversarialTests: XCTestCase {
    // MARK: many threads

    /// 16 and 64 threads: plain readers, upgradable readers (blocking, timed, try; upgrading,
    /// downgrading, giving up) and writers. Nobody beside a writer, one upgradable reader at a
    /// time, and an upgrade writes over exactly what was read under the upgradable hold.
    func testManyThreadsKeepExclusionAndUpgradesAtomic() {
        for threads in [16, 64] {
            let rw = SyncRWLock()
            let readers = Atomic<Int>(0), upgradables = Atomic<Int>(0), writers = Atomic<Int>(0)
            let failures = Atomic<Int>(0), value = Atomic<Int>(0), writes = Atomic<Int>(0)
            @Sendable func fail(_ ok: Bool) { if !ok { failures.add(1, ordering: .relaxed) } }
            @Sendable func asWriter() {
                fail(writers.add(1, ordering: .sequentiallyConsistent).oldValue == 0
                     && readers.load(ordering: .sequentiallyConsistent) == 0
                     && upgradables.load(ordering: .sequentiallyConsistent) == 0)
            }
            runThreads(threads) { index in
                var seed = UInt32(index + 1)
                for _ in 0..<(48_000 / threads) {
                    seed = seed &* 1_103_515_245 &+ 12_345
                    let kind = (seed >> 16) % 20
                    do {
                        if kind < 10 {
                            rw.withReadLock {
                                readers.add(1, ordering: .sequentiallyConsistent)
                                fail(writers.load(ordering: .sequentiallyConsistent) == 0)
                                readers.subtract(1, ordering: .sequentiallyConsistent)
                            }
                        } else if kind < 17 {
                            let timed = kind == 10
                            if timed { guard try rw.upgradableReadLock(timeout: .microseconds(100)) else { continue } }
                            else { try rw.upgradableReadLock() }
                            fail(upgradables.add(1, ordering: .sequentiallyConsistent).oldValue == 0
                                 && writers.load(ordering: .sequentiallyConsistent) == 0)
                            let seen = value.load(ordering: .relaxed)
                            upgradables.subtract(1, ordering: .sequentiallyConsistent)
                            let upgraded: Bool
                            switch kind {
                            case 11: upgraded = try rw.tryUpgrade()
                            case 12: upgraded = try rw.upgrade(timeout: .microseconds(50))
                            case 13:
                                try rw.downgradeUpgradableRead()
                                fail(writers.load(ordering: .sequentiallyConsistent) == 0)
                                try rw.readUnlock()
                                continue
                            default: try rw.upgrade(); upgraded = true
                            }
                            if !upgraded {
                                fail(value.load(ordering: .relaxed) == seen)
                                try rw.upgradableReadUnlock()
                                continue
                            }
                            asWriter()
                            fail(value.load(ordering: .relaxed) == seen)  // nobody wrote in between
                            value.store(seen + 1, ordering: .relaxed)
                            writes.add(1, ordering: .relaxed)
                            writers.subtract(1, ordering: .sequentiallyConsistent)
                            if kind == 14 {
                                try rw.downgradeToUpgradableRead()
                                fail(value.load(ordering: .relaxed) == seen + 1)
                                try rw.upgradableReadUnlock()
                            } else if kind == 15 {
                                try rw.downgrade()
                                try rw.readUnlock()
                            } else {
                                try rw.writeUnlock()
                            }
                        } else {
                            rw.withWriteLock {
                                asWriter()
                                value.store(value.load(ordering: .relaxed) + 1, ordering: .relaxed)
                                writes.add(1, ordering: .relaxed)
                                writers.subtract(1, ordering: .sequentiallyConsistent)
                            }
                        }
                    } catch {
                        fail(false)
                    }
                }
            }
            XCTAssertEqual(failures.load(ordering: .relaxed), 0, "\(threads) threads")
            XCTAssertEqual(value.load(ordering: .relaxed), writes.load(ordering: .relaxed))
            XCTAssertTrue(rw.tryWriteLock())
            XCTAssertNil(thrown { try rw.writeUnlock() })
        }
    }

    // MARK: timeouts at their edges

    func testTimeoutsAtTheEdges() throws {
        let rw = SyncRWLock()
        try rw.readLock()
        try rw.upgradableReadLock()
        for timeout: Duration in [.zero, .nanoseconds(-1), .seconds(-1_000_000), .nanoseconds(1)] {
            XCTAssertFalse(try rw.upgrade(timeout: timeout))   // its own plain read holds it
        }
        XCTAssertFalse(try rw.tryUpgrade())
        XCTAssertTrue(rw.tryReadLock())                        // no UPGRADING left behind
        try rw.readUnlock()
        // Huge: waits until the reader leaves (another thread's, released from there).
        try rw.readUnlock()
        let readerIn = Atomic<Bool>(false)
        let reader = JoinableThread {
            XCTAssertNil(thrown { try rw.readLock() })
            readerIn.store(true, ordering: .releasing)
            usleep(1000)
            XCTAssertNil(thrown { try rw.readUnlock() })
        }
        while !readerIn.load(ordering: .acquiring) { usleep(100) }
        XCTAssertTrue(try rw.upgrade(timeout: .seconds(Int64.max)))
        reader.join()
        try rw.downgradeToUpgradableRead()
        let triedOnce = Atomic<Bool>(false)
        let other = JoinableThread {
            XCTAssertEqual(try? rw.upgradableReadLock(timeout: .zero), false)
            XCTAssertEqual(try? rw.upgradableReadLock(timeout: .seconds(-1)), false)
            triedOnce.store(true, ordering: .releasing)
            XCTAssertEqual(try? rw.upgradableReadLock(timeout: .seconds(Int64.max)), true)  // after the release
            XCTAssertNil(thrown { try rw.upgradableReadUnlock() })
        }
        while !triedOnce.load(ordering: .acquiring) { usleep(100) }
        usleep(1000)  // room for the long wait to begin (it succeeds either way)
        try rw.upgradableReadUnlock()
        other.join()
        XCTAssertTrue(rw.tryWriteLock())
        try rw.writeUnlock()
    }

    // MARK: errors out of withUpgradableReadLock

    func testErrorThrownAfterEachTransitionReleasesWhatIsHeld() {
        let transitions: [(SyncRWLock) throws -> Void] = [
            { _ in },
            { try $0.upgrade() },
            { try $0.upgrade(); try $0.downgradeToUpgradableRead() },
            { try $0.downgradeUpgradableRead() },
            { try $0.upgrade(); try $0.downgrade() },
            { try $0.upgrade(); try $0.downgradeToUpgradableRead(); try $0.upgrade() },
        ]
        for (index, transition) in transitions.enumerated() {
            let rw = SyncRWLock()
            XCTAssertThrowsError(try rw.withUpgradableReadLock { () throws -> Void in
                try transition(rw)
                throw Boom()
            }) { XCTAssertTrue($0 is Boom, "transition \(index): \($0)") }
            let free = Atomic<Bool>(false)
            JoinableThread {
                if rw.tryWriteLock() { free.store(true, ordering: .relaxed); _ = try? rw.writeUnlock() }
            }.join()
            XCTAssertTrue(free.load(ordering: .relaxed), "transition \(index) left the lock held")
        }
    }

    // MARK: OSAllocatedUnfairLock under contention

    func testWithLockIfAvailableAndPreconditionsUnderContention() {
        let lock = OSAllocatedUnfairLock(initialState: 0)
        let inside = Atomic<Int>(0), failures = Atomic<Int>(0), taken = Atomic<Int>(0), missed = Atomic<Int>(0)
        runThreads(8) { index in
            for round in 0..<4000 {
                lock.precondition(.notOwner)  // whoever else holds it
                let body: @Sendable (inout Int) -> Int = { state in
                    lock.precondition(.owner)
                    if inside.add(1, ordering: .sequentiallyConsistent).oldValue != 0 { failures.add(1, ordering: .relaxed) }
                    state += 1
                    // the holder's own try: nil, no trap, no hang
                    if lock.withLockIfAvailableUnchecked({ _ in 0 }) != nil { failures.add(1, ordering: .relaxed) }
                    inside.subtract(1, ordering: .sequentiallyConsistent)
                    return state
                }
                if index % 2 == 0 && round % 3 == 0 {
                    _ = lock.withLock(body)
                    taken.add(1, ordering: .relaxed)
                } else if lock.withLockIfAvailable(body) != nil {
                    taken.add(1, ordering: .relaxed)
                } else {
                    missed.add(1, ordering: .relaxed)
                }
                lock.precondition(.notOwner)
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0)
        XCTAssertEqual(lock.withLock { $0 }, taken.load(ordering: .relaxed))
        XCTAssertEqual(taken.load(ordering: .relaxed) + missed.load(ordering: .relaxed), 8 * 4000)
        // A body that throws releases the lock.
        XCTAssertThrowsError(try lock.withLockIfAvailable { (_: inout Int) throws -> Int in throw Boom() })
        XCTAssertEqual(lock.withLockIfAvailable { $0 }, taken.load(ordering: .relaxed))
    }

    func testOwnershipMisuseUnderContentionStopsTheProgram() {
        for (name, message) in [
            ("testChildPreconditionOwnerWhileAnotherHolds", "Assertion failed: Lock unexpectedly not owned by current thread"),
            ("testChildUnlockAfterWithLockIfAvailableMissed", "Unlock of an os_unfair_lock not owned by current thread"),
        ] {
            let (status, text) = ChildTest.run("UpgradableAdversarialTests", name)
            XCTAssertTrue(ChildTest.trapped(status), "\(name): status \(status): \(text)")
            XCTAssertTrue(text.contains("BUG IN CLIENT OF LIBSYNC: \(message)"), "\(name): \(text)")
        }
    }

    func testChildPreconditionOwnerWhileAnotherHolds() {
        guard ChildTest.isChild("testChildPreconditionOwnerWhileAnotherHolds") else { return }
        let lock = OSAllocatedUnfairLock()
        let held = Atomic<Int>(0)
        _ = JoinableThread { lock.lock(); held.store(1, ordering: .releasing); while true { pause() } }
        while held.load(ordering: .acquiring) == 0 { sched_yield() }
        lock.precondition(.notOwner)
        lock.precondition(.owner)
    }

    func testChildUnlockAfterWithLockIfAvailableMissed() {
        guard ChildTest.isChild("testChildUnlockAfterWithLockIfAvailableMissed") else { return }
        let lock = OSAllocatedUnfairLock()
        let held = Atomic<Int>(0)
        _ = JoinableThread { lock.lock(); held.store(1, ordering: .releasing); while true { pause() } }
        while held.load(ordering: .acquiring) == 0 { sched_yield() }
        if lock.lockIfAvailable() { return }  // held by the other: false
        lock.unlock()
    }
}
