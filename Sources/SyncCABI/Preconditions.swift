// The C ABI's argument checks. The OSAtomic functions have no error channel, so, like Apple's,
// their preconditions are documented in the header; a debug build of the library traps on a
// violation with a message naming the function, a release build checks nothing (these are
// `assert`s, compiled out with -O).

@inline(__always)
func checked<T>(_ pointer: UnsafeMutablePointer<T>?, _ function: StaticString,
                alignment: Int = MemoryLayout<T>.alignment) -> UnsafeMutablePointer<T> {
    assert(pointer != nil, "\(function): the pointer argument is NULL")
    assert(Int(bitPattern: pointer) % alignment == 0,
           "\(function): the pointer \(pointer!) is not \(alignment)-byte aligned")
    return pointer.unsafelyUnwrapped
}

@inline(__always)
func checked(_ pointer: UnsafeMutableRawPointer?, _ function: StaticString,
             alignment: Int = 1) -> UnsafeMutableRawPointer {
    assert(pointer != nil, "\(function): the pointer argument is NULL")
    assert(Int(bitPattern: pointer) % alignment == 0,
           "\(function): the pointer \(pointer!) is not \(alignment)-byte aligned")
    return pointer.unsafelyUnwrapped
}
