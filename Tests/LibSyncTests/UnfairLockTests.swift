import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// Runs test `name` of `testCase` again in a fresh process (this test binary, with
/// LIBSYNC_TEST_CHILD naming it) and returns its wait status and stderr: for misuse that stops
/// the program. The child test returns at once unless `isChild(name)`.
enum ChildTest {
    static func run(_ testCase: String, _ name: String) -> (status: Int32, stderr: String) {
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        let arguments = [CommandLine.arguments[0], "LibSyncTests.\(testCase)/\(name)"]
        var argv = arguments.map { strdup($0) } + [nil]
        var environment = ["LIBSYNC_TEST_CHILD=\(name)", "SWIFT_BACKTRACE=enable=no"]
        var cursor = environ
        while let variable = cursor.pointee {
            let text = String(cString: variable)
            if !text.hasPrefix("LIBSYNC_") && !text.hasPrefix("SWIFT_BACKTRACE=") { environment.append(text) }
            cursor += 1
        }
        var envp = environment.map { strdup($0) } + [nil]
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/proc/self/exe", &actions, nil, &argv, &envp)
        posix_spawn_file_actions_destroy(&actions)
        (argv + envp).forEach { free($0) }
        close(fds[1])
        precondition(spawned == 0, "posix_spawn: \(spawned)")
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fds[0], &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            bytes += chunk[..<n]
        }
        close(fds[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status, String(decoding: bytes, as: UTF8.self))
    }

    static func isChild(_ name: String) -> Bool {
        getenv("LIBSYNC_TEST_CHILD").map { String(cString: $0) == name } ?? false
    }

    /// Whether the child was ended by a signal (a trap), not an exit.
    static func trapped(_ status: Int32) -> Bool { status & 0x7f != 0 && status & 0x7f != 0x7f }
}

/// os_unfair_lock (the Swift face of os/lock.h) and OSAllocatedUnfairLock beyond the portable
/// file: the owner word, and every misuse stopping the program with Apple's wording.
final class UnfairLockTests: XCTestCase {
    func testWordHoldsTheOwnersThreadID() {
        let lock = os_unfair_lock_t.allocate(capacity: 1)
        defer { lock.deallocate() }
        lock.initialize(to: os_unfair_lock())
        XCTAssertEqual(MemoryLayout<os_unfair_lock>.size, 4)
        os_unfair_lock_lock(lock)
        XCTAssertEqual(lock.pointee._os_unfair_lock_opaque, threadID())
        os_unfair_lock_assert_owner(lock)
        XCTAssertFalse(os_unfair_lock_trylock(lock))
        os_unfair_lock_unlock(lock)
        XCTAssertEqual(lock.pointee._os_unfair_lock_opaque, 0)
        os_unfair_lock_assert_not_owner(lock)
        os_unfair_lock_lock_with_flags(lock, OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN)
        os_unfair_lock_unlock(lock)
    }

    func testWithLockIfAvailableWhileAnotherThreadHolds() {
        let lock = OSAllocatedUnfairLock(initialState: 5)
        let held = Atomic<Int>(0)   // 1: the thread holds it, 2: it may let go
        let thread = JoinableThread {
            lock.withLock { _ in
                held.store(1, ordering: .releasing)
                while held.load(ordering: .acquiring) != 2 { sched_yield() }
            }
        }
        while held.load(ordering: .acquiring) != 1 { sched_yield() }
        XCTAssertNil(lock.withLockIfAvailable { $0 } as Int?)
        lock.precondition(.notOwner)
        held.store(2, ordering: .releasing)
        thread.join()
        XCTAssertEqual(lock.withLockIfAvailable { $0 }, 5)
        lock.withLock(flags: .adaptiveSpin) { $0 += 1 }
        XCTAssertEqual(lock.withLockUnchecked(flags: [.adaptiveSpin]) { $0 }, 6)
    }

    /// Lock-order checking sees unfair locks as mutexes: an inversion is reported, and unlock
    /// (off its fast path while checking is on) still releases and still checks the owner.
    func testLockOrderSeesUnfairLocks() {
        let reports = SyncLockedValue(0)
        LockOrderChecking.reset()
        LockOrderChecking.onCycle { _ in reports.withLock { $0 += 1 } }
        LockOrderChecking.isEnabled = true
        defer { LockOrderChecking.isEnabled = false; LockOrderChecking.onCycle(nil); LockOrderChecking.reset() }
        let a = OSAllocatedUnfairLock(), b = OSAllocatedUnfairLock(initialState: 0)
        a.withLock { b.withLock { $0 += 1 } }
        b.withLock { _ in a.withLock {} }
        XCTAssertEqual(reports.withLock { $0 }, 1)
        XCTAssertTrue(a.lockIfAvailable())
        a.unlock()
        a.precondition(.notOwner)
    }

    // MARK: misuse, each in a child process

    func expectStop(_ name: String, _ message: String, file: StaticString = #filePath, line: UInt = #line) {
        let (status, text) = ChildTest.run("UnfairLockTests", name)
        XCTAssertTrue(ChildTest.trapped(status), "status \(status): \(text)", file: file, line: line)
        XCTAssertTrue(text.contains("BUG IN CLIENT OF LIBSYNC: \(message)"), text, file: file, line: line)
    }

    func testMisuseStopsTheProgram() {
        expectStop("testChildReentersWithLock", "Trying to recursively lock an os_unfair_lock")
        expectStop("testChildUnlocksFreeLock", "Unlock of an os_unfair_lock not owned by current thread")
        expectStop("testChildUnlocksOtherThreadsLock", "Unlock of an os_unfair_lock not owned by current thread")
        expectStop("testChildPreconditionOwner", "Assertion failed: Lock unexpectedly not owned by current thread")
        expectStop("testChildPreconditionNotOwner", "Assertion failed: Lock unexpectedly owned by current thread")
        expectStop("testChildUnknownFlags", "Invalid options 0x2")
        expectStop("testChildUnlocksFreeLockWhileCheckingOrder", "Unlock of an os_unfair_lock not owned by current thread")
    }

    func testChildReentersWithLock() {
        guard ChildTest.isChild("testChildReentersWithLock") else { return }
        let lock = OSAllocatedUnfairLock(initialState: 0)
        lock.withLock { _ in lock.withLock { $0 += 1 } }
    }

    func testChildUnlocksFreeLock() {
        guard ChildTest.isChild("testChildUnlocksFreeLock") else { return }
        OSAllocatedUnfairLock().unlock()
    }

    func testChildUnlocksOtherThreadsLock() {
        guard ChildTest.isChild("testChildUnlocksOtherThreadsLock") else { return }
        let lock = OSAllocatedUnfairLock()
        let thread = JoinableThread { lock.lock() }   // exits holding it
        thread.join()
        lock.unlock()
    }

    func testChildPreconditionOwner() {
        guard ChildTest.isChild("testChildPreconditionOwner") else { return }
        OSAllocatedUnfairLock(initialState: 1).precondition(.owner)
    }

    func testChildPreconditionNotOwner() {
        guard ChildTest.isChild("testChildPreconditionNotOwner") else { return }
        let lock = OSAllocatedUnfairLock()
        lock.withLock { lock.precondition(.notOwner) }
    }

    func testChildUnknownFlags() {
        guard ChildTest.isChild("testChildUnknownFlags") else { return }
        OSAllocatedUnfairLock().lock(flags: OSAllocatedUnfairLockFlags(rawValue: 2))
    }

    func testChildUnlocksFreeLockWhileCheckingOrder() {
        guard ChildTest.isChild("testChildUnlocksFreeLockWhileCheckingOrder") else { return }
        LockOrderChecking.isEnabled = true
        OSAllocatedUnfairLock().unlock()
    }
}
