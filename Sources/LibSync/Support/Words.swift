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
