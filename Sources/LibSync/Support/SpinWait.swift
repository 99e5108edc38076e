import CSyncShim
import Glibc

/// The library's one spin/backoff policy (after parking_lot's `SpinWait`), used by every
/// primitive that waits for another thread to change a word before it parks: the mutex, the
/// OSSpinLock word, the read-write lock, the spin lock and IsolatedValue.
///
/// A waiter calls `spin()` after each failed look at its word. The first `pauseRounds` calls
/// back off exponentially on the CPU (call n executes 2^n spin-wait hints, PAUSE on x86, YIELD
/// on ARM), reading nothing meanwhile, so that the waiter seldom pulls the cache line from the
/// thread it waits for; the next `yieldRounds` calls give the CPU to another runnable thread
/// (sched_yield), as the thread it waits for may be descheduled. After that `spin()` returns
/// false: the caller parks (sleeps on its futex, or in the spin lock's growing naps) and
/// starts a new `SpinWait` when it wakes.
///
/// Parameters, in one place: they count rounds, not time, and hold no figure of any CPU.
@usableFromInline package struct SpinWait {
    /// Rounds of exponential CPU backoff: 2, 4, 8 hints.
    @usableFromInline package static let pauseRounds = 3
    /// Rounds of sched_yield after them, before the caller parks.
    @usableFromInline package static let yieldRounds = 7

    @usableFromInline var round = 0

    @inlinable package init() {}

    /// One round of backoff: true after pausing or yielding, false (doing nothing) once the
    /// rounds are spent and the caller should park.
    @inlinable
    package mutating func spin() -> Bool {
        if round >= Self.pauseRounds + Self.yieldRounds { return false }
        round += 1
        if round <= Self.pauseRounds {
            for _ in 0..<(1 << round) { sync_cpu_relax() }
        } else {
            sched_yield()
        }
        return true
    }

    /// `spin()` for a waiter that can look cheaply (one relaxed load of the word it waits on):
    /// the pause rounds look after every hint and end at once when `ready()` is true, so that
    /// a word freed for a moment (a holder that takes it again soon) is seen in one hint, not
    /// at the round's end. The same rounds and the same number of hints at most.
    @inlinable
    package mutating func spin(until ready: () -> Bool) -> Bool {
        if round >= Self.pauseRounds + Self.yieldRounds { return false }
        round += 1
        if round <= Self.pauseRounds {
            for _ in 0..<(1 << round) {
                sync_cpu_relax()
                if ready() { break }
            }
        } else {
            sched_yield()
        }
        return true
    }

    /// One round of CPU backoff only, false once the pause rounds are spent: for a waiter whose
    /// wait may be long (a writer waiting for readers to leave), which a yield could stretch by
    /// a whole time slice of another runnable thread.
    @inlinable
    package mutating func spinWithoutYield() -> Bool {
        if round >= Self.pauseRounds { return false }
        round += 1
        for _ in 0..<(1 << round) { sync_cpu_relax() }
        return true
    }

    /// One round for a waiter that has nothing to park on (the thread it waits for never wakes
    /// it): the same backoff, then a yield at every call once the rounds are spent.
    @inlinable
    package mutating func spinOrYield() {
        if !spin() { sched_yield() }
    }

    /// Starts the rounds again (after the waiter made progress or woke from parking).
    @inlinable
    package mutating func reset() { round = 0 }
}
