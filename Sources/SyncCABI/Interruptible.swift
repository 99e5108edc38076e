import CSyncShim
import Glibc
import LibSync

// The `_interruptible` forms serve callers such as the Python interpreter, whose signal handlers
// only set a flag: the interpreter acts on it in its main thread when the C call returns. A wait
// returns EINTR when a signal interrupts its sleep; but a signal that arrives while the waiter is
// not asleep in the kernel (spinning, or about to sleep), or that the kernel hands to another
// thread, interrupts nothing. So in the process's main thread these forms also wait in slices
// and return EINTR at the end of each: the caller handles pending signals and calls again. Other
// threads wait in one piece: interpreters run no signal handlers there, and thousands of waiting
// threads would otherwise each wake 20 times a second.

/// The end of a slice that starts now, for the process's main thread; -1 (none) for others.
@inline(__always)
func sliceEnd() -> Int64 {
    threadID() == sync_process_id ? Deadline.after(nanoseconds: Deadline.interruptSlice) : Deadline.none
}

/// Runs `wait` (given a monotonic deadline) until `end` (< 0: none) or the end of one slice;
/// the end of a slice before `end` is reported as EINTR.
@inline(__always)
func interruptible(_ end: Int64, _ wait: (Int64) -> Int32) -> Int32 {
    let wanted = Deadline.until(end), slice = Deadline.earliest(wanted, sliceEnd())
    let result = wait(slice)
    return result == ETIMEDOUT && slice != wanted ? EINTR : result
}
