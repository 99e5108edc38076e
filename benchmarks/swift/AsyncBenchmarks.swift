import Foundation
import LibSync

// SyncMutex's async acquire (docs/async.md) beside its blocking form, both called from a task,
// and the usual Swift answer, an actor: uncontended (one task), and contended (4 tasks on one
// lock, a short critical section).

actor ActorCounter {
    var value = 0
    func bump() { work(&value) }
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
    table("SyncMutex from 4 tasks: contended lock+unlock", threads: 1, iterations: 100_000, [
        Row(name: "libsync SyncMutex, async withLock") { n in
            inTasks(4) { for _ in 0..<(n / 4) { try! await mutex.withLock { () async in work(&box.value) } } }
        },
        Row(name: "actor method call (peer)") { n in
            inTasks(4) { for _ in 0..<(n / 4) { await actor.bump() } }
        },
    ])
}
