import Dispatch
import Glibc
import XCTest
@testable import LibSync

/// A process-shared mutex whose woken waiter dies before it takes the lock: the next waiter
/// still gets it (the C suite, test_waiter_death.c, covers every shared lock; Python too).
final class WaiterDeathTests: XCTestCase {
    var mapping: UnsafeMutableRawPointer!
    let size = 4096

    override func setUp() {
        mapping = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
        XCTAssertNotEqual(mapping, MAP_FAILED)
    }

    override func tearDown() {
        munmap(mapping, size)
    }

    /// Polls `condition` every millisecond; fails after 60 s (a guard against hangs).
    func waitUntil(_ what: String, _ condition: () -> Bool) {
        let end = monotonicNow() + 60_000_000_000
        while !condition() {
            if monotonicNow() > end { return XCTFail("never: \(what)") }
            usleep(1000)
        }
    }

    /// The stand-in sleeps first on the mutex's word (the kernel wakes the oldest sleeper) and
    /// exits on its wakeup without taking the lock, as a waiter SIGKILLed between its wakeup
    /// and its compare-and-swap does. A thread waiting behind it must get the lock.
    func testWokenWaiterThatDiesBlocksNobody() throws {
        let mutex = try SyncMutex(at: mapping, options: .shared, initialize: true)
        try mutex.lock()
        let word = atomic(mapping, as: UInt32.self)
        let standIn = fork()
        if standIn == 0 {
            _ = Futex.wait(mapping, expected: word.pointee.load(ordering: .relaxed), shared: true)
            _exit(0)
        }
        waitUntil("the stand-in sleeps") { Futex.sleepers(mapping, shared: true) == 1 }
        let got = DispatchSemaphore(value: 0)
        let waiter = Thread {
            try! mutex.lock()
            try! mutex.unlock()
            got.signal()
        }
        waiter.start()
        waitUntil("the waiter sleeps") { Futex.sleepers(mapping, shared: true) == 2 }
        try mutex.unlock()
        var status: Int32 = 0
        XCTAssertEqual(waitpid(standIn, &status, 0), standIn)
        XCTAssertEqual(got.wait(timeout: .now() + 60), .success, "the waiter never got the free lock")
    }
}
