import Glibc

// The shared/exclusive (read/write) lock on a server: DistributedReadWriteLock for a
// `postgresql://`, `redis://` or `etcd://` URL (the exclusive lock's grammar). Each side is a
// DistributedLock of its own on the side's backend, so that waiting, timeouts, interruptible
// waits, stale-holder recovery, leases and loss notification are the exclusive lock's:
//
//   PostgreSQL  read: pg_advisory_lock_shared(key), write: pg_advisory_lock(key), on the
//               exclusive lock's key (PostgresBackend.swift, `shared`); the server's lock
//               manager queues a new shared request behind a waiting exclusive one (writer
//               preference); the token is nextval of the lock's fencing sequence, taken in the
//               statement that acquires, on both sides
//   Redis       RedisReadWrite.swift
//   etcd        EtcdReadWrite.swift
//
// The read side's object is process-owned and recursive (one read hold per object, re-entered
// by any of its threads, counted); the write side's is recursive and owned by the thread that
// took it (by the process with `.processOwned`). Both release a hold when the object goes away.

final class ServerReadWriteLock: Sendable {
    let reader: DistributedLock
    let writer: DistributedLock

    private init(reader: DistributedLock, writer: DistributedLock) {
        self.reader = reader
        self.writer = writer
    }

    /// Both sides of the lock `url` names, connected: (lock, 0) or (nil, an errno).
    static func make(url: String, processOwned: Bool) -> (ServerReadWriteLock?, Int32) {
        let scheme = url.prefix { $0 != ":" }.lowercased()
        let sides: ((read: any LockBackend, write: any LockBackend)?, Int32)
        switch scheme {
        case "postgresql", "postgres":
            let (made, code) = PostgresBackend.make(url: url)
            if let plain = made as? PostgresBackend {
                var shared = plain
                shared.shared = true
                sides = ((shared, plain), 0)
            } else {
                sides = (nil, code)
            }
        case "redis": sides = RedisReadWriteBackend.make(url: url)
        case "etcd", "etcds": sides = EtcdBackend.makeReadWrite(url: url)
        default:
            return (nil, DistributedLockMessage.fail(EINVAL, "unsupported lock URL scheme '\(scheme)://' for a read/write lock "
                                                     + "(use a path, postgresql://, postgres://, redis://, etcd:// or etcds://)"))
        }
        guard let (read, write) = sides.0 else { return (nil, sides.1) }
        let (reader, readCode) = DistributedLock.make(backend: read, options: [.processOwned, .recursive, .releaseOnDeinit])
        guard let reader else { return (nil, readCode) }
        let (writer, writeCode) = DistributedLock.make(backend: write, options: processOwned ? [.processOwned, .recursive, .releaseOnDeinit]
                                                                                             : [.recursive, .releaseOnDeinit])
        guard let writer else { return (nil, writeCode) }
        return (ServerReadWriteLock(reader: reader, writer: writer), 0)
    }

    var name: String { reader.path }

    /// EDEADLK (with its reason) if the object's state forbids the caller to acquire `wanted`, else nil.
    private func refusal(_ wanted: DistributedReadWriteLock.Kind) -> Int32? {
        if wanted == .read && writer.isHeldInProcess {
            return DistributedLockMessage.fail(EDEADLK, "already holding a write lock (downgrade not allowed)")
        }
        if wanted == .write && reader.isHeldInProcess {
            return DistributedLockMessage.fail(EDEADLK, "already holding a read lock (upgrade not allowed)")
        }
        if wanted == .write && writer.isHeldInProcess && writer.countHeldByCaller() == 0 {
            return DistributedLockMessage.fail(EDEADLK, "the write lock is held by another thread of this object")
        }
        return nil
    }

    private func side(_ kind: DistributedReadWriteLock.Kind) -> DistributedLock { kind == .read ? reader : writer }

    func lockCode(_ wanted: DistributedReadWriteLock.Kind, deadline: Int64, pollNanoseconds: Int64, interruptible: Bool) -> Int32 {
        DistributedLockMessage.clear()
        if pollNanoseconds <= 0 { return EINVAL }
        if let refused = refusal(wanted) { return refused }
        let code = side(wanted).lockCode(deadline: deadline, pollNanoseconds: pollNanoseconds, interrupts: interruptible ? .sliced : .retried)
        if code != 0 && code != EINTR && wanted == .write { cancel() }
        return code
    }

    func tryLockCode(_ wanted: DistributedReadWriteLock.Kind) -> Int32 {
        DistributedLockMessage.clear()
        if let refused = refusal(wanted) { return refused }
        let code = side(wanted).tryLockCode()
        if code != 0 && wanted == .write { cancel() }
        return code
    }

    /// Withdraws a write wait's claim kept in the store (an interrupted wait's; Redis: the writer's
    /// claim in W): `isHeldByCaller` withdraws it while the object neither holds nor waits.
    func cancel() { _ = writer.isHeldByCaller() }

    func unlockCode(all: Bool) -> Int32 {
        DistributedLockMessage.clear()
        for side in [writer, reader] where side.countHeldByCaller() > 0 {
            return all ? side.unlockAllCode() : side.unlockCode()
        }
        return DistributedLockMessage.fail(EPERM, "the caller holds no read or write lock on \(name) through this object "
                                           + "(a release by a non-holder)")
    }

    var state: (kind: DistributedReadWriteLock.Kind?, count: Int) {
        if writer.isHeldInProcess { return (.write, writer.depthInProcess) }
        if reader.isHeldInProcess { return (.read, reader.depthInProcess) }
        return (nil, 0)
    }

    func tokenCode() -> (UInt64, Int32) {
        let (token, code) = writer.tokenCode()
        return code == 0 ? (token, 0) : reader.tokenCode()
    }

    func breakCode() -> Int32 { writer.breakLockCode() }

    /// The state of the object's latest hold (`DistributedLock.holdStateCode`), of the side held
    /// last.
    func holdStateCode() -> Int32 {
        let (w, r) = (writer.holdStateCode(), reader.holdStateCode())
        if writer.isHeldInProcess { return w }
        if reader.isHeldInProcess { return r }
        return max(w, r)
    }

    func setEventHandler(_ handler: (@Sendable (DistributedLockEvent) -> Void)?) {
        var forward: DistributedLock.EventHandler?
        if let handler { forward = { _, event in handler(event) } }
        reader.setEventHandler(forward)
        writer.setEventHandler(forward)
    }
}
