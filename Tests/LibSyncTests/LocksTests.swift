import Dispatch
import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// A counter that is only safe under a lock: two fields that a torn update would make differ.
final class Guarded: @unchecked Sendable {
    var a = 0, b = 0, overlaps = 0
    func update(_ i: Int) {
        let x = a
        a = x + 1
        if i % 128 == 0 { sched_yield() }
        if b != x { overlaps += 1 }
        b = x + 1
    }
}

final class LocksTests: XCTestCase {
    func stress(threads: Int = 4, iterations: Int = 20_000, updatesPerIteration: Double = 1, _ body: @escaping @Sendable (Guarded, Int) -> Void) {
        let guarded = Guarded()
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for i in 0..<iterations { body(guarded, i) }
        }
        XCTAssertEqual(guarded.overlaps, 0)
        XCTAssertEqual(guarded.a, Int(Double(threads * iterations) * updatesPerIteration))
        XCTAssertEqual(guarded.b, guarded.a)
    }

    func testMutexExcludes() {
        let mutex = SyncMutex()
        stress { g, i in mutex.withLock { g.update(i) } }
    }

    func testMutexErrors() throws {
        let mutex = SyncMutex()
        XCTAssertThrowsError(try mutex.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try mutex.lock()
        XCTAssertTrue(mutex.isHeldByCurrentThread)
        XCTAssertThrowsError(try mutex.lock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        XCTAssertFalse(try mutex.tryLock())
        let done = expectation(description: "other thread")
        Thread.detachNewThread {
            do { try mutex.unlock(); XCTFail("unlocked another thread's mutex") } catch {
                XCTAssertEqual(error as? LockError, .notOwner)
            }
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        try mutex.unlock()
        XCTAssertEqual(mutex.withLock { 42 }, 42)  // still works
    }

    func testTimeouts() throws {
        let mutex = SyncMutex()
        let held = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            mutex.withLock { held.signal(); release.wait() }
        }
        held.wait()
        let start = monotonicNow()
        XCTAssertFalse(try mutex.lock(timeout: .milliseconds(100)))
        let waited = monotonicNow() - start
        XCTAssertTrue(waited >= 100_000_000 && waited < 5_000_000_000, "\(waited)")
        XCTAssertFalse(try mutex.lock(deadlineNanoseconds: monotonicNow() - 1))  // a past deadline
        release.signal()
        XCTAssertTrue(try mutex.lock(timeout: .seconds(60)))  // the holder leaves
        try mutex.unlock()
    }

    func testRecursiveLock() throws {
        let lock = SyncRecursiveLock()
        stress(iterations: 10_000) { g, i in lock.withLock { lock.withLock { g.update(i) } } }
        XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        for _ in 0..<3 { try lock.lock() }
        XCTAssertTrue(try lock.tryLock())
        XCTAssertEqual(lock.depth, 4)
        for _ in 0..<4 { try lock.unlock() }
        XCTAssertEqual(lock.depth, 0)
        XCTAssertThrowsError(try lock.unlock())
    }

    func testRWLock() throws {
        let rw = SyncRWLock()
        let consistent = Guarded()
        stress(updatesPerIteration: 0.25) { g, i in
            if i % 4 == 0 { rw.withWriteLock { g.update(i); consistent.a += 1 } }
            else { rw.withReadLock { if g.a != g.b { consistent.overlaps += 1 } } }
        }
        XCTAssertEqual(consistent.overlaps, 0)
        XCTAssertThrowsError(try rw.readUnlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertThrowsError(try rw.writeUnlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try rw.readLock()
        XCTAssertTrue(rw.tryReadLock())
        XCTAssertFalse(rw.tryWriteLock())
        XCTAssertFalse(try rw.writeLock(timeout: .milliseconds(20)))
        try rw.readUnlock(); try rw.readUnlock()
        try rw.writeLock()
        XCTAssertThrowsError(try rw.writeLock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        XCTAssertThrowsError(try rw.readLock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try rw.writeUnlock()
    }

    func testWriterIsNotStarved() throws {
        let rw = SyncRWLock()
        let stop = SyncOnce()  // "done" once the test ends
        let readers = DispatchGroup()
        for _ in 0..<3 {
            readers.enter()
            Thread.detachNewThread {
                while !stop.isDone { rw.withReadLock { _ = usleep(200) } }
                readers.leave()
            }
        }
        usleep(20_000)
        for _ in 0..<3 {
            XCTAssertTrue(try rw.writeLock(timeout: .seconds(60)))  // a starved writer never gets in
            try rw.writeUnlock()
        }
        stop {}
        readers.wait()
    }

    func testSpinLock() throws {
        let spin = SyncSpinLock()
        stress { g, i in spin.withLock { g.update(i) } }
        XCTAssertThrowsError(try spin.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try spin.lock()
        XCTAssertThrowsError(try spin.lock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try spin.unlock()
    }

    func testOnceRunsOnce() {
        let once = SyncOnce()
        let runs = Atomic<Int>(0)
        let value = Guarded()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            once {
                usleep(20_000)
                value.a = 42
                runs.wrappingAdd(1, ordering: .relaxed)
            }
            XCTAssertEqual(value.a, 42)  // every caller sees the effect
        }
        XCTAssertEqual(runs.load(ordering: .relaxed), 1)
        XCTAssertTrue(once.isDone)
    }

    struct Failure: Error {}

    func testOnceRetriesAfterError() throws {
        let once = SyncOnce()
        XCTAssertThrowsError(try once { throw Failure() })
        XCTAssertFalse(once.isDone)
        var ran = 0
        once { ran += 1 }
        once { ran += 1 }
        XCTAssertEqual(ran, 1)
    }

    func testSynchronized() throws {
        let token = NSObjectLike()
        stress(iterations: 10_000) { g, i in synchronized(token) { synchronized(token) { g.update(i) } } }
        XCTAssertThrowsError(try synchronized(token) { () throws -> Void in throw Failure() })
        // Released after the error: another thread gets in.
        let entered = DispatchSemaphore(value: 0)
        Thread.detachNewThread { synchronized(token) { _ = entered.signal() } }
        XCTAssertEqual(entered.wait(timeout: .now() + 5), .success)
        // A different token does not block while this one is held.
        let other = NSObjectLike()
        synchronized(token) {
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread { synchronized(other) { _ = done.signal() } }
            XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
        }
    }

    func testCABILayouts() {
        XCTAssertEqual(MutexWord.initial(shared: true, unowned: false), 0x4000_0000)  // SYNC_MUTEX_INIT_SHARED
        XCTAssertEqual(MutexWord.initial(shared: false, unowned: true), 0x2000_0000)  // SYNC_MUTEX_INIT_UNOWNED
        XCTAssertEqual(RWLockWords.initial(shared: true), 0x8000_0000)                // SYNC_RWLOCK_INIT_SHARED
    }

    /// LockError says what went wrong in words, also as Foundation's localizedDescription.
    func testLockErrorDescriptionsAreReadable() throws {
        let mutex = SyncMutex()
        try mutex.lock()
        XCTAssertThrowsError(try mutex.lock()) { error in
            XCTAssertEqual("\(error)", "the calling thread already holds this lock: waiting for it would never end")
            XCTAssertEqual(error.localizedDescription, "\(error)")
        }
        try mutex.unlock()
        XCTAssertThrowsError(try mutex.unlock()) { error in
            XCTAssertEqual(String(describing: error), "the calling thread does not hold this lock (or the side of it) that it tried to release")
        }
        let codes: [LockError] = [.wouldDeadlock, .notOwner, .overflow, .interrupted, .ownerDied, .notRecoverable, .other(EINVAL)]
        XCTAssertEqual(Set(codes.map(\.description)).count, codes.count)
        for error in codes { XCTAssertEqual("\(error)", error.description) }
        XCTAssertEqual(LockError.other(EINVAL).description, "lock operation failed: Invalid argument (errno \(EINVAL))")
        XCTAssertEqual(LockError.wouldDeadlock.errorDescription, LockError.wouldDeadlock.description)
    }
}

final class NSObjectLike: Sendable {}

extension LockError: LocalizedError {}  // what an app may declare (with @retroactive): errorDescription is LockError's
