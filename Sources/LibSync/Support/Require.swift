/// Stops the program with `message` unless `condition` holds: for misuse that has no error to
/// report. Unlike `precondition`, whose message optimized builds drop (leaving a bare SIGILL),
/// the message is kept in every build.
@inlinable @inline(__always)
package func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
                     file: StaticString = #fileID, line: UInt = #line) {
    if _slowPath(!condition()) { fatalError(message(), file: file, line: line) }
}
