import LibSync
import Synchronization

/// Swift: AtomicInteger beside Synchronization's Atomic; AtomicReference.get beside a
/// Mutex-protected reference (2 readers, 1 writer). Both hand the +1 they get to `use`, so the
/// optimizer cannot drop the Mutex row's retain and release (its value is never looked at).
func atomicsBenchmarks() {
    let ours = AtomicInteger<Int64>(0), direct = Box64()
    table("Swift AtomicInteger64.incrementAndGet", threads: 2, iterations: 1_000_000, [
        Row(name: "Synchronization Atomic<Int64>.wrappingAdd") { n in
            for _ in 0..<n { direct.atomic.wrappingAdd(1, ordering: .sequentiallyConsistent) }
        },
        Row(name: "LibSync AtomicInteger64") { n in for _ in 0..<n { ours.incrementAndGet() } },
    ])
    let objects = (0..<4).map { _ in Payload() }
    let reference = AtomicReference(objects[0])
    let locked = Mutex(objects[0])
    let turn = Atomic<Int>(0)
    table("Swift AtomicReference.get, 2 readers + 1 writer", threads: 3, iterations: 300_000, [
        Row(name: "Synchronization Mutex<Payload>") { n in
            let writer = turn.wrappingAdd(1, ordering: .relaxed).oldValue % 3 == 0
            for i in 0..<n {
                if writer { if i % 16 == 0 { locked.withLock { $0 = objects[i % 4] } } } else { use(locked.withLock { $0 }) }
            }
        },
        Row(name: "LibSync AtomicReference (lock-free)") { n in
            let writer = turn.wrappingAdd(1, ordering: .relaxed).oldValue % 3 == 0
            for i in 0..<n {
                if writer { if i % 16 == 0 { reference.set(objects[i % 4]) } } else { use(reference.get()) }
            }
        },
    ])
}

final class Box64: Sendable { let atomic = Atomic<Int64>(0) }
final class Payload: Sendable {}
@inline(never) func use(_ object: Payload?) { precondition(object != nil) }
