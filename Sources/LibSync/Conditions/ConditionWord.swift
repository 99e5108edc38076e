import Glibc
import Synchronization

/// A condition variable in two words of caller memory (8 bytes, zero = ready):
///   word 0: process-shared mode: a sequence number, bumped by every signal that finds waiters
///           (the futex word); process-private mode: unused (0);
///   word 1: how many threads are waiting (bits 0-29; bit 30 is never set, as no system runs
///           2^30 threads), and `processSharedFlag`.
///
/// Process-private (the default): each waiter queues a `Waiter` in its own memory (`WaitQueue`)
/// and sleeps on its own futex word; a signal takes waiters from the head of the queue and wakes
/// exactly those. So a wait returns 0 only when a signal took it, a signal for n wakes exactly
/// min(n, waiting) threads, oldest first, and a thread that starts waiting after a signal is not
/// woken by it. Process-shared (the queue cannot live in shared memory): the waiter sleeps on
/// the sequence, so a wait may also return 0 when a signal meant for another waiter moved it
/// before this one slept (a spurious wakeup, as POSIX allows); a timeout or an interruption
/// never returns 0. Either way a signal with no waiter is one load.
///
/// A wait goes through `enter` (queued; the caller then releases its lock), `sleep` (any number
/// of times: until signalled, a deadline, or an interruption) and `leave` (out of the queue
/// unless a signal took it: says which). Interpreters keep the `Waiter` across calls, so that a
/// signal that comes between two slices of their wait is not lost.
@usableFromInline package enum ConditionWord {
    @inlinable package static func count(_ base: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt32>> {
        Words(base)[1]
    }

    @inlinable static func isShared(_ base: UnsafeMutableRawPointer) -> Bool {
        count(base).pointee.load(ordering: .relaxed) & processSharedFlag != 0
    }

    /// Initialises the variable (not needed for zeroed memory unless `shared`). Threads waiting
    /// on it are forgotten: only for a variable nobody waits on (or after fork, in the child).
    /// 0, or (`shared`) EBUSY, changing nothing, if it counts waiters (the attach rule, Words.swift).
    @discardableResult
    package static func initialize(_ base: UnsafeMutableRawPointer, shared: Bool) -> Int32 {
        let words = Words(base)
        if shared && words.countsWaiters { return EBUSY }
        words[0].pointee.store(0, ordering: .relaxed)
        words[1].pointee.store(shared ? processSharedFlag : 0, ordering: .releasing)
        return 0
    }

    /// Initialises a condition variable at `base` and the mutex its waiters use at `mutex`
    /// (sync_condition_t): 0, or (`shared`) EBUSY, changing neither, if either is in use.
    package static func initialize(_ base: UnsafeMutableRawPointer, mutex: UnsafeMutableRawPointer, shared: Bool) -> Int32 {
        if shared && Words(base).countsWaiters { return EBUSY }
        let result = MutexWord.initialize(mutex, shared: shared, unowned: false, robust: false)
        if result != 0 { return result }
        return initialize(base, shared: shared)
    }

    // MARK: The three steps of a wait

    /// Enters the idle `waiter` in the wait for a signal. The caller holds the lock that
    /// guards its predicate, and releases it after this returns. 0, or EINVAL (the waiter is
    /// not idle, or the variable's word is impossible).
    @inlinable
    package static func enter(_ base: UnsafeMutableRawPointer, _ waiter: Waiter) -> Int32 {
        let count = count(base)
        let value = count.pointee.load(ordering: .relaxed)
        guard waiter.isIdle, value & impossibleWaiterCount == 0 else { return EINVAL }
        if value & processSharedFlag == 0 {
            WaitQueue.enqueue(waiter, key: base, count: count)
            return 0
        }
        // Counted before reading the sequence: a signaller that bumps the sequence after this
        // read sees the count (both sequentially consistent), so no signal is lost.
        waiter.key = base
        count.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        waiter.sequence = Words(base)[0].pointee.load(ordering: .sequentiallyConsistent)
        waiter.state.pointee.store(Waiter.queued, ordering: .relaxed)
        return 0
    }

    /// Sleeps until a signal takes `waiter` (entered), the monotonic `deadline` (ns, < 0: none)
    /// passes, or (if `interruptible`) a signal handler runs. 0 (signalled), ETIMEDOUT, EINTR, or
    /// EINVAL if the waiter is idle. Only a signal returns 0 (in process-shared mode, possibly one
    /// meant for another waiter); the waiter stays entered either way, until `leave`.
    @inlinable
    package static func sleep(_ waiter: Waiter, deadline: Int64, interruptible: Bool) -> Int32 {
        guard let key = waiter.key, !waiter.isIdle else { return EINVAL }
        guard isShared(key) else { return WaitQueue.sleep(waiter, deadline: deadline, interruptible: interruptible) }
        while waiter.state.pointee.load(ordering: .relaxed) != Waiter.signalled {
            let result = Futex.wait(Words(key).address(0), expected: waiter.sequence, deadline: deadline, shared: true)
            if result == 0 {
                waiter.state.pointee.store(Waiter.signalled, ordering: .relaxed)
            } else if result == ETIMEDOUT || (result == EINTR && interruptible) {
                return result
            }
        }
        return 0
    }

    /// Ends the wait of an entered `waiter`, which is idle again afterwards: 0 if a signal took
    /// it (also one that raced a timeout: the signal is not lost), ETIMEDOUT if not (it has left
    /// the queue), EINVAL if it was idle.
    @inlinable
    package static func leave(_ waiter: Waiter) -> Int32 {
        guard let key = waiter.key, !waiter.isIdle else { return EINVAL }
        guard isShared(key) else { return WaitQueue.leave(waiter, count: count(key)) ? 0 : ETIMEDOUT }
        let signalled = waiter.state.pointee.load(ordering: .relaxed) == Waiter.signalled
        Words(key).uncount()
        waiter.state.pointee.store(Waiter.idle, ordering: .relaxed)
        return signalled ? 0 : ETIMEDOUT
    }

    // MARK: Waiting in one call

    /// Enters, releases the caller's lock through `unlock`, sleeps until signalled, the
    /// monotonic `deadline` (ns, < 0: none) passes or (if `interruptible`) a signal handler runs,
    /// leaves, then takes the lock again through `relock`. Returns 0 (signalled), ETIMEDOUT or
    /// EINTR; or EINVAL (an impossible word) without releasing the lock; or what `relock` returns
    /// if not 0 (a robust lock's EOWNERDEAD, taken, or ENOTRECOVERABLE, not taken).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool,
                             unlock: () -> Void, relock: () -> Int32) -> Int32 {
        Waiter.withTemporary { waiter in
            let entered = enter(base, waiter)
            guard entered == 0 else { return entered }
            unlock()
            let slept = sleep(waiter, deadline: deadline, interruptible: interruptible)
            let left = leave(waiter)
            let relocked = relock()
            return relocked != 0 ? relocked : left == 0 ? 0 : slept
        }
    }

    /// One slice of a wait that outlives the call, for callers that must return to run signal
    /// handlers (interpreters): with an idle `waiter`, checks `holds` (EPERM if false, without
    /// waiting), enters and releases the lock; then sleeps until `deadline` or `sliceEnd` (< 0:
    /// none), whichever comes first. Returns EINTR at the end of the slice or when a signal handler ran:
    /// the waiter then stays entered and the lock released, and the caller calls again with the
    /// same waiter (a signal meanwhile is not lost) or, to give up, with a deadline in the past.
    /// Otherwise leaves, takes the lock again and returns 0 (signalled) or ETIMEDOUT, or what
    /// `relock` returns if not 0 (as `wait`).
    @inlinable
    package static func waitSlice(_ base: UnsafeMutableRawPointer, _ waiter: Waiter, deadline: Int64, sliceEnd: Int64,
                                  holds: () -> Bool, unlock: () -> Void, relock: () -> Int32) -> Int32 {
        if waiter.isIdle {
            guard holds() else { return EPERM }
            let entered = enter(base, waiter)
            guard entered == 0 else { return entered }
            unlock()
        } else if waiter.key != base {
            return EINVAL
        }
        let end = Deadline.earliest(deadline, sliceEnd)
        let slept = sleep(waiter, deadline: end, interruptible: true)
        if slept == EINTR || (slept == ETIMEDOUT && end != deadline) { return EINTR }
        let left = leave(waiter)
        let relocked = relock()
        return relocked != 0 ? relocked : left == 0 ? 0 : ETIMEDOUT
    }

    // MARK: Signalling

    /// Wakes the oldest waiter, if any.
    @inlinable @discardableResult
    package static func signal(_ base: UnsafeMutableRawPointer) -> Int32 { wake(base, count: 1) }

    /// Wakes every waiter.
    @inlinable @discardableResult
    package static func broadcast(_ base: UnsafeMutableRawPointer) -> Int32 { wake(base, count: UInt32.max) }

    /// Wakes up to `count` waiters (process-private: exactly min(count, waiting), oldest first).
    /// 0, or EINVAL (an impossible word; nobody is woken).
    @inlinable @discardableResult
    package static func wake(_ base: UnsafeMutableRawPointer, count wanted: UInt32) -> Int32 {
        let words = Words(base)
        let waiting = words[1].pointee.load(ordering: .sequentiallyConsistent)
        if waiting & impossibleWaiterCount != 0 { return EINVAL }
        if waiting & ~processSharedFlag == 0 || wanted == 0 { return 0 }
        if waiting & processSharedFlag == 0 {
            // A task's waiter among those taken: the waker may not be watching its word.
            if WaitQueue.wake(key: base, limit: wanted, count: words[1]) != 0 { AsyncCondition.tookWaiters() }
        } else {
            words[0].pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
            Futex.wake(words.address(0), count: Int32(clamping: wanted), shared: true)
        }
        return 0
    }
}

// MARK: Waiting with the library's locks

extension ConditionWord {
    /// Waits with `mutex` held by the caller (unowned mode: held at all): releases it while
    /// asleep and holds it again on return, whatever the result. Returns 0 (signalled),
    /// ETIMEDOUT, EINTR (`interruptible` only); EPERM if the caller does not hold the mutex, or
    /// EINVAL (an impossible word), both without waiting. A robust mutex may also give
    /// EOWNERDEAD (held again, from a dead holder) or ENOTRECOVERABLE (not held).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, mutex: MutexWord.Word, deadline: Int64,
                             interruptible: Bool) -> Int32 {
        guard holds(mutex) else { return EPERM }
        return wait(base, deadline: deadline, interruptible: interruptible,
                    unlock: { _ = MutexWord.unlock(mutex) }, relock: { relock(mutex) })
    }

    /// As `wait(_:mutex:...)` with a recursive lock held at any depth: it is released entirely
    /// while asleep, and taken again at the same depth (not at all on ENOTRECOVERABLE).
    @inlinable
    package static func wait(_ base: UnsafeMutableRawPointer, recursiveLock: RecursiveWord.Memory, deadline: Int64,
                             interruptible: Bool) -> Int32 {
        let depth = RecursiveWord.depthHeldByCaller(recursiveLock)
        guard depth > 0 else { return EPERM }
        return wait(base, deadline: deadline, interruptible: interruptible,
                    unlock: { release(recursiveLock) },
                    relock: { reacquire(recursiveLock, depth: depth) })
    }

    /// `waitSlice` with `mutex` (see `wait(_:mutex:...)`).
    @inlinable
    package static func waitSlice(_ base: UnsafeMutableRawPointer, _ waiter: Waiter, mutex: MutexWord.Word,
                                  deadline: Int64, sliceEnd: Int64) -> Int32 {
        waitSlice(base, waiter, deadline: deadline, sliceEnd: sliceEnd,
                  holds: { holds(mutex) }, unlock: { _ = MutexWord.unlock(mutex) }, relock: { relock(mutex) })
    }

    /// `waitSlice` with a recursive lock held at any depth (kept in the waiter meanwhile).
    @inlinable
    package static func waitSlice(_ base: UnsafeMutableRawPointer, _ waiter: Waiter, recursiveLock: RecursiveWord.Memory,
                                  deadline: Int64, sliceEnd: Int64) -> Int32 {
        waitSlice(base, waiter, deadline: deadline, sliceEnd: sliceEnd,
                  holds: {
                      waiter.depth = RecursiveWord.depthHeldByCaller(recursiveLock)
                      return waiter.depth > 0
                  },
                  unlock: { release(recursiveLock) },
                  relock: { reacquire(recursiveLock, depth: waiter.depth) })
    }

    /// Wakes up to `count` waiters, after checking that the caller holds `mutex` (as `wait`
    /// does): EPERM, waking nobody, if it does not. Python's Condition.notify rule, in one call.
    @inlinable
    package static func wake(_ base: UnsafeMutableRawPointer, holding mutex: MutexWord.Word, count: UInt32) -> Int32 {
        guard holds(mutex) else { return EPERM }
        return wake(base, count: count)
    }

    /// Takes the mutex again after a wait, without spinning first: the signaller usually still
    /// holds the mutex, and a spinner would compete with it for the word.
    /// Returns 0, or for a robust mutex EOWNERDEAD (taken) or ENOTRECOVERABLE (not taken).
    @inlinable
    static func relock(_ mutex: MutexWord.Word) -> Int32 { MutexWord.lock(mutex) }

    @inlinable
    static func release(_ recursiveLock: RecursiveWord.Memory) { RecursiveWord.release(recursiveLock) }

    /// Takes a recursive lock again after a wait, at `depth` if it was taken (0 or EOWNERDEAD);
    /// returns what `relock` does.
    @inlinable
    static func reacquire(_ recursiveLock: RecursiveWord.Memory, depth: UInt32) -> Int32 {
        RecursiveWord.reacquire(recursiveLock, depth: depth)
    }

    /// Whether the caller may wait with this mutex: it holds it (owned mode) or it is held
    /// (unowned mode, where any thread may release).
    @inlinable
    static func holds(_ mutex: MutexWord.Word) -> Bool {
        let value = mutex.pointee.load(ordering: .relaxed)
        return value & MutexWord.unowned != 0 ? MutexWord.isLocked(mutex) : MutexWord.isOwnedByCaller(mutex)
    }
}
