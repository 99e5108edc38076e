import Dispatch
import Foundation
import LibSync

// Conditions: signal with no waiter, a ping-pong hand-off through a condition, and semaphore
// wait+signal — libsync beside Foundation's NSCondition and libdispatch's DispatchSemaphore.

final class Turn: @unchecked Sendable { var owner = 0 }

func conditionsBenchmarks() {
    let condition = SyncCondition(), nsCondition = NSCondition()
    let variable = SyncConditionVariable()
    table("Swift condition signal with no waiter", threads: 1, iterations: 2_000_000, [
        Row(name: "Foundation NSCondition.signal") { n in for _ in 0..<n { nsCondition.signal() } },
        Row(name: "libsync SyncCondition.signal") { n in for _ in 0..<n { condition.signal() } },
        Row(name: "libsync ConditionVariable.signal") { n in for _ in 0..<n { variable.signal() } },
    ])

    // One op = one hand-off; `bench`'s thread index is not passed to Swift rows, so each row's
    // two threads take the roles 0 and 1 from a shared counter.
    func pingPong(lock: @escaping @Sendable () -> Void, unlock: @escaping @Sendable () -> Void,
                  wait: @escaping @Sendable () -> Void, signal: @escaping @Sendable () -> Void) -> @Sendable (Int) -> Void {
        let turn = Turn(), roles = Turn()
        return { n in
            lock(); let me = roles.owner; roles.owner = (roles.owner + 1) % 2; unlock()
            for _ in 0..<n {
                lock()
                while turn.owner != me { wait() }
                turn.owner = 1 - me
                signal()
                unlock()
            }
        }
    }
    table("Swift ping-pong hand-off through a condition", threads: 2, iterations: 20_000, [
        Row(name: "Foundation NSCondition", body: pingPong(lock: { nsCondition.lock() }, unlock: { nsCondition.unlock() },
                                                          wait: { nsCondition.wait() }, signal: { nsCondition.signal() })),
        Row(name: "libsync SyncCondition", body: pingPong(lock: { try! condition.lock() }, unlock: { try! condition.unlock() },
                                                         wait: { try! condition.wait() }, signal: { condition.signal() })),
    ])

    let dispatchSemaphore = DispatchSemaphore(value: 1), semaphore = SyncSemaphore(value: 1)
    for threads in [1, 2, 8] {
        table("Swift semaphore wait+signal (count 1)", threads: threads, iterations: 500_000 / threads, [
            Row(name: "DispatchSemaphore") { n in for _ in 0..<n { dispatchSemaphore.wait(); dispatchSemaphore.signal() } },
            Row(name: "libsync SyncSemaphore") { n in for _ in 0..<n { semaphore.wait(); try! semaphore.signal() } },
        ])
    }
}
