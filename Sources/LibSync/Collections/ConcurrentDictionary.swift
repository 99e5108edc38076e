import Glibc
import Synchronization

// Seed 002's thread-safe dictionary, without its crash: a value read from it stays valid
// however other threads replace or remove the entry.
//
// Design: 16 shards, each an immutable snapshot published through a `ReferenceCell` (the
// lock-free AtomicReference algorithm). Readers never lock and never wait: they pin the shard's
// snapshot, look the key up, take their own reference to the value, and unpin, so readers run in
// parallel with each other and with writers. A writer copies its shard's snapshot, changes the
// copy and publishes it with a compare-and-set (retrying if another writer got there first);
// the old snapshot (and the values only it held) is released when its last reader unpins.
// Lock-free throughout. Suited to read-mostly use: a write costs a copy of its shard (about
// count/16 entries).

public final class ConcurrentDictionary<Key: Hashable & Sendable, Value: Sendable>: @unchecked Sendable {
    @usableFromInline final class Snapshot {
        @usableFromInline let entries: [Key: Value]
        init(_ entries: [Key: Value]) { self.entries = entries }
    }

    @usableFromInline static var shardCount: Int { 16 }
    /// Each shard's cell on its own cache line.
    @usableFromInline static var shardStride: Int { 64 }
    @usableFromInline let shards: UnsafeMutableRawPointer

    public init() {
        shards = .allocate(byteCount: Self.shardCount * Self.shardStride, alignment: 64)
        shards.initializeMemory(as: UInt8.self, repeating: 0, count: Self.shardCount * Self.shardStride)
    }
    deinit {
        for i in 0..<Self.shardCount {
            _ = ReferenceCell.exchange(shards + i * Self.shardStride, nil, returnOld: false, swiftRetain, swiftRelease)
        }
        shards.deallocate()
    }

    @inlinable func shard(_ key: Key) -> UnsafeMutableRawPointer {
        shards + (key.hashValue & (Self.shardCount - 1)) * Self.shardStride
    }

    /// Runs `body` on the shard's current entries, borrowed (valid inside `body` only).
    @inlinable func withEntries<R>(_ cell: UnsafeMutableRawPointer, _ body: ([Key: Value]) throws -> R) rethrows -> R {
        try ReferenceCell.withBorrowed(cell, swiftRelease) { raw in
            guard let raw else { return try body([:]) }
            return try Unmanaged<Snapshot>.fromOpaque(raw)._withUnsafeGuaranteedRef { try body($0.entries) }
        }
    }

    /// Looks `key` up and runs `body` on its value while the snapshot holding it is pinned:
    /// the C ABI takes its own reference there.
    @inlinable package func withValue<R>(forKey key: Key, _ body: (Value?) throws -> R) rethrows -> R {
        try withEntries(shard(key)) { try body($0[key]) }
    }

    /// Changes one shard: copies its snapshot, changes the copy, and publishes it if the shard
    /// still holds the snapshot it copied (else retries). Lock-free: no lock is held while keys
    /// are compared or old values released, which may run foreign code (Python's __eq__, __del__).
    @usableFromInline func update<R>(_ key: Key, _ change: (inout [Key: Value]) -> R) -> R {
        let cell = shard(key)
        while true {
            let current = ReferenceCell.get(cell, swiftRetain, swiftRelease).map { Unmanaged<Snapshot>.fromOpaque($0).takeRetainedValue() }
            var entries = current?.entries ?? [:]
            let result = change(&entries)
            let next = Snapshot(entries)
            let published = withExtendedLifetime((current, next)) {
                ReferenceCell.compareAndSet(cell, current.map { Unmanaged.passUnretained($0).toOpaque() },
                                            Unmanaged.passUnretained(next).toOpaque(), swiftRetain, swiftRelease)
            }
            if published { return result }
        }
    }

    /// The value for `key` (a strong reference: valid whatever other threads do), or nil.
    public subscript(key: Key) -> Value? {
        get { withValue(forKey: key) { $0 } }
        set {
            if let newValue { updateValue(newValue, forKey: key) } else { removeValue(forKey: key) }
        }
    }

    /// Stores `value`; returns the value it replaced.
    @discardableResult
    public func updateValue(_ value: Value, forKey key: Key) -> Value? {
        update(key) { $0.updateValue(value, forKey: key) }
    }

    /// Removes the entry; returns its value.
    @discardableResult
    public func removeValue(forKey key: Key) -> Value? {
        update(key) { $0.removeValue(forKey: key) }
    }

    /// Entries, summed over the shards (each shard read at one instant).
    public var count: Int {
        (0..<Self.shardCount).reduce(0) { sum, i in sum + withEntries(shards + i * Self.shardStride) { $0.count } }
    }

    /// A snapshot of the keys: every key present throughout the call is listed.
    public var keys: [Key] {
        (0..<Self.shardCount).flatMap { i in withEntries(shards + i * Self.shardStride) { Array($0.keys) } }
    }
}

// MARK: Keys and values for the C ABI

/// A C value: one reference, given back through `release` when the last snapshot holding it
/// is gone.
package final class ForeignObject: @unchecked Sendable {
    package let pointer: UnsafeMutableRawPointer
    let release: ReferenceCell.Function
    package init(retaining pointer: UnsafeMutableRawPointer, _ retain: ReferenceCell.Function, _ release: ReferenceCell.Function) {
        retain(pointer)
        self.pointer = pointer
        self.release = release
    }
    deinit { release(pointer) }
}

/// Compares two object keys: 1 equal, 0 not, < 0 error (treated as not equal).
package typealias KeyCompare = @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32

/// A C key: a byte string, or an object with a caller-computed hash and a comparator. Lookup
/// keys borrow the caller's bytes or object (no allocation); stored keys own a copy or a +1.
package struct ForeignKey: Hashable, @unchecked Sendable {
    package let bytes: UnsafeRawBufferPointer
    package let object: UnsafeMutableRawPointer?
    package let objectHash: Int
    let compare: KeyCompare?
    let context: UnsafeMutableRawPointer?
    /// Keeps a stored key alive: its byte copy, or +1 on its object (nil in lookups).
    let owner: AnyObject?

    package init(bytes: UnsafeRawBufferPointer, storing: Bool) {
        if storing {
            let copy = KeyBytes(bytes)
            self.bytes = UnsafeRawBufferPointer(start: copy.storage.baseAddress, count: bytes.count); owner = copy
        } else {
            self.bytes = bytes; owner = nil
        }
        object = nil; objectHash = 0; compare = nil; context = nil
    }
    package init(object: UnsafeMutableRawPointer, hash: Int, compare: KeyCompare, context: UnsafeMutableRawPointer?, owner: ForeignObject?) {
        bytes = UnsafeRawBufferPointer(start: nil, count: 0); self.object = object; objectHash = hash
        self.compare = compare; self.context = context; self.owner = owner
    }

    package static func == (a: ForeignKey, b: ForeignKey) -> Bool {
        guard let x = a.object else {
            return a.bytes.count == b.bytes.count && (a.bytes.count == 0 || memcmp(a.bytes.baseAddress!, b.bytes.baseAddress!, a.bytes.count) == 0)
        }
        return x == b.object || a.compare!(x, b.object, a.context) == 1
    }
    package func hash(into hasher: inout Hasher) {
        if object != nil { hasher.combine(objectHash) } else { hasher.combine(bytes: bytes) }
    }
}

/// A stored byte key's own copy.
final class KeyBytes {
    let storage: UnsafeMutableRawBufferPointer
    init(_ bytes: UnsafeRawBufferPointer) {
        storage = .allocate(byteCount: max(bytes.count, 1), alignment: 1)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        if bytes.count > 0 { storage.copyMemory(from: bytes) }
    }
    deinit { storage.deallocate() }
}

/// The C ABI's dictionary: foreign keys and values, with their retain and release functions.
package final class ForeignDictionary: @unchecked Sendable {
    package let map = ConcurrentDictionary<ForeignKey, ForeignObject>()
    package let retain: ReferenceCell.Function, release: ReferenceCell.Function
    let compare: KeyCompare?, context: UnsafeMutableRawPointer?

    package init(retain: ReferenceCell.Function, release: ReferenceCell.Function, compare: KeyCompare?, context: UnsafeMutableRawPointer?) {
        self.retain = retain; self.release = release; self.compare = compare; self.context = context
    }

    /// A lookup key (borrowing an object key) or, with `storing`, one that retains it.
    package func key(_ key: UnsafeRawPointer, _ length: Int, storing: Bool) -> ForeignKey {
        guard let compare else { return ForeignKey(bytes: UnsafeRawBufferPointer(start: key, count: length), storing: storing) }
        let object = UnsafeMutableRawPointer(mutating: key)
        return ForeignKey(object: object, hash: length, compare: compare, context: context,
                          owner: storing ? ForeignObject(retaining: object, retain, release) : nil)
    }

    /// The value +1, or nil.
    package func get(_ key: ForeignKey) -> UnsafeMutableRawPointer? {
        map.withValue(forKey: key) { value in
            guard let value else { return nil }
            retain(value.pointer)
            return value.pointer
        }
    }
}
