import Glibc
import Synchronization

/// A condition variable in two words of caller memory (8 bytes, zero = ready):
///   word 0: a sequence number, bumped by every signal that finds waiters (the futex word);
///   word 1: how many threads are waiting (bits 0-30), and `processSharedFlag`.
/// A waiter counts itself, reads the sequence, releases its lock and sleeps unless the sequence
/// has moved; a signal bumps the sequence only when someone waits, so a signal with no waiter is
/// one load. Wakeups may be spurious (a waiter can also consume a signal meant for a later one):
/// callers re-check their predicate, as POSIX requires.
@usableFromInline package enum ConditionWord {

    @inlinable static func isShared(_ words: Words) -> Bool {
        words[1].pointee.load(ordering: .relaxed) & processSharedFlag != 0
    }

    /// Initialises the variable (not needed for zeroed memory unless `shared`).
    package static func initialize(_ base: UnsafeMutableRawPointer, shared: Bool) {
        let words = Words(base)
        words[0].pointee.store(0, ordering: .relaxed)
        words[1].pointee.store(shared ? processSharedFlag : 0, ordering: .releasing)
    }

    /// Releases the caller's lock through `unlock`, sleeps until signalled, the monotonic
    /// `deadline` (ns, < 0: none) passes or (if `interruptible`) a signal handler runs, then
    /// takes the lock again through `relock`. Returns 0, ETIMEDOUT or EINTR.
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool,
                             unlock: () -> Void, relock: () -> Void) -> Int32 {
        let words = Words(base)
        words[1].pointee.add(1, ordering: .sequentiallyConsistent)
        let sequence = words[0].pointee.load(ordering: .sequentiallyConsistent)
        unlock()
        var result: Int32
        repeat {
            result = Futex.wait(words.address(0), expected: sequence, deadline: deadline, shared: isShared(words))
        } while result == EINTR && !interruptible && words[0].pointee.load(ordering: .relaxed) == sequence
        words[1].pointee.subtract(1, ordering: .relaxed)
        relock()
        // A signal that raced the timeout or the interruption still counts: report it.
        if words[0].pointee.load(ordering: .relaxed) != sequence { return 0 }
        return result == ETIMEDOUT || result == EINTR ? result : 0
    }

    /// Wakes at least one waiter, if any.
    @inlinable
    package static func signal(_ base: UnsafeMutableRawPointer) { wake(base, count: 1) }

    /// Wakes every waiter.
    @inlinable
    package static func broadcast(_ base: UnsafeMutableRawPointer) { wake(base, count: Int32.max) }

    /// Wakes up to `count` waiters, if any.
    @inlinable
    package static func wake(_ base: UnsafeMutableRawPointer, count: Int32) {
        let words = Words(base)
        let waiting = words[1].pointee.load(ordering: .sequentiallyConsistent)
        if waiting & ~processSharedFlag == 0 { return }
        words[0].pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        Futex.wake(words.address(0), count: count, shared: waiting & processSharedFlag != 0)
    }
}

// MARK: Waiting with the library's locks

extension ConditionWord {
    /// Waits with `mutex` held by the caller (unowned mode: held at all): releases it while
    /// asleep and holds it again on return, whatever the result. Returns 0 (signalled, or
    /// spuriously woken), ETIMEDOUT, EINTR (`interruptible` only), or EPERM — without waiting —
    /// if the caller does not hold the mutex. A robust mutex may also give EOWNERDEAD (held
    /// again, from a dead holder) or ENOTRECOVERABLE (not held).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, mutex: MutexWord.Word, deadline: Int64,
                             interruptible: Bool) -> Int32 {
        guard holds(mutex) else { return EPERM }
        var relocked: Int32 = 0
        let result = wait(base, deadline: deadline, interruptible: interruptible,
                          unlock: { _ = MutexWord.unlock(mutex) },
                          relock: { relocked = relock(mutex) })
        return relocked != 0 ? relocked : result
    }

    /// As `wait(_:mutex:...)` with a recursive lock held at any depth: it is released entirely
    /// while asleep, and taken again at the same depth.
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, recursiveLock: RecursiveWord.Memory, deadline: Int64,
                             interruptible: Bool) -> Int32 {
        let depth = RecursiveWord.depthHeldByCaller(recursiveLock)
        guard depth > 0 else { return EPERM }
        let mutex = RecursiveWord.word(recursiveLock)
        var relocked: Int32 = 0
        let result = wait(base, deadline: deadline, interruptible: interruptible,
                          unlock: {
                              RecursiveWord.depth(recursiveLock).pointee.store(0, ordering: .relaxed)
                              _ = MutexWord.unlock(mutex)
                          },
                          relock: {
                              relocked = relock(mutex)
                              if relocked != ENOTRECOVERABLE {
                                  RecursiveWord.depth(recursiveLock).pointee.store(depth, ordering: .relaxed)
                              }
                          })
        return relocked != 0 ? relocked : result
    }

    /// Wakes up to `count` waiters, after checking that the caller holds `mutex` (as `wait`
    /// does): EPERM, waking nobody, if it does not. Python's Condition.notify rule, in one call.
    @inlinable
    package static func wake(_ base: UnsafeMutableRawPointer, holding mutex: MutexWord.Word, count: Int32) -> Int32 {
        guard holds(mutex) else { return EPERM }
        wake(base, count: count)
        return 0
    }

    /// Takes the mutex again after a wait. (Spinning here or before sleeping was measured: it
    /// made a two-thread hand-off 1.7-2.5x slower, as the spinner competes with the signaller.)
    /// Returns 0, or for a robust mutex EOWNERDEAD (taken) or ENOTRECOVERABLE (not taken).
    @inlinable
    static func relock(_ mutex: MutexWord.Word) -> Int32 { MutexWord.lock(mutex) }

    /// Whether the caller may wait with this mutex: it holds it (owned mode) or it is held
    /// (unowned mode, where any thread may release).
    @inlinable
    static func holds(_ mutex: MutexWord.Word) -> Bool {
        let value = mutex.pointee.load(ordering: .relaxed)
        return value & MutexWord.unowned != 0 ? MutexWord.isLocked(mutex) : MutexWord.isOwnedByCaller(mutex)
    }
}
