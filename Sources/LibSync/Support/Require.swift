/// Stops the program with `message` unless `condition` holds: for misuse that has no error to
/// report. Unlike `precondition`, whose message optimized builds drop (leaving a bare SIGILL),
/// the message is kept in every build.
@inlinable @inline(__always)
package func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
                     file: StaticString = #fileID, line: UInt = #line) {
    if _slowPath(!condition()) { fatalError(message(), file: file, line: line) }
}

/// Kernel thread ids are below 2^22 (Linux's PID_MAX_LIMIT on 64-bit systems): a word that
/// names a holder at or above it was not written by the library.
@usableFromInline let threadIDLimit: UInt32 = 1 << 22
