import CSyncShim
import Glibc
import Synchronization

/// Run-once: the safe form of double-checked locking (whose naive form may publish a
/// half-initialized value). One 32-bit
/// word: 0 not run, `done`, or the running thread's id (with `sleepers` when others wait).
/// The fast path is one acquiring load: when it reads `done`, the initializer's writes are
/// visible (its `end` stored `done` with release ordering). A failed run (an error, an
/// exception) returns the word to 0 and the next caller runs it.
@usableFromInline package enum OnceWord {
    @usableFromInline package typealias Word = UnsafeMutablePointer<Atomic<UInt32>>
    @usableFromInline package static let done: UInt32 = 0x7FFF_FFFF
    @usableFromInline static let sleepers: UInt32 = 1 << 31

    /// The outcome of `begin` that tells the caller to run the initializer, then call `end`.
    @usableFromInline package static let run: Int32 = -1

    /// 0 when the initializer has completed (now or before); `run` when the caller must run it
    /// and then call `end`; EDEADLK when the caller is running it (recursion); EINTR if
    /// `interruptible` and a signal interrupts the wait for another thread's run; EINVAL if the
    /// word holds a value the library never writes (see `isImpossible`).
    @inlinable @inline(__always)
    package static func begin(_ word: Word, interruptible: Bool = false) -> Int32 {
        if word.pointee.load(ordering: .acquiring) == done { return 0 }
        return beginSlow(word, interruptible: interruptible)
    }

    @usableFromInline @inline(never)
    static func beginSlow(_ word: Word, interruptible: Bool) -> Int32 {
        let me = threadID()
        while true {
            let value = word.pointee.load(ordering: .acquiring)
            if value == done { return 0 }
            if value == 0 {
                if word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged { return run }
                continue
            }
            if value & ~sleepers == me { return EDEADLK }
            if isImpossible(value) { return EINVAL }
            if value & sleepers == 0 {
                if !word.pointee.compareExchange(expected: value, desired: value | sleepers, ordering: .acquiring).exchanged { continue }
            }
            let result = Futex.wait(UnsafeMutableRawPointer(word), expected: value | sleepers, shared: false)
            if result == EINTR && interruptible { return EINTR }
        }
    }

    /// Whether `value` is no state of the word: sleepers but no runner, or a runner that is no
    /// thread id (`done` with sleepers included). Waiting on such a word would never end.
    @inlinable
    static func isImpossible(_ value: UInt32) -> Bool {
        let runner = value & ~sleepers
        return value != done && value != 0 && (runner == 0 || runner >= threadIDLimit)
    }

    /// Ends the caller's run: `completed` publishes it (every later `begin` returns 0); otherwise
    /// the word returns to "not run" and one waiter (or a later caller) runs it instead.
    /// 0, EPERM if the caller is not running it, or EINVAL (an impossible word: unchanged).
    @inlinable @discardableResult
    package static func end(_ word: Word, completed: Bool) -> Int32 {
        let me = threadID()
        var value = word.pointee.load(ordering: .relaxed)
        while true {
            if value & ~sleepers != me { return isImpossible(value) ? EINVAL : EPERM }
            let (exchanged, now) = word.pointee.compareExchange(
                expected: value, desired: completed ? done : 0, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        if value & sleepers != 0 {
            Futex.wake(UnsafeMutableRawPointer(word), count: Int32.max, shared: false)
        }
        return 0
    }

    /// Runs `body` once per word, however many threads race; every caller returns after it ran.
    /// If `body` throws, the error reaches its caller and the next caller runs it again.
    @inlinable
    package static func perform<E: Error>(_ word: Word, _ body: () throws(E) -> Void) throws(E) {
        let state = begin(word)
        if state == 0 { return }
        require(state == run, state == EINVAL ? "once: the once word holds an impossible value (memory corrupted?)"
                                : "once: the initializer called itself (it would wait for itself)")
        do { try body() } catch { end(word, completed: false); throw error }
        end(word, completed: true)
    }
}

/// Runs a closure exactly once, however many threads race to run it (`pthread_once`,
/// `dispatch_once`); every caller returns after it has run and sees its effects.
///
///     let setup = SyncOnce()
///     setup { loadTables() }
public final class SyncOnce: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 4)

    public init() {}

    /// Whether the closure has run to completion.
    public var isDone: Bool { atomic(memory.raw, as: UInt32.self).pointee.load(ordering: .acquiring) == OnceWord.done }

    /// Runs `body` unless a call has already completed. If it throws, the error propagates and
    /// a later call runs it again.
    @inlinable
    public func callAsFunction<E: Error>(_ body: () throws(E) -> Void) throws(E) {
        try OnceWord.perform(atomic(memory.raw, as: UInt32.self), body)
    }
}
