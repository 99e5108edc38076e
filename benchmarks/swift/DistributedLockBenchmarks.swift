import Glibc
import LibSync

/// Swift: DistributedLock tryLock+unlock, and lock+unlock blocking and async from a task, beside
/// flock(2) on an open lock file, uncontended, in $BENCH_DIR (default /tmp).
func distributedLockBenchmarks() {
    let directory = getenv("BENCH_DIR").map { String(cString: $0) } ?? "/tmp"
    let lock = try! DistributedLock(path: "\(directory)/bench-swift-\(getpid()).dlock")
    let fd = open("\(directory)/bench-swift-\(getpid()).flock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
    table("Swift distributed lock acquire+release", threads: 1, iterations: 4_000, [
        Row(name: "flock LOCK_EX+LOCK_UN (fd kept open)") { n in
            for _ in 0..<n { flock(fd, LOCK_EX); flock(fd, LOCK_UN) }
        },
        Row(name: "LibSync DistributedLock tryLock+unlock") { n in
            for _ in 0..<n { _ = try! lock.tryLock(); try! lock.unlock() }
        },
        Row(name: "LibSync DistributedLock lock (in a task)") { n in
            inTask { for _ in 0..<n { try! { try lock.lock() }(); try! lock.unlock() } }
        },
        Row(name: "LibSync DistributedLock async lock") { n in
            inTask { for _ in 0..<n { try! await lock.lock(); try! lock.unlock() } }
        },
    ])
    try? lock.breakLock()  // removes the (empty) lock directory
    close(fd)
    unlink("\(directory)/bench-swift-\(getpid()).flock")
}
