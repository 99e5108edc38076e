import Foundation
import LibSync
import Synchronization

// SyncMutex, SyncRecursiveLock and SyncRWLock beside Synchronization.Mutex, NSLock and
// NSRecursiveLock: uncontended, and contended at 2 and 8 threads (a short critical section);
// then the workloads of benchmarks/c/bench_locks.c from Swift: ~20 ns of work inside the lock,
// ~50 ns outside it, at 2 and 8 threads, for a mutex and for a read-write lock (90% reads, 8%
// upgradable reads, 2% writes).

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

/// Work the optimizer keeps: `loops` relaxed loads of a global (an atomic load is never dropped),
/// as the C benchmarks' `delay` loop. The counts are calibrated once, at start, to ~20 ns and
/// ~50 ns; every row then runs the same fixed number of iterations.
let delaySink = Atomic<Int>(0)
@inline(__always) func delay(_ loops: Int) { for _ in 0..<loops { _ = delaySink.load(ordering: .relaxed) } }

/// The calling thread's CPU time: a calibration preempted by another process would shorten the delays.
private func nanoseconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) * 1e9 + Double(ts.tv_nsec)
}

/// The delay loops for ~20 ns inside and ~50 ns outside the lock.
/// BENCH_DELAY_LOOPS=INSIDE,OUTSIDE sets the counts instead (to count instructions under
/// valgrind, where a calibration would give other counts in every run).
func calibrateDelay() -> (inside: Int, outside: Int) {
    if let given = getenv("BENCH_DELAY_LOOPS").map({ String(cString: $0).split(separator: ",").compactMap { Int($0) } }),
       given.count == 2 {
        print("\ndelay loops given: inside \(given[0]), outside \(given[1])")
        return (given[0], given[1])
    }
    let loops = 50_000_000
    let begin = nanoseconds()
    delay(loops)
    let perLoop = (nanoseconds() - begin) / Double(loops)
    let inside = Int((20 / perLoop).rounded()), outside = Int((50 / perLoop).rounded())
    print("\ncalibration: \(fixed(perLoop, 2)) ns per delay loop; inside \(inside) loops (~20 ns), outside \(outside) (~50 ns)")
    return (inside, outside)
}

/// A counter in memory of its own (a cache line), bumped inside the lock as the C benchmark's
/// `guarded++` (no class property, so no exclusivity check is measured beside the lock), and a
/// pthread mutex and rwlock in memory of their own.
struct ContendedMemory: @unchecked Sendable {
    let counter: UnsafeMutablePointer<Int>
    let pthread: UnsafeMutablePointer<pthread_mutex_t>
    let pthreadRW: UnsafeMutablePointer<pthread_rwlock_t>
    init() {
        counter = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 64)
            .initializeMemory(as: Int.self, repeating: 0, count: 16)
        pthread = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 64)
            .bindMemory(to: pthread_mutex_t.self, capacity: 1)
        pthread_mutex_init(pthread, nil)
        pthreadRW = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 64)
            .bindMemory(to: pthread_rwlock_t.self, capacity: 1)
        pthread_rwlock_init(pthreadRW, nil)
    }
}

/// A per-thread xorshift: which operation each iteration does (the C benchmark's `seed`).
struct Picks {
    var seed: UInt64
    init() { seed = 0x9E37_79B9_7F4A_7C15 &* UInt64(truncatingIfNeeded: Int(bitPattern: pthread_self()) | 1) }
    mutating func next() -> UInt64 { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return seed % 100 }
}

/// ~20 ns inside the lock, ~50 ns outside (bench_locks.c's workload), at 2 and 8 threads.
func contendedWorkloadBenchmarks() {
    let (inside, outside) = calibrateDelay()
    let stdMutex = Mutex<Int>(0)
    let stdVoid = Mutex<Void>(())
    let syncMutex = SyncMutex()
    let locked = SyncLockedValue(0)
    let unfair = OSAllocatedUnfairLock(initialState: 0)
    let memory = ContendedMemory()
    // BENCH_THREADS (2 or 8) runs one of the two (to profile it alone).
    let only = getenv("BENCH_THREADS").flatMap { Int(String(cString: $0)) }
    for threads in [2, 8] where only == nil || only == threads {
        let iterations = 400_000 / threads
        table("Contended mutex from Swift (20 ns in, 50 ns out)", threads: threads, iterations: iterations, [
            Row(name: "Synchronization.Mutex") { n in
                for _ in 0..<n { stdMutex.withLock { $0 += 1; delay(inside) }; delay(outside) }
            },
            Row(name: "libsync SyncMutex.withLock") { n in
                for _ in 0..<n { syncMutex.withLock { memory.counter.pointee += 1; delay(inside) }; delay(outside) }
            },
            // SyncMutex guards no value: its counter is on a line of its own, a second line that
            // moves between the cores with each hold. The same for Synchronization.Mutex:
            Row(name: "Synchronization.Mutex, counter apart") { n in
                for _ in 0..<n { stdVoid.withLock { _ in memory.counter.pointee += 1; delay(inside) }; delay(outside) }
            },
            Row(name: "libsync SyncLockedValue.withLock") { n in
                for _ in 0..<n { locked.withLock { $0 += 1; delay(inside) }; delay(outside) }
            },
            Row(name: "OSAllocatedUnfairLock.withLock (libsync)") { n in
                for _ in 0..<n { unfair.withLock { $0 += 1; delay(inside) }; delay(outside) }
            },
            Row(name: "pthread_mutex (default) from Swift") { n in
                for _ in 0..<n {
                    pthread_mutex_lock(memory.pthread); memory.counter.pointee += 1; delay(inside); pthread_mutex_unlock(memory.pthread)
                    delay(outside)
                }
            },
            Row(name: "no lock (ceiling: the delays alone)") { n in
                for _ in 0..<n { delay(inside); delay(outside) }
            },
        ])
    }
    upgradableWorkloadBenchmarks(inside: inside, outside: outside, only: only)
}

/// bench_locks.c's "90% reads, 8% upgradable, 2% writes" from Swift: each iteration reads
/// (~20 ns inside), or checks with the upgradable read and writes one time in four (read,
/// upgrade, write), or writes; ~50 ns outside. pthread_rwlock cannot upgrade: its check takes
/// the write lock for the whole check.
func upgradableWorkloadBenchmarks(inside: Int, outside: Int, only: Int?) {
    let rw = SyncRWLock()
    let value = SyncRWLockedValue(0)
    let memory = ContendedMemory()
    for threads in [2, 8] where only == nil || only == threads {
        let iterations = 400_000 / threads
        table("Read-write lock from Swift, 90% reads, 8% upgradable, 2% writes", threads: threads, iterations: iterations, [
            Row(name: "pthread_rwlock (write lock for the check)") { n in
                var picks = Picks()
                for _ in 0..<n {
                    let pick = picks.next()
                    if pick < 10 {
                        pthread_rwlock_wrlock(memory.pthreadRW); _ = memory.counter.pointee; delay(inside)
                        if pick < 4 { memory.counter.pointee += 1 }
                        pthread_rwlock_unlock(memory.pthreadRW)
                    } else {
                        pthread_rwlock_rdlock(memory.pthreadRW); _ = memory.counter.pointee; delay(inside); pthread_rwlock_unlock(memory.pthreadRW)
                    }
                    delay(outside)
                }
            },
            Row(name: "libsync SyncRWLock (upgradable read)") { n in
                var picks = Picks()
                for _ in 0..<n {
                    let pick = picks.next()
                    if pick < 2 {
                        rw.withWriteLock { memory.counter.pointee += 1; delay(inside) }
                    } else if pick < 10 {
                        rw.withUpgradableReadLock {
                            _ = memory.counter.pointee; delay(inside)
                            if pick < 4 { try! rw.upgrade(); memory.counter.pointee += 1 }
                        }
                    } else {
                        rw.withReadLock { _ = memory.counter.pointee; delay(inside) }
                    }
                    delay(outside)
                }
            },
            Row(name: "libsync SyncRWLockedValue.upgradableRead") { n in
                var picks = Picks()
                for _ in 0..<n {
                    let pick = picks.next()
                    if pick < 2 {
                        value.write { $0 += 1; delay(inside) }
                    } else if pick < 10 {
                        value.upgradableRead { access in
                            _ = access.read { $0 }; delay(inside)
                            if pick < 4 { access.write { $0 += 1 } }
                        }
                    } else {
                        value.read { _ = $0; delay(inside) }
                    }
                    delay(outside)
                }
            },
            Row(name: "libsync SyncRWLock (write lock for the check)") { n in
                var picks = Picks()
                for _ in 0..<n {
                    let pick = picks.next()
                    if pick < 10 {
                        rw.withWriteLock { _ = memory.counter.pointee; delay(inside); if pick < 4 { memory.counter.pointee += 1 } }
                    } else {
                        rw.withReadLock { _ = memory.counter.pointee; delay(inside) }
                    }
                    delay(outside)
                }
            },
        ])
    }
}
