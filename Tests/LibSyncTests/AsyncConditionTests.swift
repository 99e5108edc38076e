import Glibc
import Synchronization
import XCTest
@testable import LibSync

/// The async wait on a condition variable (docs/async.md, docs/conditions.md): a task holding
/// the mutex (async form) releases it, waits suspended, and holds it again when the wait returns
/// or throws; signals and broadcasts from threads and tasks reach task and thread waiters alike.
final class AsyncConditionTests: XCTestCase {
    final class State: @unchecked Sendable {
        var items = 0, produced = 0, consumed = 0, done = false
        var violations = 0, cancelled = 0, ready = 0, go = false, woken = 0
    }

    /// A condition variable in its process-shared mode (the futex sequence) or not (the queue).
    func makeCondition(shared: Bool) -> SyncConditionVariable {
        let condition = SyncConditionVariable()
        if shared { XCTAssertEqual(ConditionWord.initialize(condition.memory.raw, shared: true), 0) }
        return condition
    }

    /// The blocking form, from a task: the thread holds the mutex.
    func lockBlocking(_ mutex: SyncMutex) throws { try mutex.lock() }

    func isFree(_ mutex: SyncMutex) -> Bool {
        mutex.word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == 0
    }

    /// Waits (suspended) until `condition` holds; fails the test instead of hanging once
    /// `seconds` have passed (a deadlock detector, not a timing assertion).
    func until(_ what: String, seconds: Int = 120, _ condition: () -> Bool) async -> Bool {
        let end = monotonicNow() + Int64(seconds) * 1_000_000_000
        while !condition() {
            if monotonicNow() > end {
                XCTFail("never: \(what)")
                return false
            }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }

    func testWaitReleasesTheMutexAndHoldsItAgain() async throws {
        let mutex = SyncMutex(), condition = SyncConditionVariable(), state = State()
        let waiter = Task {
            try await mutex.lock()
            state.ready = 1
            while !state.go { try await condition.wait(on: mutex) }
            let held = mutex.isHeldByCurrentTask
            try mutex.unlock()
            return held
        }
        _ = await until("the waiter waits") { AsyncRuntime.current.pendingCount == 1 }
        // The waiter released the mutex while it waits: a thread takes it.
        let thread = JoinableThread {
            try! mutex.lock()
            state.go = true
            condition.signal()
            try! mutex.unlock()
        }
        thread.join()
        let held = try await waiter.value
        XCTAssertTrue(held)
        XCTAssertEqual(state.ready, 1)
        XCTAssertTrue(isFree(mutex))
    }

    func testTaskSignalWakesAThreadAndThreadSignalWakesATask() async throws {
        let mutex = SyncMutex(), condition = SyncConditionVariable(), state = State()
        // A thread waits (blocking), a task signals.
        let thread = JoinableThread {
            try! mutex.lock()
            state.ready += 1
            while !state.go { try! condition.wait(on: mutex) }
            state.woken += 1
            try! mutex.unlock()
        }
        _ = await until("the thread waits") { mutex.withLock { state.ready == 1 && ConditionWord.count(condition.memory.raw).pointee.load(ordering: .relaxed) == 1 } }
        try await mutex.withLock { () async in
            state.go = true
            condition.signal()
        }
        thread.join()
        XCTAssertEqual(state.woken, 1)
    }

    func testNotHoldingTheMutexIsNotOwner() async throws {
        let mutex = SyncMutex(), condition = SyncConditionVariable()
        do {
            try await condition.wait(on: mutex)
            XCTFail("waited without the mutex")
        } catch LockError.notOwner {}
        // Held by a thread (the blocking form), not by the task.
        try lockBlocking(mutex)
        do {
            _ = try await condition.wait(on: mutex, timeout: .milliseconds(1))
            XCTFail("waited with a thread's mutex")
        } catch LockError.notOwner {}
        try mutex.unlock()
        // Held by another task.
        try await mutex.lock()
        let other = Task { () -> Bool in
            do { try await condition.wait(on: mutex) } catch LockError.notOwner { return true }
            return false
        }
        let refused = try await other.value
        XCTAssertTrue(refused)
        XCTAssertTrue(mutex.isHeldByCurrentTask)
        try mutex.unlock()
        XCTAssertEqual(ConditionWord.count(condition.memory.raw).pointee.load(ordering: .relaxed), 0)
    }

    func testTimeoutsHoldTheMutexAgain() async throws {
        for shared in [false, true] {
            let mutex = SyncMutex(options: shared ? .shared : []), condition = makeCondition(shared: shared)
            try await mutex.lock()
            for timeout: Duration in [.zero, .milliseconds(-5), .nanoseconds(1), .milliseconds(2)] {
                let signalled = try await condition.wait(on: mutex, timeout: timeout)
                XCTAssertFalse(signalled, "\(timeout)")
                XCTAssertTrue(mutex.isHeldByCurrentTask, "\(timeout)")
            }
            let predicate = try await condition.wait(on: mutex, timeout: .milliseconds(1)) { false }
            XCTAssertFalse(predicate)
            XCTAssertTrue(mutex.isHeldByCurrentTask)
            try mutex.unlock()
            XCTAssertTrue(isFree(mutex))
            XCTAssertEqual(ConditionWord.count(condition.memory.raw).pointee.load(ordering: .relaxed) & ~processSharedFlag, 0)
            XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
        }
    }

    func testZeroTimeoutReleasesTheMutexForATaskWaitingForIt() async throws {
        // As the blocking form: a zero timeout still releases the mutex and takes it again, so a
        // task queued for the mutex meanwhile gets it first.
        let mutex = SyncMutex(), condition = SyncConditionVariable(), state = State()
        try await mutex.lock()
        let other = Task {
            try await mutex.lock()
            state.woken += 1
            try mutex.unlock()
        }
        _ = await until("the other task waits for the mutex") { AsyncRuntime.current.pendingCount == 1 }
        let signalled = try await condition.wait(on: mutex, timeout: .zero)
        XCTAssertFalse(signalled)
        XCTAssertEqual(state.woken, 1)
        try mutex.unlock()
        try await other.value
    }

    func testCancelledWaitThrowsHoldingTheMutex() async throws {
        let mutex = SyncMutex(), condition = SyncConditionVariable(), state = State()
        let waiter = Task { () -> Bool in
            try await mutex.lock()
            state.ready = 1
            do {
                while !state.go { try await condition.wait(on: mutex) }
            } catch is CancellationError {
                let held = mutex.isHeldByCurrentTask
                try mutex.unlock()
                return held
            }
            try mutex.unlock()
            return false
        }
        _ = await until("the waiter waits") { AsyncRuntime.current.pendingCount == 1 }
        // The mutex is taken while the waiter is cancelled: the waiter throws only once it holds
        // the mutex again, after this task released it.
        try await mutex.lock()
        waiter.cancel()
        _ = await until("the cancelled waiter waits for the mutex") {
            AsyncRuntime.current.pendingCount == 1 && ConditionWord.count(condition.memory.raw).pointee.load(ordering: .relaxed) == 0
        }
        try mutex.unlock()
        let heldWhenThrown = try await waiter.value
        XCTAssertTrue(heldWhenThrown)
        XCTAssertTrue(isFree(mutex))

        // Cancelled before it asks: throws at once, the mutex held and never released.
        try await mutex.lock()
        let early = Task { () -> Bool in
            try await mutex.lock()
            withUnsafeCurrentTask { $0?.cancel() }
            do { try await condition.wait(on: mutex) } catch is CancellationError {}
            let held = mutex.isHeldByCurrentTask
            try mutex.unlock()
            return held
        }
        try mutex.unlock()
        let earlyHeld = try await early.value
        XCTAssertTrue(earlyHeld)
    }

    /// A signal given to a waiter that is then cancelled is not lost, whichever happens first:
    /// two tasks wait, one signal, the oldest cancelled at once; the other must still wake for
    /// the item (or the first consumed it, not cancelled in time).
    func testSignalRacingCancellationIsPassedOn() async throws {
        for round in 0..<200 {
            let mutex = SyncMutex(), condition = SyncConditionVariable(), state = State()
            func consumer() -> Task<Bool, Error> {
                Task {
                    try await mutex.lock()
                    state.ready += 1
                    do {
                        while state.items == 0 { try await condition.wait(on: mutex) }
                    } catch is CancellationError {
                        if !mutex.isHeldByCurrentTask { state.violations += 1 }
                        try mutex.unlock()
                        return false
                    }
                    state.items -= 1
                    state.consumed += 1
                    try mutex.unlock()
                    return true
                }
            }
            let first = consumer()
            _ = await until("the first waits") { AsyncRuntime.current.pendingCount == 1 }
            let second = consumer()
            _ = await until("the second waits") { AsyncRuntime.current.pendingCount == 2 }
            try await mutex.lock()
            state.items = 1
            condition.signal()
            try mutex.unlock()
            if round % 2 == 0 { await Task.yield() }
            first.cancel()
            let firstConsumed = (try? await first.value) ?? false
            if firstConsumed {
                second.cancel()
                _ = try? await second.value
            } else {
                let secondConsumed = try await second.value
                XCTAssertTrue(secondConsumed, "round \(round)")
            }
            XCTAssertEqual(state.consumed, 1, "round \(round)")
            XCTAssertEqual(state.violations, 0)
            XCTAssertTrue(isFree(mutex))
        }
    }

    /// Producers and consumers, threads and tasks mixed, with consumer tasks cancelled at random
    /// points: every item is consumed exactly once, no signal is lost (a lost one leaves an item
    /// with every consumer asleep), every cancelled wait held the mutex when it threw, and the
    /// mutex is free at the end.
    func producersAndConsumers(shared: Bool) async throws {
        let mutex = SyncMutex(options: shared ? .shared : []), condition = makeCondition(shared: shared), state = State()
        let perProducer = 1500, threadProducers = 2, taskProducers = 2
        let total = perProducer * (threadProducers + taskProducers)

        let threadConsumers = (0..<2).map { _ in
            JoinableThread {
                while true {
                    try! mutex.lock()
                    while state.items == 0 && !state.done { try! condition.wait(on: mutex) }
                    let finished = state.items == 0 && state.done
                    if state.items > 0 {
                        state.items -= 1
                        state.consumed += 1
                    }
                    try! mutex.unlock()
                    if finished { return }
                }
            }
        }
        let threadProducerThreads = (0..<threadProducers).map { _ in
            JoinableThread {
                for _ in 0..<perProducer {
                    try! mutex.lock()
                    state.items += 1
                    state.produced += 1
                    condition.signal()
                    try! mutex.unlock()
                }
            }
        }
        let taskConsumers = (0..<3).map { _ in
            Task {
                while true {
                    try await mutex.lock()
                    while state.items == 0 && !state.done { try await condition.wait(on: mutex) }
                    let finished = state.items == 0 && state.done
                    if state.items > 0 {
                        state.items -= 1
                        state.consumed += 1
                    }
                    try mutex.unlock()
                    if finished { return }
                }
            }
        }
        let producers = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<taskProducers {
                    group.addTask {
                        for i in 0..<perProducer {
                            try await mutex.withLock {
                                state.items += 1
                                state.produced += 1
                                if i % 7 == 0 { await Task.yield() }  // holding the mutex across an await
                                condition.signal()
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        // Consumers of one item each, cancelled at random (at once, after some yields, or not).
        // (Those not cancelled wait for an item or the end.)
        let storm = Task { await cancellationStorm(total: 2000, workers: 4) { _, _ in
            try await mutex.lock()
            do {
                while state.items == 0 && !state.done { try await condition.wait(on: mutex) }
            } catch {
                if !mutex.isHeldByCurrentTask { state.violations += 1 }
                state.cancelled += 1
                try mutex.unlock()
                throw error
            }
            if state.items > 0 {
                state.items -= 1
                state.consumed += 1
            }
            try mutex.unlock()
            return true
        } }
        try await producers.value
        for thread in threadProducerThreads { thread.join() }
        // Every item is consumed by the long-lived consumers, which sleep untimed: a lost signal
        // leaves an item behind with all of them asleep.
        let drained = await until("every item consumed") { mutex.withLock { state.consumed == total } }
        try await mutex.withLock { () async in
            state.done = true
            condition.broadcast()
        }
        for task in taskConsumers { try await task.value }
        for thread in threadConsumers { thread.join() }
        let stormed = await storm.value
        XCTAssertTrue(drained)
        XCTAssertEqual(state.produced, total)
        XCTAssertEqual(state.consumed, total)
        XCTAssertEqual(state.items, 0)
        XCTAssertEqual(state.violations, 0)
        XCTAssertGreaterThan(stormed, 0)
        XCTAssertTrue(isFree(mutex))
        XCTAssertEqual(ConditionWord.count(condition.memory.raw).pointee.load(ordering: .relaxed) & ~processSharedFlag, 0)
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
    }

    func testProducersAndConsumersWithCancellation() async throws { try await producersAndConsumers(shared: false) }

    func testProducersAndConsumersWithCancellationShared() async throws { try await producersAndConsumers(shared: true) }

    /// A broadcast wakes 1,200 waiting tasks and the waiting threads; each holds the mutex again
    /// in turn. Both modes.
    func broadcastToMany(shared: Bool) async throws {
        let mutex = SyncMutex(options: shared ? .shared : []), condition = makeCondition(shared: shared), state = State()
        let tasks = 1200, threads = 3
        let waitingThreads = (0..<threads).map { _ in
            JoinableThread {
                try! mutex.lock()
                state.ready += 1
                while !state.go { try! condition.wait(on: mutex) }
                state.woken += 1
                try! mutex.unlock()
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<tasks {
                group.addTask {
                    try await mutex.lock()
                    state.ready += 1
                    while !state.go { try await condition.wait(on: mutex) }
                    if !mutex.isHeldByCurrentTask { state.violations += 1 }
                    state.woken += 1
                    try mutex.unlock()
                }
            }
            // Each waiter counted itself under the mutex before its wait entered the queue
            // (entering comes before the release), so once this holds the mutex with every one
            // counted, all of them wait.
            _ = await until("everyone waits") { mutex.withLock { state.ready == tasks + threads } }
            try await mutex.withLock { () async in
                state.go = true
                condition.broadcast()
            }
            try await group.waitForAll()
        }
        for thread in waitingThreads { thread.join() }
        XCTAssertEqual(state.woken, tasks + threads)
        XCTAssertEqual(state.violations, 0)
        XCTAssertTrue(isFree(mutex))
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 0)
    }

    func testBroadcastToMoreThanAThousandTasks() async throws { try await broadcastToMany(shared: false) }

    func testBroadcastToMoreThanAThousandTasksShared() async throws { try await broadcastToMany(shared: true) }

    /// signal(count:) wakes exactly that many of the waiting tasks (process-private mode: no
    /// spurious wakeups), oldest first.
    func testSignalWakesExactlyThatManyTasksOldestFirst() async throws {
        let mutex = SyncMutex(), condition = SyncConditionVariable()
        final class Order: @unchecked Sendable { var woken: [Int] = [] }
        let order = Order()
        var waiters: [Task<Void, Error>] = []
        for i in 0..<6 {
            waiters.append(Task {
                try await mutex.lock()
                try await condition.wait(on: mutex)
                order.woken.append(i)
                try mutex.unlock()
            })
            _ = await until("waiter \(i) waits") { AsyncRuntime.current.pendingCount == i + 1 }
        }
        try await mutex.withLock { () async in condition.signal(count: 2) }
        _ = await until("two woke") { mutex.withLock { order.woken.count == 2 } }
        // The other four still wait (a snapshot, then a signal to all).
        XCTAssertEqual(AsyncRuntime.current.pendingCount, 4)
        XCTAssertEqual(Set(order.woken), [0, 1])
        try await mutex.withLock { () async in condition.broadcast() }
        for waiter in waiters { try await waiter.value }
        XCTAssertEqual(Set(order.woken), Set(0..<6))
    }

    /// SyncCondition (NSCondition): a task locks and waits, a thread signals; timeouts hold the
    /// lock again.
    func testSyncConditionAsyncForms() async throws {
        let condition = SyncCondition(), state = State()
        let waiter = Task { () -> Bool in
            try await condition.lock()
            state.ready = 1
            while !state.go { try await condition.wait() }
            let timedOut = try await condition.wait(timeout: .zero) == false
            try condition.unlock()
            return timedOut
        }
        _ = await until("the waiter waits") { AsyncRuntime.current.pendingCount == 1 }
        let thread = JoinableThread {
            try! condition.lock()
            state.go = true
            condition.signal()
            try! condition.unlock()
        }
        thread.join()
        let timedOut = try await waiter.value
        XCTAssertTrue(timedOut)
        XCTAssertTrue(condition.tryLock())
        try condition.unlock()
    }
}
