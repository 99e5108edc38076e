import Foundation
import LibSync
import Synchronization

// SyncMutex, SyncRecursiveLock and SyncRWLock beside Synchronization.Mutex, NSLock and
// NSRecursiveLock: uncontended, and contended at 2 and 8 threads (a short critical section).

/// A short critical section: a few dependent operations on the guarded counter.
@inline(never) func work(_ value: inout Int) { for _ in 0..<8 { value = value &* 31 &+ 1 } }

final class GuardedCounter: @unchecked Sendable { var value = 0 }

func locksBenchmarks() {
    let syncMutex = SyncMutex(), recursive = SyncRecursiveLock(), rw = SyncRWLock()
    let stdMutex = Mutex<Int>(0)
    let nsLock = NSLock(), nsRecursive = NSRecursiveLock()
    let box = GuardedCounter()
    for threads in [1, 2, 8] {
        let iterations = 1_000_000 / threads
        table("Mutex lock+unlock (short critical section)", threads: threads, iterations: iterations, [
            Row(name: "Synchronization.Mutex") { n in for _ in 0..<n { stdMutex.withLock { work(&$0) } } },
            Row(name: "libsync SyncMutex") { n in for _ in 0..<n { syncMutex.withLock { work(&box.value) } } },
            Row(name: "Foundation NSLock") { n in for _ in 0..<n { nsLock.lock(); work(&box.value); nsLock.unlock() } },
            Row(name: "libsync SyncRecursiveLock") { n in for _ in 0..<n { recursive.withLock { work(&box.value) } } },
            Row(name: "Foundation NSRecursiveLock") { n in for _ in 0..<n { nsRecursive.lock(); work(&box.value); nsRecursive.unlock() } },
            Row(name: "libsync SyncRWLock (90% reads)") { n in
                for i in 0..<n {
                    if i % 10 == 0 { rw.withWriteLock { work(&box.value) } } else { rw.withReadLock { _ = box.value } }
                }
            },
        ])
    }
}
