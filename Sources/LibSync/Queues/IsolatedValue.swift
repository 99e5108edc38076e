import CSyncShim
import Glibc
import Synchronization

/// Seed 003's property pattern, packaged: a value whose reads run concurrently with each other
/// (the concurrent queue's `sync`) and whose writes run alone (barrier `async`, or `update` to
/// wait), in the order they were issued. Ours entirely: a queue hop per access would cost more
/// than the access, so no libdispatch here.
///
/// How: one state word counts readers and flags a writer. A write that finds the value free
/// runs at once on the writer's thread; one that finds readers or a writer is appended to a
/// FIFO of pending writes and the writer returns. New reads wait for pending writes, so a read
/// issued after `write` returned sees that write (and everything written before it). The
/// pending writes are run, in order, by the thread that frees the value (the last reader out
/// or the previous writer), so nobody sleeps to apply them.
///
/// Closures must not access the same `IsolatedValue` (a read inside a write, or a read inside
/// a read while a write is pending, would wait for itself).
public final class IsolatedValue<Value> {
    @usableFromInline let storage: UnsafeMutablePointer<Value>
    @usableFromInline package let isolation = Isolation()

    public init(_ value: Value) {
        storage = .allocate(capacity: 1)
        storage.initialize(to: value)
    }

    /// Pending writes still run when the last reference goes away (the writer's release runs
    /// them); nothing is pending by the time deinit runs.
    deinit {
        storage.deinitialize(count: 1)
        storage.deallocate()
    }

    /// Runs `body` on the value, concurrently with other reads, after every write issued
    /// before; returns its result or rethrows its error.
    @inlinable @inline(__always)
    public func read<T>(_ body: (borrowing Value) throws -> T) rethrows -> T {
        isolation.lockShared()
        defer { isolation.unlockShared() }
        return try body(storage.pointee)
    }

    /// The current value (a read).
    @inlinable
    public var value: Value { read { copy $0 } }

    /// Enqueues `body` to modify the value alone, after every write issued before; returns at
    /// once (the write may already have run, on this thread, when the value was free).
    @inlinable
    public func write(_ body: @escaping @Sendable (inout Value) -> Void) {
        let storage = Carried(self.storage)
        isolation.writeAsync { body(&storage.value.pointee) }
    }

    /// Replaces the value (an async write).
    @inlinable
    public func set(_ newValue: Value) where Value: Sendable {
        if !writeIfFree({ $0 = newValue }) { write { $0 = newValue } }
    }

    /// Runs `body` alone now if the value is free and no write is pending, and returns true;
    /// else returns false without running it. The allocation-free fast path of an async write.
    @inlinable
    package func writeIfFree(_ body: (inout Value) -> Void) -> Bool {
        guard isolation.tryLockExclusive() else { return false }
        body(&storage.pointee)
        isolation.unlockExclusive()
        return true
    }

    /// Runs `body` on the value alone, after every write issued before, and waits: a
    /// read-modify-write (or a synchronous write). Returns its result or rethrows its error.
    @inlinable
    public func update<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        try isolation.exclusive { try body(&storage.pointee) }
    }
}

extension IsolatedValue: @unchecked Sendable where Value: Sendable {}

/// The lock under `IsolatedValue`: a reader/writer state word whose writes may be deferred to
/// whichever thread frees it (a FIFO of pending writes), so writers never sleep on readers.
@usableFromInline package final class Isolation: @unchecked Sendable {
    // The state word: readers in the low bits, then three flags.
    @usableFromInline static let writer: UInt32 = 1 << 31    // held exclusively
    @usableFromInline static let pending: UInt32 = 1 << 30   // writes wait: new readers must not enter
    @usableFromInline static let sleepers: UInt32 = 1 << 29  // someone sleeps on the word
    @usableFromInline static let readers: UInt32 = sleepers - 1

    @usableFromInline let word: UnsafeMutablePointer<Atomic<UInt32>>
    private let queue = Mutex<[@Sendable () -> Void]>([])

    package init() {
        word = .allocate(capacity: 1)
        word.initialize(to: Atomic(0))
    }
    deinit { word.deinitialize(count: 1); word.deallocate() }

    // MARK: Reading

    @inlinable @inline(__always)
    package func lockShared() {
        // Optimistic: count ourselves in (an xadd never retries), back out if a writer holds
        // the value or writes are pending.
        let old = word.pointee.wrappingAdd(1, ordering: .acquiring).oldValue
        if old & (Self.writer | Self.pending) != 0 { lockSharedSlow() }
    }

    @inlinable @inline(__always)
    package func unlockShared() {
        let now = word.pointee.wrappingSubtract(1, ordering: .releasing).newValue
        if now & Self.readers == 0 && now & (Self.pending | Self.sleepers) != 0 { lastReaderLeft(now) }
    }

    /// Takes a read share if no writer holds the value and no write is pending; never waits
    /// (backing out may apply pending writes on this thread, as any release does).
    package func tryLockShared() -> Bool {
        let old = word.pointee.wrappingAdd(1, ordering: .acquiring).oldValue
        if old & (Self.writer | Self.pending) == 0 { return true }
        unlockShared()
        return false
    }

    @usableFromInline @inline(never)
    func lockSharedSlow() {
        unlockShared()
        var attempt = 0
        while true {
            let state = word.pointee.load(ordering: .relaxed)
            if state & (Self.writer | Self.pending) == 0 {
                let old = word.pointee.wrappingAdd(1, ordering: .acquiring).oldValue
                if old & (Self.writer | Self.pending) == 0 { return }
                unlockShared()
            } else if state & Self.writer == 0 {
                exclusive {}  // pending writes and nobody applying them: apply them ourselves
            } else {
                wait(whileAny: Self.writer, attempt: &attempt)
            }
        }
    }

    @usableFromInline @inline(never)
    func lastReaderLeft(_ state: UInt32) {
        if state & Self.sleepers != 0 { wakeSleepers() }
        if state & Self.pending != 0 { applyPendingIfFree() }
    }

    // MARK: Writing

    /// Runs `work` alone now if the value is free, else leaves it to whoever frees it.
    @usableFromInline package func writeAsync(_ work: @escaping @Sendable () -> Void) {
        if tryLockExclusive() {
            work()  // nothing pending can precede it: tryLockExclusive refuses while pending
            unlockExclusive()
            return
        }
        queue.withLock { queue in
            queue.append(work)
            word.pointee.bitwiseOr(Self.pending, ordering: .relaxed)
        }
        // The holder may have left between our attempt and our flag: then nobody would run it.
        applyPendingIfFree()
    }

    /// Runs `body` alone, after every pending write, and waits for it.
    @inlinable
    package func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        lockExclusive()
        defer { unlockExclusive() }
        return try body()
    }

    /// Takes the value alone if nobody holds it; unless `evenIfPending`, not while writes wait
    /// (they come first).
    @usableFromInline
    package func tryLockExclusive(evenIfPending: Bool = false) -> Bool {
        let busy = Self.writer | Self.readers | (evenIfPending ? 0 : Self.pending)
        var state = word.pointee.load(ordering: .relaxed)
        while state & busy == 0 {
            let (done, now) = word.pointee.weakCompareExchange(
                expected: state, desired: state | Self.writer, ordering: .acquiring)
            if done { return true }
            state = now
        }
        return false
    }

    /// Takes the value alone, then applies the pending writes (which precede the caller's).
    @usableFromInline
    func lockExclusive() {
        var attempt = 0
        var state = word.pointee.load(ordering: .relaxed)
        while true {
            if state & (Self.writer | Self.readers) == 0 {
                let (done, now) = word.pointee.weakCompareExchange(
                    expected: state, desired: state | Self.writer, ordering: .acquiring)
                if done { break }
                state = now
                continue
            }
            // Hold new readers back so that a stream of them cannot starve us.
            if state & Self.pending == 0 { word.pointee.bitwiseOr(Self.pending, ordering: .relaxed) }
            wait(whileAny: Self.writer | Self.readers, attempt: &attempt)
            state = word.pointee.load(ordering: .relaxed)
        }
        runPending()
    }

    /// Releases the value; if writes were queued meanwhile and the value is still free, applies
    /// them before leaving (a writer that lost the race to us counts on it).
    @usableFromInline
    package func unlockExclusive() {
        while true {
            let old = word.pointee.bitwiseAnd(~(Self.writer | Self.sleepers), ordering: .releasing).oldValue
            if old & Self.sleepers != 0 { Futex.wake(UnsafeMutableRawPointer(word), count: Int32.max, shared: false) }
            guard old & Self.pending != 0, tryLockExclusive(evenIfPending: true) else { return }
            runPending()
        }
    }

    /// Applies the pending writes now unless someone holds the value (who will apply them).
    func applyPendingIfFree() {
        if tryLockExclusive(evenIfPending: true) {
            runPending()
            unlockExclusive()
        }
    }

    /// Applies the pending writes in FIFO order; clears `pending` when none is left. Called
    /// with the value held alone.
    func runPending() {
        if word.pointee.load(ordering: .relaxed) & Self.pending == 0 { return }
        var batch: [@Sendable () -> Void] = []
        while true {
            queue.withLock { queue in
                swap(&batch, &queue)
                if batch.isEmpty { word.pointee.bitwiseAnd(~Self.pending, ordering: .relaxed) }
            }
            if batch.isEmpty { return }
            for work in batch { work() }
            batch.removeAll(keepingCapacity: true)
        }
    }

    // MARK: Sleeping

    /// Spins, yields, then sleeps while any of `mask` is set in the word.
    @usableFromInline
    func wait(whileAny mask: UInt32, attempt: inout Int) {
        attempt += 1
        if attempt < 100 { sync_cpu_relax(); return }
        if attempt < 104 { sched_yield(); return }
        var state = word.pointee.load(ordering: .relaxed)
        while state & mask != 0 && state & Self.sleepers == 0 {
            let (done, now) = word.pointee.weakCompareExchange(
                expected: state, desired: state | Self.sleepers, ordering: .relaxed)
            if done { state |= Self.sleepers; break }
            state = now
        }
        if state & mask != 0 {
            _ = Futex.wait(UnsafeMutableRawPointer(word), expected: state, shared: false)
        }
    }

    func wakeSleepers() {
        word.pointee.bitwiseAnd(~Self.sleepers, ordering: .relaxed)
        Futex.wake(UnsafeMutableRawPointer(word), count: Int32.max, shared: false)
    }
}
