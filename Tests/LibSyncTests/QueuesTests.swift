import Glibc
import LibSync
import Synchronization
import XCTest

/// A counter and a log that tests share with work on other threads.
private final class Log: Sendable {
    let entries = Mutex<[Int]>([])
    let count = Atomic<Int>(0)
    func append(_ value: Int) { entries.withLock { $0.append(value) } }
}

private struct Boom: Error, Equatable {}

final class QueuesTests: XCTestCase {
    func testSerialQueueSyncReturnsValuesAndErrors() throws {
        let queue = SerialQueue()
        XCTAssertEqual(try queue.sync { 42 }, 42)
        XCTAssertThrowsError(try queue.sync { throw Boom() }) { XCTAssertEqual($0 as? Boom, Boom()) }
        XCTAssertFalse(queue.isCurrent)
        XCTAssertTrue(try queue.sync { queue.isCurrent })
    }

    func testSerialQueueIsFIFOUnderConcurrentSubmitters() throws {
        let queue = SerialQueue()
        let log = Log()
        let submitters = 4, perSubmitter = 2000
        DispatchQueueHelper.concurrentPerform(submitters) { s in
            for i in 0..<perSubmitter { queue.async { log.append(s * 1_000_000 + i) } }
        }
        try queue.sync {}  // runs after everything submitted before
        let entries = log.entries.withLock { $0 }
        XCTAssertEqual(entries.count, submitters * perSubmitter)
        for s in 0..<submitters {
            let mine = entries.filter { $0 / 1_000_000 == s }.map { $0 % 1_000_000 }
            XCTAssertEqual(mine, Array(0..<perSubmitter))
        }
    }

    func testReentrantSyncIsReported() throws {
        let serial = SerialQueue(), concurrent = ConcurrentQueue()
        let inner: Result<Void, any Error> = try serial.sync { Result { try serial.sync {} } }
        XCTAssertThrowsError(try inner.get()) { XCTAssertEqual($0 as? QueueError, .wouldDeadlock) }
        // Through another queue: serial -> concurrent -> serial.
        let chained: Result<Void, any Error> = try serial.sync {
            try concurrent.sync { Result { try serial.sync {} } }
        }
        XCTAssertThrowsError(try chained.get()) { XCTAssertEqual($0 as? QueueError, .wouldDeadlock) }
        let barrier: Result<Void, any Error> = try concurrent.barrierSync { Result { try concurrent.barrierSync {} } }
        XCTAssertThrowsError(try barrier.get()) { XCTAssertEqual($0 as? QueueError, .wouldDeadlock) }
    }

    func testBarriersRunAloneAfterEarlierWorkAndBeforeLaterWork() throws {
        let queue = ConcurrentQueue()
        let readers = Atomic<Int>(0), inBarrier = Atomic<Bool>(false)
        let violations = Atomic<Int>(0), done = Atomic<Int>(0)
        var submitted = 0
        for i in 0..<3000 {
            queue.async {
                readers.add(1, ordering: .sequentiallyConsistent)
                if inBarrier.load(ordering: .sequentiallyConsistent) { violations.add(1, ordering: .relaxed) }
                readers.subtract(1, ordering: .sequentiallyConsistent)
                done.add(1, ordering: .sequentiallyConsistent)
            }
            submitted += 1
            if i % 10 == 0 {
                let before = submitted
                queue.barrierAsync {
                    inBarrier.store(true, ordering: .sequentiallyConsistent)
                    if readers.load(ordering: .sequentiallyConsistent) != 0 { violations.add(1, ordering: .relaxed) }
                    if done.load(ordering: .sequentiallyConsistent) != before { violations.add(1, ordering: .relaxed) }
                    inBarrier.store(false, ordering: .sequentiallyConsistent)
                    done.add(1, ordering: .sequentiallyConsistent)
                }
                submitted += 1
            }
        }
        XCTAssertEqual(try queue.barrierSync { done.load(ordering: .relaxed) }, submitted)
        XCTAssertEqual(violations.load(ordering: .relaxed), 0)
        XCTAssertEqual(try queue.sync { "read" }, "read")
    }

    func testReleasedQueueStillRunsPendingWork() {
        let log = Log()
        do {
            let queue = SerialQueue()
            for _ in 0..<100 { queue.async { usleep(100); log.count.add(1, ordering: .relaxed) } }
        }
        var waited = 0
        while log.count.load(ordering: .relaxed) < 100 && waited < 60_000 { usleep(1000); waited += 1 }  // a bound
        XCTAssertEqual(log.count.load(ordering: .relaxed), 100)
    }

    func testExecutorRunsEverythingOnItsThreadInOrder() throws {
        let executor = try ThreadExecutor()
        let thread = try executor.sync { pthread_self() }
        XCTAssertEqual(pthread_equal(thread, pthread_self()), 0)
        XCTAssertFalse(executor.isCurrent)
        let log = Log(), wrongThread = Atomic<Int>(0)
        DispatchQueueHelper.concurrentPerform(4) { s in
            for i in 0..<2000 {
                try! executor.async {
                    if pthread_equal(pthread_self(), thread) == 0 { wrongThread.add(1, ordering: .relaxed) }
                    log.append(s * 1_000_000 + i)
                }
            }
        }
        XCTAssertEqual(try executor.sync { log.entries.withLock { $0.count } }, 8000)  // after all of them
        let entries = log.entries.withLock { $0 }
        for s in 0..<4 { XCTAssertEqual(entries.filter { $0 / 1_000_000 == s }.map { $0 % 1_000_000 }, Array(0..<2000)) }
        XCTAssertEqual(wrongThread.load(ordering: .relaxed), 0)
        XCTAssertThrowsError(try executor.sync { throw Boom() }) { XCTAssertEqual($0 as? Boom, Boom()) }
        let inner: Result<Void, any Error> = try executor.sync { Result { try executor.sync {} } }
        XCTAssertThrowsError(try inner.get()) { XCTAssertEqual($0 as? QueueError, .wouldDeadlock) }
        XCTAssertTrue(try executor.sync { executor.isCurrent })
    }

    func testExecutorStopRunsPendingWorkThenRefuses() throws {
        let executor = try ThreadExecutor()
        let log = Log()
        for _ in 0..<50 { try executor.async { usleep(100); log.count.add(1, ordering: .relaxed) } }
        executor.stop()
        XCTAssertEqual(log.count.load(ordering: .relaxed), 50)
        XCTAssertThrowsError(try executor.async {}) { XCTAssertEqual($0 as? QueueError, .stopped) }
        XCTAssertThrowsError(try executor.sync {}) { XCTAssertEqual($0 as? QueueError, .stopped) }
        executor.stop()
    }

    /// The child of fork() has no executor thread: sync and async throw (sync used to wait
    /// forever), stop and release return at once; the parent's executor works on.
    func testExecutorInForkedChildThrowsInsteadOfHanging() throws {
        var executor: ThreadExecutor? = try ThreadExecutor()
        for _ in 0..<50 { try executor!.async { usleep(200) } }  // busy at the fork
        let child = fork()
        if child == 0 {
            var code: Int32 = 0
            do { try executor!.sync {}; code = 2 } catch QueueError.forked {} catch { code = 3 }
            do { try executor!.async {}; code = 4 } catch QueueError.forked {} catch { code = 5 }
            executor!.stop()
            executor = nil
            _exit(code)
        }
        XCTAssertEqual(exitStatus(child, withinSeconds: 10), 0)
        XCTAssertEqual(try executor!.sync { 42 }, 42)
    }

    func testIsolatedValueReadsSeeWholeWritesInOrder() throws {
        struct Pair: Sendable { var a = 0, b = 0 }
        let value = IsolatedValue(Pair())
        let torn = Atomic<Int>(0)
        DispatchQueueHelper.concurrentPerform(4) { _ in
            for i in 0..<20_000 {
                if i % 10 == 0 {
                    value.write { $0.a += 1; $0.b += 1 }
                } else if i % 10 == 5 {
                    value.update { $0.a += 1; $0.b += 1 }
                } else if value.read({ $0.a != $0.b }) {
                    torn.add(1, ordering: .relaxed)
                }
            }
        }
        XCTAssertEqual(value.value.a, 16000)  // no write lost
        XCTAssertEqual(torn.load(ordering: .relaxed), 0)
        let order = IsolatedValue([Int]())
        for i in 0..<100 {
            order.write { $0.append(i) }
            XCTAssertEqual(order.read { $0.last }, i)  // a read after a write sees it
        }
        XCTAssertEqual(order.value, Array(0..<100))
        XCTAssertEqual(order.update { list -> Int in list.append(100); return list.count }, 101)
        order.set([7])
        XCTAssertEqual(order.value, [7])
        XCTAssertThrowsError(try order.update { _ in throw Boom() })
        XCTAssertThrowsError(try order.read { _ in throw Boom() })
    }

    /// The unpaired halves (C's try_begin/end): a release without a take changes nothing, so
    /// no phantom reader is left for writes to wait out forever.
    func testIsolationReleaseWithoutTakeChangesNothing() {
        let value = IsolatedValue(0)
        XCTAssertFalse(value.isolation.endShared())
        value.isolation.unlockShared()  // unpaired here too: undone, not wrapped
        // (A phantom reader would make the update below wait forever: stop here instead.)
        guard value.writeIfFree({ $0 = 1 }) else { return XCTFail("a reader count was left behind") }
        XCTAssertEqual(value.value, 1)
        XCTAssertTrue(value.isolation.beginShared())
        XCTAssertTrue(value.isolation.endShared())
        guard !value.isolation.endShared() else { return XCTFail("released a share twice") }
        XCTAssertFalse(value.isolation.endWrite())
        XCTAssertTrue(value.isolation.beginWrite())
        let elsewhere = Atomic<Bool>(true)
        DispatchQueueHelper.concurrentPerform(1) { _ in
            elsewhere.store(value.isolation.endWrite(), ordering: .relaxed)
        }
        XCTAssertFalse(elsewhere.load(ordering: .relaxed))  // not the thread that took it
        XCTAssertFalse(value.isolation.tryLockShared())
        XCTAssertTrue(value.isolation.endWrite())
        XCTAssertFalse(value.isolation.endWrite())
        value.update { $0 += 1 }
        XCTAssertEqual(value.value, 2)
    }

    /// A thread that took no share releases one while another holds one: false, and the
    /// holder's share stays, even where the two threads count in the same slot (bystanders
    /// run until several have; slots are hashed from the thread id's low bits).
    func testIsolationEndSharedByBystanderChangesNothing() {
        let value = IsolatedValue(0)
        XCTAssertTrue(value.isolation.beginShared())
        let mine = threadID() & 15
        var sameSlot = 0
        for _ in 0..<1024 where sameSlot < 4 {
            let result = Atomic<UInt64>(0)
            DispatchQueueHelper.concurrentPerform(1) { _ in
                let released: UInt64 = value.isolation.endShared() ? 1 : 0
                result.store(released << 32 | UInt64(threadID()), ordering: .relaxed)
            }
            let seen = result.load(ordering: .relaxed)
            XCTAssertEqual(seen >> 32, 0, "a bystander released the reader's share")
            if UInt32(truncatingIfNeeded: seen) & 15 == mine { sameSlot += 1 }
        }
        XCTAssertGreaterThan(sameSlot, 0)
        XCTAssertFalse(value.writeIfFree { $0 = 1 })  // the share still holds it
        final class Ran: Sendable { let flag = Atomic<Bool>(false) }
        let ran = Ran()
        value.write { $0 += 10; ran.flag.store(true, ordering: .relaxed) }
        XCTAssertFalse(ran.flag.load(ordering: .relaxed))  // queued behind the reader
        XCTAssertTrue(value.isolation.endShared())  // the reader out applies the write
        XCTAssertTrue(ran.flag.load(ordering: .relaxed))
        XCTAssertEqual(value.value, 10)
        XCTAssertFalse(value.isolation.endShared())
    }
}

/// The exit status of `child`, or -1 (the child killed) if it has not exited within the bound:
/// a guard against a hang, not a timing assertion.
func exitStatus(_ child: pid_t, withinSeconds seconds: Int) -> Int32 {
    var status: Int32 = 0
    for _ in 0..<(seconds * 1000) {
        if waitpid(child, &status, WNOHANG) == child { return status & 0x7f == 0 ? (status >> 8) & 0xff : -1 }
        usleep(1000)
    }
    kill(child, SIGKILL)
    waitpid(child, &status, 0)
    return -1
}

/// Runs `body(0..<count)` on `count` threads at once and waits for them.
enum DispatchQueueHelper {
    static func concurrentPerform(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        var threads: [pthread_t] = []
        for index in 0..<count {
            final class Box { let run: () -> Void; init(_ run: @escaping () -> Void) { self.run = run } }
            let box = Unmanaged.passRetained(Box { body(index) }).toOpaque()
            var thread = pthread_t()
            pthread_create(&thread, nil, { Unmanaged<Box>.fromOpaque($0!).takeRetainedValue().run(); return nil }, box)
            threads.append(thread)
        }
        for thread in threads { pthread_join(thread, nil) }
    }
}
