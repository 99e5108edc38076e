import Foundation
import LibSync

/// The distributed lock from Swift, on paths in a temporary directory. A server lock is made the
/// same way from its URL: `DistributedLock("postgresql://app:pw@db/app?lock=jobs")`,
/// `DistributedLock("redis://:pw@cache:6379/0?lock=jobs&ttl=10")` or
/// `DistributedLock("etcd://root:pw@10.0.0.5:2379?lock=jobs")` (`serverLockDemo` below).
func distributedLockDemo() throws -> Bool {
    let directory = NSTemporaryDirectory() + "jobs-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }

    let lock = try DistributedLock(path: directory + "/jobs.lock")  // throws DistributedLockError
    var held = false
    if try lock.tryLock() {
        defer { try? lock.unlock() }
        held = true
    }
    let n = try lock.withLockIfAvailable(timeout: .seconds(5)) { 6 * 7 } ?? 0
    if let holder = try lock.holder, holder.isStale { _ = try lock.recover() }
    try lock.withLock { print("fencing token", lock.token ?? 0) }  // send it with every write

    let shared = try DistributedLock(path: directory + "/a/b/jobs.lock",
                                     options: [.recursive, .processOwned, .makeParents], mode: 0o666)
    let depth = try shared.withLock { try shared.withLock { shared.lockCount } }  // a re-entry: 2
    print("held: \(held), withLock's value: \(n), re-entered: depth \(depth)")
    return held && n == 42 && depth == 2 && !lock.isHeld && !shared.isHeld
}

/// The same calls on a server's lock: `sync-demo TARGET` runs them on that URL alone (an etcd,
/// PostgreSQL or Redis lock, say `etcd://root:pw@127.0.0.1:2379?lock=jobs`).
func serverLockDemo(_ target: String) throws -> Bool {
    let lock = try DistributedLock(target)  // connects: a bad URL or a refused login throws here
    var held = false
    if try lock.tryLock() {
        defer { try? lock.unlock() }
        held = true
    }
    // etcd: the token is the lock key's create revision, the holder its key's value.
    let (token, holder) = try lock.withLock { (lock.token ?? 0, try lock.holder) }
    print("held: \(held), fencing token \(token), holder: pid \(holder?.pid ?? 0) on \(holder?.host ?? "?")")
    return held && token > 0 && holder?.pid == getpid() && !lock.isHeld
}
