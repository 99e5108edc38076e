import Glibc
import Synchronization

/// A counting semaphore in four words of caller memory (16 bytes):
///   word 0: the count (the futex word);
///   word 1: how many threads are waiting (bits 0-29), and `processSharedFlag`;
///   word 2: the bound, if word 3 is 1: a signal that would raise the count above it fails;
///   word 3: 1 if bounded, 0 if not.
/// Zeroed memory is an unbounded, process-private semaphore with count 0. Words no semaphore
/// can hold (word 3 above 1, a count above the bound, bit 30 of word 1) make waits and signals
/// return EINVAL and change nothing.
@usableFromInline package enum SemaphoreWord {
    /// Initialises a semaphore with `value`, at most `limit` if given. EINVAL if value > limit;
    /// (`shared`) EBUSY, changing nothing, if threads wait on it (the attach rule, Words.swift).
    package static func initialize(_ base: UnsafeMutableRawPointer, value: UInt32, limit: UInt32?, shared: Bool) -> Int32 {
        if let limit, value > limit { return EINVAL }
        let words = Words(base)
        if shared && words.countsWaiters { return EBUSY }
        words[0].pointee.store(value, ordering: .relaxed)
        bound(base).pointee.store(limit ?? 0, ordering: .relaxed)
        words[3].pointee.store(limit == nil ? 0 : 1, ordering: .relaxed)
        words[1].pointee.store(shared ? processSharedFlag : 0, ordering: .releasing)
        return 0
    }

    /// Word 2: the bound of a bounded semaphore.
    @inlinable
    package static func bound(_ base: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt32>> { Words(base)[2] }

    /// The bound (UInt32.max if unbounded), or nil if the words are impossible.
    @inlinable
    static func validLimit(_ words: Words) -> UInt32? {
        let bounded = words[3].pointee.load(ordering: .relaxed)
        if bounded > 1 || words.hasImpossibleCount { return nil }
        let limit = bounded == 1 ? bound(words.base).pointee.load(ordering: .relaxed) : UInt32.max
        return words[0].pointee.load(ordering: .relaxed) <= limit ? limit : nil
    }

    /// Takes one unit if the count is positive, without blocking: 0, EAGAIN (no unit), or
    /// EINVAL (impossible words: nothing taken).
    @inlinable
    package static func tryTake(_ base: UnsafeMutableRawPointer) -> Int32 {
        if validLimit(Words(base)) == nil { return EINVAL }
        return takeUnit(base) ? 0 : EAGAIN
    }

    /// Takes one unit if the count is positive, without blocking; false also for impossible
    /// words (`tryTake` tells the two apart).
    @inlinable
    package static func tryWait(_ base: UnsafeMutableRawPointer) -> Bool { tryTake(base) == 0 }

    /// Takes one unit if the count is positive (the words checked by the caller).
    @inlinable
    static func takeUnit(_ base: UnsafeMutableRawPointer) -> Bool {
        let count = Words(base)[0]
        var value = count.pointee.load(ordering: .relaxed)
        while value > 0 {
            let (exchanged, current) = count.pointee.weakCompareExchange(
                expected: value, desired: value - 1, successOrdering: .acquiring, failureOrdering: .relaxed)
            if exchanged { return true }
            value = current
        }
        return false
    }

    /// Takes one unit, sleeping while the count is 0 until the monotonic `deadline` (ns, < 0:
    /// none). Returns 0, ETIMEDOUT, EINTR when `interruptible` and a signal handler ran, or
    /// EINVAL (impossible words: nothing taken).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        let first = tryTake(base)
        if first != EAGAIN { return first }
        return waitContended(base, deadline: deadline, interruptible: interruptible)
    }

    @usableFromInline
    static func waitContended(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        let words = Words(base)
        if validLimit(words) == nil { return EINVAL }
        return words.sleep(whileWordIs: 0, deadline: deadline, interruptible: interruptible) { takeUnit(base) }
    }

    /// Adds `count` units and wakes as many waiters. EOVERFLOW (and no change) if that would pass
    /// the bound or 2^32 - 1; EINVAL (and no change) if the words are impossible.
    @inlinable
    package static func signal(_ base: UnsafeMutableRawPointer, count: UInt32 = 1) -> Int32 {
        let words = Words(base)
        guard let limit = validLimit(words) else { return EINVAL }
        var value = words[0].pointee.load(ordering: .relaxed)
        while true {
            let (sum, overflow) = value.addingReportingOverflow(count)
            if overflow || sum > limit { return EOVERFLOW }
            let (exchanged, current) = words[0].pointee.weakCompareExchange(
                expected: value, desired: sum, successOrdering: .sequentiallyConsistent, failureOrdering: .relaxed)
            if exchanged { break }
            value = current
        }
        words.wake(count: Int32(clamping: count))
        return 0
    }

    /// The current count (a snapshot).
    @inlinable
    package static func value(_ base: UnsafeMutableRawPointer) -> UInt32 {
        Words(base)[0].pointee.load(ordering: .relaxed)
    }
}
