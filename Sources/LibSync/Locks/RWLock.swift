import CSyncShim
import Glibc
import Synchronization

/// The writer-preferring read-write lock: four 32-bit words of caller memory (16 bytes).
///
///     state    bits 0-25 plain readers holding it, bit 26 UPGRADING (the upgradable reader
///              waits in `upgrade` for the plain readers to leave: new readers wait too), bit 27
///              UPGRADABLE (held by the one upgradable reader), bit 28 WRITER (held for
///              writing), bit 29 WRITERS_WAITING (a writer waits: new readers wait too), bit 30
///              READERS_PARKED (a reader, plain or upgradable, may sleep on `state`), bit 31
///              SHARED mode (futexes in the shared namespace; not bit 30 as in the mutex and
///              spin words: bits 0-30 were taken, and SYNC_RWLOCK_INIT_SHARED fixes it, see
///              `MutexWord`)
///     wakeups  a sequence writers sleep on (a writer's wake bumps it, so none is lost)
///     writer   the kernel thread id of the writer or of the upgradable reader holding it
///              (owner checks), else 0
///     waiting  how many writers wait: a hint, see below
///
/// Writer preference: while WRITERS_WAITING is set, new readers wait, so a stream of readers
/// cannot starve writers. Readers' fast path is one CAS on `state`; both sides spin
/// (`SpinWait`) before sleeping, a writer only once it has marked the lock. A plain reader
/// cannot upgrade; a writer can downgrade, to a plain or to the upgradable reader.
///
/// The upgradable reader (parking_lot's `upgradable_read`): one at a time, beside plain
/// readers, never beside a writer. It is not counted in bits 0-25: UPGRADABLE is its hold, and
/// `writer` its id. Who waits for what:
///
///     holds \ wants   read          upgradable         write
///     readers        yes           yes                wait (mark, sleep on wakeups)
///     UPGRADABLE     yes           wait (park)        wait (mark, sleep on wakeups)
///     UPGRADING      wait (park)   wait (park)        wait (mark, sleep on wakeups)
///     WRITER         wait (park)   wait (park)        wait (mark, sleep on wakeups)
///     (mark only)    wait (park)   wait (park)        takes it
///
/// An upgradable reader waits as a reader (parked on `state`, READERS_PARKED), also while
/// another holds UPGRADABLE: that one's release wakes the parked ones. `upgrade` sets
/// UPGRADING (new readers wait), sleeps on `state` until the plain readers have left (the last
/// one out wakes `state`), then turns UPGRADABLE|UPGRADING into WRITER in one CAS: no writer
/// can take the lock in between. A release that leaves UPGRADABLE held keeps the mark, the
/// parked readers and UPGRADING (`freed`), and wakes no writer; the upgradable reader's release
/// then frees the lock as the last reader's would.
///
/// The writers' mark is a bit, not a count, so that a waiter that leaves (timeout, signal, or
/// death in another process) never leaves a mark that nobody clears:
/// - a writer that has to wait counts itself in `waiting` and sets the mark while the lock is
///   held, before it spins and sleeps;
/// - whoever frees a marked lock keeps the mark (the lock is then free and handed to the
///   waiting writers: no reader can take it before them) and wakes one writer; any writer
///   counted in `waiting` takes a free lock, marked or not;
/// - the writer that takes it clears the mark, or keeps it if other writers are counted.
/// A writer that gives up takes the lock if it is free; else it leaves the mark for the next
/// release, unless it was the last writer waiting: then it clears the mark and wakes a writer,
/// so that one it did not count marks again, or else the parked readers. A reader that finds
/// the lock free and marked with no writer counted (that last writer between its two steps, or
/// a word written by hand) clears the mark the same way. `waiting` decides these "others
/// wait?" questions and is never trusted to say that a writer will come: it saturates at
/// UInt32.max, and a writer that died while waiting stays in it (process-shared, readers'
/// slices withdraw its mark, `withdrawDeadWritersMark`).
///
/// The write holder: in private mode the thread whose id `writer` holds. In SHARED mode a bare
/// id cannot say so, as the kernel gives a dead writer's id to a new thread, in any process:
/// as with a shared mutex (`MutexWord`), the caller holds it only if `writer` holds its id and
/// its `LockOwner` list has the lock's address (`writtenByCaller`). A SHARED state is never 0,
/// so shared writers always take the slow paths, where the list is kept.
/// Process-shared, both sides sleep in slices (`Futex.waitSliced`) and re-validate on each
/// wake: a writer woken by a release that dies before it takes the lock cannot leave the other
/// writers and the parked readers asleep for more than a slice. A writer that dies while it
/// waits leaves the mark (and its count in `waiting`): while readers hold the lock, a reader
/// whose sleep ended without a release asks the kernel whether any writer sleeps on
/// `wakeups`, and withdraws the mark if none does (`withdrawDeadWritersMark`).
///
/// Invariants (a state that breaks one is impossible: EINVAL): WRITER is never set with readers
/// or UPGRADABLE or UPGRADING; UPGRADING is never set without UPGRADABLE.
@usableFromInline package enum RWLockWords {
    @usableFromInline package typealias Memory = UnsafeMutableRawPointer

    @usableFromInline static let readerMask: UInt32 = (1 << 26) - 1
    @usableFromInline static let upgrading: UInt32 = 1 << 26
    @usableFromInline static let upgradable: UInt32 = 1 << 27
    @usableFromInline static let writer: UInt32 = 1 << 28
    @usableFromInline static let writersWaiting: UInt32 = 1 << 29
    @usableFromInline static let readersParked: UInt32 = 1 << 30
    @usableFromInline static let shared: UInt32 = 1 << 31
    /// Bytes of caller memory (sync_rwlock_t).
    package static let size = 16

    @inlinable @inline(__always)
    static func state(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m, as: UInt32.self) }
    @inlinable @inline(__always)
    static func wakeups(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m + 4, as: UInt32.self) }
    @inlinable @inline(__always)
    static func owner(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m + 8, as: UInt32.self) }
    @inlinable @inline(__always)
    static func waiting(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m + 12, as: UInt32.self) }

    /// The initial `state` word (the other words start at 0).
    package static func initial(shared isShared: Bool) -> UInt32 { isShared ? shared : 0 }

    /// Initializes the lock at `m` (lock-order checking forgets the one it held before). 0, or
    /// (`shared`) EBUSY, changing nothing, if the lock there is held (read, upgradable read or
    /// write) or waited for (marked, or readers parked): the attach rule (Words.swift).
    @discardableResult
    package static func initialize(_ m: Memory, shared isShared: Bool) -> Int32 {
        let value = state(m).pointee.load(ordering: .acquiring)
        let inUse = readerMask | upgrading | upgradable | writer | writersWaiting | readersParked
        if isShared && !isImpossible(value) && value & inUse != 0 {
            return EBUSY
        }
        if isShared && value == initial(shared: true) { return attach(m) }
        LockOrder.forget(m)
        m.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        m.storeBytes(of: initial(shared: isShared), as: UInt32.self)
        return 0
    }

    /// Whether no sequence of operations leads to `value` (uninitialized or overwritten memory).
    @inlinable @inline(__always)
    static func isImpossible(_ value: UInt32) -> Bool {
        value & (readerMask | upgradable | upgrading) != 0 && value & writer != 0
    }

    /// `isImpossible`, or UPGRADING without UPGRADABLE (checked where upgradable readers act).
    @inlinable @inline(__always)
    static func isImpossibleUpgrade(_ value: UInt32) -> Bool {
        isImpossible(value) || value & (upgradable | upgrading) == upgrading
    }

    /// `state` once its last plain reader or its writer leaves: a marked lock stays marked, with
    /// its parked readers, for the writer woken next; one the upgradable reader still holds keeps
    /// it (and UPGRADING, the mark, the parked readers); else it keeps only SHARED (its parked
    /// readers are woken).
    @inlinable @inline(__always)
    static func freed(_ value: UInt32) -> UInt32 {
        value & (writersWaiting | upgradable) != 0
            ? value & (shared | readersParked | writersWaiting | upgradable | upgrading) : value & shared
    }

    // MARK: readers

    /// 0, EBUSY (a writer holds or waits, or an upgrade waits), EAGAIN (2^26-1 readers), or EINVAL.
    @inlinable @inline(__always)
    package static func tryReadLock(_ m: Memory) -> Int32 { LockOrder.tried(m, .readLock, attemptRead(m)) }

    /// `tryReadLock` without the lock-order hook (the waiting paths' attempts).
    @inlinable @inline(__always)
    static func attemptRead(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while value & (writer | writersWaiting | upgrading) == 0 {
            if value & readerMask == readerMask { return EAGAIN }
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: value &+ 1, ordering: .acquiring)
            if exchanged { return 0 }
            value = now
        }
        return isImpossible(value) ? EINVAL : EBUSY
    }

    /// 0, ETIMEDOUT, EINTR (interruptible), EAGAIN, EINVAL, or EDEADLK if the caller holds it
    /// for writing (or holds the upgradable read while a writer waits: that writer waits for it).
    @inlinable @inline(__always)
    package static func readLock(_ m: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let value = state(m).pointee.load(ordering: .relaxed)
        if value & (writer | writersWaiting | upgrading) == 0 && value & readerMask != readerMask,
           state(m).pointee.compareExchange(expected: value, desired: value &+ 1, ordering: .acquiring).exchanged {
            LockOrder.acquired(m, .readLock)
            return 0
        }
        return readLockWaiting(m, deadline: deadline, interruptible: interruptible)
    }

    /// `readLock` past its fast path, in one call in tail position: the fast path then needs no
    /// stack frame (no register saved and restored around the CAS).
    @usableFromInline @inline(never)
    static func readLockWaiting(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        LockOrder.waited(m, .readLock) { readLockSlow(m, deadline: deadline, interruptible: interruptible) }
    }

    @usableFromInline @inline(never)
    static func readLockSlow(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        let first = state(m).pointee.load(ordering: .relaxed)
        if isImpossible(first) { return EINVAL }
        // The upgradable holder waits for a waiting writer that waits for it: a deadlock.
        let me = threadID()
        if writtenByCaller(m, first, me) || (first & writersWaiting != 0 && upgradableByCaller(m, first, me))
            || writtenByCallingTask(m, first) {
            return EDEADLK
        }
        return waitAsReader(m, blockers: writer | writersWaiting | upgrading, deadline: deadline,
                            interruptible: interruptible, attempt: attemptRead)
    }

    /// A reader's wait, plain or upgradable: spins, then parks on `state` (READERS_PARKED) while
    /// `value & blockers` != 0, and returns `attempt`'s first result that is not EBUSY (or the
    /// timeout, EINTR).
    @inline(__always)
    static func waitAsReader(_ m: Memory, blockers: UInt32, deadline: Int64, interruptible: Bool,
                             attempt: (Memory) -> Int32) -> Int32 {
        var spin = SpinWait()
        repeat {
            let result = attempt(m)
            if result != EBUSY { return result }
        } while spin.spin()
        while true {
            let value = state(m).pointee.load(ordering: .relaxed)
            if value & blockers == 0 {
                let result = attempt(m)
                if result != EBUSY { return result }
                continue
            }
            if isImpossibleUpgrade(value) { return EINVAL }
            if value & (writer | readerMask | upgradable | writersWaiting) == writersWaiting
                && waiting(m).pointee.load(ordering: .sequentiallyConsistent) == 0 {
                clearOrphanedMark(m, value)
                continue
            }
            if value & readersParked == 0 {
                if !state(m).pointee.compareExchange(expected: value, desired: value | readersParked,
                                                     ordering: .relaxed).exchanged { continue }
            }
            let result = Futex.waitSliced(UnsafeMutableRawPointer(state(m)), expected: value | readersParked,
                                          deadline: deadline, shared: value & shared != 0)
            // A sleep that no release ended (slice end, timeout, signal): the writers' mark that
            // stopped this reader may be a dead writer's.
            if result != .woken && value & shared != 0 { withdrawDeadWritersMark(m) }
            if result.endsWait(interruptible: interruptible) {
                let last = attempt(m)
                return last == EBUSY ? result.code : last
            }
        }
    }

    /// A free lock marked while no writer is counted: the last writer gave up between its two
    /// steps, or the word was written by hand. Clears the mark as that writer would (a writer
    /// counted since finds the sequence changed and re-validates; only preference rests on it).
    @usableFromInline @inline(never)
    static func clearOrphanedMark(_ m: Memory, _ value: UInt32) { _ = withdrawMark(m, value) }

    /// Clears the writers' mark (and READERS_PARKED) of `state` `value` in one CAS; on success
    /// bumps the sequence and wakes every writer (each re-validates, and a live one marks again)
    /// and the parked readers. False if `state` was no longer `value`.
    @usableFromInline
    static func withdrawMark(_ m: Memory, _ value: UInt32) -> Bool {
        guard state(m).pointee.compareExchange(expected: value, desired: value & ~(writersWaiting | readersParked),
                                               ordering: .sequentiallyConsistent).exchanged else { return false }
        wakeups(m).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        Futex.wake(UnsafeMutableRawPointer(wakeups(m)), count: Int32.max, shared: value & shared != 0)
        if value & readersParked != 0 {
            Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
        }
        return true
    }

    /// How long a reader waits between the two looks at the writers' futex in
    /// `withdrawDeadWritersMark` (microseconds).
    @usableFromInline static let markRecheckDelay: UInt32 = 2_000

    /// Process-shared, by a reader whose sleep no release ended: withdraws the writers' mark if
    /// no writer is behind it. While readers hold the lock, the mark announces a writer asleep
    /// on `wakeups` (or about to sleep, or waking to re-validate); a writer SIGKILLed while it
    /// waits leaves it, and nothing else clears it before every reader has left. So if the
    /// kernel counts no sleeper on `wakeups` at two looks `markRecheckDelay` apart, the reader
    /// clears the mark (and READERS_PARKED, waking the parked readers), then bumps the sequence
    /// and wakes every writer: a live writer caught between marking and sleeping finds the
    /// sequence changed, and one that began to sleep since is woken; both re-validate and mark
    /// the lock again.
    ///
    /// Invariant: only writer preference rests on this judgement, never exclusion. Clearing the
    /// mark lets readers in; a writer still takes the lock only by the CAS that finds neither
    /// readers nor a writer. A live writer misjudged (it was out of the kernel at both looks)
    /// waits for the readers that got in meanwhile, marks again, and keeps its place.
    @usableFromInline @inline(never)
    static func withdrawDeadWritersMark(_ m: Memory) {
        func marked(_ value: UInt32) -> Bool { value & (writer | writersWaiting) == writersWaiting }
        let sequence = UnsafeMutableRawPointer(wakeups(m))
        guard marked(state(m).pointee.load(ordering: .sequentiallyConsistent)),
              Futex.sleepers(sequence, shared: true) == 0 else { return }
        usleep(markRecheckDelay)
        var value = state(m).pointee.load(ordering: .sequentiallyConsistent)
        guard marked(value), Futex.sleepers(sequence, shared: true) == 0 else { return }
        while marked(value) && !withdrawMark(m, value) {
            value = state(m).pointee.load(ordering: .sequentiallyConsistent)
        }
    }

    /// 0, EPERM if no reader holds it (or the caller holds it for writing), or EINVAL.
    @inlinable @inline(__always)
    package static func readUnlock(_ m: Memory) -> Int32 {
        if _slowPath(sync_lock_order_flag != 0) { return readUnlockHooked(m) }
        return readRelease(m)
    }

    /// `readUnlock` while lock-order checking is on: the hook off the fast path, whose frame
    /// then holds no register across a call.
    @usableFromInline @inline(never)
    static func readUnlockHooked(_ m: Memory) -> Int32 {
        LockOrder.releasing(m, .readLock)
        return readRelease(m)
    }

    /// Releases a plain read (`readUnlock` past its lock-order hook).
    @inlinable @inline(__always)
    static func readRelease(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while true {
            if value & readerMask == 0 || value & writer != 0 { return isImpossible(value) ? EINVAL : EPERM }
            let next = value & readerMask == 1 ? freed(value) : value &- 1
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        // The last reader out wakes a waiting writer, the upgrade that waits, or the readers
        // parked behind a writer that left.
        if value & readerMask == 1 && value & (writersWaiting | readersParked | upgrading) != 0 {
            return wokeAfterRelease(m, value)
        }
        return 0
    }

    /// `wakeAfterRelease`, then 0: a call in tail position for the release fast paths.
    @usableFromInline @inline(never)
    static func wokeAfterRelease(_ m: Memory, _ value: UInt32) -> Int32 {
        wakeAfterRelease(m, value)
        return 0
    }

    // MARK: writers

    /// 0, EBUSY (held by anyone, the caller included), or EINVAL.
    @inlinable @inline(__always)
    package static func tryWriteLock(_ m: Memory) -> Int32 { LockOrder.tried(m, .writeLock, attemptWrite(m)) }

    /// `tryWriteLock` without the lock-order hook.
    @inlinable @inline(__always)
    static func attemptWrite(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while value & (writer | readerMask | upgradable | writersWaiting) == 0 {
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: value | writer, ordering: .acquiring)
            if exchanged {
                owner(m).pointee.store(threadID(), ordering: .relaxed)
                if value & shared != 0 { noteSharedWriter(m) }
                return 0
            }
            value = now
        }
        return isImpossible(value) ? EINVAL : EBUSY
    }

    /// 0, ETIMEDOUT, EINTR (interruptible), EINVAL, or EDEADLK if the caller holds it for writing
    /// or holds the upgradable read (`upgrade` is its way to the write lock).
    @inlinable @inline(__always)
    package static func writeLock(_ m: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        if state(m).pointee.compareExchange(expected: 0, desired: writer, ordering: .acquiring).exchanged {
            owner(m).pointee.store(threadID(), ordering: .relaxed)
            LockOrder.acquired(m, .writeLock)
            return 0
        }
        return LockOrder.waited(m, .writeLock) { writeLockSlow(m, deadline: deadline, interruptible: interruptible) }
    }

    @usableFromInline @inline(never)
    static func writeLockSlow(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        let me = threadID()
        let first = state(m).pointee.load(ordering: .relaxed)
        if isImpossible(first) { return EINVAL }
        if heldByCaller(m, first, me) || writtenByCallingTask(m, first) { return EDEADLK }
        countWaiting(m, by: 1)
        let isShared = first & shared != 0
        var spin = SpinWait()
        while true {
            // The sequence before the state: a release between the two changes the sequence, so
            // the sleep below returns at once instead of missing the wake.
            let sequence = wakeups(m).pointee.load(ordering: .sequentiallyConsistent)
            let value = state(m).pointee.load(ordering: .sequentiallyConsistent)
            if isImpossible(value) {
                countWaiting(m, by: UInt32.max)
                return EINVAL
            }
            if value & (writer | readerMask | upgradable) == 0 {
                if takeAfterWaiting(m, value, me: me) { return 0 }
                continue
            }
            if value & writersWaiting == 0 {
                if !state(m).pointee.compareExchange(expected: value, desired: value | writersWaiting,
                                                     ordering: .sequentiallyConsistent).exchanged { continue }
            }
            // Marked: no reader gets in any more. The holders may leave soon: back off on the
            // CPU a little, then sleep (the last one out wakes a writer).
            if !Deadline.hasPassed(deadline) && spin.spinWithoutYield() { continue }
            let result = Futex.waitSliced(UnsafeMutableRawPointer(wakeups(m)), expected: sequence,
                                          deadline: deadline, shared: isShared)
            if result.endsWait(interruptible: interruptible) {
                return abandonWrite(m, me: me, result: result.code)
            }
            spin.reset()
        }
    }

    /// A counted (waiting) writer takes the free lock `value`, marked or not, keeping the mark
    /// only if other writers are counted (they may sleep behind it).
    ///
    /// The count it read is a snapshot: a writer counted then may give up before this one
    /// uncounts itself, and a writer counted since may mark the lock and give up too; neither
    /// is the last writer when it withdraws, so both leave the mark. So whoever uncounts the
    /// last writer withdraws a mark it finds, here as in `abandonWrite`: else the lock stays
    /// marked with no writer counted, and its release keeps the mark and wakes nobody (the
    /// parked readers sleep on, tries fail on the free lock).
    @usableFromInline
    static func takeAfterWaiting(_ m: Memory, _ value: UInt32, me: UInt32) -> Bool {
        let others = waiting(m).pointee.load(ordering: .sequentiallyConsistent) != 1
        let next = (value & ~writersWaiting) | writer | (others ? writersWaiting : 0)
        guard state(m).pointee.compareExchange(expected: value, desired: next,
                                               ordering: .sequentiallyConsistent).exchanged else { return false }
        owner(m).pointee.store(me, ordering: .relaxed)
        if value & shared != 0 { noteSharedWriter(m) }
        if countWaiting(m, by: UInt32.max) == 0
            && state(m).pointee.load(ordering: .sequentiallyConsistent) & writersWaiting != 0 {
            // A writer counted since may have seen the mark and be about to sleep: the wake
            // makes it re-validate and mark again.
            state(m).pointee.bitwiseAnd(~writersWaiting, ordering: .sequentiallyConsistent)
            wakeWriterOrReaders(m, shared: value & shared != 0)
        }
        return true
    }

    /// A waiting writer gives up (timeout, signal): it takes the lock if free, else withdraws.
    /// It needs to pass on no wake: a woken futex wait returns 0, never ETIMEDOUT or EINTR, so
    /// a writer that was woken re-validated (and marked the lock again) before it gave up.
    @usableFromInline
    static func abandonWrite(_ m: Memory, me: UInt32, result: Int32) -> Int32 {
        while true {
            let value = state(m).pointee.load(ordering: .sequentiallyConsistent)
            if isImpossible(value) {
                countWaiting(m, by: UInt32.max)
                return EINVAL
            }
            if value & (writer | readerMask | upgradable) == 0 {
                if takeAfterWaiting(m, value, me: me) { return 0 }
                continue
            }
            // The last writer withdraws the mark, so that readers need not wait for the holders
            // to leave. A writer counted in meanwhile may have seen the mark and be about to
            // sleep unmarked: the wake makes it re-validate (and parked readers go).
            if countWaiting(m, by: UInt32.max) == 0 {
                state(m).pointee.bitwiseAnd(~writersWaiting, ordering: .sequentiallyConsistent)
                wakeWriterOrReaders(m, shared: value & shared != 0)
            }
            return result
        }
    }

    /// 0, or EPERM if the caller does not hold it for writing, or EINVAL.
    @inlinable @inline(__always)
    package static func writeUnlock(_ m: Memory) -> Int32 {
        LockOrder.releasing(m, .writeLock)
        let value = state(m).pointee.load(ordering: .relaxed)
        // Impossible first: the owner word may still name the caller, and EINVAL changes nothing.
        if isImpossible(value) { return EINVAL }
        if value & writer == 0 || owner(m).pointee.load(ordering: .relaxed) != threadID() { return notWrittenByCaller(m, value, downgrade: false) }
        if value & shared != 0 { return writeUnlockShared(m) }
        owner(m).pointee.store(0, ordering: .relaxed)
        if state(m).pointee.compareExchange(expected: writer, desired: 0, ordering: .releasing).exchanged { return 0 }
        return writeUnlockSlow(m)
    }

    /// A write release or downgrade by a thread whose id the lock does not hold: the calling
    /// task's if it holds the lock with an async form (AsyncRWLock), else EPERM.
    @usableFromInline @inline(never)
    static func notWrittenByCaller(_ m: Memory, _ value: UInt32, downgrade: Bool) -> Int32 {
        guard value & writer != 0, AsyncHold.isAsyncHolder(owner(m).pointee.load(ordering: .relaxed)) else { return EPERM }
        let task = AsyncHold.currentTask()
        return downgrade ? AsyncRWLock.downgrade(m, holder: task) : AsyncRWLock.writeUnlock(m, holder: task)
    }

    /// Whether the calling task holds the write lock with an async form (`value` its state):
    /// its blocking acquires would wait for itself.
    @usableFromInline
    static func writtenByCallingTask(_ m: Memory, _ value: UInt32) -> Bool {
        value & writer != 0 && AsyncHold.isAsyncHolder(owner(m).pointee.load(ordering: .relaxed))
            && AsyncRWLock.isWriteLocked(m, by: AsyncHold.currentTask())
    }

    /// A SHARED lock whose `writer` holds the caller's id: the caller's only if its list has
    /// the lock (struck off here); else the id is a dead writer's, reused: EPERM.
    @usableFromInline @inline(never)
    static func writeUnlockShared(_ m: Memory) -> Int32 {
        guard LockOwner.remove(m) else { return EPERM }
        owner(m).pointee.store(0, ordering: .relaxed)
        return writeUnlockSlow(m)
    }

    @usableFromInline @inline(never)
    static func writeUnlockSlow(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while true {
            if value & writer == 0 || isImpossible(value) { return EINVAL }  // overwritten under its owner
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: freed(value), ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        wakeAfterRelease(m, value)
        return 0
    }

    /// Turns the caller's write lock into a read lock in one CAS: no writer can take the lock
    /// in between. Parked readers join it unless a writer waits (that writer goes next).
    /// 0, EPERM if the caller does not hold it for writing, or EINVAL.
    @usableFromInline package static func downgrade(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        if isImpossible(value) { return EINVAL }  // before the owner word and list change
        if value & writer == 0 || owner(m).pointee.load(ordering: .relaxed) != threadID() { return notWrittenByCaller(m, value, downgrade: true) }
        if value & shared != 0 && !LockOwner.remove(m) { return EPERM }
        owner(m).pointee.store(0, ordering: .relaxed)
        while true {
            if value & writer == 0 || isImpossible(value) { return EINVAL }
            var next = (value & ~writer) &+ 1
            if value & writersWaiting == 0 { next &= ~readersParked }
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        if value & (writersWaiting | readersParked) == readersParked {
            Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
        }
        LockOrder.changed(m, from: .writeLock, to: .readLock)
        return 0
    }

    // MARK: the upgradable reader

    /// 0, EBUSY (a writer or an upgradable reader holds it, the caller included, or a writer
    /// waits), or EINVAL.
    @inlinable @inline(__always)
    package static func tryUpgradableLock(_ m: Memory) -> Int32 {
        LockOrder.tried(m, .upgradableRead, attemptUpgradable(m))
    }

    /// `tryUpgradableLock` without the lock-order hook.
    @usableFromInline
    static func attemptUpgradable(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while value & (writer | writersWaiting | upgradable | upgrading) == 0 {
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: value | upgradable, ordering: .acquiring)
            if exchanged {
                tookUpgradable(m, value)
                return 0
            }
            value = now
        }
        return isImpossibleUpgrade(value) ? EINVAL : EBUSY
    }

    /// The caller just took UPGRADABLE from `value`: it names itself.
    @inlinable @inline(__always)
    static func tookUpgradable(_ m: Memory, _ value: UInt32) {
        owner(m).pointee.store(threadID(), ordering: .relaxed)
        if value & shared != 0 { noteSharedWriter(m) }
    }

    /// Takes the upgradable read: waits while a writer or another upgradable reader holds it or
    /// a writer waits. 0, ETIMEDOUT, EINTR (interruptible), EINVAL, or EDEADLK if the caller
    /// holds it for writing or as the upgradable reader.
    @inlinable
    package static func upgradableLock(_ m: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let value = state(m).pointee.load(ordering: .relaxed)
        if value & (writer | writersWaiting | upgradable | upgrading) == 0,
           state(m).pointee.compareExchange(expected: value, desired: value | upgradable, ordering: .acquiring).exchanged {
            tookUpgradable(m, value)
            LockOrder.acquired(m, .upgradableRead)
            return 0
        }
        return LockOrder.waited(m, .upgradableRead) { upgradableLockSlow(m, deadline: deadline, interruptible: interruptible) }
    }

    @usableFromInline @inline(never)
    static func upgradableLockSlow(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        let first = state(m).pointee.load(ordering: .relaxed)
        if isImpossibleUpgrade(first) { return EINVAL }
        if heldByCaller(m, first, threadID()) { return EDEADLK }
        return waitAsReader(m, blockers: writer | writersWaiting | upgradable | upgrading, deadline: deadline,
                            interruptible: interruptible, attempt: attemptUpgradable)
    }

    /// Releases the caller's upgradable read; if no plain reader holds the lock, as the last
    /// reader's release. 0, EPERM (the caller is not the upgradable reader), or EINVAL.
    @usableFromInline
    package static func upgradableUnlock(_ m: Memory) -> Int32 {
        LockOrder.releasing(m, .upgradableRead)
        var value = state(m).pointee.load(ordering: .relaxed)
        if isImpossibleUpgrade(value) { return EINVAL }
        if !upgradableByCaller(m, value, threadID()) { return EPERM }
        if value & shared != 0 && !LockOwner.remove(m) { return EPERM }
        owner(m).pointee.store(0, ordering: .relaxed)
        var rest: UInt32
        while true {
            if value & upgradable == 0 || isImpossibleUpgrade(value) { return EINVAL }  // overwritten
            rest = value & ~(upgradable | upgrading)
            let next = rest & readerMask == 0 ? freed(rest) : unparked(rest)
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        if rest & readerMask == 0 {
            if rest & (writersWaiting | readersParked) != 0 { wakeAfterRelease(m, rest) }
        } else {
            wakeParkedReaders(m, rest)
        }
        return 0
    }

    /// `value` without READERS_PARKED unless marked: the parked readers may go (`wakeParkedReaders`).
    @inlinable @inline(__always)
    static func unparked(_ value: UInt32) -> UInt32 {
        value & writersWaiting == 0 ? value & ~readersParked : value
    }

    /// After a CAS from `value` to `unparked(value)` that let readers in: wakes the parked ones.
    @usableFromInline
    static func wakeParkedReaders(_ m: Memory, _ value: UInt32) {
        if value & (writersWaiting | readersParked) == readersParked {
            Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
        }
    }

    /// Turns the caller's upgradable read into the write lock with no release in between: sets
    /// UPGRADING (new readers wait) and waits for the plain readers to leave. On a timeout or a
    /// signal the caller keeps the upgradable read. 0, ETIMEDOUT, EINTR (interruptible), EINVAL,
    /// or EDEADLK if the caller is not the upgradable reader (a plain reader's upgrade would
    /// wait for itself; the write holder's second upgrade could never end).
    @usableFromInline
    package static func upgrade(_ m: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        if isImpossibleUpgrade(value) { return EINVAL }
        if !upgradableByCaller(m, value, threadID()) { return EDEADLK }
        while value & readerMask == 0 {
            if takeUpgraded(m, &value) { return 0 }
        }
        if deadline == 0 { return ETIMEDOUT }
        return upgradeSlow(m, deadline: deadline, interruptible: interruptible)
    }

    /// The upgrade without waiting: 0, EBUSY (plain readers hold it), EINVAL, or EDEADLK.
    @usableFromInline
    package static func tryUpgrade(_ m: Memory) -> Int32 {
        let result = upgrade(m, deadline: 0)
        return result == ETIMEDOUT ? EBUSY : result
    }

    /// The upgradable reader, seeing `value` with no plain reader, takes the write lock in one
    /// CAS (keeping the mark and the parked readers). False, with `value` updated, if `state`
    /// changed.
    @inlinable @inline(__always)
    static func takeUpgraded(_ m: Memory, _ value: inout UInt32) -> Bool {
        let next = (value & ~(upgradable | upgrading)) | writer
        let (exchanged, now) = state(m).pointee.compareExchange(
            expected: value, desired: next, ordering: .sequentiallyConsistent)
        if exchanged { LockOrder.changed(m, from: .upgradableRead, to: .writeLock) }
        value = now
        return exchanged
    }

    @usableFromInline @inline(never)
    static func upgradeSlow(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        var value = state(m).pointee.bitwiseOr(upgrading, ordering: .sequentiallyConsistent).oldValue | upgrading
        var spin = SpinWait()
        while true {
            if value & readerMask == 0 {
                if takeUpgraded(m, &value) { return 0 }
                continue
            }
            if !Deadline.hasPassed(deadline) && spin.spinWithoutYield() {
                value = state(m).pointee.load(ordering: .sequentiallyConsistent)
                continue
            }
            // The last plain reader out wakes `state`; a change since `value` returns at once.
            let result = Futex.waitSliced(UnsafeMutableRawPointer(state(m)), expected: value,
                                          deadline: deadline, shared: value & shared != 0)
            if result.endsWait(interruptible: interruptible) { return abandonUpgrade(m, result.code) }
            value = state(m).pointee.load(ordering: .sequentiallyConsistent)
        }
    }

    /// An upgrade gives up (timeout, signal): it takes the write lock if the readers have gone,
    /// else clears UPGRADING, keeping the upgradable read, and lets the parked readers in
    /// unless a writer waits.
    @usableFromInline
    static func abandonUpgrade(_ m: Memory, _ result: Int32) -> Int32 {
        var value = state(m).pointee.load(ordering: .sequentiallyConsistent)
        while true {
            if value & readerMask == 0 {
                if takeUpgraded(m, &value) { return 0 }
                continue
            }
            let next = unparked(value & ~upgrading)
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        wakeParkedReaders(m, value)
        return result
    }

    /// Turns the caller's upgradable read into a plain read lock in one CAS (the parked readers
    /// may join unless a writer waits). 0, EPERM (the caller is not the upgradable reader),
    /// EAGAIN (2^26-1 plain readers hold it: nothing changes), or EINVAL.
    @usableFromInline
    package static func downgradeUpgradable(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        if isImpossibleUpgrade(value) { return EINVAL }
        if !upgradableByCaller(m, value, threadID()) { return EPERM }
        // The owner word is cleared before the CAS (a new upgradable reader names itself after
        // it), so restored if the CAS cannot be made.
        let isShared = value & shared != 0
        if isShared && !LockOwner.remove(m) { return EPERM }
        let me = owner(m).pointee.load(ordering: .relaxed)
        owner(m).pointee.store(0, ordering: .relaxed)
        while true {
            if value & upgradable == 0 || isImpossibleUpgrade(value) { return EINVAL }
            if value & readerMask == readerMask {
                owner(m).pointee.store(me, ordering: .relaxed)
                if isShared { noteSharedWriter(m) }
                return EAGAIN
            }
            let next = unparked(value & ~(upgradable | upgrading)) &+ 1
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        wakeParkedReaders(m, value)
        LockOrder.changed(m, from: .upgradableRead, to: .readLock)
        return 0
    }

    /// Turns the caller's write lock into the upgradable read in one CAS: no writer can take
    /// the lock in between; the parked readers may join unless a writer waits. 0, EPERM (the
    /// caller does not hold the write lock), or EINVAL.
    @usableFromInline
    package static func downgradeToUpgradable(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        if isImpossible(value) { return EINVAL }
        if !writtenByCaller(m, value, threadID()) { return EPERM }
        while true {  // the owner word and the shared list stay the caller's
            if value & writer == 0 || isImpossible(value) { return EINVAL }
            let next = unparked((value & ~writer) | upgradable)
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: next, ordering: .sequentiallyConsistent)
            if exchanged { break }
            value = now
        }
        wakeParkedReaders(m, value)
        LockOrder.changed(m, from: .writeLock, to: .upgradableRead)
        return 0
    }

    /// Whether the calling thread is the upgradable reader.
    @inlinable package static func isUpgradableByCaller(_ m: Memory) -> Bool {
        upgradableByCaller(m, state(m).pointee.load(ordering: .relaxed), threadID())
    }

    // MARK: wakeups

    /// After a CAS from `value` to `freed(value)`: wakes the upgrade that waits if the
    /// upgradable reader still holds it (nobody else), else a writer if the lock stays marked (a
    /// writer counted but awake takes it, finding the sequence changed if it was about to
    /// sleep), else the parked readers. Process-shared, a release that wakes no writer
    /// withdraws the mark: the writers counted may have died (only preference rests on it);
    /// private, it does so only if no writer is counted (a writer counted since finds the
    /// state changed and re-validates).
    @usableFromInline @inline(never)
    static func wakeAfterRelease(_ m: Memory, _ value: UInt32) {
        if value & upgradable != 0 {
            // Still held: no writer can take it. An upgrade that waits sleeps on `state`.
            if value & upgrading != 0 {
                Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
            }
        } else if value & writersWaiting != 0 {
            wakeups(m).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
            let isShared = value & shared != 0
            if Futex.wake(UnsafeMutableRawPointer(wakeups(m)), count: 1, shared: isShared) > 0 { return }
            // No writer asleep. Private, a writer counted is awake and takes the lock; with none
            // counted the mark is stale (whoever uncounted the last writer withdraws it, but a
            // release must not leave the parked readers asleep behind it if it stayed).
            if !isShared && waiting(m).pointee.load(ordering: .sequentiallyConsistent) != 0 { return }
            _ = withdrawMark(m, freed(value))
        } else if value & readersParked != 0 {
            Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
        }
    }

    /// Wakes one sleeping writer; if none sleeps, the parked readers (the writers they waited
    /// for have gone). A writer about to sleep sees the new sequence and re-validates.
    @usableFromInline
    static func wakeWriterOrReaders(_ m: Memory, shared isShared: Bool) {
        wakeups(m).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if Futex.wake(UnsafeMutableRawPointer(wakeups(m)), count: 1, shared: isShared) > 0 { return }
        if state(m).pointee.load(ordering: .sequentiallyConsistent) & readersParked != 0
            && state(m).pointee.bitwiseAnd(~readersParked, ordering: .sequentiallyConsistent).oldValue & readersParked != 0 {
            Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: isShared)
        }
    }

    /// Adds `delta` (1, or UInt32.max for -1) to `waiting` unless it is saturated (UInt32.max
    /// stays: every writer then counts others). Returns the new count.
    @usableFromInline @discardableResult
    static func countWaiting(_ m: Memory, by delta: UInt32) -> UInt32 {
        var count = waiting(m).pointee.load(ordering: .relaxed)
        while count != .max {
            let (exchanged, now) = waiting(m).pointee.compareExchange(
                expected: count, desired: count &+ delta, ordering: .sequentiallyConsistent)
            if exchanged { return count &+ delta }
            count = now
        }
        return count
    }

    // MARK: queries

    /// Whether the calling thread holds it for writing.
    @inlinable package static func isWriteLockedByCaller(_ m: Memory) -> Bool {
        writtenByCaller(m, state(m).pointee.load(ordering: .relaxed), threadID())
    }

    /// Whether the caller, `me`, holds the lock for writing, its state reading `value`.
    @inlinable @inline(__always)
    static func writtenByCaller(_ m: Memory, _ value: UInt32, _ me: UInt32) -> Bool {
        value & writer != 0 && owner(m).pointee.load(ordering: .relaxed) == me
            && (value & shared == 0 || LockOwner.holds(m))
    }

    /// Whether the caller, `me`, holds the lock for writing or as its upgradable reader.
    @inlinable @inline(__always)
    static func heldByCaller(_ m: Memory, _ value: UInt32, _ me: UInt32) -> Bool {
        value & (writer | upgradable) != 0 && owner(m).pointee.load(ordering: .relaxed) == me
            && (value & shared == 0 || LockOwner.holds(m))
    }

    /// Whether the caller, `me`, is the upgradable reader.
    @inlinable @inline(__always)
    static func upgradableByCaller(_ m: Memory, _ value: UInt32, _ me: UInt32) -> Bool {
        value & upgradable != 0 && owner(m).pointee.load(ordering: .relaxed) == me
            && (value & shared == 0 || LockOwner.holds(m))
    }

    /// A SHARED lock just taken for writing (or as the upgradable reader): the caller lists it.
    @usableFromInline @inline(never)
    static func noteSharedWriter(_ m: Memory) { LockOwner.add(m) }

    /// How many writers wait (a snapshot; a writer that died while waiting stays counted).
    package static func waitingWriters(_ m: Memory) -> UInt32 {
        waiting(m).pointee.load(ordering: .relaxed)
    }
}

/// A writer-preferring read-write lock: many readers or one writer; while a writer waits, new
/// readers wait, so writers never starve. A plain reader cannot upgrade (lock for writing while
/// reading deadlocks: release the read lock first); the one upgradable reader
/// (`upgradableReadLock()`, beside plain readers) can `upgrade()` to the write lock with no
/// release in between; a writer can `downgrade()` to a reader, or to the upgradable reader,
/// without letting another writer in.
///
///     let table = SyncRWLock()
///     let v = table.withReadLock { dictionary[key] }
///     table.withWriteLock { dictionary[key] = v }
///
/// Misuse throws: `wouldDeadlock` when the write holder waits for either side (also with a
/// timeout: it could only time out), `notOwner` when releasing a side not held. The `try`
/// forms return false whoever holds it, the caller included.
public final class SyncRWLock: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: RWLockWords.size)

    public init() {}

    // The plain-read calls count the reads taken and released inside a withUpgradableReadLock
    // block (`UpgradableScopes`), one thread-local load when in none.
    @inlinable public func readLock() throws(LockError) {
        _ = try taken(UpgradableScopes.counted(memory.raw, +1, RWLockWords.readLock(memory.raw)))
    }
    @inlinable public func tryReadLock() -> Bool {
        UpgradableScopes.counted(memory.raw, +1, RWLockWords.tryReadLock(memory.raw)) == 0
    }
    @inlinable public func readLock(timeout: Duration) throws(LockError) -> Bool {
        try taken(UpgradableScopes.counted(memory.raw, +1, RWLockWords.readLock(memory.raw, deadline: Deadline.after(timeout))))
    }
    @inlinable public func readUnlock() throws(LockError) {
        _ = try taken(UpgradableScopes.counted(memory.raw, -1, RWLockWords.readUnlock(memory.raw)))
    }

    @inlinable public func writeLock() throws(LockError) { _ = try taken(RWLockWords.writeLock(memory.raw)) }
    @inlinable public func tryWriteLock() -> Bool { RWLockWords.tryWriteLock(memory.raw) == 0 }
    @inlinable public func writeLock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RWLockWords.writeLock(memory.raw, deadline: Deadline.after(timeout)))
    }
    @inlinable public func writeUnlock() throws(LockError) { _ = try taken(RWLockWords.writeUnlock(memory.raw)) }

    /// Turns the caller's write lock into a read lock atomically (no writer gets in between);
    /// release it with `readUnlock()`. Throws `notOwner` if the caller does not hold the write lock.
    @inlinable public func downgrade() throws(LockError) {
        _ = try taken(UpgradableScopes.counted(memory.raw, +1, RWLockWords.downgrade(memory.raw)))
    }

    // The upgradable read: one holder at a time, beside plain readers; it can upgrade to the
    // write lock with no release in between (see `RWLockWords` and docs/locks.md).

    /// Takes the upgradable read, waiting while a writer holds or waits, or another thread holds
    /// it. Throws `wouldDeadlock` if the caller holds the write lock or the upgradable read.
    @inlinable public func upgradableReadLock() throws(LockError) {
        _ = try taken(RWLockWords.upgradableLock(memory.raw))
    }
    /// Takes the upgradable read if nobody else holds it and no writer holds or waits.
    @inlinable public func tryUpgradableReadLock() -> Bool { RWLockWords.tryUpgradableLock(memory.raw) == 0 }
    /// As `upgradableReadLock()`, false once `timeout` has passed.
    @inlinable public func upgradableReadLock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RWLockWords.upgradableLock(memory.raw, deadline: Deadline.after(timeout)))
    }
    /// Releases the caller's upgradable read. Throws `notOwner` if the caller does not hold it.
    @inlinable public func upgradableReadUnlock() throws(LockError) {
        _ = try taken(RWLockWords.upgradableUnlock(memory.raw))
    }

    /// Turns the caller's upgradable read into the write lock, with no release in between (no
    /// writer gets in first): waits for the plain readers to leave, new readers waiting
    /// meanwhile. Release it with `writeUnlock()`. Throws `wouldDeadlock` if the caller is not
    /// the upgradable reader (a plain reader, or already upgraded).
    @inlinable public func upgrade() throws(LockError) { _ = try taken(RWLockWords.upgrade(memory.raw)) }
    /// Upgrades if no plain reader holds the lock; false (still the upgradable reader) if one
    /// does. Throws `wouldDeadlock` as `upgrade()`.
    @inlinable public func tryUpgrade() throws(LockError) -> Bool { try taken(RWLockWords.tryUpgrade(memory.raw)) }
    /// As `upgrade()`, false (still the upgradable reader) once `timeout` has passed.
    @inlinable public func upgrade(timeout: Duration) throws(LockError) -> Bool {
        try taken(RWLockWords.upgrade(memory.raw, deadline: Deadline.after(timeout)))
    }
    /// Turns the caller's upgradable read into a plain read lock atomically (another thread may
    /// then take the upgradable read); release it with `readUnlock()`. Throws `notOwner` if the
    /// caller is not the upgradable reader.
    @inlinable public func downgradeUpgradableRead() throws(LockError) {
        _ = try taken(UpgradableScopes.counted(memory.raw, +1, RWLockWords.downgradeUpgradable(memory.raw)))
    }
    /// Turns the caller's write lock into the upgradable read atomically (no writer gets in
    /// between). Throws `notOwner` if the caller does not hold the write lock.
    @inlinable public func downgradeToUpgradableRead() throws(LockError) {
        _ = try taken(RWLockWords.downgradeToUpgradable(memory.raw))
    }

    /// Runs `body` holding the upgradable read; `body` may `upgrade()` (and downgrade) on this
    /// lock, and whichever hold the caller has at its end is released. Traps if the caller
    /// already holds the write lock or the upgradable read (a deadlock), and if `body` released
    /// the hold itself (the block's end would release another reader's read lock).
    @inlinable
    public func withUpgradableReadLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RWLockWords.upgradableLock(memory.raw)
        require(result == 0, "SyncRWLock.withUpgradableReadLock: \(LockError(code: result))")
        UpgradableScopes.enter(memory.raw)
        defer { UpgradableScopes.leave(memory.raw) }
        return try body()
    }

    /// Runs `body` holding a read lock. Traps if the caller holds the write lock (a deadlock).
    @inlinable
    public func withReadLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RWLockWords.readLock(memory.raw)
        require(result == 0, "SyncRWLock.withReadLock: \(LockError(code: result)) (the caller holds the write lock?)")
        defer { _ = RWLockWords.readUnlock(memory.raw) }
        return try body()
    }

    /// Runs `body` holding the write lock. Traps if the caller already holds it (a deadlock).
    @inlinable
    public func withWriteLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RWLockWords.writeLock(memory.raw)
        require(result == 0, "SyncRWLock.withWriteLock: the calling thread already holds the write lock")
        defer { _ = RWLockWords.writeUnlock(memory.raw) }
        return try body()
    }
}

/// The withUpgradableReadLock blocks of the calling thread (the thread-local arrays of
/// sync_shim.h). Plain read locks are counted, not tracked per thread, so a block's end cannot
/// ask the lock whether the caller still holds the read lock its body downgraded to: it counts
/// the plain reads the thread takes and releases on that lock inside the block (through
/// `SyncRWLock`'s methods) instead. At the end it releases the write lock or the upgradable read
/// if the caller holds one, else a read if the count says the caller holds one; else the body
/// released the hold itself, and a release would take another reader's read lock away: it
/// stops the program. Blocks nested deeper than SYNC_UPGRADABLE_MAX are not counted and release
/// a read as before.
@usableFromInline package enum UpgradableScopes {
    /// `result`, after adding `delta` to the innermost block's count for `m` if it is 0 (the
    /// call took, or released, a plain read) and the thread is in a block.
    @inlinable @inline(__always)
    package static func counted(_ m: UnsafeMutableRawPointer, _ delta: Int, _ result: Int32) -> Int32 {
        if _slowPath(sync_thread_upgradable_depth != 0) && result == 0 { count(m, delta) }
        return result
    }

    @usableFromInline @inline(never)
    static func count(_ m: UnsafeMutableRawPointer, _ delta: Int) {
        let depth = min(Int(sync_thread_upgradable_depth), Int(SYNC_UPGRADABLE_MAX))
        withUnsafeMutablePointer(to: &sync_thread_upgradable) { locks in
            locks.withMemoryRebound(to: UnsafeRawPointer?.self, capacity: depth) { locks in
                withUnsafeMutablePointer(to: &sync_thread_upgradable_reads) { reads in
                    reads.withMemoryRebound(to: Int.self, capacity: depth) { reads in
                        for index in stride(from: depth - 1, through: 0, by: -1) where locks[index] == UnsafeRawPointer(m) {
                            reads[index] = max(0, reads[index] + delta)
                            return
                        }
                    }
                }
            }
        }
    }

    /// A block on `m` begins (the caller holds its upgradable read).
    @usableFromInline @inline(never)
    static func enter(_ m: UnsafeMutableRawPointer) {
        let depth = Int(sync_thread_upgradable_depth)
        if depth < Int(SYNC_UPGRADABLE_MAX) {
            withUnsafeMutablePointer(to: &sync_thread_upgradable) { locks in
                locks.withMemoryRebound(to: UnsafeRawPointer?.self, capacity: depth + 1) { $0[depth] = UnsafeRawPointer(m) }
            }
            withUnsafeMutablePointer(to: &sync_thread_upgradable_reads) { reads in
                reads.withMemoryRebound(to: Int.self, capacity: depth + 1) { $0[depth] = 0 }
            }
        }
        sync_thread_upgradable_depth = UInt32(depth + 1)
    }

    /// The block on `m` ends: releases the hold the caller has, or stops the program if it has
    /// none (see the type).
    @usableFromInline @inline(never)
    static func leave(_ m: UnsafeMutableRawPointer) {
        let depth = Int(sync_thread_upgradable_depth) - 1
        sync_thread_upgradable_depth = UInt32(depth)
        if RWLockWords.isWriteLockedByCaller(m) { _ = RWLockWords.writeUnlock(m); return }
        if RWLockWords.isUpgradableByCaller(m) { _ = RWLockWords.upgradableUnlock(m); return }
        let reads = depth < Int(SYNC_UPGRADABLE_MAX)
            ? withUnsafeMutablePointer(to: &sync_thread_upgradable_reads) { reads in
                reads.withMemoryRebound(to: Int.self, capacity: depth + 1) { $0[depth] }
            }
            : 1  // not counted: as before, the read it downgraded to
        require(reads > 0, "SyncRWLock.withUpgradableReadLock: the body released the lock itself (the caller holds "
                + "neither the upgradable read nor the write lock, nor a read lock it downgraded to); release "
                + "nothing inside the body, the block's end releases whichever hold the caller has")
        _ = RWLockWords.readUnlock(m)
    }
}
