import Glibc
import LibSync
import Synchronization

/// Apple's "Thread Safety and Signals" rule, on libsync: SIGUSR1 handled on a chosen thread with
/// ordinary code and the sender's siginfo.
func signalsDemo() throws -> Bool {
    let worker = try ThreadExecutor()
    let handled = Atomic<Int>(0)
    let route = try SignalRoute(signal: SIGUSR1, on: worker) { info in
        print("SIGUSR1 from pid \(info.pid) (uid \(info.uid), code \(info.code)); on the worker's thread: \(worker.isCurrent)")
        if worker.isCurrent { handled.add(1, ordering: .relaxed) }
    }
    kill(getpid(), SIGUSR1)
    for _ in 0..<10_000 where handled.load(ordering: .relaxed) == 0 { usleep(1000) }
    route.cancel()  // SIGUSR1's previous action is back
    return handled.load(ordering: .relaxed) == 1
}
