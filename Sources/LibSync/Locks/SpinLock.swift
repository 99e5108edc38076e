import CSyncShim
import Glibc
import Synchronization

/// The library's spin lock: one 32-bit word holding 0 or the holder's kernel thread id. No
/// futex: unlock is one CAS and never a system call. Contended, a locker spins (`SpinWait`:
/// exponential backoff, then yields), then sleeps in growing naps (up to 1 ms), so a
/// descheduled holder never makes its waiters burn the CPU it needs (OSSpinLock's livelock).
/// Works unchanged in memory shared by processes (kernel thread ids are unique).
@usableFromInline package enum SpinWord {
    @usableFromInline package typealias Word = UnsafeMutablePointer<Atomic<UInt32>>
    @usableFromInline static let longestNap: Int64 = 1_000_000

    /// 0, EBUSY if held (also by the caller), or EINVAL if the word names no thread (a value
    /// the library never writes: it would never be released).
    @inlinable @inline(__always)
    package static func tryLock(_ word: Word) -> Int32 {
        let (exchanged, seen) = word.pointee.compareExchange(expected: 0, desired: threadID(), ordering: .acquiring)
        return exchanged ? 0 : seen < threadIDLimit ? EBUSY : EINVAL
    }

    /// 0; ETIMEDOUT once `deadline` (monotonic ns, < 0: none) passes; EDEADLK if the caller
    /// holds it; EINTR if `interruptible` and a signal interrupts a nap; EINVAL if the word
    /// names no thread.
    @inlinable @inline(__always)
    package static func lock(_ word: Word, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let me = threadID()
        if word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged { return 0 }
        return lockSlow(word, me, deadline: deadline, interruptible: interruptible)
    }

    /// 0, EPERM if the caller does not hold it, or EINVAL if the word names no thread.
    @inlinable @inline(__always)
    package static func unlock(_ word: Word) -> Int32 {
        let (exchanged, seen) = word.pointee.compareExchange(expected: threadID(), desired: 0, ordering: .releasing)
        return exchanged ? 0 : seen < threadIDLimit ? EPERM : EINVAL
    }

    @usableFromInline @inline(never)
    static func lockSlow(_ word: Word, _ me: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        let seen = word.pointee.load(ordering: .relaxed)
        if seen == me { return EDEADLK }
        if seen >= threadIDLimit { return EINVAL }
        @inline(__always) func attempt() -> Bool {
            word.pointee.load(ordering: .relaxed) == 0
                && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged
        }
        var spin = SpinWait()
        while spin.spin() {
            if attempt() { return 0 }
        }
        var nap: Int64 = 1_000
        while true {
            if word.pointee.load(ordering: .relaxed) >= threadIDLimit { return EINVAL }
            if Deadline.hasPassed(deadline) { return attempt() ? 0 : ETIMEDOUT }
            var request = timespec(tv_sec: 0, tv_nsec: Int(nap))
            if nanosleep(&request, nil) != 0 && errno == EINTR && interruptible { return attempt() ? 0 : EINTR }
            if attempt() { return 0 }
            nap = min(nap * 2, longestNap)
        }
    }
}

/// The library's spin lock (see `SpinWord`): for critical sections of a few instructions.
/// Owner-checked like `SyncMutex`.
public final class SyncSpinLock: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 4)
    @usableFromInline var word: SpinWord.Word { atomic(memory.raw, as: UInt32.self) }

    public init() {}

    @inlinable public func lock() throws(LockError) { _ = try taken(SpinWord.lock(word)) }
    @inlinable public func tryLock() -> Bool { SpinWord.tryLock(word) == 0 }
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(SpinWord.lock(word, deadline: Deadline.after(timeout)))
    }
    @inlinable public func unlock() throws(LockError) { _ = try taken(SpinWord.unlock(word)) }

    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = SpinWord.lock(word)
        require(result == 0, "SyncSpinLock.withLock: the calling thread already holds this spin lock")
        defer { _ = SpinWord.unlock(word) }
        return try body()
    }
}
