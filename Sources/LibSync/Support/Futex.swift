import CSyncShim
import Glibc

/// Sleeping and waking on a 32-bit word: the kernel half of every blocking primitive.
@usableFromInline
enum Futex {
    /// Sleeps while `*word == expected`, until woken, or until `deadline` (monotonic ns, < 0:
    /// none). Returns 0, ETIMEDOUT or EINTR; callers re-check their word either way.
    @usableFromInline
    static func wait(_ word: UnsafeMutableRawPointer, expected: UInt32, deadline: Int64 = -1,
                     shared: Bool) -> Int32 {
        sync_futex_wait(word.assumingMemoryBound(to: UInt32.self), expected, deadline, shared ? 1 : 0)
    }

    /// How a sliced sleep ended: a wakeup (or a changed word), the deadline, a signal, or the
    /// end of a slice before the deadline, which callers treat as a wakeup.
    @usableFromInline enum SlicedWake: Equatable {
        case woken, timedOut, interrupted, sliceEnded

        @inlinable init(_ code: Int32) { self = code == ETIMEDOUT ? .timedOut : code == EINTR ? .interrupted : .woken }

        /// The errno code of a sleep that ends the wait: ETIMEDOUT or EINTR; else 0.
        @inlinable var code: Int32 { self == .timedOut ? ETIMEDOUT : self == .interrupted ? EINTR : 0 }

        /// Whether the waiter gives up: the deadline passed, or a signal came and it is `interruptible`.
        @inlinable func endsWait(interruptible: Bool) -> Bool { self == .timedOut || (self == .interrupted && interruptible) }
    }

    /// `wait`, except that a `shared` sleeper never sleeps longer than
    /// `Deadline.sharedWaitSlice`: a slice that ends before `deadline` returns `.sliceEnded`,
    /// which callers treat as a wakeup (they re-validate their word, and take the lock if it
    /// is free). Invariant it keeps: a wakeup consumed by a process that then dies leaves the
    /// other waiters asleep at most one slice. Private sleepers: exactly `wait`.
    @inlinable @inline(__always)
    static func waitSliced(_ word: UnsafeMutableRawPointer, expected: UInt32, deadline: Int64,
                           shared: Bool) -> SlicedWake {
        if !shared { return SlicedWake(wait(word, expected: expected, deadline: deadline, shared: false)) }
        return waitSharedSlice(word, expected: expected, deadline: deadline)
    }

    @usableFromInline @inline(never)
    static func waitSharedSlice(_ word: UnsafeMutableRawPointer, expected: UInt32, deadline: Int64) -> SlicedWake {
        let end = monotonicNow() &+ Deadline.sharedWaitSlice
        if Deadline.hasPassed(deadline, now: end) { return SlicedWake(wait(word, expected: expected, deadline: deadline, shared: true)) }
        let result = SlicedWake(wait(word, expected: expected, deadline: end, shared: true))
        return result == .timedOut ? .sliceEnded : result
    }

    /// Wakes up to `count` sleepers on `word`; returns how many were woken.
    @usableFromInline @discardableResult
    static func wake(_ word: UnsafeMutableRawPointer, count: Int32 = 1, shared: Bool) -> Int32 {
        sync_futex_wake(word.assumingMemoryBound(to: UInt32.self), count, shared ? 1 : 0)
    }

    /// How many threads sleep on `word` now, by the kernel's count (waking none); nil if the
    /// kernel cannot say. A snapshot: a thread about to sleep, or just woken, is not counted.
    @usableFromInline
    static func sleepers(_ word: UnsafeMutableRawPointer, shared: Bool) -> Int32? {
        let count = sync_futex_sleepers(word.assumingMemoryBound(to: UInt32.self), shared ? 1 : 0)
        return count < 0 ? nil : count
    }
}

/// The monotonic clock, in nanoseconds: the only clock the library's deadlines use.
@usableFromInline
package func monotonicNow() -> Int64 { sync_monotonic_now_ns() }

/// The calling thread's kernel id (never 0), cached per thread: lock words store it as owner.
/// Read here rather than through the shim's inline sync_thread_id(), which the @_cdecl entry
/// points call out of line (the Swift compiler marks those calls noinline).
@inlinable @inline(__always)
package func threadID() -> UInt32 {
    let id = sync_thread_id_cache
    return id != 0 ? id : sync_thread_id_slow()
}

/// Kernel thread ids are below 2^22 (Linux's PID_MAX_LIMIT on 64-bit systems): a word that
/// names a holder at or above it was not written by the library.
@usableFromInline let threadIDLimit: UInt32 = 1 << 22

/// The cached id, or 0 before the thread's first threadID(): fast paths that see 0 leave the
/// asking to their slow path, so that they need no call and no saved registers.
@inlinable @inline(__always)
package func cachedThreadID() -> UInt32 { sync_thread_id_cache }
