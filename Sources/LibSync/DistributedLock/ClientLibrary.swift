import Glibc

// The server backends' client libraries (libpq, hiredis) are loaded with dlopen when a lock of
// that backend is first made, never linked: libsync.so has no dependency on them, and a missing
// library is an error naming the Debian package to install.

/// A C library opened with dlopen (kept open for the life of the process).
struct ClientLibrary: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    /// The file name it was opened by (a soname, or the override's path).
    let soname: String

    /// Opens the first of `sonames` that loads (or only the file named by the environment
    /// variable `override`, when set): (library, nil), or (nil, why not: each dlerror).
    static func open(_ sonames: [String], override: String) -> (ClientLibrary?, String) {
        let names = getenv(override).map { [String(cString: $0)] } ?? sonames
        var errors: [String] = []
        for name in names {
            if let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) { return (ClientLibrary(handle: handle, soname: name), "") }
            errors.append(dlerror().map { String(cString: $0) } ?? name)
        }
        return (nil, errors.joined(separator: "; "))
    }

    /// The function `name`, typed as `type` (a @convention(c) function type); nil if missing.
    func function<T>(_ name: String, _ type: T.Type) -> T? {
        guard let address = dlsym(handle, name) else { return nil }
        return unsafeBitCast(address, to: type)
    }
}

/// Waits until `fd` is readable (or writable) or the monotonic `deadline` (ns, < 0: none)
/// passes: 0, ETIMEDOUT, EINTR (a signal handler ran: only when `interruptible`, else the wait
/// goes on), or poll's errno.
func waitForSocket(_ fd: Int32, writable: Bool = false, deadline: Int64, interruptible: Bool) -> Int32 {
    while true {
        var milliseconds: Int32 = -1
        if let left = Deadline.remaining(deadline, now: monotonicNow()) {
            if left == 0 { return ETIMEDOUT }
            milliseconds = Int32(min((left + 999_999) / 1_000_000, Int64(Int32.max)))
        }
        var entry = pollfd(fd: fd, events: Int16(writable ? POLLOUT : POLLIN), revents: 0)
        let ready = poll(&entry, 1, milliseconds)
        if ready > 0 { return 0 }
        if ready < 0 {
            if errno != EINTR { return errno }
            if interruptible { return EINTR }
        }
    }
}

/// A URL's parts: `scheme://[user[:password]@]host[:port][/path][?query]`, percent-decoded.
struct LockURL {
    var scheme = "", user: String?, password: String?, host = "", port: Int?, path = ""
    /// The query's parameters, in order.
    var query: [(name: String, value: String)] = []

    /// Parses `text`, or returns why it cannot.
    static func parse(_ text: String) -> (LockURL?, String) {
        var url = LockURL()
        guard let schemeEnd = text.firstRange(of: "://") else { return (nil, "not a URL") }
        url.scheme = text[..<schemeEnd.lowerBound].lowercased()
        var rest = Substring(text[schemeEnd.upperBound...])
        if let q = rest.firstIndex(of: "?") {
            for pair in rest[rest.index(after: q)...].split(separator: "&") where !pair.isEmpty {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard let name = percentDecoded(parts[0]), let value = percentDecoded(parts.count > 1 ? parts[1] : "") else {
                    return (nil, "bad percent-encoding in the query")
                }
                url.query.append((name, value))
            }
            rest = rest[..<q]
        }
        if let slash = rest.firstIndex(of: "/") {
            guard let path = percentDecoded(rest[rest.index(after: slash)...]) else { return (nil, "bad percent-encoding in the path") }
            url.path = path
            rest = rest[..<slash]
        }
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            let parts = credentials.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let user = percentDecoded(parts[0]) else { return (nil, "bad percent-encoding in the user") }
            url.user = user.isEmpty ? nil : user
            if parts.count > 1 {
                guard let password = percentDecoded(parts[1]) else { return (nil, "bad percent-encoding in the password") }
                url.password = password
            }
            rest = rest[rest.index(after: at)...]
        }
        var host = rest
        if host.hasPrefix("[") {  // [IPv6]:port
            guard let close = host.firstIndex(of: "]") else { return (nil, "unclosed '[' in the host") }
            url.host = String(host[host.index(after: host.startIndex)..<close])
            host = host[host.index(after: close)...]
            if !host.isEmpty && !host.hasPrefix(":") { return (nil, "junk after the IPv6 address") }
        } else if let colon = host.lastIndex(of: ":") {
            url.host = String(host[..<colon])
            host = host[colon...]
        } else {
            url.host = String(host)
            host = ""
        }
        if host.hasPrefix(":") {
            guard let port = Int(host.dropFirst()), (1...65535).contains(port) else {
                return (nil, "the port '\(host.dropFirst())' is not a number in 1...65535")
            }
            url.port = port
        }
        return (url, "")
    }

    func value(_ name: String) -> String? { query.last { $0.name == name }?.value }

    /// `text` with the password (if any) replaced by nothing: what users are shown.
    static func redacted(_ text: String) -> String {
        guard let schemeEnd = text.firstRange(of: "://") else { return text }
        let authority = text[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" }
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else { return text }
        // (no user left: no "@" either)
        return String(text[..<colon]) + String(text[colon == authority.startIndex ? text.index(after: at)... : at...])
    }
}

private func percentDecoded(_ text: Substring) -> String? {
    var bytes: [UInt8] = []
    var iterator = text.utf8.makeIterator()
    while let byte = iterator.next() {
        if byte != UInt8(ascii: "%") { bytes.append(byte); continue }
        guard let high = iterator.next(), let low = iterator.next(),
              let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else { return nil }
        bytes.append(value)
    }
    return String(validating: bytes, as: UTF8.self)
}

/// A number of seconds from a URL parameter, as ns: nil if malformed or outside `range`.
func secondsParameter(_ text: String, _ range: ClosedRange<Double>) -> Int64? {
    guard let seconds = Double(text), seconds.isFinite, range.contains(seconds) else { return nil }
    return Int64(seconds * 1e9)
}

/// The host name as holders record it (at most 64 bytes, no '/').
func hostName() -> String {
    var name = [UInt8](repeating: 0, count: 256)
    gethostname(&name, name.count - 1)
    return String(String(decoding: name.prefix { $0 != 0 }, as: UTF8.self).filter { $0 != "/" }.prefix(64))
}
