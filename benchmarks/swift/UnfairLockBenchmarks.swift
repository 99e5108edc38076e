import LibSync
import Synchronization

// Apple's OSAllocatedUnfairLock (libsync) and the value locks beside Synchronization.Mutex:
// withLock on a guarded Int with a short critical section (`work`, LocksBenchmarks.swift),
// uncontended and at 2 threads.

func unfairLockBenchmarks() {
    let stdMutex = Mutex<Int>(0)
    let unfair = OSAllocatedUnfairLock(initialState: 0)
    let locked = SyncLockedValue(0)
    let rwLocked = SyncRWLockedValue(0)
    let syncMutex = SyncMutex(), box = GuardedCounter()
    for threads in [1, 2] {
        let iterations = 1_000_000 / threads
        table("Value locks: withLock (short critical section)", threads: threads, iterations: iterations, [
            Row(name: "Synchronization.Mutex.withLock") { n in for _ in 0..<n { stdMutex.withLock { work(&$0) } } },
            Row(name: "OSAllocatedUnfairLock.withLock (libsync)") { n in for _ in 0..<n { unfair.withLock { work(&$0) } } },
            Row(name: "libsync SyncLockedValue.withLock") { n in for _ in 0..<n { locked.withLock { work(&$0) } } },
            Row(name: "libsync SyncMutex.withLock (own counter)") { n in for _ in 0..<n { syncMutex.withLock { work(&box.value) } } },
            Row(name: "libsync SyncRWLockedValue.write") { n in for _ in 0..<n { rwLocked.write { work(&$0) } } },
        ])
    }
}
