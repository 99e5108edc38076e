import Glibc
import Synchronization

/// A cyclic barrier with the semantics of Python's `threading.Barrier`, in eight words of
/// caller memory (32 bytes):
///   word 0: a `LockWord` guarding the rest;       words 1-2: a `ConditionWord` (process-
///           private, its word 1 is the pending async waits' generation: `Parts.asyncWord`);
///   word 3: parties;  word 4: threads inside `wait`;  word 5: the state (`BarrierState`);
///   word 6: bit 0 "has an action" (the last arriver runs it before the others are released);
///   word 7: the kernel id of the thread running the action (an async party's: its process's
///           `AsyncHold.token`), 0 when none is.
/// States cycle filling -> (action ->) draining -> filling; `abort` breaks the barrier, `reset`
/// breaks it for the threads inside and then refills it. Words no barrier can hold (a lock word
/// above 2, no parties, more threads inside than parties, an unknown state or flag) make every
/// operation but `initialize` return EINVAL and change nothing.
@usableFromInline package enum BarrierWord {
    package enum State: UInt32 { case filling, draining, action, resetting, broken }

    package struct Parts {
        let words: Words
        let shared: Bool
        package init(_ base: UnsafeMutableRawPointer) {
            words = Words(base)
            shared = words[2].pointee.load(ordering: .relaxed) & processSharedFlag != 0
        }
        var lockWord: UnsafeMutablePointer<Atomic<Int32>> { atomic(words.base, as: Int32.self) }
        var condition: UnsafeMutableRawPointer { words.address(1) }
        /// Takes the lock and returns true if the words are possible; false (not holding it) if not.
        func lock() -> Bool {
            guard UInt32(bitPattern: lockWord.pointee.load(ordering: .relaxed)) <= 2 else { return false }
            LockWord.lock(lockWord, shared: shared)
            if isPossible { return true }
            unlock()
            return false
        }
        func unlock() { LockWord.unlock(lockWord, shared: shared) }
        var isPossible: Bool {
            let state = words[5].pointee.load(ordering: .relaxed)
            return parties > 0 && count <= parties && State(rawValue: state) != nil
                && (state != State.filling.rawValue || count < parties)
                && words[6].pointee.load(ordering: .relaxed) <= 1
                && !Words(condition).hasImpossibleCount
        }
        var parties: UInt32 { words[3].pointee.load(ordering: .relaxed) }
        var count: UInt32 {
            get { words[4].pointee.load(ordering: .relaxed) }
            nonmutating set { words[4].pointee.store(newValue, ordering: .relaxed) }
        }
        var state: State {
            get { State(rawValue: words[5].pointee.load(ordering: .relaxed)) ?? .broken }
            nonmutating set { words[5].pointee.store(newValue.rawValue, ordering: .relaxed) }
        }
        var hasAction: Bool { words[6].pointee.load(ordering: .relaxed) & 1 != 0 }
        var actionRunner: UInt32 {
            get { words[7].pointee.load(ordering: .relaxed) }
            nonmutating set { words[7].pointee.store(newValue, ordering: .relaxed) }
        }
        /// Waits on the condition with the lock held (it is released while asleep).
        func wait(deadline: Int64, interruptible: Bool) -> Int32 {
            ConditionWord.wait(condition, deadline: deadline, interruptible: interruptible,
                               unlock: unlock, relock: { LockWord.lock(lockWord, shared: shared); return 0 })
        }
        /// The word pending async waits sleep on (AsyncBarrier): the condition variable's
        /// word 0. Process-shared, it is the variable's sequence (a pending wait is counted as
        /// a waiter of the variable, so every broadcast moves it and wakes its sleepers);
        /// process-private, the variable does not use it, and it is the barrier's own: a
        /// generation (bits 0-30) and `asyncSleepers` (bit 31), which the waker sets before it
        /// sleeps on the word; `wakeAll` then moves the generation and wakes. Both under the lock.
        var asyncWord: UnsafeMutablePointer<Atomic<UInt32>> { words[1] }
        static let asyncSleepers: UInt32 = 1 << 31
        /// The value of `asyncWord` a pending async wait sleeps on (the lock held): marked first
        /// in private mode, so that the next `wakeAll` moves it.
        func asyncMark() -> UInt32 {
            if shared { return asyncWord.pointee.load(ordering: .sequentiallyConsistent) }
            let value = asyncWord.pointee.load(ordering: .relaxed) | Self.asyncSleepers
            asyncWord.pointee.store(value, ordering: .relaxed)
            return value
        }
        func wakeAll() {
            ConditionWord.broadcast(condition)
            if !shared {
                let value = asyncWord.pointee.load(ordering: .relaxed)
                if value & Self.asyncSleepers != 0 {
                    asyncWord.pointee.store((value &+ 1) & ~Self.asyncSleepers, ordering: .releasing)
                    Futex.wake(asyncWord, count: Int32.max, shared: false)
                }
            }
        }
        /// The last thread out of a drain or a reset refills the barrier.
        func leave() {
            if count > 0 { count -= 1 }
            if count == 0 && (state == .draining || state == .resetting) {
                state = .filling
                wakeAll()
            }
        }
    }

    /// EINVAL if parties is 0; (`shared`) EBUSY, changing nothing, if threads are inside `wait`
    /// or hold its lock (the attach rule, Words.swift; words no barrier holds are repaired).
    package static func initialize(_ base: UnsafeMutableRawPointer, parties: UInt32, hasAction: Bool, shared: Bool) -> Int32 {
        if parties == 0 { return EINVAL }
        let words = Words(base)
        if shared {
            let b = Parts(base)
            let lock = UInt32(bitPattern: b.lockWord.pointee.load(ordering: .acquiring))
            if lock <= 2 && b.isPossible && (lock != 0 || b.count != 0 || Words(b.condition).countsWaiters) { return EBUSY }
        }
        for i in 0..<8 { words[i].pointee.store(0, ordering: .relaxed) }
        ConditionWord.initialize(words.address(1), shared: shared)
        words[3].pointee.store(parties, ordering: .relaxed)
        words[6].pointee.store(hasAction ? 1 : 0, ordering: .releasing)
        return 0
    }

    /// Waits until `parties` threads have called `wait`. Returns (0, index) with the arrival
    /// index in 0..<parties; ECANCELED if the barrier is or becomes broken (or is reset while
    /// waiting); ETIMEDOUT if the monotonic `deadline` passed first (the barrier is then broken,
    /// as Python's); EINTR when `interruptible` and a signal handler ran (the caller left);
    /// EINVAL if the words are impossible. With an action, the thread that gets index
    /// parties - 1 must run the action and then call `actionDone`: the others stay waiting until
    /// it does.
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> (Int32, UInt32) {
        let b = Parts(base)
        guard b.lock() else { return (EINVAL, 0) }
        defer { b.unlock() }
        while b.state == .draining || b.state == .resetting || b.state == .action {
            let outcome = b.wait(deadline: -1, interruptible: interruptible)
            if outcome == EINTR || outcome == EINVAL { return (outcome, 0) }
        }
        if b.state == .broken { return (ECANCELED, 0) }
        guard b.count < b.parties else { return (EINVAL, 0) }  // corrupted while this thread waited
        let index = b.count
        b.count += 1
        if index + 1 == b.parties {
            if b.hasAction {
                b.state = .action
                b.actionRunner = threadID()
                return (0, index)  // actionDone does the rest, under the lock again
            }
            b.state = .draining
            b.wakeAll()
            b.leave()
            return (0, index)
        }
        var result: Int32 = 0
        while b.state == .filling || b.state == .action {
            // While the action runs, the deadline no longer applies (Python's runs under its lock).
            let outcome = b.wait(deadline: b.state == .action ? -1 : deadline, interruptible: interruptible)
            if outcome == ETIMEDOUT && b.state == .filling {
                b.state = .broken
                b.wakeAll()
                result = ETIMEDOUT
                break
            }
            if outcome == EINTR || outcome == EINVAL { result = outcome; break }  // EINVAL: corrupted meanwhile
        }
        if result == 0 && (b.state == .broken || b.state == .resetting) { result = ECANCELED }
        b.leave()
        return (result, index)
    }

    /// Ends the action that `wait` handed to the calling thread (the last arriver): releases the
    /// others, or breaks the barrier if the action failed (a reset or abort meanwhile stands).
    /// 0; EPERM (and no change) if the caller runs no action of this barrier (none pending, or
    /// already ended); EINVAL if the words are impossible.
    package static func actionDone(_ base: UnsafeMutableRawPointer, succeeded: Bool) -> Int32 {
        let b = Parts(base)
        guard b.lock() else { return EINVAL }
        defer { b.unlock() }
        // An async party's action (AsyncBarrier) is this process's: it may end on any thread.
        guard b.actionRunner != 0 && (b.actionRunner == threadID() || b.actionRunner == AsyncHold.token) else { return EPERM }
        b.actionRunner = 0
        if b.state == .action { b.state = succeeded ? .draining : .broken }
        b.wakeAll()
        b.leave()
        return 0
    }

    /// Returns the barrier to its empty state; threads waiting in it get ECANCELED. 0 or EINVAL.
    package static func reset(_ base: UnsafeMutableRawPointer) -> Int32 {
        let b = Parts(base)
        guard b.lock() else { return EINVAL }
        defer { b.unlock() }
        if b.count > 0 {
            if b.state == .filling || b.state == .broken || b.state == .action { b.state = .resetting }
        } else {
            b.state = .filling
        }
        b.wakeAll()
        return 0
    }

    /// Breaks the barrier: current and future waits fail with ECANCELED until `reset`. 0 or EINVAL.
    package static func abort(_ base: UnsafeMutableRawPointer) -> Int32 {
        let b = Parts(base)
        guard b.lock() else { return EINVAL }
        defer { b.unlock() }
        b.state = .broken
        b.wakeAll()
        return 0
    }

    /// (parties, threads waiting, broken), read under the lock; nil if the words are impossible.
    package static func status(_ base: UnsafeMutableRawPointer) -> (parties: UInt32, waiting: UInt32, broken: Bool)? {
        let b = Parts(base)
        guard b.lock() else { return nil }
        defer { b.unlock() }
        return (b.parties, b.state == .filling ? b.count : 0, b.state == .broken)
    }
}
