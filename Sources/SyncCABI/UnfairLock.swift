import LibSync

// os/lock.h and os/lock_private.h, exported with Apple's names. Each function calls the Swift
// core's function of the same name (Sources/LibSync/Locks/UnfairLock.swift); a NULL lock stops
// the program with a message naming the function (Apple declares the argument nonnull). The
// lock is a raw pointer here: @_cdecl cannot name a pointer to a Swift struct. The hot entry
// points are @inline(__always): their body is then the C symbol itself, not a jump to it.

@inline(__always)
func unfairLock(_ lock: UnsafeMutableRawPointer?, _ function: StaticString) -> os_unfair_lock_t {
    guard let lock else { nullUnfairLock(function) }
    return lock.assumingMemoryBound(to: os_unfair_lock.self)
}

@inline(never)
func nullUnfairLock(_ function: StaticString) -> Never {
    fatalError("BUG IN CLIENT OF LIBSYNC: \(function): the lock argument is NULL")
}

@_cdecl("os_unfair_lock_lock") @inline(__always) public func c_os_unfair_lock_lock(_ lock: UnsafeMutableRawPointer?) {
    os_unfair_lock_lock(unfairLock(lock, "os_unfair_lock_lock"))
}

@_cdecl("os_unfair_lock_lock_with_flags") @inline(__always)
public func c_os_unfair_lock_lock_with_flags(_ lock: UnsafeMutableRawPointer?, _ flags: UInt32) {
    os_unfair_lock_lock_with_flags(unfairLock(lock, "os_unfair_lock_lock_with_flags"), os_unfair_lock_flags_t(rawValue: flags))
}

/// Apple's SPI (os/lock_private.h): the options are a superset of the flags' bits.
@_cdecl("os_unfair_lock_lock_with_options") @inline(__always)
public func c_os_unfair_lock_lock_with_options(_ lock: UnsafeMutableRawPointer?, _ options: UInt32) {
    os_unfair_lock_lock_with_flags(unfairLock(lock, "os_unfair_lock_lock_with_options"), os_unfair_lock_flags_t(rawValue: options))
}

@_cdecl("os_unfair_lock_trylock") @inline(__always) public func c_os_unfair_lock_trylock(_ lock: UnsafeMutableRawPointer?) -> Bool {
    os_unfair_lock_trylock(unfairLock(lock, "os_unfair_lock_trylock"))
}

@_cdecl("os_unfair_lock_unlock") @inline(__always) public func c_os_unfair_lock_unlock(_ lock: UnsafeMutableRawPointer?) {
    os_unfair_lock_unlock(unfairLock(lock, "os_unfair_lock_unlock"))
}

@_cdecl("os_unfair_lock_assert_owner") public func c_os_unfair_lock_assert_owner(_ lock: UnsafeMutableRawPointer?) {
    os_unfair_lock_assert_owner(unfairLock(lock, "os_unfair_lock_assert_owner"))
}

@_cdecl("os_unfair_lock_assert_not_owner") public func c_os_unfair_lock_assert_not_owner(_ lock: UnsafeMutableRawPointer?) {
    os_unfair_lock_assert_not_owner(unfairLock(lock, "os_unfair_lock_assert_not_owner"))
}
