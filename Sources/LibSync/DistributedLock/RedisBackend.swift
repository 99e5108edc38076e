import Glibc
import Synchronization

// The Redis backend: a lease. The lock NAME is the key `libsync:lock:NAME`, whose value is the
// holder's entry (`<pid>.<start>.<acquired>.<serial>.<machine>@<host>`, as the file backend's:
// unique to one acquisition), set with a time to live; its fencing counter is the key
// `libsync:fence:NAME` (the prefixes keep every lock's keys apart from every other lock's, and
// from an application's own keys). Below, LOCK and FENCE are these two keys.
//
//   acquire   EVALSHA: SET LOCK entry NX PX lease (or the key already holds this entry: a
//             retry whose first answer was lost), and if set, FENCE := max(last + 1, server
//             time in µs), returned as the token                                one round trip;
//             an answer read ttl or more after its request was sent (a pause, a slow server)
//             is refused: the lease may be gone or about to go, so it is released and tried
//             once more
//   release   EVALSHA: if GET LOCK == entry then DEL (0), else the lease was lost: ESTALE if
//             the key is gone, EBUSY if another entry is there                   one round trip
//   renew     one thread per server and process renews that server's held leases (PEXPIRE lease
//             if the value is still its entry) every ttl/3, over a connection of its own, so that
//             a stalled server delays no other server's renewals; a lease it finds gone is
//             dropped and its holder told (`LeaseRenewer.leaseRenewed`: HoldLoss.swift), as
//             it is at release (ESTALE/EBUSY) or is_held
//   recover   EVALSHA: if GET LOCK == the stale entry (a holder on this host whose process is
//             gone), SET LOCK my entry, and a new token
//   break     DEL LOCK
//
// Waiting polls with backoff (1 ms, doubling, up to the poll interval): a lease can end by
// expiry, which Redis announces only through keyspace notifications, which are off by default
// and would need a server setting; polling needs nothing from the server, and the backoff keeps
// an idle wait to a few requests per second.
//
// The lease on the server is ttl + ttl/3 (`leaseMilliseconds`), timed from before the request
// that set it was sent, and renewed every ttl/3 (`renewalNanoseconds`), also timed from before
// each renewal is sent. So a holder stopped for less than ttl keeps the lock, even if it stopped
// just before a renewal was due (its renewal, sent when it resumes, still finds the lease), and
// a holder that dies (elsewhere: on its own host it is stale and taken over at once) leaves the
// lock held for ttl to ttl + ttl/3.
//
// A lease is only as good as the clocks: a holder paused for ttl or longer (GC, SIGSTOP, a VM
// migration) may lose the lock without knowing until it asks; the fencing token is the defence. The
// token is max(last + 1, server time): strictly increasing while the counter key lives, and still
// increasing if Redis lost it (a restart without persistence), unless the server's clock went back.

/// hiredis (hiredis.h), loaded on first use. The layouts of `redisContext` and `redisReply`
/// differ between 0.14 (Debian 12) and 1.x (Debian 13): the soname loaded says which.
struct Hiredis: @unchecked Sendable {
    let connectNonBlock: @convention(c) (UnsafePointer<CChar>?, Int32) -> OpaquePointer?
    let enableKeepAlive: @convention(c) (OpaquePointer?) -> Int32
    let formatCommandArgv: @convention(c) (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int>?) -> Int32
    let freeCommand: @convention(c) (UnsafeMutablePointer<CChar>?) -> Void
    let bufferRead: @convention(c) (OpaquePointer?) -> Int32
    let getReplyFromReader: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32
    let freeReply: @convention(c) (UnsafeMutableRawPointer?) -> Void
    let free: @convention(c) (OpaquePointer?) -> Void
    /// 1.x's layouts (else 0.14's).
    let isVersion1: Bool

    static let packages = "`apt install libhiredis0.14` (Debian 12) or `apt install libhiredis1.1.0` (Debian 13)"

    /// hiredis, or why it cannot be loaded (naming the Debian package). LIBSYNC_HIREDIS names
    /// another file to load instead (a 1.x one if its name contains ".so.1").
    static let loaded: (Hiredis?, String) = {
        let (library, why) = ClientLibrary.open(["libhiredis.so.0.14", "libhiredis.so.1.1.0", "libhiredis.so.1.0.0"], override: "LIBSYNC_HIREDIS")
        guard let library else {
            return (nil, "hiredis, Redis's C client library, cannot be loaded (\(why)): install it with \(packages)")
        }
        typealias Connect = @convention(c) (UnsafePointer<CChar>?, Int32) -> OpaquePointer?
        typealias Context = @convention(c) (OpaquePointer?) -> Int32
        typealias Format = @convention(c) (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int>?) -> Int32
        typealias FreeCommand = @convention(c) (UnsafeMutablePointer<CChar>?) -> Void
        typealias GetReply = @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32
        typealias FreeReply = @convention(c) (UnsafeMutableRawPointer?) -> Void
        typealias Free = @convention(c) (OpaquePointer?) -> Void
        guard let connect = library.function("redisConnectNonBlock", Connect.self),
              let keepAlive = library.function("redisEnableKeepAlive", Context.self),
              let format = library.function("redisFormatCommandArgv", Format.self),
              let freeCommand = library.function("redisFreeCommand", FreeCommand.self),
              let bufferRead = library.function("redisBufferRead", Context.self),
              let getReply = library.function("redisGetReplyFromReader", GetReply.self),
              let freeReply = library.function("freeReplyObject", FreeReply.self),
              let free = library.function("redisFree", Free.self)
        else { return (nil, "\(library.soname) lacks a hiredis function libsync needs: install \(packages)") }
        return (Hiredis(connectNonBlock: connect, enableKeepAlive: keepAlive, formatCommandArgv: format, freeCommand: freeCommand,
                        bufferRead: bufferRead, getReplyFromReader: getReply, freeReply: freeReply, free: free,
                        isVersion1: library.soname.contains(".so.1")), "")
    }()

    // redisContext: (1.x: a function table pointer first) int err; char errstr[128]; int fd.
    func socket(_ context: OpaquePointer) -> Int32 {
        (UnsafeRawPointer(context) + (isVersion1 ? 8 : 0) + 4 + 128).load(as: Int32.self)
    }

    func error(_ context: OpaquePointer) -> (code: Int32, text: String) {
        let base = UnsafeRawPointer(context) + (isVersion1 ? 8 : 0)
        let code = base.load(as: Int32.self)
        let text = String(cString: (base + 4).assumingMemoryBound(to: CChar.self))
        return (code, text)
    }

    // redisReply: int type; long long integer; (1.x: double dval;) size_t len; char *str;
    // (1.x: char vtype[4];) size_t elements; redisReply **element.
    func reply(_ pointer: UnsafeRawPointer) -> RedisReply {
        let type = pointer.load(as: Int32.self)
        let integer = pointer.load(fromByteOffset: 8, as: Int64.self)
        let length = pointer.load(fromByteOffset: isVersion1 ? 24 : 16, as: Int.self)
        let string = pointer.load(fromByteOffset: isVersion1 ? 32 : 24, as: UnsafePointer<UInt8>?.self)
        let count = pointer.load(fromByteOffset: isVersion1 ? 48 : 32, as: Int.self)
        let elements = pointer.load(fromByteOffset: isVersion1 ? 56 : 40, as: UnsafePointer<UnsafeRawPointer>?.self)
        let text = string.map { String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self) } ?? ""
        switch type {
        case 1, 5: return .string(text)
        case 2: return .array((0..<count).map { reply(elements![$0]) })
        case 3: return .integer(integer)
        case 6: return .error(text)
        default: return .null
        }
    }
}

enum RedisReply: Equatable {
    case string(String), integer(Int64), array([RedisReply]), error(String), null
}

/// Where a Redis server is, and how to log in.
struct RedisAddress: Hashable, Sendable {
    let host: String, port: Int32, database: Int, user: String?, password: String?
    /// The connect and answer timeout.
    let ioTimeout: Int64
}

/// One connection to a Redis server (not thread-safe: its owner serializes its use). Its socket
/// is non-blocking, and every wait for the server (connecting, sending, the reply) is a poll
/// until a monotonic deadline: a signal handler never restarts a wait's time, and inside an
/// interruptible call (`InterruptibleCall`) a signal handler ends the wait with EINTR.
final class RedisConnection {
    private let hiredis: Hiredis
    private let address: RedisAddress
    private var context: OpaquePointer?
    private var scripts: [String: String] = [:]  // script -> its SHA1 on the server
    /// When the last request began to be sent (monotonic ns): whatever it set on the server
    /// (a lease) was set no earlier.
    private(set) var lastSent: Int64 = 0

    init(_ hiredis: Hiredis, _ address: RedisAddress) {
        self.hiredis = hiredis
        self.address = address
    }

    deinit { disconnect() }

    var server: String { "the Redis server at \(address.host):\(address.port)" }

    private func disconnect() {
        if let context { hiredis.free(context) }
        context = nil
        scripts = [:]
    }

    /// When an exchange started now with `deadline` (monotonic ns, < 0: none) must be answered:
    /// by the deadline or within connect_timeout, whichever is sooner; one started with the
    /// deadline passed (a call's one try when it had no time left: a wait never makes another)
    /// within connect_timeout, as try_lock's, so that it takes a free lock on a loaded server too.
    private func answerBy(_ deadline: Int64) -> Int64 {
        let now = monotonicNow()
        return Deadline.hasPassed(deadline, now: now) ? now + address.ioTimeout : Deadline.earliest(deadline, now + address.ioTimeout)
    }

    /// Connects unless connected, by `deadline` (monotonic ns, < 0: none) or within
    /// connect_timeout, whichever is sooner (login included): 0; ECONNREFUSED (refused, or no
    /// answer within connect_timeout); ETIMEDOUT (`deadline` passed first); EINTR (a signal
    /// handler ran during an interruptible call); EACCES, EINVAL (the server refused the login
    /// or the database); EIO; ENOMEM.
    func connect(deadline: Int64) -> Int32 {
        if context != nil { return 0 }
        let limit = answerBy(deadline)
        guard let made = hiredis.connectNonBlock(address.host, address.port) else {
            return DistributedLockMessage.fail(ENOMEM, "out of memory connecting to \(server)")
        }
        let (code, text) = hiredis.error(made)
        if code != 0 {
            hiredis.free(made)
            return DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server): \(text)")
        }
        let fd = hiredis.socket(made)
        let ready = waitForSocket(fd, writable: true, deadline: limit, interruptible: InterruptibleCall.isActive)
        var refused: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        if ready == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &refused, &size) != 0 { refused = errno }
        if ready != 0 || refused != 0 {
            hiredis.free(made)
            if ready == EINTR { return DistributedLockMessage.fail(EINTR, "interrupted connecting to \(server)") }
            if ready == ETIMEDOUT { return unanswered(deadline) }
            return DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server): \(String(cString: strerror(ready != 0 ? ready : refused)))")
        }
        context = made
        _ = hiredis.enableKeepAlive(made)
        var login: [[String]] = []
        if let password = address.password { login.append(["AUTH"] + (address.user.map { [$0] } ?? []) + [password]) }
        if address.database != 0 { login.append(["SELECT", String(address.database)]) }
        // At least one round trip, so that a server that wants a password refuses now (NOAUTH).
        if login.isEmpty { login.append(["PING"]) }
        for command in login {
            switch run(command, deadline: limit) {
            case .success(.error(let message)):
                disconnect()
                if message.contains("NOAUTH") {
                    return DistributedLockMessage.fail(EACCES, "\(server) wants a password, which the URL does not give "
                                                       + "(redis://[user]:PASSWORD@host...): \(message)")
                }
                let denied = ["WRONGPASS", "invalid password", "invalid username", "NOPERM"].contains { message.contains($0) }
                return DistributedLockMessage.fail(denied ? EACCES : EINVAL, "\(server) refused \(command[0]): \(message)")
            case .success: continue
            case .failure(let fault):
                if fault.code == ETIMEDOUT { return unanswered(deadline) }
                return DistributedLockMessage.fail(fault.code, fault.message)
            }
        }
        return 0
    }

    /// A connect that got no answer in time: ETIMEDOUT once `deadline` passed, else ECONNREFUSED.
    private func unanswered(_ deadline: Int64) -> Int32 {
        Deadline.hasPassed(deadline)
            ? DistributedLockMessage.fail(ETIMEDOUT, "\(server) did not answer in time (connecting)")
            : DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server): no answer within connect_timeout")
    }

    struct Fault: Error { let code: Int32, message: String }

    /// Sends `arguments` and reads the reply by `deadline` (monotonic ns, < 0: none) or within
    /// connect_timeout, whichever is sooner (connecting first if need be). A failed exchange
    /// closes the connection (a late answer is never taken for the next request's): no answer
    /// in time (ETIMEDOUT), a signal handler ran during an interruptible call (EINTR), a broken
    /// connection (EIO), or connect's errno. After ETIMEDOUT or EINTR the request may still
    /// reach the server.
    func run(_ arguments: [String], deadline: Int64) -> Result<RedisReply, Fault> {
        let by = answerBy(deadline)
        let connected = connect(deadline: by)
        if connected != 0 { return .failure(Fault(code: connected, message: DistributedLockMessage.detail ?? "cannot connect")) }
        let interruptible = InterruptibleCall.isActive
        // The command is sent with send(MSG_NOSIGNAL), never hiredis's write(), so that a server
        // that closed the connection cannot raise SIGPIPE; hiredis reads and parses the reply.
        // Each argument is passed as its exact UTF-8 bytes and length (never as a C string, which
        // a NUL byte would cut short of the length given).
        let lengths = arguments.map { $0.utf8.count }
        let bytes = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, lengths.reduce(0, +)))
        defer { bytes.deallocate() }
        var pointers: [UnsafePointer<CChar>?] = []
        pointers.reserveCapacity(arguments.count)
        var offset = 0
        for argument in arguments {
            pointers.append(UnsafePointer(bytes + offset))
            for byte in argument.utf8 {
                bytes[offset] = CChar(bitPattern: byte)
                offset += 1
            }
        }
        var command: UnsafeMutablePointer<CChar>?
        let length = hiredis.formatCommandArgv(&command, Int32(arguments.count), &pointers, lengths)
        guard length > 0, let command else { return .failure(Fault(code: ENOMEM, message: "out of memory")) }
        defer { hiredis.freeCommand(command) }
        var sent = 0
        let fd = hiredis.socket(context!)
        lastSent = monotonicNow()
        while sent < Int(length) {
            let n = send(fd, command + sent, Int(length) - sent, Int32(MSG_NOSIGNAL))
            if n > 0 { sent += n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                let ready = waitForSocket(fd, writable: true, deadline: by, interruptible: interruptible)
                if ready != 0 { return unanswered(ready) }
                continue
            }
            return broken(n < 0 ? String(cString: strerror(errno)) : "closed")
        }
        // What has come is parsed first (reading never blocks), so an answer already there is
        // taken however little time is left; then the socket is polled until `by`.
        var answer: UnsafeMutableRawPointer?
        while true {
            if hiredis.bufferRead(context) != 0 || hiredis.getReplyFromReader(context, &answer) != 0 {
                return broken(context.map { hiredis.error($0).text } ?? "not connected")
            }
            if answer != nil { break }
            let ready = waitForSocket(fd, deadline: by, interruptible: interruptible)
            if ready != 0 { return unanswered(ready) }
        }
        defer { hiredis.freeReply(answer) }
        return .success(hiredis.reply(answer!))
    }

    /// An exchange whose wait for the server ended (`waitForSocket`'s code) without an answer.
    private func unanswered(_ code: Int32) -> Result<RedisReply, Fault> {
        switch code {
        case ETIMEDOUT:
            disconnect()
            return .failure(Fault(code: ETIMEDOUT, message: "\(server) did not answer in time"))
        case EINTR:
            disconnect()
            return .failure(Fault(code: EINTR, message: "interrupted waiting for \(server)"))
        default: return broken(String(cString: strerror(code)))
        }
    }

    private func broken(_ text: String) -> Result<RedisReply, Fault> {
        disconnect()
        return .failure(Fault(code: EIO, message: "the connection to \(server) broke: \(text)"))
    }

    /// Runs a Lua script (by its SHA1 once loaded).
    func eval(_ script: String, keys: [String], arguments: [String], deadline: Int64) -> Result<RedisReply, Fault> {
        for _ in 0..<2 {
            if scripts[script] == nil {
                switch run(["SCRIPT", "LOAD", script], deadline: deadline) {
                case .success(.string(let sha)): scripts[script] = sha
                case .success(let other): return .failure(Fault(code: EIO, message: "\(server) refused a script: \(other)"))
                case .failure(let fault): return .failure(fault)
                }
            }
            let outcome = run(["EVALSHA", scripts[script]!, String(keys.count)] + keys + arguments, deadline: deadline)
            if case .success(.error(let message)) = outcome, message.hasPrefix("NOSCRIPT") {
                scripts[script] = nil  // the server restarted or flushed its scripts
                continue
            }
            return outcome
        }
        return .failure(Fault(code: EIO, message: "\(server) keeps forgetting libsync's scripts"))
    }
}

enum RedisScripts {
    /// KEYS: lock, fence, the entry's abandon marker; ARGV: entry, lease ms. The token, or 0 if
    /// held or abandoned. (Held by the entry already, it is a retry of an acquisition whose
    /// answer was lost: acquired.)
    static let acquire = """
        if redis.call('exists', KEYS[3]) == 1 then return 0 end
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) or
           (redis.call('get', KEYS[1]) == ARGV[1] and redis.call('pexpire', KEYS[1], ARGV[2]) == 1) then
          local t = redis.call('time')
          local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
          redis.call('set', KEYS[2], string.format('%.0f', token))
          return token
        end
        return 0
        """
    /// KEYS: lock; ARGV: entry. 1 released, 0 gone, 2 another holds it.
    static let release = """
        local v = redis.call('get', KEYS[1])
        if v == ARGV[1] then redis.call('del', KEYS[1]) return 1 elseif v then return 2 else return 0 end
        """
    /// KEYS: lock; ARGV: entry, lease ms. 1 renewed, 0 lost.
    static let renew = """
        if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
        """
    /// KEYS: lock, fence, the new entry's abandon marker; ARGV: stale entry, new entry, lease ms.
    /// The token; -1 another holds it (or the new entry was abandoned), -2 free.
    static let takeOver = """
        if redis.call('exists', KEYS[3]) == 1 then return -1 end
        local v = redis.call('get', KEYS[1])
        if v == ARGV[1] then
          redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
          local t = redis.call('time')
          local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
          redis.call('set', KEYS[2], string.format('%.0f', token))
          return token
        elseif v then return -1 else return -2 end
        """
    /// KEYS: lock, the entry's abandon marker; ARGV: entry, the marker's life in ms. Cancels an
    /// acquisition by the entry whose answer never came: the marker makes its request a no-op if
    /// it reaches the server later, and the lock is deleted if the request took it. 1.
    static let cancel = """
        redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
        if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
        return 1
        """
}

struct RedisBackend: LockBackend {
    let name: String
    let address: RedisAddress
    /// The lock's key, `libsync:lock:NAME`, and its fencing counter's, `libsync:fence:NAME`.
    let key: String, fenceKey: String
    /// The ttl the URL gives: a holder stopped for less than this keeps the lock.
    let ttlMilliseconds: Int64
    let hiredis: Hiredis
    /// How often a held lease is renewed: every ttl/3.
    var renewalNanoseconds: Int64 { ttlMilliseconds * 1_000_000 / 3 }
    /// The lease set on the server: ttl plus a renewal interval (rounded up), so that a holder
    /// that stops just before a renewal is due and resumes less than ttl later still renews it.
    var leaseMilliseconds: Int64 { ttlMilliseconds + (ttlMilliseconds + 2) / 3 }
    /// The key that marks an acquisition by `entry` as abandoned (RedisScripts.cancel).
    func abandonedKey(_ entry: String) -> String { "libsync:abandoned:" + entry }
    /// How long an abandon marker lives: an abandoned request that reaches the server later
    /// than this could still take the lock, for one lease.
    var abandonedMilliseconds: Int64 { leaseMilliseconds + 60_000 }
    var waitsInStore: Bool { false }
    var firstPollNanoseconds: Int64? { 1_000_000 }

    /// `redis://[[user]:password@]host[:port][/db]?lock=NAME[&ttl=S][&connect_timeout=S]`.
    static func make(url: String) -> ((any LockBackend)?, Int32) {
        let shown = LockURL.redacted(url)
        let (parsed, why) = LockURL.parse(url)
        guard let parsed else { return (nil, DistributedLockMessage.fail(EINVAL, "bad Redis URL '\(shown)': \(why)")) }
        guard let name = parsed.value("lock"), !name.isEmpty else {
            return (nil, DistributedLockMessage.fail(EINVAL, "the Redis URL '\(shown)' names no lock: add ?lock=NAME"))
        }
        for parameter in parsed.query where !["lock", "ttl", "connect_timeout"].contains(parameter.name) {
            return (nil, DistributedLockMessage.fail(EINVAL, "unknown parameter '\(parameter.name)' in the Redis URL '\(shown)' (known: lock, ttl, connect_timeout)"))
        }
        var ttl: Int64 = 10_000_000_000, timeout: Int64 = 5_000_000_000
        if let text = parsed.value("ttl") {
            guard let value = secondsParameter(text, 0.1...86_400) else {
                return (nil, DistributedLockMessage.fail(EINVAL, "ttl=\(text) in '\(shown)' is not a number of seconds in 0.1...86400"))
            }
            ttl = value
        }
        if let text = parsed.value("connect_timeout") {
            guard let value = secondsParameter(text, 0.001...86_400) else {
                return (nil, DistributedLockMessage.fail(EINVAL, "connect_timeout=\(text) in '\(shown)' is not a number of seconds in 0.001...86400"))
            }
            timeout = value
        }
        for (part, value) in [("lock name", name), ("user", parsed.user), ("password", parsed.password)] where value?.utf8.contains(0) == true {
            return (nil, DistributedLockMessage.fail(EINVAL, "the \(part) in the Redis URL '\(shown)' contains a NUL byte (%00), which libsync does not allow"))
        }
        let database = parsed.path.isEmpty ? 0 : Int(parsed.path) ?? -1
        if database < 0 { return (nil, DistributedLockMessage.fail(EINVAL, "the database '\(parsed.path)' in '\(shown)' is not a number")) }
        if parsed.host.isEmpty { return (nil, DistributedLockMessage.fail(EINVAL, "the Redis URL '\(shown)' names no host")) }
        let (loaded, missing) = Hiredis.loaded
        guard let hiredis = loaded else { return (nil, DistributedLockMessage.fail(ELIBACC, missing)) }
        let address = RedisAddress(host: parsed.host, port: Int32(parsed.port ?? 6379), database: database,
                                   user: parsed.user, password: parsed.password, ioTimeout: timeout)
        return (RedisBackend(name: shown, address: address, key: "libsync:lock:" + name, fenceKey: "libsync:fence:" + name,
                             ttlMilliseconds: max(1, ttl / 1_000_000), hiredis: hiredis), 0)
    }

    func makeSession(_ me: ProcessIdentity) -> any LockSession { RedisSession(self, me) }
}

final class RedisSession: LockSession {
    private let backend: RedisBackend
    private let me: ProcessIdentity
    private let connection: RedisConnection
    /// Names this session's lease to the renewer.
    private let leaseID = ProcessIdentity.nextSerial()
    /// The renewer of this session's server in its process (a session belongs to one process).
    private lazy var renewer = LeaseRenewers.process.current().renewer(for: backend.address, backend.hiredis)
    /// The entry of this session's hold, while it holds the lock.
    private var entry: String?
    var token: UInt64 = 0

    init(_ backend: RedisBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
        connection = RedisConnection(backend.hiredis, backend.address)
    }

    private var ioDeadline: Int64 { Deadline.after(nanoseconds: backend.address.ioTimeout) }
    private var lease: String { String(backend.leaseMilliseconds) }

    /// A failed exchange's errno, its message recorded: a timeout once `deadline` (< 0: none)
    /// passed is ETIMEDOUT, before it EIO (the server did not answer within connect_timeout).
    private func failure(_ fault: RedisConnection.Fault, _ doing: String, deadline: Int64 = -1) -> Int32 {
        if fault.code == ETIMEDOUT && !Deadline.hasPassed(deadline) {
            return DistributedLockMessage.fail(EIO, "\(doing): \(fault.message) (within connect_timeout)")
        }
        return DistributedLockMessage.fail(fault.code, "\(doing): \(fault.message)")
    }

    func open() -> Int32 { connection.connect(deadline: -1) }

    /// Holds the lock as `entry` with `token` (a script's integer reply to the connection's
    /// last request), its lease timed from when that request was sent.
    private func took(_ entry: String, _ reply: Int64) {
        self.entry = entry
        token = UInt64(reply)
        renewer.add(Lease(backend: backend, entry: entry), for: leaseID, since: connection.lastSent)
    }

    /// Whether the answer to the connection's last request, just read, came too late to be
    /// taken: ttl or more after the request was sent. The lease it grants may have run out by
    /// then (the server may have set it as soon as the request was sent), or be too close to its
    /// end for a renewal to save it: a holder stopped that long is not promised the lock.
    private var answeredTooLate: Bool {
        monotonicNow() - connection.lastSent >= backend.ttlMilliseconds * 1_000_000
    }

    /// Gives back a lease granted by an answer that came too late (`answeredTooLate`): deleted
    /// if it is still `entry`'s, or cancelled in the background if the server does not answer.
    private func refuse(_ entry: String) {
        let outcome = connection.eval(RedisScripts.release, keys: [backend.key], arguments: [entry], deadline: ioDeadline)
        if case .success(.integer) = outcome { return }
        renewer.abandon(Lease(backend: backend, entry: entry))
    }

    func tryAcquire(deadline: Int64) -> Int32 {
        let answerBy = Deadline.hasPassed(deadline) ? ioDeadline : Deadline.earliest(deadline, ioDeadline)
        var mine = me.newEntry()
        var retried = false, maybeSent = false, refused = false
        while true {
            switch connection.eval(RedisScripts.acquire, keys: [backend.key, backend.fenceKey, backend.abandonedKey(mine)],
                                   arguments: [mine, lease], deadline: answerBy) {
            case .success(.integer(let token)) where token > 0:
                if answeredTooLate {
                    let waited = (monotonicNow() - connection.lastSent) / 1_000_000
                    refuse(mine)
                    if refused {
                        return DistributedLockMessage.fail(EIO, "acquire: \(connection.server) answered too late twice (the last answer "
                                                           + "\(waited) ms after its request, the ttl is \(backend.ttlMilliseconds) ms): "
                                                           + "the leases granted may have run out, so they were given back")
                    }
                    (refused, maybeSent, mine) = (true, false, me.newEntry())  // once more, afresh
                    continue
                }
                took(mine, token)
                return 0
            case .success(.integer): return EBUSY
            case .success(let other): return DistributedLockMessage.fail(EIO, "acquire: \(connection.server) answered \(other)")
            case .failure(let fault) where fault.code == EIO && !retried:
                retried = true  // an old connection broke (a restart?): once more, afresh (the same entry: idempotent)
                maybeSent = true
            case .failure(let fault):
                // The request may have reached the server and taken the lock for nobody: cancelled
                // in the background, so that the caller's deadline (or its interruption) holds.
                if maybeSent || [ETIMEDOUT, EIO, EINTR].contains(fault.code) { renewer.abandon(Lease(backend: backend, entry: mine)) }
                return failure(fault, "acquire", deadline: deadline)
            }
        }
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 { EINVAL }  // (polled: never called)

    func release() -> Int32 {
        guard let mine = entry else { return EPERM }
        switch connection.eval(RedisScripts.release, keys: [backend.key], arguments: [mine], deadline: ioDeadline) {
        case .success(.integer(let result)):
            entry = nil
            renewer.remove(leaseID)
            if result == 1 { return 0 }
            return DistributedLockMessage.fail(result == 2 ? EBUSY : ESTALE,
                "the lock \(backend.name) was lost: its lease ended (expired, broken, or the server lost it)"
                + (result == 2 ? ", and another holder has it now" : ""))
        case .success(let other): return DistributedLockMessage.fail(EIO, "release: \(connection.server) answered \(other)")
        case .failure(let fault): return failure(fault, "release")  // still held (renewed): a retry may work
        }
    }

    /// The lock's value, answered by `deadline` (see `failure`) or within connect_timeout.
    private func current(_ doing: String, deadline: Int64 = -1) -> (String?, Int32) {
        switch connection.run(["GET", backend.key], deadline: Deadline.earliest(deadline, ioDeadline)) {
        case .success(.string(let value)): return (value, 0)
        case .success(.null): return (nil, 0)
        case .success(let other): return (nil, DistributedLockMessage.fail(EIO, "\(connection.server) answered \(other) to GET"))
        case .failure(let fault): return (nil, failure(fault, doing, deadline: deadline))
        }
    }

    /// Both requests are answered by `deadline` (a wait's: it never outlasts it) or within
    /// connect_timeout.
    func recoverStale(deadline: Int64) -> Int32 {
        let (holding, code) = current("recover", deadline: deadline)
        guard let holding else { return code == 0 ? ENOENT : code }
        if !me.isStale(entry: holding) { return EBUSY }
        let mine = me.newEntry()
        switch connection.eval(RedisScripts.takeOver, keys: [backend.key, backend.fenceKey, backend.abandonedKey(mine)],
                               arguments: [holding, mine, lease], deadline: Deadline.earliest(deadline, ioDeadline)) {
        case .success(.integer(let token)) where token > 0:
            if answeredTooLate {  // (as tryAcquire's): given back; the lock is free, to be tried again
                refuse(mine)
                return ENOENT
            }
            took(mine, token)
            return 0
        case .success(.integer(let result)): return result == -1 ? EBUSY : ENOENT
        case .success(let other): return DistributedLockMessage.fail(EIO, "recover: \(connection.server) answered \(other)")
        case .failure(let fault):
            if [ETIMEDOUT, EIO, EINTR].contains(fault.code) { renewer.abandon(Lease(backend: backend, entry: mine)) }
            return failure(fault, "recover", deadline: deadline)
        }
    }

    func breakLock() -> Int32 {
        switch connection.run(["DEL", backend.key], deadline: ioDeadline) {
        case .success(.error(let message)): return DistributedLockMessage.fail(EIO, "break: \(message)")
        case .success: return 0
        case .failure(let fault): return failure(fault, "break")
        }
    }

    func holder() -> (DistributedLockHolder?, Int32) {
        let (holding, code) = current("holder")
        guard let holding else { return (nil, code) }
        guard let parsed = parseEntry(holding) else {
            return (DistributedLockHolder(host: "(not a libsync holder: '\(holding)')", pid: 0, processStart: 0, acquired: .zero,
                                          isOnThisHost: false, isStale: false), 0)
        }
        return (me.holder(parsed, entry: holding), 0)
    }

    func holds() -> Bool {
        guard let mine = entry else { return false }
        let (holding, _) = current("is_held")
        return holding == mine
    }

    func close(releasing: Bool) {
        if entry != nil && releasing { _ = release() }
        // A hold kept (not releasing) stays renewed until the process ends: the lock outlives the object.
    }

    func watch(_ ticket: HoldTicket) {
        if let entry { renewer.watch(leaseID, entry: entry, ticket) }
    }
}

/// A lease to renew: the lock, the entry that holds it, and who to tell of its loss.
struct Lease {
    let backend: RedisBackend
    let entry: String
    var ticket: HoldTicket?
    /// A read/write lock's reader: the readers' sorted set holding `entry` (RedisReadWrite.swift);
    /// nil: the lease is `backend.key`'s.
    var shares: String? = nil
}

/// The process's lease renewers, one per server (address, database and login): a server that
/// stops answering delays the renewal of its own leases only, never another server's. A forked
/// child has its own (and does not renew its parent's leases).
final class LeaseRenewers: ProcessBound, @unchecked Sendable {
    let pid: Int32
    private let renewers = Mutex<[RedisAddress: LeaseRenewer]>([:])

    static let process = ProcessLocal<LeaseRenewers> { LeaseRenewers(pid: $0) }

    init(pid: Int32) { self.pid = pid }

    /// The renewer of the leases on `address` (made on first use).
    func renewer(for address: RedisAddress, _ hiredis: Hiredis) -> LeaseRenewer {
        renewers.withLock { renewers in
            if let renewer = renewers[address] { return renewer }
            let renewer = LeaseRenewer(address, hiredis)
            renewers[address] = renewer
            return renewer
        }
    }
}

/// The renewer of one server's leases in one process: one thread, started with the first lease
/// (or abandoned acquisition), renewing each lease every ttl/3 (timed from before the request
/// that set or last renewed it was sent) over a connection of its own; a renewal waits for the
/// server at most min(connect_timeout, ttl/3). It also cancels the acquisitions abandoned
/// without an answer (`abandon`).
final class LeaseRenewer: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let wake = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Under `mutex`: the leases, and when each is due.
    private var leases: [UInt64: (lease: Lease, due: Int64)] = [:]
    /// Under `mutex`: when the thread next wakes (-1: when a lease comes).
    private var nextWake: Int64 = -1
    private var started = false
    /// Under `mutex`: the shortest renewal interval seen, the thread's nap while it has no lease.
    private var shortest = Int64.max
    /// Under `mutex`: the abandoned acquisitions to cancel, each with when it is next tried and
    /// when it is given up (its marker would have expired by then).
    private var abandoned: [(lease: Lease, due: Int64, until: Int64)] = []
    /// The thread's connection to the server.
    private let connection: RedisConnection
    /// How soon a cancellation the server did not answer is tried again.
    private static let cancelRetryNanoseconds: Int64 = 100_000_000

    init(_ address: RedisAddress, _ hiredis: Hiredis) {
        connection = RedisConnection(hiredis, address)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(wake, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    private static func interval(_ lease: Lease) -> Int64 { lease.backend.renewalNanoseconds }

    /// Renews `lease` for `holder` from now on, its first renewal one interval after `since`
    /// (monotonic ns: when the request that set it was sent).
    func add(_ lease: Lease, for holder: UInt64, since: Int64) {
        let interval = Self.interval(lease)
        let due = since + interval
        pthread_mutex_lock(mutex)
        leases[holder] = (lease, due)
        startIfNeeded()
        // Wakes the thread only if it would sleep past this lease's renewal: a lease taken and
        // released between two of its wakes costs no context switch.
        if nextWake < 0 || due < nextWake { pthread_cond_signal(wake) }
        shortest = min(shortest, interval)
        pthread_mutex_unlock(mutex)
    }

    /// Under `mutex`: starts the thread unless started.
    private func startIfNeeded() {
        if started { return }
        started = true
        var thread = pthread_t()
        let me = Unmanaged.passRetained(self).toOpaque()  // (the renewer lives as long as the process)
        pthread_create(&thread, nil, { LeaseRenewer.run(Unmanaged<LeaseRenewer>.fromOpaque($0!).takeUnretainedValue()); return nil }, me)
        pthread_detach(thread)
    }

    /// An acquisition by `lease.entry` that ended without an answer (a timeout, a broken
    /// connection): its request may still reach the server and take the lock for nobody. The
    /// thread cancels it at once (RedisScripts.cancel), retrying while the server does not
    /// answer, until its marker would have expired.
    func abandon(_ lease: Lease) {
        let now = monotonicNow()
        pthread_mutex_lock(mutex)
        abandoned.append((lease, now, now + lease.backend.abandonedMilliseconds * 1_000_000))
        startIfNeeded()
        pthread_cond_signal(wake)
        pthread_mutex_unlock(mutex)
    }

    /// Reports to `ticket` what the renewals of the lease `holder` (held by `entry`) find: lost
    /// at once if it was already found gone.
    func watch(_ holder: UInt64, entry: String, _ ticket: HoldTicket) {
        pthread_mutex_lock(mutex)
        let renewed = leases[holder]?.lease.entry == entry
        if renewed { leases[holder]?.lease.ticket = ticket }
        pthread_mutex_unlock(mutex)
        if !renewed { ticket.report(.lost) }
    }

    func remove(_ holder: UInt64) {
        pthread_mutex_lock(mutex)
        leases[holder] = nil
        pthread_mutex_unlock(mutex)
    }

    private static func run(_ renewer: LeaseRenewer) {
        // Signals go to the application's threads, never here.
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)
        while true { renewer.renewDue() }
    }

    /// Sleeps until a lease or a cancellation is due, then does the due ones (outside the mutex).
    private func renewDue() {
        pthread_mutex_lock(mutex)
        let now = monotonicNow()
        abandoned.removeAll { $0.until <= now }
        let due = leases.filter { $0.value.due <= now }
        let cancelling = abandoned.filter { $0.due <= now }.map(\.lease)
        if due.isEmpty && cancelling.isEmpty {
            nextWake = (leases.values.map(\.due) + abandoned.map(\.due)).min() ?? (shortest == .max ? -1 : now + shortest)
            if nextWake < 0 {
                pthread_cond_wait(wake, mutex)
            } else {
                var until = timespec(tv_sec: Int(nextWake / 1_000_000_000), tv_nsec: Int(nextWake % 1_000_000_000))
                pthread_cond_timedwait(wake, mutex, &until)
            }
            pthread_mutex_unlock(mutex)
            return
        }
        for (holder, item) in due { leases[holder]?.due = now + Self.interval(item.lease) }
        for i in abandoned.indices where abandoned[i].due <= now { abandoned[i].due = now + Self.cancelRetryNanoseconds }
        pthread_mutex_unlock(mutex)
        for lease in cancelling {
            let backend = lease.backend
            let outcome = connection.eval(lease.shares == nil ? RedisScripts.cancel : RedisReadWriteScripts.cancelShare,
                                          keys: [lease.shares ?? backend.key, backend.abandonedKey(lease.entry)],
                                          arguments: [lease.entry, String(backend.abandonedMilliseconds)],
                                          deadline: Deadline.after(nanoseconds: backend.address.ioTimeout))
            if case .success(.integer) = outcome {
                pthread_mutex_lock(mutex)
                abandoned.removeAll { $0.lease.entry == lease.entry }
                pthread_mutex_unlock(mutex)
            }
        }
        for (holder, item) in due {
            let backend = item.lease.backend
            let deadline = Deadline.after(nanoseconds: min(backend.address.ioTimeout, Self.interval(item.lease)))
            let outcome = connection.eval(item.lease.shares == nil ? RedisScripts.renew : RedisReadWriteScripts.renewShare,
                                          keys: [item.lease.shares ?? backend.key], arguments: [item.lease.entry, String(backend.leaseMilliseconds)],
                                          deadline: deadline)
            leaseRenewed(item.lease, of: holder, outcome)
            // (a failed exchange is retried at the next interval: the server may be restarting)
            // (a failed exchange is retried at the next interval: the server may be restarting)
        }
    }

    /// The renewal found `lease` gone (expired, broken, or held by another): nothing left to
    /// renew. Its holder learns it at release (ESTALE/EBUSY) or is_held.
    /// After a renewal of `lease`: its holder is told lost (the lease is gone: nothing left to
    /// renew), suspended (no answer) or resumed (renewed).
    private func leaseRenewed(_ lease: Lease, of holder: UInt64, _ outcome: Result<RedisReply, RedisConnection.Fault>) {
        let event: DistributedLockEvent
        switch outcome {
        case .success(.integer(0)): event = .lost
        case .success(.integer): event = .resumed
        default: event = .suspended
        }
        pthread_mutex_lock(mutex)
        let current = leases[holder]?.lease.entry == lease.entry
        let ticket = current ? leases[holder]?.lease.ticket : nil
        if event == .lost && current { leases[holder] = nil }
        pthread_mutex_unlock(mutex)
        ticket?.report(event)
    }
}
