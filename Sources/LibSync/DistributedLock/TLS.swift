import Glibc

// TLS for the etcd backend (`etcds://`): OpenSSL's libssl, loaded with dlopen when the first
// TLS connection is made, as the other backends' client libraries are (libsync.so does not link
// it). The connection's socket stays non-blocking: each TLS call that would wait says which way
// (read or write), and the caller polls that way until its deadline, as for plain HTTP.

/// What a TLS connection trusts and shows: the CA certificates (PEM) the server's certificate
/// must chain to (nil: the system's), and a client certificate and its key (PEM), for a server
/// that asks for one (etcd's --client-cert-auth).
struct TLSOptions: Hashable, Sendable {
    let caFile: String?, certFile: String?, keyFile: String?
}

/// libssl's functions, once loaded.
final class OpenSSL: @unchecked Sendable {
    typealias Handle = OpaquePointer
    let method: @convention(c) () -> Handle?
    let ctxNew: @convention(c) (Handle?) -> Handle?
    let ctxFree: @convention(c) (Handle?) -> Void
    let ctxDefaultPaths: @convention(c) (Handle?) -> Int32
    let ctxLoadVerify: @convention(c) (Handle?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Int32
    let ctxCertChain: @convention(c) (Handle?, UnsafePointer<CChar>?) -> Int32
    let ctxKey: @convention(c) (Handle?, UnsafePointer<CChar>?, Int32) -> Int32
    let ctxCheckKey: @convention(c) (Handle?) -> Int32
    let ctxSetVerify: @convention(c) (Handle?, Int32, OpaquePointer?) -> Void
    let sslNew: @convention(c) (Handle?) -> Handle?
    let sslFree: @convention(c) (Handle?) -> Void
    let setFD: @convention(c) (Handle?, Int32) -> Int32
    let setHost: @convention(c) (Handle?, UnsafePointer<CChar>?) -> Int32
    let param: @convention(c) (Handle?) -> Handle?
    let paramIP: @convention(c) (Handle?, UnsafePointer<CChar>?) -> Int32
    let ctrl: @convention(c) (Handle?, Int32, Int, UnsafeMutableRawPointer?) -> Int
    let connect: @convention(c) (Handle?) -> Int32
    let read: @convention(c) (Handle?, UnsafeMutableRawPointer?, Int32) -> Int32
    let write: @convention(c) (Handle?, UnsafeRawPointer?, Int32) -> Int32
    let error: @convention(c) (Handle?, Int32) -> Int32
    let verifyResult: @convention(c) (Handle?) -> Int
    let verifyText: @convention(c) (Int) -> UnsafePointer<CChar>?
    let errGet: @convention(c) () -> UInt
    let errText: @convention(c) (UInt, UnsafeMutablePointer<CChar>?, Int) -> Void
    let errClear: @convention(c) () -> Void

    static let wantRead: Int32 = 2, wantWrite: Int32 = 3, syscall: Int32 = 5, zeroReturn: Int32 = 6

    private init?(_ library: ClientLibrary) {
        func f<T>(_ name: String, _ type: T.Type) -> T? { library.function(name, type) }
        guard let method = f("TLS_client_method", (@convention(c) () -> Handle?).self),
              let ctxNew = f("SSL_CTX_new", (@convention(c) (Handle?) -> Handle?).self),
              let ctxFree = f("SSL_CTX_free", (@convention(c) (Handle?) -> Void).self),
              let ctxDefaultPaths = f("SSL_CTX_set_default_verify_paths", (@convention(c) (Handle?) -> Int32).self),
              let ctxLoadVerify = f("SSL_CTX_load_verify_locations",
                                    (@convention(c) (Handle?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Int32).self),
              let ctxCertChain = f("SSL_CTX_use_certificate_chain_file", (@convention(c) (Handle?, UnsafePointer<CChar>?) -> Int32).self),
              let ctxKey = f("SSL_CTX_use_PrivateKey_file", (@convention(c) (Handle?, UnsafePointer<CChar>?, Int32) -> Int32).self),
              let ctxCheckKey = f("SSL_CTX_check_private_key", (@convention(c) (Handle?) -> Int32).self),
              let ctxSetVerify = f("SSL_CTX_set_verify", (@convention(c) (Handle?, Int32, OpaquePointer?) -> Void).self),
              let sslNew = f("SSL_new", (@convention(c) (Handle?) -> Handle?).self),
              let sslFree = f("SSL_free", (@convention(c) (Handle?) -> Void).self),
              let setFD = f("SSL_set_fd", (@convention(c) (Handle?, Int32) -> Int32).self),
              let setHost = f("SSL_set1_host", (@convention(c) (Handle?, UnsafePointer<CChar>?) -> Int32).self),
              let param = f("SSL_get0_param", (@convention(c) (Handle?) -> Handle?).self),
              let paramIP = f("X509_VERIFY_PARAM_set1_ip_asc", (@convention(c) (Handle?, UnsafePointer<CChar>?) -> Int32).self),
              let ctrl = f("SSL_ctrl", (@convention(c) (Handle?, Int32, Int, UnsafeMutableRawPointer?) -> Int).self),
              let connect = f("SSL_connect", (@convention(c) (Handle?) -> Int32).self),
              let read = f("SSL_read", (@convention(c) (Handle?, UnsafeMutableRawPointer?, Int32) -> Int32).self),
              let write = f("SSL_write", (@convention(c) (Handle?, UnsafeRawPointer?, Int32) -> Int32).self),
              let error = f("SSL_get_error", (@convention(c) (Handle?, Int32) -> Int32).self),
              let verifyResult = f("SSL_get_verify_result", (@convention(c) (Handle?) -> Int).self),
              let verifyText = f("X509_verify_cert_error_string", (@convention(c) (Int) -> UnsafePointer<CChar>?).self),
              let errGet = f("ERR_get_error", (@convention(c) () -> UInt).self),
              let errText = f("ERR_error_string_n", (@convention(c) (UInt, UnsafeMutablePointer<CChar>?, Int) -> Void).self),
              let errClear = f("ERR_clear_error", (@convention(c) () -> Void).self)
        else { return nil }
        (self.method, self.ctxNew, self.ctxFree, self.ctxDefaultPaths, self.ctxLoadVerify) =
            (method, ctxNew, ctxFree, ctxDefaultPaths, ctxLoadVerify)
        (self.ctxCertChain, self.ctxKey, self.ctxCheckKey, self.ctxSetVerify) = (ctxCertChain, ctxKey, ctxCheckKey, ctxSetVerify)
        (self.sslNew, self.sslFree, self.setFD, self.setHost, self.param, self.paramIP, self.ctrl) =
            (sslNew, sslFree, setFD, setHost, param, paramIP, ctrl)
        (self.connect, self.read, self.write, self.error) = (connect, read, write, error)
        (self.verifyResult, self.verifyText, self.errGet, self.errText, self.errClear) =
            (verifyResult, verifyText, errGet, errText, errClear)
    }

    /// libssl, or why it cannot be loaded (ELIBACC's message). LIBSYNC_LIBSSL names another file.
    static let loaded: Result<OpenSSL, HTTPConnection.Fault> = {
        let (library, why) = ClientLibrary.open(["libssl.so.3"], override: "LIBSYNC_LIBSSL")
        guard let library else {
            return .failure(HTTPConnection.Fault(code: ELIBACC, message: "etcds:// needs OpenSSL's libssl.so.3 (Debian: apt install libssl3): \(why)"))
        }
        guard let openssl = OpenSSL(library) else {
            return .failure(HTTPConnection.Fault(code: ELIBACC, message: "\(library.soname) lacks a function libsync needs (OpenSSL 1.1.1 or later)"))
        }
        return .success(openssl)
    }()

    /// The calling thread's queued OpenSSL errors, as text (and the queue emptied).
    func errors() -> String {
        var texts: [String] = []
        while case let code = errGet(), code != 0 {
            var text = [CChar](repeating: 0, count: 256)
            errText(code, &text, text.count)
            texts.append(text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        }
        return texts.joined(separator: "; ")
    }
}

/// Runs `body` with SIGPIPE blocked on the calling thread, taking back one it raised: a TLS
/// write to a connection the server closed must be an error, not the end of the process (a
/// plain send says MSG_NOSIGNAL; OpenSSL writes with write(2)). libpq does the same.
func withoutSIGPIPE<R>(_ body: () -> R) -> R {
    var pipe = sigset_t(), old = sigset_t(), pending = sigset_t()
    sigemptyset(&pipe)
    sigaddset(&pipe, SIGPIPE)
    pthread_sigmask(SIG_BLOCK, &pipe, &old)
    sigpending(&pending)
    let wasPending = sigismember(&pending, SIGPIPE) == 1
    let result = body()
    if !wasPending {
        sigpending(&pending)
        if sigismember(&pending, SIGPIPE) == 1 {
            var none = timespec()
            _ = sigtimedwait(&pipe, nil, &none)
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, nil)
    return result
}

/// One TLS session over a connected non-blocking socket (owned by its HTTPConnection).
final class TLSSession {
    private let openssl: OpenSSL
    private let context: OpaquePointer
    private let ssl: OpaquePointer

    /// What a TLS call did: moved `count` bytes, or must wait for the socket to be readable or
    /// writable, or the server closed the session, or it failed (the message).
    enum Step { case done(Int), wait(writable: Bool), closed, failed(String) }

    /// A context with the options' files read: the CA certificates, the client certificate
    /// and its key. Faults: ELIBACC (no libssl), EINVAL (a file that is not a CA certificate, a
    /// certificate or its key).
    private static func context(_ options: TLSOptions) -> Result<(OpenSSL, OpaquePointer), HTTPConnection.Fault> {
        let openssl: OpenSSL
        switch OpenSSL.loaded {
        case .failure(let fault): return .failure(fault)
        case .success(let loaded): openssl = loaded
        }
        openssl.errClear()
        func bad(_ what: String) -> Result<(OpenSSL, OpaquePointer), HTTPConnection.Fault> {
            .failure(HTTPConnection.Fault(code: EINVAL, message: "\(what): \(openssl.errors())"))
        }
        guard let context = openssl.ctxNew(openssl.method()) else { return bad("TLS: cannot make a context") }
        var ok = false
        defer { if !ok { openssl.ctxFree(context) } }
        openssl.ctxSetVerify(context, 1, nil)  // SSL_VERIFY_PEER: the server's certificate must verify
        if let ca = options.caFile {
            if openssl.ctxLoadVerify(context, ca, nil) != 1 { return bad("cacert=\(ca) holds no CA certificate libssl can read") }
        } else if openssl.ctxDefaultPaths(context) != 1 {
            return bad("TLS: cannot load the system's CA certificates")
        }
        if let cert = options.certFile, let key = options.keyFile {
            if openssl.ctxCertChain(context, cert) != 1 { return bad("cert=\(cert) holds no certificate libssl can read") }
            if openssl.ctxKey(context, key, 1) != 1 {  // (1: PEM) libssl checks it against the certificate too
                let why = openssl.errors()
                let what = why.contains("mismatch") ? "key=\(key) is not the key of cert=\(cert)" : "key=\(key) holds no private key libssl can read"
                return .failure(HTTPConnection.Fault(code: EINVAL, message: "\(what): \(why)"))
            }
            if openssl.ctxCheckKey(context) != 1 { return bad("key=\(key) is not the key of cert=\(cert)") }
        }
        ok = true
        return .success((openssl, context))
    }

    /// Whether the options' files can be used (a lock's creation checks them before connecting):
    /// nil, or the fault `make` would give.
    static func check(_ options: TLSOptions) -> HTTPConnection.Fault? {
        switch context(options) {
        case .failure(let fault): return fault
        case .success(let (openssl, context)):
            openssl.ctxFree(context)
            return nil
        }
    }

    /// A session for `host` (its certificate must name it: a DNS name, or the IP address) over
    /// `fd`, not yet shaken hands: the options' files are read here. Faults: `context`'s.
    static func make(_ options: TLSOptions, fd: Int32, host: String) -> Result<TLSSession, HTTPConnection.Fault> {
        let (openssl, context): (OpenSSL, OpaquePointer)
        switch Self.context(options) {
        case .failure(let fault): return .failure(fault)
        case .success(let made): (openssl, context) = made
        }
        guard let ssl = openssl.sslNew(context) else {
            openssl.ctxFree(context)
            return .failure(HTTPConnection.Fault(code: EINVAL, message: "TLS: cannot make a session: \(openssl.errors())"))
        }
        var address = in6_addr()
        let isIP = inet_pton(AF_INET, host, &address) == 1 || inet_pton(AF_INET6, host, &address) == 1
        if isIP {
            _ = openssl.paramIP(openssl.param(ssl), host)
        } else {
            _ = openssl.setHost(ssl, host)
            _ = host.withCString { openssl.ctrl(ssl, 55, 0, UnsafeMutableRawPointer(mutating: $0)) }  // SNI
        }
        _ = openssl.setFD(ssl, fd)
        return .success(TLSSession(openssl: openssl, context: context, ssl: ssl))
    }

    private init(openssl: OpenSSL, context: OpaquePointer, ssl: OpaquePointer) {
        self.openssl = openssl
        self.context = context
        self.ssl = ssl
    }

    deinit {
        openssl.sslFree(ssl)
        openssl.ctxFree(context)
    }

    /// What a call that returned `result` did.
    private func step(_ result: Int32, doing: String) -> Step {
        if result > 0 { return .done(Int(result)) }
        let code = openssl.error(ssl, result)
        switch code {
        case OpenSSL.wantRead: return .wait(writable: false)
        case OpenSSL.wantWrite: return .wait(writable: true)
        case OpenSSL.zeroReturn: return .closed
        default:
            let verify = openssl.verifyResult(ssl)
            let queued = openssl.errors()
            if verify != 0, let text = openssl.verifyText(verify) {
                return .failed("\(doing): the server's certificate did not verify: \(String(cString: text))")
            }
            if code == OpenSSL.syscall && queued.isEmpty {
                return result == 0 || errno == 0 ? .closed : .failed("\(doing): \(String(cString: strerror(errno)))")
            }
            return .failed("\(doing): \(queued.isEmpty ? "TLS error \(code)" : queued)")
        }
    }

    /// One step of the handshake: done(0) once it is over.
    func handshake() -> Step {
        openssl.errClear()
        switch withoutSIGPIPE({ step(openssl.connect(ssl), doing: "TLS handshake") }) {
        case .done: return .done(0)
        case .closed: return .failed("TLS handshake: the server closed the connection (not a TLS port, or it refused the client certificate)")
        case let other: return other
        }
    }

    func read(_ into: UnsafeMutableRawBufferPointer) -> Step {
        openssl.errClear()
        return withoutSIGPIPE { step(openssl.read(ssl, into.baseAddress, Int32(clamping: into.count)), doing: "TLS read") }
    }

    func write(_ from: UnsafeRawBufferPointer) -> Step {
        openssl.errClear()
        return withoutSIGPIPE { step(openssl.write(ssl, from.baseAddress, Int32(clamping: from.count)), doing: "TLS write") }
    }
}
