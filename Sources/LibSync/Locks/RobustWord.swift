import CSyncShim
import Glibc
import Synchronization

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
        let word = MutexWord.robust | (shared ? MutexWord.shared : 0)
        if shared {
            let seen = Self.word(of: bits(memory).pointee.load(ordering: .acquiring))
            if MutexWord.isInUse(seen) { return EBUSY }
            if seen == word { return attach(memory) }
        }
        LockOrder.forget(memory)
        depth(memory).pointee.store(0, ordering: .relaxed)
        tagCell(memory).pointee.store(0, ordering: .relaxed)
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
