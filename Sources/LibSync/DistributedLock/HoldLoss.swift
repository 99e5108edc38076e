import Glibc
import Synchronization

// Telling a holder that its hold was lost (or is in doubt) without its asking the store.
//
// Each acquisition through an object gets a `HoldTicket`, handed to the backend's detector:
//   Redis       the lease renewer: a renewal that finds the lease gone (expired, deleted,
//               taken) reports `lost`; one the server does not answer, `suspended`; the next
//               one that succeeds, `resumed`
//   PostgreSQL  the process's `HoldWatcher` thread polls the session's socket: the server
//               closing it (the session ended: pg_terminate_backend, a restart, a crash) or the
//               kernel giving up on it (keepalives, tcp_user_timeout) reports `lost`; so does
//               the session itself finding its connection broken while it holds the lock
//   file        the same thread looks every `fileCheckNanoseconds` whether the hold's entry is
//               still in the lock's directory (gone: broken or taken over: `lost`)
// and the core reports `lost` when a release says so (ESTALE, EBUSY). The state of an object's
// latest hold is one atomic word of its process side (`isLost` reads it without a round trip);
// each change of state is passed to the object's event handler on the process's `Notifier`
// thread, never with a lock of libsync held.

/// What a holder learns about its hold after acquiring it (`DistributedLock.setEventHandler`).
public enum DistributedLockEvent: Int32, Sendable, CustomStringConvertible {
    /// The store cannot be reached, so the hold is in doubt (Redis: a renewal got no answer).
    case suspended = 1
    /// The store answered again and the hold is still in place (after `suspended`).
    case resumed = 2
    /// The hold is gone: another holder may have the lock now. Final for this acquisition.
    case lost = 3

    public var description: String {
        switch self {
        case .suspended: "suspended"
        case .resumed: "resumed"
        case .lost: "lost"
        }
    }
}

/// The bits of `ProcessSide.hold`: the acquisition's generation above `generationShift`, and
/// its state.
enum HoldWord {
    static let stateMask: UInt64 = 3        // 0 in place, 1 suspended, 2 lost
    static let suspended: UInt64 = 1, lost: UInt64 = 2
    static let releasing: UInt64 = 4        // a release is under way: reports are held back
    static let ended: UInt64 = 8            // released: reports are ignored
    static let pending: UInt64 = 16         // a state change reported while releasing, not yet told
    static let generationShift: UInt64 = 8

    static func event(of state: UInt64) -> DistributedLockEvent {
        state == lost ? .lost : state == suspended ? .suspended : .resumed
    }
}

/// One acquisition's hold, as its detector sees it: a report about it changes only its own
/// state (a later acquisition through the object has another generation).
final class HoldTicket: @unchecked Sendable {
    private let side: ProcessSide
    let generation: UInt64
    /// The object, for its event handler (weak: a kept hold does not keep the object alive).
    private weak var lock: DistributedLock?

    init(side: ProcessSide, generation: UInt64, lock: DistributedLock) {
        self.side = side
        self.generation = generation
        self.lock = lock
    }

    /// Records `event` if it changes the hold's state (lost is final; resumed only follows
    /// suspended), and tells the handler, unless a release is under way (the release says).
    func report(_ event: DistributedLockEvent) {
        if side.report(event, generation: generation), let lock { Notifier.process.current().post(lock, event) }
    }
}

extension ProcessSide {
    /// Starts the hold of a new acquisition (under the state lock): its generation.
    func beginHold() -> UInt64 {
        let generation = (hold.load(ordering: .relaxed) >> HoldWord.generationShift) &+ 1
        hold.store(generation << HoldWord.generationShift, ordering: .releasing)
        return generation
    }

    /// The generation of the latest hold.
    var holdGeneration: UInt64 { hold.load(ordering: .acquiring) >> HoldWord.generationShift }

    /// Records `event` for the hold `generation`: whether the handler is to be told now.
    func report(_ event: DistributedLockEvent, generation: UInt64) -> Bool {
        var old = hold.load(ordering: .acquiring)
        while true {
            guard old >> HoldWord.generationShift == generation, old & HoldWord.ended == 0 else { return false }
            let state = old & HoldWord.stateMask
            let next: UInt64
            switch event {
            case .lost: next = HoldWord.lost
            case .suspended: next = HoldWord.suspended
            case .resumed: next = 0
            }
            let allowed = event == .lost ? state != HoldWord.lost : event == .suspended ? state == 0 : state == HoldWord.suspended
            guard allowed else { return false }
            let releasing = old & HoldWord.releasing != 0
            let new = (old & ~HoldWord.stateMask) | next | (releasing ? HoldWord.pending : 0)
            let (done, found) = hold.compareExchange(expected: old, desired: new, ordering: .acquiringAndReleasing)
            if done { return !releasing }
            old = found
        }
    }

    /// A release of the hold `generation` begins: reports are held back until it ends.
    func beginRelease(generation: UInt64) {
        update(generation) { $0 | HoldWord.releasing }
    }

    /// The release of the hold `generation` ended with `code`: 0 ends the hold in place;
    /// ESTALE and EBUSY end it lost; any other code leaves it held, and tells what was held
    /// back. The event to tell the handler, if any.
    func endRelease(generation: UInt64, code: Int32) -> DistributedLockEvent? {
        var told: DistributedLockEvent?
        update(generation) { old in
            let state = old & HoldWord.stateMask, pending = old & HoldWord.pending != 0
            switch code {
            case 0:
                told = nil
                return (old & ~(HoldWord.stateMask | HoldWord.releasing | HoldWord.pending)) | HoldWord.ended
            case ESTALE, EBUSY:
                told = state != HoldWord.lost || pending ? .lost : nil
                return (old & ~(HoldWord.stateMask | HoldWord.releasing | HoldWord.pending)) | HoldWord.ended | HoldWord.lost
            default:
                told = pending ? HoldWord.event(of: state) : nil
                return old & ~(HoldWord.releasing | HoldWord.pending)
            }
        }
        return told
    }

    /// The state of the latest hold: 0 (in place, or released), `HoldWord.suspended` or `.lost`.
    var holdState: UInt64 { hold.load(ordering: .acquiring) & HoldWord.stateMask }

    private func update(_ generation: UInt64, _ change: (UInt64) -> UInt64) {
        var old = hold.load(ordering: .acquiring)
        while old >> HoldWord.generationShift == generation {
            let (done, found) = hold.compareExchange(expected: old, desired: change(old), ordering: .acquiringAndReleasing)
            if done { return }
            old = found
        }
    }
}

/// The thread that runs the event handlers of a process, one call at a time, in the order the
/// events were reported; never with a lock of libsync held. Started with the first event.
final class Notifier: ProcessBound, @unchecked Sendable {
    let pid: Int32
    static let process = ProcessLocal<Notifier> { Notifier(pid: $0) }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Under `mutex`: the events not yet handed to their handler.
    private var queue: [(lock: DistributedLock, event: DistributedLockEvent)] = []
    /// Under `mutex`: the object whose handler is running now, if any.
    private var running: ObjectIdentifier?
    private var started = false
    /// The thread, once started (read by `quiesce` to know whether it runs on it).
    private let thread = Atomic<UInt>(0)

    init(pid: Int32) {
        self.pid = pid
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(changed, nil)
    }

    /// Queues `event` for `lock`'s handler (dropped if it has none now).
    func post(_ lock: DistributedLock, _ event: DistributedLockEvent) {
        guard lock.hasEventHandler else { return }
        pthread_mutex_lock(mutex)
        queue.append((lock, event))
        if !started { start() }
        pthread_cond_broadcast(changed)
        pthread_mutex_unlock(mutex)
    }

    /// Starts the thread (under `mutex`).
    private func start() {
        started = true
        var created = pthread_t()
        let me = Unmanaged.passRetained(self).toOpaque()  // (lives as long as the process)
        pthread_create(&created, nil, { Notifier.run(Unmanaged<Notifier>.fromOpaque($0!).takeUnretainedValue()); return nil }, me)
        pthread_detach(created)
    }

    /// Called if the thread ends inside a handler (it calls pthread_exit; or Python, exiting,
    /// ends a thread that asks it for the GIL): that handler counts as returned, so `quiesce`
    /// (and with it set_event_handler and destroy) does not wait forever, and a new thread
    /// takes the events still queued.
    private static let threadEndKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { raw in
            guard let raw else { return }
            Unmanaged<Notifier>.fromOpaque(raw).takeUnretainedValue().threadEnded()
        }
        return key
    }()

    private func threadEnded() {
        pthread_mutex_lock(mutex)
        running = nil
        thread.store(0, ordering: .releasing)
        started = false
        if !queue.isEmpty { start() }
        pthread_cond_broadcast(changed)
        pthread_mutex_unlock(mutex)
    }

    /// Returns once no handler of `lock` runs (at once on the notifier thread itself, whose
    /// handler may replace itself).
    func quiesce(_ lock: DistributedLock) {
        let notifying = thread.load(ordering: .acquiring)
        if notifying != 0 && pthread_equal(pthread_self(), pthread_t(notifying)) != 0 { return }
        pthread_mutex_lock(mutex)
        let id = ObjectIdentifier(lock)
        while running == id { pthread_cond_wait(changed, mutex) }
        pthread_mutex_unlock(mutex)
    }

    /// Runs one event's handler (from `run`, with `mutex` held on entry and return; the object's
    /// last reference may go at the end, outside the mutex).
    private func dispatch(_ item: (lock: DistributedLock, event: DistributedLockEvent)) {
        running = ObjectIdentifier(item.lock)
        pthread_mutex_unlock(mutex)
        item.lock.handleEvent(item.event)
    }

    private static func run(_ notifier: Notifier) {
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)
        pthread_setspecific(threadEndKey, Unmanaged.passUnretained(notifier).toOpaque())
        notifier.thread.store(UInt(pthread_self()), ordering: .releasing)
        pthread_mutex_lock(notifier.mutex)
        while true {
            while notifier.queue.isEmpty { pthread_cond_wait(notifier.changed, notifier.mutex) }
            notifier.dispatch(notifier.queue.removeFirst())
            pthread_mutex_lock(notifier.mutex)
            notifier.running = nil
            pthread_cond_broadcast(notifier.changed)
        }
    }
}

/// Linux's POLLRDHUP (the peer closed its end; the same on every architecture Swift runs on;
/// Glibc's module lacks it).
private let pollReadHangUp: Int16 = 0x2000

/// The thread that watches a process's PostgreSQL and file-system holds: it polls the sessions'
/// sockets (a closed or failed connection: the session, and its lock, is gone) and looks every
/// `fileCheckNanoseconds` whether each file hold's entry is still in place. One per process,
/// started with the first hold it watches.
final class HoldWatcher: ProcessBound, @unchecked Sendable {
    let pid: Int32
    static let process = ProcessLocal<HoldWatcher> { HoldWatcher(pid: $0) }
    /// How often a file hold is looked at (one stat of its entry).
    static let fileCheckNanoseconds: Int64 = 250_000_000

    enum Target {
        case socket(Int32)
        case entry(LockDirectory, String)
    }

    private struct Watches {
        var items: [UInt64: (target: Target, ticket: HoldTicket)] = [:]
        var next: UInt64 = 0
        var started = false
        /// The thread sleeps without a timeout (it watches no file hold).
        var sleepsForever = true
    }

    private let watches = Mutex(Watches())
    /// A pipe whose write end wakes the thread to look at `watches` again.
    private var wake: (read: Int32, write: Int32) = (-1, -1)

    init(pid: Int32) {
        self.pid = pid
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            }
            wake = (fds[0], fds[1])
        }
    }

    /// Watches `target` for the hold `ticket`: the id to `unwatch` it with.
    func watch(_ target: Target, _ ticket: HoldTicket) -> UInt64 {
        let (id, start, poke) = watches.withLock { w -> (UInt64, Bool, Bool) in
            w.next += 1
            w.items[w.next] = (target, ticket)
            let start = !w.started
            w.started = true
            var poke = true  // a new socket: the poll must take it in; an entry: only if the poll has no timeout
            if case .entry = target { (poke, w.sleepsForever) = (w.sleepsForever, false) }
            return (w.next, start, poke && !start)
        }
        if start {
            var created = pthread_t()
            let me = Unmanaged.passRetained(self).toOpaque()  // (lives as long as the process)
            pthread_create(&created, nil, { HoldWatcher.run(Unmanaged<HoldWatcher>.fromOpaque($0!).takeUnretainedValue()); return nil }, me)
            pthread_detach(created)
        } else if poke {
            var byte: UInt8 = 1
            _ = Glibc.write(wake.write, &byte, 1)
        }
        return id
    }

    /// Stops watching (before the socket is closed, or the entry released). A socket's poll is
    /// woken, so that it lets go of the socket at once (a socket closed while a poll waits on it
    /// stays open, and its session with it, until the poll returns).
    func unwatch(_ id: UInt64) {
        guard case .socket = watches.withLock({ $0.items.removeValue(forKey: id) })?.target else { return }
        var byte: UInt8 = 1
        _ = Glibc.write(wake.write, &byte, 1)
    }

    private static func run(_ watcher: HoldWatcher) {
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)
        var lastFileCheck = monotonicNow()
        while true {
            let items = watcher.watches.withLock { w -> [(UInt64, Target)] in
                let items = w.items.map { ($0.key, $0.value.target) }
                w.sleepsForever = !items.contains { if case .entry = $0.1 { return true } else { return false } }
                return items
            }
            var fds = [pollfd(fd: watcher.wake.read, events: Int16(POLLIN), revents: 0)]
            var ids: [UInt64] = []
            var entries: [(UInt64, LockDirectory, String)] = []
            for (id, target) in items {
                switch target {
                case .socket(let fd):
                    fds.append(pollfd(fd: fd, events: pollReadHangUp, revents: 0))
                    ids.append(id)
                case .entry(let directory, let entry): entries.append((id, directory, entry))
                }
            }
            var timeout: Int32 = -1
            if !entries.isEmpty {
                let left = lastFileCheck + fileCheckNanoseconds - monotonicNow()
                timeout = Int32(max(0, (left + 999_999) / 1_000_000))
            }
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 && errno != EINTR { usleep(1000) }
            if fds[0].revents != 0 {
                var sink = [UInt8](repeating: 0, count: 64)
                while read(watcher.wake.read, &sink, sink.count) > 0 {}
            }
            var gone: [UInt64] = []
            let failed = pollReadHangUp | Int16(POLLHUP) | Int16(POLLERR)
            for (i, id) in ids.enumerated() where fds[i + 1].revents & failed != 0 { gone.append(id) }
            if !entries.isEmpty && monotonicNow() >= lastFileCheck + fileCheckNanoseconds {
                lastFileCheck = monotonicNow()
                for (id, directory, entry) in entries where directory.lost(entry) { gone.append(id) }
            }
            if gone.isEmpty { continue }
            // Only holds still watched now: one released meanwhile was unwatched before it went.
            let tickets = watcher.watches.withLock { w in gone.compactMap { w.items.removeValue(forKey: $0)?.ticket } }
            for ticket in tickets { ticket.report(.lost) }
        }
    }
}
