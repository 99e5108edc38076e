import Dispatch
import Glibc
import Synchronization
import XCTest
@testable import LibSync

final class ConditionsTests: XCTestCase {
    /// Producers and consumers through a condition-protected queue: every item exactly once.
    func testNoLostWakeup() throws {
        final class Queue: @unchecked Sendable {
            let mutex = SyncMutex(), notEmpty = SyncConditionVariable(), notFull = SyncConditionVariable()
            var items: [Int] = [], done = 0, seen = [Int](repeating: 0, count: 4 * 5000)
        }
        let q = Queue()
        runThreads(8) { worker in
            if worker < 4 {
                for i in 0..<5000 {
                    try! q.mutex.lock()
                    try! q.notFull.wait(on: q.mutex, until: { q.items.count < 8 })
                    q.items.append(worker * 5000 + i)
                    q.notEmpty.signal()
                    try! q.mutex.unlock()
                }
                try! q.mutex.lock(); q.done += 1; q.notEmpty.broadcast(); try! q.mutex.unlock()
            } else {
                while true {
                    try! q.mutex.lock()
                    try! q.notEmpty.wait(on: q.mutex, until: { !q.items.isEmpty || q.done == 4 })
                    guard !q.items.isEmpty else { try! q.mutex.unlock(); return }
                    q.seen[q.items.removeFirst()] += 1
                    q.notFull.signal()
                    try! q.mutex.unlock()
                }
            }
        }
        XCTAssertEqual(q.seen, [Int](repeating: 1, count: 4 * 5000))
    }

    func testTimeoutsAndMisuse() throws {
        let mutex = SyncMutex(), cond = SyncConditionVariable()
        XCTAssertThrowsError(try cond.wait(on: mutex)) { XCTAssertEqual($0 as? LockError, .notOwner) }
        try mutex.lock()
        let start = monotonicNow()
        XCTAssertFalse(try cond.wait(on: mutex, timeout: .milliseconds(30)))
        XCTAssertGreaterThanOrEqual(monotonicNow() - start, 30_000_000)
        XCTAssertTrue(mutex.isHeldByCurrentThread)
        XCTAssertFalse(try cond.wait(on: mutex, deadlineNanoseconds: monotonicNow() - 1))
        XCTAssertFalse(try cond.wait(on: mutex, timeout: .milliseconds(5), until: { false }))
        try mutex.unlock()
    }

    /// Listings 4-3 and 4-4 with SyncCondition.
    func testCocoaCondition() throws {
        final class Work: @unchecked Sendable { let condition = SyncCondition(); var timeToDoWork = 0, done = 0 }
        let w = Work()
        let consumer = JoinableThread {
            for _ in 0..<500 {
                try! w.condition.lock()
                while w.timeToDoWork <= 0 { try! w.condition.wait() }
                w.timeToDoWork -= 1
                w.done += 1
                try! w.condition.unlock()
            }
        }
        for _ in 0..<500 {
            try w.condition.lock()
            w.timeToDoWork += 1
            w.condition.signal()
            try w.condition.unlock()
        }
        consumer.join()
        XCTAssertEqual(w.done, 500)
        XCTAssertThrowsError(try w.condition.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertEqual(w.condition.withLock { 7 }, 7)
        try w.condition.lock()
        XCTAssertFalse(try w.condition.wait(timeout: .milliseconds(1)))
        try w.condition.unlock()
    }

    func testConditionLockOrdersByValueAndRunsTheSeedsProducerConsumer() throws {
        let order = SyncConditionLock(condition: 0)
        final class Log: @unchecked Sendable { var steps: [Int] = [] }
        let log = Log()
        runThreads(6) { i in
            let step = 5 - i
            try! order.lock(whenCondition: step)
            log.steps.append(step)
            try! order.unlock(withCondition: step + 1)
        }
        XCTAssertEqual(log.steps, Array(0..<6))
        XCTAssertEqual(order.condition, 6)
        XCTAssertFalse(order.tryLock(whenCondition: 3))
        XCTAssertThrowsError(try order.unlock()) { XCTAssertEqual($0 as? LockError, .notOwner) }
        XCTAssertFalse(try order.lock(whenCondition: 1, timeout: .milliseconds(10)))

        let NO_DATA = 0, HAS_DATA = 1
        let condLock = SyncConditionLock(condition: NO_DATA)
        final class Queue: @unchecked Sendable { var items = 0, consumed = 0 }
        let queue = Queue()
        let consumer = JoinableThread {
            while queue.consumed < 1000 {
                try! condLock.lock(whenCondition: HAS_DATA)
                queue.items -= 1; queue.consumed += 1
                try! condLock.unlock(withCondition: queue.items == 0 ? NO_DATA : HAS_DATA)
            }
        }
        for _ in 0..<1000 {
            try condLock.lock()
            queue.items += 1
            try condLock.unlock(withCondition: HAS_DATA)
        }
        consumer.join()
        XCTAssertEqual(queue.consumed, 1000)
        XCTAssertEqual(condLock.condition, NO_DATA)
    }

    func testSemaphoreEventBarrier() throws {
        let semaphore = SyncSemaphore(value: 0, limit: 2)
        XCTAssertFalse(semaphore.tryWait())
        XCTAssertFalse(semaphore.wait(timeout: .milliseconds(5)))
        try semaphore.signal(count: 2)
        XCTAssertThrowsError(try semaphore.signal())
        XCTAssertEqual(semaphore.value, 2)
        XCTAssertTrue(semaphore.tryWait())

        let event = SyncEvent()
        XCTAssertFalse(event.wait(timeout: .milliseconds(5)))
        let waiter = JoinableThread { event.wait() }
        event.set()
        waiter.join()
        XCTAssertTrue(event.isSet)

        final class Count: @unchecked Sendable { var actions = 0 }
        let count = Count()
        let barrier = SyncBarrier(parties: 3) { count.actions += 1 }
        final class Indexes: @unchecked Sendable { var all: [Int] = []; let lock = SyncMutex() }
        let indexes = Indexes()
        runThreads(3) { _ in
            for _ in 0..<50 {
                let i = try! barrier.wait()
                indexes.lock.withLock { indexes.all.append(i) }
            }
        }
        XCTAssertEqual(count.actions, 50)
        XCTAssertEqual(indexes.all.sorted(), (0..<3).flatMap { Array(repeating: $0, count: 50) }.sorted())
        XCTAssertThrowsError(try barrier.wait(timeout: .milliseconds(5))) { XCTAssertEqual($0 as? BarrierError, .timedOut) }
        XCTAssertTrue(barrier.isBroken)
        XCTAssertThrowsError(try barrier.wait()) { XCTAssertEqual($0 as? BarrierError, .broken) }
        barrier.reset()
        XCTAssertFalse(barrier.isBroken)
        XCTAssertEqual(barrier.parties, 3)
    }
}

// MARK: Wakeups: exactly the signalled, never a slice's end

final class ExactWakeupTests: XCTestCase {
    final class Shared: @unchecked Sendable {
        let mutex = SyncMutex(), cond = SyncConditionVariable()
        var queued = 0, woken = 0, signalled = 0, done = false
        let slices = Atomic<Int>(0)
        func read<T>(_ body: () -> T) -> T { mutex.withLock(body) }
    }

    /// Polls an observable state until it holds; the bound only guards against a hang.
    func waitUntil(_ what: String, _ condition: () -> Bool) {
        let end = monotonicNow() + 30_000_000_000
        while !condition() {
            if monotonicNow() > end { XCTFail("timed out waiting until \(what)"); return }
            usleep(1000)
        }
    }

    /// A waiter blocked across many 50 ms slices (timed waits in a loop) returns true only when
    /// signalled: three older waiters take a signal for three, and the slicing waiter goes on
    /// timing out until its own signal. (A timed wait used to report a wakeup whenever any signal
    /// had been sent meanwhile.)
    func testSlicesOfAWaitAreNotWakeups() {
        let s = Shared()
        let others = (0..<3).map { _ in
            JoinableThread {
                try! s.mutex.lock()
                s.queued += 1  // under the mutex: waiting once it is released
                try! s.cond.wait(on: s.mutex)
                s.woken += 1
                try! s.mutex.unlock()
            }
        }
        waitUntil("three wait") { s.read { s.queued == 3 } }
        final class Outcome: @unchecked Sendable { var woke = false, doneWhenWoken = false }
        let outcome = Outcome()
        let slicer = JoinableThread {
            try! s.mutex.lock()
            while true {
                if try! s.cond.wait(on: s.mutex, timeout: .milliseconds(50)) {
                    outcome.woke = true
                    outcome.doneWhenWoken = s.done
                    break
                }
                s.slices.add(1, ordering: .sequentiallyConsistent)
            }
            try! s.mutex.unlock()
        }
        waitUntil("the slicer sliced") { s.slices.load(ordering: .sequentiallyConsistent) >= 2 }
        s.mutex.withLock { s.cond.signal(count: 3) }
        waitUntil("the three woke") { s.read { s.woken == 3 } }
        let seen = s.slices.load(ordering: .sequentiallyConsistent)
        waitUntil("three more slices") { s.slices.load(ordering: .sequentiallyConsistent) >= seen + 3 }
        s.mutex.withLock { s.done = true; s.cond.signal() }
        slicer.join()
        others.forEach { $0.join() }
        XCTAssertTrue(outcome.woke)
        XCTAssertTrue(outcome.doneWhenWoken, "woken before its signal")
    }

    /// signal(count:) wakes exactly that many of many waiters (they leave the queue at once),
    /// oldest first; broadcast the rest.
    func testSignalCountWakesExactlyThatMany() {
        let s = Shared(), n = 300
        let threads = (0..<n).map { i in
            JoinableThread {
                try! s.mutex.lock()
                s.queued += 1
                let ticket = s.queued
                try! s.cond.wait(on: s.mutex)
                s.woken += 1
                if !s.done { XCTAssertLessThanOrEqual(ticket, s.signalled, "waiter \(i) overtook an older one") }
                try! s.mutex.unlock()
            }
        }
        waitUntil("all wait") { s.read { s.queued == n } }
        var expected = 0
        for k in [1, 2, 5, 20, 50] {
            s.mutex.withLock { s.signalled += k; s.cond.signal(count: k) }
            expected += k
            waitUntil("\(k) more woke") { s.read { s.woken >= expected } }
            XCTAssertEqual(s.read { s.woken }, expected)
        }
        s.mutex.withLock { s.done = true; s.cond.broadcast() }
        threads.forEach { $0.join() }
        XCTAssertEqual(s.woken, n)
    }

    /// Every thread waiting when set() is called returns, even if clear() follows at once.
    /// (Many waiters: the last ones woken ran after the clear, and slept again.)
    func testEventSetThenClearWakesEveryWaiter() {
        let event = SyncEvent(), n = 64
        for round in 0..<20 {
            let returned = Atomic<Int>(0)
            let threads = (0..<n).map { _ in
                JoinableThread {
                    event.wait()
                    returned.add(1, ordering: .sequentiallyConsistent)
                }
            }
            // The waiter count in the event's word: all are asleep or about to be.
            let waiting = atomic(event.memory.raw + 4, as: UInt32.self)
            waitUntil("all wait") { waiting.pointee.load(ordering: .sequentiallyConsistent) == UInt32(n) }
            event.set()
            event.clear()
            let end = monotonicNow() + 30_000_000_000
            while returned.load(ordering: .sequentiallyConsistent) < n && monotonicNow() < end { usleep(1000) }
            let missed = n - returned.load(ordering: .sequentiallyConsistent)
            if missed > 0 { event.set() }  // let them go, then report
            threads.forEach { $0.join() }
            event.clear()
            XCTAssertEqual(missed, 0, "round \(round): \(missed) waiters missed set()")
            if missed > 0 { return }
        }
    }
}

/// Runs `body(i)` for i in 0..<count, each on its own thread (blocking work: unlike
/// DispatchQueue.concurrentPerform, which may run them on as few threads as there are cores),
/// and returns when all have finished.
func runThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let threads = (0..<count).map { i in JoinableThread { body(i) } }
    threads.forEach { $0.join() }
}

/// A thread running `body`, joined by `join()`.
final class JoinableThread: @unchecked Sendable {
    private var handle = pthread_t()
    init(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        pthread_create(&handle, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            box.body()
            return nil
        }, box)
    }
    func join() { pthread_join(handle, nil) }
    private final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
}
