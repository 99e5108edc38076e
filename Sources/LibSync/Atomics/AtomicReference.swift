import Glibc
import Synchronization

// An atomic reference to an object whose lifetime is governed by retain and release functions
// (C: two function pointers; Swift: ARC; Python: Py_IncRef/Py_DecRef). `get` returns +1 even
// while another thread replaces the value and drops the reference's own +1: the crash of
// seed 002 and the race in seed 004's naive getter cannot happen.
//
// Algorithm (split reference count, lock-free on every path, no mutex):
//   - The cell is 16 bytes changed by one double-width CAS: {node, pinned readers}.
//   - Each stored object gets a fresh node {object, acks, kept}; the node owns the cell's +1.
//   - A reader pins the node by incrementing the count beside it, retains the object (safe:
//     the node's +1 cannot be dropped while pinned), and unpins: it decrements the count if the
//     same node is still installed, otherwise it acknowledges on the node itself.
//   - A writer swaps in {new node, 0}; the count it swapped out is the number of readers that
//     still have to acknowledge. Whoever brings the node's `acks` to zero (readers count -1,
//     the writer +n) releases the object and frees the node: exactly one release per retain.
// ABA: a pinned node cannot be freed, and a node is installed once, so if a pinned reader sees
// its node in the cell, it is the same installation holding its pin.

@usableFromInline package enum ReferenceCell {
    /// Retain or release one object (C: `void (*)(void *)`).
    @usableFromInline package typealias Function = @convention(c) (UnsafeMutableRawPointer?) -> Void

    package static let size = 16, alignment = 16

    @inlinable @inline(__always)
    static func state(_ cell: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<WordPair>> {
        atomic(cell, as: WordPair.self)
    }

    // Node layout: object pointer, acks (Int), kept (Int: 1 when the cell's +1 went to a caller).
    @inlinable @inline(__always)
    static func object(_ node: UInt) -> UnsafeMutableRawPointer? {
        UnsafeMutableRawPointer(bitPattern: node)!.load(as: UnsafeMutableRawPointer?.self)
    }
    @inlinable @inline(__always)
    static func acks(_ node: UInt) -> UnsafeMutablePointer<Atomic<Int>> {
        atomic(UnsafeMutableRawPointer(bitPattern: node)! + 8, as: Int.self)
    }
    @inlinable @inline(__always)
    static func kept(_ node: UInt) -> UnsafeMutablePointer<Int> {
        (UnsafeMutableRawPointer(bitPattern: node)! + 16).assumingMemoryBound(to: Int.self)
    }

    /// A node owning +1 on `object` (0 for nil).
    @usableFromInline
    static func makeNode(_ object: UnsafeMutableRawPointer?, _ retain: Function) -> UInt {
        guard let object else { return 0 }
        retain(object)
        let raw = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)
        raw.storeBytes(of: object, as: UnsafeMutableRawPointer?.self)
        (raw + 8).storeBytes(of: 0, as: Int.self)
        (raw + 16).storeBytes(of: 0, as: Int.self)
        return UInt(bitPattern: raw)
    }

    /// Adds `delta` to the node's acknowledgements; at zero, drops its +1 and frees it.
    @usableFromInline
    static func settle(_ node: UInt, _ delta: Int, _ release: Function) {
        guard acks(node).pointee.wrappingAdd(delta, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        if kept(node).pointee == 0 { release(object(node)) }
        UnsafeMutableRawPointer(bitPattern: node)!.deallocate()
    }

    /// Pins the installed node (0 if the cell is empty): it stays alive until `unpin`.
    @inlinable
    static func pin(_ state: UnsafeMutablePointer<Atomic<WordPair>>) -> UInt {
        var old = state.pointee.load(ordering: .acquiring)
        while old.first != 0 {
            let (pinned, current) = state.pointee.compareExchange(
                expected: old, desired: WordPair(first: old.first, second: old.second &+ 1), ordering: .acquiringAndReleasing)
            if pinned { return old.first }
            old = current
        }
        return 0
    }

    @inlinable
    static func unpin(_ state: UnsafeMutablePointer<Atomic<WordPair>>, _ node: UInt, _ release: Function) {
        var old = state.pointee.load(ordering: .relaxed)
        while old.first == node {
            let (unpinned, current) = state.pointee.compareExchange(
                expected: old, desired: WordPair(first: node, second: old.second &- 1), ordering: .acquiringAndReleasing)
            if unpinned { return }
            old = current
        }
        settle(node, -1, release)  // replaced: the writer counted this pin
    }

    /// The writer's half, after swapping out `node` with `readers` pins still on it.
    @usableFromInline
    static func retire(_ node: UInt, readers: UInt, keepObject: Bool, _ release: Function) {
        guard node != 0 else { return }
        if keepObject { kept(node).pointee = 1 }
        settle(node, Int(bitPattern: readers), release)
    }

    // MARK: Operations

    /// The current object, +1 (the caller releases it), or nil.
    @inlinable
    package static func get(_ cell: UnsafeMutableRawPointer, _ retain: Function, _ release: Function) -> UnsafeMutableRawPointer? {
        let state = state(cell)
        let node = pin(state)
        guard node != 0 else { return nil }
        let value = object(node)
        retain(value)
        unpin(state, node, release)
        return value
    }

    /// Runs `body` on the current object (nil if empty), borrowed: valid only inside `body`.
    @inlinable
    package static func withBorrowed<R>(_ cell: UnsafeMutableRawPointer, _ release: Function,
                                        _ body: (UnsafeMutableRawPointer?) throws -> R) rethrows -> R {
        let state = state(cell)
        let node = pin(state)
        guard node != 0 else { return try body(nil) }
        defer { unpin(state, node, release) }
        return try body(object(node))
    }

    /// Stores `object` (retaining it); returns the previous object +1 if `returnOld`, else
    /// releases it (once no reader is pinned on it).
    @usableFromInline
    package static func exchange(_ cell: UnsafeMutableRawPointer, _ object: UnsafeMutableRawPointer?, returnOld: Bool,
                                 _ retain: Function, _ release: Function) -> UnsafeMutableRawPointer? {
        let new = makeNode(object, retain)
        let old = state(cell).pointee.exchange(WordPair(first: new, second: 0), ordering: .acquiringAndReleasing)
        guard old.first != 0 else { return nil }
        let previous = Self.object(old.first)
        retire(old.first, readers: old.second, keepObject: returnOld, release)
        return returnOld ? previous : nil
    }

    /// Stores `desired` if the current object is `expected` (by identity); returns whether it did.
    @usableFromInline
    package static func compareAndSet(_ cell: UnsafeMutableRawPointer, _ expected: UnsafeMutableRawPointer?,
                                      _ desired: UnsafeMutableRawPointer?, _ retain: Function, _ release: Function) -> Bool {
        let state = state(cell)
        var new: UInt = 0, made = false
        func makeOnce() -> UInt {
            if !made { new = makeNode(desired, retain); made = true }
            return new
        }
        defer { if made && new != 0 { retire(new, readers: 0, keepObject: false, release) } }  // unused
        var old = state.pointee.load(ordering: .acquiring)
        while true {
            if old.first == 0 {
                guard expected == nil else { return false }
                let (swapped, current) = state.pointee.compareExchange(
                    expected: old, desired: WordPair(first: makeOnce(), second: 0), ordering: .acquiringAndReleasing)
                if swapped { new = 0; return true }
                old = current
                continue
            }
            // Pin the node to read its object.
            let pinned = WordPair(first: old.first, second: old.second &+ 1)
            let (ok, seen) = state.pointee.compareExchange(expected: old, desired: pinned, ordering: .acquiringAndReleasing)
            guard ok else { old = seen; continue }
            let node = old.first
            if object(node) != expected { unpin(state, node, release); return false }
            var current = pinned
            while current.first == node {
                let (swapped, now) = state.pointee.compareExchange(
                    expected: current, desired: WordPair(first: makeOnce(), second: 0), ordering: .acquiringAndReleasing)
                if swapped {
                    new = 0
                    retire(node, readers: current.second &- 1, keepObject: false, release)  // minus our own pin
                    return true
                }
                current = now
            }
            settle(node, -1, release)  // replaced while we looked; the writer counted our pin
            old = current
        }
    }
}

// MARK: Swift front

@usableFromInline let swiftRetain: ReferenceCell.Function = { _ = Unmanaged<AnyObject>.fromOpaque($0!).retain() }
@usableFromInline let swiftRelease: ReferenceCell.Function = { Unmanaged<AnyObject>.fromOpaque($0!).release() }

/// A 16-byte aligned cell with a stable address.
@usableFromInline func allocateCell() -> UnsafeMutableRawPointer {
    let cell = UnsafeMutableRawPointer.allocate(byteCount: ReferenceCell.size, alignment: ReferenceCell.alignment)
    cell.initializeMemory(as: UInt8.self, repeating: 0, count: ReferenceCell.size)
    return cell
}

/// A reference to a class instance, replaced atomically and lock-free (the seed's
/// `AtomicReference`). `get` returns a strong reference even while another thread replaces it;
/// `compareAndSet` compares by identity. Deinitialising releases what it holds.
public final class AtomicReference<Object: AnyObject & Sendable>: @unchecked Sendable {
    @usableFromInline let cell: UnsafeMutableRawPointer

    public init(_ object: Object? = nil) {
        cell = allocateCell()
        set(object)
    }
    deinit {
        _ = ReferenceCell.exchange(cell, nil, returnOld: false, swiftRetain, swiftRelease)
        cell.deallocate()
    }

    @inlinable static func opaque(_ object: Object?) -> UnsafeMutableRawPointer? {
        object.map { Unmanaged.passUnretained($0).toOpaque() }
    }
    @inlinable static func take(_ pointer: UnsafeMutableRawPointer?) -> Object? {
        pointer.map { Unmanaged<Object>.fromOpaque($0).takeRetainedValue() }
    }

    public func get() -> Object? { Self.take(ReferenceCell.get(cell, swiftRetain, swiftRelease)) }

    public func set(_ object: Object?) {
        withExtendedLifetime(object) { _ = ReferenceCell.exchange(cell, Self.opaque(object), returnOld: false, swiftRetain, swiftRelease) }
    }

    /// Stores `object`; returns the previous one.
    public func getAndSet(_ object: Object?) -> Object? {
        withExtendedLifetime(object) { Self.take(ReferenceCell.exchange(cell, Self.opaque(object), returnOld: true, swiftRetain, swiftRelease)) }
    }

    /// Stores `desired` if the current object is `expected` (identity); returns whether it did.
    public func compareAndSet(expected: Object?, desired: Object?) -> Bool {
        withExtendedLifetime((expected, desired)) {
            ReferenceCell.compareAndSet(cell, Self.opaque(expected), Self.opaque(desired), swiftRetain, swiftRelease)
        }
    }
}
