import Synchronization

/// Views caller-owned memory as an `Atomic`. `Atomic<T>` has exactly `T`'s size and alignment
/// (a test asserts it), so this is how the C ABI's plain `int32_t *` becomes an atomic.
@inlinable @inline(__always)
func atomic<T: AtomicRepresentable>(_ pointer: UnsafeMutablePointer<T>) -> UnsafeMutablePointer<Atomic<T>> {
    UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: Atomic<T>.self)
}

@inlinable @inline(__always)
func atomic<T: AtomicRepresentable>(_ raw: UnsafeMutableRawPointer, as _: T.Type) -> UnsafeMutablePointer<Atomic<T>> {
    raw.assumingMemoryBound(to: Atomic<T>.self)
}
