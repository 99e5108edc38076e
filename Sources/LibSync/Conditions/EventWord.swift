import Glibc
import Synchronization

/// An event (a flag threads can wait for) in two words of caller memory (8 bytes):
///   word 0: 1 when set, 0 when clear (the futex word);
///   word 1: how many threads are waiting (bits 0-30), and `processSharedFlag`.
/// Zeroed memory is a clear, process-private event.
@usableFromInline package enum EventWord {
    package static func initialize(_ base: UnsafeMutableRawPointer, set: Bool, shared: Bool) {
        let words = Words(base)
        words[0].pointee.store(set ? 1 : 0, ordering: .relaxed)
        words[1].pointee.store(shared ? processSharedFlag : 0, ordering: .releasing)
    }

    @inlinable
    package static func isSet(_ base: UnsafeMutableRawPointer) -> Bool {
        Words(base)[0].pointee.load(ordering: .acquiring) != 0
    }

    /// Sets the flag and wakes every waiter.
    @inlinable
    package static func set(_ base: UnsafeMutableRawPointer) {
        let words = Words(base)
        words[0].pointee.store(1, ordering: .sequentiallyConsistent)
        let waiting = words[1].pointee.load(ordering: .sequentiallyConsistent)
        if waiting & ~processSharedFlag != 0 {
            Futex.wake(words.address(0), count: Int32.max, shared: waiting & processSharedFlag != 0)
        }
    }

    @inlinable
    package static func clear(_ base: UnsafeMutableRawPointer) {
        Words(base)[0].pointee.store(0, ordering: .releasing)
    }

    /// Waits until the flag is set or the monotonic `deadline` (ns, < 0: none) passes. Returns 0
    /// (set), ETIMEDOUT, or EINTR when `interruptible` and a signal handler ran.
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        if isSet(base) { return 0 }
        return waitContended(base, deadline: deadline, interruptible: interruptible)
    }

    @usableFromInline
    static func waitContended(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        Words(base).sleepWhileZero(deadline: deadline, interruptible: interruptible) { isSet(base) }
    }
}
