import Synchronization

// AtomicBoolean and AtomicInteger (32- and 64-bit), with java.util.concurrent.atomic's
// vocabulary (Objective-C's `compareTo:andSetValue:` is `compareAndSet`). Every operation is
// sequentially consistent, like Java's volatile fields. A boolean is an Int32 word, 0 or 1.

/// The integer widths an `AtomicInteger` may hold. Synchronization offers `Atomic`'s operations
/// per storage size, not generically, so each width states them once here.
public protocol AtomicIntegerValue: FixedWidthInteger & AtomicRepresentable & Sendable {
    static func load(_ word: UnsafeMutablePointer<Atomic<Self>>) -> Self
    static func store(_ word: UnsafeMutablePointer<Atomic<Self>>, _ value: Self)
    static func exchange(_ word: UnsafeMutablePointer<Atomic<Self>>, _ value: Self) -> Self
    static func compareExchange(_ word: UnsafeMutablePointer<Atomic<Self>>, _ expected: Self, _ desired: Self) -> Bool
    /// Adds `delta`, wrapping; returns the OLD value.
    static func fetchAdd(_ word: UnsafeMutablePointer<Atomic<Self>>, _ delta: Self) -> Self
}

extension Int32: AtomicIntegerValue {
    @inlinable @inline(__always) public static func load(_ word: UnsafeMutablePointer<Atomic<Int32>>) -> Int32 {
        word.pointee.load(ordering: .sequentiallyConsistent)
    }
    @inlinable @inline(__always) public static func store(_ word: UnsafeMutablePointer<Atomic<Int32>>, _ value: Int32) {
        word.pointee.store(value, ordering: .sequentiallyConsistent)
    }
    @inlinable @inline(__always) public static func exchange(_ word: UnsafeMutablePointer<Atomic<Int32>>, _ value: Int32) -> Int32 {
        word.pointee.exchange(value, ordering: .sequentiallyConsistent)
    }
    @inlinable @inline(__always) public static func compareExchange(_ word: UnsafeMutablePointer<Atomic<Int32>>, _ expected: Int32, _ desired: Int32) -> Bool {
        word.pointee.compareExchange(expected: expected, desired: desired, ordering: .sequentiallyConsistent).exchanged
    }
    @inlinable @inline(__always) public static func fetchAdd(_ word: UnsafeMutablePointer<Atomic<Int32>>, _ delta: Int32) -> Int32 {
        word.pointee.wrappingAdd(delta, ordering: .sequentiallyConsistent).oldValue
    }
}

extension Int64: AtomicIntegerValue {
    @inlinable @inline(__always) public static func load(_ word: UnsafeMutablePointer<Atomic<Int64>>) -> Int64 {
        word.pointee.load(ordering: .sequentiallyConsistent)
    }
    @inlinable @inline(__always) public static func store(_ word: UnsafeMutablePointer<Atomic<Int64>>, _ value: Int64) {
        word.pointee.store(value, ordering: .sequentiallyConsistent)
    }
    @inlinable @inline(__always) public static func exchange(_ word: UnsafeMutablePointer<Atomic<Int64>>, _ value: Int64) -> Int64 {
        word.pointee.exchange(value, ordering: .sequentiallyConsistent)
    }
    @inlinable @inline(__always) public static func compareExchange(_ word: UnsafeMutablePointer<Atomic<Int64>>, _ expected: Int64, _ desired: Int64) -> Bool {
        word.pointee.compareExchange(expected: expected, desired: desired, ordering: .sequentiallyConsistent).exchanged
    }
    @inlinable @inline(__always) public static func fetchAdd(_ word: UnsafeMutablePointer<Atomic<Int64>>, _ delta: Int64) -> Int64 {
        word.pointee.wrappingAdd(delta, ordering: .sequentiallyConsistent).oldValue
    }
}

/// The word-level operations on caller memory, shared by the C ABI and the Swift classes
/// (a boolean is an Int32 word).
@usableFromInline package enum AtomicWord {
    @inlinable @inline(__always)
    package static func get<T: AtomicIntegerValue>(_ word: UnsafeMutablePointer<Atomic<T>>) -> T { T.load(word) }
    @inlinable @inline(__always)
    package static func set<T: AtomicIntegerValue>(_ word: UnsafeMutablePointer<Atomic<T>>, _ value: T) { T.store(word, value) }
    @inlinable @inline(__always)
    package static func compareAndSet<T: AtomicIntegerValue>(_ word: UnsafeMutablePointer<Atomic<T>>, _ expected: T, _ desired: T) -> Bool {
        T.compareExchange(word, expected, desired)
    }
    @inlinable @inline(__always)
    package static func getAndSet<T: AtomicIntegerValue>(_ word: UnsafeMutablePointer<Atomic<T>>, _ value: T) -> T { T.exchange(word, value) }
    @inlinable @inline(__always)
    package static func getAndAdd<T: AtomicIntegerValue>(_ word: UnsafeMutablePointer<Atomic<T>>, _ delta: T) -> T { T.fetchAdd(word, delta) }
    @inlinable @inline(__always)
    package static func addAndGet<T: AtomicIntegerValue>(_ word: UnsafeMutablePointer<Atomic<T>>, _ delta: T) -> T {
        T.fetchAdd(word, delta) &+ delta
    }
}

// MARK: Swift front: objects owning one word at a stable address.

/// A `Bool` updated atomically (Java's `AtomicBoolean`).
public final class AtomicBoolean: @unchecked Sendable {
    @usableFromInline let word: UnsafeMutablePointer<Atomic<Int32>>

    public init(_ value: Bool = false) {
        word = .allocate(capacity: 1)
        word.initialize(to: Atomic(value ? 1 : 0))
    }
    deinit { word.deinitialize(count: 1); word.deallocate() }

    @inlinable public func get() -> Bool { AtomicWord.get(word) != 0 }
    @inlinable public func set(_ value: Bool) { AtomicWord.set(word, value ? 1 : 0) }
    /// Sets `desired` if the value is `expected`; returns whether it did.
    @inlinable public func compareAndSet(expected: Bool, desired: Bool) -> Bool {
        AtomicWord.compareAndSet(word, expected ? 1 : 0, desired ? 1 : 0)
    }
    /// Sets `value`; returns the previous value.
    @inlinable public func getAndSet(_ value: Bool) -> Bool { AtomicWord.getAndSet(word, value ? 1 : 0) != 0 }
}

/// An integer updated atomically (Java's `AtomicInteger`); arithmetic wraps.
public final class AtomicInteger<Value: AtomicIntegerValue>: @unchecked Sendable {
    @usableFromInline let word: UnsafeMutablePointer<Atomic<Value>>

    public init(_ value: Value = 0) {
        // A cache line of its own: a contended counter must not share one with other heap data
        // (false sharing).
        word = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64).bindMemory(to: Atomic<Value>.self, capacity: 1)
        word.initialize(to: Atomic(value))
    }
    deinit { word.deinitialize(count: 1); word.deallocate() }

    @inlinable public func get() -> Value { AtomicWord.get(word) }
    @inlinable public func set(_ value: Value) { AtomicWord.set(word, value) }
    @inlinable public func compareAndSet(expected: Value, desired: Value) -> Bool {
        AtomicWord.compareAndSet(word, expected, desired)
    }
    @inlinable public func getAndSet(_ value: Value) -> Value { AtomicWord.getAndSet(word, value) }
    @inlinable @discardableResult public func getAndAdd(_ delta: Value) -> Value { AtomicWord.getAndAdd(word, delta) }
    @inlinable @discardableResult public func addAndGet(_ delta: Value) -> Value { AtomicWord.addAndGet(word, delta) }
    @inlinable @discardableResult public func getAndIncrement() -> Value { getAndAdd(1) }
    @inlinable @discardableResult public func getAndDecrement() -> Value { getAndAdd(-1) }
    @inlinable @discardableResult public func incrementAndGet() -> Value { addAndGet(1) }
    @inlinable @discardableResult public func decrementAndGet() -> Value { addAndGet(-1) }
}

public typealias AtomicInteger32 = AtomicInteger<Int32>
public typealias AtomicInteger64 = AtomicInteger<Int64>
