import CSyncShim
import Glibc
import Synchronization

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
        if shared {
            let seen = word(memory).pointee.load(ordering: .acquiring)
            if MutexWord.isInUse(seen) { return EBUSY }
            if seen == MutexWord.initial(shared: true, unowned: false) { return attach(memory) }
        }
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
        return entered(memory, MutexWord.lock(word(memory), deadline: deadline, interruptible: interruptible))
    }

    /// 0, EBUSY (held by another thread), or EAGAIN; robust: EOWNERDEAD, ENOTRECOVERABLE, EINVAL.
    @inlinable
    package static func tryLock(_ memory: Memory) -> Int32 {
        let value = word(memory).pointee.load(ordering: .relaxed)
        if value & MutexWord.tracked != 0 { return lockTracked(memory, deadline: -1, interruptible: false, wait: false) }
        if MutexWord.heldByCaller(word(memory), value, threadID()) { return deepen(plainDepth(memory)) }
        return entered(memory, MutexWord.tryLock(word(memory)))
    }

    /// 0, or EPERM if the caller does not hold it.
    @inlinable
    package static func unlock(_ memory: Memory) -> Int32 {
        let value = word(memory).pointee.load(ordering: .relaxed)
        if value & MutexWord.tracked != 0 { return unlockTracked(memory) }
        guard MutexWord.heldByCaller(word(memory), value, threadID()) else { return EPERM }
        return leave(memory)
    }

    /// How many times the caller holds it (0 if it does not).
    @inlinable
    package static func depthHeldByCaller(_ memory: Memory) -> UInt32 {
        MutexWord.isOwnedByCaller(word(memory)) ? depth(memory).pointee.load(ordering: .relaxed) : 0
    }

    /// Robust mode: as `MutexWord.consistent`.
    package static func consistent(_ memory: Memory) -> Int32 { MutexWord.consistent(word(memory)) }

    /// Releases the caller's hold entirely, however deep, in one step (a condition's wait,
    /// Python's `_release_save`): the depth it had, for `reacquire`; 0 if the caller does not
    /// hold it (nothing changes).
    package static func releaseSaving(_ memory: Memory) -> UInt32 {
        let level = depthHeldByCaller(memory)
        if level > 0 { release(memory) }
        return level
    }

    /// Releases a lock the caller holds, however deep (checked by the caller).
    @inlinable
    package static func release(_ memory: Memory) {
        depth(memory).pointee.store(0, ordering: .relaxed)
        _ = MutexWord.unlock(word(memory))
    }

    /// Takes the lock again at `depth` after `release`, in one step, without spinning first
    /// (after a condition's wait the signaller usually still holds it, and a spinner would
    /// compete with it for the word). 0, ETIMEDOUT, EINTR (`interruptible`), or for a robust
    /// lock EOWNERDEAD (taken at `depth`) or ENOTRECOVERABLE (not taken); EINVAL for depth 0.
    @inlinable
    package static func reacquire(_ memory: Memory, depth level: UInt32, deadline: Int64 = -1,
                                  interruptible: Bool = false) -> Int32 {
        if level == 0 { return EINVAL }
        let relocked = MutexWord.lock(word(memory), deadline: deadline, interruptible: interruptible)
        if relocked == 0 || relocked == EOWNERDEAD { depth(memory).pointee.store(level, ordering: .relaxed) }
        return relocked
    }

    @usableFromInline @inline(never)
    static func lockTracked(_ memory: Memory, deadline: Int64, interruptible: Bool, wait: Bool) -> Int32 {
        if word(memory).pointee.load(ordering: .relaxed) & MutexWord.robust != 0 {
            return RobustWord.lock(memory, deadline: deadline, interruptible: interruptible, wait: wait, recursive: true)
        }
        if MutexWord.isOwnedByCaller(word(memory)) { return deepen(plainDepth(memory)) }
        return entered(memory, wait ? MutexWord.lock(word(memory), deadline: deadline, interruptible: interruptible)
                                    : MutexWord.tryLock(word(memory)))
    }

    @usableFromInline @inline(never)
    static func unlockTracked(_ memory: Memory) -> Int32 {
        if word(memory).pointee.load(ordering: .relaxed) & MutexWord.robust != 0 {
            return RobustWord.unlock(memory, recursive: true)
        }
        guard MutexWord.isOwnedByCaller(word(memory)) else { return EPERM }
        return leave(memory)
    }

    /// The word just locked (`result` 0) by a caller that did not hold it: depth 1.
    @inlinable @inline(__always)
    static func entered(_ memory: Memory, _ result: Int32) -> Int32 {
        if result == 0 { plainDepth(memory).pointee.store(1, ordering: .relaxed) }
        return result
    }

    /// One level less of a lock (not robust) that the caller holds; the last one unlocks.
    @inlinable @inline(__always)
    static func leave(_ memory: Memory) -> Int32 {
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
