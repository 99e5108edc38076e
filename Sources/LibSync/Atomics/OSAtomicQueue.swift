import Synchronization

// Apple's intrusive queues: the caller's elements carry a link pointer at `offset` bytes.
// Elements must stay mapped while any thread may still be dequeuing from the same queue
// (a dequeuer may read the link of an element another thread just took), as with Apple's.

/// Layout of C's `OSQueueHead` (16-byte aligned): the top element, and a generation count
/// bumped by every change, so that a compare-and-swap on the pair can't be fooled by an
/// element that left and came back (ABA).
@usableFromInline package enum LIFOQueue {
    @inlinable @inline(__always)
    static func link(_ element: UnsafeMutableRawPointer, _ offset: Int) -> UnsafeMutablePointer<Atomic<UnsafeMutableRawPointer?>> {
        atomic(element + offset, as: UnsafeMutableRawPointer?.self)
    }

    @inlinable
    package static func enqueue(_ head: UnsafeMutableRawPointer, _ element: UnsafeMutableRawPointer, _ offset: Int) {
        let state = atomic(head, as: WordPair.self)
        var old = state.pointee.load(ordering: .relaxed)
        while true {
            link(element, offset).pointee.store(UnsafeMutableRawPointer(bitPattern: old.first), ordering: .relaxed)
            let new = WordPair(first: UInt(bitPattern: element), second: old.second &+ 1)
            let (exchanged, current) = state.pointee.compareExchange(expected: old, desired: new, ordering: .acquiringAndReleasing)
            if exchanged { return }
            old = current
        }
    }

    @inlinable
    package static func dequeue(_ head: UnsafeMutableRawPointer, _ offset: Int) -> UnsafeMutableRawPointer? {
        let state = atomic(head, as: WordPair.self)
        var old = state.pointee.load(ordering: .acquiring)
        while let top = UnsafeMutableRawPointer(bitPattern: old.first) {
            let next = link(top, offset).pointee.load(ordering: .relaxed)
            let new = WordPair(first: UInt(bitPattern: next), second: old.second &+ 1)
            let (exchanged, current) = state.pointee.compareExchange(expected: old, desired: new, ordering: .acquiringAndReleasing)
            if exchanged { return top }
            old = current
        }
        return nil
    }
}

/// Layout of C's `OSFifoQueueHead`: head, tail, and a lock word guarding both (a FIFO of
/// intrusive nodes needs two pointers changed together; the critical section is a few stores).
@usableFromInline package enum FIFOQueue {
    @inlinable @inline(__always)
    static func parts(_ head: UnsafeMutableRawPointer)
        -> (first: UnsafeMutablePointer<UnsafeMutableRawPointer?>, last: UnsafeMutablePointer<UnsafeMutableRawPointer?>,
            lock: UnsafeMutablePointer<Atomic<Int32>>) {
        let pointers = head.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
        return (pointers, pointers + 1, atomic(head + 2 * MemoryLayout<UnsafeMutableRawPointer>.size, as: Int32.self))
    }

    @inlinable
    package static func enqueue(_ head: UnsafeMutableRawPointer, _ element: UnsafeMutableRawPointer, _ offset: Int) {
        let (first, last, lock) = parts(head)
        (element + offset).storeBytes(of: nil, as: UnsafeMutableRawPointer?.self)
        LockWord.lock(lock, shared: true)
        if let tail = last.pointee {
            (tail + offset).storeBytes(of: element, as: UnsafeMutableRawPointer?.self)
        } else {
            first.pointee = element
        }
        last.pointee = element
        LockWord.unlock(lock, shared: true)
    }

    @inlinable
    package static func dequeue(_ head: UnsafeMutableRawPointer, _ offset: Int) -> UnsafeMutableRawPointer? {
        let (first, last, lock) = parts(head)
        LockWord.lock(lock, shared: true)
        defer { LockWord.unlock(lock, shared: true) }
        guard let element = first.pointee else { return nil }
        first.pointee = (element + offset).load(as: UnsafeMutableRawPointer?.self)
        if first.pointee == nil { last.pointee = nil }
        return element
    }
}

// MARK: Swift front: queue heads as objects with a stable, suitably aligned address.

/// Apple's `OSQueueHead`: a lock-free, ABA-safe LIFO of intrusive elements.
public final class OSQueueHead: @unchecked Sendable {
    @usableFromInline let storage: UnsafeMutableRawPointer
    public init() {
        storage = .allocate(byteCount: 16, alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: 16)
    }
    deinit { storage.deallocate() }
}

/// Apple's `OSFifoQueueHead`: a FIFO of intrusive elements.
public final class OSFifoQueueHead: @unchecked Sendable {
    @usableFromInline let storage: UnsafeMutableRawPointer
    public init() {
        storage = .allocate(byteCount: 32, alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: 32)
    }
    deinit { storage.deallocate() }
}

/// Pushes `element`, whose link field lies `offset` bytes into it.
@inlinable public func OSAtomicEnqueue(_ list: OSQueueHead, _ element: UnsafeMutableRawPointer, _ offset: Int) {
    LIFOQueue.enqueue(list.storage, element, offset)
}
/// Pops the most recently pushed element, or nil when empty.
@inlinable public func OSAtomicDequeue(_ list: OSQueueHead, _ offset: Int) -> UnsafeMutableRawPointer? {
    LIFOQueue.dequeue(list.storage, offset)
}
/// Appends `element`, whose link field lies `offset` bytes into it.
@inlinable public func OSAtomicFifoEnqueue(_ list: OSFifoQueueHead, _ element: UnsafeMutableRawPointer, _ offset: Int) {
    FIFOQueue.enqueue(list.storage, element, offset)
}
/// Removes the oldest element, or nil when empty.
@inlinable public func OSAtomicFifoDequeue(_ list: OSFifoQueueHead, _ offset: Int) -> UnsafeMutableRawPointer? {
    FIFOQueue.dequeue(list.storage, offset)
}
