import CSyncShim
import Glibc
import Synchronization

/// The calling thread as the holder of tracked locks (process-shared or robust, see MutexWord):
/// the addresses of those it holds, and, for robust locks, who it is beyond its thread id.
/// One record per thread, reached through a pthread key and freed when the thread exits. In a
/// fork()ed child the forking thread's record still names the parent's thread (the child's id
/// differs): it is emptied on first use, as the child holds none of the parent's locks.
@usableFromInline package enum LockOwner {
    @usableFromInline struct Record {
        /// The thread it describes.
        var tid: UInt32
        /// The addresses of the tracked locks the thread holds (few: a linear search is fastest).
        var count = 0, capacity = 0
        var held: UnsafeMutablePointer<UInt>? = nil
        /// Robust locks: whether the two fields below have been read, the thread's start time
        /// (clock ticks since boot, low 32 bits; 0: unknown) and its namespace tag.
        var identityRead = false
        var startTime: UInt32 = 0
        var namespaceTag: UInt32 = 0
        /// The last holder found alive, and until when (monotonic ns) that verdict stands.
        var aliveTid: UInt32 = 0, aliveStart: UInt32 = 0, aliveUntil: Int64 = 0

        init(tid: UInt32) { self.tid = tid }

        func index(of lock: UnsafeMutableRawPointer) -> Int? {
            let address = UInt(bitPattern: lock)
            for i in 0..<count where held![i] == address { return i }
            return nil
        }
    }

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { raw in
            guard let record = raw?.assumingMemoryBound(to: Record.self) else { return }
            record.pointee.held?.deallocate()
            record.deinitialize(count: 1)
            record.deallocate()
        }
        require(status == 0, "LockOwner: pthread_key_create failed (\(status))")
        return key
    }()

    /// The calling thread's record, made on first use.
    static func current() -> UnsafeMutablePointer<Record> {
        let me = threadID()
        if let raw = pthread_getspecific(key) {
            let record = raw.assumingMemoryBound(to: Record.self)
            if record.pointee.tid != me {  // a fork()ed child: none of it is the child's
                let held = record.pointee.held, capacity = record.pointee.capacity
                record.pointee = Record(tid: me)
                record.pointee.held = held
                record.pointee.capacity = capacity
            }
            return record
        }
        let record = UnsafeMutablePointer<Record>.allocate(capacity: 1)
        record.initialize(to: Record(tid: me))
        pthread_setspecific(key, record)
        return record
    }

    /// Whether the calling thread's list has `lock`.
    @usableFromInline @inline(never)
    static func holds(_ lock: UnsafeMutableRawPointer) -> Bool {
        guard let raw = pthread_getspecific(key) else { return false }
        let record = raw.assumingMemoryBound(to: Record.self)
        return record.pointee.tid == threadID() && record.pointee.index(of: lock) != nil
    }

    /// Lists `lock` as held by the calling thread.
    static func add(_ lock: UnsafeMutableRawPointer) {
        let record = current()
        if record.pointee.index(of: lock) != nil { return }
        if record.pointee.count == record.pointee.capacity {
            let capacity = max(4, record.pointee.capacity * 2)
            let held = UnsafeMutablePointer<UInt>.allocate(capacity: capacity)
            if let old = record.pointee.held {
                held.update(from: old, count: record.pointee.count)
                old.deallocate()
            }
            record.pointee.held = held
            record.pointee.capacity = capacity
        }
        record.pointee.held![record.pointee.count] = UInt(bitPattern: lock)
        record.pointee.count += 1
    }

    /// Removes `lock` from the calling thread's list; returns whether it was there.
    static func remove(_ lock: UnsafeMutableRawPointer) -> Bool {
        guard let raw = pthread_getspecific(key) else { return false }
        let record = raw.assumingMemoryBound(to: Record.self)
        guard record.pointee.tid == threadID(), let i = record.pointee.index(of: lock) else { return false }
        record.pointee.count -= 1
        record.pointee.held![i] = record.pointee.held![record.pointee.count]
        return true
    }

    /// The calling thread's record with its start time and namespace tag read.
    static func identified() -> UnsafeMutablePointer<Record> {
        let record = current()
        if !record.pointee.identityRead {
            record.pointee.startTime = ThreadStat.read(record.pointee.tid)?.start ?? 0
            record.pointee.namespaceTag = ThreadStat.namespaceTag()
            record.pointee.identityRead = true
        }
        return record
    }
}
