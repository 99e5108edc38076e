import CSyncShim
import Glibc
import Synchronization

/// The mutex: one 32-bit word of caller memory.
///
///     bits 0-23  holder: 0 free, else the holder's kernel thread id (ids fit: pid_max <= 2^22),
///                or `anonymous` in unowned mode
///     bit 25     NOT_RECOVERABLE (robust): a holder that got EOWNERDEAD unlocked without consistent
///     bit 26     OWNER_DIED (robust): the holder took the lock from a dead one and has not yet
///                called consistent
///     bit 28     ROBUST mode: the word is the first of a `RobustWord` (16 bytes)
///     bit 29     UNOWNED mode: any thread may unlock (Python's threading.Lock semantics)
///     bit 30     SHARED mode: the futex uses the shared namespace (memory mapped by processes)
///     bit 31     WAITERS: some thread may sleep on the word; unlock must wake one
///
/// Why the holder field is 24 bits where the spin lock's (`SpinWord`) is 22: a mutex also
/// records holders that are no thread. Kernel thread ids are below `threadIDLimit` (2^22); an
/// async task's hold names its process as `AsyncHold.base + pid` (2^22 ..< 2^24 - 1), and
/// unowned mode writes `anonymous` (2^24 - 1). A spin lock only ever records thread ids, so its
/// field is exactly their range and any higher value is a word the library never wrote.
/// Why SHARED is bit 30 here and in `SpinWord`, but bit 31 in `RWLockWords`: bit 31 is WAITERS,
/// and each word's SHARED bit is compiled into programs by its static initializer
/// (SYNC_MUTEX_INIT_SHARED = 0x40000000, SYNC_RWLOCK_INIT_SHARED = 0x80000000), so it cannot
/// move without breaking the ABI. Nothing assumes a common position: the C ABI and Python take
/// each word's flags from the core (`sync_layout`, `LockFlags`).
///
/// A default mutex is 0, so the fast paths are one CAS each: 0 -> tid to lock, tid -> 0 to
/// unlock. Any other value (held, waiters, a mode bit) takes the slow path, where the owner
/// checks (EDEADLK, EPERM) cost nothing on the fast path. Contended, a locker spins (`SpinWait`)
/// while no thread sleeps on the word, then sleeps on the futex. Unlock does
/// not hand the lock to the woken thread: a running thread may take it first (barging), which
/// keeps the lock busy instead of idle while the woken thread is scheduled.
///
/// Owners: a private word's holder is the thread whose id it holds, or whose thread had that id
/// before fork() made it the child's thread (it continues the forking thread). A SHARED or ROBUST word
/// ("tracked") cannot say so alone: the kernel gives a dead holder's id to a new thread, in any
/// process (and processes in other pid namespaces number their threads apart). Such a word is
/// the caller's only if it holds the caller's id and the caller's `LockOwner` list has its
/// address. As these words are never 0, they always take the slow paths, where the list is kept.
@usableFromInline package enum MutexWord {
    @usableFromInline static let holderMask: UInt32 = 0x00FF_FFFF
    @usableFromInline static let notRecoverable: UInt32 = 1 << 25
    @usableFromInline static let ownerDied: UInt32 = 1 << 26
    @usableFromInline package static let robust: UInt32 = 1 << 28
    @usableFromInline package static let unowned: UInt32 = 1 << 29
    @usableFromInline static let shared: UInt32 = 1 << 30
    @usableFromInline static let waiters: UInt32 = 1 << 31
    @usableFromInline static let modes: UInt32 = robust | unowned | shared
    /// The modes whose owners the `LockOwner` lists settle.
    @usableFromInline static let tracked: UInt32 = robust | shared
    /// The holder recorded by an unowned-mode lock (never a kernel thread id).
    @usableFromInline package static let anonymous: UInt32 = holderMask

    @usableFromInline package typealias Word = UnsafeMutablePointer<Atomic<UInt32>>

    /// The initial word of a (non-robust) mutex in the given modes.
    package static func initial(shared isShared: Bool, unowned isUnowned: Bool) -> UInt32 {
        (isShared ? shared : 0) | (isUnowned ? unowned : 0)
    }

    /// Initializes the mutex at `memory`: 4 bytes, or a `RobustWord`'s 16 (8-aligned) if `robust`.
    /// 0; EINVAL (robust and unowned; robust memory not 8-aligned); `shared`: EBUSY, changing
    /// nothing, if the mutex there is held or has waiters (the attach rule, Words.swift).
    package static func initialize(_ memory: UnsafeMutableRawPointer, shared isShared: Bool, unowned isUnowned: Bool,
                                   robust isRobust: Bool) -> Int32 {
        if isRobust { return isUnowned ? EINVAL : RobustWord.initialize(memory, shared: isShared) }
        let result = initializeWord(atomic(memory, as: UInt32.self), to: initial(shared: isShared, unowned: isUnowned),
                                    shared: isShared, unlessInUse: isInUse)
        if result == 0 { LockOrder.forget(memory) }
        return result
    }

    /// Whether a mutex word (plain or robust) is held or has waiters: what a shared initialize
    /// refuses to reset.
    package static func isInUse(_ value: UInt32) -> Bool { value & (holderMask | waiters) != 0 }

    /// 0; EBUSY if held (also by the caller); robust: EOWNERDEAD, ENOTRECOVERABLE, EINVAL.
    @inlinable @inline(__always)
    package static func tryLock(_ word: Word) -> Int32 {
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged {
            LockOrder.acquired(word, .mutex, tried: true)
            return 0
        }
        return LockOrder.settled(word, .mutex, tryLockSlow(word, me), tried: true)
    }

    /// 0; ETIMEDOUT once `deadline` (monotonic ns, < 0: none) passes; EDEADLK if the caller
    /// holds it (owned mode); EINTR if `interruptible` and a signal interrupts the sleep; robust:
    /// EOWNERDEAD (taken from a dead holder), ENOTRECOVERABLE, EINVAL.
    @inlinable @inline(__always)
    package static func lock(_ word: Word, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: 0, desired: me, ordering: .acquiring).exchanged {
            LockOrder.acquired(word, .mutex)
            return 0
        }
        return lockSlow(word, me, deadline: deadline, interruptible: interruptible)
    }

    /// 0, or EPERM if the caller does not hold it (unowned mode: if it is not held).
    @inlinable @inline(__always)
    package static func unlock(_ word: Word, hooked: Bool = false) -> Int32 {
        if !hooked && _slowPath(sync_lock_order_flag != 0) { return LockOrder.unlockingMutex(word) }
        let me = cachedThreadID()
        if me != 0 && word.pointee.compareExchange(expected: me, desired: 0, ordering: .releasing).exchanged { return 0 }
        return unlockSlow(word, me)
    }

    /// Robust mode: marks the state the lock guards repaired after EOWNERDEAD. 0; EPERM if the
    /// caller does not hold it; EINVAL if it is not robust or not marked OWNER_DIED.
    package static func consistent(_ word: Word) -> Int32 {
        guard word.pointee.load(ordering: .relaxed) & robust != 0 else { return EINVAL }
        if AsyncHold.isAsyncHolder(word.pointee.load(ordering: .relaxed) & holderMask) { return AsyncHold.consistent(word) }
        return RobustWord.consistent(UnsafeMutableRawPointer(word))
    }

    /// Whether the lock is held (by anyone): a snapshot.
    @inlinable
    package static func isLocked(_ word: Word) -> Bool {
        word.pointee.load(ordering: .relaxed) & holderMask != 0
    }

    /// Whether the calling thread holds it (owned mode).
    @inlinable @inline(__always)
    package static func isOwnedByCaller(_ word: Word) -> Bool {
        heldByCaller(word, word.pointee.load(ordering: .relaxed), threadID())
    }

    /// Whether the caller, `me`, holds the owned-mode lock whose word reads `value`: the owner
    /// check of lock (EDEADLK), unlock (EPERM) and the queries. A private word is the caller's if
    /// it holds the caller's id or one its thread had before fork() (`heldByAncestor`); a
    /// tracked one only if it holds the caller's id and the caller's list has it.
    @usableFromInline @inline(__always)
    static func heldByCaller(_ word: Word, _ value: UInt32, _ me: UInt32) -> Bool {
        let held = value & holderMask
        if value & tracked != 0 { return held == me && LockOwner.holds(UnsafeMutableRawPointer(word)) }
        return held == me || (held != 0 && heldByAncestor(value))
    }

    /// Whether the holder of a private owned-mode word is the calling thread under an id it had
    /// before fork() made it a child's thread (it still holds what it held). Never for a tracked
    /// word: a child holds none of its parent's shared locks, and a robust one whose holder is
    /// not in the process is a dead holder's (RobustWord).
    @usableFromInline @inline(never)
    static func heldByAncestor(_ value: UInt32) -> Bool {
        value & (tracked | unowned) == 0 && value & holderMask != 0 && sync_thread_is_ancestor(value & holderMask) != 0
    }

    @usableFromInline @inline(__always)
    static func holder(for value: UInt32, me: UInt32) -> UInt32 {
        value & unowned != 0 ? anonymous : me
    }

    /// A shared owned-mode lock just taken: the caller lists it.
    @inline(__always)
    static func noteTaken(_ word: Word, _ value: UInt32) {
        if value & (shared | unowned) == shared { LockOwner.add(UnsafeMutableRawPointer(word)) }
    }

    @usableFromInline @inline(never)
    static func tryLockSlow(_ word: Word, _ cached: UInt32) -> Int32 {
        let value = word.pointee.load(ordering: .relaxed)
        if value & robust != 0 { return RobustWord.lock(UnsafeMutableRawPointer(word), wait: false, recursive: false) }
        let me = cached != 0 ? cached : threadID()
        guard takeIfFree(word, me) else { return EBUSY }
        noteTaken(word, value)
        return 0
    }

    /// Takes the lock if it is free.
    static func takeIfFree(_ word: Word, _ me: UInt32) -> Bool {
        var value = word.pointee.load(ordering: .relaxed)
        while value & holderMask == 0 {
            let (exchanged, now) = word.pointee.compareExchange(
                expected: value, desired: value | holder(for: value, me: me), ordering: .acquiring)
            if exchanged { return true }
            value = now
        }
        return false
    }

    @usableFromInline @inline(never)
    static func lockSlow(_ word: Word, _ cached: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        LockOrder.waited(word, .mutex) { lockWaiting(word, cached, deadline: deadline, interruptible: interruptible) }
    }

    static func lockWaiting(_ word: Word, _ cached: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        let value = word.pointee.load(ordering: .relaxed)
        if AsyncHold.isAsyncHolder(value & holderMask) && AsyncHold.isHeldByCurrentTask(word) { return EDEADLK }
        if value & robust != 0 {
            return RobustWord.lock(UnsafeMutableRawPointer(word), deadline: deadline, interruptible: interruptible, recursive: false)
        }
        let me = cached != 0 ? cached : threadID()
        if value & unowned == 0 && heldByCaller(word, value, me) { return EDEADLK }
        let result = wait(word, me, deadline: deadline, interruptible: interruptible)
        if result == 0 { noteTaken(word, value) }
        return result
    }

    /// Takes the lock, waiting: 0, ETIMEDOUT, or EINTR (`interruptible`).
    static func wait(_ word: Word, _ me: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        var value = word.pointee.load(ordering: .relaxed)
        let mine = holder(for: value, me: me)
        let isShared = value & shared != 0
        if spinToTake(word, &value, holders: holderMask, mine: mine) { return 0 }
        // Sleep. A thread that has slept takes the lock with WAITERS set: others may still
        // sleep, and one spurious wake costs less than a lost one.
        while true {
            value = word.pointee.load(ordering: .relaxed)
            if value & holderMask == 0 {
                if word.pointee.compareExchange(expected: value, desired: value | waiters | mine,
                                                ordering: .acquiring).exchanged { return 0 }
                continue
            }
            if value & waiters == 0 {
                if !word.pointee.compareExchange(expected: value, desired: value | waiters,
                                                 ordering: .relaxed).exchanged { continue }
            }
            // Shared: in slices, so that a wakeup taken by a process that died before taking
            // the lock leaves this waiter asleep one slice at most (it re-validates above).
            let result = Futex.waitSliced(UnsafeMutableRawPointer(word), expected: value | waiters,
                                          deadline: deadline, shared: isShared)
            if result.endsWait(interruptible: interruptible) {
                return takeIfFree(word, me) ? 0 : result.code
            }
        }
    }

    /// The spinning phase of a contended lock, shared with `os_unfair_lock`'s word (whose
    /// WAITERS is bit 31 too): while nobody sleeps on `word`, spins (`SpinWait`), reading before
    /// writing and after every spin-wait hint, and takes the word once its `holders` bits are
    /// clear, setting `mine` there.
    /// True if taken; false once a sleeper is announced or the rounds are spent (the caller
    /// sleeps), `value` the last state seen.
    package static func spinToTake(_ word: Word, _ value: inout UInt32, holders: UInt32, mine: UInt32) -> Bool {
        var spin = SpinWait()
        while true {
            if value & holders == 0 {
                let (exchanged, now) = word.pointee.compareExchange(
                    expected: value, desired: value | mine, ordering: .acquiring)
                if exchanged { return true }
                value = now
                continue
            }
            if value & waiters != 0 || !spin.spin(until: { word.pointee.load(ordering: .relaxed) & holders == 0 }) {
                return false
            }
            value = word.pointee.load(ordering: .relaxed)
        }
    }

    @usableFromInline @inline(never)
    static func unlockSlow(_ word: Word, _ cached: UInt32) -> Int32 {
        var value = word.pointee.load(ordering: .relaxed)
        if AsyncHold.isAsyncHolder(value & holderMask) { return AsyncHold.unlock(word) }  // a task's hold
        if value & robust != 0 { return RobustWord.unlock(UnsafeMutableRawPointer(word), recursive: false) }
        // Unowned (any caller releases it) and held: a task of this process that waits for it
        // gets it straight, the word staying held (docs/async.md).
        if value & unowned != 0 && value & holderMask != 0,
           let runtime = AsyncRuntime.existing, runtime.handOff(word) {
            return 0
        }
        let me = cached != 0 ? cached : threadID()
        let owner = value & holderMask
        if value & unowned == 0 {
            // Owned mode: the caller's id (private: or its thread's before fork()), and for a
            // shared lock its list's entry, struck off here. Only the holder changes the holder
            // field, so the release below succeeds.
            let mine = value & shared != 0 ? owner == me && LockOwner.remove(UnsafeMutableRawPointer(word))
                                           : owner == me || (owner != 0 && heldByAncestor(value))
            guard mine else { return EPERM }
        }
        while true {
            let held = value & holderMask
            if held == 0 || (value & unowned == 0 && held != owner) { return EPERM }
            let (exchanged, now) = word.pointee.compareExchange(
                expected: value, desired: value & modes, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        if value & waiters != 0 {
            Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: value & shared != 0)
        }
        return 0
    }
}
