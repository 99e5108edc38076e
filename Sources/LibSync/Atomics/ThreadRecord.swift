import CSyncShim
import Glibc
import Synchronization

// Per-thread records, so that the read paths of the atomics family write only their own cache
// line: hazard slots for AtomicReference and dictionary readers, and per-thread rejection
// counts for the throttler (summed on read). Records live on one global list, are never freed,
// and pass to a new thread when theirs exits (a pthread key destructor), so a scan of the list
// sees every slot and every count ever made.
//
// Layout (384 bytes, 64-byte aligned):
//   [0, 64)    8 hazard slots (UInt: 0, or an object being read)
//   64 depth (Int, owner only: slots in use) | 72 next record | 80 in use (Atomic<Int>)
//   88 overflow record (slots 8... of a deeply nested reader; owner only)
//   [128, 384) 8 counters: {address UInt, generation Int32, -, count Atomic<Int64>}

@usableFromInline package enum ThreadRecord {
    @usableFromInline static var slotCount: Int { 8 }
    @usableFromInline static var counterCount: Int { 8 }
    static let size = 384

    @usableFromInline static let head = Atomic<UInt>(0)

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        // Thread exit: forget the record first (later destructors may take a new one), then free it.
        let status = pthread_key_create(&key) { raw in
            guard let raw else { return }
            sync_thread_record_cache = nil
            sync_thread_counter_cache = sync_counter_cache()
            atomic(raw + 80, as: Int.self).pointee.store(0, ordering: .releasing)
        }
        precondition(status == 0, "ThreadRecord: pthread_key_create failed (\(status))")
        return key
    }()

    /// The calling thread's record.
    @inlinable @inline(__always)
    package static func current() -> UnsafeMutableRawPointer {
        if let record = sync_thread_record_cache { return record }
        return attach()
    }

    @usableFromInline static func attach() -> UnsafeMutableRawPointer {
        let record = acquire()
        sync_thread_record_cache = record
        pthread_setspecific(key, record)
        return record
    }

    /// A free record from the list, or a new one pushed onto it.
    static func acquire() -> UnsafeMutableRawPointer {
        var node = head.load(ordering: .acquiring)
        while node != 0 {
            let record = UnsafeMutableRawPointer(bitPattern: node)!
            if atomic(record + 80, as: Int.self).pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
                return record
            }
            node = next(record)
        }
        let record = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        record.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        (record + 80).storeBytes(of: 1, as: Int.self)
        var first = head.load(ordering: .relaxed)
        while true {
            (record + 72).storeBytes(of: first, as: UInt.self)
            let (pushed, now) = head.compareExchange(expected: first, desired: UInt(bitPattern: record), ordering: .releasing)
            if pushed { return record }
            first = now
        }
    }

    @inlinable @inline(__always)
    static func next(_ record: UnsafeMutableRawPointer) -> UInt { record.load(fromByteOffset: 72, as: UInt.self) }

    /// Calls `body` on every record ever made.
    @inlinable
    static func forEach(_ body: (UnsafeMutableRawPointer) -> Bool) {
        var node = head.load(ordering: .acquiring)
        while node != 0 {
            let record = UnsafeMutableRawPointer(bitPattern: node)!
            if !body(record) { return }
            node = next(record)
        }
    }

    // MARK: Hazard slots

    @inlinable @inline(__always)
    static func slot(_ record: UnsafeMutableRawPointer, _ index: Int) -> UnsafeMutablePointer<Atomic<UInt>> {
        atomic(record + index * 8, as: UInt.self)
    }
    @inlinable @inline(__always)
    static func depth(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Int> {
        (record + 64).assumingMemoryBound(to: Int.self)
    }

    /// The calling thread's next free hazard slot (nested readers take the following ones).
    @inlinable @inline(__always)
    package static func takeSlot() -> UnsafeMutablePointer<Atomic<UInt>> {
        let record = current(), depth = depth(record)
        let index = depth.pointee
        depth.pointee = index + 1
        return index < slotCount ? slot(record, index) : overflowSlot(record, index)
    }

    /// Gives back the slot `takeSlot` returned last (it must hold 0 again).
    @inlinable @inline(__always)
    package static func returnSlot() {
        depth(current()).pointee -= 1
    }

    /// Slot `index` >= 8: in the chain of overflow records (taken once, kept by the thread's record).
    @usableFromInline static func overflowSlot(_ record: UnsafeMutableRawPointer, _ index: Int) -> UnsafeMutablePointer<Atomic<UInt>> {
        var record = record, index = index
        while index >= slotCount {
            var overflow = record.load(fromByteOffset: 88, as: UInt.self)
            if overflow == 0 {
                overflow = UInt(bitPattern: acquire())
                record.storeBytes(of: overflow, toByteOffset: 88, as: UInt.self)
            }
            record = UnsafeMutableRawPointer(bitPattern: overflow)!
            index -= slotCount
        }
        return slot(record, index)
    }

    /// Whether some reader has `object` in a hazard slot.
    @usableFromInline static func isProtected(_ object: UInt) -> Bool {
        var found = false
        forEach { record in
            for i in 0..<slotCount where slot(record, i).pointee.load(ordering: .sequentiallyConsistent) == object {
                found = true
                return false
            }
            return true
        }
        return found
    }

    // MARK: Per-thread counters (the throttler's rejections)

    /// The calling thread's counter for `address` if it bumped it last and `tag` (the incarnation
    /// at `address`, which the caller chooses) matches: the hot path, %fs-relative loads and one
    /// branch.
    @inlinable @inline(__always)
    package static func cachedCounter(_ address: UnsafeMutableRawPointer, tag: UInt64) -> UnsafeMutablePointer<Atomic<Int64>>? {
        let cache = sync_thread_counter_cache
        guard cache.key == UInt(bitPattern: address) && cache.tag == tag else { return nil }
        return atomic(UnsafeMutableRawPointer(cache.count.unsafelyUnwrapped), as: Int64.self)
    }

    /// The calling thread's counter for (`address`, `generation`), claimed if new, and cached with
    /// `tag` for `cachedCounter`; nil if its 8 are taken.
    package static func counter(_ address: UnsafeMutableRawPointer, _ generation: Int32, tag: UInt64) -> UnsafeMutablePointer<Atomic<Int64>>? {
        let record = current(), key = UInt(bitPattern: address)
        for i in 0..<counterCount {
            let entry = record + 128 + i * 32
            let owner = entry.load(as: UInt.self)
            if owner == 0 { claimCounter(entry, key, generation) }
            if owner == 0 || (owner == key && entry.load(fromByteOffset: 8, as: Int32.self) == generation) {
                let count = entry + 16
                sync_thread_counter_cache = sync_counter_cache(key: key, tag: tag, count: count.assumingMemoryBound(to: Int64.self))
                return atomic(count, as: Int64.self)
            }
        }
        return nil
    }

    static func claimCounter(_ entry: UnsafeMutableRawPointer, _ key: UInt, _ generation: Int32) {
        entry.storeBytes(of: generation, toByteOffset: 8, as: Int32.self)
        atomic(entry, as: UInt.self).pointee.store(key, ordering: .releasing)  // readers see the generation with it
    }

    /// The sum of every thread's counter for (`address`, `generation`).
    package static func sumCounters(_ address: UnsafeMutableRawPointer, _ generation: Int32) -> Int64 {
        let key = UInt(bitPattern: address)
        var sum: Int64 = 0
        forEach { record in
            for i in 0..<counterCount {
                let entry = record + 128 + i * 32
                let owner = atomic(entry, as: UInt.self).pointee.load(ordering: .acquiring)
                if owner == 0 { break }
                if owner == key && entry.load(fromByteOffset: 8, as: Int32.self) == generation {
                    sum &+= atomic(entry + 16, as: Int64.self).pointee.load(ordering: .relaxed)
                }
            }
            return true
        }
        return sum
    }
}
