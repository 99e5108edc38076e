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

extension Words {
    /// The waiting room of the primitives whose word 0 is 0 while a waiter must sleep and whose
    /// word 1 counts waiters (with `processSharedFlag`): counts the caller in, then sleeps on word
    /// 0 until `ready()` (which may also take what it waits for) returns true. Returns 0,
    /// ETIMEDOUT once the monotonic `deadline` passes, or EINTR (`interruptible` only).
    /// Counting in before the last `ready()` makes a waker that changes word 0 and then reads
    /// word 1 (both sequentially consistent) see this waiter: no wakeup is lost.
    @inlinable
    func sleepWhileZero(deadline: Int64, interruptible: Bool, until ready: () -> Bool) -> Int32 {
        let shared = self[1].pointee.add(1, ordering: .sequentiallyConsistent).newValue & processSharedFlag != 0
        defer { self[1].pointee.subtract(1, ordering: .relaxed) }
        while !ready() {
            let result = Futex.wait(address(0), expected: 0, deadline: deadline, shared: shared)
            if result == ETIMEDOUT || (result == EINTR && interruptible) { return ready() ? 0 : result }
        }
        return 0
    }
}
