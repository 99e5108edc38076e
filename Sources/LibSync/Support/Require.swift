/// Stops the program with `message` unless `condition` holds: for misuse that has no error to
/// report. Unlike `precondition`, whose message optimized builds drop (leaving a bare SIGILL),
/// the message is kept in every build.
@inlinable @inline(__always)
package func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
                     file: StaticString = #fileID, line: UInt = #line) {
    if _slowPath(!condition()) { misuse(message(), file: file, line: line) }
}

/// Stops the program with `message`, in every build: misuse that has no error to report (as
/// `require`, unconditionally). Every trap of the library goes through it.
@inlinable
package func misuse(_ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    fatalError(message(), file: file, line: line)
}
