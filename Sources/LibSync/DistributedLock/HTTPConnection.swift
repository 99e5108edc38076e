import Glibc

// HTTP/1.1 over a plain TCP socket, and the little JSON and base64 the etcd backend's messages
// need (the core does not use Foundation). Only what etcd's JSON gateway answers is handled:
// a status line, headers, and a body given by Content-Length or chunked.

/// A JSON value. Numbers keep their text (etcd writes its 64-bit integers as strings anyway).
enum JSONValue: Equatable {
    case object([String: JSONValue]), array([JSONValue]), string(String), number(String), bool(Bool), null

    subscript(_ key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// A string or a number holding an integer (etcd's int64 fields are strings).
    var integer: Int64? {
        switch self {
        case .string(let text), .number(let text): return Int64(text)
        default: return nil
        }
    }

    var bool: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    var array: [JSONValue] {
        if case .array(let items) = self { return items }
        return []
    }

    /// `text` as a JSON string literal.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// Parses one JSON value filling `bytes` (whitespace around it allowed); nil if malformed.
    static func parse<C: Collection<UInt8>>(_ bytes: C) -> JSONValue? {
        var parser = JSONParser(bytes: Array(bytes))
        guard let value = parser.value(depth: 0) else { return nil }
        parser.skipSpace()
        return parser.index == parser.bytes.count ? value : nil
    }
}

private struct JSONParser {
    let bytes: [UInt8]
    var index = 0

    mutating func skipSpace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    private mutating func literal(_ word: String) -> Bool {
        let utf8 = Array(word.utf8)
        guard index + utf8.count <= bytes.count, Array(bytes[index..<index + utf8.count]) == utf8 else { return false }
        index += utf8.count
        return true
    }

    mutating func value(depth: Int) -> JSONValue? {
        if depth > 64 { return nil }
        skipSpace()
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            index += 1
            var members: [String: JSONValue] = [:]
            skipSpace()
            if index < bytes.count && bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            while true {
                skipSpace()
                guard let key = string() else { return nil }
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index += 1
                guard let item = value(depth: depth + 1) else { return nil }
                members[key] = item
                skipSpace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                return nil
            }
        case UInt8(ascii: "["):
            index += 1
            var items: [JSONValue] = []
            skipSpace()
            if index < bytes.count && bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
            while true {
                guard let item = value(depth: depth + 1) else { return nil }
                items.append(item)
                skipSpace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
                return nil
            }
        case UInt8(ascii: "\""): return string().map { .string($0) }
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        default:
            let start = index
            while index < bytes.count, "+-0123456789.eE".utf8.contains(bytes[index]) { index += 1 }
            return index > start ? .number(String(decoding: bytes[start..<index], as: UTF8.self)) : nil
        }
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count, let value = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else { return nil }
        index += 4
        return value
    }

    mutating func string() -> String? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
        index += 1
        var out: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "\"") { return String(decoding: out, as: UTF8.self) }
            if byte != UInt8(ascii: "\\") { out.append(byte); continue }
            guard index < bytes.count else { return nil }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard var code = hex4() else { return nil }
                if (0xD800..<0xDC00).contains(code), index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                   bytes[index + 1] == UInt8(ascii: "u") {
                    index += 2
                    guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                }
                out.append(contentsOf: Array(String(Unicode.Scalar(code).map(Character.init) ?? "\u{FFFD}").utf8))
            default: return nil
            }
        }
        return nil
    }
}

enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode<C: Collection<UInt8>>(_ data: C) -> String {
        let bytes = Array(data)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let n = min(3, bytes.count - i)
            let b0 = UInt32(bytes[i]), b1 = n > 1 ? UInt32(bytes[i + 1]) : 0, b2 = n > 2 ? UInt32(bytes[i + 2]) : 0
            let word = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(word >> 18 & 63)])
            out.append(alphabet[Int(word >> 12 & 63)])
            out.append(n > 1 ? alphabet[Int(word >> 6 & 63)] : UInt8(ascii: "="))
            out.append(n > 2 ? alphabet[Int(word & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func encode(_ text: String) -> String { encode(text.utf8) }

    /// Each byte's value in `alphabet`, or 255.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 255, count: 256)
        for (value, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(value) }
        return table
    }()

    /// The bytes `text` encodes, or nil if it is not base64.
    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3 / 4)
        var word: UInt32 = 0, bits = 0
        let values = Self.values
        for byte in text.utf8 {
            if byte == UInt8(ascii: "=") { break }
            let value = values[Int(byte)]
            if value == 255 { return nil }
            word = word << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: word >> UInt32(bits)))
            }
        }
        return out
    }

    /// The UTF-8 text `text` encodes (nil if not base64).
    static func decodeText(_ text: String) -> String? { decode(text).map { String(decoding: $0, as: UTF8.self) } }
}

/// One HTTP/1.1 connection to a server (not thread-safe: its owner serializes its use). Its
/// socket is non-blocking, and every wait for the server (connecting, sending, the answer) is a
/// poll until a monotonic deadline: a signal handler never restarts a wait's time, and inside an
/// interruptible call (`InterruptibleCall`) a signal handler ends the wait with EINTR. A failed
/// exchange closes the connection (a late answer is never taken for the next request's).
final class HTTPConnection {
    let host: String, port: Int32
    /// How the server is named in messages ("the etcd server at host:port").
    let server: String
    /// TLS (`etcds://`), or nil: plain HTTP.
    let tls: TLSOptions?
    private(set) var fd: Int32 = -1
    /// The TLS session over `fd`, with `tls`.
    private var session: TLSSession?
    /// Bytes read past the last answer (or the stream's last line).
    private var buffer: [UInt8] = []
    /// While a streamed (chunked) answer is being read: the bytes left of the current chunk
    /// (-1: a chunk header comes next).
    private var chunkLeft = -1
    /// A streamed answer's decoded data not yet handed out as lines.
    private var streamed: [UInt8] = []
    /// What `recv` reads into (kept: a lock operation reads twice).
    private var scratch = [UInt8](repeating: 0, count: 16384)

    struct Fault: Error { let code: Int32, message: String }

    init(host: String, port: Int32, server: String, tls: TLSOptions? = nil) {
        self.host = host
        self.port = port
        self.server = server
        self.tls = tls
    }

    deinit { disconnect() }

    var isConnected: Bool { fd >= 0 }

    func disconnect() {
        session = nil
        if fd >= 0 { close(fd) }
        fd = -1
        buffer = []
        streamed = []
        chunkLeft = -1
    }

    /// Connects unless connected, by the monotonic `deadline`: 0; ECONNREFUSED (refused,
    /// unknown host, unreachable; with TLS: a failed handshake, such as a server certificate
    /// that does not verify); ETIMEDOUT (no answer by `deadline`); EINTR (a signal handler ran
    /// during an interruptible call); with TLS, ELIBACC (no libssl) and EINVAL (an options file
    /// libssl cannot read). The message is recorded in the fault's text.
    func connect(deadline: Int64) -> Fault? {
        if fd >= 0 { return nil }
        if let fault = connectSocket(deadline: deadline) { return fault }
        guard let tls else { return nil }
        switch TLSSession.make(tls, fd: fd, host: host) {
        case .failure(let fault):
            disconnect()
            return fault
        case .success(let made): session = made
        }
        while true {
            switch session!.handshake() {
            case .done: return nil
            case .wait(let writable):
                let ready = waitForSocket(fd, writable: writable, deadline: deadline, interruptible: InterruptibleCall.isActive)
                if ready == 0 { continue }
                disconnect()
                if ready == EINTR { return Fault(code: EINTR, message: "interrupted connecting to \(server)") }
                if ready == ETIMEDOUT { return Fault(code: ETIMEDOUT, message: "\(server) did not answer in time (TLS handshake)") }
                return Fault(code: ECONNREFUSED, message: "cannot connect to \(server): \(String(cString: strerror(ready)))")
            case .failed(let why):
                disconnect()
                return Fault(code: ECONNREFUSED, message: "cannot connect to \(server): \(why)")
            case .closed:  // (handshake() reports a close as a failure)
                disconnect()
                return Fault(code: ECONNREFUSED, message: "cannot connect to \(server): the TLS handshake failed")
            }
        }
    }

    /// The TCP connection of `connect`.
    private func connectSocket(deadline: Int64) -> Fault? {
        if fd >= 0 { return nil }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(host, String(port), &hints, &found)
        if resolved != 0 {
            return Fault(code: ECONNREFUSED, message: "cannot connect to \(server): \(String(cString: gai_strerror(resolved)))")
        }
        defer { freeaddrinfo(found) }
        var why = "no address"
        var item = found
        while let address = item {
            item = address.pointee.ai_next
            let s = socket(address.pointee.ai_family, address.pointee.ai_socktype | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                           address.pointee.ai_protocol)
            if s < 0 { why = String(cString: strerror(errno)); continue }
            var one: Int32 = 1
            _ = setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            _ = setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(s, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 { fd = s; return nil }
            if errno != EINPROGRESS { why = String(cString: strerror(errno)); close(s); continue }
            let ready = waitForSocket(s, writable: true, deadline: deadline, interruptible: InterruptibleCall.isActive)
            var refused: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            if ready == 0 && getsockopt(s, SOL_SOCKET, SO_ERROR, &refused, &size) != 0 { refused = errno }
            if ready == 0 && refused == 0 { fd = s; return nil }
            close(s)
            if ready == EINTR { return Fault(code: EINTR, message: "interrupted connecting to \(server)") }
            if ready == ETIMEDOUT { return Fault(code: ETIMEDOUT, message: "\(server) did not answer in time (connecting)") }
            why = String(cString: strerror(ready != 0 ? ready : refused))
        }
        return Fault(code: ECONNREFUSED, message: "cannot connect to \(server): \(why)")
    }

    /// The request's bytes: a POST of `body` (JSON) to `path`, with `headers`.
    private func request(_ path: String, _ body: String, _ headers: [(String, String)]) -> [UInt8] {
        var text = "POST \(path) HTTP/1.1\r\nHost: \(host.contains(":") ? "[\(host)]" : host):\(port)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "\r\n" + body
        return Array(text.utf8)
    }

    /// Sends a POST of `body` to `path` and reads the whole answer by `deadline` (monotonic ns),
    /// connecting first if need be: (status, body) or a fault: ETIMEDOUT (no answer in time),
    /// EINTR (a signal handler ran during an interruptible call), EIO (the connection broke), or
    /// connect's. After ETIMEDOUT, EINTR or EIO the request may still reach the server.
    func post(_ path: String, _ body: String, headers: [(String, String)] = [], deadline: Int64) -> Result<(Int, [UInt8]), Fault> {
        if let fault = connect(deadline: deadline) { return .failure(fault) }
        if let fault = send(request(path, body, headers), deadline: deadline) { return .failure(fault) }
        switch readHead(deadline: deadline) {
        case .failure(let fault): return .failure(fault)
        case .success(let head):
            if head.chunked {
                var body: [UInt8] = []
                while true {
                    switch readChunk(deadline: deadline) {
                    case .failure(let fault): return .failure(fault)
                    case .success(nil):
                        if head.close { disconnect() }
                        return .success((head.status, body))
                    case .success(let data?): body += data
                    }
                }
            }
            guard let length = head.length else {
                // (no length: the body ends when the server closes the connection)
                var body = buffer
                buffer = []
                while true {
                    switch fill(deadline: deadline, eofOK: true) {
                    case .failure(let fault): return .failure(fault)
                    case .success(false):
                        disconnect()
                        return .success((head.status, body))
                    case .success(true): body += buffer; buffer = []
                    }
                }
            }
            while buffer.count < length {
                if case .failure(let fault) = fill(deadline: deadline) { return .failure(fault) }
            }
            let body = Array(buffer[..<length])
            buffer.removeFirst(length)
            if head.close { disconnect() }
            return .success((head.status, body))
        }
    }

    /// Starts a streamed exchange: a POST of `body` to `path` whose answer is a chunked stream
    /// of lines (etcd's watch): the status, once the head came by `deadline`; then `nextLine`.
    func startStream(_ path: String, _ body: String, headers: [(String, String)] = [], deadline: Int64) -> Result<Int, Fault> {
        if let fault = connect(deadline: deadline) { return .failure(fault) }
        if let fault = send(request(path, body, headers), deadline: deadline) { return .failure(fault) }
        switch readHead(deadline: deadline) {
        case .failure(let fault): return .failure(fault)
        case .success(let head):
            if !head.chunked {
                disconnect()
                return .failure(Fault(code: EIO, message: "\(server) answered \(head.status) without a stream"))
            }
            streamed = []
            return .success(head.status)
        }
    }

    /// The stream's next line (without its newline) by `deadline`; nil when the stream ended
    /// (the connection is closed then), or a fault as `post`'s (ETIMEDOUT keeps the stream).
    func nextLine(deadline: Int64, interruptible: Bool) -> Result<[UInt8]?, Fault> {
        while true {
            if let newline = streamed.firstIndex(of: 0x0A) {
                let line = Array(streamed[..<newline])
                streamed.removeFirst(newline + 1)
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x0D }) { continue }
                return .success(line)
            }
            switch readChunk(deadline: deadline, keepOnTimeout: true, interruptible: interruptible) {
            case .failure(let fault): return .failure(fault)
            case .success(nil):
                disconnect()
                return .success(nil)
            case .success(let data?): streamed += data
            }
        }
    }

    private func send(_ bytes: [UInt8], deadline: Int64) -> Fault? {
        var sent = 0
        if let session {
            while sent < bytes.count {
                switch bytes.withUnsafeBytes({ session.write(UnsafeRawBufferPointer(rebasing: $0[sent...])) }) {
                case .done(let n): sent += n
                case .wait(let writable):
                    let ready = waitForSocket(fd, writable: writable, deadline: deadline, interruptible: InterruptibleCall.isActive)
                    if ready != 0 { return unanswered(ready) }
                case .closed: return broken("closed")
                case .failed(let why): return broken(why)
                }
            }
            return nil
        }
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n > 0 { sent += n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                let ready = waitForSocket(fd, writable: true, deadline: deadline, interruptible: InterruptibleCall.isActive)
                if ready != 0 { return unanswered(ready) }
                continue
            }
            return broken(n < 0 ? String(cString: strerror(errno)) : "closed")
        }
        return nil
    }

    private func unanswered(_ code: Int32, keep: Bool = false) -> Fault {
        switch code {
        case ETIMEDOUT:
            if !keep { disconnect() }
            return Fault(code: ETIMEDOUT, message: "\(server) did not answer in time")
        case EINTR:
            if !keep { disconnect() }
            return Fault(code: EINTR, message: "interrupted waiting for \(server)")
        default: return broken(String(cString: strerror(code)))
        }
    }

    private func broken(_ text: String) -> Fault {
        disconnect()
        return Fault(code: EIO, message: "the connection to \(server) broke: \(text)")
    }

    /// Reads what the socket has into `buffer`, waiting for it by `deadline`: true, or false at
    /// the end of the stream when `eofOK` (else a fault).
    private func fill(deadline: Int64, eofOK: Bool = false, keepOnTimeout: Bool = false,
                      interruptible: Bool = InterruptibleCall.isActive) -> Result<Bool, Fault> {
        if let session {
            while true {
                switch scratch.withUnsafeMutableBytes({ session.read($0) }) {
                case .done(let n): buffer += scratch[..<n]; return .success(true)
                case .closed: return eofOK ? .success(false) : .failure(broken("closed by the server"))
                case .failed(let why): return .failure(broken(why))
                case .wait(let writable):
                    let ready = waitForSocket(fd, writable: writable, deadline: deadline, interruptible: interruptible)
                    if ready != 0 { return .failure(unanswered(ready, keep: keepOnTimeout)) }
                }
            }
        }
        while true {
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 { buffer += scratch[..<n]; return .success(true) }
            if n == 0 { return eofOK ? .success(false) : .failure(broken("closed by the server")) }
            if errno == EINTR { continue }
            if errno != EAGAIN && errno != EWOULDBLOCK { return .failure(broken(String(cString: strerror(errno)))) }
            let ready = waitForSocket(fd, deadline: deadline, interruptible: interruptible)
            if ready != 0 { return .failure(unanswered(ready, keep: keepOnTimeout)) }
        }
    }

    private struct Head { var status: Int, length: Int?, chunked: Bool, close: Bool }

    private func readHead(deadline: Int64) -> Result<Head, Fault> {
        let end: Int
        while true {
            if let found = headEnd() { end = found; break }
            if buffer.count > 65536 { return .failure(broken("an answer's head over 64 KiB")) }
            if case .failure(let fault) = fill(deadline: deadline) { return .failure(fault) }
        }
        // (on bytes: this runs twice per lock operation)
        let head = Array(buffer[..<end])
        buffer.removeFirst(end + 4)
        var lines: [ArraySlice<UInt8>] = []
        var from = 0
        for i in 0..<head.count where i + 1 < head.count && head[i] == 0x0D && head[i + 1] == 0x0A {
            lines.append(head[from..<i])
            from = i + 2
        }
        lines.append(head[from...])
        let statusLine = lines[0]
        let http = Array("HTTP/1.".utf8)
        guard statusLine.count >= 12, Array(statusLine.prefix(7)) == http,
              let status = Int(String(decoding: statusLine.dropFirst(9).prefix(3), as: UTF8.self)) else {
            return .failure(broken("not an HTTP answer: '\(String(decoding: statusLine, as: UTF8.self))'"))
        }
        var parsed = Head(status: status, length: nil, chunked: false, close: statusLine[statusLine.startIndex + 7] == UInt8(ascii: "0"))
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let name = line[..<colon].map { $0 | 0x20 }  // (ASCII lowercase: header names are letters and '-')
            var value = line[(colon + 1)...].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            while value.first == 0x20 { value.removeFirst() }
            if name.elementsEqual("content-length".utf8) {
                parsed.length = Int(String(decoding: value, as: UTF8.self))
            } else if name.elementsEqual("transfer-encoding".utf8) {
                parsed.chunked = contains(value, "chunked")
            } else if name.elementsEqual("connection".utf8) {
                parsed.close = contains(value, "close")
            }
        }
        chunkLeft = -1
        return .success(parsed)
    }

    private func contains(_ bytes: [UInt8], _ word: String) -> Bool {
        let pattern = Array(word.utf8)
        guard bytes.count >= pattern.count else { return false }
        return (0...(bytes.count - pattern.count)).contains { bytes[$0..<$0 + pattern.count].elementsEqual(pattern) }
    }

    private func headEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for i in 0...(buffer.count - 4) where buffer[i] == 0x0D && buffer[i + 1] == 0x0A && buffer[i + 2] == 0x0D && buffer[i + 3] == 0x0A {
            return i
        }
        return nil
    }

    /// The next piece of a chunked body (nil after its last chunk).
    private func readChunk(deadline: Int64, keepOnTimeout: Bool = false,
                           interruptible: Bool = InterruptibleCall.isActive) -> Result<[UInt8]?, Fault> {
        while true {
            if chunkLeft < 0 {
                guard let newline = firstCRLF() else {
                    if case .failure(let fault) = fill(deadline: deadline, keepOnTimeout: keepOnTimeout, interruptible: interruptible) {
                        return .failure(fault)
                    }
                    continue
                }
                let sizeText = String(decoding: buffer[..<newline], as: UTF8.self).split(separator: ";").first ?? ""
                guard let size = Int(sizeText.trimmingPrefix(" "), radix: 16) else { return .failure(broken("a bad chunk size '\(sizeText)'")) }
                if size == 0 {
                    // The last chunk, then its trailers (the gateway sends gRPC's after an
                    // error), each a line, up to a blank line.
                    buffer.removeFirst(newline + 2)
                    while true {
                        guard let end = firstCRLF() else {
                            if case .failure(let fault) = fill(deadline: deadline) { return .failure(fault) }
                            continue
                        }
                        buffer.removeFirst(end + 2)
                        if end == 0 { return .success(nil) }
                    }
                }
                buffer.removeFirst(newline + 2)
                chunkLeft = size
            }
            if buffer.isEmpty {
                if case .failure(let fault) = fill(deadline: deadline, keepOnTimeout: keepOnTimeout, interruptible: interruptible) {
                    return .failure(fault)
                }
            }
            let take = min(chunkLeft, buffer.count)
            let data = Array(buffer[..<take])
            buffer.removeFirst(take)
            chunkLeft -= take
            if chunkLeft == 0 {
                // The chunk's CRLF.
                while buffer.count < 2 {
                    if case .failure(let fault) = fill(deadline: deadline) { return .failure(fault) }
                }
                buffer.removeFirst(2)
                chunkLeft = -1
            }
            if !data.isEmpty { return .success(data) }
        }
    }

    private func firstCRLF() -> Int? {
        guard buffer.count >= 2 else { return nil }
        for i in 0..<(buffer.count - 1) where buffer[i] == 0x0D && buffer[i + 1] == 0x0A { return i }
        return nil
    }
}
