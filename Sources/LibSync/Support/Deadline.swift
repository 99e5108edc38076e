import Glibc

/// A monotonic deadline `timeout` seconds from now (saturating; negative timeouts are now).
@inlinable
func deadline(after timeout: Duration) -> Int64 {
    let (seconds, attoseconds) = timeout.components
    if seconds < 0 { return monotonicNow() }
    let ns = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    if ns.overflow { return Int64.max }
    let total = ns.partialValue.addingReportingOverflow(attoseconds / 1_000_000_000 + monotonicNow())
    return total.overflow ? Int64.max : total.partialValue
}
