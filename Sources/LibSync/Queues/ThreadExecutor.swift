import Glibc
import Synchronization

/// A dedicated thread with a FIFO (Cocoa's "perform selector on a thread"): any thread delivers
/// work to it, without waiting (`async`) or waiting until the item has run (`sync`); items run
/// one at a time, in arrival order, all on that one thread. Ours entirely (libdispatch does
/// not promise a thread). The thread blocks asynchronous signals, as libdispatch's workers do.
///
/// Shutdown: `stop()` (or releasing the last reference) refuses new work, lets the thread run
/// every item already delivered, and returns once the thread has finished them and exited. From
/// work running on the executor itself it cannot wait: the thread exits after finishing the
/// items already delivered.
///
/// fork(): the child has none of the parent's threads, so an executor made before the fork has
/// no thread there: in the child `async` and `sync` throw `QueueError.forked`, and `stop()` and
/// releasing return at once (without touching the FIFO, whose lock a parent thread may have
/// held at the fork).
public final class ThreadExecutor: Sendable {
    private let core: Core

    /// Starts the thread. Throws `ThreadExecutorError` if it cannot be created.
    public init() throws {
        core = Core()
        try core.start()
    }

    deinit { core.stop(wait: !core.isCurrent) }

    /// Delivers `body` to the thread and returns at once. Throws `QueueError.stopped` after
    /// `stop()` (`QueueError.forked` in a fork()ed child).
    public func async(_ body: @escaping @Sendable () -> Void) throws {
        guard core.isInThisProcess else { throw QueueError.forked }
        guard core.deliver(body) else { throw QueueError.stopped }
    }

    /// Delivers `body`, waits until the thread has run it, and returns its result or rethrows
    /// its error. Throws `QueueError.wouldDeadlock` from work running on this executor and
    /// `QueueError.stopped` after `stop()` (`QueueError.forked` in a fork()ed child).
    public func sync<T>(_ body: () throws -> T) throws -> T {
        guard core.isInThisProcess else { throw QueueError.forked }
        if core.isCurrent { throw QueueError.wouldDeadlock }
        return try withoutActuallyEscaping(body) { body in
            // The item runs as work of this executor on top of the caller's chain, so that a
            // sync back onto what the caller is running is reported too.
            let chain = Carried(RunningWork.chain), identity = core.identity
            let item = Rendezvous { try RunningWork.run(as: identity, outer: chain.value, body) }
            guard core.deliver({ item.run() }) else { throw QueueError.stopped }
            return try item.wait().get()
        }
    }

    /// Refuses new work, lets the thread finish the work already delivered, and (except from
    /// the executor's own thread) waits until it has exited. Idempotent.
    public func stop() { core.stop(wait: !core.isCurrent) }

    /// Whether the calling thread is this executor's thread.
    public var isCurrent: Bool { core.isCurrent }

    // MARK: The thread and its FIFO (the thread owns a reference to Core, not to the executor).

    private final class Core: @unchecked Sendable {
        struct State {
            var items: [@Sendable () -> Void] = []
            var stopping = false
            var sleeping = false
        }
        let state = Mutex(State())
        /// Bumped to wake the thread (futex word); `exited` turns 1 when the thread has left.
        let wakeups = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 2)
        var exited: UnsafeMutablePointer<Atomic<UInt32>> { wakeups + 1 }

        /// The fork generation the thread was started in (see `ForkGeneration`).
        let generation = ForkGeneration.current

        init() {
            wakeups.initialize(to: Atomic(0))
            exited.initialize(to: Atomic(0))
        }

        /// Whether the thread is in this process (false in a fork()ed child).
        var isInThisProcess: Bool { ForkGeneration.current == generation }
        deinit { wakeups.deinitialize(count: 2); wakeups.deallocate() }

        var identity: UnsafeRawPointer { UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()) }
        var isCurrent: Bool { RunningWork.contains(identity) }

        func start() throws {
            var thread = pthread_t()
            var attributes = pthread_attr_t()
            pthread_attr_init(&attributes)
            defer { pthread_attr_destroy(&attributes) }
            pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
            let context = Unmanaged.passRetained(self).toOpaque()
            let creatorMask = ThreadSignalMask.blockForNewThread(); defer { ThreadSignalMask.restore(creatorMask) }
            let status = pthread_create(&thread, &attributes, { context in
                let core = Unmanaged<Core>.fromOpaque(context!).takeRetainedValue()
                RunningWork.run(as: core.identity) { core.runLoop() }
                core.exited.pointee.store(1, ordering: .releasing)
                Futex.wake(UnsafeMutableRawPointer(core.exited), count: Int32.max, shared: false)
                return nil
            }, context)
            guard status == 0 else {
                Unmanaged<Core>.fromOpaque(context).release()
                throw ThreadExecutorError(code: status)
            }
        }

        /// Appends to the FIFO unless stopping; wakes the thread if it sleeps.
        func deliver(_ body: @escaping @Sendable () -> Void) -> Bool {
            let (accepted, wake) = state.withLock { state -> (Bool, Bool) in
                if state.stopping { return (false, false) }
                state.items.append(body)
                defer { state.sleeping = false }
                return (true, state.sleeping)
            }
            if wake { wakeThread() }
            return accepted
        }

        func wakeThread() {
            wakeups.pointee.add(1, ordering: .releasing)
            Futex.wake(UnsafeMutableRawPointer(wakeups), count: 1, shared: false)
        }

        func runLoop() {
            var batch: [@Sendable () -> Void] = []
            while true {
                let (stopping, seen) = state.withLock { state -> (Bool, UInt32) in
                    swap(&batch, &state.items)
                    state.sleeping = batch.isEmpty
                    return (state.stopping, wakeups.pointee.load(ordering: .acquiring))
                }
                if batch.isEmpty {
                    if stopping { return }
                    _ = Futex.wait(UnsafeMutableRawPointer(wakeups), expected: seen, shared: false)
                }
                for item in batch { item() }
                batch.removeAll(keepingCapacity: true)
            }
        }

        func stop(wait: Bool) {
            guard isInThisProcess else { return }  // no thread to stop or wait for here
            let wake = state.withLock { state -> Bool in
                state.stopping = true
                defer { state.sleeping = false }
                return state.sleeping
            }
            if wake { wakeThread() }
            guard wait else { return }
            while exited.pointee.load(ordering: .acquiring) == 0 {
                _ = Futex.wait(UnsafeMutableRawPointer(exited), expected: 0, shared: false)
            }
        }
    }
}

/// Counts the fork()s between the process that loaded libsync and this one: an object that
/// records it at creation knows, by comparing, whether it is in a fork()ed child (without a
/// system call: getpid() is not cached by the C library).
enum ForkGeneration {
    private static let count = Atomic<UInt32>(0)
    private static let handler: Void = {
        pthread_atfork(nil, nil) { ForkGeneration.count.add(1, ordering: .relaxed) }
    }()

    static var current: UInt32 {
        _ = handler
        return count.load(ordering: .relaxed)
    }
}

/// The thread could not be created (errno from pthread_create, e.g. EAGAIN).
public struct ThreadExecutorError: Error, Equatable, Sendable {
    public let code: Int32
}

/// Work run on another thread while its caller waits: the body, then its outcome (a futex word
/// says when). The body is dropped as soon as it has run, before the caller is woken, so a
/// non-escaping closure can be lent through `withoutActuallyEscaping`.
final class Rendezvous<T>: @unchecked Sendable {
    private var body: (() throws -> T)?
    private var result: Result<T, any Error>?
    private let word = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 1)

    init(_ body: @escaping () throws -> T) {
        self.body = body
        word.initialize(to: Atomic(0))
    }
    deinit { word.deinitialize(count: 1); word.deallocate() }

    /// Runs the body on the calling thread and wakes the waiter.
    func run() {
        result = Result(catching: body!)
        body = nil
        word.pointee.store(1, ordering: .releasing)
        Futex.wake(UnsafeMutableRawPointer(word), count: 1, shared: false)
    }

    /// Waits until `run()` has finished; returns the body's outcome.
    func wait() -> Result<T, any Error> {
        while word.pointee.load(ordering: .acquiring) == 0 {
            _ = Futex.wait(UnsafeMutableRawPointer(word), expected: 0, shared: false)
        }
        return result!
    }
}
