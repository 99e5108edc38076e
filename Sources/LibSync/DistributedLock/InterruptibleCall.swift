import Glibc

/// Whether the calling thread is inside an interruptible distributed-lock call
/// (`DistributedLock.Interrupts.sliced`, the C API's `_interruptible`): a backend that waits for
/// a server during it (connecting, awaiting an answer) returns EINTR as soon as a signal handler
/// runs, instead of waiting up to its I/O timeout. Per thread.
enum InterruptibleCall {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// True inside `run(_:)`, on this thread.
    static var isActive: Bool { pthread_getspecific(key) != nil }

    /// Runs `body` with `isActive` true on this thread when `interruptible` (restoring the
    /// previous state after).
    static func run<R>(_ interruptible: Bool, _ body: () -> R) -> R {
        guard interruptible else { return body() }
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
        defer { pthread_setspecific(key, previous) }
        return body()
    }
}
