import CSyncShim
import Glibc
import Synchronization

// Per-thread records, so that the read paths of the atomics family write only their own cache
// line: hazard slots for AtomicReference and dictionary readers, and per-thread rejection
// counts for the throttler (summed on read). Records live on one global list, are never freed,
// and pass to a new thread when theirs exits (a pthread key destructor), so a scan of the list
// sees every slot and every count ever made.
//
// The record's layout is `ThreadRecordLayout`; its fields are reached through the accessors of
// `ThreadRecord`, atomically wherever another thread reads them.

/// A per-thread record: `ThreadRecord.size` bytes, 64-byte aligned, never freed.
@usableFromInline struct ThreadRecordLayout {
    /// Hazard slots: 0, or the address of an object being read (`Atomic<UInt>`; every writer of
    /// shared objects scans them). How many are in use is per thread state, in TLS
    /// (sync_thread_hazard_depth), so that a reader writes only its slot.
    var slots: (UInt, UInt, UInt, UInt, UInt, UInt, UInt, UInt)
    var reserved: UInt
    /// The next record of the global list (set before the record is published, then fixed).
    var next: UInt
    /// 1 while a thread owns the record, 0 while it waits for the next thread (`Atomic<Int>`).
    var inUse: Int
    /// The record holding slots 8... of a deeply nested reader, 0 until needed (owner only).
    var overflow: UInt
    /// The owner's counter cache: its TLS address, 0 when none (`Atomic<UInt>`).
    var cache: UInt
    /// Odd while the owner folds its cache into a counter (`Atomic<UInt>`).
    var sequence: UInt
    /// Readers of the owner's cache inside it, and `ThreadRecord.closed` once the owner exits
    /// (`Atomic<Int>`).
    var gate: Int
    /// The count being folded into (its address), 0 when no fold is under way (`Atomic<UInt>`).
    var folding: UInt
    /// The throttler rejection counters of the owners of this record.
    var counters: (Counter, Counter, Counter, Counter, Counter, Counter, Counter, Counter)

    /// One counter: whose it is (a throttler's address and generation) and its count.
    struct Counter {
        /// The throttler's address, 0 while unclaimed (`Atomic<UInt>`, released after
        /// `generation`).
        var key: UInt
        var generation: Int32
        /// The count (`Atomic<Int64>`): written by the record's owner, summed by any thread.
        var count: Int64
        /// The value a fold under way will leave in `count`, written before it starts, so that
        /// a fork() that cuts the fold in half can finish it in the child.
        var folded: Int64
    }
}

/// The TLS entry of a thread's current throttler (sync_thread_counter_cache's bytes): the hot
/// path of a refusal reads `key` and `tag` as one 128-bit value and bumps `count`.
@usableFromInline struct CounterCacheLayout {
    /// The throttler's address, 0 when none.
    @usableFromInline var key: UInt
    /// The caller's tag for the object's incarnation (`ThreadRecord.exitedTag` once the thread
    /// has exited).
    @usableFromInline var tag: UInt64
    /// Refusals counted here since the entry was filled (`Atomic<Int64>`, one writer).
    @usableFromInline var count: Int64
    /// The record counter (`Counter.count`) this count is folded into.
    @usableFromInline var slot: UnsafeMutablePointer<Int64>?
}

@usableFromInline package enum ThreadRecord {
    /// The calling thread's counter cache (the shim's TLS bytes, typed).
    @inlinable @inline(__always)
    static var localCache: UnsafeMutablePointer<CounterCacheLayout> {
        UnsafeMutableRawPointer(sync_thread_counter_cache_address()).assumingMemoryBound(to: CounterCacheLayout.self)
    }

    @usableFromInline static var slotCount: Int { 8 }
    @usableFromInline static var counterCount: Int { 8 }
    static let size = MemoryLayout<ThreadRecordLayout>.size

    typealias Layout = ThreadRecordLayout
    typealias Counter = ThreadRecordLayout.Counter
    @usableFromInline static let nextOffset = MemoryLayout<Layout>.offset(of: \.next)!
    @usableFromInline static let inUseOffset = MemoryLayout<Layout>.offset(of: \.inUse)!
    @usableFromInline static let overflowOffset = MemoryLayout<Layout>.offset(of: \.overflow)!
    @usableFromInline static let cacheOffset = MemoryLayout<Layout>.offset(of: \.cache)!
    @usableFromInline static let sequenceOffset = MemoryLayout<Layout>.offset(of: \.sequence)!
    @usableFromInline static let gateOffset = MemoryLayout<Layout>.offset(of: \.gate)!
    @usableFromInline static let foldingOffset = MemoryLayout<Layout>.offset(of: \.folding)!
    @usableFromInline static let countersOffset = MemoryLayout<Layout>.offset(of: \.counters)!
    @usableFromInline static let counterKeyOffset = MemoryLayout<Counter>.offset(of: \.key)!
    @usableFromInline static let counterGenerationOffset = MemoryLayout<Counter>.offset(of: \.generation)!
    @usableFromInline static let counterCountOffset = MemoryLayout<Counter>.offset(of: \.count)!
    @usableFromInline static let counterFoldedOffset = MemoryLayout<Counter>.offset(of: \.folded)!
    /// Where a counter's `folded` lies from its `count` (the address a cache's `slot` holds).
    @usableFromInline static let foldedOffset = counterFoldedOffset - counterCountOffset
    @usableFromInline static let cacheKeyOffset = MemoryLayout<CounterCacheLayout>.offset(of: \.key)!
    @usableFromInline static let cacheTagOffset = MemoryLayout<CounterCacheLayout>.offset(of: \.tag)!

    static func inUse(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int>> {
        atomic(record + inUseOffset, as: Int.self)
    }
    /// Counter `i` of `record`.
    static func counter(_ record: UnsafeMutableRawPointer, _ i: Int) -> UnsafeMutableRawPointer {
        record + countersOffset + i * MemoryLayout<Counter>.stride
    }

    @usableFromInline static let head = Atomic<UInt>(0)

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        // Thread exit: forget the record first (later destructors may take a new one), then free it.
        let status = pthread_key_create(&key) { raw in
            guard let raw else { return }
            detach(raw)
        }
        require(status == 0, "ThreadRecord: pthread_key_create failed (\(status))")
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
        // A thread whose record was detached (a later key destructor of its exit) must not
        // publish its TLS again: no destructor round would be left to withdraw it. Its
        // refusals go to the throttler's shared word instead (see count).
        if localCache.pointee.tag != exitedTag {
            cache(record).pointee.store(UInt(bitPattern: localCache), ordering: .relaxed)
            gate(record).pointee.store(0, ordering: .sequentiallyConsistent)  // open
        }
        pthread_setspecific(key, record)
        return record
    }

    /// After fork() the child has only the forking thread; the other threads' records still hold
    /// their reader counts, folds cut in half and the addresses of their TLS, whose memory the
    /// child's new threads will reuse. Finish each such record's fold (the final value of a fold
    /// in progress is written down before it starts, so finishing it is idempotent), fold its
    /// live entry, and withdraw the entry, so that the child neither reads those TLS blocks nor
    /// waits for threads it does not have. Those records stay taken (their hazard slots too).
    static let forkHandler: Void = {
        pthread_atfork(nil, nil) {
            let mine = UInt(bitPattern: sync_thread_record_cache)
            forEach { record in
                guard UInt(bitPattern: record) != mine else { return true }
                if let pending = UnsafeMutableRawPointer(bitPattern: folding(record).pointee.load(ordering: .relaxed)) {
                    atomic(pending, as: Int64.self).pointee.store(pending.load(fromByteOffset: foldedOffset, as: Int64.self), ordering: .relaxed)
                } else if let live = UnsafeMutableRawPointer(bitPattern: cache(record).pointee.load(ordering: .relaxed)),
                          let slot = live.load(fromByteOffset: slotOffset, as: UnsafeMutableRawPointer?.self) {
                    let counter = atomic(slot, as: Int64.self)
                    counter.pointee.store(counter.pointee.load(ordering: .relaxed) &+ live.load(fromByteOffset: countOffset, as: Int64.self), ordering: .relaxed)
                }
                folding(record).pointee.store(0, ordering: .relaxed)
                cache(record).pointee.store(0, ordering: .relaxed)
                gate(record).pointee.store(closed, ordering: .relaxed)
                let sequence = sequence(record), value = sequence.pointee.load(ordering: .relaxed)
                sequence.pointee.store((value | 1) &+ 1, ordering: .relaxed)
                return true
            }
        }
    }()

    /// Thread exit: folds the thread's cached count into its record, marks the entry exited,
    /// closes the gate and waits for the readers inside it (a few loads each), then frees the
    /// record (forgotten first: later destructors may take a new one).
    static func detach(_ record: UnsafeMutableRawPointer) {
        refill(record, key: 0, tag: exitedTag, slot: nil, count: 0)
        let gate = gate(record)
        gate.pointee.bitwiseOr(closed, ordering: .sequentiallyConsistent)
        var spin = SpinWait()
        while gate.pointee.load(ordering: .sequentiallyConsistent) != closed { spin.spinOrYield() }
        cache(record).pointee.store(0, ordering: .relaxed)
        sync_thread_record_cache = nil
        inUse(record).pointee.store(0, ordering: .releasing)
    }

    /// A free record from the list, or a new one pushed onto it.
    static func acquire() -> UnsafeMutableRawPointer {
        _ = forkHandler
        var node = head.load(ordering: .acquiring)
        while node != 0 {
            let record = UnsafeMutableRawPointer(bitPattern: node)!
            if inUse(record).pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
                return record
            }
            node = next(record)
        }
        let record = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        record.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        (record + inUseOffset).storeBytes(of: 1, as: Int.self)
        var first = head.load(ordering: .relaxed)
        while true {
            (record + nextOffset).storeBytes(of: first, as: UInt.self)
            let (pushed, now) = head.compareExchange(expected: first, desired: UInt(bitPattern: record), ordering: .releasing)
            if pushed { return record }
            first = now
        }
    }

    @inlinable @inline(__always)
    static func next(_ record: UnsafeMutableRawPointer) -> UInt { record.load(fromByteOffset: nextOffset, as: UInt.self) }

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
        atomic(record + index &* MemoryLayout<UInt>.stride, as: UInt.self)  // `slots` begins the record
    }
    /// The calling thread's next free hazard slot (nested readers take the following ones).
    @inlinable @inline(__always)
    package static func takeSlot() -> UnsafeMutablePointer<Atomic<UInt>> {
        let record = current(), index = sync_thread_hazard_depth
        sync_thread_hazard_depth = index &+ 1
        return index < slotCount ? slot(record, index) : overflowSlot(record, index)
    }

    /// Gives back the slot `takeSlot` returned last (it must hold 0 again).
    @inlinable @inline(__always)
    package static func returnSlot() {
        sync_thread_hazard_depth &-= 1
    }

    /// Slot `index` >= 8: in the chain of overflow records (taken once, kept by the thread's record).
    @usableFromInline static func overflowSlot(_ record: UnsafeMutableRawPointer, _ index: Int) -> UnsafeMutablePointer<Atomic<UInt>> {
        var record = record, index = index
        while index >= slotCount {
            var overflow = record.load(fromByteOffset: overflowOffset, as: UInt.self)
            if overflow == 0 {
                overflow = UInt(bitPattern: acquire())
                record.storeBytes(of: overflow, toByteOffset: overflowOffset, as: UInt.self)
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
    // a gate that the exiting owner closes keeps its TLS from going away while it is read.

    @inlinable @inline(__always)
    static func cache(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(record + cacheOffset, as: UInt.self) }
    @inlinable @inline(__always)
    static func sequence(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(record + sequenceOffset, as: UInt.self) }
    @inlinable @inline(__always)
    static func gate(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int>> { atomic(record + gateOffset, as: Int.self) }
    @inlinable @inline(__always)
    static func folding(_ record: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(record + foldingOffset, as: UInt.self) }
    /// The gate's bit that says the owner has exited (or is not in this process): stay out.
    static let closed = 1 << 62
    /// The tag of an exited thread's entry (a throttler's tag never has limit -1).
    @usableFromInline static let exitedTag = UInt64.max
    @usableFromInline static let slotOffset = MemoryLayout<CounterCacheLayout>.offset(of: \.slot)!
    @usableFromInline static let countOffset = MemoryLayout<CounterCacheLayout>.offset(of: \.count)!

    /// Counts one refusal in the calling thread's entry if it is for `address` with `tag` (the
    /// incarnation at `address`, which the caller chooses): the hot path, %fs-relative accesses and
    /// one branch for both compares.
    @inlinable @inline(__always)
    package static func countCached(_ address: UnsafeMutableRawPointer, tag: UInt64) -> Bool {
        // (key, tag) as one 128-bit value: one compare and one branch (two branches cost a cycle).
        // The TLS words are reached from Swift (%fs-relative, inline), not through `localCache`
        // (a call): a read of the first two, then the third (`count`) alone, as the other
        // threads read `count` concurrently.
        let cached = withUnsafePointer(to: &sync_thread_counter_cache.0) { UnsafeRawPointer($0).load(as: UInt128.self) }
        guard cached == UInt128(tag) << 64 | UInt128(UInt(bitPattern: address)) else { return false }
        // One writer (this thread); an atomic store, so that readers' loads see whole values and
        // no caller's loop may keep the count in a register.
        let count = withUnsafeMutablePointer(to: &sync_thread_counter_cache.2) { $0 }
        atomic(count).pointee.store(atomic(count).pointee.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        return true
    }

    /// Counts one refusal for (`address`, `generation`) in the calling thread's record, and makes it
    /// the thread's entry (with `tag`, for `countCached`); false if its 8 counters are taken.
    package static func count(_ address: UnsafeMutableRawPointer, _ generation: Int32, tag: UInt64) -> Bool {
        if localCache.pointee.tag == exitedTag { return false }
        let record = current(), key = UInt(bitPattern: address)
        for i in 0..<counterCount {
            let entry = counter(record, i)
            let owner = entry.load(fromByteOffset: counterKeyOffset, as: UInt.self)
            if owner == 0 { claimCounter(entry, key, generation) }
            if owner == 0 || (owner == key && entry.load(fromByteOffset: counterGenerationOffset, as: Int32.self) == generation) {
                refill(record, key: key, tag: tag, slot: entry + counterCountOffset, count: 1)
                return true
            }
        }
        return false
    }

    static func claimCounter(_ entry: UnsafeMutableRawPointer, _ key: UInt, _ generation: Int32) {
        entry.storeBytes(of: generation, toByteOffset: counterGenerationOffset, as: Int32.self)
        atomic(entry + counterKeyOffset, as: UInt.self).pointee.store(key, ordering: .releasing)  // readers see the generation with it
    }

    /// Folds the calling thread's entry into its record counter and sets it anew (key 0: empty).
    static func refill(_ record: UnsafeMutableRawPointer, key: UInt, tag: UInt64, slot: UnsafeMutableRawPointer?, count: Int64) {
        let local = localCache, entry = UnsafeMutableRawPointer(local)
        let sequence = sequence(record), before = sequence.pointee.load(ordering: .relaxed)
        sequence.pointee.store(before &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)  // a reader that sees any write below sees the odd sequence
        if let old = local.pointee.slot {
            // Written down first (the counter's spare word, then the record), so that a fork()
            // cutting this fold in half can finish it in the child.
            let slot = UnsafeMutableRawPointer(old), counter = atomic(slot, as: Int64.self)
            let folded = counter.pointee.load(ordering: .relaxed) &+ local.pointee.count
            atomic(slot + foldedOffset, as: Int64.self).pointee.store(folded, ordering: .relaxed)
            folding(record).pointee.store(UInt(bitPattern: slot), ordering: .relaxed)
            counter.pointee.store(folded, ordering: .relaxed)
        }
        atomic(entry + cacheKeyOffset, as: UInt.self).pointee.store(key, ordering: .relaxed)
        atomic(entry + cacheTagOffset, as: UInt64.self).pointee.store(tag, ordering: .relaxed)
        atomic(entry + countOffset, as: Int64.self).pointee.store(count, ordering: .relaxed)
        local.pointee.slot = slot?.assumingMemoryBound(to: Int64.self)
        folding(record).pointee.store(0, ordering: .relaxed)
        sequence.pointee.store(before &+ 2, ordering: .releasing)
    }

    /// The count in the live entry of `record`'s owner if it is for (`key`, `tag`), read inside
    /// the record's gate (0 if the owner has exited: its entry is folded then).
    static func liveCount(_ record: UnsafeMutableRawPointer, _ key: UInt, tag: UInt64) -> Int64 {
        let gate = gate(record)
        var value = gate.pointee.load(ordering: .relaxed)
        while true {
            guard value & closed == 0 else { return 0 }
            let (entered, now) = gate.pointee.compareExchange(expected: value, desired: value + 1, ordering: .sequentiallyConsistent)
            if entered { break }
            value = now
        }
        defer { gate.pointee.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        guard let live = UnsafeMutableRawPointer(bitPattern: cache(record).pointee.load(ordering: .relaxed)),
              atomic(live + cacheKeyOffset, as: UInt.self).pointee.load(ordering: .relaxed) == key,
              atomic(live + cacheTagOffset, as: UInt64.self).pointee.load(ordering: .relaxed) == tag else { return 0 }
        return atomic(live + countOffset, as: Int64.self).pointee.load(ordering: .relaxed)
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
        let sequence = sequence(record)
        var spin = SpinWait()
        while true {
            let before = sequence.pointee.load(ordering: .acquiring)
            if before & 1 != 0 { spin.spinOrYield(); continue }  // the owner is folding: a few loads
            var sum: Int64 = 0
            for i in 0..<counterCount {
                let entry = counter(record, i)
                let owner = atomic(entry + counterKeyOffset, as: UInt.self).pointee.load(ordering: .acquiring)
                if owner == 0 { break }
                if owner == key && entry.load(fromByteOffset: counterGenerationOffset, as: Int32.self) == generation {
                    sum &+= atomic(entry + counterCountOffset, as: Int64.self).pointee.load(ordering: .relaxed)
                }
            }
            sum &+= liveCount(record, key, tag: tag)
            atomicMemoryFence(ordering: .acquiring)
            if sequence.pointee.load(ordering: .relaxed) == before { return sum }
        }
    }
}
