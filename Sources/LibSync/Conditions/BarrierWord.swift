import Glibc
import Synchronization

/// A cyclic barrier with the semantics of Python's `threading.Barrier`, in eight words of
/// caller memory (32 bytes):
///   word 0: a `LockWord` guarding the rest;       words 1-2: a `ConditionWord`;
///   word 3: parties;  word 4: threads inside `wait`;  word 5: the state (`BarrierState`);
///   word 6: bit 0 "has an action" (the last arriver runs it before the others are released).
/// States cycle filling -> (action ->) draining -> filling; `abort` breaks the barrier, `reset`
/// breaks it for the threads inside and then refills it.
@usableFromInline package enum BarrierWord {
    @usableFromInline enum State: UInt32 { case filling, draining, action, resetting, broken }

    @usableFromInline struct Parts {
        let words: Words
        let shared: Bool
        init(_ base: UnsafeMutableRawPointer) {
            words = Words(base)
            shared = words[2].pointee.load(ordering: .relaxed) & processSharedFlag != 0
        }
        var lockWord: UnsafeMutablePointer<Atomic<Int32>> { atomic(words.base, as: Int32.self) }
        var condition: UnsafeMutableRawPointer { words.address(1) }
        func lock() { LockWord.lock(lockWord, shared: shared) }
        func unlock() { LockWord.unlock(lockWord, shared: shared) }
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
        /// Waits on the condition with the lock held (it is released while asleep).
        func wait(deadline: Int64, interruptible: Bool) -> Int32 {
            ConditionWord.wait(condition, deadline: deadline, interruptible: interruptible,
                               unlock: unlock, relock: lock)
        }
        func wakeAll() { ConditionWord.broadcast(condition) }
        /// The last thread out of a drain or a reset refills the barrier.
        func leave() {
            count -= 1
            if count == 0 && (state == .draining || state == .resetting) {
                state = .filling
                wakeAll()
            }
        }
    }

    /// EINVAL if parties is 0.
    package static func initialize(_ base: UnsafeMutableRawPointer, parties: UInt32, hasAction: Bool, shared: Bool) -> Int32 {
        if parties == 0 { return EINVAL }
        let words = Words(base)
        for i in 0..<8 { words[i].pointee.store(0, ordering: .relaxed) }
        ConditionWord.initialize(words.address(1), shared: shared)
        words[3].pointee.store(parties, ordering: .relaxed)
        words[6].pointee.store(hasAction ? 1 : 0, ordering: .releasing)
        return 0
    }

    /// Waits until `parties` threads have called `wait`. Returns (0, index) with the arrival
    /// index in 0..<parties; ECANCELED if the barrier is or becomes broken (or is reset while
    /// waiting); ETIMEDOUT if the monotonic `deadline` passed first (the barrier is then broken,
    /// as Python's); EINTR when `interruptible` and a signal handler ran (the caller left).
    /// With an action, the thread that gets index parties - 1 must run the action and then call
    /// `actionDone`: the others stay waiting until it does.
    package static func wait(_ base: UnsafeMutableRawPointer, deadline: Int64, interruptible: Bool) -> (Int32, UInt32) {
        let b = Parts(base)
        b.lock()
        defer { b.unlock() }
        while b.state == .draining || b.state == .resetting || b.state == .action {
            if b.wait(deadline: -1, interruptible: interruptible) == EINTR { return (EINTR, 0) }
        }
        if b.state == .broken { return (ECANCELED, 0) }
        let index = b.count
        b.count += 1
        if index + 1 == b.parties {
            if b.hasAction {
                b.state = .action
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
            if outcome == EINTR { result = EINTR; break }
        }
        if result == 0 && (b.state == .broken || b.state == .resetting) { result = ECANCELED }
        b.leave()
        return (result, index)
    }

    /// Ends the action that `wait` handed to the last arriver: releases the others, or breaks the
    /// barrier if the action failed.
    package static func actionDone(_ base: UnsafeMutableRawPointer, succeeded: Bool) {
        let b = Parts(base)
        b.lock()
        defer { b.unlock() }
        if b.state == .action { b.state = succeeded ? .draining : .broken }
        b.wakeAll()
        b.leave()
    }

    /// Returns the barrier to its empty state; threads waiting in it get ECANCELED.
    package static func reset(_ base: UnsafeMutableRawPointer) {
        let b = Parts(base)
        b.lock()
        defer { b.unlock() }
        if b.count > 0 {
            if b.state == .filling || b.state == .broken || b.state == .action { b.state = .resetting }
        } else {
            b.state = .filling
        }
        b.wakeAll()
    }

    /// Breaks the barrier: current and future waits fail with ECANCELED until `reset`.
    package static func abort(_ base: UnsafeMutableRawPointer) {
        let b = Parts(base)
        b.lock()
        defer { b.unlock() }
        b.state = .broken
        b.wakeAll()
    }

    /// (parties, threads waiting, broken), read under the lock.
    package static func status(_ base: UnsafeMutableRawPointer) -> (parties: UInt32, waiting: UInt32, broken: Bool) {
        let b = Parts(base)
        b.lock()
        defer { b.unlock() }
        return (b.parties, b.state == .filling ? b.count : 0, b.state == .broken)
    }
}
