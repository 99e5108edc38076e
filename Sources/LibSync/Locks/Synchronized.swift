import CSyncShim
import Glibc
import Synchronization

/// `@synchronized(token)`: a recursive lock per token, found in a table without creating a lock
/// first. As Objective-C's runtime does, each of 64 buckets keeps a list of entries (token,
/// users, recursive lock); an entry whose users dropped to zero is reused for another token.
/// So two tokens never share a lock (no deadlock that the program did not write itself).
///
/// Finding a token's entry takes no lock: entries are never freed, and an entry's token changes
/// only while it has no users (under the bucket's lock), so a user count taken on an entry that
/// still shows the token pins it to that token. The bucket's lock is taken only to claim an
/// entry for a token that has none. Raw memory, not objects: no reference counting on the way.
///
///     bucket (64 bytes)  Int32 lock word at 0, list head (entry address) at 8
///     entry  (64 bytes)  token at 0, users at 8, next entry at 16, recursive lock at 24
@usableFromInline package enum SynchronizedTable {
    static let bucketCount = 64
    nonisolated(unsafe) static let buckets: UnsafeMutableRawPointer = zeroed(bucketCount * 64)

    static func zeroed(_ size: Int) -> UnsafeMutableRawPointer {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        return raw
    }

    @inline(__always) static func bucket(_ token: UInt) -> UnsafeMutableRawPointer {
        buckets + (Int(truncatingIfNeeded: (token >> 4) ^ (token >> 10)) & (bucketCount - 1)) * 64
    }
    @inline(__always) static func head(_ bucket: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> {
        atomic(bucket + 8, as: UInt.self)
    }
    @inline(__always) static func token(_ entry: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> {
        atomic(entry, as: UInt.self)
    }
    @inline(__always) static func users(_ entry: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<Int>> {
        atomic(entry + 8, as: Int.self)
    }
    @inline(__always) static func next(_ entry: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt>> {
        atomic(entry + 16, as: UInt.self)
    }
    @inline(__always) static func lock(_ entry: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer { entry + 24 }

    /// The live entry of `token` in `bucket`, with one more user; nil if it has none.
    static func join(_ bucket: UnsafeMutableRawPointer, _ token: UInt) -> UnsafeMutableRawPointer? {
        var cursor = UnsafeMutableRawPointer(bitPattern: head(bucket).pointee.load(ordering: .acquiring))
        while let entry = cursor {
            if self.token(entry).pointee.load(ordering: .relaxed) == token {
                // Acquiring: a caller that finds the entry unused goes on to another entry (and
                // lock) for this token, so it must see the last user's critical section, which
                // that user's leave (a release) ended.
                var count = users(entry).pointee.load(ordering: .acquiring)
                while count > 0 {  // never revive an unused entry: only the bucket's lock may
                    let (exchanged, now) = users(entry).pointee.compareExchange(
                        expected: count, desired: count + 1, ordering: .acquiringAndReleasing)
                    if exchanged { break }
                    count = now
                }
                if count > 0 {
                    if self.token(entry).pointee.load(ordering: .relaxed) == token { return entry }
                    leave(entry)  // reused for another token meanwhile
                }
            }
            cursor = UnsafeMutableRawPointer(bitPattern: next(entry).pointee.load(ordering: .acquiring))
        }
        return nil
    }

    /// An entry for `token` with one user: its live one, else an unused one, else a new one.
    @inline(never)
    static func claim(_ bucket: UnsafeMutableRawPointer, _ token: UInt) -> UnsafeMutableRawPointer {
        let word = atomic(bucket, as: Int32.self)
        LockWord.lock(word, shared: false)
        defer { LockWord.unlock(word, shared: false) }
        if let entry = join(bucket, token) { return entry }
        var cursor = UnsafeMutableRawPointer(bitPattern: head(bucket).pointee.load(ordering: .relaxed))
        while let entry = cursor {
            if users(entry).pointee.load(ordering: .acquiring) == 0 {
                self.token(entry).pointee.store(token, ordering: .relaxed)
                users(entry).pointee.store(1, ordering: .releasing)  // publishes the token
                return entry
            }
            cursor = UnsafeMutableRawPointer(bitPattern: next(entry).pointee.load(ordering: .relaxed))
        }
        let entry = zeroed(64)
        self.token(entry).pointee.store(token, ordering: .relaxed)
        users(entry).pointee.store(1, ordering: .relaxed)
        next(entry).pointee.store(head(bucket).pointee.load(ordering: .relaxed), ordering: .relaxed)
        head(bucket).pointee.store(UInt(bitPattern: entry), ordering: .releasing)
        return entry
    }

    @inline(__always) static func leave(_ entry: UnsafeMutableRawPointer) {
        users(entry).pointee.subtract(1, ordering: .releasing)
    }

    /// Takes the lock of `token` (recursively). 0, ETIMEDOUT, EINTR (interruptible), EAGAIN.
    @usableFromInline package static func enter(_ token: UInt, deadline: Int64 = -1, interruptible: Bool = false) -> Int32 {
        let bucket = bucket(token)
        let entry = join(bucket, token) ?? claim(bucket, token)
        LockOrder.alias(lock(entry), to: token)
        let result = RecursiveWord.lock(lock(entry), deadline: deadline, interruptible: interruptible)
        if result != 0 { leave(entry) }
        return result
    }

    /// Releases the lock of `token` once. 0, or EPERM if the caller does not hold it.
    @usableFromInline package static func exit(_ token: UInt) -> Int32 {
        // The caller's own user count keeps its entry live and on `token`; any other entry
        // found here fails the owner check of RecursiveWord.unlock.
        var cursor = UnsafeMutableRawPointer(bitPattern: head(bucket(token)).pointee.load(ordering: .acquiring))
        while let entry = cursor {
            if self.token(entry).pointee.load(ordering: .relaxed) == token
                && users(entry).pointee.load(ordering: .relaxed) > 0
                && RecursiveWord.depthHeldByCaller(lock(entry)) > 0 {
                let result = RecursiveWord.unlock(lock(entry))
                if result == 0 { leave(entry) }
                return result
            }
            cursor = UnsafeMutableRawPointer(bitPattern: next(entry).pointee.load(ordering: .acquiring))
        }
        return EPERM
    }
}

/// Objective-C's `@synchronized(object) { body }`: runs `body` holding a recursive lock that
/// belongs to `object`'s identity, and releases it even when `body` throws. Lock only on
/// objects you own: anyone else may lock on them too.
@inlinable
public func synchronized<R, E: Error>(_ object: AnyObject, _ body: () throws(E) -> R) throws(E) -> R {
    try withExtendedLifetime(object) { () throws(E) -> R in
        let token = UInt(bitPattern: ObjectIdentifier(object).hashValue)
        let result = SynchronizedTable.enter(token)
        require(result == 0, "synchronized: recursion depth overflow")
        defer { _ = SynchronizedTable.exit(token) }
        return try body()
    }
}
