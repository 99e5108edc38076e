import CSyncShim
import Glibc
import Synchronization

/// The isolated-property pattern (a concurrent queue guarding a value), packaged: a value whose
/// reads run concurrently with each other
/// (the concurrent queue's `sync`) and whose writes run alone (barrier `async`, or `update` to
/// wait), in the order they were issued. Ours entirely: a queue hop per access would cost more
/// than the access, so no libdispatch here.
///
/// How: readers count themselves in per-thread slots, a state word flags a writer (see
/// `Isolation`). A write that finds the value free runs at once on the writer's thread; one
/// that finds readers or a writer is appended to a FIFO of pending writes and the writer
/// returns. New reads wait for pending writes, so a read
/// issued after `write` returned sees that write (and everything written before it). The
/// pending writes are run, in order, by the thread that frees the value (the last reader out
/// or the previous writer), so no writer waits for readers.
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

/// The lock under `IsolatedValue`: readers count themselves in per-thread slots (each on its
/// own cache line, so reads on different cores do not fight over one line), a state word
/// flags a writer; writes may be deferred to whichever thread frees the value (a FIFO of
/// pending writes), so writers never wait for readers.
///
/// The protocol is Dekker's, on sequentially consistent operations: a reader increments its
/// slot, then loads the state; a writer sets its flag in the state, then loads the slots.
/// At least one of them sees the other. Whoever releases the value while writes are pending,
/// or leaves as a reader and finds them pending with no writer, makes sure they are applied.
@usableFromInline package final class Isolation: @unchecked Sendable {
    @usableFromInline static let writer: UInt32 = 1       // held (or claimed) exclusively
    @usableFromInline static let pending: UInt32 = 2      // writes wait: new readers must not enter
    @usableFromInline static let sleepers: UInt32 = 4     // someone sleeps on the state word
    @usableFromInline static let slotCount = 16
    @usableFromInline static let slotStride = 64          // one cache line per slot

    /// The state word and the holder word, then `slotCount` reader counts, each on its own
    /// cache line.
    @usableFromInline let memory: UnsafeMutableRawPointer
    private let queue = Mutex<[@Sendable () -> Void]>([])
    /// This isolation among all ever made (a `ReadShares` key: never reused, unlike addresses).
    let id = ReadShares.newID()

    package init() {
        memory = .allocate(byteCount: Self.slotStride * (Self.slotCount + 1), alignment: Self.slotStride)
        for index in 0...Self.slotCount {
            (memory + index * Self.slotStride).bindMemory(to: Atomic<UInt32>.self, capacity: 1).initialize(to: Atomic(0))
        }
        (memory + 4).bindMemory(to: Atomic<UInt32>.self, capacity: 1).initialize(to: Atomic(0))
    }
    deinit { memory.deallocate() }

    @usableFromInline var state: UnsafeMutablePointer<Atomic<UInt32>> {
        memory.assumingMemoryBound(to: Atomic<UInt32>.self)
    }

    /// The kernel id of the thread holding the value through `beginWrite` (0: none), so that
    /// `endWrite` from any other thread changes nothing.
    var holder: UnsafeMutablePointer<Atomic<UInt32>> {
        (memory + 4).assumingMemoryBound(to: Atomic<UInt32>.self)
    }

    /// The calling thread's slot (threads hashed by kernel id; sharing a slot is harmless).
    @inlinable var slot: UnsafeMutablePointer<Atomic<UInt32>> {
        let index = Int(sync_thread_id()) & (Self.slotCount - 1)
        return (memory + (index + 1) * Self.slotStride).assumingMemoryBound(to: Atomic<UInt32>.self)
    }

    func readersGone() -> Bool {
        for index in 1...Self.slotCount {
            let slot = (memory + index * Self.slotStride).assumingMemoryBound(to: Atomic<UInt32>.self)
            if slot.pointee.load(ordering: .sequentiallyConsistent) != 0 { return false }
        }
        return true
    }

    // MARK: Reading

    @inlinable @inline(__always)
    package func lockShared() {
        slot.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if state.pointee.load(ordering: .sequentiallyConsistent) & (Self.writer | Self.pending) != 0 {
            lockSharedSlow()
        }
    }

    /// Releases the read share the caller took (`read` pairs them by construction). Were the
    /// slot's count taken meanwhile by a release without a take (`endShared` misused on a
    /// thread sharing the slot), the decrement is undone: a slot never stays wrapped below zero.
    @inlinable @inline(__always)
    package func unlockShared() {
        if _slowPath(slot.pointee.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue == 0) {
            slot.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
            return
        }
        readerLeft()
    }

    /// `tryLockShared` for a caller that releases with `endShared` (C's try_begin/end pair,
    /// where nothing ties the release to the take): the calling thread's `ReadShares` list
    /// records the share and the slot that counts it.
    package func beginShared() -> Bool {
        guard tryLockShared() else { return false }
        ReadShares.add(id, slot: Int(sync_thread_id()) & (Self.slotCount - 1))
        return true
    }

    /// Releases a read share the calling thread took with `beginShared`. Returns false, changing
    /// nothing, when its list has none: a slot is shared by threads, so its count alone cannot
    /// tell whether the caller is one of its readers.
    package func endShared() -> Bool {
        guard let index = ReadShares.remove(id) else { return false }
        // The recorded slot counts the caller's share, so it is at least 1.
        (memory + (index + 1) * Self.slotStride).assumingMemoryBound(to: Atomic<UInt32>.self)
            .pointee.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        readerLeft()
        return true
    }

    /// After a reader left: writes pending and nobody to apply them (a writer applies them when
    /// it releases): the last reader out does. Of readers leaving together, the last to
    /// decrement sees every slot at zero.
    @inlinable @inline(__always)
    func readerLeft() {
        if state.pointee.load(ordering: .sequentiallyConsistent) & (Self.writer | Self.pending) == Self.pending {
            lastReaderLeft()
        }
    }

    @usableFromInline @inline(never)
    func lastReaderLeft() {
        if readersGone() { applyPending() }
    }

    /// Takes a read share if no writer holds the value and no write is pending; never waits
    /// (backing out may apply pending writes on this thread, as any release does).
    package func tryLockShared() -> Bool {
        slot.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if state.pointee.load(ordering: .sequentiallyConsistent) & (Self.writer | Self.pending) == 0 { return true }
        unlockShared()
        return false
    }

    @usableFromInline @inline(never)
    func lockSharedSlow() {
        unlockShared()
        var spin = SpinWait()
        while true {
            let now = state.pointee.load(ordering: .relaxed)
            if now & (Self.writer | Self.pending) == 0 {
                if tryLockShared() { return }
            } else if now & Self.writer == 0 {
                applyPending()  // pending writes and nobody applying them: apply them ourselves
            } else {
                wait(whileAny: Self.writer, spin: &spin)
            }
        }
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
            state.pointee.bitwiseOr(Self.pending, ordering: .sequentiallyConsistent)
        }
        // If no reader is left to see the flag (and no writer holds the value), apply it now.
        if readersGone() { applyPending() }
    }

    /// Runs `body` alone, after every pending write, and waits for it.
    @inlinable
    package func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        lockExclusive()
        defer { unlockExclusive() }
        return try body()
    }

    /// `tryLockExclusive` for a caller that releases with `endWrite` (C's try_begin/end pair,
    /// where nothing ties the release to the take): records the calling thread as the holder.
    package func beginWrite() -> Bool {
        guard tryLockExclusive() else { return false }
        holder.pointee.store(sync_thread_id(), ordering: .relaxed)
        return true
    }

    /// Releases the value taken by `beginWrite` on the calling thread; returns false, changing
    /// nothing, when the calling thread did not take it so.
    package func endWrite() -> Bool {
        guard holder.pointee.load(ordering: .relaxed) == sync_thread_id() else { return false }
        holder.pointee.store(0, ordering: .relaxed)
        unlockExclusive()
        return true
    }

    /// Takes the value alone if nobody holds it and no write is pending (those come first).
    /// Never waits.
    @usableFromInline
    package func tryLockExclusive() -> Bool {
        var now = state.pointee.load(ordering: .relaxed)
        while now & (Self.writer | Self.pending) == 0 {
            let (done, seen) = state.pointee.weakCompareExchange(
                expected: now, desired: now | Self.writer, ordering: .sequentiallyConsistent)
            if done {
                if readersGone() { return true }
                unlockExclusive()  // readers inside: back out (and see to pending writes)
                return false
            }
            now = seen
        }
        return false
    }

    /// Takes the value alone (waiting for the writer, then for the readers inside), then
    /// applies the pending writes, which precede the caller's.
    @usableFromInline
    func lockExclusive() {
        var spin = SpinWait()
        while true {
            let now = state.pointee.load(ordering: .relaxed)
            if now & Self.writer == 0 {
                if state.pointee.weakCompareExchange(
                    expected: now, desired: now | Self.writer, ordering: .sequentiallyConsistent).exchanged { break }
            } else {
                wait(whileAny: Self.writer, spin: &spin)
            }
        }
        waitForReaders()
        runPending()
    }

    /// Releases the value. If writes are pending and no reader is inside to see them when it
    /// leaves, applies them before leaving.
    @usableFromInline
    package func unlockExclusive() {
        while true {
            let old = state.pointee.bitwiseAnd(~(Self.writer | Self.sleepers), ordering: .sequentiallyConsistent).oldValue
            if old & Self.sleepers != 0 { Futex.wake(UnsafeMutableRawPointer(state), count: Int32.max, shared: false) }
            guard old & Self.pending != 0, readersGone(), claimPending() else { return }
            waitForReaders()
            runPending()
        }
    }

    /// Applies the pending writes unless someone holds the value (who will) or none is pending.
    func applyPending() {
        guard claimPending() else { return }
        waitForReaders()  // the readers still inside: their sections are short
        runPending()
        unlockExclusive()
    }

    /// Takes the writer flag if writes are pending and nobody holds it.
    func claimPending() -> Bool {
        var now = state.pointee.load(ordering: .relaxed)
        while now & (Self.writer | Self.pending) == Self.pending {
            let (done, seen) = state.pointee.weakCompareExchange(
                expected: now, desired: now | Self.writer, ordering: .sequentiallyConsistent)
            if done { return true }
            now = seen
        }
        return false
    }

    /// With the writer flag held: spins, then yields (`SpinWait`), until no reader is inside.
    /// Readers leave without waking anyone, so there is nothing to park on.
    func waitForReaders() {
        var spin = SpinWait()
        while !readersGone() { spin.spinOrYield() }
    }

    /// Applies the pending writes in FIFO order; clears `pending` when none is left. Called
    /// with the value held alone.
    func runPending() {
        if state.pointee.load(ordering: .relaxed) & Self.pending == 0 { return }
        var batch: [@Sendable () -> Void] = []
        while true {
            queue.withLock { queue in
                swap(&batch, &queue)
                if batch.isEmpty { state.pointee.bitwiseAnd(~Self.pending, ordering: .relaxed) }
            }
            if batch.isEmpty { return }
            for work in batch { work() }
            batch.removeAll(keepingCapacity: true)
        }
    }

    // MARK: Sleeping

    /// One step of waiting while any of `mask` is set in the state word: a round of `spin`,
    /// or once its rounds are spent, a sleep on the word (after which `spin` starts again).
    @usableFromInline
    func wait(whileAny mask: UInt32, spin: inout SpinWait) {
        if spin.spin() { return }
        spin.reset()
        var now = state.pointee.load(ordering: .relaxed)
        while now & mask != 0 && now & Self.sleepers == 0 {
            let (done, seen) = state.pointee.weakCompareExchange(
                expected: now, desired: now | Self.sleepers, ordering: .relaxed)
            if done { now |= Self.sleepers; break }
            now = seen
        }
        if now & mask != 0 {
            _ = Futex.wait(UnsafeMutableRawPointer(state), expected: now, shared: false)
        }
    }
}

/// The read shares each thread took through `Isolation.beginShared` and has not released: one
/// entry (isolation id, slot index) per share, in a list per thread reached through a pthread key
/// and freed when the thread exits. A fork()ed child's thread keeps the forking thread's list,
/// as it keeps the isolations' memory (the shares stay its to release).
enum ReadShares {
    final class List {
        var entries: [(id: UInt64, slot: Int)] = []
    }

    private static let ids = Atomic<UInt64>(0)

    /// A new isolation's id.
    static func newID() -> UInt64 { ids.wrappingAdd(1, ordering: .relaxed).newValue }

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { raw in
            if let raw { Unmanaged<List>.fromOpaque(raw).release() }
        }
        require(status == 0, "ReadShares: pthread_key_create failed (\(status))")
        return key
    }()

    /// Records a share of isolation `id` counted in slot `slot`.
    static func add(_ id: UInt64, slot: Int) {
        let list: List
        if let raw = pthread_getspecific(key) {
            list = Unmanaged<List>.fromOpaque(raw).takeUnretainedValue()
        } else {
            list = List()
            pthread_setspecific(key, Unmanaged.passRetained(list).toOpaque())
        }
        list.entries.append((id, slot))
    }

    /// Strikes off the calling thread's latest share of isolation `id`; returns the slot that
    /// counts it, or nil if the thread holds none.
    static func remove(_ id: UInt64) -> Int? {
        guard let raw = pthread_getspecific(key) else { return nil }
        let list = Unmanaged<List>.fromOpaque(raw).takeUnretainedValue()
        guard let i = list.entries.lastIndex(where: { $0.id == id }) else { return nil }
        return list.entries.remove(at: i).slot
    }
}
