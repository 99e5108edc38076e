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
//   96 the owner's counter cache (its TLS address, 0 when none) | 104 its sequence (Atomic<UInt>,
//   odd while the owner changes it) | 112 readers of it (Atomic<Int>)
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
            detach(raw)
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
        cache(record).pointee.store(UInt(bitPattern: sync_thread_counter_cache_address()!), ordering: .sequentiallyConsistent)
        pthread_setspecific(key, record)
        return record
    }

    /// After fork() the child has only the forking thread: reader counts and folds that other
    /// threads were in the middle of stay frozen in its copy of the records. Forget them, so that
    /// neither a thread of the child's that exits nor a reader of the sums waits forever for a
    /// thread the child does not have (a fold cut in half there may leave those refusals counted
    /// twice or not at all in the child).
    static let forkHandler: Void = {
        pthread_atfork(nil, nil) {
            forEach { record in
                readers(record).pointee.store(0, ordering: .relaxed)
                let sequence = sequence(record), value = sequence.pointee.load(ordering: .relaxed)
                if value & 1 != 0 { sequence.pointee.store(value &+ 1, ordering: .relaxed) }
                return true
            }
        }
    }()

    /// Thread exit: folds the thread's cached count into its record, waits out readers of its TLS,
    /// and frees the record (forgotten first: later destructors may take a new one).
    static func detach(_ record: UnsafeMutableRawPointer) {
        refill(record, key: 0, tag: 0, slot: nil, count: 0)
        cache(record).pointee.store(0, ordering: .sequentiallyConsistent)
        while readers(record).pointee.load(ordering: .sequentiallyConsistent) != 0 { sched_yield() }
        sync_thread_record_cache = nil
        atomic(record + 80, as: Int.self).pointee.store(0, ordering: .releasing)
    }

    /// A free record from the list, or a new one pushed onto it.
    static func acquire() -> UnsafeMutableRawPointer {
        _ = forkHandler
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
    //
    // A thread counts refusals in its TLS entry (sync_thread_counter_cache) while they are for the
    // throttler it cached. When the entry changes (another throttler, a re-initialised one) or the
    // thread exits, the entry's count is folded into the record's counter for that throttler. A
    // reader of the sum adds each record's counters and its owner's live entry: the owner makes
    // the record's sequence odd around each fold, so a reader sees every refusal exactly once, and
    // a count of readers keeps an exiting thread's TLS from going away while it is read.

    @inlinable @inline(__always)
    static func cache(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(record + 96, as: UInt.self) }
    @inlinable @inline(__always)
    static func sequence(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(record + 104, as: UInt.self) }
    @inlinable @inline(__always)
    static func readers(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int>> { atomic(record + 112, as: Int.self) }

    /// Counts one refusal in the calling thread's entry if it is for `address` with `tag` (the
    /// incarnation at `address`, which the caller chooses): the hot path, %fs-relative accesses and
    /// one branch for both compares.
    @inlinable @inline(__always)
    package static func countCached(_ address: UnsafeMutableRawPointer, tag: UInt64) -> Bool {
        // (key, tag) as one 128-bit value: one compare and one branch (two branches cost a cycle).
        let cached = withUnsafePointer(to: &sync_thread_counter_cache) { UnsafeRawPointer($0).load(as: UInt128.self) }
        guard cached == UInt128(tag) << 64 | UInt128(UInt(bitPattern: address)) else { return false }
        sync_thread_counter_cache.count &+= 1  // one writer; readers load it whole
        return true
    }

    /// Counts one refusal for (`address`, `generation`) in the calling thread's record, and makes it
    /// the thread's entry (with `tag`, for `countCached`); false if its 8 counters are taken.
    package static func count(_ address: UnsafeMutableRawPointer, _ generation: Int32, tag: UInt64) -> Bool {
        let record = current(), key = UInt(bitPattern: address)
        for i in 0..<counterCount {
            let entry = record + 128 + i * 32
            let owner = entry.load(as: UInt.self)
            if owner == 0 { claimCounter(entry, key, generation) }
            if owner == 0 || (owner == key && entry.load(fromByteOffset: 8, as: Int32.self) == generation) {
                refill(record, key: key, tag: tag, slot: entry + 16, count: 1)
                return true
            }
        }
        return false
    }

    static func claimCounter(_ entry: UnsafeMutableRawPointer, _ key: UInt, _ generation: Int32) {
        entry.storeBytes(of: generation, toByteOffset: 8, as: Int32.self)
        atomic(entry, as: UInt.self).pointee.store(key, ordering: .releasing)  // readers see the generation with it
    }

    /// Folds the calling thread's entry into its record counter and sets it anew (key 0: empty).
    static func refill(_ record: UnsafeMutableRawPointer, key: UInt, tag: UInt64, slot: UnsafeMutableRawPointer?, count: Int64) {
        let entry = UnsafeMutableRawPointer(sync_thread_counter_cache_address()!)
        let sequence = sequence(record), before = sequence.pointee.load(ordering: .relaxed)
        sequence.pointee.store(before &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)  // a reader that sees any write below sees the odd sequence
        if let old = sync_thread_counter_cache.slot {
            let counter = atomic(UnsafeMutableRawPointer(old), as: Int64.self)
            counter.pointee.store(counter.pointee.load(ordering: .relaxed) &+ sync_thread_counter_cache.count, ordering: .relaxed)
        }
        atomic(entry, as: UInt.self).pointee.store(key, ordering: .relaxed)
        atomic(entry + 8, as: UInt64.self).pointee.store(tag, ordering: .relaxed)
        atomic(entry + 16, as: Int64.self).pointee.store(count, ordering: .relaxed)
        sync_thread_counter_cache.slot = slot?.assumingMemoryBound(to: Int64.self)
        sequence.pointee.store(before &+ 2, ordering: .releasing)
    }

    /// The sum of every thread's count for (`address`, `generation`), whose incarnation `tag` is.
    package static func sumCounters(_ address: UnsafeMutableRawPointer, _ generation: Int32, tag: UInt64) -> Int64 {
        let key = UInt(bitPattern: address)
        var sum: Int64 = 0
        forEach { record in
            sum &+= sumCounters(record, key, generation, tag: tag)
            return true
        }
        return sum
    }

    /// One record's counters for (`key`, `generation`) and its owner's entry if it is for them,
    /// read between two equal even sequence values.
    static func sumCounters(_ record: UnsafeMutableRawPointer, _ key: UInt, _ generation: Int32, tag: UInt64) -> Int64 {
        let readers = readers(record), sequence = sequence(record)
        readers.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)  // before reading the TLS address: see detach
        defer { readers.pointee.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        while true {
            let before = sequence.pointee.load(ordering: .acquiring)
            if before & 1 != 0 { sched_yield(); continue }  // the owner is folding: a few loads
            var sum: Int64 = 0
            for i in 0..<counterCount {
                let entry = record + 128 + i * 32
                let owner = atomic(entry, as: UInt.self).pointee.load(ordering: .acquiring)
                if owner == 0 { break }
                if owner == key && entry.load(fromByteOffset: 8, as: Int32.self) == generation {
                    sum &+= atomic(entry + 16, as: Int64.self).pointee.load(ordering: .relaxed)
                }
            }
            if let live = UnsafeMutableRawPointer(bitPattern: cache(record).pointee.load(ordering: .sequentiallyConsistent)),
               atomic(live, as: UInt.self).pointee.load(ordering: .relaxed) == key,
               atomic(live + 8, as: UInt64.self).pointee.load(ordering: .relaxed) == tag {
                sum &+= atomic(live + 16, as: Int64.self).pointee.load(ordering: .relaxed)
            }
            atomicMemoryFence(ordering: .acquiring)
            if sequence.pointee.load(ordering: .relaxed) == before { return sum }
        }
    }
}
