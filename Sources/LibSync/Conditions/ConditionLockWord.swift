import Glibc
import Synchronization

/// A condition lock (Foundation's NSConditionLock) in 24 bytes of caller memory: a lock that
/// carries an integer condition; threads can wait to take it until the condition has a value.
///   word 0: an owner-checked `MutexWord`;  words 1-2: a `ConditionWord`;  word 3: zero;
///   bytes 16-23: the condition (Int64), read and written with the mutex held.
/// Every unlock broadcasts, so that each waiter re-checks the value it waits for (waiters for
/// different values share one condition variable; a broadcast with no waiter is one load).
/// Words no condition lock can hold (a mutex word with a bit outside the holder, SHARED and
/// WAITERS: UNOWNED, ROBUST or its states; a nonzero word 3; an impossible waiter count) make
/// every operation but `initialize` return EINVAL and change nothing.
@usableFromInline package enum ConditionLockWord {
    @inlinable static func mutex(_ base: UnsafeMutableRawPointer) -> MutexWord.Word { atomic(base, as: UInt32.self) }
    @inlinable static func condition(_ base: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer { base + 4 }
    @inlinable static func value(_ base: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int64>> {
        atomic(base + 16, as: Int64.self)
    }

    /// 0, or (`shared`) EBUSY, changing nothing, if the lock is held or waited for (the attach
    /// rule, Words.swift; words no condition lock holds are repaired).
    @discardableResult
    package static func initialize(_ base: UnsafeMutableRawPointer, condition value: Int64, shared: Bool) -> Int32 {
        if shared && isPossible(base)
            && (MutexWord.isInUse(mutex(base).pointee.load(ordering: .acquiring)) || Words(condition(base)).countsWaiters) {
            return EBUSY
        }
        mutex(base).pointee.store(MutexWord.initial(shared: shared, unowned: false), ordering: .relaxed)
        Words(condition(base))[0].pointee.store(0, ordering: .relaxed)  // ConditionWord.initialize's words
        Words(condition(base))[1].pointee.store(shared ? processSharedFlag : 0, ordering: .relaxed)
        Words(base)[3].pointee.store(0, ordering: .relaxed)
        self.value(base).pointee.store(value, ordering: .releasing)
        return 0
    }

    @inlinable
    static func isPossible(_ base: UnsafeMutableRawPointer) -> Bool {
        let words = Words(base)
        return words[0].pointee.load(ordering: .relaxed) & ~(MutexWord.holderMask | MutexWord.shared | MutexWord.waiters) == 0
            && words[3].pointee.load(ordering: .relaxed) == 0 && !Words(condition(base)).hasImpossibleCount
    }

    /// Takes the lock whatever the condition: 0, ETIMEDOUT, EINTR (interruptible), EDEADLK, EINVAL.
    @inlinable
    package static func lock(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> Int32 {
        lock(base, whenCondition: nil, deadline: deadline, interruptible: interruptible)
    }

    /// Takes the lock once the condition equals `wanted` (nil: any). Returns 0 holding the lock,
    /// or ETIMEDOUT / EINTR / EDEADLK / EINVAL (impossible words) not holding it.
    @inlinable
    package static func lock(_ base: UnsafeMutableRawPointer, whenCondition wanted: Int64?, deadline: Int64,
                             interruptible: Bool) -> Int32 {
        guard isPossible(base) else { return EINVAL }
        let taken = MutexWord.lock(mutex(base), deadline: deadline, interruptible: interruptible)
        guard taken == 0, let wanted else { return taken }
        while value(base).pointee.load(ordering: .relaxed) != wanted {
            let result = ConditionWord.wait(condition(base), mutex: mutex(base), deadline: deadline, interruptible: interruptible)
            if result != 0 && value(base).pointee.load(ordering: .relaxed) != wanted {
                _ = MutexWord.unlock(mutex(base))
                return result
            }
        }
        return 0
    }

    /// Takes the lock if it is free and (when `wanted` is given) the condition equals it; never
    /// waits for either. 0, EBUSY, or EINVAL (impossible words).
    @inlinable
    package static func tryLock(_ base: UnsafeMutableRawPointer, whenCondition wanted: Int64?) -> Int32 {
        guard isPossible(base) else { return EINVAL }
        guard MutexWord.tryLock(mutex(base)) == 0 else { return EBUSY }
        if let wanted, value(base).pointee.load(ordering: .relaxed) != wanted {
            _ = MutexWord.unlock(mutex(base))
            return EBUSY
        }
        return 0
    }

    /// Sets the condition (if given) and releases the lock, waking the waiters to re-check.
    /// EPERM (and no change) if the caller does not hold the lock; EINVAL if the words are impossible.
    @inlinable
    package static func unlock(_ base: UnsafeMutableRawPointer, condition newValue: Int64?) -> Int32 {
        guard isPossible(base) else { return EINVAL }
        guard MutexWord.isOwnedByCaller(mutex(base)) else { return unlockNotOwned(base, condition: newValue) }
        if let newValue { value(base).pointee.store(newValue, ordering: .relaxed) }
        let result = MutexWord.unlock(mutex(base))
        ConditionWord.broadcast(condition(base))
        return result
    }

    /// An unlock by a thread that does not hold the lock: the calling task's if it holds it with
    /// an async form (AsyncConditionLock), else EPERM.
    @usableFromInline @inline(never)
    static func unlockNotOwned(_ base: UnsafeMutableRawPointer, condition newValue: Int64?) -> Int32 {
        AsyncConditionLock.unlock(base, holder: AsyncHold.currentTask(), condition: newValue)
    }

    /// The condition now (a snapshot).
    @inlinable
    package static func condition(of base: UnsafeMutableRawPointer) -> Int64 {
        value(base).pointee.load(ordering: .acquiring)
    }
}
