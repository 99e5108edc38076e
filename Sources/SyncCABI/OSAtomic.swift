import LibSync

// libkern/OSAtomic.h, exported with Apple's names. Each function checks its arguments (debug
// builds only, see Preconditions.swift) and calls the Swift core's function of the same name.

@_cdecl("OSAtomicAdd32") public func c_OSAtomicAdd32(_ amount: Int32, _ value: UnsafeMutablePointer<Int32>?) -> Int32 {
    OSAtomicAdd32(amount, checked(value, "OSAtomicAdd32"))
}

@_cdecl("OSAtomicIncrement32") public func c_OSAtomicIncrement32(_ value: UnsafeMutablePointer<Int32>?) -> Int32 {
    OSAtomicIncrement32(checked(value, "OSAtomicIncrement32"))
}

@_cdecl("OSAtomicDecrement32") public func c_OSAtomicDecrement32(_ value: UnsafeMutablePointer<Int32>?) -> Int32 {
    OSAtomicDecrement32(checked(value, "OSAtomicDecrement32"))
}

@_cdecl("OSAtomicAdd64") public func c_OSAtomicAdd64(_ amount: Int64, _ value: UnsafeMutablePointer<Int64>?) -> Int64 {
    OSAtomicAdd64(amount, checked(value, "OSAtomicAdd64"))
}

@_cdecl("OSAtomicIncrement64") public func c_OSAtomicIncrement64(_ value: UnsafeMutablePointer<Int64>?) -> Int64 {
    OSAtomicIncrement64(checked(value, "OSAtomicIncrement64"))
}

@_cdecl("OSAtomicDecrement64") public func c_OSAtomicDecrement64(_ value: UnsafeMutablePointer<Int64>?) -> Int64 {
    OSAtomicDecrement64(checked(value, "OSAtomicDecrement64"))
}

@_cdecl("OSAtomicAdd32Barrier") public func c_OSAtomicAdd32Barrier(_ amount: Int32, _ value: UnsafeMutablePointer<Int32>?) -> Int32 {
    OSAtomicAdd32Barrier(amount, checked(value, "OSAtomicAdd32Barrier"))
}

@_cdecl("OSAtomicIncrement32Barrier") public func c_OSAtomicIncrement32Barrier(_ value: UnsafeMutablePointer<Int32>?) -> Int32 {
    OSAtomicIncrement32Barrier(checked(value, "OSAtomicIncrement32Barrier"))
}

@_cdecl("OSAtomicDecrement32Barrier") public func c_OSAtomicDecrement32Barrier(_ value: UnsafeMutablePointer<Int32>?) -> Int32 {
    OSAtomicDecrement32Barrier(checked(value, "OSAtomicDecrement32Barrier"))
}

@_cdecl("OSAtomicAdd64Barrier") public func c_OSAtomicAdd64Barrier(_ amount: Int64, _ value: UnsafeMutablePointer<Int64>?) -> Int64 {
    OSAtomicAdd64Barrier(amount, checked(value, "OSAtomicAdd64Barrier"))
}

@_cdecl("OSAtomicIncrement64Barrier") public func c_OSAtomicIncrement64Barrier(_ value: UnsafeMutablePointer<Int64>?) -> Int64 {
    OSAtomicIncrement64Barrier(checked(value, "OSAtomicIncrement64Barrier"))
}

@_cdecl("OSAtomicDecrement64Barrier") public func c_OSAtomicDecrement64Barrier(_ value: UnsafeMutablePointer<Int64>?) -> Int64 {
    OSAtomicDecrement64Barrier(checked(value, "OSAtomicDecrement64Barrier"))
}

@_cdecl("OSAtomicOr32") public func c_OSAtomicOr32(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicOr32(mask, checked(value, "OSAtomicOr32"))
}

@_cdecl("OSAtomicOr32Orig") public func c_OSAtomicOr32Orig(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicOr32Orig(mask, checked(value, "OSAtomicOr32Orig"))
}

@_cdecl("OSAtomicAnd32") public func c_OSAtomicAnd32(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicAnd32(mask, checked(value, "OSAtomicAnd32"))
}

@_cdecl("OSAtomicAnd32Orig") public func c_OSAtomicAnd32Orig(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicAnd32Orig(mask, checked(value, "OSAtomicAnd32Orig"))
}

@_cdecl("OSAtomicXor32") public func c_OSAtomicXor32(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicXor32(mask, checked(value, "OSAtomicXor32"))
}

@_cdecl("OSAtomicXor32Orig") public func c_OSAtomicXor32Orig(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicXor32Orig(mask, checked(value, "OSAtomicXor32Orig"))
}

@_cdecl("OSAtomicOr32Barrier") public func c_OSAtomicOr32Barrier(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicOr32Barrier(mask, checked(value, "OSAtomicOr32Barrier"))
}

@_cdecl("OSAtomicOr32OrigBarrier") public func c_OSAtomicOr32OrigBarrier(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicOr32OrigBarrier(mask, checked(value, "OSAtomicOr32OrigBarrier"))
}

@_cdecl("OSAtomicAnd32Barrier") public func c_OSAtomicAnd32Barrier(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicAnd32Barrier(mask, checked(value, "OSAtomicAnd32Barrier"))
}

@_cdecl("OSAtomicAnd32OrigBarrier") public func c_OSAtomicAnd32OrigBarrier(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicAnd32OrigBarrier(mask, checked(value, "OSAtomicAnd32OrigBarrier"))
}

@_cdecl("OSAtomicXor32Barrier") public func c_OSAtomicXor32Barrier(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicXor32Barrier(mask, checked(value, "OSAtomicXor32Barrier"))
}

@_cdecl("OSAtomicXor32OrigBarrier") public func c_OSAtomicXor32OrigBarrier(_ mask: UInt32, _ value: UnsafeMutablePointer<UInt32>?) -> Int32 {
    OSAtomicXor32OrigBarrier(mask, checked(value, "OSAtomicXor32OrigBarrier"))
}

@_cdecl("OSAtomicCompareAndSwap32") public func c_OSAtomicCompareAndSwap32(_ old: Int32, _ new: Int32, _ value: UnsafeMutablePointer<Int32>?) -> Bool {
    OSAtomicCompareAndSwap32(old, new, checked(value, "OSAtomicCompareAndSwap32"))
}

@_cdecl("OSAtomicCompareAndSwap64") public func c_OSAtomicCompareAndSwap64(_ old: Int64, _ new: Int64, _ value: UnsafeMutablePointer<Int64>?) -> Bool {
    OSAtomicCompareAndSwap64(old, new, checked(value, "OSAtomicCompareAndSwap64"))
}

@_cdecl("OSAtomicCompareAndSwapInt") public func c_OSAtomicCompareAndSwapInt(_ old: CInt, _ new: CInt, _ value: UnsafeMutablePointer<CInt>?) -> Bool {
    OSAtomicCompareAndSwapInt(old, new, checked(value, "OSAtomicCompareAndSwapInt"))
}

@_cdecl("OSAtomicCompareAndSwapLong") public func c_OSAtomicCompareAndSwapLong(_ old: CLong, _ new: CLong, _ value: UnsafeMutablePointer<CLong>?) -> Bool {
    OSAtomicCompareAndSwapLong(old, new, checked(value, "OSAtomicCompareAndSwapLong"))
}

@_cdecl("OSAtomicCompareAndSwapPtr") public func c_OSAtomicCompareAndSwapPtr(_ old: UnsafeMutableRawPointer?, _ new: UnsafeMutableRawPointer?, _ value: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Bool {
    OSAtomicCompareAndSwapPtr(old, new, checked(value, "OSAtomicCompareAndSwapPtr"))
}

@_cdecl("OSAtomicCompareAndSwap32Barrier") public func c_OSAtomicCompareAndSwap32Barrier(_ old: Int32, _ new: Int32, _ value: UnsafeMutablePointer<Int32>?) -> Bool {
    OSAtomicCompareAndSwap32Barrier(old, new, checked(value, "OSAtomicCompareAndSwap32Barrier"))
}

@_cdecl("OSAtomicCompareAndSwap64Barrier") public func c_OSAtomicCompareAndSwap64Barrier(_ old: Int64, _ new: Int64, _ value: UnsafeMutablePointer<Int64>?) -> Bool {
    OSAtomicCompareAndSwap64Barrier(old, new, checked(value, "OSAtomicCompareAndSwap64Barrier"))
}

@_cdecl("OSAtomicCompareAndSwapIntBarrier") public func c_OSAtomicCompareAndSwapIntBarrier(_ old: CInt, _ new: CInt, _ value: UnsafeMutablePointer<CInt>?) -> Bool {
    OSAtomicCompareAndSwapIntBarrier(old, new, checked(value, "OSAtomicCompareAndSwapIntBarrier"))
}

@_cdecl("OSAtomicCompareAndSwapLongBarrier") public func c_OSAtomicCompareAndSwapLongBarrier(_ old: CLong, _ new: CLong, _ value: UnsafeMutablePointer<CLong>?) -> Bool {
    OSAtomicCompareAndSwapLongBarrier(old, new, checked(value, "OSAtomicCompareAndSwapLongBarrier"))
}

@_cdecl("OSAtomicCompareAndSwapPtrBarrier") public func c_OSAtomicCompareAndSwapPtrBarrier(_ old: UnsafeMutableRawPointer?, _ new: UnsafeMutableRawPointer?, _ value: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Bool {
    OSAtomicCompareAndSwapPtrBarrier(old, new, checked(value, "OSAtomicCompareAndSwapPtrBarrier"))
}

@_cdecl("OSAtomicTestAndSet") public func c_OSAtomicTestAndSet(_ n: UInt32, _ address: UnsafeMutableRawPointer?) -> Bool {
    OSAtomicTestAndSet(n, checked(address, "OSAtomicTestAndSet").assumingMemoryBound(to: UInt8.self))
}

@_cdecl("OSAtomicTestAndClear") public func c_OSAtomicTestAndClear(_ n: UInt32, _ address: UnsafeMutableRawPointer?) -> Bool {
    OSAtomicTestAndClear(n, checked(address, "OSAtomicTestAndClear").assumingMemoryBound(to: UInt8.self))
}

@_cdecl("OSAtomicTestAndSetBarrier") public func c_OSAtomicTestAndSetBarrier(_ n: UInt32, _ address: UnsafeMutableRawPointer?) -> Bool {
    OSAtomicTestAndSetBarrier(n, checked(address, "OSAtomicTestAndSetBarrier").assumingMemoryBound(to: UInt8.self))
}

@_cdecl("OSAtomicTestAndClearBarrier") public func c_OSAtomicTestAndClearBarrier(_ n: UInt32, _ address: UnsafeMutableRawPointer?) -> Bool {
    OSAtomicTestAndClearBarrier(n, checked(address, "OSAtomicTestAndClearBarrier").assumingMemoryBound(to: UInt8.self))
}

@_cdecl("OSMemoryBarrier") public func c_OSMemoryBarrier() {
    OSMemoryBarrier()
}

// MARK: OSSpinLock

@_cdecl("OSSpinLockTry") public func c_OSSpinLockTry(_ lock: UnsafeMutablePointer<OSSpinLock>?) -> Bool {
    OSSpinLockTry(checked(lock, "OSSpinLockTry"))
}

@_cdecl("OSSpinLockLock") public func c_OSSpinLockLock(_ lock: UnsafeMutablePointer<OSSpinLock>?) {
    OSSpinLockLock(checked(lock, "OSSpinLockLock"))
}

@_cdecl("OSSpinLockUnlock") public func c_OSSpinLockUnlock(_ lock: UnsafeMutablePointer<OSSpinLock>?) {
    OSSpinLockUnlock(checked(lock, "OSSpinLockUnlock"))
}

// MARK: Intrusive queues (heads are 16-byte aligned, as Apple declares them)

@_cdecl("OSAtomicEnqueue") public func c_OSAtomicEnqueue(_ list: UnsafeMutableRawPointer?, _ new: UnsafeMutableRawPointer?, _ offset: Int) {
    LIFOQueue.enqueue(checked(list, "OSAtomicEnqueue", alignment: 16), checked(new, "OSAtomicEnqueue"), offset)
}

@_cdecl("OSAtomicDequeue") public func c_OSAtomicDequeue(_ list: UnsafeMutableRawPointer?, _ offset: Int) -> UnsafeMutableRawPointer? {
    LIFOQueue.dequeue(checked(list, "OSAtomicDequeue", alignment: 16), offset)
}

@_cdecl("OSAtomicFifoEnqueue") public func c_OSAtomicFifoEnqueue(_ list: UnsafeMutableRawPointer?, _ new: UnsafeMutableRawPointer?, _ offset: Int) {
    FIFOQueue.enqueue(checked(list, "OSAtomicFifoEnqueue", alignment: 16), checked(new, "OSAtomicFifoEnqueue"), offset)
}

@_cdecl("OSAtomicFifoDequeue") public func c_OSAtomicFifoDequeue(_ list: UnsafeMutableRawPointer?, _ offset: Int) -> UnsafeMutableRawPointer? {
    FIFOQueue.dequeue(checked(list, "OSAtomicFifoDequeue", alignment: 16), offset)
}
