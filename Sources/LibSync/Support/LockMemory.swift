/// Memory for a lock, with a stable address: zeroed or set to an initial word and freed on
/// deinit, or the caller's (`borrowing`), which it neither initializes nor frees.
@usableFromInline final class LockMemory: @unchecked Sendable {
    @usableFromInline let raw: UnsafeMutableRawPointer
    let size: Int
    let owned: Bool
    init(size: Int, first: UInt32 = 0) {
        self.size = size
        owned = true
        raw = .allocate(byteCount: size, alignment: 64)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        raw.storeBytes(of: first, as: UInt32.self)
    }
    init(borrowing raw: UnsafeMutableRawPointer, size: Int) {
        self.raw = raw
        self.size = size
        owned = false
    }
    deinit {
        LockOrder.forget(raw)
        if owned { raw.deallocate() }
    }
}
