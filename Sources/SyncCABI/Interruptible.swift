import Glibc

// The `_interruptible` forms serve callers such as the Python interpreter, whose signal handlers
// only set a flag: the interpreter acts on it when the C call returns. A wait returns EINTR when
// a signal interrupts its sleep; but a signal that arrives while the waiter is not asleep in the
// kernel (spinning, or about to sleep) interrupts nothing. So these forms also wait in slices
// and return EINTR at the end of each: the caller handles pending signals and calls again.

/// The longest an `_interruptible` wait sleeps before returning EINTR (50 ms).
let interruptSliceNanoseconds: UInt64 = 50_000_000

/// Runs `wait` (given a monotonic deadline) until `end` (< 0: none) or the end of one slice;
/// the end of a slice before `end` is reported as EINTR.
@inline(__always)
func interruptible(_ end: Int64, _ wait: (Int64) -> Int32) -> Int32 {
    let sliceEnd = deadline(afterNanoseconds: interruptSliceNanoseconds)
    let wanted = cDeadline(end)
    if wanted >= 0 && wanted <= sliceEnd { return wait(wanted) }
    let result = wait(sliceEnd)
    return result == ETIMEDOUT ? EINTR : result
}

