import CSyncShim
import Glibc
import Synchronization

// What wakes an async wait for a distributed lock (AsyncDistributedLock.swift) instead of a
// polling pause: a `WakeTicket`, armed before each try and fired by whatever may have freed
// the lock since.
//
// - In this process: every end of a hold through the object (a release, a lost hold ended, a
//   wait in the store that ended) fires the tickets of the object's side (`ProcessSide.wakeOne`).
// - File system: one thread per process (`FileWatch`) reads an inotify descriptor that watches
//   the parent directories of the locks that tasks wait for. A release renames the holder entry
//   out of the lock into the parent (IN_MOVED_TO of a name that starts with the lock's carrier
//   prefix); a SoftFileLock's release, and a break, remove the lock's directory (IN_DELETE of
//   its name). Either fires the tickets of that lock, whichever process (on this host) released.
//   inotify cannot see a holder on another NFS client release, nor a holder process die (a stale
//   lock is taken over by a try): for those the wait still tries again after the poll interval.
// - Redis, PostgreSQL and etcd: nothing in the store tells this process of a release by another
//   process; those waits keep the polling schedule (`PollBackoff`) between tries.
//
// Why inotify rather than a futex word in a shared mapping beside the lock: the lock must stay
// one atomic rename in a directory that NFS clients share (a mapping is not shared across
// hosts, and a process that never maps it, an older libsync or another host, would release
// without waking anyone), whereas inotify reports every release made on this host, by any
// version, without the releasers' cooperation; what it cannot see is what no local word could
// see either.

/// One armed wait: fired at most once, by an event, a timer, or the task's cancellation.
package final class WakeTicket: @unchecked Sendable {
    private struct State {
        var fired = false
        var continuation: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    package init() {}

    package var isFired: Bool { state.withLock { $0.fired } }

    /// Fires the ticket: a suspended `wait` resumes, a later one returns at once.
    package func fire() {
        let continuation = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.fired { return nil }
            s.fired = true
            defer { s.continuation = nil }
            return s.continuation
        }
        continuation?.resume()
    }

    /// Suspends the task (no thread waits) until the ticket is fired, `pause` ns have passed
    /// (< 0: no limit), or the task is cancelled.
    package func wait(pause: Int64) async {
        if isFired { return }
        let timer: Task<Void, Never>? = pause < 0 ? nil : Task { [self] in
            try? await Task.sleep(nanoseconds: UInt64(max(0, pause)))
            fire()
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if s.fired { return true }
                    s.continuation = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            fire()
        }
        timer?.cancel()
    }
}

/// The tickets waiting for one thing (a lock's object in this process, a lock's name on disk).
final class WakeList: @unchecked Sendable {
    private let tickets = Mutex<[ObjectIdentifier: WakeTicket]>([:])

    func add(_ ticket: WakeTicket) { tickets.withLock { $0[ObjectIdentifier(ticket)] = ticket } }

    func remove(_ ticket: WakeTicket) { tickets.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(ticket)) } }

    var isEmpty: Bool { tickets.withLock { $0.isEmpty } }

    /// Fires and forgets every ticket.
    func fireAll() {
        let fired = tickets.withLock { t -> [WakeTicket] in
            if t.isEmpty { return [] }
            defer { t.removeAll() }
            return Array(t.values)
        }
        for ticket in fired { ticket.fire() }
    }
}

/// This process's inotify watches of lock directories' parents, and its thread reading them.
final class FileWatch: ProcessBound, @unchecked Sendable {
    let pid: Int32
    static let process = ProcessLocal<FileWatch> { FileWatch(pid: $0) }

    /// One watched parent directory: its locks' tickets by lock name (and carrier prefix).
    private struct Directory {
        var descriptor: Int32
        var locks: [String: (carrierPrefix: String, tickets: [ObjectIdentifier: WakeTicket])] = [:]
    }

    private struct Watches {
        var byPath: [String: Directory] = [:]
        var pathOf: [Int32: String] = [:]
        var started = false
    }

    private let watches = Mutex(Watches())
    private let fd: Int32

    init(pid: Int32) {
        self.pid = pid
        fd = inotify_init1(Int32(IN_CLOEXEC))
    }

    private static let mask = UInt32(IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)

    /// Arms `ticket` for a release of the lock `directory`: true if armed (then `disarm` it
    /// once the wait ends), false if inotify cannot watch it (the wait polls then).
    func arm(_ directory: LockDirectory, _ ticket: WakeTicket) -> Bool {
        guard fd >= 0 else { return false }
        let (armed, start) = watches.withLock { w -> (Bool, Bool) in
            if w.byPath[directory.parent] == nil {
                let wd = inotify_add_watch(fd, directory.parent, Self.mask)
                if wd < 0 { return (false, false) }
                if let old = w.pathOf[wd], old != directory.parent { w.byPath[old] = nil }  // (a watch of the same directory by another name)
                w.byPath[directory.parent] = Directory(descriptor: wd)
                w.pathOf[wd] = directory.parent
            }
            w.byPath[directory.parent]!.locks[directory.base, default: (directory.carrierPrefix, [:])]
                .tickets[ObjectIdentifier(ticket)] = ticket
            let start = !w.started
            w.started = true
            return (true, start)
        }
        if start { startThread() }
        return armed
    }

    /// Forgets `ticket` (fired or not); the directory's watch goes with its last ticket.
    func disarm(_ directory: LockDirectory, _ ticket: WakeTicket) {
        watches.withLock { w in
            guard var watched = w.byPath[directory.parent] else { return }
            watched.locks[directory.base]?.tickets[ObjectIdentifier(ticket)] = nil
            if watched.locks[directory.base]?.tickets.isEmpty == true { watched.locks[directory.base] = nil }
            if watched.locks.isEmpty {
                inotify_rm_watch(fd, watched.descriptor)
                w.byPath[directory.parent] = nil
                if w.pathOf[watched.descriptor] == directory.parent { w.pathOf[watched.descriptor] = nil }
            } else {
                w.byPath[directory.parent] = watched
            }
        }
    }

    /// The tickets an event names: those of the lock it names (its name, or a carrier of it),
    /// or all of the directory's (the directory itself went, or the queue overflowed: `name` nil).
    private func tickets(_ wd: Int32, _ name: String?, all: Bool) -> [WakeTicket] {
        watches.withLock { w in
            if all && wd < 0 {
                return w.byPath.values.flatMap { $0.locks.values.flatMap { $0.tickets.values } }
            }
            guard let path = w.pathOf[wd], let watched = w.byPath[path] else { return [] }
            var found: [WakeTicket] = []
            for (base, lock) in watched.locks where all || name == base || name.map({ $0.hasPrefix(lock.carrierPrefix) }) == true {
                found.append(contentsOf: lock.tickets.values)
            }
            return found
        }
    }

    /// The watch `wd` is gone (its directory was removed or moved): the next arm adds one anew.
    private func forget(_ wd: Int32) {
        watches.withLock { w in
            guard let path = w.pathOf.removeValue(forKey: wd) else { return }
            if w.byPath[path]?.descriptor == wd { w.byPath[path] = nil }
        }
    }

    private func startThread() {
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let context = Unmanaged.passRetained(self).toOpaque()
        let creatorMask = ThreadSignalMask.blockForNewThread(); defer { ThreadSignalMask.restore(creatorMask) }
        let status = pthread_create(&thread, &attributes, { context in
            sync_thread_set_name("libsync-fwatch")
            Unmanaged<FileWatch>.fromOpaque(context!).takeRetainedValue().run()
        }, context)
        precondition(status == 0, "libsync: cannot start the file-lock watch thread (\(status))")
    }

    private func run() -> Never {
        let size = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        while true {
            let n = read(fd, buffer, size)
            if n < 0 {
                if errno == EINTR { continue }
                preconditionFailure("libsync: reading the file-lock watch failed (\(errno))")
            }
            var offset = 0
            var fired: [WakeTicket] = []
            while offset + MemoryLayout<inotify_event>.size <= n {
                let event = buffer.load(fromByteOffset: offset, as: inotify_event.self)
                let length = Int(event.len)
                var name: String?
                if length > 0 {
                    let start = (buffer + offset + MemoryLayout<inotify_event>.size).assumingMemoryBound(to: CChar.self)
                    name = String(cString: start)
                }
                let overflow = event.mask & UInt32(IN_Q_OVERFLOW) != 0
                let gone = event.mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED) != 0
                fired += tickets(overflow ? -1 : event.wd, name, all: overflow || gone)
                if event.mask & UInt32(IN_IGNORED) != 0 { forget(event.wd) }
                offset += MemoryLayout<inotify_event>.size + length
            }
            for ticket in fired { ticket.fire() }
        }
    }
}
