import Foundation
import LibSync
import Synchronization

// SyncMutex's async acquire (docs/async.md) beside its blocking form, both called from a task,
// and the usual Swift answers, written here as the peers: an actor (a method call, and a mutex
// whose lock() and unlock() are actor methods queueing continuations) and a semaphore of one
// unit that queues continuations behind a lock (as the Semaphore package's AsyncSemaphore).
// Uncontended (one task), and contended: N tasks on one lock, a short critical section, for
// N = 1...64 (the cost of a lock+unlock, wall time / operations, against the number of tasks).

actor ActorCounter {
    var value = 0
    func bump() { work(&value) }
}

/// A mutex as an actor: lock() takes it or queues the task's continuation; unlock() resumes the
/// oldest, which then holds it.
actor ActorMutex {
    private var held = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var head = 0

    func lock() async {
        if !held {
            held = true
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    func unlock() {
        guard head < waiters.count else {
            held = false
            return
        }
        let next = waiters[head]
        head += 1
        if head == waiters.count {
            waiters.removeAll(keepingCapacity: true)
            head = 0
        }
        next.resume()  // it holds the lock now
    }
}

/// A counting semaphore that queues the continuations of waiting tasks behind a lock.
final class ContinuationSemaphore: Sendable {
    private struct State {
        var value: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        var head = 0
    }
    private let state: Synchronization.Mutex<State>

    init(value: Int) { state = Synchronization.Mutex(State(value: value)) }

    func wait() async {
        let taken = state.withLock { state -> Bool in
            guard state.value > 0 else { return false }
            state.value -= 1
            return true
        }
        if taken { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.value > 0 {
                    state.value -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func signal() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.head < state.waiters.count else {
                state.value += 1
                return nil
            }
            let next = state.waiters[state.head]
            state.head += 1
            if state.head == state.waiters.count {
                state.waiters.removeAll(keepingCapacity: true)
                state.head = 0
            }
            return next
        }
        next?.resume()
    }
}

/// Runs `body` in a task and waits (the harness's thread) for it to finish.
func inTask(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task { await body(); done.signal() }
    done.wait()
}

/// Runs `tasks` tasks of `body` and waits for all.
func inTasks(_ tasks: Int, _ body: @escaping @Sendable () async -> Void) {
    inTask { await withTaskGroup(of: Void.self) { group in for _ in 0..<tasks { group.addTask { await body() } } } }
}

func asyncBenchmarks() {
    let mutex = SyncMutex()
    let box = GuardedCounter()
    let actor = ActorCounter()
    table("SyncMutex from a task: uncontended lock+unlock", threads: 1, iterations: 1_000_000, [
        Row(name: "libsync SyncMutex, blocking form") { n in
            inTask { for _ in 0..<n { mutex.withLock { work(&box.value) } } }
        },
        Row(name: "libsync SyncMutex, async lock()/unlock()") { n in
            inTask { for _ in 0..<n { try! await mutex.lock(); work(&box.value); try! mutex.unlock() } }
        },
        Row(name: "libsync SyncMutex, async withLock") { n in
            inTask { for _ in 0..<n { try! await mutex.withLock { () async in work(&box.value) } } }
        },
        Row(name: "actor method call (peer)") { n in
            inTask { for _ in 0..<n { await actor.bump() } }
        },
    ])
    let actorMutex = ActorMutex()
    let semaphore = ContinuationSemaphore(value: 1)
    for tasks in [1, 2, 4, 16, 64] {
        table("Async mutex: N tasks on one lock, lock+unlock (short critical section)", threads: 1, tasks: tasks,
              iterations: 64_000, [
            Row(name: "actor-based mutex (peer)") { n in
                inTasks(tasks) { for _ in 0..<(n / tasks) { await actorMutex.lock(); work(&box.value); await actorMutex.unlock() } }
            },
            Row(name: "continuation-queue semaphore (peer)") { n in
                inTasks(tasks) { for _ in 0..<(n / tasks) { await semaphore.wait(); work(&box.value); semaphore.signal() } }
            },
            Row(name: "actor method call (peer)") { n in
                inTasks(tasks) { for _ in 0..<(n / tasks) { await actor.bump() } }
            },
            Row(name: "libsync SyncMutex, async lock()/unlock()") { n in
                inTasks(tasks) { for _ in 0..<(n / tasks) { try! await mutex.lock(); work(&box.value); try! mutex.unlock() } }
            },
            Row(name: "libsync SyncMutex, async withLock") { n in
                inTasks(tasks) { for _ in 0..<(n / tasks) { try! await mutex.withLock { () async in work(&box.value) } } }
            },
        ])
    }
}
