import Foundation
import LibSync

/// Lock-order checking: two threads take two mutexes in opposite orders, one after the other,
/// so nothing deadlocks, and libsync still reports the potential deadlock.
func lockOrderDemo() -> Bool {
    let accounts = SyncMutex(), auditLog = SyncMutex()
    accounts.label = "accounts"  // names for the reports
    auditLog.label = "audit_log"
    let cycles = CycleCount()
    LockOrderChecking.onCycle { cycle in  // instead of the report on stderr
        cycles.lock.withLock { cycles.value += 1 }
        print("potential deadlock among \(cycle.edges.count) locks:",
              cycle.edges.map { "\($0.fromName ?? "?") -> \($0.toName ?? "?") (thread \($0.thread))" })
    }
    LockOrderChecking.isEnabled = true  // or LIBSYNC_CHECK_LOCK_ORDER=1 in the environment
    let transfer = Thread { accounts.withLock { auditLog.withLock {} } }
    transfer.start()
    while !transfer.isFinished { usleep(1000) }
    let rotateLog = Thread { auditLog.withLock { accounts.withLock {} } }  // the other order, later
    rotateLog.start()
    while !rotateLog.isFinished { usleep(1000) }
    LockOrderChecking.isEnabled = false
    LockOrderChecking.onCycle(nil)
    return cycles.lock.withLock { cycles.value } == 1
}

/// The handler's count: `value` only under `lock`.
final class CycleCount: @unchecked Sendable {
    let lock = SyncMutex()
    var value = 0
}
