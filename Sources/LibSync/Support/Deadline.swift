import Glibc

/// The library's one time model. A deadline is a point of the CLOCK_MONOTONIC clock in
/// nanoseconds, carried as an `Int64` through the core and the C ABI, with one meaning in every
/// family (sync.h states it for C):
///
/// - a negative deadline is none: the wait lasts until it succeeds (or, where allowed, a signal
///   interrupts it);
/// - a deadline at or before now (0 included) is one try: the operation succeeds if it can at
///   once, else returns ETIMEDOUT without sleeping;
/// - relative timeouts become deadlines here, saturating at `Int64.max` (never: no deadline
///   that far is reached). A negative `Duration` is one try; a negative C `int64_t` timeout is
///   none, as a negative deadline.
///
/// Deadlines never change with the wall clock.
@usableFromInline package enum Deadline {
    /// No deadline.
    @usableFromInline package static let none: Int64 = -1

    /// The longest an interruptible wait sleeps before it returns EINTR, so that a caller whose
    /// signal handlers only set a flag (an interpreter) runs them at least this often. The C
    /// ABI's `_interruptible` forms slice so in the process's main thread (sync/locks.h).
    package static let interruptSlice: Int64 = 50_000_000

    /// The longest a waiter of a process-shared lock (mutex, recursive lock, rwlock, semaphore,
    /// condition lock, event) sleeps before it re-validates the word (`Futex.waitSliced`). A
    /// process can die between being woken and taking the lock, and with it the wakeup: the
    /// others, still asleep, find the lock free at their next slice instead of never. Private
    /// waiters sleep until woken: a thread cannot die alone.
    @usableFromInline package static let sharedWaitSlice: Int64 = 200_000_000

    /// The deadline `timeout` from now: a negative timeout is now (one try).
    @inlinable
    package static func after(_ timeout: Duration) -> Int64 {
        let (seconds, attoseconds) = timeout.components
        if seconds < 0 || attoseconds < 0 { return monotonicNow() }
        return after(nanoseconds: UInt64(nanoseconds(timeout)))
    }

    /// `duration` in whole nanoseconds (truncated toward zero), saturating at `Int64.min` and
    /// `Int64.max`.
    @inlinable
    package static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let whole = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if whole.overflow { return seconds < 0 ? .min : .max }
        let sum = whole.partialValue.addingReportingOverflow(attoseconds / 1_000_000_000)
        return sum.overflow ? (seconds < 0 ? .min : .max) : sum.partialValue
    }

    /// The deadline `timeout` ns from now (C's unsigned `timeout_ns`).
    @inlinable @inline(__always)
    package static func after(nanoseconds timeout: UInt64) -> Int64 {
        let now = monotonicNow()
        return timeout >= UInt64(Int64.max - now) ? Int64.max : now + Int64(timeout)
    }

    /// The deadline `timeout` ns from now; a negative timeout is none (C's signed `timeout_ns`).
    @inlinable
    package static func after(nanoseconds timeout: Int64) -> Int64 {
        timeout < 0 ? none : after(nanoseconds: UInt64(timeout))
    }

    /// A caller's absolute deadline (C's `deadline_ns`) in the one form the core takes: every
    /// negative value is `none`.
    @inlinable @inline(__always)
    package static func until(_ deadline: Int64) -> Int64 { deadline < 0 ? none : deadline }

    /// Whether `deadline` is set and reached at `now`.
    @inlinable @inline(__always)
    package static func hasPassed(_ deadline: Int64, now: Int64) -> Bool { deadline >= 0 && now >= deadline }

    /// Whether `deadline` is set and reached now (reads the clock only if it is set).
    @inlinable @inline(__always)
    package static func hasPassed(_ deadline: Int64) -> Bool { deadline >= 0 && monotonicNow() >= deadline }

    /// The earlier of two deadlines (none only if both are none).
    @inlinable @inline(__always)
    package static func earliest(_ a: Int64, _ b: Int64) -> Int64 {
        a < 0 ? until(b) : b < 0 ? a : min(a, b)
    }

    /// The nanoseconds left until `deadline` at `now`: nil for none, 0 once it has passed.
    @inlinable
    package static func remaining(_ deadline: Int64, now: Int64) -> Int64? {
        deadline < 0 ? nil : max(0, deadline - now)
    }
}
