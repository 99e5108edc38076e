import Synchronization

// Apple's libkern/OSAtomic.h operations, with Apple's names and semantics, for Swift code.
// The C ABI (libsync.so) exports these same functions under the same names.
//
// Semantics, as Apple's: arithmetic and the plain logic operations return the NEW value, the
// `Orig` variants the OLD one; compare-and-swap takes (old, new, address) and returns whether it
// swapped; arithmetic wraps at the limits. The plain operations are relaxed (as Apple's inline
// versions are); the `Barrier` variants are sequentially consistent.
//
// Safety: each address is a `some OSAtomicAddress`, never an implicit `&property`
// conversion (Swift may hand such a call a temporary copy, and the atomic then acts on nothing
// shared). Pass an `OSAtomicStorage` (stable heap memory owned by Swift) or an
// `UnsafeMutablePointer` to memory you manage yourself.

/// Memory with a stable address on which OSAtomic operations may act.
public protocol OSAtomicAddress<Pointee> {
    associatedtype Pointee
    /// The address; stable for as long as the conforming value is alive.
    var address: UnsafeMutablePointer<Pointee> { get }
}

extension UnsafeMutablePointer: OSAtomicAddress {
    @inlinable public var address: UnsafeMutablePointer<Pointee> { self }
}

/// One value in heap memory with a stable address, for the OSAtomic functions:
/// `let counter = OSAtomicStorage<Int32>(0); OSAtomicIncrement32(counter)`.
public final class OSAtomicStorage<Value: AtomicRepresentable>: OSAtomicAddress, @unchecked Sendable {
    public let address: UnsafeMutablePointer<Value>

    public init(_ initialValue: Value) {
        address = .allocate(capacity: 1)
        address.initialize(to: initialValue)
    }

    deinit {
        address.deinitialize(count: 1)
        address.deallocate()
    }

    /// The value, read and written plainly: for set-up, and for reading once the threads that
    /// change it are done (joined). While others change it, use the atomic operations.
    public var value: Value {
        get { address.pointee }
        set { address.pointee = newValue }
    }
}

// MARK: Arithmetic: return the new value, wrapping.

@inlinable public func OSAtomicAdd32(_ amount: Int32, _ value: some OSAtomicAddress<Int32>) -> Int32 {
    atomic(value.address).pointee.wrappingAdd(amount, ordering: .relaxed).newValue
}
@inlinable public func OSAtomicAdd32Barrier(_ amount: Int32, _ value: some OSAtomicAddress<Int32>) -> Int32 {
    atomic(value.address).pointee.wrappingAdd(amount, ordering: .sequentiallyConsistent).newValue
}
@inlinable public func OSAtomicIncrement32(_ value: some OSAtomicAddress<Int32>) -> Int32 { OSAtomicAdd32(1, value) }
@inlinable public func OSAtomicIncrement32Barrier(_ value: some OSAtomicAddress<Int32>) -> Int32 { OSAtomicAdd32Barrier(1, value) }
@inlinable public func OSAtomicDecrement32(_ value: some OSAtomicAddress<Int32>) -> Int32 { OSAtomicAdd32(-1, value) }
@inlinable public func OSAtomicDecrement32Barrier(_ value: some OSAtomicAddress<Int32>) -> Int32 { OSAtomicAdd32Barrier(-1, value) }

@inlinable public func OSAtomicAdd64(_ amount: Int64, _ value: some OSAtomicAddress<Int64>) -> Int64 {
    atomic(value.address).pointee.wrappingAdd(amount, ordering: .relaxed).newValue
}
@inlinable public func OSAtomicAdd64Barrier(_ amount: Int64, _ value: some OSAtomicAddress<Int64>) -> Int64 {
    atomic(value.address).pointee.wrappingAdd(amount, ordering: .sequentiallyConsistent).newValue
}
@inlinable public func OSAtomicIncrement64(_ value: some OSAtomicAddress<Int64>) -> Int64 { OSAtomicAdd64(1, value) }
@inlinable public func OSAtomicIncrement64Barrier(_ value: some OSAtomicAddress<Int64>) -> Int64 { OSAtomicAdd64Barrier(1, value) }
@inlinable public func OSAtomicDecrement64(_ value: some OSAtomicAddress<Int64>) -> Int64 { OSAtomicAdd64(-1, value) }
@inlinable public func OSAtomicDecrement64Barrier(_ value: some OSAtomicAddress<Int64>) -> Int64 { OSAtomicAdd64Barrier(-1, value) }

// MARK: Logic on 32 bits: plain forms return the new value, `Orig` forms the old one.

@inlinable public func OSAtomicOr32(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseOr(mask, ordering: .relaxed).newValue)
}
@inlinable public func OSAtomicOr32Barrier(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseOr(mask, ordering: .sequentiallyConsistent).newValue)
}
@inlinable public func OSAtomicOr32Orig(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseOr(mask, ordering: .relaxed).oldValue)
}
@inlinable public func OSAtomicOr32OrigBarrier(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseOr(mask, ordering: .sequentiallyConsistent).oldValue)
}
@inlinable public func OSAtomicAnd32(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseAnd(mask, ordering: .relaxed).newValue)
}
@inlinable public func OSAtomicAnd32Barrier(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseAnd(mask, ordering: .sequentiallyConsistent).newValue)
}
@inlinable public func OSAtomicAnd32Orig(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseAnd(mask, ordering: .relaxed).oldValue)
}
@inlinable public func OSAtomicAnd32OrigBarrier(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseAnd(mask, ordering: .sequentiallyConsistent).oldValue)
}
@inlinable public func OSAtomicXor32(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseXor(mask, ordering: .relaxed).newValue)
}
@inlinable public func OSAtomicXor32Barrier(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseXor(mask, ordering: .sequentiallyConsistent).newValue)
}
@inlinable public func OSAtomicXor32Orig(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseXor(mask, ordering: .relaxed).oldValue)
}
@inlinable public func OSAtomicXor32OrigBarrier(_ mask: UInt32, _ value: some OSAtomicAddress<UInt32>) -> Int32 {
    Int32(bitPattern: atomic(value.address).pointee.bitwiseXor(mask, ordering: .sequentiallyConsistent).oldValue)
}

// MARK: Compare and swap: (old, new, address) -> whether it swapped.

@inlinable public func OSAtomicCompareAndSwap32(_ old: Int32, _ new: Int32, _ value: some OSAtomicAddress<Int32>) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .relaxed).exchanged
}
@inlinable public func OSAtomicCompareAndSwap32Barrier(_ old: Int32, _ new: Int32, _ value: some OSAtomicAddress<Int32>) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .sequentiallyConsistent).exchanged
}
@inlinable public func OSAtomicCompareAndSwap64(_ old: Int64, _ new: Int64, _ value: some OSAtomicAddress<Int64>) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .relaxed).exchanged
}
@inlinable public func OSAtomicCompareAndSwap64Barrier(_ old: Int64, _ new: Int64, _ value: some OSAtomicAddress<Int64>) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .sequentiallyConsistent).exchanged
}
@inlinable public func OSAtomicCompareAndSwapInt(_ old: CInt, _ new: CInt, _ value: some OSAtomicAddress<CInt>) -> Bool {
    OSAtomicCompareAndSwap32(old, new, value)
}
@inlinable public func OSAtomicCompareAndSwapIntBarrier(_ old: CInt, _ new: CInt, _ value: some OSAtomicAddress<CInt>) -> Bool {
    OSAtomicCompareAndSwap32Barrier(old, new, value)
}
@inlinable public func OSAtomicCompareAndSwapLong(_ old: CLong, _ new: CLong, _ value: some OSAtomicAddress<CLong>) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .relaxed).exchanged
}
@inlinable public func OSAtomicCompareAndSwapLongBarrier(_ old: CLong, _ new: CLong, _ value: some OSAtomicAddress<CLong>) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .sequentiallyConsistent).exchanged
}
@inlinable public func OSAtomicCompareAndSwapPtr(
    _ old: UnsafeMutableRawPointer?, _ new: UnsafeMutableRawPointer?, _ value: some OSAtomicAddress<UnsafeMutableRawPointer?>
) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .relaxed).exchanged
}
@inlinable public func OSAtomicCompareAndSwapPtrBarrier(
    _ old: UnsafeMutableRawPointer?, _ new: UnsafeMutableRawPointer?, _ value: some OSAtomicAddress<UnsafeMutableRawPointer?>
) -> Bool {
    atomic(value.address).pointee.compareExchange(expected: old, desired: new, ordering: .sequentiallyConsistent).exchanged
}

// MARK: Test and set / clear, with Apple's bit numbering: bit n is (0x80 >> (n & 7)) of byte
// (n >> 3), so bit 0 is the MOST significant bit of the first byte. Return the old bit.

@inlinable @inline(__always)
func bitAddress(_ n: UInt32, _ base: UnsafeMutableRawPointer) -> (UnsafeMutablePointer<Atomic<UInt8>>, UInt8) {
    (atomic(base + Int(n >> 3), as: UInt8.self), UInt8(0x80) >> UInt8(n & 7))
}

@inlinable public func OSAtomicTestAndSet<T>(_ n: UInt32, _ address: some OSAtomicAddress<T>) -> Bool {
    let (byte, mask) = bitAddress(n, UnsafeMutableRawPointer(address.address))
    return byte.pointee.bitwiseOr(mask, ordering: .relaxed).oldValue & mask != 0
}
@inlinable public func OSAtomicTestAndSetBarrier<T>(_ n: UInt32, _ address: some OSAtomicAddress<T>) -> Bool {
    let (byte, mask) = bitAddress(n, UnsafeMutableRawPointer(address.address))
    return byte.pointee.bitwiseOr(mask, ordering: .sequentiallyConsistent).oldValue & mask != 0
}
@inlinable public func OSAtomicTestAndClear<T>(_ n: UInt32, _ address: some OSAtomicAddress<T>) -> Bool {
    let (byte, mask) = bitAddress(n, UnsafeMutableRawPointer(address.address))
    return byte.pointee.bitwiseAnd(~mask, ordering: .relaxed).oldValue & mask != 0
}
@inlinable public func OSAtomicTestAndClearBarrier<T>(_ n: UInt32, _ address: some OSAtomicAddress<T>) -> Bool {
    let (byte, mask) = bitAddress(n, UnsafeMutableRawPointer(address.address))
    return byte.pointee.bitwiseAnd(~mask, ordering: .sequentiallyConsistent).oldValue & mask != 0
}

// MARK: Memory barrier.

/// A full (sequentially consistent) fence: no load or store moves across it.
@inlinable public func OSMemoryBarrier() { atomicMemoryFence(ordering: .sequentiallyConsistent) }
