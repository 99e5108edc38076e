import CSyncShim
import Glibc
import Synchronization

/// Async holds of a mutex: a lock taken by a Swift task (or, later, an event-loop caller) that
/// may resume on any thread, so its word cannot name a thread.
///
/// The word names the holding *process*: holder = `base + pid`, in the range kernel thread ids
/// never reach (they stay below 2^22 = `threadIDLimit`) and below `MutexWord.anonymous`. No
/// thread's id equals it, so every thread's owner check (EDEADLK, EPERM) reads "not mine", and
/// every thread waits for it as for any holder. Which task of the process holds it is kept here,
/// in the process's table (word address -> task), which the release and the async acquire
/// consult. Robust mode: the word carries the process's start time beside the holder, as a thread
/// holder carries its own, so `RobustWord.isDead` finds a dead holding process by its pid (and a
/// reused pid by its start time); the next locker gets EOWNERDEAD.
package enum AsyncHold {
    /// The first async holder id: pid 0 maps to it.
    static let base: UInt32 = threadIDLimit

    /// This process's async holder id.
    @inline(__always) static var token: UInt32 { base &+ sync_process_id }

    /// Whether `holder` (a word's holder field) is an async holder (of any process).
    @inline(__always) static func isAsyncHolder(_ holder: UInt32) -> Bool {
        holder >= base && holder < MutexWord.anonymous
    }

    /// The pid of the process an async holder id names.
    @inline(__always) static func process(of holder: UInt32) -> UInt32 { holder &- base }

    /// The calling task's identity (its address), or 0 outside a task. Only compared while the
    /// task lives (a holder lives until it releases). Read through the runtime's entry point
    /// (sync_current_task): no retain and release of the task, as `withUnsafeCurrentTask` does.
    @inline(__always) static func currentTask() -> UInt { sync_current_task() }

    /// The calling task's identity (0 outside a task) and whether it is cancelled, in one look.
    @inline(__always) static func currentTaskAndCancelled() -> (UInt, Bool) {
        let task = sync_current_task()
        return (task, task != 0 && sync_task_is_cancelled(task) != 0)
    }

    // MARK: taking and releasing for this process

    /// Takes the mutex at `word` (plain or robust) for this process's async holder if it can
    /// now. 0 taken; EOWNERDEAD taken from a dead holder (robust); EBUSY held, and with
    /// `markWaiters` the WAITERS bit is set and `observed` holds the word to sleep on;
    /// ENOTRECOVERABLE; EINVAL (a robust lock of another pid or time namespace). `markWaiters`
    /// also takes the lock with WAITERS set, as a blocking waiter that has slept does: others
    /// may sleep on it.
    static func take(_ word: MutexWord.Word, markWaiters: Bool, observed: inout UInt32) -> Int32 {
        var value = word.pointee.load(ordering: .relaxed)
        if value & MutexWord.robust != 0 { return takeRobust(UnsafeMutableRawPointer(word), markWaiters: markWaiters, observed: &observed) }
        let mark = markWaiters ? MutexWord.waiters : 0
        while true {
            if value & MutexWord.holderMask == 0 {
                let holder = value & MutexWord.unowned != 0 ? MutexWord.anonymous : token
                let (exchanged, now) = word.pointee.compareExchange(expected: value, desired: value | holder | mark, ordering: .acquiring)
                if exchanged { return 0 }
                value = now
                continue
            }
            if !markWaiters { return EBUSY }
            if value & MutexWord.waiters == 0 {
                let (exchanged, now) = word.pointee.compareExchange(expected: value, desired: value | MutexWord.waiters, ordering: .relaxed)
                if !exchanged { value = now; continue }
            }
            observed = value | MutexWord.waiters
            return EBUSY
        }
    }

    static func takeRobust(_ memory: UnsafeMutableRawPointer, markWaiters: Bool, observed: inout UInt32) -> Int32 {
        guard Int(bitPattern: memory) & 7 == 0 else { return EINVAL }
        let asking = LockOwner.identified()
        let myTag = asking.pointee.namespaceTag
        let tag = RobustWord.tagCell(memory).pointee.load(ordering: .relaxed)
        if tag != myTag {
            if tag != 0 { return EINVAL }
            let (exchanged, now) = RobustWord.tagCell(memory).pointee.compareExchange(expected: 0, desired: myTag, ordering: .relaxed)
            if !exchanged && now != myTag { return EINVAL }
        }
        let me = token, myStart = AsyncRuntime.current.processStart
        let mark = markWaiters ? MutexWord.waiters : 0
        let bits = RobustWord.bits(memory)
        var state = bits.pointee.load(ordering: .relaxed)
        while true {
            let word = RobustWord.word(of: state)
            if word & MutexWord.notRecoverable != 0 { return ENOTRECOVERABLE }
            let holder = word & MutexWord.holderMask
            if holder == 0 {
                let desired = RobustWord.pack(word | me | mark, myStart)
                let (exchanged, now) = bits.pointee.compareExchange(expected: state, desired: desired, ordering: .acquiring)
                if exchanged { return 0 }
                state = now
                continue
            }
            if holder != me && RobustWord.isDead(holder, start: RobustWord.start(of: state),
                                                  private: word & MutexWord.shared == 0, asking: asking) {
                let kept = word & (MutexWord.modes | MutexWord.waiters) | mark
                let desired = RobustWord.pack(kept | MutexWord.ownerDied | me, myStart)
                let (exchanged, now) = bits.pointee.compareExchange(expected: state, desired: desired, ordering: .acquiring)
                if exchanged { return EOWNERDEAD }
                state = now
                continue
            }
            if !markWaiters { return EBUSY }
            if word & MutexWord.waiters == 0 {
                let marked = RobustWord.pack(word | MutexWord.waiters, RobustWord.start(of: state))
                let (exchanged, now) = bits.pointee.compareExchange(expected: state, desired: marked, ordering: .relaxed)
                if !exchanged { state = now; continue }
            }
            observed = word | MutexWord.waiters
            return EBUSY
        }
    }

    /// Releases the mutex at `word` if the calling task holds it (the hook of
    /// `MutexWord.unlockSlow` for words whose holder is an async holder): 0, or EPERM.
    /// Robust: a release with OWNER_DIED set leaves the lock NOT_RECOVERABLE, as a thread's.
    static func unlock(_ word: MutexWord.Word) -> Int32 { unlock(word, holder: currentTask()) }

    /// Releases the mutex at `word` if `holder` (a task's identity, or a C handle's) holds it:
    /// 0, or EPERM.
    package static func unlock(_ word: MutexWord.Word, holder: UInt) -> Int32 {
        let value = word.pointee.load(ordering: .relaxed)
        // Unowned mode (threading.Lock): no holder is recorded, anyone may release it, as
        // sync_mutex_unlock does.
        if value & MutexWord.unowned != 0 { return MutexWord.unlockSlow(word, 0) }
        guard value & MutexWord.holderMask == token,
              asyncHolds.remove(UInt(bitPattern: word), holder: holder) else { return EPERM }
        if value & MutexWord.robust == 0, let runtime = AsyncRuntime.existing,
           runtime.handOff(word) {
            return 0
        }
        release(word)
        return 0
    }

    /// Releases a word this process's async holder holds (the caller checked that) and wakes a
    /// waiter (every one if the lock becomes not recoverable).
    static func release(_ word: MutexWord.Word) {
        let memory = UnsafeMutableRawPointer(word)
        var value = word.pointee.load(ordering: .relaxed)
        if value & MutexWord.robust != 0 {
            let bits = RobustWord.bits(memory)
            var state = bits.pointee.load(ordering: .relaxed), released: UInt32
            while true {
                let word = RobustWord.word(of: state)
                released = word & MutexWord.modes | (word & MutexWord.ownerDied != 0 ? MutexWord.notRecoverable : 0)
                let (exchanged, now) = bits.pointee.compareExchange(expected: state, desired: RobustWord.pack(released, 0), ordering: .releasing)
                if exchanged { break }
                state = now
            }
            value = RobustWord.word(of: state)
            if value & MutexWord.waiters != 0 {
                Futex.wake(memory, count: released & MutexWord.notRecoverable != 0 ? Int32.max : 1, shared: value & MutexWord.shared != 0)
            }
            return
        }
        while true {
            let (exchanged, now) = word.pointee.compareExchange(expected: value, desired: value & MutexWord.modes, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        if value & MutexWord.waiters != 0 { Futex.wake(memory, count: 1, shared: value & MutexWord.shared != 0) }
    }

    /// Robust: clears OWNER_DIED if the calling task holds the lock (the hook of
    /// `MutexWord.consistent`). 0; EPERM; EINVAL if not marked.
    static func consistent(_ word: MutexWord.Word) -> Int32 { consistent(word, holder: currentTask()) }

    /// As `consistent(_:)`, for `holder` (a task's identity, or a C handle's).
    package static func consistent(_ word: MutexWord.Word, holder: UInt) -> Int32 {
        let memory = UnsafeMutableRawPointer(word)
        guard word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == token, holder != 0,
              asyncHolds.holder(of: UInt(bitPattern: word)) == holder else { return EPERM }
        let bits = RobustWord.bits(memory)
        var state = bits.pointee.load(ordering: .relaxed)
        while RobustWord.word(of: state) & MutexWord.ownerDied != 0 {
            let repaired = RobustWord.pack(RobustWord.word(of: state) & ~MutexWord.ownerDied, RobustWord.start(of: state))
            let (exchanged, now) = bits.pointee.compareExchange(expected: state, desired: repaired, ordering: .relaxed)
            if exchanged { return 0 }
            state = now
        }
        return EINVAL
    }

    /// Records `holder` as the holder of the mutex at `word`, which this process's async holder
    /// just took: unowned locks (whose word names no holder) record none.
    static func taken(_ word: MutexWord.Word, holder: UInt) {
        if word.pointee.load(ordering: .relaxed) & MutexWord.unowned == 0 {
            asyncHolds.add(UInt(bitPattern: word), holder: holder)
        }
    }

    /// Whether the calling task holds the mutex at `word`.
    static func isHeldByCurrentTask(_ word: MutexWord.Word) -> Bool {
        let task = currentTask()
        return task != 0 && word.pointee.load(ordering: .relaxed) & MutexWord.holderMask == token
            && asyncHolds.holder(of: UInt(bitPattern: word)) == task
    }
}
