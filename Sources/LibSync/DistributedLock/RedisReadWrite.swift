import Glibc

// The Redis backend's shared/exclusive (read/write) lock: many readers or one writer,
// writer-preferring, every holder on a lease, fencing tokens from one counter for both sides.
// The lock NAME has three keys (the `libsync:rw:` prefix keeps them apart from the exclusive
// lock's `libsync:lock:NAME` and from an application's keys):
//
//   W = libsync:rw:NAME:writer   the writer's entry, with a time to live (the lease): the writer
//                                that holds the lock, or the one that waits for the readers to
//                                leave (its claim)
//   R = libsync:rw:NAME:readers  a sorted set: one member per reader, its entry, scored by when
//                                its lease ends (the server's clock, ms); every read acquire and
//                                renewal sets the key's own time to live to the lease, so it
//                                outlives every member's lease (the latest of those steps set it)
//   F = libsync:rw:NAME:fence    the fencing counter of both sides
//
// Every step is one Lua script (atomic on the server):
//
//   read acquire   if W exists (a writer holds or waits): busy. Else drop the members of R whose
//                  lease ended, add mine (lease from now), and draw the token
//                  F := max(F + 1, server time in µs)                      one round trip
//   write acquire  if W holds another writer's entry: busy. Else W := mine (a claim, with a
//                  lease), drop the members of R whose lease ended; if R has members, busy (the
//                  claim stays: new readers wait behind it, so readers cannot starve the
//                  writer); else draw the token: held                      one round trip
//                  A writer that gives up its wait deletes its claim (if still its own).
//   renew          every ttl/3, by the process's lease renewer (as the exclusive lock's): W's
//                  time to live (if still mine), or my member's score (if its lease has not
//                  ended); one that finds its lease gone reports the hold lost
//   read release   ZREM my member: released if it was there (a member whose lease ended but
//                  that nobody removed yet never let a writer in: every acquire removes those
//                  first), else ESTALE (its lease ended and it was removed, or it was broken)
//   write release  delete W if it is still mine (else ESTALE, or EBUSY if another writer has it)
//   recovery       a holder's lease ends within ttl + ttl/3 after it dies and is then ignored (a
//                  writer's claim or hold by expiry, a reader's member by the next acquirer's
//                  clean-up); on this host a dead holder's entry (its process is gone) is
//                  removed at once by the next acquirer that finds the lock busy
//   break          delete W and R
//
// Token order: F only grows; a writer draws its token when no reader's lease runs, so after
// every reader that held before it drew theirs; a reader draws only while no writer holds or
// waits, so after every writer before it released.

enum RedisReadWriteScripts {
    /// KEYS: W, R, F, the entry's abandon marker; ARGV: entry, lease ms. The token; 0 abandoned;
    /// -1 a writer holds or waits.
    static let readAcquire = """
        if redis.call('exists', KEYS[4]) == 1 then return 0 end
        if redis.call('exists', KEYS[1]) == 1 then return -1 end
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local lease = tonumber(ARGV[2])
        redis.call('zremrangebyscore', KEYS[2], '-inf', now)
        redis.call('zadd', KEYS[2], now + lease, ARGV[1])
        redis.call('pexpire', KEYS[2], lease)
        local token = math.max(tonumber(redis.call('get', KEYS[3]) or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
        redis.call('set', KEYS[3], string.format('%.0f', token))
        return token
        """
    /// KEYS: W, R, F, the entry's abandon marker; ARGV: entry, lease ms. The token; 0 another
    /// writer holds or waits (or abandoned); -1 claimed, readers hold it.
    static let writeAcquire = """
        if redis.call('exists', KEYS[4]) == 1 then return 0 end
        local w = redis.call('get', KEYS[1])
        if w and w ~= ARGV[1] then return 0 end
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        redis.call('zremrangebyscore', KEYS[2], '-inf', now)
        if redis.call('zcard', KEYS[2]) > 0 then return -1 end
        local token = math.max(tonumber(redis.call('get', KEYS[3]) or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
        redis.call('set', KEYS[3], string.format('%.0f', token))
        return token
        """
    /// KEYS: R; ARGV: entry, lease ms. 1 renewed, 0 lost (its lease had ended).
    static let renewShare = """
        local s = redis.call('zscore', KEYS[1], ARGV[1])
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        if not s then return 0 end
        if tonumber(s) < now then redis.call('zrem', KEYS[1], ARGV[1]) return 0 end
        local lease = tonumber(ARGV[2])
        redis.call('zadd', KEYS[1], 'XX', now + lease, ARGV[1])
        redis.call('pexpire', KEYS[1], lease)
        return 1
        """
    /// KEYS: R; ARGV: entry. 1 if its lease runs, else 0.
    static let holdsShare = """
        local s = redis.call('zscore', KEYS[1], ARGV[1])
        local t = redis.call('time')
        if s and tonumber(s) >= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 1 end
        return 0
        """
    /// KEYS: R, the entry's abandon marker; ARGV: entry, the marker's life in ms. Cancels a read
    /// acquisition whose answer never came (as RedisScripts.cancel). 1.
    static let cancelShare = """
        redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
        redis.call('zrem', KEYS[1], ARGV[1])
        return 1
        """
    /// KEYS: W, R. {W's entry or '', the readers' entries}.
    static let holders = """
        return {redis.call('get', KEYS[1]) or '', redis.call('zrange', KEYS[2], 0, -1)}
        """
    /// KEYS: W, R; ARGV: stale entries. Removes each from W (if it is there) and R; the count removed.
    static let removeStale = """
        local n = 0
        for _, e in ipairs(ARGV) do
          if redis.call('get', KEYS[1]) == e then redis.call('del', KEYS[1]) n = n + 1 end
          n = n + redis.call('zrem', KEYS[2], e)
        end
        return n
        """
}

/// One side of a Redis read/write lock: `base` is the lock's Redis backend with `key` W and
/// `fenceKey` F (see the top of this file).
struct RedisReadWriteBackend: LockBackend {
    let base: RedisBackend
    /// R, the readers' sorted set.
    let shares: String
    /// The read side (else the write side).
    let reading: Bool
    var name: String { base.name }
    var waitsInStore: Bool { false }
    var firstPollNanoseconds: Int64? { 1_000_000 }

    /// Both sides of the lock the Redis URL `url` names (the exclusive lock's grammar).
    static func make(url: String) -> ((read: any LockBackend, write: any LockBackend)?, Int32) {
        let (made, code) = RedisBackend.make(url: url)
        guard let plain = made as? RedisBackend else { return (nil, code) }
        let name = String(plain.key.dropFirst("libsync:lock:".count))
        let base = RedisBackend(name: plain.name, address: plain.address, key: "libsync:rw:" + name + ":writer",
                                fenceKey: "libsync:rw:" + name + ":fence", ttlMilliseconds: plain.ttlMilliseconds, hiredis: plain.hiredis)
        let shares = "libsync:rw:" + name + ":readers"
        return ((RedisReadWriteBackend(base: base, shares: shares, reading: true),
                 RedisReadWriteBackend(base: base, shares: shares, reading: false)), 0)
    }

    func makeSession(_ me: ProcessIdentity) -> any LockSession { RedisReadWriteSession(self, me) }
}

final class RedisReadWriteSession: LockSession {
    private let backend: RedisReadWriteBackend
    private var base: RedisBackend { backend.base }
    private let me: ProcessIdentity
    private let connection: RedisConnection
    private let leaseID = ProcessIdentity.nextSerial()
    private lazy var renewer = LeaseRenewers.process.current().renewer(for: base.address, base.hiredis)
    /// The entry of this session's hold, while it holds the lock.
    private var entry: String?
    /// A writer's claim in W while it waits for readers (kept from one try to the next).
    private var claim: String?
    var token: UInt64 = 0

    init(_ backend: RedisReadWriteBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
        connection = RedisConnection(backend.base.hiredis, backend.base.address)
    }

    private var ioDeadline: Int64 { Deadline.after(nanoseconds: base.address.ioTimeout) }
    private var side: String { backend.reading ? "read" : "write" }

    private func lease(_ entry: String) -> Lease {
        Lease(backend: base, entry: entry, shares: backend.reading ? backend.shares : nil)
    }

    private func failure(_ fault: RedisConnection.Fault, _ doing: String, deadline: Int64 = -1) -> Int32 {
        if fault.code == ETIMEDOUT && !Deadline.hasPassed(deadline) {
            return DistributedLockMessage.fail(EIO, "\(doing): \(fault.message) (within connect_timeout)")
        }
        return DistributedLockMessage.fail(fault.code, "\(doing): \(fault.message)")
    }

    func open() -> Int32 { connection.connect(deadline: -1) }

    func tryAcquire(deadline: Int64) -> Int32 {
        let answerBy = Deadline.hasPassed(deadline) ? ioDeadline : Deadline.earliest(deadline, ioDeadline)
        let mine = claim ?? me.newEntry()
        var retried = false
        while true {
            let script = backend.reading ? RedisReadWriteScripts.readAcquire : RedisReadWriteScripts.writeAcquire
            switch connection.eval(script, keys: [base.key, backend.shares, base.fenceKey, base.abandonedKey(mine)],
                                   arguments: [mine, String(base.leaseMilliseconds)], deadline: answerBy) {
            case .success(.integer(let drawn)) where drawn > 0:
                (entry, claim, token) = (mine, nil, UInt64(drawn))
                renewer.add(lease(mine), for: leaseID, since: connection.lastSent)
                return 0
            case .success(.integer(let result)):
                if !backend.reading && result == -1 { claim = mine }  // claimed: the readers are leaving
                return EBUSY
            case .success(let other): return DistributedLockMessage.fail(EIO, "\(side) acquire: \(connection.server) answered \(other)")
            case .failure(let fault) where fault.code == EIO && !retried:
                retried = true  // an old connection broke: once more (the same entry: idempotent)
            case .failure(let fault):
                if [ETIMEDOUT, EIO, EINTR].contains(fault.code) { renewer.abandon(lease(mine)) }
                claim = nil
                return failure(fault, "\(side) acquire", deadline: deadline)
            }
        }
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 { EINVAL }  // (polled: never called)

    /// Deletes a waiting writer's claim (if it is still its own), or has the renewer do it.
    func withdrawWait() {
        guard let mine = claim else { return }
        claim = nil
        let outcome = connection.eval(RedisScripts.release, keys: [base.key], arguments: [mine], deadline: ioDeadline)
        if case .success(.integer) = outcome { return }
        renewer.abandon(lease(mine))
    }

    func release() -> Int32 {
        guard let mine = entry else { return EPERM }
        let outcome = backend.reading
            ? connection.run(["ZREM", backend.shares, mine], deadline: ioDeadline)
            : connection.eval(RedisScripts.release, keys: [base.key], arguments: [mine], deadline: ioDeadline)
        switch outcome {
        case .success(.integer(let result)):
            entry = nil
            renewer.remove(leaseID)
            if result == 1 { return 0 }
            return DistributedLockMessage.fail(result == 2 ? EBUSY : ESTALE,
                "the \(side) hold on \(base.name) was lost: its lease ended (expired, broken, or the server lost it)"
                + (result == 2 ? ", and another writer has it now" : ""))
        case .success(let other): return DistributedLockMessage.fail(EIO, "release: \(connection.server) answered \(other)")
        case .failure(let fault): return failure(fault, "release")  // still held (renewed): a retry may work
        }
    }

    /// The writer's entry (nil: none) and the readers' entries: (writer, readers, 0) or an errno.
    private func holders(_ doing: String, deadline: Int64 = -1) -> (String?, [String], Int32) {
        switch connection.eval(RedisReadWriteScripts.holders, keys: [base.key, backend.shares], arguments: [],
                               deadline: Deadline.earliest(deadline, ioDeadline)) {
        case .success(.array(let parts)) where parts.count == 2:
            var writer: String?
            if case .string(let w) = parts[0], !w.isEmpty { writer = w }
            var readers: [String] = []
            if case .array(let items) = parts[1] {
                for case .string(let r) in items { readers.append(r) }
            }
            return (writer, readers, 0)
        case .success(let other): return (nil, [], DistributedLockMessage.fail(EIO, "\(doing): \(connection.server) answered \(other)"))
        case .failure(let fault): return (nil, [], failure(fault, doing, deadline: deadline))
        }
    }

    /// Removes the entries of dead holders on this host: ENOENT (some removed: try again),
    /// EBUSY (none), or an errno. Never takes the lock itself.
    func recoverStale(deadline: Int64) -> Int32 {
        let (writer, readers, code) = holders("recover", deadline: deadline)
        if code != 0 { return code }
        let stale = ([writer].compactMap { $0 } + readers).filter { $0 != claim && $0 != entry && me.isStale(entry: $0) }
        if stale.isEmpty { return writer == nil && readers.isEmpty ? ENOENT : EBUSY }
        switch connection.eval(RedisReadWriteScripts.removeStale, keys: [base.key, backend.shares], arguments: stale,
                               deadline: Deadline.earliest(deadline, ioDeadline)) {
        case .success(.integer): return ENOENT
        case .success(let other): return DistributedLockMessage.fail(EIO, "recover: \(connection.server) answered \(other)")
        case .failure(let fault): return failure(fault, "recover", deadline: deadline)
        }
    }

    func breakLock() -> Int32 {
        switch connection.run(["DEL", base.key, backend.shares], deadline: ioDeadline) {
        case .success(.error(let message)): return DistributedLockMessage.fail(EIO, "break: \(message)")
        case .success: return 0
        case .failure(let fault): return failure(fault, "break")
        }
    }

    /// The writer if one holds or waits, else the first reader.
    func holder() -> (DistributedLockHolder?, Int32) {
        let (writer, readers, code) = holders("holder")
        guard let holding = writer ?? readers.first else { return (nil, code) }
        guard let parsed = parseEntry(holding) else {
            return (DistributedLockHolder(host: "(not a libsync holder: '\(holding)')", pid: 0, processStart: 0, acquired: .zero,
                                          isOnThisHost: false, isStale: false), 0)
        }
        return (me.holder(parsed, entry: holding), 0)
    }

    func holds() -> Bool {
        guard let mine = entry else { return false }
        if backend.reading {
            let outcome = connection.eval(RedisReadWriteScripts.holdsShare, keys: [backend.shares], arguments: [mine], deadline: ioDeadline)
            if case .success(.integer(1)) = outcome { return true }
            return false
        }
        if case .success(.string(let value)) = connection.run(["GET", base.key], deadline: ioDeadline) { return value == mine }
        return false
    }

    func close(releasing: Bool) {
        if entry != nil && releasing { _ = release() }
        withdrawWait()
    }

    func watch(_ ticket: HoldTicket) {
        if let entry { renewer.watch(leaseID, entry: entry, ticket) }
    }
}
