import CSyncShim
import Glibc
import Synchronization

/// `@synchronized(token)`: a recursive lock per token, found in a table without creating a lock
/// first. As Objective-C's runtime does, each of 64 buckets keeps a list of entries (token,
/// users, recursive lock); an entry whose users dropped to zero is reused for another token.
/// So two tokens never share a lock (no deadlock that the program did not write itself), and
/// different tokens only meet on a bucket's short list lock.
@usableFromInline package enum SynchronizedTable {
    final class Entry: @unchecked Sendable {
        var token: UInt = 0
        var users = 0            // threads holding or waiting for this token's lock
        var next: Entry?
        let lock = LockMemory(size: 8)
    }

    final class Bucket: @unchecked Sendable {
        let guardWord = LockMemory(size: 4)
        var entries: Entry?
        var word: UnsafeMutablePointer<Atomic<Int32>> { atomic(guardWord.raw, as: Int32.self) }
    }

    static let buckets: [Bucket] = (0..<64).map { _ in Bucket() }

    static func bucket(_ token: UInt) -> Bucket {
        buckets[Int(truncatingIfNeeded: (token >> 4) ^ (token >> 10)) & (buckets.count - 1)]
    }

    /// Runs `body` on the bucket of `token` with the bucket's list locked.
    static func withBucket<R>(_ token: UInt, _ body: (Bucket) -> R) -> R {
        let bucket = bucket(token)
        LockWord.lock(bucket.word, shared: false)
        defer { LockWord.unlock(bucket.word, shared: false) }
        return body(bucket)
    }

    /// Takes the lock of `token` (recursively). 0, ETIMEDOUT, EINTR (interruptible), EAGAIN.
    @usableFromInline package static func enter(_ token: UInt, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let entry = withBucket(token) { bucket -> Entry in
            var free: Entry?
            var cursor = bucket.entries
            while let entry = cursor {
                if entry.users > 0 && entry.token == token { entry.users += 1; return entry }
                if entry.users == 0 && free == nil { free = entry }
                cursor = entry.next
            }
            let entry = free ?? Entry()
            if free == nil { entry.next = bucket.entries; bucket.entries = entry }
            entry.token = token
            entry.users = 1
            return entry
        }
        let result = RecursiveWord.lock(entry.lock.raw, deadline: deadline, interruptible: interruptible)
        if result != 0 { withBucket(token) { _ in entry.users -= 1 } }
        return result
    }

    /// Releases the lock of `token` once. 0, or EPERM if the caller does not hold it.
    @usableFromInline package static func exit(_ token: UInt) -> Int32 {
        withBucket(token) { bucket in
            var cursor = bucket.entries
            while let entry = cursor {
                if entry.users > 0 && entry.token == token {
                    let result = RecursiveWord.unlock(entry.lock.raw)
                    if result == 0 { entry.users -= 1 }
                    return result
                }
                cursor = entry.next
            }
            return EPERM
        }
    }
}

/// Objective-C's `@synchronized(object) { body }`: runs `body` holding a recursive lock that
/// belongs to `object`'s identity, and releases it even when `body` throws. Lock only on
/// objects you own (seed 004): anyone else may lock on them too.
@inlinable
public func synchronized<R, E: Error>(_ object: AnyObject, _ body: () throws(E) -> R) throws(E) -> R {
    try withExtendedLifetime(object) { () throws(E) -> R in
        let token = UInt(bitPattern: ObjectIdentifier(object).hashValue)
        let result = SynchronizedTable.enter(token)
        precondition(result == 0, "synchronized: recursion depth overflow")
        defer { _ = SynchronizedTable.exit(token) }
        return try body()
    }
}
