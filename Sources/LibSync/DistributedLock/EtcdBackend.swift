import Glibc
import Synchronization

// The etcd backend, over etcd's v3 API through its JSON gateway (HTTP/1.1, `HTTPConnection`).
// The lock NAME owns the key range PREFIX = `libsync/lock/NAME/` (a '/' or '%' in NAME written
// %2F, %25, so that no lock's range holds another's keys). Each acquisition attempt puts a key
// of its own, PREFIX + `<lease id in hex>-<serial>`, whose value is the holder's entry (as the
// file backend's: `<pid>.<start>.<acquired>.<serial>.<machine>@<host>`), attached to the
// process's lease on that server. The holder is the key of the range with the smallest create
// revision, and that revision is the fencing token: etcd's revisions only grow, so each holder's
// token is larger than every earlier holder's (a key, once deleted, never comes back, and a new
// key's revision is larger than every key's alive).
//
//   try       TXN if every key of PREFIX has create revision 0 (none exists) then PUT mine
//             (the token: the answer's revision), else RANGE the first (the holder) one round trip
//   wait      PUT mine (queued), then TXN: RANGE the first key, and the last key created before
//             mine; mine first: held; else WATCH that predecessor's key from the revision read
//             (no polling: the gateway streams the events) until it is deleted, and look again.
//             A predecessor that is the holder and stale (this host, process gone) is deleted.
//             A wait that ends without the lock deletes its key.
//   release   TXN if my key's create revision is my token then DELETE it, else RANGE the first
//             key (lost: ESTALE if none, EBUSY if another holds it)              one round trip
//   lease     one per server, ttl and process, granted with the first attempt: its TTL is
//             ttl + ttl/3 (whole seconds, rounded up) and a thread keeps it alive every ttl/3 over
//             a connection of its own; a keep-alive that finds the lease gone reports `lost` to
//             its holds (a holder that dies frees the lock within its lease: etcd deletes the
//             lease's keys), one without an answer `suspended`, the next one answered `resumed`;
//             after each keep-alive one TXN reads the held keys (a broken hold: `lost`)
//   break     RANGE the first key, TXN if its create revision is unchanged DELETE it
//
// An attempt whose answer never came (a timeout, a broken connection) may have put its key: the
// lease thread deletes it (`abandon`), so that it never holds the lock for nobody.

/// Where an etcd server is, and how to log in.
struct EtcdAddress: Hashable, Sendable {
    let host: String, port: Int32, user: String?, password: String?
    /// The connect and answer timeout.
    let ioTimeout: Int64
    /// TLS (`etcds://`), or nil: plain HTTP.
    var tls: TLSOptions? = nil
    var server: String { "the etcd server at \(host.contains(":") ? "[\(host)]" : host):\(port)" }
}

/// etcd's JSON API over one connection, logged in if the address has a user (not thread-safe).
final class EtcdClient {
    let address: EtcdAddress
    let connection: HTTPConnection
    /// The auth token, once logged in: shared by the process's clients of one address and login
    /// (a login costs the server a bcrypt hash; a lease keeper's keep-alive, which may wait only
    /// ttl/3, must not need one).
    private(set) var token: String? {
        get { Self.tokens.withLock { $0[address] } }
        set { Self.tokens.withLock { $0[address] = newValue } }
    }
    private static let tokens = Mutex<[EtcdAddress: String]>([:])
    /// When the last request began to be sent (monotonic ns).
    private(set) var lastSent: Int64 = 0

    init(_ address: EtcdAddress) {
        self.address = address
        connection = HTTPConnection(host: address.host, port: address.port, server: address.server, tls: address.tls)
    }

    var server: String { address.server }

    /// The errno for an error etcd answered with `text` (`code`: its gRPC code).
    private static func errno(_ text: String, _ code: Int64) -> Int32 {
        if text.contains("user name is empty") || text.contains("authentication failed") || text.contains("permission denied")
            || text.contains("user name not found") || code == 7 || code == 16 {
            return EACCES
        }
        return EIO
    }

    /// POSTs `body` to `path` and returns the answer's JSON, by `deadline` (monotonic ns):
    /// logs in first if need be (and again when the server forgot the token: a restart); a
    /// connection that breaks is made again, up to three times. Every request libsync makes
    /// may be sent twice: an acquire that took the lock finds its own key, a queued key is put
    /// only if absent, and a release that finds its key gone already asks who holds the lock. Faults: HTTPConnection's, EACCES
    /// (refused login or permission), EIO (an error answer: its message).
    func call(_ path: String, _ body: String, deadline: Int64) -> Result<JSONValue, HTTPConnection.Fault> {
        var loggedInAgain = false, reconnects = 0
        while true {
            var loginFault: HTTPConnection.Fault?
            if address.user != nil && token == nil { loginFault = logIn(deadline: deadline) }
            lastSent = monotonicNow()
            let sentToken = token
            let outcome = loginFault.map { .failure($0) }
                ?? connection.post(path, body, headers: sentToken.map { [("Authorization", $0)] } ?? [], deadline: deadline)
            switch outcome {
            case .failure(let fault):
                if fault.code == EIO && reconnects < 3 && !Deadline.hasPassed(deadline) {
                    // The connection broke (a restart: the old one, and a new one while the
                    // server is still starting): again afresh, a little later each time.
                    reconnects += 1
                    if reconnects > 1 { usleep(UInt32(20_000 * reconnects)) }
                    continue
                }
                return .failure(fault)
            case .success(let (status, bytes)):
                guard let json = JSONValue.parse(bytes) else {
                    connection.disconnect()
                    return .failure(.init(code: EIO, message: "\(server) answered \(status) with no JSON: '\(String(decoding: bytes.prefix(200), as: UTF8.self))'"))
                }
                if status == 200 && json["error"] == nil { return .success(json) }
                let text = json["message"]?.string ?? json["error"]?.string ?? "HTTP status \(status)"
                if text.contains("invalid auth token") && address.user != nil && !loggedInAgain {
                    if let failed = sentToken { Self.tokens.withLock { if $0[address] == failed { $0[address] = nil } } }
                    loggedInAgain = true
                    continue
                }
                if text.contains("user name is empty") {
                    return .failure(.init(code: EACCES, message: "\(server) wants a user and password, which the URL does not give "
                                          + "(etcd://USER:PASSWORD@host...): \(text)"))
                }
                return .failure(.init(code: Self.errno(text, json["code"]?.integer ?? 0), message: "\(server): \(text)"))
            }
        }
    }

    private func logIn(deadline: Int64) -> HTTPConnection.Fault? {
        let body = "{\"name\":\(JSONValue.quoted(address.user ?? "")),\"password\":\(JSONValue.quoted(address.password ?? ""))}"
        switch connection.post("/v3/auth/authenticate", body, deadline: deadline) {
        case .failure(let fault): return fault
        case .success(let (status, bytes)):
            let json = JSONValue.parse(bytes)
            if status == 200, let token = json?["token"]?.string {
                self.token = token
                return nil
            }
            let text = json?["message"]?.string ?? "HTTP status \(status)"
            if text.contains("authentication is not enabled") { return nil }  // (no token needed)
            return .init(code: Self.errno(text, json?["code"]?.integer ?? 0), message: "\(server) refused the login of '\(address.user ?? "")': \(text)")
        }
    }

    func disconnect() { connection.disconnect() }
}

/// A key of the lock's range, as a range answer gives it.
struct EtcdKey {
    let key: String, value: String, createRevision: Int64

    init?(_ json: JSONValue) {
        guard let key = json["key"]?.string.flatMap(Base64.decodeText), let revision = json["create_revision"]?.integer else { return nil }
        self.key = key
        value = json["value"]?.string.flatMap(Base64.decodeText) ?? ""
        createRevision = revision
    }
}

/// JSON request bodies.
enum EtcdRequest {
    static func range(_ key: String, end: String? = nil, descending: Bool = false, limit: Int? = nil, maxCreate: Int64? = nil,
                      countOnly: Bool = false) -> String {
        var parts = ["\"key\":\"\(Base64.encode(key))\""]
        if let end { parts.append("\"range_end\":\"\(Base64.encode(end))\"") }
        if end != nil || descending { parts += ["\"sort_order\":\"\(descending ? "DESCEND" : "ASCEND")\"", "\"sort_target\":\"CREATE\""] }
        if let limit { parts.append("\"limit\":\"\(limit)\"") }
        if let maxCreate { parts.append("\"max_create_revision\":\"\(maxCreate)\"") }
        if countOnly { parts.append("\"count_only\":true") }
        return "{" + parts.joined(separator: ",") + "}"
    }

    static func put(_ key: String, _ value: String, lease: Int64) -> String {
        "{\"key\":\"\(Base64.encode(key))\",\"value\":\"\(Base64.encode(value))\",\"lease\":\"\(lease)\"}"
    }

    static func delete(_ key: String) -> String { "{\"key\":\"\(Base64.encode(key))\"}" }

    /// A compare of the create revision of `key` (with `end`: of every key in [key, end)).
    static func createRevision(_ key: String, end: String? = nil, is revision: Int64) -> String {
        "{\"target\":\"CREATE\",\"key\":\"\(Base64.encode(key))\"" + (end.map { ",\"range_end\":\"\(Base64.encode($0))\"" } ?? "")
            + ",\"result\":\"EQUAL\",\"create_revision\":\"\(revision)\"}"
    }

    static func txn(compare: [String], success: [String], failure: [String] = []) -> String {
        "{\"compare\":[\(compare.joined(separator: ","))],\"success\":[\(success.joined(separator: ","))],\"failure\":[\(failure.joined(separator: ","))]}"
    }

    static func op(_ kind: String, _ body: String) -> String { "{\"\(kind)\":\(body)}" }
}

extension JSONValue {
    /// A txn answer's ranges' keys, per response.
    var txnRanges: [[EtcdKey]] {
        (self["responses"]?.array ?? []).map { ($0["response_range"]?["kvs"]?.array ?? []).compactMap(EtcdKey.init) }
    }

    var revision: Int64 { self["header"]?["revision"]?.integer ?? 0 }
    var succeeded: Bool { self["succeeded"]?.bool ?? false }
}

struct EtcdBackend: LockBackend {
    let name: String
    let address: EtcdAddress
    /// The lock's key range: its keys start with `prefix`; `rangeEnd` is the first key past them.
    let prefix: String, rangeEnd: String
    /// The ttl the URL gives: a holder stopped for less than this keeps the lock.
    let ttlNanoseconds: Int64
    /// Which side of a read/write lock this is (EtcdReadWrite.swift), or the exclusive lock.
    var side: EtcdLockSide = .exclusive
    var waitsInStore: Bool { true }
    var firstPollNanoseconds: Int64? { nil }
    /// How often the lease is kept alive: every ttl/3.
    var renewalNanoseconds: Int64 { ttlNanoseconds / 3 }
    /// The lease's TTL in whole seconds: ttl + ttl/3, rounded up.
    var leaseSeconds: Int64 { (ttlNanoseconds + ttlNanoseconds / 3 + 999_999_999) / 1_000_000_000 }

    /// `etcd://[user:password@]host[:port]?lock=NAME[&ttl=S][&connect_timeout=S]`, or `etcds://`
    /// (TLS) with `[&cacert=PEM][&cert=PEM&key=PEM]`.
    static func make(url: String) -> ((any LockBackend)?, Int32) {
        let shown = LockURL.redacted(url)
        let (parsed, why) = LockURL.parse(url)
        guard let parsed else { return (nil, DistributedLockMessage.fail(EINVAL, "bad etcd URL '\(shown)': \(why)")) }
        guard let name = parsed.value("lock"), !name.isEmpty else {
            return (nil, DistributedLockMessage.fail(EINVAL, "the etcd URL '\(shown)' names no lock: add ?lock=NAME"))
        }
        let isTLS = parsed.scheme.lowercased() == "etcds"
        let tlsFiles = ["cacert", "cert", "key"]
        let known = ["lock", "ttl", "connect_timeout"] + tlsFiles
        for parameter in parsed.query where !known.contains(parameter.name) {
            let tls = ["tls", "ssl", "sslmode", "ca", "tls_ca", "tls_cert", "tls_key", "sslrootcert", "sslcert", "sslkey"]
                .contains(parameter.name.lowercased())
            return (nil, DistributedLockMessage.fail(EINVAL, "unknown parameter '\(parameter.name)' in the etcd URL '\(shown)' (known: \(known.joined(separator: ", ")))"
                                                     + (tls ? "; for TLS use etcds:// with cacert=, cert= and key= (PEM files)" : "")))
        }
        var tls: TLSOptions?
        let given = tlsFiles.filter { parsed.value($0) != nil }
        if !isTLS && !given.isEmpty {
            return (nil, DistributedLockMessage.fail(EINVAL, "\(given.map { $0 + "=" }.joined(separator: ", ")) in '\(shown)' are TLS options: use etcds:// (etcd:// speaks plain HTTP)"))
        }
        if isTLS {
            let (ca, cert, key) = (parsed.value("cacert"), parsed.value("cert"), parsed.value("key"))
            if (cert == nil) != (key == nil) {
                return (nil, DistributedLockMessage.fail(EINVAL, "'\(shown)' gives \(cert == nil ? "key= without cert=" : "cert= without key="): a client certificate needs both (PEM files)"))
            }
            for (name, file) in [("cacert", ca), ("cert", cert), ("key", key)] {
                guard let file else { continue }
                if file.isEmpty || access(file, R_OK) != 0 {
                    let why = file.isEmpty ? "empty" : String(cString: strerror(errno))
                    return (nil, DistributedLockMessage.fail(EINVAL, "\(name)=\(file) in '\(shown)': cannot read the file (\(why))"))
                }
            }
            tls = TLSOptions(caFile: ca, certFile: cert, keyFile: key)
            if let fault = TLSSession.check(tls!) {  // ELIBACC, or EINVAL: a file libssl cannot use
                return (nil, DistributedLockMessage.fail(fault.code, "\(fault.message) (in '\(shown)')"))
            }
        }
        var ttl: Int64 = 10_000_000_000, timeout: Int64 = 5_000_000_000
        if let text = parsed.value("ttl") {
            guard let value = secondsParameter(text, 1...86_400) else {
                return (nil, DistributedLockMessage.fail(EINVAL, "ttl=\(text) in '\(shown)' is not a number of seconds in 1...86400"))
            }
            ttl = value
        }
        if let text = parsed.value("connect_timeout") {
            guard let value = secondsParameter(text, 0.001...86_400) else {
                return (nil, DistributedLockMessage.fail(EINVAL, "connect_timeout=\(text) in '\(shown)' is not a number of seconds in 0.001...86400"))
            }
            timeout = value
        }
        if !parsed.path.isEmpty {
            return (nil, DistributedLockMessage.fail(EINVAL, "the etcd URL '\(shown)' has a path ('/\(parsed.path)'): etcd has no databases; name the lock with ?lock=NAME"))
        }
        if parsed.host.isEmpty { return (nil, DistributedLockMessage.fail(EINVAL, "the etcd URL '\(shown)' names no host")) }
        if parsed.password != nil && parsed.user == nil {
            return (nil, DistributedLockMessage.fail(EINVAL, "the etcd URL '\(shown)' gives a password without a user (etcd://USER:PASSWORD@host...)"))
        }
        let escaped = name.replacing("%", with: "%25").replacing("/", with: "%2F")
        let prefix = "libsync/lock/" + escaped + "/"
        let address = EtcdAddress(host: parsed.host, port: Int32(parsed.port ?? 2379), user: parsed.user,
                                  password: parsed.password, ioTimeout: timeout, tls: tls)
        return (EtcdBackend(name: shown, address: address, prefix: prefix, rangeEnd: "libsync/lock/" + escaped + "0",
                            ttlNanoseconds: ttl), 0)
    }

    func makeSession(_ me: ProcessIdentity) -> any LockSession { EtcdSession(self, me) }
}

final class EtcdSession: LockSession {
    private let backend: EtcdBackend
    private let me: ProcessIdentity
    private let client: EtcdClient
    /// The watch of a wait (its own connection: the stream), and the key it watches.
    private var watch: (connection: HTTPConnection, key: String)?
    /// Names this session's hold to the lease keeper.
    private let holdID = ProcessIdentity.nextSerial()
    private lazy var keeper = EtcdLeaseKeepers.process.current().keeper(for: backend)
    /// This session's key while it holds the lock (`held`) or waits in the queue: its name,
    /// create revision and lease.
    private var mine: (key: String, revision: Int64, lease: Int64)?
    private var held = false
    var token: UInt64 = 0
    /// The try's compare (no key of the range exists) and its read of the holder's key.
    private lazy var rangeIsEmpty = backend.side == .read
        ? EtcdRequest.createRevision(backend.writersPrefix, end: backend.writersEnd, is: 0)  // (a reader: no writer holds or waits)
        : EtcdRequest.createRevision(backend.prefix, end: backend.rangeEnd, is: 0)
    private lazy var rangeFirst = EtcdRequest.op("request_range", EtcdRequest.range(backend.prefix, end: backend.rangeEnd, limit: 1))

    init(_ backend: EtcdBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
        client = EtcdClient(backend.address)
    }

    private var server: String { backend.address.server }
    private var ioDeadline: Int64 { Deadline.after(nanoseconds: backend.address.ioTimeout) }

    /// When an exchange started now with `deadline` must be answered: by it or within
    /// connect_timeout, whichever is sooner; with no time left, within connect_timeout (a
    /// call's one try takes a free lock on a slow server too).
    private func answerBy(_ deadline: Int64) -> Int64 {
        Deadline.hasPassed(deadline) ? ioDeadline : Deadline.earliest(deadline, ioDeadline)
    }

    /// A failed exchange's errno, its message recorded: a timeout before `deadline` (< 0: none)
    /// is EIO (no answer within connect_timeout), after it ETIMEDOUT.
    private func failure(_ fault: HTTPConnection.Fault, _ doing: String, deadline: Int64 = -1) -> Int32 {
        if fault.code == ETIMEDOUT && !Deadline.hasPassed(deadline) {
            return DistributedLockMessage.fail(EIO, "\(doing): \(fault.message) (within connect_timeout)")
        }
        return DistributedLockMessage.fail(fault.code, "\(doing): \(fault.message)")
    }

    /// Connects and logs in now, and reads the lock's range once (so that a refused login or
    /// permission is reported at creation).
    func open() -> Int32 {
        client.open(range: backend.prefix, end: backend.rangeEnd)
    }

    /// The process's lease on the server (granted now if there is none): (id, 0) or (0, errno).
    private func lease(deadline: Int64) -> (Int64, Int32) {
        let (id, fault) = keeper.lease(client, deadline: deadline)
        if let fault { return (0, failure(fault, "grant a lease", deadline: deadline)) }
        return (id, 0)
    }

    /// This session's key under `lease`: the same from one acquisition to the next (etcd keeps
    /// an index entry for every key a range ever held, until the history is compacted, and a
    /// range compare walks them all: a new key per acquisition would make each acquisition
    /// slower than the last), and a new one after an attempt was abandoned (`abandon`).
    private func newKey(_ lease: Int64) -> String {
        backend.prefix + backend.side.keyPrefix + String(UInt64(bitPattern: lease), radix: 16) + "-" + String(holdID) + "." + String(keyGeneration)
    }
    /// Bumped when a key is abandoned: its deletion in the background never meets a later attempt.
    private var keyGeneration = 0

    private func abandon(_ key: String) {
        keyGeneration += 1
        keeper.abandon(key)
    }

    /// Holds the lock through `mine`.
    private func took() {
        guard let mine else { return }
        held = true
        token = UInt64(mine.revision)
        keeper.hold(holdID, key: mine.key, revision: mine.revision, lease: mine.lease)
    }

    func tryAcquire(deadline: Int64) -> Int32 {
        let by = answerBy(deadline)
        if mine != nil {  // queued by an interrupted wait: held if first now
            switch look(deadline: by) {
            case .failure(let code): return code
            case .success(let look):
                if look.first { took(); return 0 }
                return look.mineGone ? requeueLost() : EBUSY
            }
        }
        var lost = false
        while true {
            let (lease, code) = self.lease(deadline: by)
            if code != 0 { return code }
            let key = newKey(lease)
            // (a reader also reads its key back: a retried put keeps the key's first create revision)
            let request = EtcdRequest.txn(compare: [rangeIsEmpty],
                                          success: [EtcdRequest.op("request_put", EtcdRequest.put(key, me.newEntry(), lease: lease))]
                                            + (backend.side == .read ? [EtcdRequest.op("request_range", EtcdRequest.range(key))] : []),
                                          failure: [rangeFirst] + (backend.side == .read ? [EtcdRequest.op("request_range", EtcdRequest.range(key))] : []))
            switch client.call("/v3/kv/txn", request, deadline: by) {
            case .success(let answer):
                if answer.succeeded {
                    let created = backend.side == .read ? answer.txnRanges.last?.first?.createRevision : nil
                    mine = (key, created ?? answer.revision, lease)
                    took()
                    return 0
                }
                if let first = answer.txnRanges.first?.first, first.key == key {  // (a retry of a request that took it)
                    mine = (key, first.createRevision, lease)
                    took()
                    return 0
                }
                if backend.side == .read, let put = answer.txnRanges.dropFirst().first?.first {
                    // (a retry of a read request that took it: a writer's key came after it, and waits)
                    mine = (key, put.createRevision, lease)
                    took()
                    return 0
                }
                return EBUSY
            case .failure(let fault) where fault.message.contains("requested lease not found") && !lost:
                lost = true
                keeper.leaseGone(lease)  // expired (the process was stopped, or the server lost it): a new one
            case .failure(let fault):
                if [ETIMEDOUT, EIO, EINTR].contains(fault.code) { abandon(key) }
                return failure(fault, "acquire", deadline: deadline)
            }
        }
    }

    /// An interrupted wait's key went (its lease ended, or it was broken): the wait starts over.
    private func requeueLost() -> Int32 {
        mine = nil
        closeWatch()
        return EBUSY
    }

    private struct Look { var first: Bool, mineGone: Bool, predecessor: EtcdKey?, revision: Int64 }
    private enum Looked { case success(Look), failure(Int32) }

    /// Where this session's queued key stands: first (held), gone, or behind a predecessor.
    private func look(deadline: Int64) -> Looked {
        guard let mine else { return .failure(EINVAL) }
        let request = EtcdRequest.txn(compare: [], success: [
            EtcdRequest.op("request_range", EtcdRequest.range(backend.prefix, end: backend.rangeEnd, limit: 1)),
            // (a reader waits for the last writer before it; a writer for the last key of any kind)
            EtcdRequest.op("request_range", EtcdRequest.range(backend.side == .read ? backend.writersPrefix : backend.prefix,
                                                              end: backend.side == .read ? backend.writersEnd : backend.rangeEnd,
                                                              descending: true, limit: 1, maxCreate: mine.revision - 1)),
            EtcdRequest.op("request_range", EtcdRequest.range(mine.key)),
        ])
        switch client.call("/v3/kv/txn", request, deadline: deadline) {
        case .failure(let fault): return .failure(failure(fault, "acquire", deadline: deadline))
        case .success(let answer):
            let ranges = answer.txnRanges
            guard ranges.count == 3 else { return .failure(DistributedLockMessage.fail(EIO, "acquire: \(server) answered a txn without its ranges")) }
            let gone = ranges[2].first?.createRevision != mine.revision
            let first = backend.side == .read ? ranges[1].isEmpty : ranges[0].first?.key == mine.key
            return .success(Look(first: !gone && first, mineGone: gone,
                                 predecessor: ranges[1].first, revision: answer.revision))
        }
    }

    private func closeWatch() {
        watch?.connection.disconnect()
        watch = nil
    }

    /// Withdraws the queued key (deleted now, or by the lease thread if the server does not answer).
    private func withdraw() {
        closeWatch()
        guard let queued = mine, !held else { return }
        mine = nil
        if case .success = client.call("/v3/kv/deleterange", EtcdRequest.delete(queued.key), deadline: ioDeadline) { return }
        abandon(queued.key)
    }

    func withdrawWait() {
        closeWatch()
        guard let queued = mine, !held else { return }
        mine = nil
        abandon(queued.key)
    }

    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 {
        if !interruptible && !held && mine != nil { withdraw() }  // (an interrupted wait given up)
        let sliceEnd = interruptible ? Deadline.after(nanoseconds: Deadline.interruptSlice) : Deadline.none
        var lost = false
        while true {
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) { withdraw(); return ETIMEDOUT }
            if interruptible && now >= sliceEnd { return EINTR }
            let by = Deadline.earliest(deadline, now + backend.address.ioTimeout)
            if mine == nil {  // queue: put a key of this session's
                let (lease, code) = self.lease(deadline: by)
                if code != 0 { return code == ETIMEDOUT || code == EINTR ? settle(code, deadline) : code }
                let key = newKey(lease)
                let request = EtcdRequest.txn(compare: [EtcdRequest.createRevision(key, is: 0)],
                                              success: [EtcdRequest.op("request_put", EtcdRequest.put(key, me.newEntry(), lease: lease))])
                switch client.call("/v3/kv/txn", request, deadline: by) {
                case .success(let answer) where !answer.succeeded:
                    abandon(key)  // (left by an earlier attempt: a key of its own, and that one deleted)
                    continue
                case .success(let answer): mine = (key, answer.revision, lease)
                case .failure(let fault) where fault.message.contains("requested lease not found") && !lost:
                    lost = true
                    keeper.leaseGone(lease)
                    continue
                case .failure(let fault):
                    if [ETIMEDOUT, EIO, EINTR].contains(fault.code) { abandon(key) }
                    if fault.code == ETIMEDOUT || fault.code == EINTR { return settle(fault.code, deadline, fault.message) }
                    return failure(fault, "acquire", deadline: deadline)
                }
            }
            if watch == nil {
                let look: Look
                switch self.look(deadline: by) {
                case .failure(let code):
                    if code == ETIMEDOUT || code == EINTR { return settle(code, deadline) }
                    withdraw()
                    return code
                case .success(let found): look = found
                }
                if look.first { took(); return 0 }
                if look.mineGone { mine = nil; continue }  // its lease ended meanwhile: queue again
                guard let predecessor = look.predecessor else { continue }  // (gone between the reads)
                if me.isStale(entry: predecessor.value) {
                    // The holder before this one is on this host and its process is gone: no need to wait for its lease.
                    let delete = EtcdRequest.txn(compare: [EtcdRequest.createRevision(predecessor.key, is: predecessor.createRevision)],
                                                 success: [EtcdRequest.op("request_delete_range", EtcdRequest.delete(predecessor.key))])
                    if case .failure(let fault) = client.call("/v3/kv/txn", delete, deadline: by) {
                        if fault.code == ETIMEDOUT || fault.code == EINTR { return settle(fault.code, deadline, fault.message) }
                        withdraw()
                        return failure(fault, "acquire", deadline: deadline)
                    }
                    continue
                }
                let connection = HTTPConnection(host: backend.address.host, port: backend.address.port, server: server,
                                                tls: backend.address.tls)
                let body = "{\"create_request\":{\"key\":\"\(Base64.encode(predecessor.key))\",\"start_revision\":\"\(look.revision + 1)\","
                    + "\"filters\":[\"NOPUT\"]}}"
                switch connection.startStream("/v3/watch", body, headers: client.authorization, deadline: by) {
                case .failure(let fault):
                    if fault.code == ETIMEDOUT || fault.code == EINTR { return settle(fault.code, deadline, fault.message) }
                    withdraw()
                    return failure(fault, "watch", deadline: deadline)
                case .success(let status) where status != 200:
                    connection.disconnect()
                    withdraw()
                    return DistributedLockMessage.fail(EIO, "watch: \(server) answered HTTP status \(status)")
                case .success: watch = (connection, predecessor.key)
                }
            }
            // Waits for the predecessor's deletion (or the watch's end).
            guard let current = watch else { continue }
            let until = Deadline.earliest(deadline, sliceEnd)
            switch current.connection.nextLine(deadline: until, interruptible: interruptible) {
            case .failure(let fault) where fault.code == ETIMEDOUT || fault.code == EINTR:
                if Deadline.hasPassed(deadline) { withdraw(); return ETIMEDOUT }
                if interruptible { return EINTR }  // the slice's end or a signal: the key stays queued
                continue
            case .failure, .success(nil):
                closeWatch()  // (the server restarted, or closed the stream: look again)
                if client.connection.isConnected == false { usleep(10_000) }
            case .success(let line?):
                guard let message = JSONValue.parse(line) else { closeWatch(); continue }
                let result = message["result"] ?? message
                if result["canceled"]?.bool == true || message["error"] != nil { closeWatch(); continue }
                if result["events"]?.array.isEmpty == false { closeWatch() }  // deleted: look again
            }
        }
    }

    /// A wait's exchange that ended with ETIMEDOUT or EINTR: ETIMEDOUT once the deadline passed
    /// (the key withdrawn), EINTR for an interruptible call (the key stays queued), else EIO (the
    /// server did not answer within connect_timeout; the key withdrawn).
    private func settle(_ code: Int32, _ deadline: Int64, _ message: String? = nil) -> Int32 {
        if code == EINTR && InterruptibleCall.isActive { closeWatch(); return EINTR }
        if Deadline.hasPassed(deadline) {
            withdraw()
            return message.map { DistributedLockMessage.fail(ETIMEDOUT, "timed out waiting for the lock \(backend.name): \($0)") } ?? ETIMEDOUT
        }
        withdraw()
        return DistributedLockMessage.fail(EIO, "acquire: \(message ?? "\(server) did not answer") (within connect_timeout)")
    }

    /// A plain delete of the key (only this session ever puts it: if it is there, it is this
    /// hold's), its deleted entry read back: gone already, the hold was lost, and one more read
    /// tells whether another holds the lock now.
    func release() -> Int32 {
        guard held, let hold = mine else { return EPERM }
        let request = "{\"key\":\"\(Base64.encode(hold.key))\",\"prev_kv\":true}"
        switch client.call("/v3/kv/deleterange", request, deadline: ioDeadline) {
        case .failure(let fault): return failure(fault, "release")  // still held (kept alive): a retry may work
        case .success(let answer):
            held = false
            mine = nil
            keeper.drop(holdID)
            if (answer["prev_kvs"]?.array ?? []).first.flatMap(EtcdKey.init)?.createRevision == hold.revision { return 0 }
            let (holding, _) = first("release")
            let another = holding != nil
            return DistributedLockMessage.fail(another ? EBUSY : ESTALE,
                "the lock \(backend.name) was lost: its key is gone (the lease ended, or the lock was broken)"
                + (another ? ", and another holder has it now" : ""))
        }
    }

    /// The holder's key (the first of the range), answered by `deadline` or within connect_timeout.
    private func first(_ doing: String, deadline: Int64 = -1) -> (EtcdKey?, Int32) {
        switch client.call("/v3/kv/range", EtcdRequest.range(backend.prefix, end: backend.rangeEnd, limit: 1),
                           deadline: Deadline.earliest(deadline, ioDeadline)) {
        case .success(let answer): return ((answer["kvs"]?.array ?? []).first.flatMap(EtcdKey.init), 0)
        case .failure(let fault): return (nil, failure(fault, doing, deadline: deadline))
        }
    }

    private func deleteKey(_ key: EtcdKey, deadline: Int64) -> Int32 {
        let request = EtcdRequest.txn(compare: [EtcdRequest.createRevision(key.key, is: key.createRevision)],
                                      success: [EtcdRequest.op("request_delete_range", EtcdRequest.delete(key.key))])
        if case .failure(let fault) = client.call("/v3/kv/txn", request, deadline: Deadline.earliest(deadline, ioDeadline)) {
            return failure(fault, "delete the holder's key", deadline: deadline)
        }
        return 0
    }

    func recoverStale(deadline: Int64) -> Int32 {
        if mine != nil { withdraw() }
        let (holding, code) = first("recover", deadline: deadline)
        guard let holding else { return code == 0 ? ENOENT : code }
        if !me.isStale(entry: holding.value) { return EBUSY }
        let deleted = deleteKey(holding, deadline: deadline)
        if deleted != 0 { return deleted }
        return tryAcquire(deadline: Deadline.hasPassed(deadline) ? Deadline.none : deadline)
    }

    func breakLock() -> Int32 {
        if backend.side != .exclusive {  // a read/write lock: every reader's and writer's key
            let request = "{\"key\":\"\(Base64.encode(backend.prefix))\",\"range_end\":\"\(Base64.encode(backend.rangeEnd))\"}"
            if case .failure(let fault) = client.call("/v3/kv/deleterange", request, deadline: ioDeadline) { return failure(fault, "break") }
            return 0
        }
        let (holding, code) = first("break")
        guard let holding else { return code }
        return deleteKey(holding, deadline: -1)
    }

    func holder() -> (DistributedLockHolder?, Int32) {
        let (holding, code) = first("holder")
        guard let holding else { return (nil, code) }
        guard let parsed = parseEntry(holding.value) else {
            return (DistributedLockHolder(host: "(not a libsync holder: '\(holding.value)')", pid: 0, processStart: 0, acquired: .zero,
                                          isOnThisHost: false, isStale: false), 0)
        }
        return (me.holder(parsed, entry: holding.value), 0)
    }

    func holds() -> Bool {
        guard held, let hold = mine else { return false }
        switch client.call("/v3/kv/range", EtcdRequest.range(hold.key), deadline: ioDeadline) {
        case .success(let answer): return (answer["kvs"]?.array ?? []).first.flatMap(EtcdKey.init)?.createRevision == hold.revision
        case .failure: return false
        }
    }

    func close(releasing: Bool) {
        if held && releasing { _ = release() }
        if !held { withdrawWait() }
        // A hold kept (not releasing) stays while the process keeps its lease alive: the lock outlives the object.
        client.disconnect()
    }

    func watch(_ ticket: HoldTicket) { keeper.watch(holdID, ticket) }
}

extension EtcdClient {
    /// Connects and logs in now, and reads the range `prefix`..<`end` once, so that a refused
    /// login, permission or TLS handshake is reported when a lock or semaphore is made: 0, or
    /// ECONNREFUSED (no connection, no answer, or a connection the server closed: a client
    /// certificate it refused, plain HTTP at a TLS port), EACCES, EIO (its message recorded).
    func open(range prefix: String, end: String) -> Int32 {
        let deadline = Deadline.after(nanoseconds: address.ioTimeout)
        if let fault = connection.connect(deadline: deadline) {
            if fault.code == ETIMEDOUT {
                return DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server): no answer within connect_timeout")
            }
            return DistributedLockMessage.fail(fault.code, fault.message)
        }
        switch call("/v3/kv/range", EtcdRequest.range(prefix, end: end, countOnly: true), deadline: deadline) {
        case .success: return 0
        case .failure(let fault):
            if fault.code == ETIMEDOUT || fault.code == EIO && !connection.isConnected {
                return DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server): \(fault.message) (within connect_timeout)")
            }
            return DistributedLockMessage.fail(fault.code, fault.message)
        }
    }

    /// The header that carries the auth token, for another connection (a watch's).
    var authorization: [(String, String)] { token.map { [("Authorization", $0)] } ?? [] }
}

/// The process's lease keepers, one per server (address and login) and lease TTL.
final class EtcdLeaseKeepers: ProcessBound, @unchecked Sendable {
    let pid: Int32
    private let keepers = Mutex<[String: EtcdLeaseKeeper]>([:])

    static let process = ProcessLocal<EtcdLeaseKeepers> { EtcdLeaseKeepers(pid: $0) }

    init(pid: Int32) { self.pid = pid }

    func keeper(for backend: EtcdBackend) -> EtcdLeaseKeeper {
        let a = backend.address
        let id = "\(a.host)\u{0}\(a.port)\u{0}\(a.user ?? "")\u{0}\(a.password ?? "")\u{0}\(a.ioTimeout)\u{0}\(backend.ttlNanoseconds)"
        return keepers.withLock { keepers in
            if let keeper = keepers[id] { return keeper }
            let keeper = EtcdLeaseKeeper(backend)
            keepers[id] = keeper
            return keeper
        }
    }
}

/// One server's lease in one process: granted with the first attempt, kept alive every ttl/3 by
/// a thread of its own over a connection of its own (a keep-alive waits at most
/// min(connect_timeout, ttl/3)), which also reads the held keys after each keep-alive and
/// deletes the keys of abandoned attempts.
final class EtcdLeaseKeeper: @unchecked Sendable {
    private let backend: EtcdBackend
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let wake = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Serializes grants (outside `mutex`, which the thread needs meanwhile).
    private let granting = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Under `mutex`: the lease, and when it is next kept alive.
    private var lease: Int64?
    private var due: Int64 = 0
    private var started = false
    /// Under `mutex`: the holds, and who to tell of their loss.
    private var holds: [UInt64: (key: String, revision: Int64, lease: Int64, ticket: HoldTicket?)] = [:]
    /// Under `mutex`: keys to delete, each with when it is next tried, and whether it is the
    /// second deletion (an attempt's request may reach the server after the first).
    private var abandoned: [(key: String, due: Int64, again: Bool)] = []
    /// The thread's connection.
    private let client: EtcdClient
    private static let retryNanoseconds: Int64 = 100_000_000

    init(_ backend: EtcdBackend) {
        self.backend = backend
        client = EtcdClient(backend.address)
        pthread_mutex_init(mutex, nil)
        pthread_mutex_init(granting, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(wake, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    private func current() -> Int64? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return lease
    }

    /// The lease, granted now through `client` (the caller's) if there is none.
    func lease(_ caller: EtcdClient, deadline: Int64) -> (Int64, HTTPConnection.Fault?) {
        if let lease = current() { return (lease, nil) }
        pthread_mutex_lock(granting)
        defer { pthread_mutex_unlock(granting) }
        if let lease = current() { return (lease, nil) }
        switch caller.call("/v3/lease/grant", "{\"TTL\":\"\(backend.leaseSeconds)\"}", deadline: deadline) {
        case .failure(let fault): return (0, fault)
        case .success(let answer):
            guard let id = answer["ID"]?.integer, id != 0 else {
                return (0, .init(code: EIO, message: "\(backend.address.server) granted no lease: \(answer["error"]?.string ?? "")"))
            }
            pthread_mutex_lock(mutex)
            lease = id
            due = caller.lastSent + backend.renewalNanoseconds
            startIfNeeded()
            pthread_cond_signal(wake)
            pthread_mutex_unlock(mutex)
            return (id, nil)
        }
    }

    /// The server says `id` is gone: its holds are lost, and the next attempt gets a new lease.
    func leaseGone(_ id: Int64) {
        pthread_mutex_lock(mutex)
        if lease == id { lease = nil }
        let tickets = holds.filter { $0.value.lease == id }.compactMap(\.value.ticket)
        holds = holds.filter { $0.value.lease != id }
        pthread_mutex_unlock(mutex)
        for ticket in tickets { ticket.report(.lost) }
    }

    func hold(_ id: UInt64, key: String, revision: Int64, lease: Int64) {
        pthread_mutex_lock(mutex)
        holds[id] = (key, revision, lease, nil)
        pthread_mutex_unlock(mutex)
    }

    /// Reports to `ticket` what the keep-alives find of the hold `id`: lost at once if it was
    /// already found gone.
    func watch(_ id: UInt64, _ ticket: HoldTicket) {
        pthread_mutex_lock(mutex)
        let known = holds[id] != nil
        if known { holds[id]?.ticket = ticket }
        pthread_mutex_unlock(mutex)
        if !known { ticket.report(.lost) }
    }

    func drop(_ id: UInt64) {
        pthread_mutex_lock(mutex)
        holds[id] = nil
        pthread_mutex_unlock(mutex)
    }

    /// Deletes `key` in the background, retrying while the server does not answer (an attempt
    /// whose answer never came, or a wait given up).
    func abandon(_ key: String) {
        pthread_mutex_lock(mutex)
        abandoned.append((key, 0, false))
        startIfNeeded()
        pthread_cond_signal(wake)
        pthread_mutex_unlock(mutex)
    }

    /// Under `mutex`.
    private func startIfNeeded() {
        if started { return }
        started = true
        var thread = pthread_t()
        let me = Unmanaged.passRetained(self).toOpaque()  // (the keeper lives as long as the process)
        pthread_create(&thread, nil, { EtcdLeaseKeeper.run(Unmanaged<EtcdLeaseKeeper>.fromOpaque($0!).takeUnretainedValue()); return nil }, me)
        pthread_detach(thread)
    }

    private static func run(_ keeper: EtcdLeaseKeeper) {
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)
        while true { keeper.step() }
    }

    private func step() {
        pthread_mutex_lock(mutex)
        let now = monotonicNow()
        let keepAlive = lease != nil && due <= now ? lease : nil
        let deleting = abandoned.filter { $0.due <= now }.map(\.key)
        if keepAlive == nil && deleting.isEmpty {
            let next = ((lease != nil ? [due] : []) + abandoned.map(\.due)).min()
            if let next {
                var until = timespec(tv_sec: Int(next / 1_000_000_000), tv_nsec: Int(next % 1_000_000_000))
                pthread_cond_timedwait(wake, mutex, &until)
            } else {
                pthread_cond_wait(wake, mutex)
            }
            pthread_mutex_unlock(mutex)
            return
        }
        if keepAlive != nil { due = now + backend.renewalNanoseconds }
        for i in abandoned.indices where abandoned[i].due <= now { abandoned[i].due = now + Self.retryNanoseconds }
        pthread_mutex_unlock(mutex)
        for key in deleting {
            if case .success = client.call("/v3/kv/deleterange", EtcdRequest.delete(key),
                                           deadline: Deadline.after(nanoseconds: backend.address.ioTimeout)) {
                // Deleted: once more 2 x connect_timeout later, in case the attempt's request was still on its way.
                pthread_mutex_lock(mutex)
                let again = monotonicNow() + 2 * backend.address.ioTimeout
                abandoned = abandoned.compactMap { $0.key != key ? $0 : $0.again ? nil : (key, again, true) }
                pthread_mutex_unlock(mutex)
            }
        }
        guard let id = keepAlive else { return }
        let deadline = Deadline.after(nanoseconds: min(backend.address.ioTimeout, backend.renewalNanoseconds))
        let outcome = client.call("/v3/lease/keepalive", "{\"ID\":\"\(id)\"}", deadline: deadline)
        let event: DistributedLockEvent
        switch outcome {
        case .success(let answer):
            let ttl = (answer["result"] ?? answer)["TTL"]?.integer ?? 0
            if ttl <= 0 { leaseGone(id); return }
            event = .resumed
        case .failure(let fault) where fault.message.contains("requested lease not found"):
            leaseGone(id)
            return
        case .failure: event = .suspended
        }
        pthread_mutex_lock(mutex)
        let current = holds.filter { $0.value.lease == id }
        pthread_mutex_unlock(mutex)
        for hold in current.values { hold.ticket?.report(event) }
        if event != .resumed || current.isEmpty { return }
        // The held keys, in one request: a key gone (broken) is a hold lost.
        let ids = Array(current.keys)
        let request = EtcdRequest.txn(compare: [], success: ids.map { EtcdRequest.op("request_range", EtcdRequest.range(current[$0]!.key)) })
        guard case .success(let answer) = client.call("/v3/kv/txn", request, deadline: deadline) else { return }
        let ranges = answer.txnRanges
        guard ranges.count == ids.count else { return }
        var gone: [HoldTicket] = []
        pthread_mutex_lock(mutex)
        for (i, id) in ids.enumerated() where ranges[i].first?.createRevision != current[id]!.revision {
            if let hold = holds[id], hold.revision == current[id]!.revision {
                holds[id] = nil
                if let ticket = hold.ticket { gone.append(ticket) }
            }
        }
        pthread_mutex_unlock(mutex)
        for ticket in gone { ticket.report(.lost) }
    }
}
