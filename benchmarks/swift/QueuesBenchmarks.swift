import Dispatch
import Glibc
import LibSync
import Synchronization

/// Seed 003's comparison in Swift: a shared property read 90% / written 10% by 2 and 8 threads,
/// through each way of guarding it (libsync's locks, queues and isolated value), beside `DispatchQueue` used directly (no Foundation).
/// Adding a row is one `property(...)` line.
func queuesBenchmarks() {
    let objcSync = RecursiveMutexTable(), owner = Holder()
    let mutex = PthreadMutex(), rwlock = PthreadRWLock(), swiftMutex = Mutex(0)
    let syncMutex = SyncMutex(), syncRW = SyncRWLock()
    let serial = SerialQueue(), concurrent = ConcurrentQueue()
    let dispatchSerial = DispatchQueue(label: "bench.serial")
    let dispatchConcurrent = DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
    let isolated = IsolatedValue(0)
    nonisolated(unsafe) var plain = 0

    for threads in [2, 8] {
        table("Swift property 90% read / 10% write", threads: threads, iterations: 40_000 / threads, baseline: 1, [
            property("@synchronized (recursive mutex by address)",
                     get: { objcSync.lock(for: owner).locked { plain } },
                     set: { v in objcSync.lock(for: owner).locked { plain = v } }),
            property("pthread_mutex", get: { mutex.locked { plain } }, set: { v in mutex.locked { plain = v } }),
            property("pthread_rwlock",
                     get: { rwlock.reading { plain } }, set: { v in rwlock.writing { plain = v } }),
            property("libsync synchronized(owner)",
                     get: { synchronized(owner) { plain } }, set: { v in synchronized(owner) { plain = v } }),
            property("libsync SyncMutex", get: { syncMutex.withLock { plain } }, set: { v in syncMutex.withLock { plain = v } }),
            property("libsync SyncRWLock",
                     get: { syncRW.withReadLock { plain } }, set: { v in syncRW.withWriteLock { plain = v } }),
            property("Synchronization.Mutex",
                     get: { swiftMutex.withLock { $0 } }, set: { v in swiftMutex.withLock { $0 = v } }),
            property("SerialQueue: sync get, async set",
                     get: { try! serial.sync { plain } }, set: { v in serial.async { plain = v } }),
            property("ConcurrentQueue: sync get, barrierAsync set",
                     get: { try! concurrent.sync { plain } }, set: { v in concurrent.barrierAsync { plain = v } }),
            property("IsolatedValue: read, set (async)", get: { isolated.value }, set: { v in isolated.set(v) }),
            property("IsolatedValue: read, update (sync)",
                     get: { isolated.value }, set: { v in isolated.update { $0 = v } }),
            property("DispatchQueue serial: sync get, sync set",
                     get: { dispatchSerial.sync { plain } }, set: { v in dispatchSerial.sync { plain = v } }),
            property("DispatchQueue serial: sync get, async set",
                     get: { dispatchSerial.sync { plain } }, set: { v in dispatchSerial.async { plain = v } }),
            property("DispatchQueue concurrent: sync, barrier async",
                     get: { dispatchConcurrent.sync { plain } },
                     set: { v in dispatchConcurrent.async(flags: .barrier) { plain = v } }),
        ])
    }
}

/// A row: 9 reads through `get`, then one write through `set`.
private func property(_ name: String, get: @escaping @Sendable () -> Int,
                      set: @escaping @Sendable (Int) -> Void) -> Row {
    Row(name: name) { n in
        var sink = 0
        for i in 0..<n {
            if i % 10 == 9 { set(i) } else { sink &+= get() }
        }
        blackHole(sink)
    }
}

@inline(never) private func blackHole(_ value: Int) { _ = value }

// MARK: Today's peers, as a Swift programmer on Linux writes them without Foundation.

private final class PthreadMutex: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    init(recursive: Bool = false) {
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        if recursive { pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE)) }
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }
    func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }
}

private final class PthreadRWLock: @unchecked Sendable {
    private let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    init() { pthread_rwlock_init(lock, nil) }
    func reading<T>(_ body: () -> T) -> T {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return body()
    }
    func writing<T>(_ body: () -> T) -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return body()
    }
}

/// objc_sync_enter's scheme: the object's address picks one of a table of recursive mutexes.
private final class RecursiveMutexTable: Sendable {
    private let locks: [PthreadMutex] = (0..<64).map { _ in PthreadMutex(recursive: true) }
    func lock(for object: AnyObject) -> PthreadMutex {
        locks[Int(bitPattern: UInt(bitPattern: ObjectIdentifier(object).hashValue) >> 4) % 64]
    }
}

private final class Holder: Sendable {}
