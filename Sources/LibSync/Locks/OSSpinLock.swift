import CSyncShim
import Glibc
import Synchronization

/// A lock in one 32-bit word of caller memory: 0 free, 1 held, 2 held and someone may sleep.
/// Apple's OSSpinLock below, and the internal locks of the barrier, the wait queues and
/// `synchronized`. Acquire spins (`SpinWait`: backoff, then yields), then sleeps on a futex, so
/// it never burns a core while the holder is descheduled (the livelock that got Apple's
/// OSSpinLock deprecated). Unfair: a running thread may take the lock before a woken one
/// (throughput over order).
/// `shared` selects the futex namespace for memory mapped by several processes.
@usableFromInline package enum LockWord {
    @inlinable @inline(__always)
    package static func tryLock(_ word: UnsafeMutablePointer<Atomic<Int32>>) -> Bool {
        word.pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    }

    @inlinable @inline(__always)
    package static func lock(_ word: UnsafeMutablePointer<Atomic<Int32>>, shared: Bool) {
        if !tryLock(word) { lockContended(word, shared: shared) }
    }

    @inlinable @inline(__always)
    package static func unlock(_ word: UnsafeMutablePointer<Atomic<Int32>>, shared: Bool) {
        if word.pointee.exchange(0, ordering: .releasing) == 2 {
            Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: shared)
        }
    }

    @usableFromInline @inline(never)
    static func lockContended(_ word: UnsafeMutablePointer<Atomic<Int32>>, shared: Bool) {
        var spin = SpinWait()
        repeat {
            // Read before writing, so waiters do not bounce the cache line between cores.
            if word.pointee.load(ordering: .relaxed) == 0 && tryLock(word) { return }
        } while spin.spin()
        // Mark the word "held, sleepers" and sleep until the holder's unlock wakes us. We may
        // take the lock in state 2 without sleepers: that costs one spurious wake, never a loss.
        while word.pointee.exchange(2, ordering: .acquiring) != 0 {
            _ = Futex.wait(UnsafeMutableRawPointer(word), expected: 2, shared: shared)
        }
    }
}

// MARK: Apple's OSSpinLock (a lock word shared with any process that maps it).

/// Apple's `OSSpinLock`: an `Int32`, 0 (`OS_SPINLOCK_INIT`) when free.
public typealias OSSpinLock = Int32
public let OS_SPINLOCK_INIT: OSSpinLock = 0

/// Takes the lock if it is free; never blocks. Returns whether it was taken.
@inlinable public func OSSpinLockTry(_ lock: some OSAtomicAddress<OSSpinLock>) -> Bool {
    LockWord.tryLock(atomic(lock.address))
}
/// Takes the lock: spins briefly, then yields and sleeps until it is free.
@inlinable public func OSSpinLockLock(_ lock: some OSAtomicAddress<OSSpinLock>) {
    LockWord.lock(atomic(lock.address), shared: true)
}
/// Releases the lock (no owner check, as Apple's).
@inlinable public func OSSpinLockUnlock(_ lock: some OSAtomicAddress<OSSpinLock>) {
    LockWord.unlock(atomic(lock.address), shared: true)
}
