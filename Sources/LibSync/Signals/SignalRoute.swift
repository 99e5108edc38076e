import CSyncShim
import Glibc
import Synchronization

// Signals routed to a thread. A process-directed signal goes to whichever thread the kernel picks
// among those that do not block it (Apple's "Thread Safety and Signals"); a routed signal is
// received by one internal thread instead and delivered as work on a chosen executor or queue,
// in arrival order, outside signal-handler context.
//
// Mechanism (docs/signals.md has the whole story):
// - The routing thread blocks the signal (threads it creates later inherit the block); libsync's
//   own threads block every asynchronous signal from birth.
// - A thread's mask can only be changed by the thread itself, so unrouting restores the routing
//   thread's blocked state only when the routing thread calls it; and if that thread had the
//   signal unblocked before, the internal thread unblocks it, so that some thread always takes
//   it with the restored action (threads created while routed keep the block they inherited).
// - One internal thread ("libsync.signals", all signals blocked) reads the routed signals from a
//   signalfd, in the kernel's queue order, and hands each to its route's target.
// - Threads that still have the signal unblocked (they existed before routing, or unblocked it)
//   run sync_signal_forward (CSyncShim), which re-queues it, siginfo intact, to the internal
//   thread (rt_tgsigqueueinfo), tagged in si_errno: exactly once, but not ordered against
//   signals the internal thread took itself. (The kernel lets a thread queue a kill()'s or the
//   kernel's si_code only to itself, so those travel as SI_QUEUE with the code in the value.)
// - Unrouting restores the previous action, waits for forwarding handlers in flight, and has the
//   internal thread drop what is still pending: copies forwarded to it, and arrivals the kernel
//   queued for the process that it had not read yet. An arrival sent while routed is handled by
//   the route or dropped, never by the restored action, however late the internal thread runs.
// - Locks: `operations` serializes route and unroute (held while they wait for the internal
//   thread); `lookup` guards the routes the internal thread reads. The internal thread takes
//   only `lookup` and its request list's lock, and never waits while holding one.
// - fork(): the child has no internal thread; an atfork handler unroutes everything there.

/// One arrival of a routed signal: the fields of its siginfo that say who sent it and what.
public struct SignalInfo: Sendable, Hashable, CustomStringConvertible {
    /// The signal number.
    public let signal: Int32
    /// `si_code`, how it was sent: `SI_USER` (kill), `SI_QUEUE` (sigqueue), `SI_TKILL` (tgkill,
    /// raise), `SI_KERNEL` (the kernel, e.g. the terminal's ^C), `SI_TIMER`, `SI_MESGQ`, or a
    /// signal-specific code (SIGCHLD's `CLD_EXITED`, ...).
    public let code: Int32
    /// The sender's process id (0 for a signal the kernel generated for itself).
    public let pid: pid_t
    /// The sender's real user id.
    public let uid: uid_t
    /// `si_value.sival_int`: the value a `sigqueue` sender passed (meaningful for `SI_QUEUE`,
    /// `SI_TIMER`, `SI_MESGQ`; 0 otherwise).
    public let value: Int32
    /// `si_value.sival_ptr`, as an integer: for senders that pass a pointer-sized value.
    public let pointerValue: UInt

    public init(signal: Int32, code: Int32, pid: pid_t, uid: uid_t, value: Int32, pointerValue: UInt = 0) {
        self.signal = signal
        self.code = code
        self.pid = pid
        self.uid = uid
        self.value = value
        self.pointerValue = pointerValue
    }

    init(_ info: signalfd_siginfo) {
        let signal = Int32(bitPattern: info.ssi_signo), pid = pid_t(bitPattern: info.ssi_pid)
        if info.ssi_errno == SYNC_SIGNAL_FORWARDED_CODE {  // forwarded as SI_QUEUE, its code in the value
            self.init(signal: signal, code: info.ssi_int, pid: pid, uid: info.ssi_uid, value: 0)
        } else {
            self.init(signal: signal, code: info.ssi_code, pid: pid, uid: info.ssi_uid, value: info.ssi_int,
                      pointerValue: UInt(info.ssi_ptr))
        }
    }

    public var description: String { "signal \(signal) (code \(code), from pid \(pid) uid \(uid), value \(value))" }
}

/// Why a signal could not be routed or unrouted.
public enum SignalRouteError: Error, Equatable, Sendable {
    /// The signal cannot be routed: out of range, SIGKILL or SIGSTOP, a signal the kernel raises
    /// in the thread that caused it (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT,
    /// SIGPIPE, SIGXFSZ), or one glibc keeps for itself (32 and 33). C: EINVAL.
    case unroutable(Int32)
    /// The signal is routed already (or being unrouted). C: EBUSY.
    case alreadyRouted(Int32)
    /// The signal is not routed. C: ENOENT.
    case notRouted(Int32)
    /// The internal thread or its descriptors could not be created (EMFILE, ENFILE, ENOMEM,
    /// EAGAIN, from signalfd, eventfd or pthread_create).
    case system(Int32)

    /// The errno-style code of the C ABI.
    public var code: Int32 {
        switch self {
        case .unroutable: EINVAL
        case .alreadyRouted: EBUSY
        case .notRouted: ENOENT
        case .system(let code): code
        }
    }
}

/// A signal routed to an executor or a queue: from `init` on, every arrival of `signal` runs
/// `handler(info)` as work there, in arrival order, never in signal-handler context (so the
/// handler may lock, allocate and call anything). `cancel()`, or releasing the last reference,
/// unroutes it: the previous action of the signal is back, and so is the routing thread's blocked
/// state when the routing thread unroutes (see `sync_signal_unroute` in sync/signals.h). A handler
/// that captures its own route keeps it alive until `cancel()`.
public final class SignalRoute: Sendable {
    /// The routed signal.
    public let signal: Int32
    private let route: RoutedSignal

    /// Routes `signal` to `executor`: the handler runs on its thread.
    public convenience init(signal: Int32, on executor: ThreadExecutor,
                            handler: @escaping @Sendable (SignalInfo) -> Void) throws(SignalRouteError) {
        try self.init(signal, .executor(executor), handler)
    }

    /// Routes `signal` to a serial queue: the handler runs as work of the queue.
    public convenience init(signal: Int32, on queue: SerialQueue,
                            handler: @escaping @Sendable (SignalInfo) -> Void) throws(SignalRouteError) {
        try self.init(signal, .queue(queue.work), handler)
    }

    /// Routes `signal` to a concurrent queue: the handler runs as a barrier item (alone, in order).
    public convenience init(signal: Int32, on queue: ConcurrentQueue,
                            handler: @escaping @Sendable (SignalInfo) -> Void) throws(SignalRouteError) {
        try self.init(signal, .queue(queue.work), handler)
    }

    private init(_ signal: Int32, _ target: SignalTarget, _ handler: @escaping @Sendable (SignalInfo) -> Void) throws(SignalRouteError) {
        self.signal = signal
        route = try SignalRouter.shared.route(signal, to: target, handler: handler)
    }

    deinit { cancel() }

    /// Unroutes the signal (if this route still holds it). Arrivals not yet started are
    /// dropped, whether already read or still pending in the kernel (none reaches the restored
    /// action, and none is left pending for the process); a handler running on another thread is
    /// waited for (not when called from the handler itself). Arrivals sent after it returns go to
    /// the restored action. Idempotent.
    public func cancel() { try? SignalRouter.shared.unroute(signal, only: route) }

    /// Unroutes `signal`, whoever routed it (a C or Python caller, say), as `cancel()` does.
    /// Throws `notRouted` or `unroutable`.
    public static func unroute(_ signal: Int32) throws(SignalRouteError) {
        try SignalRouter.shared.unroute(signal)
    }

    /// Whether `signal` can be routed at all (see `SignalRouteError.unroutable`).
    public static func isRoutable(_ signal: Int32) -> Bool { SignalRouter.isRoutable(signal) }
}

/// Where a routed signal's handler runs.
package enum SignalTarget: Sendable {
    case executor(ThreadExecutor)
    /// Delivered as barrier items: on a serial queue that is every item; on a concurrent one it
    /// keeps deliveries alone and in order.
    case queue(DispatchWorkQueue)
}

/// One route: its target and handler, what unrouting restores, and its deliveries' state.
package final class RoutedSignal: @unchecked Sendable {
    let signal: Int32
    let target: SignalTarget
    let handler: @Sendable (SignalInfo) -> Void
    /// The thread that routed the signal, and whether it had the signal blocked before.
    let routingThread: pthread_t
    let previouslyBlocked: Bool
    /// The action the route replaced (set once, under the router's `operations` lock).
    var previousAction = sigaction()
    /// Deliveries running now (low bits) and `cancelled` (the top bit): a futex word.
    private let state = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 1)
    private static let cancelled: UInt32 = 1 << 31

    init(signal: Int32, target: SignalTarget, handler: @escaping @Sendable (SignalInfo) -> Void, previouslyBlocked: Bool) {
        self.signal = signal
        self.target = target
        self.handler = handler
        self.routingThread = pthread_self()
        self.previouslyBlocked = previouslyBlocked
        state.initialize(to: Atomic(0))
    }

    deinit { state.deinitialize(count: 1); state.deallocate() }

    private var identity: UnsafeRawPointer { UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()) }

    /// Hands `info` to the target (on the internal thread; never waits for the handler). A
    /// stopped executor refuses it: the delivery is dropped.
    func deliver(_ info: SignalInfo) {
        switch target {
        case .executor(let executor): try? executor.async { self.run(info) }
        case .queue(let queue): queue.async(barrier: true) { self.run(info) }
        }
    }

    private func run(_ info: SignalInfo) {
        var current = state.pointee.load(ordering: .acquiring)
        while true {
            if current & Self.cancelled != 0 { return }
            let (exchanged, original) = state.pointee.weakCompareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { break }
            current = original
        }
        RunningWork.run(as: identity) { handler(info) }
        if state.pointee.subtract(1, ordering: .acquiringAndReleasing).newValue == Self.cancelled {
            Futex.wake(UnsafeMutableRawPointer(state), count: Int32.max, shared: false)
        }
    }

    /// Stops deliveries: those not started are dropped; a running handler is waited for, unless
    /// the caller is that handler (or work it is waiting for), which could never finish first.
    func cancel() {
        state.pointee.bitwiseOr(Self.cancelled, ordering: .acquiringAndReleasing)
        if RunningWork.contains(identity) { return }
        while true {
            let current = state.pointee.load(ordering: .acquiring)
            if current == Self.cancelled { return }
            _ = Futex.wait(UnsafeMutableRawPointer(state), expected: current, shared: false)
        }
    }
}

/// The process's routes and its internal signal thread.
package final class SignalRouter: @unchecked Sendable {
    package static let shared = SignalRouter()

    /// Plain pthread mutexes: the atfork handlers hold them across fork(), and the child, whose
    /// thread ids differ, unlocks them. `operations` serializes route and unroute and guards the
    /// state below; `lookup` guards `routes` too (writers hold both, the internal thread reads
    /// with `lookup` alone).
    private let operations = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let lookup = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var routes = [RoutedSignal?](repeating: nil, count: slots)
    private var receiver: Receiver?
    private var watched = sigset_t()
    private var atForkInstalled = false

    private static let slots = 65
    private let forwarding = UnsafeMutableRawPointer(sync_signal_forwarding_state()!)

    private init() {
        pthread_mutex_init(operations, nil)
        pthread_mutex_init(lookup, nil)
        sigemptyset(&watched)
    }

    private static func locked<T>(_ mutex: UnsafeMutablePointer<pthread_mutex_t>, _ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Whether `signal` can be routed (see `SignalRouteError.unroutable`).
    package static func isRoutable(_ signal: Int32) -> Bool {
        guard signal >= 1, signal <= __libc_current_sigrtmax(), Int(signal) < slots else { return false }
        if signal > 31 && signal < __libc_current_sigrtmin() { return false }  // glibc's own
        switch signal {
        case SIGKILL, SIGSTOP: return false
        // Raised by the kernel in the thread that caused them (or by abort(), which terminates
        // whatever a handler does): blocked there they would never reach the internal thread.
        case SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPIPE, SIGXFSZ: return false
        default: return true
        }
    }

    // MARK: The forwarding handler's state (sync_signal_forwarding, read in signal context)

    private func forwardingWord(_ field: PartialKeyPath<sync_signal_forwarding>, index: Int = 0) -> UnsafeMutablePointer<Atomic<Int32>> {
        atomic(forwarding + MemoryLayout<sync_signal_forwarding>.offset(of: field)! + 4 * index, as: Int32.self)
    }

    private func setForwarding(routed signal: Int32, _ routed: Bool) {
        forwardingWord(\.routed, index: Int(signal)).pointee.store(routed ? 1 : 0, ordering: .sequentiallyConsistent)
    }

    /// Waits until no forwarding handler is between its first and last step.
    private func waitForForwardingHandlers() {
        let word = forwarding + MemoryLayout<sync_signal_forwarding>.offset(of: \.in_flight)!
        while true {
            let count = atomic(word, as: UInt32.self).pointee.load(ordering: .sequentiallyConsistent)
            if count == 0 { return }
            _ = Futex.wait(word, expected: count, shared: false)
        }
    }

    // MARK: Routing

    package func route(_ signal: Int32, to target: SignalTarget,
                       handler: @escaping @Sendable (SignalInfo) -> Void) throws(SignalRouteError) -> RoutedSignal {
        guard Self.isRoutable(signal) else { throw .unroutable(signal) }
        pthread_mutex_lock(operations)
        defer { pthread_mutex_unlock(operations) }
        guard routes[Int(signal)] == nil else { throw .alreadyRouted(signal) }
        let receiver = try runningReceiver()
        // Blocked first, here and in the internal thread (an earlier unroute may have unblocked
        // it there), so that from now on this thread and the threads it creates leave the signal
        // to the internal thread, and the forwarding handler never runs there.
        receiver.perform { _ = Self.setBlocked(signal, true) }
        let route = RoutedSignal(signal: signal, target: target, handler: handler,
                                 previouslyBlocked: Self.setBlocked(signal, true))
        Self.locked(lookup) { routes[Int(signal)] = route }
        forwardingWord(\.process).pointee.store(getpid(), ordering: .sequentiallyConsistent)
        forwardingWord(\.receiver).pointee.store(receiver.threadID, ordering: .sequentiallyConsistent)
        setForwarding(routed: signal, true)
        sigaddset(&watched, signal)
        _ = signalfd(receiver.signalFD, &watched, 0)
        var action = sigaction()
        action.__sigaction_handler.sa_sigaction = sync_signal_forward
        action.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK
        sigfillset(&action.sa_mask)
        sigaction(signal, &action, &route.previousAction)
        return route
    }

    /// Unroutes `signal` (only if its route is `expected`, when given). Order matters: the
    /// previous action goes back first (threads then stop forwarding) and the internal thread
    /// stops reading the signal; then the forwarding handlers already running finish (they see
    /// `routed` cleared, or are waited for); then the internal thread drops what is still
    /// pending (forwarded, or queued for the process and not read yet); only then is the route
    /// removed and cancelled.
    package func unroute(_ signal: Int32, only expected: RoutedSignal? = nil) throws(SignalRouteError) {
        guard Self.isRoutable(signal) else { throw .unroutable(signal) }
        pthread_mutex_lock(operations)
        guard let route = routes[Int(signal)], expected == nil || route === expected, let receiver else {
            pthread_mutex_unlock(operations)
            throw .notRouted(signal)
        }
        sigaction(signal, &route.previousAction, nil)
        setForwarding(routed: signal, false)
        sigdelset(&watched, signal)
        _ = signalfd(receiver.signalFD, &watched, 0)
        waitForForwardingHandlers()
        receiver.perform { Self.dropPending(signal, unblock: !route.previouslyBlocked) }
        Self.locked(lookup) { routes[Int(signal)] = nil }
        pthread_mutex_unlock(operations)
        if pthread_equal(pthread_self(), route.routingThread) != 0 {
            _ = Self.setBlocked(signal, route.previouslyBlocked)
        }
        route.cancel()
    }

    /// On the internal thread, once `signal` is neither read nor forwarded any more: drops every
    /// arrival of it still pending here (copies forwarded to this thread) or for the process
    /// (arrivals the kernel queued that this thread had not read yet). They were sent while
    /// routed, so they share the fate of deliveries not yet started: dropped, whatever the
    /// restored action (SIG_DFL would kill the process). Bounded: arrivals sent meanwhile may
    /// keep coming, so it takes at most as many as were queued when it began. Then, if the
    /// routing thread had the signal unblocked, unblocks it here: whatever threads kept the
    /// block, one takes it.
    private static func dropPending(_ signal: Int32, unblock: Bool) {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        var info = siginfo_t()
        var now = timespec()
        var left = queuedSignalsBound()
        while left > 0 {
            // EINTR: this thread runs the restored action of a signal unrouted before.
            let taken = sigtimedwait(&set, &info, &now)
            if taken == -1 && errno == EINTR { continue }
            if taken != signal { break }
            left -= 1
        }
        if unblock { _ = setBlocked(signal, false) }
    }

    /// How many arrivals of one signal can be pending for this thread and the process at most:
    /// every queued arrival counts against its user's queue (`SigQ` in /proc/self/status; kill()
    /// may exceed RLIMIT_SIGPENDING, so the limit is no bound), plus a standard signal pending
    /// without a queue entry, here and for the process. Without /proc, the limit.
    private static func queuedSignalsBound() -> Int {
        if let status = fopen("/proc/self/status", "r") {
            defer { fclose(status) }
            var line = [CChar](repeating: 0, count: 256)
            while fgets(&line, Int32(line.count), status) != nil {
                let text = line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }  // "SigQ:\t<queued>/<limit>"
                guard text.hasPrefix("SigQ:") else { continue }
                let digits = text.dropFirst(5).drop { $0 == "\t" || $0 == " " }.prefix { $0.isASCII && $0.isNumber }
                if let queued = Int(digits) { return queued + 2 }
            }
        }
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(__RLIMIT_SIGPENDING.rawValue), &limit)
        return limit.rlim_cur >= rlim_t(Int.max - 2) ? Int.max : Int(limit.rlim_cur) + 2  // or RLIM_INFINITY
    }

    /// Blocks or unblocks `signal` in the calling thread; returns whether it was blocked.
    private static func setBlocked(_ signal: Int32, _ blocked: Bool) -> Bool {
        var set = sigset_t(), previous = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, &previous)
        return sigismember(&previous, signal) == 1
    }

    // MARK: The internal thread

    private final class Receiver: @unchecked Sendable {
        let signalFD: Int32
        let wakeFD: Int32
        var threadID: Int32 = 0
        /// Work for the internal thread (`wakeFD` announces it).
        let requests = Mutex<[Rendezvous<Void>]>([])

        init(signalFD: Int32, wakeFD: Int32) {
            self.signalFD = signalFD
            self.wakeFD = wakeFD
        }

        /// Runs `body` on the internal thread and waits for it.
        func perform(_ body: @escaping () -> Void) {
            let request = Rendezvous<Void>(body)
            requests.withLock { $0.append(request) }
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
            _ = request.wait()
        }
    }

    /// The internal thread, started on first use (under `operations`).
    private func runningReceiver() throws(SignalRouteError) -> Receiver {
        if let receiver { return receiver }
        if !atForkInstalled {
            pthread_atfork({ SignalRouter.shared.forkPrepare() }, { SignalRouter.shared.forkParent() },
                           { SignalRouter.shared.forkChild() })
            atForkInstalled = true
        }
        var none = sigset_t()
        sigemptyset(&none)
        let signalFD = signalfd(-1, &none, Int32(SFD_CLOEXEC | SFD_NONBLOCK))
        if signalFD < 0 { throw .system(errno) }
        let wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        if wakeFD < 0 {
            let code = errno
            close(signalFD)
            throw .system(code)
        }
        let receiver = Receiver(signalFD: signalFD, wakeFD: wakeFD)
        let started = Rendezvous<Int32> { Int32(bitPattern: threadID()) }
        final class Start { let receiver: Receiver, started: Rendezvous<Int32>
            init(_ receiver: Receiver, _ started: Rendezvous<Int32>) { self.receiver = receiver; self.started = started } }
        let context = Unmanaged.passRetained(Start(receiver, started)).toOpaque()

        var all = sigset_t(), creatorMask = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_SETMASK, &all, &creatorMask)  // the thread is born with every signal blocked
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let status = pthread_create(&thread, &attributes, { context in
            let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
            sync_thread_set_name("libsync.signals")
            start.started.run()
            SignalRouter.shared.receive(start.receiver)
        }, context)
        pthread_attr_destroy(&attributes)
        pthread_sigmask(SIG_SETMASK, &creatorMask, nil)
        guard status == 0 else {
            Unmanaged<Start>.fromOpaque(context).release()
            close(signalFD)
            close(wakeFD)
            throw .system(status)
        }
        receiver.threadID = try! started.wait().get()
        self.receiver = receiver
        return receiver
    }

    /// The internal thread's loop: reads routed signals in the kernel's order and hands each to
    /// its route; runs requests (unrouting's take-back).
    private func receive(_ receiver: Receiver) -> Never {
        let capacity = 64, size = MemoryLayout<signalfd_siginfo>.stride
        let infos = UnsafeMutablePointer<signalfd_siginfo>.allocate(capacity: capacity)
        var batch: [RoutedSignal?] = []
        batch.reserveCapacity(capacity)
        var fds = [pollfd(fd: receiver.signalFD, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: receiver.wakeFD, events: Int16(POLLIN), revents: 0)]
        while true {
            _ = poll(&fds, 2, -1)
            let bytes = read(receiver.signalFD, infos, capacity * size)
            if bytes > 0 {
                let count = bytes / size
                Self.locked(lookup) {
                    for i in 0..<count { batch.append(routes[Int(infos[i].ssi_signo) % Self.slots]) }
                }
                for i in 0..<count { batch[i]?.deliver(SignalInfo(infos[i])) }
                batch.removeAll(keepingCapacity: true)
            }
            var wakeups: UInt64 = 0
            if read(receiver.wakeFD, &wakeups, 8) == 8 {
                let requests = receiver.requests.withLock { requests in
                    defer { requests.removeAll() }
                    return requests
                }
                for request in requests { request.run() }
            }
        }
    }

    // MARK: fork()

    private func forkPrepare() {
        pthread_mutex_lock(operations)
        pthread_mutex_lock(lookup)
    }

    private func forkParent() {
        pthread_mutex_unlock(lookup)
        pthread_mutex_unlock(operations)
    }

    /// In the child (one thread; no internal thread): unroutes everything as `unroute` would,
    /// without the internal thread; the child's thread gets the routing thread's previous blocked
    /// state (it is the only thread that can take the signal now). Routes and the receiver are
    /// leaked, not released: their targets' threads do not exist here, and releasing an executor
    /// waits for its thread.
    private func forkChild() {
        for slot in routes.indices {
            guard let route = routes[slot] else { continue }
            _ = Unmanaged.passRetained(route)
            sigaction(route.signal, &route.previousAction, nil)
            setForwarding(routed: route.signal, false)
            _ = Self.setBlocked(route.signal, route.previouslyBlocked)
            routes[slot] = nil
        }
        forwardingWord(\.process).pointee.store(0, ordering: .sequentiallyConsistent)
        forwardingWord(\.receiver).pointee.store(0, ordering: .sequentiallyConsistent)
        if let receiver {
            close(receiver.signalFD)
            close(receiver.wakeFD)
            _ = Unmanaged.passRetained(receiver)
            self.receiver = nil
        }
        sigemptyset(&watched)
        pthread_mutex_unlock(lookup)
        pthread_mutex_unlock(operations)
    }
}

/// libsync's own threads (executors, the signal thread) never take a process's asynchronous
/// signals, as libdispatch's workers do not: they are born with every signal blocked except those
/// a thread raises itself (faults; SIGPIPE; SIGPROF, for profilers). A new thread inherits its
/// creator's mask, so the creator blocks them around pthread_create.
package enum ThreadSignalMask {
    /// Blocks them in the calling thread; returns the mask to restore after pthread_create.
    package static func blockForNewThread() -> sigset_t {
        var set = sigset_t(), previous = sigset_t()
        sigfillset(&set)
        for own in [SIGILL, SIGTRAP, SIGFPE, SIGBUS, SIGSEGV, SIGSYS, SIGABRT, SIGPIPE, SIGPROF] { sigdelset(&set, own) }
        pthread_sigmask(SIG_BLOCK, &set, &previous)
        return previous
    }

    /// Restores the mask `blockForNewThread` returned.
    package static func restore(_ mask: sigset_t) {
        var mask = mask
        pthread_sigmask(SIG_SETMASK, &mask, nil)
    }
}
