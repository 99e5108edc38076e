import CSyncShim
import Glibc
import Synchronization

/// The writer-preferring read-write lock: three 32-bit words of caller memory (12 bytes).
///
///     state   bits 0-17 readers holding it, bits 18-28 writers waiting, bit 29 WRITER (held
///             for writing), bit 30 READERS_PARKED (a reader may sleep on `state`), bit 31
///             SHARED mode (futexes in the shared namespace)
///     wakeups a sequence writers sleep on (a writer's wake bumps it, so none is lost)
///     writer  the kernel thread id of the writer holding it (owner checks), else 0
///
/// Writer preference (seed 000): while any writer waits, new readers wait too, so a stream of
/// readers cannot starve writers. Readers' fast path is one CAS on `state`; both sides spin
/// briefly before sleeping. A reader cannot upgrade to writer (it would wait for itself).
@usableFromInline package enum RWLockWords {
    @usableFromInline package typealias Memory = UnsafeMutableRawPointer

    @usableFromInline static let readerMask: UInt32 = (1 << 18) - 1
    @usableFromInline static let writerWaiting: UInt32 = 1 << 18
    @usableFromInline static let waitingMask: UInt32 = ((1 << 11) - 1) << 18
    @usableFromInline static let writer: UInt32 = 1 << 29
    @usableFromInline static let readersParked: UInt32 = 1 << 30
    @usableFromInline static let shared: UInt32 = 1 << 31
    @usableFromInline static let spinLimit = 64

    @inlinable @inline(__always)
    static func state(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m, as: UInt32.self) }
    @inlinable @inline(__always)
    static func wakeups(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m + 4, as: UInt32.self) }
    @inlinable @inline(__always)
    static func owner(_ m: Memory) -> UnsafeMutablePointer<Atomic<UInt32>> { atomic(m + 8, as: UInt32.self) }

    /// The initial `state` word.
    package static func initial(shared isShared: Bool) -> UInt32 { isShared ? shared : 0 }

    // MARK: readers

    /// 0, EBUSY (a writer holds or waits), or EAGAIN (too many readers).
    @inlinable @inline(__always)
    package static func tryReadLock(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while value & (writer | waitingMask) == 0 {
            if value & readerMask == readerMask { return EAGAIN }
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: value + 1, ordering: .acquiring)
            if exchanged { return 0 }
            value = now
        }
        return EBUSY
    }

    /// 0, ETIMEDOUT, EINTR (interruptible), EAGAIN, or EDEADLK if the caller holds it for writing.
    @inlinable @inline(__always)
    package static func readLock(_ m: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let value = state(m).pointee.load(ordering: .relaxed)
        if value & (writer | waitingMask) == 0 && value & readerMask != readerMask,
           state(m).pointee.compareExchange(expected: value, desired: value + 1, ordering: .acquiring).exchanged {
            return 0
        }
        return readLockSlow(m, deadline: deadline, interruptible: interruptible)
    }

    @usableFromInline @inline(never)
    static func readLockSlow(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        if state(m).pointee.load(ordering: .relaxed) & writer != 0
            && owner(m).pointee.load(ordering: .relaxed) == threadID() { return EDEADLK }
        for _ in 0..<spinLimit {
            let result = tryReadLock(m)
            if result != EBUSY { return result }
            sync_cpu_relax()
        }
        while true {
            let value = state(m).pointee.load(ordering: .relaxed)
            if value & (writer | waitingMask) == 0 {
                let result = tryReadLock(m)
                if result != EBUSY { return result }
                continue
            }
            if value & readersParked == 0 {
                if !state(m).pointee.compareExchange(expected: value, desired: value | readersParked,
                                                     ordering: .relaxed).exchanged { continue }
            }
            let result = Futex.wait(UnsafeMutableRawPointer(state(m)), expected: value | readersParked,
                                    deadline: deadline, shared: value & shared != 0)
            if result == ETIMEDOUT || (result == EINTR && interruptible) {
                return tryReadLock(m) == 0 ? 0 : result
            }
        }
    }

    /// 0, or EPERM if no reader holds it (or the caller holds it for writing).
    @inlinable @inline(__always)
    package static func readUnlock(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while true {
            if value & readerMask == 0 { return EPERM }
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: value - 1, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        // The last reader out lets a waiting writer in.
        if value & readerMask == 1 && value & waitingMask != 0 { wakeWriter(m, value) }
        return 0
    }

    // MARK: writers

    /// 0, or EBUSY (held by anyone, the caller included).
    @inlinable @inline(__always)
    package static func tryWriteLock(_ m: Memory) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while value & (writer | readerMask) == 0 {
            let (exchanged, now) = state(m).pointee.compareExchange(
                expected: value, desired: value | writer, ordering: .acquiring)
            if exchanged {
                owner(m).pointee.store(threadID(), ordering: .relaxed)
                return 0
            }
            value = now
        }
        return EBUSY
    }

    /// 0, ETIMEDOUT, EINTR (interruptible), or EDEADLK if the caller holds it for writing.
    @inlinable @inline(__always)
    package static func writeLock(_ m: Memory, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        if state(m).pointee.compareExchange(expected: 0, desired: writer, ordering: .acquiring).exchanged {
            owner(m).pointee.store(threadID(), ordering: .relaxed)
            return 0
        }
        return writeLockSlow(m, deadline: deadline, interruptible: interruptible)
    }

    @usableFromInline @inline(never)
    static func writeLockSlow(_ m: Memory, deadline: Int64, interruptible: Bool) -> Int32 {
        let me = threadID()
        if state(m).pointee.load(ordering: .relaxed) & writer != 0
            && owner(m).pointee.load(ordering: .relaxed) == me { return EDEADLK }
        for _ in 0..<spinLimit {
            if tryWriteLock(m) == 0 { return 0 }
            sync_cpu_relax()
        }
        // Announce: from here on new readers wait.
        let registered = state(m).pointee.wrappingAdd(writerWaiting, ordering: .relaxed).newValue
        let isShared = registered & shared != 0
        while true {
            let sequence = wakeups(m).pointee.load(ordering: .sequentiallyConsistent)
            let value = state(m).pointee.load(ordering: .sequentiallyConsistent)
            if value & (writer | readerMask) == 0 {
                if state(m).pointee.compareExchange(expected: value, desired: (value - writerWaiting) | writer,
                                                    ordering: .acquiring).exchanged {
                    owner(m).pointee.store(me, ordering: .relaxed)
                    return 0
                }
                continue
            }
            let result = Futex.wait(UnsafeMutableRawPointer(wakeups(m)), expected: sequence,
                                    deadline: deadline, shared: isShared)
            if result == ETIMEDOUT || (result == EINTR && interruptible) {
                return abandonWrite(m, me: me, result: result)
            }
        }
    }

    /// A waiting writer gives up (timeout, signal): it withdraws, or takes the lock if free.
    @usableFromInline
    static func abandonWrite(_ m: Memory, me: UInt32, result: Int32) -> Int32 {
        var value = state(m).pointee.load(ordering: .relaxed)
        while true {
            let free = value & (writer | readerMask) == 0
            var next = value - writerWaiting
            if free { next |= writer } else if next & waitingMask == 0 { next &= ~readersParked }
            let (exchanged, now) = state(m).pointee.compareExchange(expected: value, desired: next, ordering: .acquiring)
            if exchanged {
                if free { owner(m).pointee.store(me, ordering: .relaxed); return 0 }
                // No writer waits any more: readers that slept behind us may go.
                if next & waitingMask == 0 && value & readersParked != 0 {
                    Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
                }
                return result
            }
            value = now
        }
    }

    /// 0, or EPERM if the caller does not hold it for writing.
    @inlinable @inline(__always)
    package static func writeUnlock(_ m: Memory) -> Int32 {
        if owner(m).pointee.load(ordering: .relaxed) != threadID()
            || state(m).pointee.load(ordering: .relaxed) & writer == 0 { return EPERM }
        owner(m).pointee.store(0, ordering: .relaxed)
        if state(m).pointee.compareExchange(expected: writer, desired: 0, ordering: .releasing).exchanged { return 0 }
        writeUnlockSlow(m)
        return 0
    }

    @usableFromInline @inline(never)
    static func writeUnlockSlow(_ m: Memory) {
        var value = state(m).pointee.load(ordering: .relaxed)
        while true {
            var next = value & ~writer
            if next & waitingMask == 0 { next &= ~readersParked }
            let (exchanged, now) = state(m).pointee.compareExchange(expected: value, desired: next, ordering: .releasing)
            if exchanged { break }
            value = now
        }
        if value & waitingMask != 0 {
            wakeWriter(m, value)  // writer preference: the next writer before the parked readers
        } else if value & readersParked != 0 {
            Futex.wake(UnsafeMutableRawPointer(state(m)), count: Int32.max, shared: value & shared != 0)
        }
    }

    @usableFromInline
    static func wakeWriter(_ m: Memory, _ value: UInt32) {
        wakeups(m).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        Futex.wake(UnsafeMutableRawPointer(wakeups(m)), count: 1, shared: value & shared != 0)
    }

    /// Whether the calling thread holds it for writing.
    @inlinable package static func isWriteLockedByCaller(_ m: Memory) -> Bool {
        state(m).pointee.load(ordering: .relaxed) & writer != 0 && owner(m).pointee.load(ordering: .relaxed) == threadID()
    }
}

/// A writer-preferring read-write lock: many readers or one writer; while a writer waits, new
/// readers wait, so writers never starve. A reader cannot upgrade (lock for writing while
/// reading deadlocks: release the read lock first).
///
///     let table = SyncRWLock()
///     let v = table.withReadLock { dictionary[key] }
///     table.withWriteLock { dictionary[key] = v }
public final class SyncRWLock: @unchecked Sendable {
    @usableFromInline let memory = LockMemory(size: 12)

    public init() {}

    @inlinable public func readLock() throws(LockError) { _ = try taken(RWLockWords.readLock(memory.raw)) }
    @inlinable public func tryReadLock() -> Bool { RWLockWords.tryReadLock(memory.raw) == 0 }
    @inlinable public func readLock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RWLockWords.readLock(memory.raw, deadline: deadline(after: timeout)))
    }
    @inlinable public func readUnlock() throws(LockError) { _ = try taken(RWLockWords.readUnlock(memory.raw)) }

    @inlinable public func writeLock() throws(LockError) { _ = try taken(RWLockWords.writeLock(memory.raw)) }
    @inlinable public func tryWriteLock() -> Bool { RWLockWords.tryWriteLock(memory.raw) == 0 }
    @inlinable public func writeLock(timeout: Duration) throws(LockError) -> Bool {
        try taken(RWLockWords.writeLock(memory.raw, deadline: deadline(after: timeout)))
    }
    @inlinable public func writeUnlock() throws(LockError) { _ = try taken(RWLockWords.writeUnlock(memory.raw)) }

    /// Runs `body` holding a read lock. Traps if the caller holds the write lock (a deadlock).
    @inlinable
    public func withReadLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RWLockWords.readLock(memory.raw)
        precondition(result == 0, "SyncRWLock.withReadLock: \(LockError(code: result)) (the caller holds the write lock?)")
        defer { _ = RWLockWords.readUnlock(memory.raw) }
        return try body()
    }

    /// Runs `body` holding the write lock. Traps if the caller already holds it (a deadlock).
    @inlinable
    public func withWriteLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let result = RWLockWords.writeLock(memory.raw)
        precondition(result == 0, "SyncRWLock.withWriteLock: the calling thread already holds the write lock")
        defer { _ = RWLockWords.writeUnlock(memory.raw) }
        return try body()
    }
}
