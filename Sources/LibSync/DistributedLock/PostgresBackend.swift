import Glibc
import Synchronization

// The PostgreSQL backend: a session advisory lock, `pg_advisory_lock(key)`, on the key
// `stableHash(name)` (FNV-1a 64 of the lock name, as a signed bigint). Two names whose hashes
// collide (about n^2 / 2^65 for n names) share one lock: they exclude each other, never less.
//
// Each process's side of an object has its own connection (session). The server releases the
// lock when the session ends, so a holder that dies (its socket closes) loses it at once, with
// no stale detection; a held lock whose object goes away without releasing stays held until the
// process ends (its connection is kept open). A holder whose connection breaks (the server
// restarted, the network failed) has lost the lock: its release says ESTALE.
//
//   try      SELECT CASE WHEN pg_try_advisory_lock(k) THEN nextval('public.libsync_fencing_token') END,
//                   set_config('application_name', '<holder>', false)        one round trip
//   wait     SET lock_timeout = <slice>; SELECT nextval(...), set_config(...)
//                   FROM (SELECT pg_advisory_lock(k)) AS granted
//            the server queues the waiter and answers when the lock is granted (no polling); a
//            slice ends with SQLSTATE 55P03 and the next begins (slices bound how long a stopped
//            server goes unnoticed); an interruptible wait's request stays queued between its
//            50 ms calls (`queued`), until granted, its slice ends, or it is withdrawn
//   release  SELECT pg_advisory_unlock(k)                                     one round trip
//   holder   pg_locks joined with pg_stat_activity: the holder's application_name,
//            `libsync <pid> <start> <acquired ms> <host>`
//   break    pg_terminate_backend(<the holder's backend pid>)
//
// Fencing tokens come from the sequence `public.libsync_fencing_token` (made on first use; one per
// database, schema-qualified so that no role's search_path finds another one): nextval is
// strictly increasing across all sessions, and durable: a nextval that logs ahead is flushed
// with its transaction's commit, which each session makes synchronous (synchronous_commit `off`
// is raised to `local`), so a server restarted after a crash never hands out an old one.

/// libpq's functions (libpq-fe.h), loaded on first use.
struct LibPQ: @unchecked Sendable {
    typealias Conn = OpaquePointer
    typealias Result = OpaquePointer
    let connectStartParams: @convention(c) (UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<UnsafePointer<CChar>?>?, Int32) -> Conn?
    let connectPoll: @convention(c) (Conn?) -> Int32
    let finish: @convention(c) (Conn?) -> Void
    let status: @convention(c) (Conn?) -> Int32
    let errorMessage: @convention(c) (Conn?) -> UnsafeMutablePointer<CChar>?
    let socket: @convention(c) (Conn?) -> Int32
    let sendQuery: @convention(c) (Conn?, UnsafePointer<CChar>?) -> Int32
    let consumeInput: @convention(c) (Conn?) -> Int32
    let isBusy: @convention(c) (Conn?) -> Int32
    let getResult: @convention(c) (Conn?) -> Result?
    let resultStatus: @convention(c) (Result?) -> Int32
    let resultErrorField: @convention(c) (Result?, Int32) -> UnsafeMutablePointer<CChar>?
    let ntuples: @convention(c) (Result?) -> Int32
    let nfields: @convention(c) (Result?) -> Int32
    let getvalue: @convention(c) (Result?, Int32, Int32) -> UnsafeMutablePointer<CChar>?
    let getisnull: @convention(c) (Result?, Int32, Int32) -> Int32
    let clear: @convention(c) (Result?) -> Void
    let setNoticeProcessor: @convention(c) (Conn?, (@convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?) -> Void)?, UnsafeMutableRawPointer?) -> OpaquePointer?

    // libpq's enumerations
    static let connectionOK: Int32 = 0, connectionBad: Int32 = 1, pollingFailed: Int32 = 0, pollingReading: Int32 = 1,
               pollingWriting: Int32 = 2, pollingOK: Int32 = 3
    static let commandOK: Int32 = 1, tuplesOK: Int32 = 2
    static let sqlstateField = Int32(UInt8(ascii: "C"))

    /// libpq, or why it cannot be loaded (naming the Debian package). LIBSYNC_LIBPQ names
    /// another file to load instead of libpq.so.5.
    static let loaded: (LibPQ?, String) = {
        let (library, why) = ClientLibrary.open(["libpq.so.5"], override: "LIBSYNC_LIBPQ")
        let missing = "libpq, PostgreSQL's C client library, cannot be loaded (\(why)): install it with `apt install libpq5`"
        guard let library else { return (nil, missing) }
        guard let connectStartParams = library.function("PQconnectStartParams", type(of: LibPQ.placeholder.connectStartParams)),
              let connectPoll = library.function("PQconnectPoll", type(of: LibPQ.placeholder.connectPoll)),
              let finish = library.function("PQfinish", type(of: LibPQ.placeholder.finish)),
              let status = library.function("PQstatus", type(of: LibPQ.placeholder.status)),
              let errorMessage = library.function("PQerrorMessage", type(of: LibPQ.placeholder.errorMessage)),
              let socket = library.function("PQsocket", type(of: LibPQ.placeholder.socket)),
              let sendQuery = library.function("PQsendQuery", type(of: LibPQ.placeholder.sendQuery)),
              let consumeInput = library.function("PQconsumeInput", type(of: LibPQ.placeholder.consumeInput)),
              let isBusy = library.function("PQisBusy", type(of: LibPQ.placeholder.isBusy)),
              let getResult = library.function("PQgetResult", type(of: LibPQ.placeholder.getResult)),
              let resultStatus = library.function("PQresultStatus", type(of: LibPQ.placeholder.resultStatus)),
              let resultErrorField = library.function("PQresultErrorField", type(of: LibPQ.placeholder.resultErrorField)),
              let ntuples = library.function("PQntuples", type(of: LibPQ.placeholder.ntuples)),
              let nfields = library.function("PQnfields", type(of: LibPQ.placeholder.nfields)),
              let getvalue = library.function("PQgetvalue", type(of: LibPQ.placeholder.getvalue)),
              let getisnull = library.function("PQgetisnull", type(of: LibPQ.placeholder.getisnull)),
              let clear = library.function("PQclear", type(of: LibPQ.placeholder.clear)),
              let setNoticeProcessor = library.function("PQsetNoticeProcessor", type(of: LibPQ.placeholder.setNoticeProcessor))
        else { return (nil, "\(library.soname) lacks a libpq function libsync needs: install Debian's libpq5 (`apt install libpq5`)") }
        return (LibPQ(connectStartParams: connectStartParams, connectPoll: connectPoll, finish: finish, status: status,
                      errorMessage: errorMessage, socket: socket, sendQuery: sendQuery, consumeInput: consumeInput,
                      isBusy: isBusy, getResult: getResult, resultStatus: resultStatus,
                      resultErrorField: resultErrorField, ntuples: ntuples, nfields: nfields, getvalue: getvalue,
                      getisnull: getisnull, clear: clear, setNoticeProcessor: setNoticeProcessor), "")
    }()

    /// Only for its members' types.
    private static let placeholder = LibPQ(
        connectStartParams: { _, _, _ in nil }, connectPoll: { _ in 0 }, finish: { _ in }, status: { _ in 0 },
        errorMessage: { _ in nil }, socket: { _ in -1 }, sendQuery: { _, _ in 0 }, consumeInput: { _ in 0 },
        isBusy: { _ in 0 }, getResult: { _ in nil }, resultStatus: { _ in 0 }, resultErrorField: { _, _ in nil },
        ntuples: { _ in 0 }, nfields: { _ in 0 }, getvalue: { _, _, _ in nil }, getisnull: { _, _, _ in 0 }, clear: { _ in },
        setNoticeProcessor: { _, _, _ in nil })
}

struct PostgresBackend: LockBackend {
    let name: String
    /// The URL handed to libpq: the target without the parameters libpq does not know.
    let conninfo: String
    let lockName: String
    let key: Int64
    /// How long connecting, or waiting for any answer, may take (the URL's connect_timeout).
    let ioTimeout: Int64
    let libpq: LibPQ
    /// Shared mode (the read side of DistributedReadWriteLock): `pg_advisory_lock_shared` on the
    /// same key, which every exclusive lock of it excludes.
    var shared = false
    /// The advisory lock functions' suffix for `shared`.
    var modeSuffix: String { shared ? "_shared" : "" }
    var waitsInStore: Bool { true }
    var queuesAsyncWaits: Bool { true }
    var firstPollNanoseconds: Int64? { nil }

    /// `postgresql://user[:password]@host[:port]/db?lock=NAME[&connect_timeout=S][&libpq options]`.
    static func make(url: String) -> ((any LockBackend)?, Int32) {
        let (parsed, why) = LockURL.parse(url)
        guard let parsed else { return (nil, DistributedLockMessage.fail(EINVAL, "bad PostgreSQL URL '\(LockURL.redacted(url))': \(why)")) }
        guard let name = parsed.value("lock"), !name.isEmpty else {
            return (nil, DistributedLockMessage.fail(EINVAL, "the PostgreSQL URL '\(LockURL.redacted(url))' names no lock: add ?lock=NAME"))
        }
        var timeout: Int64 = 5_000_000_000
        if let text = parsed.value("connect_timeout") {
            guard let value = Int(text), value >= 1 else {
                return (nil, DistributedLockMessage.fail(EINVAL, "connect_timeout=\(text) in '\(LockURL.redacted(url))' is not a whole number of seconds >= 1"))
            }
            timeout = Int64(min(value, 86_400)) * 1_000_000_000
        }
        let (loaded, missing) = LibPQ.loaded
        guard let libpq = loaded else { return (nil, DistributedLockMessage.fail(ELIBACC, missing)) }
        // libpq refuses parameters it does not know: `lock` is ours.
        var conninfo = String(url.prefix { $0 != "?" })
        let kept = url.drop { $0 != "?" }.dropFirst().split(separator: "&").filter { !$0.hasPrefix("lock=") && $0 != "lock" }
        if !kept.isEmpty { conninfo += "?" + kept.joined(separator: "&") }
        return (PostgresBackend(name: LockURL.redacted(url), conninfo: conninfo, lockName: name,
                                key: Int64(bitPattern: stableHash(name)), ioTimeout: timeout, libpq: libpq), 0)
    }

    func makeSession(_ me: ProcessIdentity) -> any LockSession { PostgresSession(self, me) }

    /// The pg_locks condition for this lock's bigint key (high half in classid, low in objid).
    var lockRow: String {
        let bits = UInt64(bitPattern: key)
        return "l.locktype = 'advisory' AND l.classid = \(bits >> 32) AND l.objid = \(bits & 0xffff_ffff) AND l.objsubid = 1 AND l.granted"
            + " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    }
}

final class PostgresSession: LockSession {
    private let backend: PostgresBackend
    private let me: ProcessIdentity
    private var libpq: LibPQ { backend.libpq }
    private var conn: OpaquePointer?
    /// `conn`'s socket, as registered with `InheritedSockets`.
    private(set) var socketNumber: Int32 = -1
    private var held = false
    var token: UInt64 = 0
    /// Who to tell that the hold is lost, and the watch of its socket (HoldWatcher).
    private var ticket: HoldTicket?
    private var watching: UInt64?

    init(_ backend: PostgresBackend, _ me: ProcessIdentity) {
        self.backend = backend
        self.me = me
    }

    /// What a query came to.
    enum Outcome {
        /// The last result's first row (NULL: nil; no row: empty).
        case rows([String?])
        /// The server refused it: SQLSTATE and message.
        case refused(String, String)
        /// No answer: the connection broke (errno EIO), the deadline passed (ETIMEDOUT), or a
        /// signal handler ran (EINTR); the connection is closed.
        case lost(Int32, String)
    }

    // MARK: Connection

    /// Whether the session has a connection (a semaphore's permit session asks: DistributedSemaphore.swift).
    var isConnected: Bool { conn != nil }

    func open() -> Int32 {
        withdraw()
        return connect(deadline: -1, interruptible: false)
    }

    private var server: String { "the PostgreSQL server" }

    /// Connects unless connected: 0, or ECONNREFUSED, EACCES, EINVAL, EIO, ETIMEDOUT (the
    /// deadline passed), EINTR (interruptible).
    func connect(deadline: Int64, interruptible: Bool) -> Int32 {
        if conn != nil { return 0 }
        let limit = Deadline.earliest(deadline, Deadline.after(nanoseconds: backend.ioTimeout))
        let io = String(backend.ioTimeout / 1_000_000_000)
        let pairs = [("keepalives", "1"), ("keepalives_idle", io), ("keepalives_interval", "1"),
                     ("keepalives_count", "3"), ("tcp_user_timeout", String(backend.ioTimeout / 1_000_000)),
                     ("application_name", "libsync"), ("dbname", backend.conninfo)]
        let keys = pairs.map { strdup($0.0) }, values = pairs.map { strdup($0.1) }
        defer { (keys + values).forEach { free($0) } }
        let made = (keys.map { UnsafePointer($0) } + [nil]).withUnsafeBufferPointer { k in
            (values.map { UnsafePointer($0) } + [nil]).withUnsafeBufferPointer { v in
                libpq.connectStartParams(k.baseAddress, v.baseAddress, 1)
            }
        }
        guard let made else { return DistributedLockMessage.fail(ENOMEM, "out of memory connecting to \(server)") }
        // libpq refuses bad options (and fails a Unix socket's connect) before there is a socket
        // to wait on: CONNECTION_BAD at once, or no socket.
        var polling = libpq.status(made) == LibPQ.connectionBad || libpq.socket(made) < 0 ? LibPQ.pollingFailed : LibPQ.pollingWriting
        while polling != LibPQ.pollingOK {
            if polling != LibPQ.pollingReading && polling != LibPQ.pollingWriting {
                let message = libpq.errorMessage(made).map { String(cString: $0) } ?? "unknown error"
                libpq.finish(made)
                let code = Self.classify(message)
                if code == EINVAL { return DistributedLockMessage.fail(EINVAL, "libpq refuses the URL '\(backend.name)': \(trimmed(message))") }
                return DistributedLockMessage.fail(code, "cannot connect to \(server) of \(backend.name): \(trimmed(message))")
            }
            let ready = waitForSocket(libpq.socket(made), writable: polling == LibPQ.pollingWriting, deadline: limit, interruptible: interruptible)
            if ready != 0 {
                libpq.finish(made)
                if ready == ETIMEDOUT && !Deadline.hasPassed(deadline) {
                    return DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server) of \(backend.name): no answer within \(io) s (connect_timeout)")
                }
                return DistributedLockMessage.fail(ready, ready == ETIMEDOUT ? "timed out connecting to \(server)" : "interrupted connecting to \(server)")
            }
            polling = libpq.connectPoll(made)
        }
        _ = libpq.setNoticeProcessor(made, { _, _ in }, nil)  // (the server's notices are not for stderr)
        conn = made
        socketNumber = libpq.socket(made)
        InheritedSockets.register(socketNumber)
        // The server's side of the session probes a silent client after connect_timeout too (its
        // default is the system's, 2 hours): a holder whose host died or was cut off loses the
        // lock within about connect_timeout + 3 s, not hours. (Ignored over a Unix socket.)
        let keepalives = "SET tcp_keepalives_idle = \(max(1, backend.ioTimeout / 1_000_000_000)); SET tcp_keepalives_interval = 1; "
            + "SET tcp_keepalives_count = 3; SET tcp_user_timeout = \(backend.ioTimeout / 1_000_000)"
        var set = run(keepalives, deadline: limit, interruptible: interruptible)
        if case .refused = set { set = .rows([]) }  // (a server too old for a setting keeps its default)
        // A token's nextval is durable only once its transaction's commit is flushed, which
        // synchronous_commit=off (the server's, the role's or the URL's setting) skips: a crash
        // would then hand out tokens again. The session raises `off` to `local` (a local flush at
        // each commit that logged a sequence value, every 32 tokens; stronger settings stay).
        if case .rows = set { set = run(durableCommits, deadline: limit, interruptible: interruptible) }
        if case .rows = set { return 0 }
        if case .refused = set { disconnect() }  // (never used without durable tokens)
        let code = failure(set, "connecting to \(server)")
        return code == ETIMEDOUT && !Deadline.hasPassed(deadline)
            ? DistributedLockMessage.fail(ECONNREFUSED, "cannot connect to \(server) of \(backend.name): no answer within \(io) s (connect_timeout)")
            : code
    }

    /// The errno for libpq's connection failure message.
    private static func classify(_ message: String) -> Int32 {
        let text = message.lowercased()
        if ["invalid uri", "invalid connection option", "missing \"=\"", "invalid integer value", "invalid port",
            "unterminated quoted string", "invalid percent-encoded", "invalid sslmode", "invalid gssencmode",
            "invalid target_session_attrs", "invalid load_balance_hosts", "invalid channel_binding", "invalid require_auth",
            "invalid ssl_min_protocol_version", "invalid ssl_max_protocol_version", "invalid sslnegotiation",
            "invalid value for parameter", "sslmode value"].contains(where: text.contains) { return EINVAL }
        if ["authentication failed", "no password supplied", "does not exist", "permission denied", "pg_hba.conf",
            "password authentication"].contains(where: text.contains) { return EACCES }
        if ["could not connect", "connection refused", "could not translate host name", "timeout expired",
            "no route to host", "network is unreachable", "connection timed out", "server closed the connection",
            "no such file or directory"].contains(where: text.contains) {
            return ECONNREFUSED
        }
        return EIO
    }

    private func disconnect() {
        if held { ticket?.report(.lost) }  // the session, and its lock, ends with the connection
        unwatch()
        if let conn {
            InheritedSockets.unregister(socketNumber)
            libpq.finish(conn)
        }
        conn = nil
        queued = nil
    }

    // MARK: Queries

    /// Sends `sql` (one or more statements) and collects the answer until `deadline`.
    func run(_ sql: String, deadline: Int64, interruptible: Bool = false) -> Outcome {
        guard let conn else { return .lost(EIO, "not connected") }
        if libpq.sendQuery(conn, sql) == 0 { return broken() }
        var answer = Answer()
        return collect(&answer, deadline: deadline, interruptible: interruptible, keep: false)!
    }

    /// The part of an answer collected so far.
    private struct Answer {
        var rows: [String?] = []
        var refusal: (String, String)?
    }

    /// Collects the answer to the request in flight until `deadline`. When the deadline passes
    /// or a signal handler runs (`interruptible`): with `keep`, nil, the request still in
    /// flight and `answer` holding what came so far; else the request is abandoned (the
    /// connection closed: the server ends the session, and any lock it took) and `.lost`.
    private func collect(_ answer: inout Answer, deadline: Int64, interruptible: Bool, keep: Bool) -> Outcome? {
        guard let conn else { return .lost(EIO, "not connected") }
        while true {
            while libpq.isBusy(conn) != 0 {
                let ready = waitForSocket(libpq.socket(conn), deadline: deadline, interruptible: interruptible)
                if ready != 0 {
                    if keep && (ready == ETIMEDOUT || ready == EINTR) { return nil }
                    disconnect()  // abandons the request: the server ends the session (and any lock it took)
                    return .lost(ready, ready == ETIMEDOUT ? "\(server) did not answer in time" : "interrupted")
                }
                if libpq.consumeInput(conn) == 0 { return broken() }
            }
            guard let result = libpq.getResult(conn) else { break }
            let status = libpq.resultStatus(result)
            if status == LibPQ.tuplesOK {
                answer.rows = libpq.ntuples(result) == 0 ? [] : (0..<libpq.nfields(result)).map { f in
                    libpq.getisnull(result, 0, f) != 0 ? nil : libpq.getvalue(result, 0, f).map { String(cString: $0) }
                }
            } else if status != LibPQ.commandOK && answer.refusal == nil {
                let state = libpq.resultErrorField(result, LibPQ.sqlstateField).map { String(cString: $0) } ?? ""
                answer.refusal = (state, trimmed(libpq.errorMessage(conn).map { String(cString: $0) } ?? "error"))
            }
            libpq.clear(result)
        }
        if let (state, message) = answer.refusal {
            if state.isEmpty || state.hasPrefix("08") || state.hasPrefix("57P") { return broken(message) }  // connection or shutdown
            return .refused(state, message)
        }
        return .rows(answer.rows)
    }

    /// An interruptible wait's request still in flight between calls (it keeps its place in
    /// the server's queue): what came of it so far, and by when the server answers it (its
    /// lock_timeout ends).
    private var queued: (answer: Answer, answersBy: Int64)?

    func withdrawWait() { withdraw() }

    /// Withdraws a queued wait request: the session is closed (the server ends it, with any lock
    /// the request took), so that the request never takes the lock for nobody.
    private func withdraw() {
        guard queued != nil else { return }
        queued = nil
        disconnect()
    }

    private func broken(_ message: String? = nil) -> Outcome {
        let text = message ?? trimmed(conn.flatMap { libpq.errorMessage($0) }.map { String(cString: $0) } ?? "connection lost")
        disconnect()
        return .lost(EIO, "the connection to \(server) broke: \(text)")
    }

    /// `outcome`'s errno, with its message recorded (0 for rows).
    private func failure(_ outcome: Outcome, _ doing: String) -> Int32 {
        switch outcome {
        case .rows: return 0
        case .refused(let state, let message):
            return DistributedLockMessage.fail(state == "42501" ? EACCES : EIO, "\(doing) on \(server): \(message) (SQLSTATE \(state))")
        case .lost(let code, let message): return DistributedLockMessage.fail(code, "\(doing): \(message)")
        }
    }

    private var ioDeadline: Int64 { Deadline.after(nanoseconds: backend.ioTimeout) }

    /// Makes this session's commits durable (see `connect`).
    private let durableCommits = "SELECT set_config('synchronous_commit', 'local', false) WHERE current_setting('synchronous_commit') = 'off'"

    /// Schema-qualified: one sequence per database, whatever a role's search_path says.
    private let tokenSequence = "public.libsync_fencing_token"

    /// The host name as application_name carries it (letters, digits, '.', '-', '_').
    private lazy var hostForName = me.host.filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == "_") }
    private lazy var tryStatement = "SELECT CASE WHEN pg_try_advisory_lock\(backend.modeSuffix)(\(backend.key)) THEN nextval('\(tokenSequence)') END, "
    // (a subquery with a volatile target list is evaluated first, never flattened)
    private lazy var waitStatement = "SELECT nextval('\(tokenSequence)'), "
    private lazy var waitStatementEnd = " FROM (SELECT pg_advisory_lock\(backend.modeSuffix)(\(backend.key))) AS granted"
    private lazy var releaseStatement = "SELECT pg_advisory_unlock\(backend.modeSuffix)(\(backend.key))"

    /// Sets this process as the holder's application_name: `libsync <pid> <start> <acquired ms>
    /// <host>` (63 bytes at most).
    private func holderName() -> String {
        let head = "libsync \(me.pid) \(me.start) \(wallClockNanoseconds() / 1_000_000) "
        return "set_config('application_name', '" + head + hostForName.prefix(max(0, 63 - head.utf8.count)) + "', false)"
    }

    /// The acquire statement: a try, or a wait (`try` false); with the token and the holder's name.
    private func acquireStatement(try: Bool) -> String {
        `try` ? tryStatement + holderName() : waitStatement + holderName() + waitStatementEnd
    }

    /// After an acquire statement: 0 (held), EBUSY (try: not acquired), `retry` (the sequence
    /// was missing and is made now), or an errno.
    private func acquired(_ outcome: Outcome, _ doing: String) -> Int32? {
        switch outcome {
        case .rows(let rows):
            guard let value = rows.first ?? nil else { return EBUSY }
            guard let token = UInt64(value) else { return DistributedLockMessage.fail(EIO, "\(doing): bad token '\(value)' from \(server)") }
            (self.token, held) = (token, true)
            return 0
        case .refused("42P01", _):  // no sequence yet: make it (any lock the statement took goes)
            let made = run("SELECT pg_advisory_unlock_all(); CREATE SEQUENCE IF NOT EXISTS \(tokenSequence)", deadline: ioDeadline)
            if case .refused(let state, let message) = made {
                // Two sessions making it at once: IF NOT EXISTS does not serialize them, and the
                // later one fails on the catalog's unique index (23505) or as a duplicate (42P07).
                // The sequence exists then: try again.
                if state == "23505" || state == "42P07" { return nil }
                if state == "42501" {
                    let user = currentUser()
                    return DistributedLockMessage.fail(EACCES,
                        "\(server) has no sequence \(tokenSequence) for fencing tokens, and the role \(user) may not make it (\(message)): "
                        + "run once, as a role that may create in schema public: `CREATE SEQUENCE \(tokenSequence); "
                        + "GRANT USAGE ON SEQUENCE \(tokenSequence) TO \(user);`")
                }
                return DistributedLockMessage.fail(EIO, "\(doing): \(server) cannot make the sequence \(tokenSequence): \(message) (SQLSTATE \(state))")
            }
            return failure(made, doing) == 0 ? nil : failure(made, doing)
        case .refused("42501", let message):  // the sequence may not be used (a lock the try took goes)
            let user = currentUser()
            return DistributedLockMessage.fail(EACCES,
                "the role \(user) may not use the sequence \(tokenSequence) of the fencing tokens (\(message)): "
                + "run once, as its owner or a superuser: `GRANT USAGE ON SEQUENCE \(tokenSequence) TO \(user);`")
        default:
            return failure(outcome, doing)
        }
    }

    /// Releases any lock a failed acquire statement took (the session holds none then) and
    /// returns the session's role, quoted as SQL needs it ("<role>" if the server does not say).
    private func currentUser() -> String {
        if case .rows(let row) = run("SELECT pg_advisory_unlock_all(); SELECT quote_ident(current_user)", deadline: ioDeadline),
           let user = row.first ?? nil {
            return user
        }
        return "<role>"
    }

    // MARK: LockSession

    /// A try is one round trip, awaited up to connect_timeout whatever `deadline` says: with no
    /// time left (a timeout of 0, a deadline passed) it still takes a free lock. `deadline` only
    /// says which error a server that does not answer gives (ETIMEDOUT once it passed, else EIO).
    /// Inside an interruptible call (`InterruptibleCall`), a signal handler ends it with EINTR
    /// (abandoning the request: the session ends, and any lock it took).
    /// While an interruptible wait's request is queued (between its calls), an interruptible
    /// call's try looks at its answer without waiting: EBUSY while it is still queued and the
    /// deadline has not passed; any other try withdraws it first.
    func tryAcquire(deadline: Int64) -> Int32 {
        let interruptible = InterruptibleCall.isActive
        if let code = lookAtQueued(deadline: deadline, keeping: interruptible) { return code }
        for attempt in 0..<3 {
            let reconnected = conn == nil
            let code = connect(deadline: -1, interruptible: interruptible)
            if code != 0 { return code }
            let outcome = run(acquireStatement(try: true), deadline: ioDeadline, interruptible: interruptible)
            if case .lost(EINTR, _) = outcome { return DistributedLockMessage.fail(EINTR, "acquire: interrupted waiting for \(server)") }
            if case .lost(ETIMEDOUT, _) = outcome {
                if Deadline.hasPassed(deadline) {
                    return DistributedLockMessage.fail(ETIMEDOUT, "timed out waiting for the lock \(backend.name): \(server) did not answer")
                }
                return DistributedLockMessage.fail(EIO, "\(server) did not answer within \(backend.ioTimeout / 1_000_000_000) s (connect_timeout)")
            }
            if case .lost(EIO, _) = outcome, !reconnected, attempt == 0 { continue }  // an old connection broke: once more, afresh
            if let code = acquired(outcome, "acquire") { return code }
        }
        return DistributedLockMessage.fail(EIO, "acquire: \(server) keeps failing")
    }

    /// The queued request of an interruptible wait, if any, looked at without waiting (nil: none,
    /// or it ended without the lock and a try may follow): 0 (granted: held), EBUSY (still
    /// queued; kept if `keeping` and `deadline` has not passed, else withdrawn), or an errno.
    private func lookAtQueued(deadline: Int64, keeping: Bool) -> Int32? {
        guard var waiting = queued else { return nil }
        guard let conn, libpq.consumeInput(conn) != 0 else {
            disconnect()
            return nil
        }
        guard let outcome = collect(&waiting.answer, deadline: 0, interruptible: false, keep: true) else {
            if keeping && !Deadline.hasPassed(deadline) {
                queued = waiting
                return EBUSY
            }
            withdraw()
            return nil
        }
        queued = nil
        switch outcome {
        case .refused("55P03", _), .lost: return nil  // its slice ended, or the connection broke
        default: return acquired(outcome, "acquire").map { $0 == EBUSY ? EIO : $0 }
        }
    }

    /// An interruptible wait (`interruptible`) returns EINTR at least every 50 ms and when a
    /// signal handler runs, leaving its request queued in the server (`queued`): the next call
    /// goes on waiting for its answer, keeping its place, and a slice is as long as a plain
    /// wait's (connect_timeout at most), so the server logs one lock timeout per slice at most.
    func waitAcquire(deadline: Int64, interruptible: Bool) -> Int32 {
        if !interruptible { withdraw() }
        let sliceEnd = interruptible ? Deadline.after(nanoseconds: Deadline.interruptSlice) : Deadline.none
        while true {
            let now = monotonicNow()
            if Deadline.hasPassed(deadline, now: now) {
                withdraw()
                return ETIMEDOUT
            }
            if interruptible && now >= sliceEnd { return EINTR }
            if queued == nil {
                let connectBy = Deadline.earliest(deadline, sliceEnd)
                let connected = connect(deadline: connectBy, interruptible: interruptible)
                if connected == ETIMEDOUT && interruptible && !Deadline.hasPassed(deadline) { return EINTR }
                if connected != 0 { return connected }
                guard sendWait(deadline: deadline, now: now) else { continue }  // (broken: connect again)
            }
            guard var waiting = queued else { continue }
            let answerBy = waiting.answersBy + backend.ioTimeout
            let until = Deadline.earliest(Deadline.earliest(answerBy, deadline), sliceEnd)
            guard let outcome = collect(&waiting.answer, deadline: until, interruptible: interruptible, keep: interruptible) else {
                queued = waiting
                let now = monotonicNow()
                if now >= answerBy {
                    withdraw()
                    return DistributedLockMessage.fail(EIO, "\(server) did not answer within \(backend.ioTimeout / 1_000_000_000) s (connect_timeout)")
                }
                if Deadline.hasPassed(deadline, now: now) {
                    let late = now >= waiting.answersBy
                    withdraw()
                    return late ? DistributedLockMessage.fail(ETIMEDOUT, "timed out waiting for the lock \(backend.name): \(server) did not answer") : ETIMEDOUT
                }
                return EINTR  // the slice's end or a signal: the request stays queued
            }
            queued = nil
            switch outcome {
            case .refused("55P03", _): continue  // the slice ended
            case .lost(ETIMEDOUT, _):
                if Deadline.hasPassed(deadline) {
                    return DistributedLockMessage.fail(ETIMEDOUT, "timed out waiting for the lock \(backend.name): \(server) did not answer")
                }
                return DistributedLockMessage.fail(EIO, "\(server) did not answer within \(backend.ioTimeout / 1_000_000_000) s (connect_timeout)")
            case .lost(EINTR, _): return EINTR
            case .lost: continue  // the connection broke (a restart?): connect again
            default:
                if let code = acquired(outcome, "acquire") { return code == EBUSY ? EIO : code }
            }
        }
    }

    /// Queues a wait request for one slice: the server answers when the lock is granted, or at
    /// the slice's end (connect_timeout at most). false: the connection broke.
    private func sendWait(deadline: Int64, now: Int64) -> Bool {
        let slice = min(Deadline.remaining(deadline, now: now) ?? backend.ioTimeout, backend.ioTimeout)
        let margin = min(slice / 4, 20_000_000)
        let milliseconds = max(1, (slice - margin) / 1_000_000)
        guard let conn, libpq.sendQuery(conn, "SET lock_timeout = \(milliseconds); " + acquireStatement(try: false)) != 0 else {
            _ = broken()
            return false
        }
        queued = (Answer(), now + slice)
        return true
    }

    func queueWait(deadline: Int64) -> Int32 {
        let now = monotonicNow()
        if Deadline.hasPassed(deadline, now: now) {
            withdraw()
            return ETIMEDOUT
        }
        if let waiting = queued, now >= waiting.answersBy + backend.ioTimeout {
            withdraw()
            return DistributedLockMessage.fail(EIO, "\(server) did not answer within \(backend.ioTimeout / 1_000_000_000) s (connect_timeout)")
        }
        if let code = lookAtQueued(deadline: deadline, keeping: true) { return code }
        for _ in 0..<2 {  // none queued (or its slice ended): queue one, on a fresh connection if it broke
            let connected = connect(deadline: deadline, interruptible: false)
            if connected != 0 { return connected }
            if sendWait(deadline: deadline, now: now) { return EBUSY }
        }
        return DistributedLockMessage.fail(EIO, "acquire: \(server) keeps failing")
    }

    func release() -> Int32 {
        guard held else { return EPERM }
        held = false
        unwatch()
        guard conn != nil else {
            return DistributedLockMessage.fail(ESTALE, "the lock \(backend.name) was lost: the connection to \(server) broke while it was held")
        }
        switch run(releaseStatement, deadline: ioDeadline) {
        case .rows(let row) where row.first == "t": return 0
        case .rows: return DistributedLockMessage.fail(ESTALE, "the lock \(backend.name) was lost: its session no longer held it")
        case .lost(_, let message):
            return DistributedLockMessage.fail(ESTALE, "the lock \(backend.name) was lost: \(message) (the server ends the session and its lock)")
        case .refused(_, let message):
            disconnect()  // ending the session releases the lock for sure
            return DistributedLockMessage.fail(ESTALE, "the lock \(backend.name) may have been lost: \(message); its session is closed")
        }
    }

    func recoverStale(deadline: Int64) -> Int32 {
        // The server releases a dead holder's lock itself: nothing is ever stale.
        let (holder, code) = holder()
        return code != 0 ? code : holder == nil ? ENOENT : EBUSY
    }

    func breakLock() -> Int32 {
        withdraw()
        let connected = connect(deadline: -1, interruptible: false)
        if connected != 0 { return connected }
        return failure(run("SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE \(backend.lockRow)", deadline: ioDeadline), "break")
    }

    func holder() -> (DistributedLockHolder?, Int32) {
        withdraw()
        let connected = connect(deadline: -1, interruptible: false)
        if connected != 0 { return (nil, connected) }
        let outcome = run("SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE \(backend.lockRow)",
                          deadline: ioDeadline)
        guard case .rows(let rows) = outcome else { return (nil, failure(outcome, "holder")) }
        guard !rows.isEmpty else { return (nil, 0) }
        let row = rows
        let fields = (row[0] ?? "").split(separator: " ", maxSplits: 4)
        if fields.count == 5, fields[0] == "libsync", let pid = Int32(fields[1]), let start = UInt64(fields[2]),
           let milliseconds = Int64(fields[3]) {
            let host = String(fields[4])
            return (DistributedLockHolder(host: host, pid: pid, processStart: start, acquired: .milliseconds(milliseconds),
                                          isOnThisHost: host == String(me.host.prefix(host.count)) && !host.isEmpty,
                                          isStale: false), 0)
        }
        // A session that is not libsync's (e.g. psql calling pg_advisory_lock on the same key).
        return (DistributedLockHolder(host: "(PostgreSQL backend \(row[1] ?? "?"), '\(row[0] ?? "")')", pid: 0, processStart: 0,
                                      acquired: .zero, isOnThisHost: false, isStale: false), 0)
    }

    func holds() -> Bool {
        guard held, conn != nil else { return false }
        let outcome = run("SELECT count(*) FROM pg_locks l WHERE l.pid = pg_backend_pid() AND \(backend.lockRow)", deadline: ioDeadline)
        if case .rows(let row) = outcome { return (row.first ?? nil).flatMap { Int($0) } ?? 0 > 0 }
        return false
    }

    func close(releasing: Bool) {
        if held && releasing { _ = release() }
        unwatch()  // (nobody is left to tell)
        if held { return }  // kept open: the lock outlives the object until the process ends
        disconnect()
    }

    /// The watcher polls the socket: its closing (the server ended the session) or failing (the
    /// kernel gave up on the connection) is the hold's loss.
    func watch(_ ticket: HoldTicket) {
        unwatch()
        self.ticket = ticket
        if conn != nil { watching = HoldWatcher.process.current().watch(.socket(socketNumber), ticket) }
    }

    private func unwatch() {
        if let watching { HoldWatcher.process.current().unwatch(watching) }
        (watching, ticket) = (nil, nil)
    }
}

private func trimmed(_ message: String) -> String {
    message.split(separator: "\n").map { $0.trimmingPrefix("FATAL:  ").trimmingPrefix("ERROR:  ") }
        .map(String.init).joined(separator: "; ")
}

/// The sockets of this process's PostgreSQL sessions, closed in a forked child at once: the
/// server keeps a session, and its locks, while any process has its socket open, so a child that
/// kept its parent's would keep the parent's lock held after the parent died. (The child never
/// uses its parent's sessions; closing its copy of the socket leaves the parent's intact.)
enum InheritedSockets {
    private static let capacity = 4096
    /// Slots of open session sockets (0: free; else the socket + 1), lock-free for the fork handler.
    nonisolated(unsafe) private static let slots: UnsafeMutablePointer<Atomic<Int32>> = {
        let slots = UnsafeMutablePointer<Atomic<Int32>>.allocate(capacity: capacity)
        for i in 0..<capacity { (slots + i).initialize(to: Atomic(0)) }
        pthread_atfork(nil, nil) { InheritedSockets.closeAll() }
        return slots
    }()

    static func register(_ socket: Int32) {
        guard socket >= 0 else { return }
        for i in 0..<capacity where slots[i].compareExchange(expected: 0, desired: socket + 1, ordering: .relaxed).exchanged {
            return
        }
        // (full: this socket is not closed in a child; the lock is still released when every process holding it ends)
    }

    static func unregister(_ socket: Int32) {
        guard socket >= 0 else { return }
        for i in 0..<capacity where slots[i].compareExchange(expected: socket + 1, desired: 0, ordering: .relaxed).exchanged {
            return
        }
    }

    /// In a forked child (async-signal-safe: atomics and close only).
    private static func closeAll() {
        for i in 0..<capacity {
            let value = slots[i].exchange(0, ordering: .relaxed)
            if value != 0 { close(value - 1) }
        }
    }
}
