import Foundation
import Glibc
import LibSync
import Synchronization
import XCTest

/// Deliveries, and whether each ran where it should.
private final class Deliveries: Sendable {
    let infos = Mutex<[SignalInfo]>([])
    let misplaced = Atomic<Int>(0)
    var count: Int { infos.withLock { $0.count } }
    func append(_ info: SignalInfo, inPlace: Bool) {
        if !inPlace { misplaced.add(1, ordering: .relaxed) }
        infos.withLock { $0.append(info) }
    }
}

/// Waits until `condition` holds (the bound only guards against hangs) and returns it.
private func eventually(_ condition: () -> Bool) -> Bool {
    for _ in 0..<60_000 {  // (not `where !condition()`: that evaluates it 60,000 times, true or not)
        if condition() { return true }
        usleep(1000)
    }
    return condition()
}

/// A child process that sigqueues values `range` to this process, then exits.
private func queueFromChild(_ signal: Int32, _ range: Range<Int32>) -> pid_t {
    let parent = getpid()
    let child = fork()
    if child == 0 {
        for value in range {
            while sigqueue(parent, signal, sigval(sival_int: value)) != 0 {
                if errno != EAGAIN { _exit(2) }
                sched_yield()
            }
        }
        _exit(0)
    }
    return child
}

private func reap(_ child: pid_t) -> Int32 {
    var status: Int32 = 0
    waitpid(child, &status, 0)
    return status
}

private func isBlockedHere(_ signal: Int32) -> Bool {
    var mask = sigset_t()
    pthread_sigmask(SIG_BLOCK, nil, &mask)
    return sigismember(&mask, signal) == 1
}

/// The threads of this process, other than the caller, that have `signal` unblocked.
private func otherThreadsTaking(_ signal: Int32) throws -> [String] {
    let me = (try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self") as NSString).lastPathComponent
    return try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").filter { task in
        guard task != me, let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
              let mask = UInt64(line.dropFirst(7).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
        return mask & (1 << UInt64(signal - 1)) == 0
    }
}

/// A previous action that counts its calls (set up before any signal can reach it).
private let previousCalls = Atomic<Int>(0)
private func installCountingAction(_ signal: Int32) -> sigaction {
    _ = previousCalls.load(ordering: .relaxed)
    var action = sigaction(), old = sigaction()
    action.__sigaction_handler.sa_sigaction = { _, _, _ in previousCalls.add(1, ordering: .relaxed) }
    action.sa_flags = SA_SIGINFO | SA_RESTART
    sigemptyset(&action.sa_mask)
    sigaction(signal, &action, &old)
    return old
}

private func currentHandler(_ signal: Int32) -> UnsafeRawPointer? {
    var action = sigaction()
    sigaction(signal, nil, &action)
    return unsafeBitCast(action.__sigaction_handler.sa_sigaction, to: UnsafeRawPointer?.self)
}

private func isPending(_ signal: Int32) -> Bool {
    var set = sigset_t()
    sigpending(&set)
    return sigismember(&set, signal) == 1
}

/// Whether a signalfd of this process (libsync's) reads `signal`: its /proc fdinfo has the mask.
private func signalfdReads(_ signal: Int32) -> Bool {
    let files = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return files.contains { fd in
        guard (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) == "anon_inode:[signalfd]",
              let info = try? String(contentsOfFile: "/proc/self/fdinfo/\(fd)", encoding: .utf8),
              let line = info.split(separator: "\n").first(where: { $0.hasPrefix("sigmask:") }),
              let mask = UInt64(line.dropFirst(8).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
        return mask & (1 << UInt64(signal - 1)) != 0
    }
}

/// An action that holds the thread running it until released (atomics and a system call only;
/// set up before any signal can reach it).
private let holdEntered = Atomic<Bool>(false), holdRelease = Atomic<Bool>(false)
private func installHoldingAction(_ signal: Int32) -> sigaction {
    _ = holdEntered.load(ordering: .relaxed)
    _ = holdRelease.load(ordering: .relaxed)
    var action = sigaction(), old = sigaction()
    action.__sigaction_handler.sa_sigaction = { _, _, _ in
        holdEntered.store(true, ordering: .releasing)
        while !holdRelease.load(ordering: .acquiring) { sched_yield() }
    }
    action.sa_flags = SA_SIGINFO
    sigemptyset(&action.sa_mask)
    sigaction(signal, &action, &old)
    return old
}

final class SignalsTests: XCTestCase {
    private let rtmin = __libc_current_sigrtmin()

    /// The test: 1,000 real-time signals sigqueued by another process, values 0..<1000,
    /// all arrive, in order, on the executor's thread, with the sender's siginfo.
    func testThousandRealTimeSignalsFromAnotherProcessArriveInOrderOnTheExecutor() throws {
        let signal = rtmin + 1
        XCTAssertEqual(try otherThreadsTaking(signal), [], "a thread left by another test takes the signal")
        let executor = try ThreadExecutor()
        let deliveries = Deliveries()
        let route = try SignalRoute(signal: signal, on: executor) { info in
            deliveries.append(info, inPlace: executor.isCurrent)
        }
        let child = queueFromChild(signal, 0..<1000)
        XCTAssertEqual(reap(child), 0)
        XCTAssertTrue(eventually { deliveries.count >= 1000 })
        let infos = deliveries.infos.withLock { $0 }
        XCTAssertEqual(infos.map(\.value), Array(0..<1000))
        XCTAssertEqual(Set(infos.map { [$0.signal, $0.code, $0.pid, Int32(bitPattern: $0.uid)] }),
                       [[signal, Int32(SI_QUEUE), child, Int32(bitPattern: getuid())]])
        XCTAssertEqual(deliveries.misplaced.load(ordering: .relaxed), 0)
        route.cancel()
    }

    func testQueueTargetsRunTheHandlerAsWorkOfTheQueue() throws {
        let signal = rtmin + 2
        let serial = SerialQueue(), concurrent = ConcurrentQueue()
        typealias Router = (@escaping @Sendable (SignalInfo) -> Void) throws -> SignalRoute
        let routers: [Router] = [{ try SignalRoute(signal: signal, on: serial, handler: $0) },
                                 { try SignalRoute(signal: signal, on: concurrent, handler: $0) }]
        for (index, routeOn) in routers.enumerated() {
            let deliveries = Deliveries()
            let route = try routeOn { info in
                deliveries.append(info, inPlace: index == 0 ? serial.isCurrent : concurrent.isCurrent)
            }
            for value in Int32(0)..<50 { XCTAssertEqual(sigqueue(getpid(), signal, sigval(sival_int: value)), 0) }
            XCTAssertTrue(eventually { deliveries.count >= 50 })
            XCTAssertEqual(deliveries.infos.withLock { $0.map(\.value) }, Array(0..<50))
            XCTAssertEqual(deliveries.misplaced.load(ordering: .relaxed), 0)
            route.cancel()
        }
    }

    /// A standard signal sent while the handler is busy is not lost: one more delivery follows.
    func testStandardSignalSentDuringABusyHandlerIsNotLost() throws {
        let executor = try ThreadExecutor()
        let count = Atomic<Int>(0), entered = Atomic<Bool>(false), release = Atomic<Bool>(false)
        let route = try SignalRoute(signal: SIGUSR1, on: executor) { _ in
            if count.add(1, ordering: .relaxed).newValue == 1 {
                entered.store(true, ordering: .releasing)
                _ = eventually { release.load(ordering: .acquiring) }
            }
        }
        kill(getpid(), SIGUSR1)
        XCTAssertTrue(eventually { entered.load(ordering: .acquiring) })
        kill(getpid(), SIGUSR1)
        release.store(true, ordering: .releasing)
        XCTAssertTrue(eventually { count.load(ordering: .relaxed) >= 2 })
        route.cancel()
    }

    /// cancel() (and the last reference) restores the previous action and this thread's mask.
    func testCancelAndDeinitRestoreThePreviousActionAndMask() throws {
        var old = installCountingAction(SIGUSR2)
        defer { sigaction(SIGUSR2, &old, nil) }
        let counting = currentHandler(SIGUSR2)
        let executor = try ThreadExecutor()
        let before = previousCalls.load(ordering: .relaxed)

        let route = try SignalRoute(signal: SIGUSR2, on: executor) { _ in }
        XCTAssertNotEqual(currentHandler(SIGUSR2), counting)
        XCTAssertTrue(isBlockedHere(SIGUSR2))
        route.cancel()
        route.cancel()  // idempotent
        XCTAssertEqual(currentHandler(SIGUSR2), counting)
        XCTAssertFalse(isBlockedHere(SIGUSR2))
        raise(SIGUSR2)
        XCTAssertEqual(previousCalls.load(ordering: .relaxed), before + 1)

        do { _ = try SignalRoute(signal: SIGUSR2, on: executor) { _ in } }  // released at once
        XCTAssertEqual(currentHandler(SIGUSR2), counting)
        XCTAssertFalse(isBlockedHere(SIGUSR2))
        XCTAssertThrowsError(try SignalRoute.unroute(SIGUSR2)) { XCTAssertEqual($0 as? SignalRouteError, .notRouted(SIGUSR2)) }
    }

    /// Arrivals still pending in the kernel when the route is cancelled (the internal thread had
    /// not read them) are dropped as deliveries not yet started: neither the handler nor the
    /// previous action gets them, and none is left pending. To keep them unread, the internal
    /// thread is held in the action of a signal unrouted before (which only it has unblocked),
    /// and let go once cancel() has stopped its signalfd from reading the routed signal.
    func testCancelDropsArrivalsStillPendingInTheKernel() throws {
        let held = rtmin + 10, signal = rtmin + 9
        var oldHeld = installHoldingAction(held)
        var old = installCountingAction(signal)
        let counting = currentHandler(signal)
        var heldSet = sigset_t(), both = sigset_t()
        sigemptyset(&heldSet)
        sigaddset(&heldSet, held)
        both = heldSet
        sigaddset(&both, signal)
        defer {
            holdRelease.store(true, ordering: .releasing)
            sigaction(held, &oldHeld, nil)
            sigaction(signal, &old, nil)
            pthread_sigmask(SIG_UNBLOCK, &both, nil)  // the route blocked `signal` here; nothing is pending
        }
        let executor = try ThreadExecutor(), canceller = try ThreadExecutor()
        try SignalRoute(signal: held, on: executor) { _ in }.cancel()  // the internal thread unblocks it
        pthread_sigmask(SIG_BLOCK, &heldSet, nil)
        let before = previousCalls.load(ordering: .relaxed)
        let deliveries = Deliveries()
        let route = try SignalRoute(signal: signal, on: executor) { info in deliveries.append(info, inPlace: true) }
        XCTAssertTrue(signalfdReads(signal))
        kill(getpid(), held)
        XCTAssertTrue(eventually { holdEntered.load(ordering: .acquiring) })
        for _ in 0..<20 { kill(getpid(), signal) }
        XCTAssertTrue(isPending(signal))  // unread: the internal thread is held

        try canceller.async { route.cancel() }
        XCTAssertTrue(eventually { currentHandler(signal) == counting && !signalfdReads(signal) })
        holdRelease.store(true, ordering: .releasing)
        try canceller.sync {}
        try executor.sync {}
        XCTAssertEqual(deliveries.count, 0)
        XCTAssertEqual(previousCalls.load(ordering: .relaxed), before)
        XCTAssertFalse(isPending(signal))

        kill(getpid(), signal)  // from now on the previous action has it: exactly this one
        XCTAssertTrue(eventually { previousCalls.load(ordering: .relaxed) > before })
        XCTAssertEqual(previousCalls.load(ordering: .relaxed), before + 1)
        XCTAssertFalse(isPending(signal))
        XCTAssertEqual(deliveries.count, 0)
    }

    /// Threads started before the route, with the signal unblocked: every real-time signal still
    /// reaches the executor exactly once, including those sent to them directly (forwarded).
    func testThreadsStartedBeforeTheRouteForwardEverySignalExactlyOnce() throws {
        let signal = rtmin + 4
        let done = Atomic<Bool>(false)
        var threads: [pthread_t] = []
        for _ in 0..<3 {
            var thread = pthread_t()
            let box = Unmanaged.passRetained(Carrier { _ = eventually { done.load(ordering: .acquiring) } }).toOpaque()
            XCTAssertEqual(pthread_create(&thread, nil, { context in
                Unmanaged<Carrier>.fromOpaque(context!).takeRetainedValue().body()
                return nil
            }, box), 0)
            threads.append(thread)
        }
        defer {
            done.store(true, ordering: .releasing)
            for thread in threads { pthread_join(thread, nil) }
        }
        let executor = try ThreadExecutor()
        let deliveries = Deliveries()
        let route = try SignalRoute(signal: signal, on: executor) { info in
            deliveries.append(info, inPlace: executor.isCurrent)
        }
        let child = queueFromChild(signal, 0..<1000)
        for j in 0..<300 {
            while pthreadSigqueue(threads[j % 3], signal, sigval(sival_int: Int32(1000 + j))) == EAGAIN { sched_yield() }
        }
        for j in 0..<150 {
            while pthread_kill(threads[j % 3], signal) == EAGAIN { sched_yield() }
        }
        XCTAssertEqual(reap(child), 0)
        XCTAssertTrue(eventually { deliveries.count >= 1450 })
        route.cancel()
        let infos = deliveries.infos.withLock { $0 }
        XCTAssertEqual(infos.count, 1450)
        XCTAssertEqual(infos.filter { $0.code == Int32(SI_QUEUE) }.map(\.value).sorted(), Array(0..<1300))
        XCTAssertEqual(infos.filter { $0.code == Int32(SI_TKILL) && $0.pid == getpid() }.count, 150)
        XCTAssertEqual(deliveries.misplaced.load(ordering: .relaxed), 0)
    }

    /// The handler cancels its own route: no deadlock; later arrivals go to the previous action.
    func testTheHandlerMayCancelItsOwnRoute() throws {
        let signal = rtmin + 7
        var old = installCountingAction(signal)
        defer { sigaction(signal, &old, nil) }
        let executor = try ThreadExecutor()
        let calls = Atomic<Int>(0)
        let holder = Mutex<SignalRoute?>(nil)
        let route = try SignalRoute(signal: signal, on: executor) { _ in
            calls.add(1, ordering: .relaxed)
            holder.withLock { $0 }?.cancel()
        }
        holder.withLock { $0 = route }
        let before = previousCalls.load(ordering: .relaxed)
        kill(getpid(), signal)
        XCTAssertTrue(eventually { calls.load(ordering: .relaxed) == 1 })
        try executor.sync {}
        XCTAssertThrowsError(try SignalRoute.unroute(signal))
        kill(getpid(), signal)
        XCTAssertTrue(eventually { previousCalls.load(ordering: .relaxed) > before })
        try executor.sync {}
        XCTAssertEqual(calls.load(ordering: .relaxed), 1)
    }

    func testErrors() throws {
        let executor = try ThreadExecutor()
        for signal in [0, -1, 65, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGPIPE, 32, 33] as [Int32] {
            XCTAssertThrowsError(try SignalRoute(signal: signal, on: executor) { _ in }) {
                XCTAssertEqual($0 as? SignalRouteError, .unroutable(signal))
                XCTAssertEqual(($0 as? SignalRouteError)?.code, EINVAL)
            }
            XCTAssertFalse(SignalRoute.isRoutable(signal))
        }
        let route = try SignalRoute(signal: SIGUSR1, on: executor) { _ in }
        XCTAssertThrowsError(try SignalRoute(signal: SIGUSR1, on: executor) { _ in }) {
            XCTAssertEqual($0 as? SignalRouteError, .alreadyRouted(SIGUSR1))
        }
        XCTAssertNoThrow(try SignalRoute.unroute(SIGUSR1))
        route.cancel()  // no longer holds it: nothing to do
        XCTAssertThrowsError(try SignalRoute.unroute(SIGUSR1)) { XCTAssertEqual(($0 as? SignalRouteError)?.code, ENOENT) }
    }
}

/// glibc's pthread_sigqueue (a GNU extension the Glibc module does not show).
private let pthreadSigqueue = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_sigqueue"),
                                            to: (@convention(c) (pthread_t, Int32, sigval) -> Int32).self)

private final class Carrier: @unchecked Sendable {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}
