import CSyncShim
import Glibc
import Synchronization

/// The library's spin lock: one 32-bit word. No futex: unlock is one CAS and never a system
/// call. Contended, a locker spins (`SpinWait`: exponential backoff, then yields), then sleeps
/// in growing naps (up to 1 ms), so a descheduled holder never makes its waiters burn the CPU
/// it needs (OSSpinLock's livelock).
///
///     bits 0-21  holder: 0 free, else the holder's kernel thread id (ids fit: pid_max <= 2^22)
///     bit 30     SHARED mode: the lock is in memory processes share
///
/// (The mutex word's holder field is wider, and the rwlock's SHARED bit is 31: `MutexWord` says
/// why.)
///
/// Any other bit set is a word the library never writes (EINVAL). A private lock is 0 when
/// free, so its fast paths are one CAS each (0 -> tid, tid -> 0), and its holder is the
/// thread whose id it holds. A SHARED word cannot say so alone: the kernel gives a dead
/// holder's id to a new thread, in any process. As with a shared mutex (`MutexWord`), such a
/// word is the caller's only if it holds the caller's id and the caller's `LockOwner` list has
/// its address; a SHARED word is never 0, so it always takes the slow paths, where the list is
/// kept.
@usableFromInline package enum SpinWord {
    @usableFromInline package typealias Word = UnsafeMutablePointer<Atomic<UInt32>>
    @usableFromInline static let longestNap: Int64 = 1_000_000
    @usableFromInline static let holderMask: UInt32 = threadIDLimit - 1
    @usableFromInline package static let shared: UInt32 = 1 << 30

    /// The initial word of a spin lock, private or in memory processes share.
    package static func initial(shared isShared: Bool) -> UInt32 { isShared ? shared : 0 }

    /// Initializes the spin lock at `word`, a new lock: the lock-order checker forgets what it
    /// knew of the memory, as for the other locks. 0, or (`shared`) EBUSY, changing nothing, if
    /// it is held (the attach rule, Words.swift; a word no spin lock holds is repaired).
    package static func initialize(_ word: Word, shared isShared: Bool) -> Int32 {
        let result = initializeWord(word, to: initial(shared: isShared), shared: isShared) {
            $0 & holderMask != 0 && !isImpossible($0)
        }
        if result == 0 { LockOrder.forget(word) }
        return result
    }

    /// Whether the library never writes `value` (a holder that is no thread, an unknown bit).
    @inlinable @inline(__always)
    static func isImpossible(_ value: UInt32) -> Bool { value & ~shared >= threadIDLimit }

    /// 0, EBUSY if held (also by the caller), or EINVAL if the word names no thread (a value
    /// the library never writes: it would never be released).
    @inlinable @inline(__always)
    package static func tryLock(_ word: Word) -> Int32 {
        let (exchanged, seen) = word.pointee.compareExchange(expected: 0, desired: threadID(), ordering: .acquiring)
        if exchanged { LockOrder.acquired(word, .spinLock, tried: true); return 0 }
        return seen < threadIDLimit ? EBUSY : LockOrder.tried(word, .spinLock, tryLockSlow(word, seen))
    }

    /// 0; ETIMEDOUT once `deadline` (monotonic ns, < 0: none) passes; EDEADLK if the caller
    /// holds it; EINTR if `interruptible` and a signal interrupts a nap; EINVAL if the word
    /// names no thread.
    @inlinable @inline(__always)
    package static func lock(_ word: Word, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let me = threadID()
        if word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged {
            LockOrder.acquired(word, .spinLock)
            return 0
        }
        return LockOrder.waited(word, .spinLock) { lockSlow(word, me, deadline: deadline, interruptible: interruptible) }
    }

    /// 0, EPERM if the caller does not hold it, or EINVAL if the word names no thread.
    @inlinable @inline(__always)
    package static func unlock(_ word: Word) -> Int32 {
        LockOrder.releasing(word, .spinLock)
        let (exchanged, seen) = word.pointee.compareExchange(expected: threadID(), desired: 0, ordering: .releasing)
        return exchanged ? 0 : seen < threadIDLimit ? EPERM : unlockSlow(word, seen)
    }

    /// Whether the caller, `me`, holds the lock whose word reads `value` (see the type's notes).
    @usableFromInline
    static func heldByCaller(_ word: Word, _ value: UInt32, _ me: UInt32) -> Bool {
        guard value & holderMask == me else { return false }
        return value & shared == 0 || LockOwner.holds(UnsafeMutableRawPointer(word))
    }

    /// A SHARED word, or an impossible one: 0, EBUSY, or EINVAL.
    @usableFromInline @inline(never)
    static func tryLockSlow(_ word: Word, _ seen: UInt32) -> Int32 {
        if isImpossible(seen) { return EINVAL }
        guard seen & holderMask == 0,
              word.pointee.compareExchange(expected: seen, desired: seen | threadID(), ordering: .acquiring).exchanged
        else { return isImpossible(word.pointee.load(ordering: .relaxed)) ? EINVAL : EBUSY }
        LockOwner.add(UnsafeMutableRawPointer(word))
        return 0
    }

    /// A SHARED word, or an impossible one: 0 (the caller's, struck off its list), EPERM, or
    /// EINVAL. Only the holder changes the holder field, so the release succeeds.
    @usableFromInline @inline(never)
    static func unlockSlow(_ word: Word, _ seen: UInt32) -> Int32 {
        if isImpossible(seen) { return EINVAL }
        guard seen & holderMask == threadID(), LockOwner.remove(UnsafeMutableRawPointer(word)) else { return EPERM }
        word.pointee.store(shared, ordering: .releasing)
        return 0
    }

    @usableFromInline @inline(never)
    static func lockSlow(_ word: Word, _ me: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        let seen = word.pointee.load(ordering: .relaxed)
        if isImpossible(seen) { return EINVAL }
        if heldByCaller(word, seen, me) { return EDEADLK }
        var mode = seen & shared
        @inline(__always) func attempt() -> Bool {
            word.pointee.load(ordering: .relaxed) == mode
                && word.pointee.compareExchange(expected: mode, desired: mode | me, ordering: .acquiring).exchanged
        }
        @inline(__always) func taken() -> Int32 {
            if mode != 0 { LockOwner.add(UnsafeMutableRawPointer(word)) }
            return 0
        }
        var spin = SpinWait()
        while spin.spin() {
            if attempt() { return taken() }
        }
        var nap: Int64 = 1_000
        while true {
            let value = word.pointee.load(ordering: .relaxed)
            if isImpossible(value) { return EINVAL }
            mode = value & shared
            if Deadline.hasPassed(deadline) { return attempt() ? taken() : ETIMEDOUT }
            var request = timespec(tv_sec: 0, tv_nsec: Int(nap))
            if nanosleep(&request, nil) != 0 && errno == EINTR && interruptible { return attempt() ? taken() : EINTR }
            if attempt() { return taken() }
            nap = min(nap * 2, longestNap)
        }
    }
}

/// The library's spin lock (see `SpinWord`): for critical sections of a few instructions.
/// Owner-checked like `SyncMutex`.
public final class SyncSpinLock: @unchecked Sendable {
    @usableFromInline let memory: LockMemory
    @usableFromInline var word: SpinWord.Word { atomic(memory.raw, as: UInt32.self) }

    public init() { memory = LockMemory(size: 4) }

    /// A spin lock in the caller's memory, such as a MAP_SHARED mapping that processes share
    /// (options `.shared`: its owner checks then hold across processes, also for a thread id the
    /// kernel gave a dead holder's thread): 4 bytes, 4-aligned, that outlive this object. As
    /// `SyncMutex.init(at:options:initialize:)`: `initialize: true` in the process that creates
    /// it, `false` (the same options) in those that attach. Throws `.other(EINVAL)` for
    /// misaligned memory, `.robust` (not a spin lock's option), or (`initialize: false`) memory
    /// whose lock has other options; `.other(EBUSY)` (`.shared`, `initialize: true`), changing
    /// nothing, if the lock there is held.
    public init(at memory: UnsafeMutableRawPointer, options: LockOptions, initialize: Bool) throws(LockError) {
        guard !options.contains(.robust) else { throw .other(EINVAL) }
        self.memory = try makeLockMemory(memory, size: 4, options: options, initialize: initialize) {
            SpinWord.initialize(atomic($0, as: UInt32.self), shared: options.contains(.shared))
        }
    }

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
