import Dispatch
import Foundation
import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// SyncRWLock and RWLockWords: downgrade, the write holder's own attempts, impossible states,
/// and races of timeouts and downgrades against releases and writers.
final class RWLockTests: XCTestCase {
    /// Polls `condition`; fails after 60 s (a guard against hangs, not a timing bound).
    func waitUntil(_ what: String, _ condition: () -> Bool) {
        let end = Date().addingTimeInterval(60)
        while !condition() {
            if Date() > end { XCTFail("timed out waiting for \(what)"); return }
            usleep(1000)
        }
    }

    /// Runs `body(i)` for i in 0..<count, each on its own thread (all at once, unlike
    /// concurrentPerform, whose pool has one thread per core), and waits for all.
    func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        for i in 0..<count {
            group.enter()
            Thread.detachNewThread { body(i); group.leave() }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 300), .success, "a thread hung (a lost wakeup?)")
    }

    func testHolderAttempts() throws {
        let rw = SyncRWLock()
        try rw.writeLock()
        XCTAssertFalse(rw.tryWriteLock())  // a try: held, whoever holds it
        XCTAssertFalse(rw.tryReadLock())
        // A form that may wait: wouldDeadlock at once (its wait could only time out).
        XCTAssertThrowsError(try rw.writeLock(timeout: .seconds(30))) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        XCTAssertThrowsError(try rw.readLock(timeout: .seconds(30))) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try rw.writeUnlock()
    }

    func testDowngrade() throws {
        let rw = SyncRWLock()
        XCTAssertThrowsError(try rw.downgrade()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try rw.readLock()
        XCTAssertThrowsError(try rw.downgrade()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try rw.readUnlock()
        try rw.writeLock()
        let elsewhere = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            do { try rw.downgrade(); XCTFail("downgraded another thread's write lock") } catch {
                XCTAssertEqual(error as? LockError, .notOwner)
            }
            XCTAssertFalse(rw.tryReadLock())
            elsewhere.signal()
        }
        elsewhere.wait()
        try rw.downgrade()
        XCTAssertThrowsError(try rw.writeUnlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        Thread.detachNewThread {
            XCTAssertTrue(rw.tryReadLock())  // readers join
            do { try rw.readUnlock() } catch { XCTFail("\(error)") }
            elsewhere.signal()
        }
        elsewhere.wait()
        XCTAssertFalse(rw.tryWriteLock())
        try rw.readUnlock()
        XCTAssertTrue(rw.tryWriteLock())
        try rw.writeUnlock()
    }

    /// A waiting writer goes next after a downgrade; new readers wait for it.
    func testDowngradeKeepsWaitingWriterNext() throws {
        let memory = LockMemory(size: RWLockWords.size)
        let m = memory.raw
        XCTAssertEqual(RWLockWords.writeLock(m), 0)
        let gotIn = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            XCTAssertEqual(RWLockWords.writeLock(memory.raw), 0)
            gotIn.store(true, ordering: .sequentiallyConsistent)
            XCTAssertEqual(RWLockWords.writeUnlock(memory.raw), 0)
            done.signal()
        }
        waitUntil("the writer to wait") { RWLockWords.waitingWriters(m) == 1 }
        XCTAssertEqual(RWLockWords.downgrade(m), 0)
        XCTAssertFalse(gotIn.load(ordering: .sequentiallyConsistent))
        XCTAssertEqual(RWLockWords.tryReadLock(m), EBUSY)
        XCTAssertEqual(RWLockWords.readUnlock(m), 0)
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(gotIn.load(ordering: .sequentiallyConsistent))
        withExtendedLifetime(memory) {}
    }

    /// Downgraders, writers and readers race; `phase` is 0, a downgrader's id from its write
    /// phase through its read phase, or -1 for a writer. No writer finds a downgrader inside, no
    /// downgrader's read phase sees another id, no reader sees a writer.
    func testDowngradeRacesWriters() {
        let rw = SyncRWLock()
        let phase = Atomic<Int>(0), failures = Atomic<Int>(0)
        onThreads(6) { role in
            for i in 0..<5_000 {
                switch role {
                case 0, 1:
                    do {
                        try rw.writeLock()
                        if phase.exchange(role + 1, ordering: .sequentiallyConsistent) != 0 { failures.add(1, ordering: .relaxed) }
                        try rw.downgrade()
                        if i % 16 == 0 { sched_yield() }
                        if phase.load(ordering: .sequentiallyConsistent) != role + 1 { failures.add(1, ordering: .relaxed) }
                        phase.store(0, ordering: .sequentiallyConsistent)
                        try rw.readUnlock()
                    } catch { failures.add(1, ordering: .relaxed) }
                case 2, 3:
                    rw.withWriteLock {
                        if phase.exchange(-1, ordering: .sequentiallyConsistent) != 0 { failures.add(1, ordering: .relaxed) }
                        phase.store(0, ordering: .sequentiallyConsistent)
                    }
                default:
                    rw.withReadLock {
                        if phase.load(ordering: .sequentiallyConsistent) < 0 { failures.add(1, ordering: .relaxed) }
                    }
                }
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0)
        XCTAssertTrue(rw.tryWriteLock())
    }

    /// Short timeouts race releases; blocking waiters among them would hang on a lost wakeup.
    func testTimeoutsRaceReleases() {
        let rw = SyncRWLock()
        let writers = Atomic<Int>(0), readers = Atomic<Int>(0), failures = Atomic<Int>(0)
        @Sendable func write(_ i: Int) {
            if writers.add(1, ordering: .sequentiallyConsistent).newValue != 1 || readers.load(ordering: .sequentiallyConsistent) != 0 {
                failures.add(1, ordering: .relaxed)
            }
            if i % 4 == 0 { usleep(UInt32(i % 61)) }
            writers.subtract(1, ordering: .sequentiallyConsistent)
        }
        @Sendable func read(_ i: Int) {
            readers.add(1, ordering: .sequentiallyConsistent)
            if writers.load(ordering: .sequentiallyConsistent) != 0 { failures.add(1, ordering: .relaxed) }
            if i % 4 == 0 { usleep(UInt32(i % 61)) }
            readers.subtract(1, ordering: .sequentiallyConsistent)
        }
        onThreads(6) { role in
            for i in 0..<2_000 {
                do {
                    switch role {
                    case 0, 1:
                        if try rw.writeLock(timeout: .microseconds(i % 64)) { write(i); try rw.writeUnlock() }
                    case 2:
                        if try rw.readLock(timeout: .microseconds(i % 64)) { read(i); try rw.readUnlock() }
                    case 3:
                        rw.withWriteLock { write(i) }
                    default:
                        rw.withReadLock { read(i) }
                    }
                } catch { failures.add(1, ordering: .relaxed) }
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0)
        XCTAssertTrue(rw.tryReadLock())  // no writer's mark left behind
        XCTAssertNoThrow(try rw.readUnlock())
        XCTAssertTrue(rw.tryWriteLock())
    }

    /// Every operation on a state no sequence of operations produces: EINVAL, nothing changed.
    func testImpossibleStatesAreReported() {
        let memory = LockMemory(size: RWLockWords.size)
        let m = memory.raw
        let states: [[UInt32]] = [[.max, .max, .max, .max], [0x1000_0001, 0, 0, 0], [0x9000_0005, 0, 0, 0]]
        for words in states {
            for (i, word) in words.enumerated() { m.storeBytes(of: word, toByteOffset: 4 * i, as: UInt32.self) }
            let soon = monotonicNow() + 1_000_000_000
            let codes = [RWLockWords.tryReadLock(m), RWLockWords.readLock(m), RWLockWords.readLock(m, deadline: soon),
                         RWLockWords.readUnlock(m), RWLockWords.tryWriteLock(m), RWLockWords.writeLock(m),
                         RWLockWords.writeLock(m, deadline: soon, interruptible: true), RWLockWords.writeUnlock(m),
                         RWLockWords.downgrade(m)]
            XCTAssertEqual(codes, Array(repeating: EINVAL, count: codes.count), "state \(words)")
            XCTAssertEqual((0..<4).map { m.load(fromByteOffset: 4 * $0, as: UInt32.self) }, words)
        }
    }

    /// A free lock marked with no writer counted (the last writer between giving up and clearing
    /// the mark, or a word written by hand): a reader clears the mark and goes in; a writer takes it.
    func testOrphanedMarkIsCleared() {
        let memory = LockMemory(size: RWLockWords.size)
        let m = memory.raw
        for words: [UInt32] in [[0x2000_0000, 0, 0, 0], [0xe000_0000, 7, 0, 0]] {
            func set() { for (i, word) in words.enumerated() { m.storeBytes(of: word, toByteOffset: 4 * i, as: UInt32.self) } }
            set()
            XCTAssertEqual(RWLockWords.tryReadLock(m), EBUSY)  // a writer may come: a try does not wait
            XCTAssertEqual(RWLockWords.readLock(m), 0)
            XCTAssertEqual(RWLockWords.readUnlock(m), 0)
            XCTAssertEqual(RWLockWords.tryWriteLock(m), 0)
            XCTAssertEqual(RWLockWords.writeUnlock(m), 0)
            set()
            XCTAssertEqual(RWLockWords.writeLock(m), 0)
            XCTAssertEqual(RWLockWords.writeUnlock(m), 0)
            XCTAssertEqual(RWLockWords.tryReadLock(m), 0)
            XCTAssertEqual(RWLockWords.readUnlock(m), 0)
        }
    }

    func testReaderLimit() {
        let memory = LockMemory(size: RWLockWords.size)
        let m = memory.raw
        m.storeBytes(of: RWLockWords.readerMask - 1, as: UInt32.self)
        XCTAssertEqual(RWLockWords.readLock(m), 0)
        XCTAssertEqual(RWLockWords.readLock(m), EAGAIN)
        XCTAssertEqual(RWLockWords.tryReadLock(m), EAGAIN)
        XCTAssertEqual(RWLockWords.readUnlock(m), 0)
    }
}
