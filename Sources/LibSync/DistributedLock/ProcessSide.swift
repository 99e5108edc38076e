import Glibc
import Synchronization

// Per-process bookkeeping of a distributed lock: each process's side of an object (its hold,
// its session, its waiting threads) and the registry of its threads' holds.

/// A process's hold through one object, and its session with the store.
struct State {
    var session: any LockSession
    /// This process holds the lock through the object.
    var held = false
    /// The caller that acquired it: a kernel thread id, or a Swift task's address
    /// (`DistributedLock.caller()`).
    var owner: UInt = 0
    /// Acquisitions not yet released (more than 1 only when recursive).
    var depth = 0
    /// A thread of the object is waiting in the store through `session` (outside the state lock).
    var waiting = false
}

/// Something of which each process has its own (`pid` says whose).
protocol ProcessBound: AnyObject, Sendable {
    var pid: Int32 { get }
}

/// A value of which each process has its own: a forked child never uses its parent's copy (a
/// parent thread may have been changing it at the fork, and what it records is the parent's),
/// but makes a fresh one on first use. The copy is never freed in the child while the object
/// lives (a child thread may still be reading it, to find it is not its process's).
final class ProcessLocal<Value: ProcessBound>: @unchecked Sendable {
    private let slot = Atomic<Unmanaged<Value>?>(nil)
    private let make: @Sendable (Int32) -> Value

    init(_ make: @escaping @Sendable (Int32) -> Value) {
        self.make = make
        slot.store(Unmanaged.passRetained(make(getpid())), ordering: .releasing)
    }

    deinit { slot.load(ordering: .acquiring)?.release() }

    /// This process's value (`pid`: this process's id), made now if it has none yet.
    func current(pid: Int32 = getpid()) -> Value {
        var seen = slot.load(ordering: .acquiring)
        while true {
            if let value = seen?.takeUnretainedValue(), value.pid == pid { return value }
            let fresh = Unmanaged.passRetained(make(pid))
            let (exchanged, found) = slot.compareExchange(expected: seen, desired: fresh, ordering: .acquiringAndReleasing)
            if exchanged { return fresh.takeUnretainedValue() }
            fresh.release()
            seen = found  // another thread of this process made one first
        }
    }

    /// This process's value, or nil if it has none (it holds nothing, then).
    func ifCurrent() -> Value? {
        guard let value = slot.load(ordering: .acquiring)?.takeUnretainedValue(), value.pid == getpid() else { return nil }
        return value
    }
}

/// One process's side of one object: its hold, and the object's threads waiting for it to end.
final class ProcessSide: ProcessBound, @unchecked Sendable {
    let pid: Int32
    /// This process as holder entries name it, and its registry of holds.
    let identity: ProcessIdentity
    let registry: HoldRegistry
    let state: Mutex<State>
    /// The latest hold's generation and state (`HoldWord`; HoldLoss.swift).
    let hold = Atomic<UInt64>(0)
    /// words[0]: bumped when a hold ends (a futex word); words[1]: threads sleeping on it.
    private let words = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 2)
    var releases: UnsafeMutablePointer<Atomic<UInt32>> { words }

    init(pid: Int32, backend: any LockBackend) {
        self.pid = pid
        identity = ProcessIdentity.identities.current(pid: pid)
        registry = Self.registries.current(pid: pid)
        state = Mutex(State(session: backend.makeSession(identity)))
        words.initialize(to: Atomic(0))
        (words + 1).initialize(to: Atomic(0))
    }

    deinit { words.deinitialize(count: 2); words.deallocate() }

    /// The two words as the waiting room of `Words` (word 1 counts sleepers; process-private).
    private var room: Words { Words(UnsafeMutableRawPointer(words)) }

    /// Sleeps until the release count moves from `seen` (read while the state showed the hold),
    /// or the deadline: 0, ETIMEDOUT, or EINTR (`interruptible` only). `Words.sleep` counts the
    /// sleeper in first, so a releaser, which bumps the count and then reads the sleepers
    /// (`wakeOne`), never misses it.
    func sleep(while seen: UInt32, deadline: Int64, interruptible: Bool) -> Int32 {
        room.sleep(whileWordIs: seen, deadline: deadline, interruptible: interruptible) {
            words[0].load(ordering: .sequentiallyConsistent) != seen
        }
    }

    /// Wakes one sleeper, if any: it tries to acquire, and passes the wakeup on if it leaves
    /// without the lock.
    func wakeOne() {
        room.wake(count: 1)
        wakes.fireAll()
    }

    /// The async waits of the object's tasks (AsyncWake.swift): fired with every `wakeOne`.
    let wakes = WakeList()

    /// Which thread holds which lock through which object, in this process: a thread that would
    /// wait forever for a lock it holds through another object gets EDEADLK instead.
    static let registries = ProcessLocal<HoldRegistry> { HoldRegistry(pid: $0) }
}

final class HoldRegistry: ProcessBound, @unchecked Sendable {
    let pid: Int32
    private let holds = Mutex<[String: [(thread: UInt, lock: ObjectIdentifier)]]>([:])

    init(pid: Int32) { self.pid = pid }

    func add(path: String, thread: UInt, lock: ObjectIdentifier) {
        holds.withLock { $0[path, default: []].append((thread, lock)) }
    }

    func remove(path: String, lock: ObjectIdentifier) {
        holds.withLock { holds in
            holds[path]?.removeAll { $0.lock == lock }
            if holds[path]?.isEmpty == true { holds[path] = nil }
        }
    }

    /// Whether `thread` (a caller: thread or task) holds `path` through an object other than `lock`.
    func holds(path: String, thread: UInt, lock: ObjectIdentifier) -> Bool {
        holds.withLock { $0[path]?.contains { $0.thread == thread && $0.lock != lock } ?? false }
    }
}
