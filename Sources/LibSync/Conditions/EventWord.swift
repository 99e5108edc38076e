import Glibc
import Synchronization

/// An event (a flag threads can wait for) in two words of caller memory (8 bytes):
///   word 0: the flag (bit 0, 1 when set) and a generation (bits 1-31), bumped by every `set`
///           of a clear event (the futex word);
///   word 1: how many threads are waiting (bits 0-29), and `processSharedFlag`.
/// Zeroed memory is a clear, process-private event.
///
/// A waiter remembers the word it saw while the event was clear (its mark) and returns once the
/// word differs: `clear` does not change a clear word, so any difference is a `set`. So every
/// thread waiting when `set` is called returns true, even if `clear` follows at once (the
/// generation has moved; a waiter would have to sleep through 2^31 set/clear pairs to miss it).
/// A waiter that waits in several calls (an interpreter's slices) passes its mark to each.
@usableFromInline package enum EventWord {
    @usableFromInline package static let flag: UInt32 = 1

    /// Word 0: the flag and the generation (the futex word).
    @inlinable
    package static func state(_ base: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt32>> { Words(base)[0] }

    /// 0, or (`shared`) EBUSY, changing nothing, if threads wait on it (the attach rule, Words.swift).
    @discardableResult
    package static func initialize(_ base: UnsafeMutableRawPointer, set: Bool, shared: Bool) -> Int32 {
        let words = Words(base)
        if shared && words.countsWaiters { return EBUSY }
        words[0].pointee.store(set ? flag : 0, ordering: .relaxed)
        words[1].pointee.store(shared ? processSharedFlag : 0, ordering: .releasing)
        return 0
    }

    /// The word now: the flag in bit 0, and a mark for `wait(since:)` when it is clear.
    @inlinable
    package static func mark(_ base: UnsafeMutableRawPointer) -> UInt32 {
        state(base).pointee.load(ordering: .acquiring)
    }

    @inlinable
    package static func isSet(_ base: UnsafeMutableRawPointer) -> Bool { mark(base) & flag != 0 }

    /// Sets the flag (a new generation, if it was clear) and wakes every waiter. 0, or EINVAL
    /// (an impossible word 1; the flag is set but nobody is woken).
    @inlinable @discardableResult
    package static func set(_ base: UnsafeMutableRawPointer) -> Int32 {
        let words = Words(base)
        var value = words[0].pointee.load(ordering: .relaxed)
        while value & flag == 0 {
            let (exchanged, now) = words[0].pointee.weakCompareExchange(
                expected: value, desired: (value &+ 2) | flag,
                successOrdering: .sequentiallyConsistent, failureOrdering: .relaxed)
            if exchanged { break }
            value = now
        }
        let waiting = words[1].pointee.load(ordering: .sequentiallyConsistent)
        if waiting & impossibleWaiterCount != 0 { return EINVAL }
        if waiting & ~processSharedFlag != 0 {
            Futex.wake(words.address(0), count: Int32.max, shared: waiting & processSharedFlag != 0)
        }
        return 0
    }

    @inlinable
    package static func clear(_ base: UnsafeMutableRawPointer) {
        Words(base)[0].pointee.bitwiseAnd(~flag, ordering: .releasing)
    }

    /// Waits until the flag is set or the monotonic `deadline` (ns, < 0: none) passes. Returns 0
    /// (set), ETIMEDOUT, EINTR when `interruptible` and a signal handler ran, or EINVAL (an
    /// impossible word 1).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        wait(base, since: mark(base), deadline: deadline, interruptible: interruptible)
    }

    /// As `wait`, and returns 0 as soon as the event is set or has been set at any moment since
    /// `mark` was read (even if it is clear again).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, since mark: UInt32, deadline: Int64,
                             interruptible: Bool) -> Int32 {
        if mark & flag != 0 || self.mark(base) != mark { return 0 }
        return waitContended(base, since: mark, deadline: deadline, interruptible: interruptible)
    }

    @usableFromInline
    static func waitContended(_ base: UnsafeMutableRawPointer, since mark: UInt32, deadline: Int64,
                              interruptible: Bool) -> Int32 {
        let words = Words(base)
        return words.sleep(whileWordIs: mark, deadline: deadline, interruptible: interruptible) {
            words[0].pointee.load(ordering: .sequentiallyConsistent) != mark
        }
    }
}
