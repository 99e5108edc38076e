import Glibc

// Per-thread, nestable autorelease pools for C (Objective-C's "retain and autorelease"):
// `autorelease(object, release)` defers one release until the innermost pool of the calling
// thread drains. Draining releases in reverse order (the last autoreleased first); popping an
// outer pool drains the inner ones too; a thread that exits with pools open drains them (a
// pthread key destructor); autoreleasing with no pool open is refused, so the caller knows
// it still owns the reference. Swift and Python manage memory themselves and do not use this.

@usableFromInline package enum AutoreleasePool {
    /// One thread's pools: pending (object, release) pairs and where each open pool begins.
    final class Stack {
        var pending: [(UnsafeMutableRawPointer?, ReferenceCell.Function)] = []
        var starts: [Int] = []

        /// Releases pending objects down to `start`; releases may autorelease more (into the
        /// pool being drained), so it loops until none is left above `start`.
        func drain(to start: Int) {
            while pending.count > start {
                let (object, release) = pending.removeLast()
                release(object)
            }
        }
    }

    nonisolated(unsafe) static var key: pthread_key_t = {
        var key = pthread_key_t()
        // Thread exit: drain every open pool, innermost first, then free the stack.
        let status = pthread_key_create(&key) { raw in
            guard let raw else { return }
            let stack = Unmanaged<Stack>.fromOpaque(raw).takeRetainedValue()
            stack.drain(to: 0)
        }
        require(status == 0, "AutoreleasePool: pthread_key_create failed (\(status))")
        return key
    }()

    static func stack(create: Bool) -> Stack? {
        if let raw = pthread_getspecific(key) { return Unmanaged<Stack>.fromOpaque(raw).takeUnretainedValue() }
        guard create else { return nil }
        let stack = Stack()
        pthread_setspecific(key, Unmanaged.passRetained(stack).toOpaque())
        return stack
    }

    /// Opens a pool on the calling thread; returns its depth (1 = outermost), the token `pop` takes.
    package static func push() -> Int {
        let stack = stack(create: true)!
        stack.starts.append(stack.pending.count)
        return stack.starts.count
    }

    /// Drains and closes the pool `depth` and every pool opened inside it: 0, or EINVAL if
    /// `depth` is not a pool open on the calling thread.
    package static func pop(_ depth: Int) -> Int32 {
        guard let stack = stack(create: false), depth >= 1, depth <= stack.starts.count else { return EINVAL }
        let start = stack.starts[depth - 1]
        stack.drain(to: start)
        stack.starts.removeSubrange((depth - 1)...)
        return 0
    }

    /// Defers one `release(object)` to the innermost pool: 0, or EPERM if no pool is open on
    /// the calling thread (nothing is taken: the caller still owns the reference).
    package static func autorelease(_ object: UnsafeMutableRawPointer?, _ release: ReferenceCell.Function) -> Int32 {
        guard let stack = stack(create: false), !stack.starts.isEmpty else { return EPERM }
        stack.pending.append((object, release))
        return 0
    }

    /// Pools open on the calling thread.
    package static func depth() -> Int { stack(create: false)?.starts.count ?? 0 }
}
