import Glibc
import LibSync
import Synchronization

// sync/atomics.h: converts arguments and calls the core (AtomicValues, AtomicReference,
// Throttler, AutoreleasePool, ConcurrentDictionary). Pointer preconditions as in
// Preconditions.swift (debug builds trap); functions with an error channel return EINVAL.

// MARK: AtomicBoolean, AtomicInteger

@inline(__always) func word<T: AtomicIntegerValue>(_ p: UnsafeMutableRawPointer?, _ type: T.Type, _ function: StaticString) -> UnsafeMutablePointer<Atomic<T>> {
    checked(p, function, alignment: MemoryLayout<T>.alignment).assumingMemoryBound(to: Atomic<T>.self)
}

@_cdecl("sync_atomic_bool_get") public func sync_atomic_bool_get(_ b: UnsafeMutableRawPointer?) -> Bool {
    AtomicWord.get(word(b, Int32.self, "sync_atomic_bool_get")) != 0
}
@_cdecl("sync_atomic_bool_set") public func sync_atomic_bool_set(_ b: UnsafeMutableRawPointer?, _ value: Bool) {
    AtomicWord.set(word(b, Int32.self, "sync_atomic_bool_set"), value ? 1 : 0)
}
@_cdecl("sync_atomic_bool_compare_and_set") public func sync_atomic_bool_compare_and_set(_ b: UnsafeMutableRawPointer?, _ expected: Bool, _ desired: Bool) -> Bool {
    AtomicWord.compareAndSet(word(b, Int32.self, "sync_atomic_bool_compare_and_set"), expected ? 1 : 0, desired ? 1 : 0)
}
@_cdecl("sync_atomic_bool_get_and_set") public func sync_atomic_bool_get_and_set(_ b: UnsafeMutableRawPointer?, _ value: Bool) -> Bool {
    AtomicWord.getAndSet(word(b, Int32.self, "sync_atomic_bool_get_and_set"), value ? 1 : 0) != 0
}

@_cdecl("sync_atomic_int32_get") public func sync_atomic_int32_get(_ i: UnsafeMutableRawPointer?) -> Int32 {
    AtomicWord.get(word(i, Int32.self, "sync_atomic_int32_get"))
}
@_cdecl("sync_atomic_int32_set") public func sync_atomic_int32_set(_ i: UnsafeMutableRawPointer?, _ value: Int32) {
    AtomicWord.set(word(i, Int32.self, "sync_atomic_int32_set"), value)
}
@_cdecl("sync_atomic_int32_compare_and_set") public func sync_atomic_int32_compare_and_set(_ i: UnsafeMutableRawPointer?, _ expected: Int32, _ desired: Int32) -> Bool {
    AtomicWord.compareAndSet(word(i, Int32.self, "sync_atomic_int32_compare_and_set"), expected, desired)
}
@_cdecl("sync_atomic_int32_get_and_set") public func sync_atomic_int32_get_and_set(_ i: UnsafeMutableRawPointer?, _ value: Int32) -> Int32 {
    AtomicWord.getAndSet(word(i, Int32.self, "sync_atomic_int32_get_and_set"), value)
}
@_cdecl("sync_atomic_int32_get_and_add") public func sync_atomic_int32_get_and_add(_ i: UnsafeMutableRawPointer?, _ delta: Int32) -> Int32 {
    AtomicWord.getAndAdd(word(i, Int32.self, "sync_atomic_int32_get_and_add"), delta)
}
@_cdecl("sync_atomic_int32_get_and_increment") public func sync_atomic_int32_get_and_increment(_ i: UnsafeMutableRawPointer?) -> Int32 {
    AtomicWord.getAndAdd(word(i, Int32.self, "sync_atomic_int32_get_and_increment"), 1)
}
@_cdecl("sync_atomic_int32_get_and_decrement") public func sync_atomic_int32_get_and_decrement(_ i: UnsafeMutableRawPointer?) -> Int32 {
    AtomicWord.getAndAdd(word(i, Int32.self, "sync_atomic_int32_get_and_decrement"), -1)
}
@_cdecl("sync_atomic_int32_add_and_get") public func sync_atomic_int32_add_and_get(_ i: UnsafeMutableRawPointer?, _ delta: Int32) -> Int32 {
    AtomicWord.addAndGet(word(i, Int32.self, "sync_atomic_int32_add_and_get"), delta)
}
@_cdecl("sync_atomic_int32_increment_and_get") public func sync_atomic_int32_increment_and_get(_ i: UnsafeMutableRawPointer?) -> Int32 {
    AtomicWord.addAndGet(word(i, Int32.self, "sync_atomic_int32_increment_and_get"), 1)
}
@_cdecl("sync_atomic_int32_decrement_and_get") public func sync_atomic_int32_decrement_and_get(_ i: UnsafeMutableRawPointer?) -> Int32 {
    AtomicWord.addAndGet(word(i, Int32.self, "sync_atomic_int32_decrement_and_get"), -1)
}

@_cdecl("sync_atomic_int64_get") public func sync_atomic_int64_get(_ i: UnsafeMutableRawPointer?) -> Int64 {
    AtomicWord.get(word(i, Int64.self, "sync_atomic_int64_get"))
}
@_cdecl("sync_atomic_int64_set") public func sync_atomic_int64_set(_ i: UnsafeMutableRawPointer?, _ value: Int64) {
    AtomicWord.set(word(i, Int64.self, "sync_atomic_int64_set"), value)
}
@_cdecl("sync_atomic_int64_compare_and_set") public func sync_atomic_int64_compare_and_set(_ i: UnsafeMutableRawPointer?, _ expected: Int64, _ desired: Int64) -> Bool {
    AtomicWord.compareAndSet(word(i, Int64.self, "sync_atomic_int64_compare_and_set"), expected, desired)
}
@_cdecl("sync_atomic_int64_get_and_set") public func sync_atomic_int64_get_and_set(_ i: UnsafeMutableRawPointer?, _ value: Int64) -> Int64 {
    AtomicWord.getAndSet(word(i, Int64.self, "sync_atomic_int64_get_and_set"), value)
}
@_cdecl("sync_atomic_int64_get_and_add") public func sync_atomic_int64_get_and_add(_ i: UnsafeMutableRawPointer?, _ delta: Int64) -> Int64 {
    AtomicWord.getAndAdd(word(i, Int64.self, "sync_atomic_int64_get_and_add"), delta)
}
@_cdecl("sync_atomic_int64_get_and_increment") public func sync_atomic_int64_get_and_increment(_ i: UnsafeMutableRawPointer?) -> Int64 {
    AtomicWord.getAndAdd(word(i, Int64.self, "sync_atomic_int64_get_and_increment"), 1)
}
@_cdecl("sync_atomic_int64_get_and_decrement") public func sync_atomic_int64_get_and_decrement(_ i: UnsafeMutableRawPointer?) -> Int64 {
    AtomicWord.getAndAdd(word(i, Int64.self, "sync_atomic_int64_get_and_decrement"), -1)
}
@_cdecl("sync_atomic_int64_add_and_get") public func sync_atomic_int64_add_and_get(_ i: UnsafeMutableRawPointer?, _ delta: Int64) -> Int64 {
    AtomicWord.addAndGet(word(i, Int64.self, "sync_atomic_int64_add_and_get"), delta)
}
@_cdecl("sync_atomic_int64_increment_and_get") public func sync_atomic_int64_increment_and_get(_ i: UnsafeMutableRawPointer?) -> Int64 {
    AtomicWord.addAndGet(word(i, Int64.self, "sync_atomic_int64_increment_and_get"), 1)
}
@_cdecl("sync_atomic_int64_decrement_and_get") public func sync_atomic_int64_decrement_and_get(_ i: UnsafeMutableRawPointer?) -> Int64 {
    AtomicWord.addAndGet(word(i, Int64.self, "sync_atomic_int64_decrement_and_get"), -1)
}

// MARK: AtomicReference: {state[2], retain, release}

public typealias ObjectFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void
public typealias KeyCompareFunction = @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32

/// The reference's cell and its two functions (traps on a NULL function: an uninitialized ref).
@inline(__always) func reference(_ r: UnsafeMutableRawPointer?, _ function: StaticString) -> (UnsafeMutableRawPointer, ObjectFunction, ObjectFunction) {
    let r = checked(r, function, alignment: 16)
    guard let retain = r.load(fromByteOffset: 16, as: ObjectFunction?.self),
          let release = r.load(fromByteOffset: 24, as: ObjectFunction?.self) else {
        misuse("\(function): retain/release are NULL (use SYNC_ATOMIC_REF_INIT or sync_atomic_ref_init)")
    }
    return (r, retain, release)
}

@_cdecl("sync_atomic_ref_init") public func sync_atomic_ref_init(_ r: UnsafeMutableRawPointer?, _ retain: ObjectFunction?, _ release: ObjectFunction?) -> Int32 {
    guard let r, Int(bitPattern: r) % 16 == 0, let retain, let release else { return EINVAL }
    r.initializeMemory(as: UInt8.self, repeating: 0, count: 16)
    r.storeBytes(of: retain, toByteOffset: 16, as: ObjectFunction.self)
    r.storeBytes(of: release, toByteOffset: 24, as: ObjectFunction.self)
    return 0
}
@_cdecl("sync_atomic_ref_destroy") public func sync_atomic_ref_destroy(_ r: UnsafeMutableRawPointer?) {
    let (cell, _, release) = reference(r, "sync_atomic_ref_destroy")
    ReferenceCell.destroy(cell, release)
}
@_cdecl("sync_atomic_ref_get") public func sync_atomic_ref_get(_ r: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let (cell, retain, _) = reference(r, "sync_atomic_ref_get")
    return ReferenceCell.get(cell, retain)
}
@_cdecl("sync_atomic_ref_set") public func sync_atomic_ref_set(_ r: UnsafeMutableRawPointer?, _ object: UnsafeMutableRawPointer?) {
    let (cell, retain, release) = reference(r, "sync_atomic_ref_set")
    _ = ReferenceCell.exchange(cell, object, returnOld: false, retain, release)
}
@_cdecl("sync_atomic_ref_get_and_set") public func sync_atomic_ref_get_and_set(_ r: UnsafeMutableRawPointer?, _ object: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let (cell, retain, release) = reference(r, "sync_atomic_ref_get_and_set")
    return ReferenceCell.exchange(cell, object, returnOld: true, retain, release)
}
@_cdecl("sync_atomic_ref_compare_and_set") public func sync_atomic_ref_compare_and_set(_ r: UnsafeMutableRawPointer?, _ expected: UnsafeMutableRawPointer?, _ desired: UnsafeMutableRawPointer?) -> Bool {
    let (cell, retain, release) = reference(r, "sync_atomic_ref_compare_and_set")
    return ReferenceCell.compareAndSet(cell, expected, desired, retain, release)
}

// MARK: Throttler

/// A sync_throttler_t pointer, or nil (the caller returns EINVAL) if NULL or not 8-aligned.
@inline(__always) func throttler(_ t: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let t, Int(bitPattern: t) & 7 == 0 else { return nil }
    return t
}

@_cdecl("sync_throttler_init") public func sync_throttler_init(_ t: UnsafeMutableRawPointer?, _ limit: Int32) -> Int32 {
    guard let t = throttler(t) else { return EINVAL }
    return ThrottlerWord.initialize(t, limit: limit)
}
@_cdecl("sync_throttler_try_enter") @inline(__always) public func sync_throttler_try_enter(_ t: UnsafeMutableRawPointer?) -> Int32 {
    guard let t = throttler(t) else { return EINVAL }
    return ThrottlerWord.tryEnter(t)
}
@_cdecl("sync_throttler_enter") public func sync_throttler_enter(_ t: UnsafeMutableRawPointer?, _ timeout: Int64) -> Int32 {
    guard let t = throttler(t) else { return EINVAL }
    return ThrottlerWord.enter(t, deadline: Deadline.after(nanoseconds: timeout), interruptible: true)
}
@_cdecl("sync_throttler_enter_until") public func sync_throttler_enter_until(_ t: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let t = throttler(t) else { return EINVAL }
    return ThrottlerWord.enter(t, deadline: Deadline.until(deadline), interruptible: false)
}
@_cdecl("sync_throttler_enter_interruptible") public func sync_throttler_enter_interruptible(_ t: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let t = throttler(t) else { return EINVAL }
    let result = interruptible(deadline) { ThrottlerWord.wait(t, deadline: $0, interruptible: true) }
    return result == ETIMEDOUT ? ThrottlerWord.timedOut(t) : result
}
@_cdecl("sync_throttler_exit") public func sync_throttler_exit(_ t: UnsafeMutableRawPointer?) -> Int32 {
    guard let t = throttler(t) else { return EINVAL }
    return ThrottlerWord.exit(t)
}
@_cdecl("sync_throttler_exec") public func sync_throttler_exec(_ t: UnsafeMutableRawPointer?, _ body: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?, _ context: UnsafeMutableRawPointer?) -> Bool {
    guard let t = throttler(t), let body, ThrottlerWord.tryEnter(t) == 0 else { return false }
    body(context)
    _ = ThrottlerWord.exit(t)
    return true
}
@_cdecl("sync_throttler_holders") public func sync_throttler_holders(_ t: UnsafeMutableRawPointer?) -> Int32 {
    guard let t = throttler(t) else { return 0 }
    return ThrottlerWord.holdersCount(t)
}
@_cdecl("sync_throttler_rejections") public func sync_throttler_rejections(_ t: UnsafeMutableRawPointer?) -> Int64 {
    guard let t = throttler(t) else { return 0 }
    return ThrottlerWord.rejectionCount(t)
}

// MARK: Autorelease pools

@_cdecl("sync_autorelease_pool_push") public func sync_autorelease_pool_push() -> Int {
    AutoreleasePool.push()
}
@_cdecl("sync_autorelease_pool_pop") public func sync_autorelease_pool_pop(_ pool: Int) -> Int32 {
    AutoreleasePool.pop(pool)
}
@_cdecl("sync_autorelease_pool_depth") public func sync_autorelease_pool_depth() -> Int {
    AutoreleasePool.depth()
}
@_cdecl("sync_autorelease") public func sync_autorelease(_ object: UnsafeMutableRawPointer?, _ release: ObjectFunction?) -> Int32 {
    guard let release else { return EINVAL }
    return AutoreleasePool.autorelease(object, release)
}

// MARK: Dictionary (an opaque handle: a retained ForeignDictionary)

@inline(__always) func dictionary(_ d: OpaquePointer?) -> ForeignDictionary? {
    d.map { Unmanaged<ForeignDictionary>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
}

func createDictionary(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ retain: ObjectFunction?, _ release: ObjectFunction?,
                      _ compare: KeyCompareFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let out, let retain, let release else { return EINVAL }
    let d = ForeignDictionary(retain: retain, release: release, compare: compare, context: context)
    out.pointee = OpaquePointer(Unmanaged.passRetained(d).toOpaque())
    return 0
}

@_cdecl("sync_dictionary_create") public func sync_dictionary_create(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ retain: ObjectFunction?, _ release: ObjectFunction?) -> Int32 {
    createDictionary(out, retain, release, nil, nil)
}
@_cdecl("sync_dictionary_create_with_object_keys") public func sync_dictionary_create_with_object_keys(
    _ out: UnsafeMutablePointer<OpaquePointer?>?, _ retain: ObjectFunction?, _ release: ObjectFunction?,
    _ compare: KeyCompareFunction?, _ context: UnsafeMutableRawPointer?
) -> Int32 {
    guard compare != nil else { return EINVAL }
    return createDictionary(out, retain, release, compare, context)
}
@_cdecl("sync_dictionary_destroy") public func sync_dictionary_destroy(_ d: OpaquePointer?) {
    guard let d else { return }
    Unmanaged<ForeignDictionary>.fromOpaque(UnsafeRawPointer(d)).release()
}

/// The key argument as a ForeignKey, or nil if it is invalid.
func key(_ d: ForeignDictionary, _ key: UnsafeRawPointer?, _ length: Int, storing: Bool) -> ForeignKey? {
    guard let key else { return length == 0 ? d.key(UnsafeRawPointer(bitPattern: 1)!, 0, storing: false) : nil }
    return d.key(key, length, storing: storing)
}

@_cdecl("sync_dictionary_set") public func sync_dictionary_set(_ d: OpaquePointer?, _ k: UnsafeRawPointer?, _ length: Int, _ value: UnsafeMutableRawPointer?) -> Int32 {
    guard let d = dictionary(d), let value, let k = key(d, k, length, storing: true) else { return EINVAL }
    d.map.updateValue(ForeignObject(retaining: value, d.retain, d.release), forKey: k)
    return 0
}
/// Runs `body` on the dictionary borrowed, not retained: readers on several cores would
/// contend on its reference count.
@inline(__always) func withDictionary<R>(_ d: OpaquePointer, _ body: (ForeignDictionary) -> R) -> R {
    Unmanaged<ForeignDictionary>.fromOpaque(UnsafeRawPointer(d))._withUnsafeGuaranteedRef(body)
}

/// The value +1, or nil (absent). The key must be valid (non-NULL, or NULL with length 0).
@inline(__always) func lookup(_ d: ForeignDictionary, _ k: UnsafeRawPointer?, _ length: Int) -> UnsafeMutableRawPointer? {
    d.get(k ?? UnsafeRawPointer(bitPattern: 1)!, length)
}

@_cdecl("sync_dictionary_get") public func sync_dictionary_get(_ d: OpaquePointer?, _ k: UnsafeRawPointer?, _ length: Int) -> UnsafeMutableRawPointer? {
    guard let d, k != nil || length == 0 else { return nil }
    return withDictionary(d) { lookup($0, k, length) }
}
@_cdecl("sync_dictionary_get_or") public func sync_dictionary_get_or(_ d: OpaquePointer?, _ k: UnsafeRawPointer?, _ length: Int, _ fallback: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let d, k != nil || length == 0 else { return nil }
    return withDictionary(d) { d in
        if let value = lookup(d, k, length) { return value }
        if let fallback { d.retain(fallback) }
        return fallback
    }
}
@_cdecl("sync_dictionary_remove") public func sync_dictionary_remove(_ d: OpaquePointer?, _ k: UnsafeRawPointer?, _ length: Int) -> Int32 {
    guard let d = dictionary(d), let k = key(d, k, length, storing: false) else { return EINVAL }
    return d.map.removeValue(forKey: k) == nil ? ENOENT : 0
}
@_cdecl("sync_dictionary_count") public func sync_dictionary_count(_ d: OpaquePointer?) -> Int {
    dictionary(d)?.map.count ?? 0
}
@_cdecl("sync_dictionary_keys") public func sync_dictionary_keys(_ d: OpaquePointer?, _ each: (@convention(c) (UnsafeRawPointer?, Int, UnsafeMutableRawPointer?) -> Void)?, _ context: UnsafeMutableRawPointer?) -> Int {
    guard let d = dictionary(d) else { return 0 }
    let keys = d.map.keys
    guard let each else { return keys.count }
    for k in keys {
        if let object = k.object { each(object, k.objectHash, context) } else { each(k.bytes.baseAddress, k.bytes.count, context) }
    }
    return keys.count
}
