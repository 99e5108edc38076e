import CSyncShim
import Glibc
import Synchronization

// A thread-safe dictionary whose reads stay valid: a value read from it stays valid however
// other threads replace or remove the entry.
//
// Design: 16 shards, each an immutable snapshot published through a `ReferenceCell` (the
// lock-free AtomicReference algorithm). Readers never lock and never wait: they protect the
// shard's snapshot with a hazard slot, look the key up, take their own reference to the value,
// and clear the slot, so readers run in parallel with each other and with writers, writing only
// their own cache line. A snapshot is a flat open-addressing table of {hash, key, value}; the
// key is hashed once (its top bits pick the shard, the rest the bucket). A writer copies its
// shard's snapshot, changes the copy and publishes it with a compare-and-set (retrying if
// another writer got there first); the old snapshot (and the values only it held) is released
// once no reader holds it. Lock-free throughout. Suited to read-mostly use: a write costs a copy
// of its shard (about count/16 entries).

/// Keys that carry their hash already (the C ABI's keys: hashed once, not with SipHash).
@usableFromInline package protocol PrecomputedHash { var precomputedHash: Int { get } }

public final class ConcurrentDictionary<Key: Hashable & Sendable, Value: Sendable>: @unchecked Sendable {
    /// One shard's entries at one instant, never changed once published.
    @usableFromInline final class Snapshot {
        @usableFromInline let mask: Int
        @usableFromInline let count: Int
        /// `hash | 1` per bucket, 0 when empty.
        @usableFromInline let hashes: UnsafeMutablePointer<Int>
        @usableFromInline let keys: UnsafeMutablePointer<Key>
        @usableFromInline let values: UnsafeMutablePointer<Value>

        init(_ entries: [(hash: Int, key: Key, value: Value)]) {
            var capacity = 8
            while capacity < entries.count * 2 { capacity *= 2 }
            mask = capacity - 1
            count = entries.count
            hashes = .allocate(capacity: capacity)
            hashes.initialize(repeating: 0, count: capacity)
            keys = .allocate(capacity: capacity)
            values = .allocate(capacity: capacity)
            for entry in entries {
                var i = Snapshot.start(entry.hash, mask)
                while hashes[i] != 0 { i = (i + 1) & mask }
                hashes[i] = entry.hash | 1
                (keys + i).initialize(to: entry.key)
                (values + i).initialize(to: entry.value)
            }
        }
        deinit {
            for i in 0...mask where hashes[i] != 0 { (keys + i).deinitialize(count: 1); (values + i).deinitialize(count: 1) }
            hashes.deallocate(); keys.deallocate(); values.deallocate()
        }

        @inlinable @inline(__always)
        static func start(_ hash: Int, _ mask: Int) -> Int { Int(UInt(bitPattern: hash) >> 8) & mask }

        /// The bucket holding `key`, or nil.
        @inlinable
        func find(_ key: Key, _ hash: Int) -> Int? { find(hash) { $0.pointee == key } }

        /// The bucket of the key with `hash` that `matches` (given in place: no copy, no retain).
        @inlinable @inline(__always)
        func find(_ hash: Int, _ matches: (UnsafePointer<Key>) -> Bool) -> Int? {
            let tag = hash | 1
            var i = Snapshot.start(hash, mask)
            while true {
                let h = hashes[i]
                if h == 0 { return nil }
                if h == tag && matches(keys + i) { return i }
                i = (i &+ 1) & mask
            }
        }

        var entries: [(hash: Int, key: Key, value: Value)] {
            (0...mask).compactMap { i in hashes[i] == 0 ? nil : (hashes[i], keys[i], values[i]) }
        }
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
            ReferenceCell.destroy(shards + i * Self.shardStride, swiftRelease)
        }
        shards.deallocate()
    }

    /// The key's hash, mixed so that its top bits (the shard) and middle bits (the bucket) vary.
    @inlinable @inline(__always)
    static func hash(_ key: Key) -> Int {
        mix((key as? any PrecomputedHash)?.precomputedHash ?? key.hashValue)
    }
    @inlinable @inline(__always)
    static func mix(_ raw: Int) -> Int { raw &* -7_046_029_254_386_353_131 }  // 0x9E3779B97F4A7C15

    @inlinable @inline(__always)
    func shard(_ hash: Int) -> UnsafeMutableRawPointer {
        shards + Int(UInt(bitPattern: hash) >> 60) * Self.shardStride
    }

    /// Runs `body` on the shard's current snapshot (nil: empty), borrowed: valid inside `body` only.
    @inlinable func withSnapshot<R>(_ cell: UnsafeMutableRawPointer, _ body: (Snapshot?) throws -> R) rethrows -> R {
        try ReferenceCell.withBorrowed(cell) { raw in
            guard let raw else { return try body(nil) }
            return try Unmanaged<Snapshot>.fromOpaque(raw)._withUnsafeGuaranteedRef { try body($0) }
        }
    }

    /// Looks `key` up and runs `body` on its value, borrowed, while the snapshot holding it is
    /// protected: the C ABI takes its own reference there.
    @inlinable package func withValue<R>(forKey key: Key, _ body: (UnsafePointer<Value>?) throws -> R) rethrows -> R {
        try withValue(hash: (key as? any PrecomputedHash)?.precomputedHash ?? key.hashValue, where: { $0.pointee == key }, body)
    }

    /// The same for the key whose hash (`precomputedHash`, or else `hashValue`) is `hash` and
    /// which `matches`: a lookup without a key value to build (the C ABI's borrowed keys).
    @inlinable @inline(__always)
    package func withValue<R>(hash: Int, where matches: (UnsafePointer<Key>) -> Bool, _ body: (UnsafePointer<Value>?) throws -> R) rethrows -> R {
        let hash = Self.mix(hash)
        let (object, slot) = ReferenceCell.protect(shard(hash))
        defer { ReferenceCell.unprotect(slot) }
        guard let raw = UnsafeRawPointer(bitPattern: object) else { return try body(nil) }
        // Borrowed: a retain of the snapshot would make readers on several cores contend.
        return try body(Unmanaged<Snapshot>.fromOpaque(raw)._withUnsafeGuaranteedRef { snapshot in
            snapshot.find(hash, matches).map { UnsafePointer(snapshot.values + $0) }
        })
    }

    /// Changes one shard: copies its snapshot's entries, changes the copy, and publishes it if
    /// the shard still holds the snapshot it copied (else retries). Lock-free: no lock is held
    /// while keys are compared or old values released, which may run foreign code (Python's
    /// __eq__, __del__).
    func update(_ key: Key, _ change: (inout [(hash: Int, key: Key, value: Value)], Int?) -> Value?) -> Value? {
        let hash = Self.hash(key), cell = shard(hash)
        while true {
            let current = ReferenceCell.get(cell, swiftRetain).map { Unmanaged<Snapshot>.fromOpaque($0).takeRetainedValue() }
            var entries = current?.entries ?? []
            let index = entries.firstIndex { $0.hash | 1 == hash | 1 && $0.key == key }
            let result = change(&entries, index)
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
        get { withValue(forKey: key) { $0?.pointee } }
        set {
            if let newValue { updateValue(newValue, forKey: key) } else { removeValue(forKey: key) }
        }
    }

    /// Stores `value`; returns the value it replaced.
    @discardableResult
    public func updateValue(_ value: Value, forKey key: Key) -> Value? {
        let hash = Self.hash(key)
        return update(key) { entries, index in
            guard let index else { entries.append((hash, key, value)); return nil }
            defer { entries[index].value = value }
            return entries[index].value
        }
    }

    /// Removes the entry; returns its value.
    @discardableResult
    public func removeValue(forKey key: Key) -> Value? {
        update(key) { entries, index in index.map { entries.remove(at: $0).value } }
    }

    /// Entries, summed over the shards (each shard read at one instant).
    public var count: Int {
        (0..<Self.shardCount).reduce(0) { sum, i in sum + withSnapshot(shards + i * Self.shardStride) { $0?.count ?? 0 } }
    }

    /// A snapshot of the keys: every key present throughout the call is listed.
    public var keys: [Key] {
        (0..<Self.shardCount).flatMap { i in withSnapshot(shards + i * Self.shardStride) { $0?.entries.map(\.key) ?? [] } }
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
package struct ForeignKey: Hashable, PrecomputedHash, @unchecked Sendable {
    package let bytes: UnsafeRawBufferPointer
    package let object: UnsafeMutableRawPointer?
    package let objectHash: Int
    /// FNV-1a of the bytes, or the object's hash.
    package let precomputedHash: Int
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
        precomputedHash = Self.hash(bytes)
    }

    /// FNV-1a of `bytes`.
    @inlinable
    package static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        if var byte = bytes.baseAddress {
            let end = byte + bytes.count
            while byte < end {
                hash = (hash ^ UInt64(byte.load(as: UInt8.self))) &* 0x100_0000_01b3
                byte += 1
            }
        }
        return Int(bitPattern: UInt(hash))
    }
    package init(object: UnsafeMutableRawPointer, hash: Int, compare: KeyCompare, context: UnsafeMutableRawPointer?, owner: ForeignObject?) {
        bytes = UnsafeRawBufferPointer(start: nil, count: 0); self.object = object; objectHash = hash; precomputedHash = hash
        self.compare = compare; self.context = context; self.owner = owner
    }

    package static func == (a: ForeignKey, b: ForeignKey) -> Bool {
        guard let x = a.object else { return a == b.bytes }
        return x == b.object || a.compare!(x, b.object, a.context) == 1
    }
    /// A byte key equal to `bytes`.
    @inlinable
    static func == (a: ForeignKey, bytes: UnsafeRawBufferPointer) -> Bool {
        a.bytes.count == bytes.count && (bytes.count == 0 || memcmp(a.bytes.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
    }
    /// An object key equal to `object` (by identity, or by the dictionary's comparator).
    @inlinable
    func matches(_ object: UnsafeMutableRawPointer, _ compare: KeyCompare, _ context: UnsafeMutableRawPointer?) -> Bool {
        self.object == object || compare(self.object, object, context) == 1
    }
    package func hash(into hasher: inout Hasher) {
        hasher.combine(precomputedHash)
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

    /// A lookup key (borrowing an object key) or, with `storing`, one that retains it; nil for
    /// a byte key whose length is beyond Int.max (negative here): no buffer is that long.
    package func key(_ key: UnsafeRawPointer, _ length: Int, storing: Bool) -> ForeignKey? {
        guard let compare else {
            guard length >= 0 else { return nil }
            return ForeignKey(bytes: UnsafeRawBufferPointer(start: key, count: length), storing: storing)
        }
        let object = UnsafeMutableRawPointer(mutating: key)
        return ForeignKey(object: object, hash: length, compare: compare, context: context,
                          owner: storing ? ForeignObject(retaining: object, retain, release) : nil)
    }

    /// The value for a lookup key (as `key(_:_:storing:)` takes it) +1, or nil. Builds no
    /// ForeignKey: the stored keys are matched in place.
    package func get(_ key: UnsafeRawPointer, _ length: Int) -> UnsafeMutableRawPointer? {
        let retain = retain  // the closures capture the function, not self (no retain of self)
        guard let compare else {
            guard length >= 0 else { return nil }
            let bytes = UnsafeRawBufferPointer(start: key, count: length)
            return map.withValue(hash: ForeignKey.hash(bytes), where: { $0.pointee == bytes }) { Self.retained($0, retain) }
        }
        let object = UnsafeMutableRawPointer(mutating: key), context = context
        return map.withValue(hash: length, where: { $0.pointee.matches(object, compare, context) }) { Self.retained($0, retain) }
    }

    @inline(__always)
    static func retained(_ value: UnsafePointer<ForeignObject>?, _ retain: ReferenceCell.Function) -> UnsafeMutableRawPointer? {
        guard let pointer = value?.pointee.pointer else { return nil }
        retain(pointer)
        return pointer
    }
}
