import Glibc
import Synchronization

/// A primitive's state in caller memory, as a run of 32-bit words: `words[i]` is the i-th word as
/// an `Atomic<UInt32>`. The layouts are documented beside each primitive and in its C header.
@usableFromInline
struct Words {
    @usableFromInline let base: UnsafeMutableRawPointer

    @inlinable init(_ base: UnsafeMutableRawPointer) { self.base = base }

    @inlinable subscript(index: Int) -> UnsafeMutablePointer<Atomic<UInt32>> {
        atomic(base + 4 * index, as: UInt32.self)
    }

    /// The raw address of word `index`, for the futex calls.
    @inlinable func address(_ index: Int) -> UnsafeMutableRawPointer { base + 4 * index }
}

/// Bit 31 of a word that otherwise counts waiters: set once at initialisation for primitives
/// placed in memory shared between processes (selects the futex namespace).
@usableFromInline let processSharedFlag: UInt32 = 1 << 31

/// Bit 30 of such a word: no system runs 2^30 threads (Linux caps threads below it), so a count
/// that reaches it is corrupt memory. Waits and wakes check it and return EINVAL.
@usableFromInline package let impossibleWaiterCount: UInt32 = 1 << 30

/// Initializing in shared memory (the attach rule). Memory that processes share may already hold
/// a primitive another process uses: the second process's initialize, meant as an attach, must
/// not reset it. So every initialize of a process-shared primitive first reads the memory and
/// returns EBUSY, changing nothing, while it is in use: held (a lock word names a holder), or
/// waited on (a waiter count or a WAITERS bit is set). Words no primitive of the kind can hold
/// are not "in use": an initialize repairs them. A process-private initialize is not checked:
/// its memory may hold anything before it (a stack variable), and only its own process uses it.
/// A lock of several words that is already this very lock, free (its word is the initial word
/// of its modes), is attached to without a write (`attach`): writing its other words could undo
/// a hold another process takes meanwhile, and a free lock needs none of them reset. So an
/// initialize racing with a lock's use never undoes a hold, once the lock has been initialized
/// once; the first initialize of new memory must still come before any use of it.
/// A lock word's initialize under the attach rule: stores `desired` (`shared`: in one CAS from
/// the value seen, unless `inUse` says that value is a lock in use, which a holder taking the
/// lock meanwhile makes it see). Returns 0, or EBUSY, changing nothing.
@inline(__always)
func initializeWord(_ word: UnsafeMutablePointer<Atomic<UInt32>>, to desired: UInt32, shared: Bool,
                    unlessInUse inUse: (UInt32) -> Bool) -> Int32 {
    guard shared else {
        word.pointee.store(desired, ordering: .releasing)
        return 0
    }
    var value = word.pointee.load(ordering: .relaxed)
    while true {
        if inUse(value) { return EBUSY }
        let (exchanged, now) = word.pointee.compareExchange(expected: value, desired: desired, ordering: .acquiringAndReleasing)
        if exchanged { return 0 }
        value = now
    }
}

/// The initialize of a shared lock that is already this lock, free: nothing is written (see
/// above); lock-order checking forgets the orders it had, as after any initialize. Returns 0.
func attach(_ memory: UnsafeMutableRawPointer) -> Int32 {
    LockOrder.forget(memory)
    return 0
}

extension Words {
    /// Whether word 1 (a waiter count with `processSharedFlag`) counts a waiter (an impossible
    /// count does not: it is corrupt memory, which initialize repairs).
    @inlinable var countsWaiters: Bool {
        let value = self[1].pointee.load(ordering: .acquiring)
        return value & impossibleWaiterCount == 0 && value & (impossibleWaiterCount - 1) != 0
    }

    /// Whether word 1 (a waiter count with `processSharedFlag`) is impossible.
    @inlinable var hasImpossibleCount: Bool { self[1].pointee.load(ordering: .relaxed) & impossibleWaiterCount != 0 }

    /// Counts one waiter out of word 1, never below zero (whatever a corrupt word holds).
    @inlinable
    func uncount() {
        var value = self[1].pointee.load(ordering: .relaxed)
        while value & ~processSharedFlag != 0 {
            let (exchanged, now) = self[1].pointee.weakCompareExchange(
                expected: value, desired: value &- 1, successOrdering: .relaxed, failureOrdering: .relaxed)
            if exchanged { return }
            value = now
        }
    }

    /// Wakes up to `count` of the sleepers on word 0, if word 1 (a waiter count with
    /// `processSharedFlag`) counts any. The caller changed word 0 first (sequentially
    /// consistent), so that a waiter counted in after this read sees the change.
    @inlinable
    func wake(count: Int32) {
        let waiting = self[1].pointee.load(ordering: .sequentiallyConsistent)
        if waiting & ~processSharedFlag != 0 {
            Futex.wake(address(0), count: count, shared: waiting & processSharedFlag != 0)
        }
    }

    /// The waiting room of the primitives whose word 1 counts waiters (with `processSharedFlag`)
    /// and who sleep while word 0 holds `value`: counts the caller in, then sleeps until `ready()`
    /// (which may also take what it waits for) returns true. Returns 0, ETIMEDOUT once the
    /// monotonic `deadline` passes, EINTR (`interruptible` only), or EINVAL if word 1 is
    /// impossible. Counting in before the last `ready()` makes a waker that changes word 0 and
    /// then reads word 1 (both sequentially consistent) see this waiter: no wakeup is lost.
    @inlinable
    func sleep(whileWordIs value: UInt32, deadline: Int64, interruptible: Bool, until ready: () -> Bool) -> Int32 {
        if hasImpossibleCount { return EINVAL }
        let shared = self[1].pointee.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue & processSharedFlag != 0
        defer { uncount() }
        while !ready() {
            // Shared: in slices, so that a wakeup taken by a process that died before it took
            // what it waited for leaves this waiter asleep one slice at most.
            let result = Futex.waitSliced(address(0), expected: value, deadline: deadline, shared: shared)
            if result.endsWait(interruptible: interruptible) { return ready() ? 0 : result.code }
        }
        return 0
    }
}
