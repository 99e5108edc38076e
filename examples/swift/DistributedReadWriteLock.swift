import Foundation
import LibSync

/// The read/write distributed lock from Swift, on a path in a temporary directory. A server's is
/// made the same way from its URL: `DistributedReadWriteLock("postgresql://app:pw@db/app?lock=catalog")`,
/// `DistributedReadWriteLock("redis://:pw@cache:6379/0?lock=catalog&ttl=10")` or
/// `DistributedReadWriteLock("etcd://app:pw@etcd:2379?lock=catalog")`.
func distributedReadWriteLockDemo() throws -> Bool {
    let directory = NSTemporaryDirectory() + "catalog-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let target = directory + "/catalog.lock"
    let reader1 = try DistributedReadWriteLock(target), reader2 = try DistributedReadWriteLock(target)
    let writer = try DistributedReadWriteLock(target)

    try reader1.lock(.read)
    try reader2.lock(.read)                               // readers share it
    let readToken = reader1.fencingToken ?? 0
    let writerWaits = try !writer.tryLock(.write)         // a writer must wait for them
    try reader1.unlock()
    try reader2.unlock()
    guard try writer.tryLock(.write, timeout: .seconds(10)) else { return false }
    let writeToken = writer.fencingToken ?? 0             // larger than every reader's before it
    try writer.unlock()
    print("writer waited: \(writerWaits); write token \(writeToken) > read token \(readToken)")
    return writerWaits && writeToken > readToken
}
