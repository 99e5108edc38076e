import CSyncShim
import Glibc
import Synchronization

/// A thread's place in the wait queue of a condition variable: 40 bytes (8-byte aligned) of
/// memory the waiting thread provides (its stack, or an interpreter's buffer that outlives
/// several calls), zero when idle.
///
///     bytes 0-3    state, the waiter's own futex word: `idle`, `queued`, `waking`, `signalled`
///     bytes 4-7    a recursive lock's depth, kept by the waits that release one
///     bytes 8-15   the condition variable's address (the queue's key)
///     bytes 16-31  the next and previous waiters in the bucket's list (process-private mode)
///     bytes 32-35  the sequence seen on entry (process-shared mode)
///
/// A waiter is `queued` from `WaitQueue.enqueue` until a waker or the waiter itself takes it
/// out; a waker marks the waiters it takes out `waking` under the bucket's lock, then
/// `signalled` once it no longer touches them, and wakes each on its own word: so a wake
/// reaches exactly the threads it took out, and a waiter whose timeout races a wake either
/// leaves the queue itself (not signalled) or finds itself taken (signalled), never both.
@usableFromInline package struct Waiter {
    @usableFromInline let base: UnsafeMutableRawPointer
    @inlinable package init(_ base: UnsafeMutableRawPointer) { self.base = base }

    @usableFromInline package static let size = 40
    @usableFromInline package static let idle: UInt32 = 0, queued: UInt32 = 1, waking: UInt32 = 2, signalled: UInt32 = 3

    @inlinable package var state: UnsafeMutablePointer<Atomic<UInt32>> { atomic(base, as: UInt32.self) }
    @inlinable var depth: UInt32 {
        get { base.load(fromByteOffset: 4, as: UInt32.self) }
        nonmutating set { base.storeBytes(of: newValue, toByteOffset: 4, as: UInt32.self) }
    }
    @inlinable var key: UnsafeMutableRawPointer? {
        get { base.load(fromByteOffset: 8, as: UnsafeMutableRawPointer?.self) }
        nonmutating set { base.storeBytes(of: newValue, toByteOffset: 8, as: UnsafeMutableRawPointer?.self) }
    }
    @usableFromInline var next: Waiter? {
        get { base.load(fromByteOffset: 16, as: UnsafeMutableRawPointer?.self).map(Waiter.init) }
        nonmutating set { base.storeBytes(of: newValue?.base, toByteOffset: 16, as: UnsafeMutableRawPointer?.self) }
    }
    @usableFromInline var previous: Waiter? {
        get { base.load(fromByteOffset: 24, as: UnsafeMutableRawPointer?.self).map(Waiter.init) }
        nonmutating set { base.storeBytes(of: newValue?.base, toByteOffset: 24, as: UnsafeMutableRawPointer?.self) }
    }
    @inlinable var sequence: UInt32 {
        get { base.load(fromByteOffset: 32, as: UInt32.self) }
        nonmutating set { base.storeBytes(of: newValue, toByteOffset: 32, as: UInt32.self) }
    }
    @inlinable var isIdle: Bool { state.pointee.load(ordering: .acquiring) == Waiter.idle }

    /// Runs `body` with a waiter on the caller's stack.
    @inlinable
    package static func withTemporary<R>(_ body: (Waiter) -> R) -> R {
        withUnsafeTemporaryAllocation(byteCount: size, alignment: 8) { buffer in
            let base = buffer.baseAddress!
            base.initializeMemory(as: UInt8.self, repeating: 0, count: size)
            return body(Waiter(base))
        }
    }
}

/// One bucket of the wait table (the shim's SYNC_WAIT_BUCKET_SIZE bytes; zero when empty).
struct WaitBucketLayout {
    /// The bucket's lock, a `LockWord` (`Atomic<Int32>`).
    var lock: Int32
    /// The first and the last `Waiter` of the bucket's FIFO list (nil when empty).
    var head: UnsafeMutableRawPointer?
    var tail: UnsafeMutableRawPointer?
}

/// The queues of threads waiting on process-private condition variables, in the manner of
/// WebKit's ParkingLot and Rust's parking_lot: a fixed table of buckets (in the shim, which
/// empties it in a fork()ed child), each a lock word and a FIFO list of `Waiter`s, keyed by the
/// address of the condition variable. Each condition variable counts its queued waiters in a word
/// of its own (changed only under its bucket's lock), so that a wake with no waiter is one load.
/// Waiters live in their threads' memory: nothing here allocates.
@usableFromInline package enum WaitQueue {
    @usableFromInline struct Bucket {
        let base: UnsafeMutableRawPointer
        var lock: UnsafeMutablePointer<Atomic<Int32>> { atomic(base + Self.lockOffset, as: Int32.self) }
        var head: Waiter? {
            get { base.load(fromByteOffset: Self.headOffset, as: UnsafeMutableRawPointer?.self).map(Waiter.init) }
            nonmutating set { base.storeBytes(of: newValue?.base, toByteOffset: Self.headOffset, as: UnsafeMutableRawPointer?.self) }
        }
        var tail: Waiter? {
            get { base.load(fromByteOffset: Self.tailOffset, as: UnsafeMutableRawPointer?.self).map(Waiter.init) }
            nonmutating set { base.storeBytes(of: newValue?.base, toByteOffset: Self.tailOffset, as: UnsafeMutableRawPointer?.self) }
        }
        static let lockOffset = MemoryLayout<WaitBucketLayout>.offset(of: \.lock)!
        static let headOffset = MemoryLayout<WaitBucketLayout>.offset(of: \.head)!
        static let tailOffset = MemoryLayout<WaitBucketLayout>.offset(of: \.tail)!

        /// The bucket of the queue keyed by `key` (Fibonacci hashing of the address).
        init(for key: UnsafeMutableRawPointer) {
            let hash = (UInt(bitPattern: key) >> 2) &* 0x9E37_79B9_7F4A_7C15
            let index = Int(hash >> UInt(UInt.bitWidth - 8)) & (Int(SYNC_WAIT_BUCKETS) - 1)
            require(MemoryLayout<WaitBucketLayout>.size <= Int(SYNC_WAIT_BUCKET_SIZE), "WaitQueue: a bucket outgrows its storage")
            base = sync_wait_table() + index * Int(SYNC_WAIT_BUCKET_SIZE)
        }

        func withLock<R>(_ body: () -> R) -> R {
            LockWord.lock(lock, shared: false)
            defer { LockWord.unlock(lock, shared: false) }
            return body()
        }

        func append(_ waiter: Waiter) {
            waiter.next = nil
            waiter.previous = tail
            if let tail { tail.next = waiter } else { head = waiter }
            tail = waiter
        }

        func remove(_ waiter: Waiter) {
            if let previous = waiter.previous { previous.next = waiter.next } else { head = waiter.next }
            if let next = waiter.next { next.previous = waiter.previous } else { tail = waiter.previous }
        }
    }

    /// Queues `waiter` (idle) at the tail of `key`'s queue and counts it in `count`.
    @usableFromInline
    static func enqueue(_ waiter: Waiter, key: UnsafeMutableRawPointer, count: UnsafeMutablePointer<Atomic<UInt32>>) {
        waiter.key = key
        waiter.state.pointee.store(Waiter.queued, ordering: .relaxed)
        let bucket = Bucket(for: key)
        bucket.withLock {
            bucket.append(waiter)
            count.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        }
    }

    /// Takes up to `limit` waiters from the head of `key`'s queue, wakes them, and returns how
    /// many. Waiters that queue while it runs are not among them.
    @usableFromInline
    static func wake(key: UnsafeMutableRawPointer, limit: UInt32, count: UnsafeMutablePointer<Atomic<UInt32>>) -> UInt32 {
        let bucket = Bucket(for: key)
        var taken: Waiter? = nil, last: Waiter? = nil, found: UInt32 = 0
        bucket.withLock {
            var node = bucket.head
            while let waiter = node, found < limit {
                node = waiter.next
                guard waiter.key == key else { continue }
                bucket.remove(waiter)
                waiter.state.pointee.store(Waiter.waking, ordering: .relaxed)
                waiter.next = nil
                if let last { last.next = waiter } else { taken = waiter }
                last = waiter
                found += 1
            }
            // Having looked at every waiter, it knows that none of this key is left: the count
            // becomes exact again (after a fork, it still counted the parent's threads).
            if found < limit {
                count.pointee.store(count.pointee.load(ordering: .relaxed) & processSharedFlag, ordering: .relaxed)
            } else {
                count.pointee.wrappingSubtract(found, ordering: .relaxed)
            }
        }
        // Outside the lock. Once marked signalled a waiter may return and reuse its memory, so
        // its successor is read first; a wake that reaches reused memory is a spurious futex
        // wake there (which every futex waiter tolerates), or EFAULT.
        while let waiter = taken {
            taken = waiter.next
            waiter.state.pointee.store(Waiter.signalled, ordering: .releasing)
            Futex.wake(waiter.state, count: 1, shared: false)
        }
        return found
    }

    /// Sleeps until `waiter` (queued) is signalled, `deadline` passes or (if `interruptible`) a
    /// signal handler runs. Returns 0 (signalled), ETIMEDOUT or EINTR; the waiter is then still
    /// queued unless it was signalled.
    @usableFromInline
    static func sleep(_ waiter: Waiter, deadline: Int64, interruptible: Bool) -> Int32 {
        while true {
            switch waiter.state.pointee.load(ordering: .acquiring) {
            case Waiter.signalled:
                return 0
            case Waiter.waking:  // a waker is about to release it: a short wait, whatever the deadline
                _ = Futex.wait(waiter.state, expected: Waiter.waking, shared: false)
            default:
                let result = Futex.wait(waiter.state, expected: Waiter.queued, deadline: deadline, shared: false)
                if (result == ETIMEDOUT || (result == EINTR && interruptible))
                    && waiter.state.pointee.load(ordering: .acquiring) == Waiter.queued {
                    return result
                }
            }
        }
    }

    /// Ends the wait of a queued or signalled waiter: takes it out of the queue if it is still
    /// there. Returns whether it was signalled; it is idle afterwards.
    @usableFromInline
    static func leave(_ waiter: Waiter, count: UnsafeMutablePointer<Atomic<UInt32>>) -> Bool {
        if waiter.state.pointee.load(ordering: .acquiring) == Waiter.queued, let key = waiter.key {
            let bucket = Bucket(for: key)
            let left: Bool = bucket.withLock {
                guard waiter.state.pointee.load(ordering: .relaxed) == Waiter.queued else { return false }
                bucket.remove(waiter)
                count.pointee.wrappingSubtract(1, ordering: .relaxed)
                return true
            }
            if left {
                waiter.state.pointee.store(Waiter.idle, ordering: .relaxed)
                return false
            }
        }
        _ = sleep(waiter, deadline: -1, interruptible: false)  // a waker may still be marking it
        waiter.state.pointee.store(Waiter.idle, ordering: .relaxed)
        return true
    }
}

extension Futex {
    @inlinable @discardableResult
    static func wake(_ word: UnsafeMutablePointer<Atomic<UInt32>>, count: Int32, shared: Bool) -> Int32 {
        wake(UnsafeMutableRawPointer(word), count: count, shared: shared)
    }

    @inlinable
    static func wait(_ word: UnsafeMutablePointer<Atomic<UInt32>>, expected: UInt32, deadline: Int64 = -1, shared: Bool) -> Int32 {
        wait(UnsafeMutableRawPointer(word), expected: expected, deadline: deadline, shared: shared)
    }
}
