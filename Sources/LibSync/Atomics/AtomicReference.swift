import CSyncShim
import Glibc
import Synchronization

// An atomic reference to an object whose lifetime is governed by retain and release functions
// (C: two function pointers; Swift: ARC; Python: Py_IncRef/Py_DecRef). `get` returns +1 even
// while another thread replaces the value and drops the reference's own +1: a reader never
// uses an object freed under it, and no getter can return an object after its last release.
//
// Algorithm (hazard pointers; lock-free on every path, no mutex):
//   - The cell is two words: the object, on which the cell owns +1, and a list of objects
//     removed from it whose release waits for a reader.
//   - A reader publishes the object it loaded in its own thread's hazard slot, checks that the
//     cell still holds it (else retries), retains it, and clears the slot with a plain store. It
//     writes only its own cache line (one fenced store, one plain store); the cell is only read.
//   - A writer swaps the cell, then looks for a slot holding the object it removed. If none
//     does, it releases the object; otherwise it defers the release to the cell's list, which
//     every later write (and destroy) retries. So the object stays alive until the reader's
//     retain, and each retain is balanced by exactly one release.
// ABA-safe: a reader trusts the object only after seeing it in the cell *after* publishing its
// slot, so whichever writer later removes that installation sees the slot. compareAndSet
// compares identities, never dereferences.

@usableFromInline package enum ReferenceCell {
    /// Retain or release one object (C: `void (*)(void *)`).
    @usableFromInline package typealias Function = @convention(c) (UnsafeMutableRawPointer?) -> Void

    package static let size = 16, alignment = 16

    @inlinable @inline(__always)
    static func word(_ cell: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(cell, as: UInt.self) }
    /// The deferred releases: a stack of 16-byte nodes {object, next}.
    @inlinable @inline(__always)
    static func deferred(_ cell: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> { atomic(cell + 8, as: UInt.self) }

    /// Loads the cell's object into a fresh hazard slot of this thread; 0 (and no slot) if empty.
    /// The object stays alive until `unprotect`.
    @inlinable @inline(__always)
    static func protect(_ cell: UnsafeMutableRawPointer) -> (UInt, UnsafeMutablePointer<Atomic<UInt>>?) {
        let word = word(cell)
        var object = word.pointee.load(ordering: .acquiring)
        guard object != 0 else { return (0, nil) }
        let slot = ThreadRecord.takeSlot()
        while true {
            slot.pointee.store(object, ordering: .sequentiallyConsistent)
            let now = word.pointee.load(ordering: .sequentiallyConsistent)
            if now == object { return (object, slot) }
            guard now != 0 else { unprotect(slot); return (0, nil) }
            object = now  // replaced meanwhile: protect the new one
        }
    }

    /// Clears the slot. Every reference the reader took is taken before: the barrier keeps
    /// Swift's optimizer from moving a retain past the store, after which a writer could free
    /// the object under the reader. C and Python retains are opaque calls already.
    @inlinable @inline(__always)
    static func unprotect(_ slot: UnsafeMutablePointer<Atomic<UInt>>?) {
        guard let slot else { return }
        sync_arc_barrier()
        slot.pointee.store(0, ordering: .releasing)  // after our retain: a writer may release now
        ThreadRecord.returnSlot()
    }

    /// The writer's half, after removing `object` from `cell`: releases it (or, `keep`, gives
    /// it to the caller) unless a reader may still be retaining it, in which case that release
    /// waits in the cell's list. Then retries the list.
    @usableFromInline
    static func retire(_ cell: UnsafeMutableRawPointer, _ object: UInt, keep: Bool, _ retain: Function, _ release: Function,
                       destroying: Bool = false) {
        if object != 0 {
            let pointer = UnsafeMutableRawPointer(bitPattern: object)
            if !destroying && ThreadRecord.isProtected(object) {
                if keep { retain(pointer) }  // the caller's own +1; the cell's waits for the reader
                push(cell, object)
            } else if !keep {
                release(pointer)
            }
        }
        guard deferred(cell).pointee.load(ordering: .relaxed) != 0 else { return }
        var node = deferred(cell).pointee.exchange(0, ordering: .acquiring)
        while let raw = UnsafeMutableRawPointer(bitPattern: node) {
            let object = raw.load(as: UInt.self)
            node = raw.load(fromByteOffset: 8, as: UInt.self)
            raw.deallocate()
            // When destroying, a slot holding the object belongs to a reader of another
            // reference (none may use this one), which holds its own +1.
            if !destroying && ThreadRecord.isProtected(object) { push(cell, object) } else { release(UnsafeMutableRawPointer(bitPattern: object)) }
        }
    }

    static func push(_ cell: UnsafeMutableRawPointer, _ object: UInt) {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
        raw.storeBytes(of: object, as: UInt.self)
        var first = deferred(cell).pointee.load(ordering: .relaxed)
        while true {
            raw.storeBytes(of: first, toByteOffset: 8, as: UInt.self)
            let (pushed, now) = deferred(cell).pointee.compareExchange(expected: first, desired: UInt(bitPattern: raw), ordering: .releasing)
            if pushed { return }
            first = now
        }
    }

    // MARK: Operations

    /// The current object, +1 (the caller releases it), or nil.
    @inlinable @inline(__always)
    package static func get(_ cell: UnsafeMutableRawPointer, _ retain: Function) -> UnsafeMutableRawPointer? {
        let (object, slot) = protect(cell)
        guard object != 0 else { return nil }
        let value = UnsafeMutableRawPointer(bitPattern: object)
        retain(value)
        unprotect(slot)
        return value
    }

    /// Runs `body` on the current object (nil if empty), borrowed: valid only inside `body`.
    @inlinable
    package static func withBorrowed<R>(_ cell: UnsafeMutableRawPointer, _ body: (UnsafeMutableRawPointer?) throws -> R) rethrows -> R {
        let (object, slot) = protect(cell)
        defer { unprotect(slot) }
        return try body(UnsafeMutableRawPointer(bitPattern: object))
    }

    /// Stores `object` (retaining it); returns the previous object +1 if `returnOld`, else
    /// releases it.
    @usableFromInline
    package static func exchange(_ cell: UnsafeMutableRawPointer, _ object: UnsafeMutableRawPointer?, returnOld: Bool,
                                 _ retain: Function, _ release: Function) -> UnsafeMutableRawPointer? {
        if let object { retain(object) }
        let old = word(cell).pointee.exchange(UInt(bitPattern: object), ordering: .sequentiallyConsistent)
        retire(cell, old, keep: returnOld, retain, release)
        return returnOld ? UnsafeMutableRawPointer(bitPattern: old) : nil
    }

    /// Empties the cell and releases everything it owns, deferred releases included. No other
    /// thread may use the cell.
    @usableFromInline
    package static func destroy(_ cell: UnsafeMutableRawPointer, _ release: Function) {
        let old = word(cell).pointee.exchange(0, ordering: .sequentiallyConsistent)
        retire(cell, old, keep: false, release, release, destroying: true)
    }

    /// Stores `desired` if the current object is `expected` (by identity); returns whether it did.
    @usableFromInline
    package static func compareAndSet(_ cell: UnsafeMutableRawPointer, _ expected: UnsafeMutableRawPointer?,
                                      _ desired: UnsafeMutableRawPointer?, _ retain: Function, _ release: Function) -> Bool {
        if let desired { retain(desired) }  // before publishing: another writer may release it at once
        let swapped = word(cell).pointee.compareExchange(
            expected: UInt(bitPattern: expected), desired: UInt(bitPattern: desired), ordering: .sequentiallyConsistent).exchanged
        if swapped {
            retire(cell, UInt(bitPattern: expected), keep: false, retain, release)
        } else if let desired {
            release(desired)
        }
        return swapped
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

/// A reference to a class instance, replaced atomically and lock-free (Java's
/// `AtomicReference`). `get` returns a strong reference even while another thread replaces it;
/// `compareAndSet` compares by identity. Deinitialising releases what it holds.
public final class AtomicReference<Object: AnyObject & Sendable>: @unchecked Sendable {
    @usableFromInline let cell: UnsafeMutableRawPointer

    public init(_ object: Object? = nil) {
        cell = allocateCell()
        set(object)
    }
    deinit {
        ReferenceCell.destroy(cell, swiftRelease)
        cell.deallocate()
    }

    @inlinable static func opaque(_ object: Object?) -> UnsafeMutableRawPointer? {
        object.map { Unmanaged.passUnretained($0).toOpaque() }
    }
    @inlinable static func take(_ pointer: UnsafeMutableRawPointer?) -> Object? {
        pointer.map { Unmanaged<Object>.fromOpaque($0).takeRetainedValue() }
    }

    /// A strong reference to the current object (Swift's own retain, while it is protected).
    /// Inlinable, so that callers get it specialized for their class.
    @inlinable public func get() -> Object? {
        ReferenceCell.withBorrowed(cell) { $0.map { Unmanaged<Object>.fromOpaque($0).takeUnretainedValue() } }
    }

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
