import Foundation
import LibSync
import Synchronization

/// Learning that a hold was lost, from Swift: on a path in a temporary directory, another object
/// breaks the holder's lock (an operator, say); the handler runs on libsync's notifier thread,
/// and the critical section checks `isLost` (one atomic load) before each write. A Redis or
/// PostgreSQL URL works the same way.
func lossNotificationDemo() throws -> Bool {
    let directory = NSTemporaryDirectory() + "loss-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }

    let jobs = try DistributedLock(path: directory + "/jobs.lock")
    let told = Atomic<Bool>(false)
    jobs.setEventHandler { _, event in                      // .lost, .suspended, .resumed
        print("jobs lock", event)
        if event == .lost { told.store(true, ordering: .releasing) }
    }
    var written = 0
    try jobs.lock()
    try DistributedLock(path: directory + "/jobs.lock").breakLock()  // someone else breaks it
    while written < 1000 && !jobs.isLost && !jobs.isSuspended {
        written += 1                                         // write, with jobs.token
        usleep(10_000)
    }
    let lost = jobs.isLost
    do { try jobs.unlock() } catch { print("unlock:", error) }  // it was broken
    for _ in 0..<5000 where !told.load(ordering: .acquiring) { usleep(1000) }
    print("wrote \(written) items, then learned the hold was lost: \(lost)")
    return written < 1000 && lost && told.load(ordering: .acquiring)
}
