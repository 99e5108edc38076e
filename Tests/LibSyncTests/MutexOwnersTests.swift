import Glibc
import XCTest
@testable import LibSync

/// Owners of process-shared and robust mutexes: a thread id the kernel reused, fork, and robust
/// mode with holders SIGKILLed (the C suite, test_mutex_owners.c, has more of the same).
final class MutexOwnersTests: XCTestCase {
    var mapping: UnsafeMutableRawPointer!
    let size = 4096

    override func setUp() {
        mapping = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
        XCTAssertNotEqual(mapping, MAP_FAILED)
    }

    override func tearDown() { munmap(mapping, size) }

    /// Forks a child that runs `body` (its exit status: 0 if it returns true) and returns its pid.
    /// `holds` children report once they have run it, then wait to be killed.
    func child(holds: Bool = false, _ body: () -> Bool) -> pid_t {
        var ready: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ready), 0)
        let pid = fork()
        if pid == 0 {
            alarm(300)  // dies by itself if the test never kills it
            var ok: UInt8 = body() ? 1 : 0
            if !holds { _exit(ok == 1 ? 0 : 1) }
            _ = write(ready[1], &ok, 1)
            while true { pause() }
        }
        if holds {
            var ok: UInt8 = 0
            XCTAssertEqual(read(ready[0], &ok, 1), 1)
            XCTAssertEqual(ok, 1)
        }
        close(ready[0])
        close(ready[1])
        return pid
    }

    func exitStatus(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        return status
    }

    /// A dead holder left the caller's own thread id in a shared lock the caller never took.
    func testRecycledThreadIDIsNotTheHolder() throws {
        let mutex = try SyncMutex(at: mapping, options: .shared, initialize: true)
        let word = mapping.assumingMemoryBound(to: UInt32.self)
        word.pointee = MutexWord.shared | threadID()
        XCTAssertFalse(mutex.isHeldByCurrentThread)
        XCTAssertFalse(try mutex.tryLock())
        XCTAssertFalse(try mutex.lock(timeout: .milliseconds(20)))  // waits: does not throw .wouldDeadlock
        XCTAssertThrowsError(try mutex.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }

        let recursive = try SyncRecursiveLock(at: mapping + 8, options: .shared, initialize: true)
        let words = (mapping + 8).assumingMemoryBound(to: UInt32.self)
        words[0] = MutexWord.shared | threadID()
        words[1] = 3
        XCTAssertEqual(recursive.depth, 0)
        XCTAssertFalse(try recursive.tryLock())
        XCTAssertThrowsError(try recursive.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertEqual(words[1], 3)

        // An init cannot tell a dead holder from a live one: EBUSY, the word kept; zeroed, it starts over.
        XCTAssertThrowsError(try SyncMutex(at: mapping, options: .shared, initialize: true)) {
            XCTAssertEqual($0 as? LockError, .other(EBUSY))
        }
        XCTAssertEqual(word.pointee & 0xFF_FFFF, threadID())
        word.pointee = 0
        let fresh = try SyncMutex(at: mapping, options: .shared, initialize: true)  // initialized again: usable
        try fresh.lock()
        XCTAssertTrue(fresh.isHeldByCurrentThread)
        XCTAssertThrowsError(try fresh.lock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try fresh.unlock()
    }

    /// The same for a shared spin lock; a private one still names its holder by id alone.
    func testRecycledThreadIDIsNotTheSpinLockHolder() throws {
        let spin = try SyncSpinLock(at: mapping, options: .shared, initialize: true)
        let word = mapping.assumingMemoryBound(to: UInt32.self)
        XCTAssertEqual(word.pointee, SpinWord.shared)
        word.pointee = SpinWord.shared | threadID()
        XCTAssertFalse(spin.tryLock())
        XCTAssertFalse(try spin.lock(timeout: .milliseconds(20)))  // waits: does not throw .wouldDeadlock
        XCTAssertThrowsError(try spin.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertEqual(word.pointee, SpinWord.shared | threadID())

        XCTAssertThrowsError(try SyncSpinLock(at: mapping, options: .shared, initialize: true)) {
            XCTAssertEqual($0 as? LockError, .other(EBUSY))
        }
        word.pointee = 0
        let fresh = try SyncSpinLock(at: mapping, options: .shared, initialize: true)  // initialized again: usable
        try fresh.lock()
        XCTAssertThrowsError(try fresh.lock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try fresh.unlock()
        XCTAssertThrowsError(try fresh.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertNoThrow(try SyncSpinLock(at: mapping, options: .shared, initialize: false))
        XCTAssertThrowsError(try SyncSpinLock(at: mapping, options: [], initialize: false))
        XCTAssertThrowsError(try SyncSpinLock(at: mapping, options: .robust, initialize: true))
        XCTAssertThrowsError(try SyncSpinLock(at: mapping + 2, options: .shared, initialize: true))

        let unshared = try SyncSpinLock(at: mapping + 8, options: [], initialize: true)
        try unshared.lock()
        XCTAssertEqual((mapping + 8).load(as: UInt32.self), threadID())
        XCTAssertThrowsError(try unshared.lock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try unshared.unlock()
    }

    /// Attaching written as a create (`initialize: true`) in a second process: the parent's held
    /// locks are not reset (`.other(EBUSY)`), an attach sees them held, the parent's unlocks succeed.
    func testInitializeInAnotherProcessNeverResetsAHeldLock() throws {
        let mutex = try SyncMutex(at: mapping, options: .shared, initialize: true)
        let robust = try SyncMutex(at: mapping + 8, options: [.shared, .robust], initialize: true)
        let recursive = try SyncRecursiveLock(at: mapping + 24, options: .shared, initialize: true)
        let spin = try SyncSpinLock(at: mapping + 32, options: .shared, initialize: true)
        try mutex.lock()
        try robust.lock()
        try recursive.lock()
        try spin.lock()
        let pid = child {
            func refused(_ make: () throws -> Void) -> Bool {
                do { try make(); return false } catch { return (error as? LockError) == .other(EBUSY) }
            }
            guard refused({ _ = try SyncMutex(at: mapping, options: .shared, initialize: true) }),
                  refused({ _ = try SyncMutex(at: mapping + 8, options: [.shared, .robust], initialize: true) }),
                  refused({ _ = try SyncRecursiveLock(at: mapping + 24, options: .shared, initialize: true) }),
                  refused({ _ = try SyncSpinLock(at: mapping + 32, options: .shared, initialize: true) })
            else { return false }
            guard let mine = try? SyncMutex(at: mapping, options: .shared, initialize: false),
                  let theirs = try? SyncMutex(at: mapping + 8, options: [.shared, .robust], initialize: false),
                  let deep = try? SyncRecursiveLock(at: mapping + 24, options: .shared, initialize: false),
                  let spun = try? SyncSpinLock(at: mapping + 32, options: .shared, initialize: false)
            else { return false }
            return (try? mine.tryLock()) == false && (try? theirs.tryLock()) == false
                && (try? deep.tryLock()) == false && !spun.tryLock()
        }
        XCTAssertEqual(exitStatus(pid), 0)
        XCTAssertNoThrow(try mutex.unlock())
        XCTAssertNoThrow(try robust.unlock())
        XCTAssertNoThrow(try recursive.unlock())
        XCTAssertNoThrow(try spin.unlock())
        XCTAssertNoThrow(try SyncMutex(at: mapping, options: .shared, initialize: true))  // free: allowed
    }

    func testForkedChildDoesNotHoldSharedLocks() throws {
        let mutex = try SyncMutex(at: mapping, options: .shared, initialize: true)
        let robust = try SyncRecursiveLock(at: mapping + 16, options: [.shared, .robust], initialize: true)
        try mutex.lock()
        try robust.lock()
        let pid = child {
            guard let mine = try? SyncMutex(at: mapping, options: .shared, initialize: false),
                  let theirs = try? SyncRecursiveLock(at: mapping + 16, options: [.shared, .robust], initialize: false)
            else { return false }
            var ok = !mine.isHeldByCurrentThread && (try? mine.tryLock()) == false
            do { try mine.unlock(); ok = false } catch { ok = ok && (error as? LockError) == .notOwner }
            ok = ok && theirs.depth == 0 && (try? theirs.tryLock()) == false  // its holder lives
            do { try theirs.unlock(); ok = false } catch { ok = ok && (error as? LockError) == .notOwner }
            return ok
        }
        XCTAssertEqual(exitStatus(pid), 0)
        XCTAssertTrue(mutex.isHeldByCurrentThread)
        try mutex.unlock()
        try robust.unlock()
    }

    func testRobustHolderKilled() throws {
        let mutex = try SyncMutex(at: mapping, options: [.shared, .robust], initialize: true)
        let pid = child(holds: true) {
            guard let theirs = try? SyncMutex(at: mapping, options: [.shared, .robust], initialize: false) else { return false }
            return (try? theirs.lock()) != nil
        }
        XCTAssertFalse(try mutex.tryLock())
        kill(pid, SIGKILL)
        XCTAssertThrowsError(try mutex.lock()) { XCTAssertEqual($0 as? LockError, .ownerDied) }
        XCTAssertTrue(mutex.isHeldByCurrentThread)  // held despite the error
        XCTAssertThrowsError(try mutex.lock()) { XCTAssertEqual($0 as? LockError, .wouldDeadlock) }
        try mutex.consistent()
        XCTAssertThrowsError(try mutex.consistent()) { XCTAssertEqual($0 as? LockError, .other(EINVAL)) }
        try mutex.unlock()
        XCTAssertEqual(mutex.withLock { 7 }, 7)
        _ = exitStatus(pid)
    }

    func testRobustUnlockWithoutConsistentIsNotRecoverable() throws {
        let mutex = try SyncMutex(at: mapping, options: [.shared, .robust], initialize: true)
        let pid = child(holds: true) {
            guard let theirs = try? SyncMutex(at: mapping, options: [.shared, .robust], initialize: false) else { return false }
            return (try? theirs.lock()) != nil
        }
        kill(pid, SIGKILL)
        _ = exitStatus(pid)
        XCTAssertThrowsError(try mutex.lock(timeout: .seconds(60))) { XCTAssertEqual($0 as? LockError, .ownerDied) }
        let waiter = expectation(description: "waiter")
        let word = atomic(mapping, as: UInt32.self)
        Thread.detachNewThread {
            do { try mutex.lock(); XCTFail("locked a lock that is not recoverable") } catch {
                XCTAssertEqual(error as? LockError, .notRecoverable)
            }
            waiter.fulfill()
        }
        for _ in 0..<20_000 where word.pointee.load(ordering: .relaxed) & MutexWord.waiters == 0 { usleep(500) }  // it sleeps
        try mutex.unlock()
        wait(for: [waiter], timeout: 60)
        XCTAssertThrowsError(try mutex.lock()) { XCTAssertEqual($0 as? LockError, .notRecoverable) }
        XCTAssertThrowsError(try mutex.tryLock()) { XCTAssertEqual($0 as? LockError, .notRecoverable) }
        XCTAssertThrowsError(try mutex.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
    }

    func testRobustRecursiveHolderKilledMidRecursion() throws {
        let lock = try SyncRecursiveLock(at: mapping, options: [.shared, .robust], initialize: true)
        let pid = child(holds: true) {
            guard let theirs = try? SyncRecursiveLock(at: mapping, options: [.shared, .robust], initialize: false)
            else { return false }
            for _ in 0..<3 where (try? theirs.lock()) == nil { return false }
            return theirs.depth == 3
        }
        XCTAssertEqual(lock.depth, 0)
        kill(pid, SIGKILL)
        XCTAssertThrowsError(try lock.lock()) { XCTAssertEqual($0 as? LockError, .ownerDied) }
        XCTAssertEqual(lock.depth, 1)
        try lock.lock()
        XCTAssertEqual(lock.depth, 2)
        try lock.consistent()
        try lock.unlock()
        try lock.unlock()
        XCTAssertEqual(lock.depth, 0)
        XCTAssertTrue(try lock.tryLock())
        try lock.unlock()
        _ = exitStatus(pid)
    }

    /// A thread that exits holding a private robust mutex.
    func testRobustThreadExitsHolding() throws {
        let mutex = SyncMutex(options: .robust)
        let exited = expectation(description: "thread")
        let thread = Thread { _ = try? mutex.lock(); exited.fulfill() }
        thread.start()
        wait(for: [exited], timeout: 60)
        XCTAssertThrowsError(try mutex.lock(timeout: .seconds(60))) { XCTAssertEqual($0 as? LockError, .ownerDied) }
        try mutex.consistent()
        try mutex.unlock()
    }

    func testRobustErrors() throws {
        XCTAssertThrowsError(try SyncMutex(at: mapping + 4, options: .robust, initialize: true)) { XCTAssertEqual($0 as? LockError, .other(EINVAL)) }
        _ = try SyncMutex(at: mapping, options: .shared, initialize: true)
        XCTAssertThrowsError(try SyncMutex(at: mapping, options: [.shared, .robust], initialize: false)) {
            XCTAssertEqual($0 as? LockError, .other(EINVAL))  // not what the creator made
        }
        let plain = SyncMutex()
        XCTAssertThrowsError(try plain.consistent()) { XCTAssertEqual($0 as? LockError, .other(EINVAL)) }
        let robust = SyncMutex(options: .robust)
        XCTAssertThrowsError(try robust.consistent()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertEqual(SyncMutex.byteCount(for: .robust), 16)
        XCTAssertEqual(SyncMutex.byteCount(for: .shared), 4)
        XCTAssertEqual(SyncRecursiveLock.byteCount(for: []), 8)
    }
}
