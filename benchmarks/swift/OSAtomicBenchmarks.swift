import LibSync
import Synchronization

/// Swift: the OSAtomic functions beside Synchronization's `Atomic` used directly.
func osatomicBenchmarks() {
    let storage = OSAtomicStorage<Int32>(0)
    let direct = Box()
    for threads in [1, 2, 8] {
        table("Swift OSAtomicAdd32", threads: threads, iterations: 2_000_000 / threads, [
            Row(name: "Synchronization Atomic<Int32>.wrappingAdd") { n in
                for _ in 0..<n { direct.atomic.wrappingAdd(1, ordering: .relaxed) }
            },
            Row(name: "LibSync OSAtomicAdd32") { n in
                for _ in 0..<n { _ = OSAtomicAdd32(1, storage) }
            },
        ])
    }
}

final class Box: Sendable {
    let atomic = Atomic<Int32>(0)
}
