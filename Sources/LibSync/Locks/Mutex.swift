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
        let word = atomic(memory, as: UInt32.self), desired = initial(shared: isShared, unowned: isUnowned)
        if isShared {
            // One CAS from the free word seen: a holder that takes it meanwhile makes it fail.
            var value = word.pointee.load(ordering: .relaxed)
            while true {
                if isInUse(value) { return EBUSY }
                let (exchanged, now) = word.pointee.compareExchange(expected: value, desired: desired, ordering: .acquiringAndReleasing)
                if exchanged { break }
                value = now
            }
        } else {
            word.pointee.store(desired, ordering: .releasing)
        }
        LockOrder.forget(memory)
        return 0
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
        LockOrder.waiting(word, .mutex)
        return LockOrder.settled(word, .mutex, lockWaiting(word, cached, deadline: deadline, interruptible: interruptible))
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
        // Spin (SpinWait) while nobody sleeps, reading before writing.
        var spin = SpinWait()
        while true {
            if value & holderMask == 0 {
                let (exchanged, now) = word.pointee.compareExchange(
                    expected: value, desired: value | mine, ordering: .acquiring)
                if exchanged { return 0 }
                value = now
                continue
            }
            if value & waiters != 0 || !spin.spin() { break }
            value = word.pointee.load(ordering: .relaxed)
        }
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
            if result == ETIMEDOUT || (result == EINTR && interruptible) {
                return takeIfFree(word, me) ? 0 : result
            }
        }
    }

    @usableFromInline @inline(never)
    static func unlockSlow(_ word: Word, _ cached: UInt32) -> Int32 {
        var value = word.pointee.load(ordering: .relaxed)
        if AsyncHold.isAsyncHolder(value & holderMask) { return AsyncHold.unlock(word) }  // a task's hold
        if value & robust != 0 { return RobustWord.unlock(UnsafeMutableRawPointer(word), recursive: false) }
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

/// The calling thread as the holder of tracked locks (process-shared or robust, see MutexWord):
/// the addresses of those it holds, and, for robust locks, who it is beyond its thread id.
/// One record per thread, reached through a pthread key and freed when the thread exits. In a
/// fork()ed child the forking thread's record still names the parent's thread (the child's id
/// differs): it is emptied on first use, as the child holds none of the parent's locks.
@usableFromInline package enum LockOwner {
    @usableFromInline struct Record {
        /// The thread it describes.
        var tid: UInt32
        /// The addresses of the tracked locks the thread holds (few: a linear search is fastest).
        var count = 0, capacity = 0
        var held: UnsafeMutablePointer<UInt>? = nil
        /// Robust locks: whether the two fields below have been read, the thread's start time
        /// (clock ticks since boot, low 32 bits; 0: unknown) and its namespace tag.
        var identityRead = false
        var startTime: UInt32 = 0
        var namespaceTag: UInt32 = 0
        /// The last holder found alive, and until when (monotonic ns) that verdict stands.
        var aliveTid: UInt32 = 0, aliveStart: UInt32 = 0, aliveUntil: Int64 = 0

        init(tid: UInt32) { self.tid = tid }

        func index(of lock: UnsafeMutableRawPointer) -> Int? {
            let address = UInt(bitPattern: lock)
            for i in 0..<count where held![i] == address { return i }
            return nil
        }
    }

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { raw in
            guard let record = raw?.assumingMemoryBound(to: Record.self) else { return }
            record.pointee.held?.deallocate()
            record.deinitialize(count: 1)
            record.deallocate()
        }
        precondition(status == 0, "LockOwner: pthread_key_create failed (\(status))")
        return key
    }()

    /// The calling thread's record, made on first use.
    static func current() -> UnsafeMutablePointer<Record> {
        let me = threadID()
        if let raw = pthread_getspecific(key) {
            let record = raw.assumingMemoryBound(to: Record.self)
            if record.pointee.tid != me {  // a fork()ed child: none of it is the child's
                let held = record.pointee.held, capacity = record.pointee.capacity
                record.pointee = Record(tid: me)
                record.pointee.held = held
                record.pointee.capacity = capacity
            }
            return record
        }
        let record = UnsafeMutablePointer<Record>.allocate(capacity: 1)
        record.initialize(to: Record(tid: me))
        pthread_setspecific(key, record)
        return record
    }

    /// Whether the calling thread's list has `lock`.
    @usableFromInline @inline(never)
    static func holds(_ lock: UnsafeMutableRawPointer) -> Bool {
        guard let raw = pthread_getspecific(key) else { return false }
        let record = raw.assumingMemoryBound(to: Record.self)
        return record.pointee.tid == threadID() && record.pointee.index(of: lock) != nil
    }

    /// Lists `lock` as held by the calling thread.
    static func add(_ lock: UnsafeMutableRawPointer) {
        let record = current()
        if record.pointee.index(of: lock) != nil { return }
        if record.pointee.count == record.pointee.capacity {
            let capacity = max(4, record.pointee.capacity * 2)
            let held = UnsafeMutablePointer<UInt>.allocate(capacity: capacity)
            if let old = record.pointee.held {
                held.update(from: old, count: record.pointee.count)
                old.deallocate()
            }
            record.pointee.held = held
            record.pointee.capacity = capacity
        }
        record.pointee.held![record.pointee.count] = UInt(bitPattern: lock)
        record.pointee.count += 1
    }

    /// Removes `lock` from the calling thread's list; returns whether it was there.
    static func remove(_ lock: UnsafeMutableRawPointer) -> Bool {
        guard let raw = pthread_getspecific(key) else { return false }
        let record = raw.assumingMemoryBound(to: Record.self)
        guard record.pointee.tid == threadID(), let i = record.pointee.index(of: lock) else { return false }
        record.pointee.count -= 1
        record.pointee.held![i] = record.pointee.held![record.pointee.count]
        return true
    }

    /// The calling thread's record with its start time and namespace tag read.
    static func identified() -> UnsafeMutablePointer<Record> {
        let record = current()
        if !record.pointee.identityRead {
            record.pointee.startTime = ThreadStat.read(record.pointee.tid)?.start ?? 0
            record.pointee.namespaceTag = ThreadStat.namespaceTag()
            record.pointee.identityRead = true
        }
        return record
    }
}

/// What /proc says of threads: their state and start time, and the caller's namespaces.
enum ThreadStat {
    /// The state letter and start time (clock ticks since boot, low 32 bits) of thread `tid`
    /// of the caller's pid namespace, from /proc/<tid>/task/<tid>/stat; nil if unreadable.
    static func read(_ tid: UInt32) -> (state: UInt8, start: UInt32)? {
        let fd = open("/proc/\(tid)/task/\(tid)/stat", O_RDONLY | O_CLOEXEC)
        if fd < 0 { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024) { buffer -> (state: UInt8, start: UInt32)? in
            var length = 0
            while length < buffer.count {
                let n = Glibc.read(fd, buffer.baseAddress! + length, buffer.count - length)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                length += n
            }
            // "tid (comm) state ppid ... starttime ...": the comm may hold any byte, the fields
            // after it only digits and signs, so they start after the last ')'. The state is
            // field 3, the start time field 22.
            guard let close = buffer[..<length].lastIndex(of: UInt8(ascii: ")")), close + 2 < length else { return nil }
            let state = buffer[close + 2]
            var field = 3, i = close + 2, start: UInt64 = 0
            while i < length && field < 22 {
                if buffer[i] == UInt8(ascii: " ") { field += 1 }
                i += 1
            }
            guard field == 22 else { return nil }
            while i < length, case let digit = buffer[i] &- UInt8(ascii: "0"), digit < 10 {
                start = start &* 10 &+ UInt64(digit)
                i += 1
            }
            return (state, UInt32(truncatingIfNeeded: start))
        }
    }

    /// A 32-bit digest of the caller's pid and time namespaces (the inode numbers of
    /// /proc/self/ns/pid and /proc/self/ns/time), never 0: thread ids and start times mean the
    /// same to two threads only if their tags are equal. 1 if /proc cannot tell.
    static func namespaceTag() -> UInt32 {
        func inode(_ path: String) -> UInt64 {
            var info = stat()
            return stat(path, &info) == 0 ? UInt64(info.st_ino) : 0
        }
        let pid = inode("/proc/self/ns/pid"), time = inode("/proc/self/ns/time")
        if pid == 0 { return 1 }
        var h = (pid &* 0x9E37_79B9_7F4A_7C15) ^ time
        h = (h ^ (h >> 31)) &* 0xBF58_476D_1CE4_E5B9
        h ^= h >> 29
        return UInt32(truncatingIfNeeded: h) | 2
    }
}

/// A robust mutex or recursive lock: 16 bytes, 8-aligned, of caller memory.
///
///     bytes 0-7    the state, one 64-bit atomic: its half at offset 0 is the futex word, a
///                  MutexWord with ROBUST set; the other half the holder's start time
///     bytes 8-11   the recursion depth (recursive lock; only the holder touches it)
///     bytes 12-15  the namespace tag: 0, then that of the first thread to lock it
///
/// A dead holder cannot unlock, and no unlock wakes its waiters: they find out. The holder's tid
/// alone cannot tell whether it lives, as the kernel reuses the ids of dead threads, so the
/// holder writes its start time (from /proc) in the same CAS that takes the lock. Before each
/// sleep, and at least every `slice` while asleep, a waiter checks the holder (`isDead`); so does
/// a trylock that finds the lock held. It takes a dead holder's lock with OWNER_DIED set and
/// returns EOWNERDEAD; `consistent` clears the bit; an unlock with the bit set leaves the lock
/// NOT_RECOVERABLE and wakes every waiter to say so. Tids and start times mean the same only
/// within one pid and time namespace: the tag makes a thread of another namespace get EINVAL.
@usableFromInline package enum RobustWord {
    @usableFromInline package typealias Memory = UnsafeMutableRawPointer
    /// The longest a waiter sleeps before checking the holder again.
    static let slice: Int64 = 250_000_000

    static func bits(_ memory: Memory) -> UnsafeMutablePointer<Atomic<UInt64>> { atomic(memory, as: UInt64.self) }
    @usableFromInline package static func depth(_ memory: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(memory + 8, as: UInt32.self) }
    static func tagCell(_ memory: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(memory + 12, as: UInt32.self) }

    /// The futex word (the half at offset 0) and the holder's start time (the other half).
    static func word(of state: UInt64) -> UInt32 {
        #if _endian(little)
        UInt32(truncatingIfNeeded: state)
        #else
        UInt32(truncatingIfNeeded: state >> 32)
        #endif
    }
    static func start(of state: UInt64) -> UInt32 {
        #if _endian(little)
        UInt32(truncatingIfNeeded: state >> 32)
        #else
        UInt32(truncatingIfNeeded: state)
        #endif
    }
    static func pack(_ word: UInt32, _ start: UInt32) -> UInt64 {
        #if _endian(little)
        UInt64(start) << 32 | UInt64(word)
        #else
        UInt64(word) << 32 | UInt64(start)
        #endif
    }

    /// Initializes the 16 bytes at `memory`: 0, EINVAL if not 8-aligned, or (`shared`) EBUSY,
    /// changing nothing, if the lock there is held (also by a dead holder: lock it to take it
    /// over) or has waiters. A not-recoverable lock is neither: initialize makes it usable.
    static func initialize(_ memory: Memory, shared: Bool) -> Int32 {
        guard Int(bitPattern: memory) & 7 == 0 else { return EINVAL }
        if shared && MutexWord.isInUse(word(of: bits(memory).pointee.load(ordering: .acquiring))) { return EBUSY }
        LockOrder.forget(memory)
        depth(memory).pointee.store(0, ordering: .relaxed)
        tagCell(memory).pointee.store(0, ordering: .relaxed)
        let word = MutexWord.robust | (shared ? MutexWord.shared : 0)
        bits(memory).pointee.store(pack(word, 0), ordering: .releasing)
        return 0
    }

    /// Takes the lock (`wait`: waiting as long as needed; otherwise only if it is free or its
    /// holder is dead). 0; EOWNERDEAD, holding it; ENOTRECOVERABLE; if the caller holds it:
    /// deeper (`recursive`; EAGAIN on overflow), else EDEADLK (EBUSY without `wait`); EBUSY
    /// (without `wait`) if another thread holds it; ETIMEDOUT; EINTR (`interruptible`); EINVAL
    /// (memory not 8-aligned, or a lock of threads in another pid or time namespace).
    static func lock(_ memory: Memory, deadline: Int64 = -1, interruptible: Bool = false, wait: Bool = true,
                     recursive: Bool) -> Int32 {
        guard Int(bitPattern: memory) & 7 == 0 else { return EINVAL }
        let owner = LockOwner.identified()
        let me = owner.pointee.tid, myStart = owner.pointee.startTime, myTag = owner.pointee.namespaceTag
        let tag = tagCell(memory).pointee.load(ordering: .relaxed)
        if tag != myTag {
            if tag != 0 { return EINVAL }
            let (exchanged, now) = tagCell(memory).pointee.compareExchange(expected: 0, desired: myTag, ordering: .relaxed)
            if !exchanged && now != myTag { return EINVAL }
        }
        var slept = false, stop: Int32 = 0
        var state = bits(memory).pointee.load(ordering: .relaxed)
        while true {
            let word = Self.word(of: state)
            if word & MutexWord.notRecoverable != 0 { return ENOTRECOVERABLE }
            let holder = word & MutexWord.holderMask
            if holder == 0 {
                let desired = pack(word | me | (slept ? MutexWord.waiters : 0), myStart)
                let (exchanged, now) = bits(memory).pointee.compareExchange(expected: state, desired: desired, ordering: .acquiring)
                if exchanged { return noteTaken(memory, recursive, 0) }
                state = now
                continue
            }
            if holder == me && LockOwner.holds(memory) {
                return recursive ? RecursiveWord.deepen(depth(memory)) : wait ? EDEADLK : EBUSY
            }
            // A holder with the caller's own id, on a lock the caller does not hold, is a dead
            // thread whose id the kernel gave to the caller.
            if holder == me || isDead(holder, start: start(of: state), private: word & MutexWord.shared == 0, asking: owner) {
                let kept = word & (MutexWord.modes | MutexWord.waiters) | (slept ? MutexWord.waiters : 0)
                let desired = pack(kept | MutexWord.ownerDied | me, myStart)
                let (exchanged, now) = bits(memory).pointee.compareExchange(expected: state, desired: desired, ordering: .acquiring)
                if exchanged { return noteTaken(memory, recursive, EOWNERDEAD) }
                state = now
                continue
            }
            if !wait { return EBUSY }
            if stop != 0 { return stop }
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) { return ETIMEDOUT }
            if word & MutexWord.waiters == 0 {
                let marked = pack(word | MutexWord.waiters, start(of: state))
                let (exchanged, current) = bits(memory).pointee.compareExchange(expected: state, desired: marked, ordering: .relaxed)
                state = current
                if !exchanged { continue }
            }
            let until = Deadline.earliest(deadline, now + slice)
            let result = Futex.wait(memory, expected: word | MutexWord.waiters, deadline: until,
                                    shared: word & MutexWord.shared != 0)
            slept = true
            if result == EINTR && interruptible { stop = EINTR }
            state = bits(memory).pointee.load(ordering: .relaxed)
        }
    }

    static func noteTaken(_ memory: Memory, _ recursive: Bool, _ result: Int32) -> Int32 {
        LockOwner.add(memory)
        if recursive { depth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    /// Releases the lock (`recursive`: one level of it). 0; EPERM if the caller does not hold
    /// it; EINVAL if the memory is not 8-aligned.
    static func unlock(_ memory: Memory, recursive: Bool) -> Int32 {
        guard Int(bitPattern: memory) & 7 == 0 else { return EINVAL }
        var state = bits(memory).pointee.load(ordering: .relaxed)
        guard word(of: state) & MutexWord.holderMask == threadID() && LockOwner.holds(memory) else { return EPERM }
        if recursive {
            let level = depth(memory).pointee.load(ordering: .relaxed)
            if level > 1 {
                depth(memory).pointee.store(level - 1, ordering: .relaxed)
                return 0
            }
            depth(memory).pointee.store(0, ordering: .relaxed)
        }
        _ = LockOwner.remove(memory)
        var released: UInt32
        while true {
            let word = Self.word(of: state)
            released = word & MutexWord.modes
            if word & MutexWord.ownerDied != 0 { released |= MutexWord.notRecoverable }
            let (exchanged, now) = bits(memory).pointee.compareExchange(
                expected: state, desired: pack(released, 0), ordering: .releasing)
            if exchanged { break }
            state = now
        }
        let word = Self.word(of: state)
        if word & MutexWord.waiters != 0 {
            // Not recoverable: every waiter must wake to return ENOTRECOVERABLE.
            Futex.wake(memory, count: released & MutexWord.notRecoverable != 0 ? Int32.max : 1,
                       shared: word & MutexWord.shared != 0)
        }
        return 0
    }

    /// Clears OWNER_DIED. 0; EPERM if the caller does not hold the lock; EINVAL if it is not
    /// marked (or the memory is not 8-aligned).
    static func consistent(_ memory: Memory) -> Int32 {
        guard Int(bitPattern: memory) & 7 == 0 else { return EINVAL }
        var state = bits(memory).pointee.load(ordering: .relaxed)
        guard word(of: state) & MutexWord.holderMask == threadID() && LockOwner.holds(memory) else { return EPERM }
        while word(of: state) & MutexWord.ownerDied != 0 {
            let repaired = pack(word(of: state) & ~MutexWord.ownerDied, start(of: state))
            let (exchanged, now) = bits(memory).pointee.compareExchange(expected: state, desired: repaired, ordering: .relaxed)
            if exchanged { return 0 }
            state = now
        }
        return EINVAL
    }

    /// Whether the thread `tid` that started at `start` (0: unknown) has certainly exited.
    /// kill(tid, 0) fails with ESRCH if no thread has the id (for a `private` lock, which only
    /// this process's threads can hold, tgkill(getpid(), tid, 0) if none of them has it: in a
    /// fork()ed child, the parent's threads); /proc tells a zombie, and a start time other than
    /// the holder's (the id was reused). What cannot be read counts as alive: a death is reported
    /// only when certain. A holder found alive is not read again for a slice (`asking`'s cache):
    /// waiters of a busy lock make one kill(2) call per sleep.
    static func isDead(_ tid: UInt32, start: UInt32, private: Bool, asking owner: UnsafeMutablePointer<LockOwner.Record>) -> Bool {
        // An async holder is a process (AsyncHold): its pid and start time.
        let tid = AsyncHold.isAsyncHolder(tid) ? AsyncHold.process(of: tid) : tid
        func gone() -> Bool {
            let id = Int32(bitPattern: tid)
            return `private` ? sync_tgkill_probe(getpid(), id) == ESRCH : kill(id, 0) != 0 && errno == ESRCH
        }
        if gone() { return true }
        let now = monotonicNow()
        if owner.pointee.aliveTid == tid && owner.pointee.aliveStart == start && now < owner.pointee.aliveUntil { return false }
        guard let found = ThreadStat.read(tid) else { return gone() }  // it exited since, or /proc hides it
        if found.state == UInt8(ascii: "Z") || found.state == UInt8(ascii: "X") || found.state == UInt8(ascii: "x") { return true }
        if start != 0 && found.start != start { return true }
        owner.pointee.aliveTid = tid
        owner.pointee.aliveStart = start
        owner.pointee.aliveUntil = now + slice
        return false
    }
}

/// The recursive lock: a mutex word and the owner's depth (8 bytes), or in robust mode a
/// `RobustWord` (16 bytes, the depth at byte 8). Only the owner touches the depth, so it needs no
/// atomicity beyond the word's acquire/release. Private locks run inline; tracked ones (shared,
/// robust) out of line, where the owner's list is consulted.
@usableFromInline package enum RecursiveWord {
    @usableFromInline package typealias Memory = UnsafeMutableRawPointer

    @inlinable @inline(__always)
    static func word(_ memory: Memory) -> MutexWord.Word { atomic(memory, as: UInt32.self) }
    /// The depth of a lock that is not robust.
    @inlinable @inline(__always)
    package static func plainDepth(_ memory: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(memory + 4, as: UInt32.self) }
    /// The depth, where the lock's layout keeps it.
    @inlinable
    static func depth(_ memory: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> {
        word(memory).pointee.load(ordering: .relaxed) & MutexWord.robust != 0 ? RobustWord.depth(memory) : plainDepth(memory)
    }

    /// Initializes the lock at `memory` (8 bytes; robust: 16, 8-aligned). 0, EINVAL, or
    /// (`shared`) EBUSY, changing nothing, if the lock there is held or has waiters.
    package static func initialize(_ memory: Memory, shared: Bool, robust: Bool) -> Int32 {
        if robust { return RobustWord.initialize(memory, shared: shared) }
        if shared && MutexWord.isInUse(word(memory).pointee.load(ordering: .acquiring)) { return EBUSY }
        LockOrder.forget(memory)
        plainDepth(memory).pointee.store(0, ordering: .relaxed)
        word(memory).pointee.store(MutexWord.initial(shared: shared, unowned: false), ordering: .releasing)
        return 0
    }

    /// 0, ETIMEDOUT, EINTR (interruptible), or EAGAIN if the depth would overflow; robust:
    /// EOWNERDEAD (holding it, at depth 1), ENOTRECOVERABLE, EINVAL.
    @inlinable
    package static func lock(_ memory: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let value = word(memory).pointee.load(ordering: .relaxed)
        if value & MutexWord.tracked != 0 { return lockTracked(memory, deadline: deadline, interruptible: interruptible, wait: true) }
        if MutexWord.heldByCaller(word(memory), value, threadID()) { return deepen(plainDepth(memory)) }
        let result = MutexWord.lock(word(memory), deadline: deadline, interruptible: interruptible)
        if result == 0 { plainDepth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    /// 0, EBUSY (held by another thread), or EAGAIN; robust: EOWNERDEAD, ENOTRECOVERABLE, EINVAL.
    @inlinable
    package static func tryLock(_ memory: Memory) -> Int32 {
        let value = word(memory).pointee.load(ordering: .relaxed)
        if value & MutexWord.tracked != 0 { return lockTracked(memory, deadline: -1, interruptible: false, wait: false) }
        if MutexWord.heldByCaller(word(memory), value, threadID()) { return deepen(plainDepth(memory)) }
        let result = MutexWord.tryLock(word(memory))
        if result == 0 { plainDepth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    /// 0, or EPERM if the caller does not hold it.
    @inlinable
    package static func unlock(_ memory: Memory) -> Int32 {
        let value = word(memory).pointee.load(ordering: .relaxed)
        if value & MutexWord.tracked != 0 { return unlockTracked(memory) }
        guard MutexWord.heldByCaller(word(memory), value, threadID()) else { return EPERM }
        let level = plainDepth(memory).pointee.load(ordering: .relaxed)
        if level > 1 {
            plainDepth(memory).pointee.store(level - 1, ordering: .relaxed)
            return 0
        }
        plainDepth(memory).pointee.store(0, ordering: .relaxed)
        return MutexWord.unlock(word(memory))
    }

    /// How many times the caller holds it (0 if it does not).
    @inlinable
    package static func depthHeldByCaller(_ memory: Memory) -> UInt32 {
        MutexWord.isOwnedByCaller(word(memory)) ? depth(memory).pointee.load(ordering: .relaxed) : 0
    }

    /// Robust mode: as `MutexWord.consistent`.
    package static func consistent(_ memory: Memory) -> Int32 { MutexWord.consistent(word(memory)) }

    @usableFromInline @inline(never)
    static func lockTracked(_ memory: Memory, deadline: Int64, interruptible: Bool, wait: Bool) -> Int32 {
        if word(memory).pointee.load(ordering: .relaxed) & MutexWord.robust != 0 {
            return RobustWord.lock(memory, deadline: deadline, interruptible: interruptible, wait: wait, recursive: true)
        }
        if MutexWord.isOwnedByCaller(word(memory)) { return deepen(plainDepth(memory)) }
        let result = wait ? MutexWord.lock(word(memory), deadline: deadline, interruptible: interruptible)
                          : MutexWord.tryLock(word(memory))
        if result == 0 { plainDepth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    @usableFromInline @inline(never)
    static func unlockTracked(_ memory: Memory) -> Int32 {
        if word(memory).pointee.load(ordering: .relaxed) & MutexWord.robust != 0 {
            return RobustWord.unlock(memory, recursive: true)
        }
        guard MutexWord.isOwnedByCaller(word(memory)) else { return EPERM }
        let level = plainDepth(memory).pointee.load(ordering: .relaxed)
        if level > 1 {
            plainDepth(memory).pointee.store(level - 1, ordering: .relaxed)
            return 0
        }
        plainDepth(memory).pointee.store(0, ordering: .relaxed)
        return MutexWord.unlock(word(memory))
    }

    /// One level deeper: 0, or EAGAIN at the limit.
    @usableFromInline
    static func deepen(_ depth: UnsafeMutablePointer<Atomic<UInt32>>) -> Int32 {
        let level = depth.pointee.load(ordering: .relaxed)
        if level == UInt32.max { return EAGAIN }
        depth.pointee.store(level + 1, ordering: .relaxed)
        return 0
    }
}

// MARK: Swift types

/// The modes of a mutex or recursive lock (the C flags' values).
public struct LockOptions: OptionSet, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    /// The lock lives in memory that processes share (a MAP_SHARED mapping): its futex uses the
    /// shared namespace.
    public static let shared = LockOptions(rawValue: 1)
    /// Robust: a holder that dies holding the lock (its thread exits, its process is killed) is
    /// reported to the next locker, who gets `LockError.ownerDied` holding the lock. 16 bytes.
    public static let robust = LockOptions(rawValue: 4)
}

/// Memory for a lock of `kind` with `options`: the caller's (checked, initialized unless
/// `initialize` is false: the initializer's EBUSY, for shared memory in use, is thrown), or a new
/// block.
func makeLockMemory(_ memory: UnsafeMutableRawPointer?, size: Int, options: LockOptions, initialize: Bool,
                _ initializer: (UnsafeMutableRawPointer) -> Int32) throws(LockError) -> LockMemory {
    let robust = options.contains(.robust)
    let size = robust ? 16 : size
    guard let memory else {
        let owned = LockMemory(size: size)
        let result = initializer(owned.raw)
        precondition(result == 0, "LockMemory: initialization failed (\(result))")
        return owned
    }
    guard Int(bitPattern: memory) & (robust ? 7 : 3) == 0 else { throw .other(EINVAL) }
    if initialize {
        let result = initializer(memory)
        if result != 0 { throw LockError(code: result) }
    } else {
        let word = atomic(memory, as: UInt32.self).pointee.load(ordering: .relaxed)
        let modes = (robust ? MutexWord.robust : 0) | (options.contains(.shared) ? MutexWord.shared : 0)
        guard word & (MutexWord.robust | MutexWord.shared | MutexWord.unowned) == modes else { throw .other(EINVAL) }
    }
    return LockMemory(borrowing: memory, size: size)
}

/// A mutual-exclusion lock that knows its owner: locking it again from the owning thread throws
/// `LockError.wouldDeadlock` instead of hanging, unlocking it from another thread throws
/// `LockError.notOwner`. Four bytes of state; uncontended lock/unlock is one CAS each.
///
///     let mutex = SyncMutex()
///     let value = mutex.withLock { counter += 1; return counter }
///
/// Robust (`SyncMutex(options: .robust)`, or in shared memory with `init(at:options:initialize:)`): when
/// a holder dies holding it, the next locker's `lock` throws `LockError.ownerDied` *holding the
/// lock*; it repairs the guarded state and calls `consistent()` before `unlock()`, or the lock
/// becomes `.notRecoverable` for everyone.
public final class SyncMutex: @unchecked Sendable {
    @usableFromInline let memory: LockMemory
    @usableFromInline var word: MutexWord.Word { atomic(memory.raw, as: UInt32.self) }

    /// A mutex in memory of its own (`.robust`: a thread that exits holding it is reported).
    public init(options: LockOptions = []) {
        memory = try! makeLockMemory(nil, size: 4, options: options, initialize: true) {
            MutexWord.initialize($0, shared: options.contains(.shared), unowned: false, robust: options.contains(.robust))
        }
    }

    /// A mutex in the caller's memory, such as a MAP_SHARED mapping that processes share:
    /// `byteCount(for: options)` bytes, 4-aligned (robust: 8-aligned), that outlive this object.
    /// The caller chooses, as no default is safe: `initialize: true` in the one process that
    /// creates it (the memory is zeroed or holds a mutex nobody uses), `initialize: false` with
    /// the same options in the others, which attach to it. Throws `.other(EINVAL)` for misaligned
    /// memory, or (`initialize: false`) memory whose mutex has other options; with `.shared` and
    /// `initialize: true`, `.other(EBUSY)`, changing nothing, if the mutex there is held or has
    /// waiters (an attach written as a create would have reset another process's lock).
    public init(at memory: UnsafeMutableRawPointer, options: LockOptions, initialize: Bool) throws(LockError) {
        self.memory = try makeLockMemory(memory, size: 4, options: options, initialize: initialize) {
            MutexWord.initialize($0, shared: options.contains(.shared), unowned: false, robust: options.contains(.robust))
        }
    }

    /// The bytes a mutex with `options` takes: 4, or 16 if robust.
    public static func byteCount(for options: LockOptions) -> Int { options.contains(.robust) ? 16 : 4 }

    /// Takes the lock, waiting as long as it takes.
    @inlinable public func lock() throws(LockError) {
        _ = try taken(MutexWord.lock(word))
    }
    /// Takes the lock if it is free; returns whether it did. Throws only for a robust lock
    /// (`.ownerDied` holding it, `.notRecoverable`).
    @inlinable public func tryLock() throws(LockError) -> Bool { try taken(MutexWord.tryLock(word)) }
    /// Takes the lock unless `timeout` passes first (monotonic clock); returns whether it did.
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(MutexWord.lock(word, deadline: Deadline.after(timeout)))
    }
    /// Takes the lock unless the monotonic clock reaches `deadline` (ns) first.
    @inlinable public func lock(deadlineNanoseconds: Int64) throws(LockError) -> Bool {
        try taken(MutexWord.lock(word, deadline: deadlineNanoseconds))
    }
    /// Releases the lock; throws `.notOwner` if the caller does not hold it.
    @inlinable public func unlock() throws(LockError) {
        _ = try taken(MutexWord.unlock(word))
    }
    /// Robust: marks the guarded state repaired after `.ownerDied`, so that `unlock()` leaves
    /// the lock usable. Throws `.notOwner` if the caller does not hold it, `.other(EINVAL)` if
    /// the lock is not robust or not marked.
    public func consistent() throws(LockError) {
        _ = try taken(MutexWord.consistent(word))
    }
    /// Whether the calling thread holds the lock.
    @inlinable public var isHeldByCurrentThread: Bool { MutexWord.isOwnedByCaller(word) }

    /// Runs `body` holding the lock and returns its value; releases the lock even if it throws.
    /// What it cannot return traps with a message: calling it again from inside `body`, and on
    /// a robust lock a dead previous holder (use `lock()` to handle `.ownerDied`).
    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = MutexWord.lock(word)
        if result != 0 { lockFailed(result, "SyncMutex.withLock") }
        defer { _ = MutexWord.unlock(word) }
        return try body()
    }
}

/// A lock its owner may take again; each lock balanced by an unlock, others wait until the
/// count returns to zero (`NSRecursiveLock`). Robust as `SyncMutex`: `.ownerDied` leaves the
/// caller holding it once.
public final class SyncRecursiveLock: @unchecked Sendable {
    @usableFromInline let memory: LockMemory

    /// A lock in memory of its own (`.robust`: a thread that exits holding it is reported).
    public init(options: LockOptions = []) {
        memory = try! makeLockMemory(nil, size: 8, options: options, initialize: true) {
            RecursiveWord.initialize($0, shared: options.contains(.shared), robust: options.contains(.robust))
        }
    }

    /// A lock in the caller's memory, as `SyncMutex.init(at:options:initialize:)` (the same
    /// choice, the same errors): `byteCount(for: options)` bytes.
    public init(at memory: UnsafeMutableRawPointer, options: LockOptions, initialize: Bool) throws(LockError) {
        self.memory = try makeLockMemory(memory, size: 8, options: options, initialize: initialize) {
            RecursiveWord.initialize($0, shared: options.contains(.shared), robust: options.contains(.robust))
        }
    }

    /// The bytes a recursive lock with `options` takes: 8, or 16 if robust.
    public static func byteCount(for options: LockOptions) -> Int { options.contains(.robust) ? 16 : 8 }

    @inlinable public func lock() throws(LockError) { _ = try taken(RecursiveWord.lock(memory.raw)) }
    @inlinable public func tryLock() throws(LockError) -> Bool { try taken(RecursiveWord.tryLock(memory.raw)) }
    @inlinable public func lock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RecursiveWord.lock(memory.raw, deadline: Deadline.after(timeout)))
    }
    @inlinable public func unlock() throws(LockError) { _ = try taken(RecursiveWord.unlock(memory.raw)) }
    /// Robust: as `SyncMutex.consistent()`.
    public func consistent() throws(LockError) { _ = try taken(RecursiveWord.consistent(memory.raw)) }
    /// How many times the calling thread holds the lock (0: not at all).
    @inlinable public var depth: Int { Int(RecursiveWord.depthHeldByCaller(memory.raw)) }

    @inlinable
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RecursiveWord.lock(memory.raw)
        if result != 0 { lockFailed(result, "SyncRecursiveLock.withLock") }
        defer { _ = RecursiveWord.unlock(memory.raw) }
        return try body()
    }
}
