import Glibc

/// The reason for the calling thread's last failed distributed-lock call, when the backend gave
/// one (a server's message, a missing client library); per thread.
package enum DistributedLockMessage {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { free($0) }
        return key
    }()

    /// The detailed reason recorded since the last `clear()`, if any.
    package static var detail: String? {
        pthread_getspecific(key).map { String(cString: $0.assumingMemoryBound(to: CChar.self)) }
    }

    /// The recorded reason as a C string (valid until the thread's next distributed-lock call), or nil.
    package static var cString: UnsafePointer<CChar>? {
        pthread_getspecific(key).map { UnsafePointer($0.assumingMemoryBound(to: CChar.self)) }
    }

    package static func set(_ message: String) {
        let old = pthread_getspecific(key)
        pthread_setspecific(key, strdup(message))
        free(old)
    }

    /// Records `message` and returns `code`.
    static func fail(_ code: Int32, _ message: String) -> Int32 {
        set(message)
        return code
    }

    package static func clear() {
        if let old = pthread_getspecific(key) {
            pthread_setspecific(key, nil)
            free(old)
        }
    }
}
