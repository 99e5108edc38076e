import CSyncShim
import Glibc
import Synchronization

/// One pending async acquire: a futex word, who waits (a task or a C handle), until when, and
/// how to tell it. Completed exactly once, by whoever takes it out of the waker's queue (the
/// waker: granted, timed out, failed; `AsyncRuntime.cancel`: ECANCELED), always outside the
/// waker's lock.
///
/// This class is the mutex's waiter; the other primitives' waiters (Async/*.swift) subclass it
/// and override `attempt` (the waker's try), `queued` and `withdrawn` (their waiter counts and
/// marks), and `inOrder`. Waiters queue by `word`, the futex word the waker sleeps on for them.
package class AsyncWaiter: @unchecked Sendable {
    enum Phase { case new, queued, done }

    /// The futex word (the queue's key): a mutex's word, or the word another primitive's
    /// waiters sleep on.
    let word: MutexWord.Word
    let shared: Bool
    let robust: Bool
    /// The task (or C handle) that will hold the lock (AsyncHold.currentTask()).
    package let task: UInt
    /// Monotonic ns; < 0: none.
    let deadline: Int64
    /// What keeps the word's memory alive while the waiter is queued (the lock's LockMemory).
    let keepAlive: AnyObject?
    /// Guarded by the runtime's lock.
    var phase = Phase.new
    var complete: (@Sendable (Int32) -> Void)?
    /// The result, stored (releasing) under the runtime's lock as the waiter leaves the queue
    /// (so that a cancellation that finds it completed can read it while its delivery, outside
    /// the lock, is under way) and again before `complete` is called: a waiter that reads it
    /// (acquiring) sees everything the previous holder did before its release, whatever the
    /// completion path orders (ThreadSanitizer sees the edge too).
    package let outcome = Atomic<Int32>(EINPROGRESS)

    /// Completes the waiter with `result` (once; outside the runtime's lock).
    func finish(_ result: Int32) {
        outcome.store(result, ordering: .releasing)
        let complete = self.complete
        self.complete = nil  // it may hold what holds this waiter (a C handle): no cycle left
        complete?(result)
    }

    /// A mutex's waiter (`word` a `MutexWord`).
    package init(word: MutexWord.Word, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
        let value = word.pointee.load(ordering: .relaxed)
        self.word = word
        self.shared = value & MutexWord.shared != 0
        self.robust = value & MutexWord.robust != 0
        self.task = task
        self.deadline = deadline
        self.keepAlive = keepAlive
    }

    /// Another primitive's waiter: the waker sleeps on `word` (in the `shared` namespace) for it.
    package init(watching word: MutexWord.Word, shared: Bool, task: UInt, deadline: Int64, keepAlive: AnyObject?) {
        self.word = word
        self.shared = shared
        self.robust = false
        self.task = task
        self.deadline = deadline
        self.keepAlive = keepAlive
    }

    /// Whether the waker's pass tries this kind's queue before the others' (a read-write lock's
    /// writers go before its readers, as writer preference wants when a release frees it for both).
    package var goesFirst: Bool { false }

    /// Whether the waiters of this kind are served in order: the waker stops at the first one
    /// that must wait on (locks: FIFO). False: each is tried (an event's waiters are independent).
    package var inOrder: Bool { true }

    /// The waker's try for this waiter (under the runtime's lock; it must not block): its result
    /// (the waiter is then completed with it, and the waiter's counts are its own business), or
    /// EBUSY, with `observed` set to the value of `word` to sleep on. The mutex: takes it for
    /// `task`, marking WAITERS.
    package func attempt(_ runtime: AsyncRuntime, observed: inout UInt32) -> Int32 {
        let result = AsyncHold.take(word, markWaiters: true, observed: &observed)
        if result == 0 || result == EOWNERDEAD { granted() }
        return result
    }

    /// The mutex's waiter got the lock (taken by `attempt`, or handed over by a release,
    /// `AsyncRuntime.handOff`): records the hold for `task`.
    final func granted() { AsyncHold.taken(word, holder: task) }

    /// Whether a release of `word` may hand the lock straight to this waiter: only a mutex's
    /// own waiter (exactly this class), not a subclass that queues on a mutex word but wants
    /// more than the mutex (a condition lock's waiter wants its condition too).
    final var takesHandoff: Bool { type(of: self) == AsyncWaiter.self }

    /// Called once after the waker's pass has tried the waiters of an unordered queue (`inOrder`
    /// false), on the queue's first waiter tried, under the runtime's lock: a kind whose tries
    /// share one look at the primitive (the condition lock's: the mutex taken once for the whole
    /// queue) ends it here and returns the value of `word` to sleep on; nil: the tries' own
    /// `observed` stands.
    package func settle(_ runtime: AsyncRuntime) -> UInt32? { nil }

    /// Called once queued (under the runtime's lock; it must not block): a kind that counts its
    /// waiters in the primitive's words counts this one in.
    package func queued() {}

    /// Called once when a queued waiter leaves without `attempt` completing it (cancelled, timed
    /// out), outside the runtime's lock: a kind that counted it in counts it out.
    package func withdrawn() {}
}

/// The process's async machinery: the table of async holds and the waker.
///
/// The waker is one thread (started with the first acquire that has to wait) that holds every
/// pending acquire, in a FIFO per lock word. A pending acquire sets the word's WAITERS bit as a
/// blocking waiter does, so every unlock issues a FUTEX_WAKE; the waker sleeps in
/// `futex_waitv` on the distinct words with pending acquires, plus a word of its own that
/// registration and cancellation bump. Woken, it tries each word for the first waiter of its
/// queue (holding the lock for the waiter's task), and completes the waiters it granted, timed
/// out or failed. N waiting tasks cost one thread.
///
/// `futex_waitv` takes 128 words: the waker's own and 127 lock words. With more distinct words
/// pending, it waits on a window of 127 that rotates at every pass, and bounds each sleep by
/// `rotationSlice`, so every word is looked at within (words / 127) slices.
///
/// A wakeup the waker consumed for a word whose last waiter was withdrawn meanwhile (cancelled,
/// timed out) is passed on: the waker wakes one sleeper of that word. Shared words are slept on
/// in slices (`Deadline.sharedWaitSlice`), as blocking waiters do, and robust ones are checked
/// for a dead holder every `RobustWord.slice`.
///
/// fork(): the child has no waker thread and none of the parent's waiters. `current` is per
/// process (it compares the pid): the child's first use makes a new runtime and leaves the
/// parent's copy untouched (its lock may have been held across the fork).
package final class AsyncRuntime: @unchecked Sendable {
    /// One word's pending acquires, oldest first: `waiters[head...]` (popping is O(1)).
    struct Queue {
        var shared: Bool
        var robust: Bool
        var waiters: [AsyncWaiter] = []
        var head = 0
        /// How many times in a row a release handed the word straight to the first waiter
        /// (`handOff`); the waker's grants reset it.
        var handoffs = 0
        /// How many of them have a deadline (none: no scan for expired ones).
        var timed = 0

        var isEmpty: Bool { head == waiters.count }
        var count: Int { waiters.count - head }
        var first: AsyncWaiter? { isEmpty ? nil : waiters[head] }

        mutating func append(_ waiter: AsyncWaiter) {
            waiters.append(waiter)
            if waiter.deadline >= 0 { timed += 1 }
        }

        mutating func popFirst() {
            if waiters[head].deadline >= 0 { timed -= 1 }
            head += 1
            if head == waiters.count {
                waiters.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64 && head * 2 >= waiters.count {
                waiters.removeFirst(head)
                head = 0
            }
        }

        /// Removes the waiters `matching`.
        mutating func remove(where matching: (AsyncWaiter) -> Bool) {
            var kept: [AsyncWaiter] = []
            kept.reserveCapacity(count)
            for waiter in waiters[head...] {
                if matching(waiter) {
                    if waiter.deadline >= 0 { timed -= 1 }
                } else {
                    kept.append(waiter)
                }
            }
            waiters = kept
            head = 0
        }
    }
    struct State {
        var queues: [UInt: Queue] = [:]
        /// The words whose last waiter was withdrawn, whose wakeup the waker may have consumed.
        var passOn: [(UInt, Bool)] = []
        var started = false
        var rotation = 0
        /// How many queued waiters go first (`AsyncWaiter.goesFirst`).
        var firstCount = 0
    }

    /// The most lock words one `futex_waitv` watches (its limit, less the waker's own word).
    static let windowSize = 127
    /// With more words pending than the window holds, the longest the waker sleeps before it
    /// rotates the window.
    static let rotationSlice: Int64 = 5_000_000

    let pid: UInt32
    /// The process's start time (as robust words record holders'), read once.
    let processStart: UInt32
    let state = LockedState(State())
    /// How many words have pending acquires (state.queues.count, stored under the lock at each
    /// change): a release reads it without the lock to skip `handOff` when nothing waits.
    let queuedWords = Atomic<Int>(0)
    /// The looks of the waker's pass (`AsyncWaiter.attempt` and `settle`, on the waker's
    /// thread under the runtime's lock), per condition lock's mutex word: the condition read
    /// with the mutex taken for the pass (AsyncConditionLock), or, if it was held, the value
    /// every waiter of the pass sleeps on.
    package var looks: [UInt: AsyncConditionLock.Look] = [:]
    /// The waker's own futex word: bumped (and woken) at every registration and cancellation.
    let signal: UnsafeMutablePointer<Atomic<UInt32>>

    init(pid: UInt32) {
        self.pid = pid
        processStart = ThreadStat.read(pid)?.start ?? 0
        signal = .allocate(capacity: 1)
        signal.initialize(to: Atomic(0))
    }

    private static let cell = Atomic<UInt>(0)

    /// This process's runtime (a fork()ed child gets its own).
    package static var current: AsyncRuntime {
        let raw = cell.load(ordering: .acquiring)
        if raw != 0 {
            let runtime = Unmanaged<AsyncRuntime>.fromOpaque(UnsafeRawPointer(bitPattern: raw)!).takeUnretainedValue()
            if runtime.pid == sync_process_id { return runtime }
        }
        let fresh = Unmanaged.passRetained(AsyncRuntime(pid: sync_process_id))
        let (exchanged, _) = cell.compareExchange(expected: raw, desired: UInt(bitPattern: fresh.toOpaque()), ordering: .acquiringAndReleasing)
        if exchanged { return fresh.takeUnretainedValue() }  // the parent's (in a child) is left as it was
        fresh.release()
        return Self.current
    }

    /// This process's runtime if it has one (no new one made: a process that never waited
    /// asynchronously has no waiter to hand a lock to).
    static var existing: AsyncRuntime? {
        let raw = cell.load(ordering: .acquiring)
        guard raw != 0 else { return nil }
        let runtime = Unmanaged<AsyncRuntime>.fromOpaque(UnsafeRawPointer(bitPattern: raw)!).takeUnretainedValue()
        return runtime.pid == sync_process_id ? runtime : nil
    }

    /// The most releases in a row that hand a word straight to a waiting task before one
    /// releases it for real (waking a sleeper: a blocked thread or another process takes its
    /// turn too).
    static let handoffLimit = 8

    /// A release by this process's async holder of the (non-robust) word at `word`: if a task
    /// of this process waits for it (queued, whether or not the waker has marked the word's
    /// WAITERS bit yet), the lock passes straight to it
    /// (the word stays held, by the same process holder; the waiter is completed here, with no
    /// waker round trip) and true; false: release it as usual.
    func handOff(_ word: MutexWord.Word) -> Bool {
        guard queuedWords.load(ordering: .relaxed) != 0 else { return false }
        let address = UInt(bitPattern: word)
        let next: AsyncWaiter? = state.withLock { state in
            defer { queuedWords.store(state.queues.count, ordering: .relaxed) }
            guard var queue = state.queues.removeValue(forKey: address) else { return nil }  // unique: mutated in place
            defer {
                if !queue.isEmpty {
                    state.queues[address] = queue
                } else {
                    // The waker may still watch the word and take the wakeup of a later
                    // release, meant for a blocked thread: it passes it on, as for a
                    // withdrawn last waiter, when that wakeup (or any other) wakes it. It is
                    // not woken for this now: a wake would cost the releasing thread a system
                    // call, and often the CPU, at every handoff to the last waiting task.
                    state.passOn.append((address, queue.shared))
                }
            }
            // Only a mutex's own waiters take it (another primitive's waiters queued on a mutex
            // word, a condition lock's, want more than the mutex: the waker tries them).
            guard let first = queue.first, first.takesHandoff, queue.handoffs < Self.handoffLimit else {
                queue.handoffs = 0
                return nil
            }
            queue.popFirst()
            queue.handoffs += 1
            first.phase = .done
            first.outcome.store(0, ordering: .releasing)
            return first
        }
        guard let next else { return false }
        next.granted()
        next.finish(0)
        return true
    }

    // MARK: holds

    package func addHold(_ word: UInt, task: UInt) { asyncHolds.add(word, holder: task) }

    /// Removes the hold of `word` if `task` (nonzero) has it; returns whether it did.
    package func removeHold(_ word: UInt, task: UInt) -> Bool { asyncHolds.remove(word, holder: task) }

    package func holder(of word: UInt) -> UInt? { asyncHolds.holder(of: word) }

    // MARK: waiting

    /// Queues `waiter`, to be completed through `complete`; completes it with ECANCELED at once
    /// if it was cancelled before.
    package func register(_ waiter: AsyncWaiter, complete: @escaping @Sendable (Int32) -> Void) {
        let (queued, start) = state.withLock { state -> (Bool, Bool) in
            waiter.complete = complete
            guard waiter.phase == .new else { return (false, false) }
            waiter.phase = .queued
            let address = UInt(bitPattern: waiter.word)
            state.queues[address, default: Queue(shared: waiter.shared, robust: waiter.robust)].append(waiter)
            queuedWords.store(state.queues.count, ordering: .relaxed)
            if waiter.goesFirst { state.firstCount += 1 }
            waiter.queued()
            let start = !state.started
            state.started = true
            return (true, start)
        }
        guard queued else { return waiter.finish(ECANCELED) }
        if start { startWaker() } else { poke() }
    }

    /// Withdraws `waiter` if it is still queued, and returns whether it did; then, if `notify`,
    /// completes it with ECANCELED. A waiter not yet registered is marked, and its registration
    /// completes it so.
    @discardableResult
    package func cancel(_ waiter: AsyncWaiter, notify: Bool = true) -> Bool {
        let withdrawn = state.withLock { state -> Bool in
            switch waiter.phase {
            case .new:
                waiter.phase = .done
                return false
            case .done:
                return false
            case .queued:
                waiter.phase = .done
                let address = UInt(bitPattern: waiter.word)
                state.queues[address]?.remove { $0 === waiter }
                if state.queues[address]?.isEmpty == true {
                    state.queues[address] = nil
                    state.passOn.append((address, waiter.shared))
                    queuedWords.store(state.queues.count, ordering: .relaxed)
                }
                return true
            }
        }
        if withdrawn {
            waiter.withdrawn()
            if notify {
                waiter.finish(ECANCELED)
            } else {
                // Never called now: dropped, as `finish` drops it (a C handle's completion holds
                // the handle, which holds this waiter: kept, the two would never be freed).
                waiter.complete = nil
            }
            poke()
        }
        return withdrawn
    }

    /// How many acquires wait now (a snapshot, for tests).
    package var pendingCount: Int { state.withLock { $0.queues.values.reduce(0) { $0 + $1.count } } }

    func poke() {
        signal.pointee.add(1, ordering: .releasing)
        Futex.wake(UnsafeMutableRawPointer(signal), count: 1, shared: false)
    }

    private func startWaker() {
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let context = Unmanaged.passRetained(self).toOpaque()
        let creatorMask = ThreadSignalMask.blockForNewThread(); defer { ThreadSignalMask.restore(creatorMask) }
        let status = pthread_create(&thread, &attributes, { context in
            sync_thread_set_name("libsync-waker")
            Unmanaged<AsyncRuntime>.fromOpaque(context!).takeRetainedValue().run()
        }, context)
        precondition(status == 0, "libsync: cannot start the async waker thread (\(status))")
    }

    /// A word to watch: its address, the value to sleep on, its namespace.
    private struct Watch { var address: UInt; var value: UInt32; var shared: Bool; var robust: Bool }

    private func run() -> Never {
        var completions: [(AsyncWaiter, Int32)] = []
        var expired: [AsyncWaiter] = []
        var watches: [Watch] = []
        var passOn: [(UInt, Bool)] = []
        var addresses = [UnsafeMutablePointer<UInt32>?](repeating: nil, count: Self.windowSize + 1)
        var values = [UInt32](repeating: 0, count: Self.windowSize + 1)
        var shared = [UInt8](repeating: 0, count: Self.windowSize + 1)
        while true {
            let seen = signal.pointee.load(ordering: .acquiring)
            var deadline = Deadline.none
            let window: Int = state.withLock { state in
                defer { queuedWords.store(state.queues.count, ordering: .relaxed) }
                passOn = state.passOn
                state.passOn.removeAll()
                let now = monotonicNow()
                var keys = Array(state.queues.keys), firstCount = 0
                if state.firstCount > 0 {  // the queues that go first, first
                    let first = keys.filter { state.queues[$0]!.first!.goesFirst }
                    keys = first + keys.filter { !state.queues[$0]!.first!.goesFirst }
                }
                for address in keys {
                    var queue = state.queues.removeValue(forKey: address)!  // unique: mutated in place
                    // FIFO: the first waiter takes it if it can (also at its deadline: a blocking
                    // waiter's last try); a failure (ENOTRECOVERABLE) fails the next ones too.
                    var granted = false, busy: UInt32? = nil
                    if queue.first!.inOrder {
                        while let first = queue.first {
                            var observed: UInt32 = 0
                            let result = first.attempt(self, observed: &observed)
                            if result == EBUSY {
                                busy = observed
                                break
                            }
                            queue.popFirst()
                            first.phase = .done
                            first.outcome.store(result, ordering: .releasing)  // known before the lock is left
                            if result == 0 || result == EOWNERDEAD { granted = true }
                            completions.append((first, result))
                        }
                    } else {
                        // Each waiter is tried; the word to sleep on is the value the FIRST
                        // busy try saw: a change after it (a try of a later waiter may have seen
                        // the new state, not the earlier ones) then ends the sleep at once.
                        let looker = queue.first!
                        queue.remove { waiter in
                            var observed: UInt32 = 0
                            let result = waiter.attempt(self, observed: &observed)
                            if result == EBUSY {
                                if busy == nil { busy = observed }
                                return false
                            }
                            waiter.phase = .done
                            waiter.outcome.store(result, ordering: .releasing)  // known before the lock is left
                            if result == 0 { granted = true }
                            completions.append((waiter, result))
                            return true
                        }
                        if let settled = looker.settle(self) { busy = settled }
                    }
                    if queue.timed > 0 {
                        // Collected here, not appended to `expired` from inside remove's closure:
                        // LeakSanitizer found the arrays so appended leaked, waiters included.
                        let due = queue.waiters[queue.head...].filter { Deadline.hasPassed($0.deadline, now: now) }
                        if !due.isEmpty {
                            queue.remove { waiter in due.contains { $0 === waiter } }
                            for waiter in due {
                                waiter.phase = .done
                                waiter.outcome.store(ETIMEDOUT, ordering: .releasing)
                            }
                            expired.append(contentsOf: due)
                        }
                    }
                    if granted { queue.handoffs = 0 }
                    if queue.isEmpty {
                        if !granted { passOn.append((address, queue.shared)) }
                    } else {
                        if queue.timed > 0 {
                            for waiter in queue.waiters[queue.head...] { deadline = Deadline.earliest(deadline, waiter.deadline) }
                        }
                        watches.append(Watch(address: address, value: busy!, shared: queue.shared, robust: queue.robust))
                        if queue.first!.goesFirst { firstCount += 1 }
                        state.queues[address] = queue
                    }
                }
                state.firstCount = firstCount
                if watches.count > Self.windowSize {
                    state.rotation = (state.rotation + 1) % watches.count
                    let start = state.rotation
                    watches = Array((watches[start...] + watches[..<start]).prefix(Self.windowSize))
                    return 1
                }
                return 0
            }
            for (address, isShared) in passOn {
                Futex.wake(UnsafeMutableRawPointer(bitPattern: address)!, count: 1, shared: isShared)
            }
            for waiter in expired {
                waiter.withdrawn()
                waiter.finish(ETIMEDOUT)
            }
            for (waiter, result) in completions { waiter.finish(result) }
            completions.removeAll(keepingCapacity: true)
            expired.removeAll(keepingCapacity: true)
            passOn.removeAll(keepingCapacity: true)

            let now = monotonicNow()
            if window != 0 { deadline = Deadline.earliest(deadline, now + Self.rotationSlice) }
            if watches.contains(where: { $0.shared }) { deadline = Deadline.earliest(deadline, now + Deadline.sharedWaitSlice) }
            if watches.contains(where: { $0.robust }) { deadline = Deadline.earliest(deadline, now + RobustWord.slice) }
            addresses[0] = UnsafeMutableRawPointer(signal).assumingMemoryBound(to: UInt32.self)
            values[0] = seen
            shared[0] = 0
            for (i, watch) in watches.enumerated() {
                addresses[i + 1] = UnsafeMutableRawPointer(bitPattern: watch.address)!.assumingMemoryBound(to: UInt32.self)
                values[i + 1] = watch.value
                shared[i + 1] = watch.shared ? 1 : 0
            }
            let count = Int32(watches.count + 1)
            watches.removeAll(keepingCapacity: true)
            // Any return (woken, a word changed, timeout, signal) leads to a new pass.
            _ = addresses.withUnsafeBufferPointer { a in
                sync_futex_waitv(a.baseAddress!, values, shared, count, deadline)
            }
        }
    }
}

/// A value behind a pthread mutex: one that ThreadSanitizer understands (Synchronization.Mutex
/// locks inside the uninstrumented runtime), as the waker's lock also orders the waiters'
/// fields it guards. A fork()ed child never uses its parent's (AsyncRuntime.current).
final class LockedState<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        self.value = value
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
