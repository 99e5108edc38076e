import CSyncShim
import Glibc
import Synchronization

/// What /proc says of threads and processes: their state and start time, and the caller's
/// namespaces. (One parser of the stat files for the whole library.)
enum ThreadStat {
    /// The state letter and start time (clock ticks since boot, low 32 bits) of thread `tid`
    /// of the caller's pid namespace, from /proc/<tid>/task/<tid>/stat; nil if unreadable.
    static func read(_ tid: UInt32) -> (state: UInt8, start: UInt32)? {
        guard let found = parse("/proc/\(tid)/task/\(tid)/stat") else { return nil }
        return (found.state, UInt32(truncatingIfNeeded: found.start))
    }

    /// The state letter and start time (clock ticks since boot, field 22) of process `pid` of
    /// the caller's pid namespace, from /proc/<pid>/stat; nil if there is no such process.
    static func process(_ pid: Int32) -> (state: UInt8, start: UInt64)? { parse("/proc/\(pid)/stat") }

    /// The state letter (field 3) and start time (field 22) of a /proc stat file; nil if it
    /// cannot be read or parsed.
    private static func parse(_ path: String) -> (state: UInt8, start: UInt64)? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024) { buffer -> (state: UInt8, start: UInt64)? in
            var length = 0
            while length < buffer.count {
                let n = Glibc.read(fd, buffer.baseAddress! + length, buffer.count - length)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                length += n
            }
            // "tid (comm) state ppid ... starttime ...": the comm may hold any byte, the fields
            // after it only digits and signs, so they start after the last ')'. The state is
            // field 3, the start time field 22.
            guard let close = buffer[..<length].lastIndex(of: UInt8(ascii: ")")), close + 2 < length else { return nil }
            let state = buffer[close + 2]
            var field = 3, i = close + 2, start: UInt64 = 0
            while i < length && field < 22 {
                if buffer[i] == UInt8(ascii: " ") { field += 1 }
                i += 1
            }
            guard field == 22 else { return nil }
            while i < length, case let digit = buffer[i] &- UInt8(ascii: "0"), digit < 10 {
                start = start &* 10 &+ UInt64(digit)
                i += 1
            }
            return (state, start)
        }
    }

    /// A 32-bit digest of the caller's pid and time namespaces (the inode numbers of
    /// /proc/self/ns/pid and /proc/self/ns/time), never 0: thread ids and start times mean the
    /// same to two threads only if their tags are equal. 1 if /proc cannot tell.
    static func namespaceTag() -> UInt32 {
        func inode(_ path: String) -> UInt64 {
            var info = stat()
            return stat(path, &info) == 0 ? UInt64(info.st_ino) : 0
        }
        let pid = inode("/proc/self/ns/pid"), time = inode("/proc/self/ns/time")
        if pid == 0 { return 1 }
        var h = (pid &* 0x9E37_79B9_7F4A_7C15) ^ time
        h = (h ^ (h >> 31)) &* 0xBF58_476D_1CE4_E5B9
        h ^= h >> 29
        return UInt32(truncatingIfNeeded: h) | 2
    }
}
