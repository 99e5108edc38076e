import Dispatch
import Glibc

// Serial and concurrent queues. The engine is libdispatch (the `Dispatch` module shipped with
// Swift): it owns the threads, the FIFO and the barrier logic. Ours: re-entrancy detection
// (`sync` onto a queue the caller is already running on is reported, not a deadlock), the C ABI
// and Python bindings, and the documented shutdown.

/// Misuse the queues report instead of deadlocking or losing work.
public enum QueueError: Error, Equatable, Sendable {
    /// `sync` onto a queue or executor the calling thread is already running work of (directly
    /// or through a chain of `sync` calls): waiting would never end. C: EDEADLK.
    case wouldDeadlock
    /// The executor was stopped: it takes no more work. C: ECANCELED.
    case stopped
    /// The executor belongs to the process this one was fork()ed from: its thread does not
    /// exist here, so nothing would run the work. C: ESRCH.
    case forked
}

/// The queues and executors the calling thread is running work of, innermost first: a chain
/// of frames on the thread's stack, found through one thread-specific pointer.
package enum RunningWork {
    struct Frame {
        let owner: UnsafeRawPointer
        let outer: UnsafeMutableRawPointer?
    }

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        require(pthread_key_create(&key, nil) == 0, "libsync: out of thread-specific keys")
        return key
    }()

    /// Whether the calling thread is running work of `owner` (at any depth).
    package static func contains(_ owner: UnsafeRawPointer) -> Bool {
        var frame = pthread_getspecific(key)
        while let current = frame?.assumingMemoryBound(to: Frame.self) {
            if current.pointee.owner == owner { return true }
            frame = current.pointee.outer
        }
        return false
    }

    /// The calling thread's chain (to hand to work run for it on another thread).
    package static var chain: UnsafeMutableRawPointer? { pthread_getspecific(key) }

    /// Runs `body` marked as work of `owner`, on top of `outer` (by default the calling
    /// thread's chain; for work a waiting caller delivered to another thread, the caller's:
    /// its frames stay valid while it waits).
    package static func run<T>(as owner: UnsafeRawPointer, outer: UnsafeMutableRawPointer? = chain,
                               _ body: () throws -> T) rethrows -> T {
        var frame = Frame(owner: owner, outer: outer)
        return try withUnsafeMutablePointer(to: &frame) { pointer in
            pthread_setspecific(key, pointer)
            defer { pthread_setspecific(key, pointer.pointee.outer) }
            return try body()
        }
    }
}

/// A libdispatch queue with re-entrancy detection: what `SerialQueue`, `ConcurrentQueue` and
/// the C ABI's `sync_queue` share.
package final class DispatchWorkQueue: Sendable {
    package let queue: DispatchQueue
    package let isConcurrent: Bool

    package init(label: String, concurrent: Bool) {
        queue = DispatchQueue(label: label, attributes: concurrent ? .concurrent : [])
        isConcurrent = concurrent
    }

    private var identity: UnsafeRawPointer { UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()) }

    /// Whether the calling thread is running work of this queue.
    package var isCurrent: Bool { RunningWork.contains(identity) }

    /// Runs `body` on the queue and waits for it; throws `QueueError.wouldDeadlock` if the
    /// caller is already running work of this queue.
    @inline(__always)
    package func sync<T>(barrier: Bool, _ body: () throws -> T) throws -> T {
        let identity = self.identity
        if RunningWork.contains(identity) { throw QueueError.wouldDeadlock }
        return try queue.sync(flags: barrier ? .barrier : []) { try RunningWork.run(as: identity, body) }
    }

    /// Enqueues `body` and returns at once. The item keeps this queue alive until it has run.
    package func async(barrier: Bool, _ body: @escaping @Sendable () -> Void) {
        queue.async(flags: barrier ? .barrier : []) { RunningWork.run(as: self.identity, body) }
    }
}

/// A serial queue: work runs one item at a time, in FIFO order, on libdispatch's threads.
/// Releasing the last reference never cancels work: items already enqueued still run (each
/// keeps the queue alive until it has run).
public final class SerialQueue: Sendable {
    package let work: DispatchWorkQueue

    public init(label: String = "libsync.serial") {
        work = DispatchWorkQueue(label: label, concurrent: false)
    }

    /// Runs `body` on the queue after the work enqueued before it, waits, and returns its
    /// result or rethrows its error. Throws `QueueError.wouldDeadlock` when called from work
    /// running on this queue.
    public func sync<T>(_ body: () throws -> T) throws -> T { try work.sync(barrier: false, body) }

    /// Enqueues `body` and returns at once.
    public func async(_ body: @escaping @Sendable () -> Void) { work.async(barrier: false, body) }

    /// Whether the calling thread is running work of this queue.
    public var isCurrent: Bool { work.isCurrent }
}

/// A concurrent queue: plain items may run at the same time; a barrier item runs alone, after
/// everything enqueued before it has finished and before anything enqueued after it starts.
/// Releasing the last reference never cancels work (as `SerialQueue`).
public final class ConcurrentQueue: Sendable {
    package let work: DispatchWorkQueue

    public init(label: String = "libsync.concurrent") {
        work = DispatchWorkQueue(label: label, concurrent: true)
    }

    /// Runs `body` (concurrently with other plain items) and waits for its result or error.
    /// Throws `QueueError.wouldDeadlock` when called from work running on this queue (a pending
    /// barrier would otherwise wait for the caller, and the caller for it).
    public func sync<T>(_ body: () throws -> T) throws -> T { try work.sync(barrier: false, body) }

    /// Enqueues `body` to run concurrently with other plain items; returns at once.
    public func async(_ body: @escaping @Sendable () -> Void) { work.async(barrier: false, body) }

    /// Runs `body` alone on the queue and waits for its result or error.
    public func barrierSync<T>(_ body: () throws -> T) throws -> T { try work.sync(barrier: true, body) }

    /// Enqueues `body` to run alone on the queue; returns at once.
    public func barrierAsync(_ body: @escaping @Sendable () -> Void) { work.async(barrier: true, body) }

    /// Whether the calling thread is running work of this queue.
    public var isCurrent: Bool { work.isCurrent }
}

/// A value carried to another thread, whose owner guarantees that only one thread touches it
/// at a time (a waiting caller's closure, a writer's storage under the isolation lock).
@usableFromInline package struct Carried<T>: @unchecked Sendable {
    @usableFromInline package let value: T
    @inlinable package init(_ value: T) { self.value = value }
}
