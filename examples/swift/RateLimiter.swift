import Foundation
import LibSync
import Synchronization

/// The results of the jobs: per job, the token that last claimed it (an older one is refused),
/// and how many jobs run at once.
final class JobTable: Sendable {
    private struct State { var running = 0, most = 0, claims: [Int: UInt64] = [:], results: [Int: Int] = [:] }
    private let state = Mutex(State())
    var most: Int { state.withLock { $0.most } }
    var done: Int { state.withLock { $0.results.count } }
    func enter() { state.withLock { $0.running += 1; $0.most = max($0.most, $0.running) } }
    func leave() { state.withLock { $0.running -= 1 } }
    /// Records `token` as the job's claim: false if a newer permit claimed the job (a stale token).
    func claim(_ job: Int, _ token: UInt64) -> Bool {
        state.withLock { s in
            if token < s.claims[job, default: 0] { return false }
            s.claims[job] = token
            return true
        }
    }
    func write(_ job: Int, _ value: Int) { state.withLock { $0.results[job] = value } }
}

/// A cross-host rate limiter from Swift: at most 2 jobs at a time among threads that each hold
/// their own `DistributedSemaphore` object (as processes on several hosts would), on a path in a
/// temporary directory; a server semaphore is made the same way from its URL:
/// `DistributedSemaphore("redis://:pw@cache:6379/0?lock=jobs&ttl=10", permits: 2)`.
func rateLimiterDemo() throws -> Bool {
    let directory = NSTemporaryDirectory() + "ratelimit-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let target = directory + "/jobs.semaphore"
    let table = JobTable()
    let workers = (0..<4).map { first in
        Thread {
            guard let limiter = try? DistributedSemaphore(target, permits: 2) else { return }
            for job in stride(from: first, to: 12, by: 4) {
                try? limiter.withPermit {  // waits while 2 jobs run, on any host
                    table.enter()
                    if let token = limiter.token, table.claim(job, token) { table.write(job, job * job) }
                    table.leave()
                }
            }
        }
    }
    workers.forEach { $0.start() }
    while workers.contains(where: { !$0.isFinished }) { usleep(1000) }

    // A permit lost mid-job (broken here; a lease that ran out does the same): refused.
    let slow = try DistributedSemaphore(target, permits: 2), fresh = try DistributedSemaphore(target, permits: 2)
    _ = try slow.tryAcquire()
    let stale = slow.token ?? 0
    _ = table.claim(99, stale)
    try fresh.breakLock()
    _ = try fresh.tryAcquire()
    let refused = table.claim(99, fresh.token ?? 0) && !table.claim(99, stale)
    let told: Bool
    do {
        try slow.release()
        told = false
    } catch {
        told = error == .broken  // the permit was lost
    }
    try fresh.release()
    print("12 jobs, at most \(table.most) at a time; stale token refused: \(refused), lost permit reported: \(told)")
    return table.most <= 2 && table.done == 12 && refused && told
}
