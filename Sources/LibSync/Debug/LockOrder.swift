import CSyncShim
import Glibc
import Synchronization

/// The kinds of lock that lock-order checking tells apart. A recursive lock, a condition and a
/// condition lock are reported as the mutex that is their first word.
@usableFromInline package enum LockKind: UInt8, Sendable {
    case mutex = 0, readLock, writeLock, spinLock, synchronized, upgradableRead

    package var name: String {
        switch self {
        case .mutex: "mutex"
        case .readLock: "rwlock (read)"
        case .writeLock: "rwlock (write)"
        case .spinLock: "spin lock"
        case .synchronized: "synchronized"
        case .upgradableRead: "rwlock (upgradable read)"
        }
    }
}

/// Lock-order checking (debug mode): the hooks the locks call, and the checker behind them.
///
/// Contract of the hooks: each lock calls `acquired` after every successful acquire (`tried`
/// for a trylock, which cannot wait and so adds no order), `releasing` before every release,
/// `waiting` before it may block and `settled` with the result after its slow path. A hook is
/// one load of `sync_lock_order_flag` and a branch not taken while checking is off.
///
/// Model. Every thread has a stack of the locks it holds. Each lock instance (an address; for
/// `synchronized`, the token) is a node of one global graph, with an edge A -> B the first time
/// some thread waits for or takes B while holding A (a trylock adds no edge into the lock it
/// tries). The edge keeps where that happened: the site provider's text (Python's stack) or
/// else a C backtrace. When a new edge closes a cycle, the cycle is a potential deadlock: it
/// is reported once (per set of nodes in that order), to the handler or else to stderr, and
/// the process aborts if asked to. A read lock counts as its lock (a writer-preferring rwlock
/// deadlocks on a read-read inversion too); an edge keeps the kinds of its first order (for an
/// rwlock, the side each end was taken for).
///
/// Names. A lock may have a name (`setName`, keyed by address, copied) and a thread one
/// (`setThreadName`, on its record); reports and the waits dump show them. A lock's name goes
/// with its node: when it is initialized again, freed as a Swift object, or forgotten.
///
/// Periods. Each off -> on turn of checking starts a new period; a thread's stack of an older
/// period is dropped at its next hook (a lock released while checking was off must not stay on
/// it), so the locks held across the turn are unknown like those taken before checking was on:
/// their releases are ignored.
///
/// Reuse. A node is forgotten (its edges with it) when its lock is initialized again, when a
/// Swift lock object is freed, or on `forget`; a new lock at the same address is then a new
/// node (ids are never reused, edges to a forgotten id are dead). A lock that is freed without
/// any of these and whose memory then holds another lock keeps the old lock's edges.
///
/// All state is under one internal pthread mutex, never held while calling out (handler, site
/// provider), so those may take libsync locks themselves. The locks a thread takes or waits for
/// while it runs a callout are not checked (not on its stack, no orders): a callout that takes
/// a lock cannot recurse into another callout. Its releases are checked as anywhere.
@usableFromInline package enum LockOrder {
    // MARK: hooks (inlined into every lock)

    @inlinable @inline(__always)
    package static func acquired(_ lock: UnsafeRawPointer, _ kind: LockKind, tried: Bool = false) {
        if _slowPath(sync_lock_order_flag != 0) { noteAcquired(lock, kind, tried: tried) }
    }

    @inlinable @inline(__always)
    package static func releasing(_ lock: UnsafeRawPointer, _ kind: LockKind) {
        if _slowPath(sync_lock_order_flag != 0) { noteReleasing(lock, kind) }
    }

    @inlinable @inline(__always)
    package static func waiting(_ lock: UnsafeRawPointer, _ kind: LockKind) {
        if _slowPath(sync_lock_order_flag != 0) { noteWaiting(lock, kind) }
    }

    /// After a slow path that may have waited: `result` 0 or EOWNERDEAD is an acquire.
    @inlinable @inline(__always)
    package static func settled(_ lock: UnsafeRawPointer, _ kind: LockKind, _ result: Int32, tried: Bool = false) -> Int32 {
        if _slowPath(sync_lock_order_flag != 0) { noteSettled(lock, kind, result, tried: tried) }
        return result
    }

    /// A lock's slow path, `wait`, which may block: the wait is seen before (its edges are checked
    /// before the thread blocks), and the result after (0 or EOWNERDEAD is an acquire).
    @inlinable @inline(__always)
    package static func waited(_ lock: UnsafeRawPointer, _ kind: LockKind, _ wait: () -> Int32) -> Int32 {
        waiting(lock, kind)
        return settled(lock, kind, wait())
    }

    /// A trylock's result from a caller of a core function that is also used inside slow paths.
    @inlinable @inline(__always)
    package static func tried(_ lock: UnsafeRawPointer, _ kind: LockKind, _ result: Int32) -> Int32 {
        if _slowPath(sync_lock_order_flag != 0) && result == 0 { noteAcquired(lock, kind, tried: true) }
        return result
    }

    /// The first try of a blocking acquire: `attempt`, a trylock of `lock`, opens an acquire
    /// that waits if it fails (an interpreter tries before it waits). Taken there (0 or
    /// EOWNERDEAD), the lock counts as a lock, with the orders from the locks held before it,
    /// not as a trylock. While checking is on, the thread hook runs first (a binding names the
    /// calling thread there, so reports and waits show the name).
    @inlinable @inline(__always)
    package static func firstTry(_ lock: UnsafeRawPointer, _ attempt: () -> Int32) -> Int32 {
        if _slowPath(sync_lock_order_flag != 0) { return firstTrySlow(lock, attempt) }
        return attempt()
    }

    /// The caller's `from` hold of the rwlock at `lock` became a `to` hold (a downgrade, an
    /// upgrade): the same lock, no new order; the edges it opens later show the new mode.
    @inlinable @inline(__always)
    package static func changed(_ lock: UnsafeRawPointer, from: LockKind, to: LockKind) {
        if _slowPath(sync_lock_order_flag != 0) { noteChanged(lock, from: from, to: to) }
    }

    /// A mutex unlock while checking is on: off the fast path (which then keeps no value
    /// across a call), the hook and then the unlock itself.
    @usableFromInline @inline(never)
    package static func unlockingMutex(_ word: MutexWord.Word) -> Int32 {
        noteReleasing(word, .mutex)
        return MutexWord.unlock(word, hooked: true)
    }

    /// The `synchronized` entry lock at `lock` now stands for `token` (while it has users).
    @inlinable @inline(__always)
    package static func alias(_ lock: UnsafeRawPointer, to token: UInt) {
        if _slowPath(sync_lock_order_flag != 0) { noteAlias(lock, token) }
    }

    /// The lock at `lock` was initialized or destroyed: its edges and its name go.
    @inlinable @inline(__always)
    package static func forget(_ lock: UnsafeRawPointer) {
        if _slowPath(sync_lock_order_flag != 0 || graphUsed.load(ordering: .relaxed)) { forgetNode(UInt(bitPattern: lock)) }
    }

    /// Whether the graph has ever had a node or a name (so a forget must look, even with
    /// checking off).
    @usableFromInline static let graphUsed = Atomic<Bool>(false)

    // MARK: state

    struct Held {
        var address: UInt
        var kind: LockKind
        var tried: Bool
    }

    /// One per thread that has used a lock with checking on; registered in `State.threads`.
    /// Its stack and wait are of checking period `epoch`: those of an older period are stale
    /// (a lock may have been released unseen while checking was off) and go at its next hook.
    final class ThreadLocks {
        var tid: UInt32
        var name: String? = nil               // setThreadName's; kept across periods
        var epoch: Int
        var held: [Held] = []
        var waitingFor: Held? = nil
        init(tid: UInt32, epoch: Int = 0) { self.tid = tid; self.epoch = epoch }

        /// Drops a stale stack: the locks held across an off -> on turn are unknown.
        func renew(_ epoch: Int) {
            guard self.epoch != epoch else { return }
            held = []
            waitingFor = nil
            self.epoch = epoch
        }
    }

    /// An edge's first order: where, by which thread, and the kinds its two locks were taken as.
    struct Edge {
        var site: String
        var thread: UInt32
        var threadName: String?
        var fromKind: LockKind
        var toKind: LockKind
    }

    /// An edge `from -> to` that the graph lacks, with the kinds of this order.
    struct Order {
        var from: Int, to: Int
        var fromKind: LockKind, toKind: LockKind
    }

    struct State {
        var ids: [UInt: Int] = [:]            // live lock address -> node id
        var nodes: [Int: UInt] = [:]          // node id -> its lock's address
        var names: [UInt: String] = [:]       // lock address (synchronized: token) -> its name
        var nextID = 1
        var edges: [Int: [Int: Edge]] = [:]   // from -> to
        var reported: Set<[Int]> = []
        var aliases: [UInt: UInt] = [:]       // synchronized entry lock -> token
        var threads: [ObjectIdentifier: ThreadLocks] = [:]
        var epoch = 0                         // checking period: bumped at each off -> on turn
        var handler: ((LockOrderCycle) -> Void)? = nil
        var siteProvider: (() -> String?)? = nil
        var threadHook: (() -> Void)? = nil
        var abortOnCycle = sync_lock_order_env == 2
    }

    /// The state, only under `mutex` (through a pointer: no dynamic exclusivity checks).
    nonisolated(unsafe) static let state: UnsafeMutablePointer<State> = {
        let state = UnsafeMutablePointer<State>.allocate(capacity: 1)
        state.initialize(to: State())
        return state
    }()

    nonisolated(unsafe) static let mutex: UnsafeMutablePointer<pthread_mutex_t> = {
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        return mutex
    }()

    static func withState<R>(_ body: (inout State) -> R) -> R {
        _ = forkSafe
        if sync_lock_order_flag != 0 { _ = started }  // a name given while off starts nothing
        sync_lock_order_sigquit_check()
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body(&state.pointee)
    }

    /// Once per process, the first time checking is on: SIGQUIT's dump.
    static let started: Bool = {
        _ = forkSafe
        _ = sync_lock_order_install_sigquit { LockOrder.dumpWaits() }
        return true
    }()

    /// Once per process, the first time the state is used: the fork handlers.
    static let forkSafe: Bool = {
        pthread_atfork({ pthread_mutex_lock(LockOrder.mutex) }, { pthread_mutex_unlock(LockOrder.mutex) }, {
            // The child has only the forking thread: the other records and their stacks go.
            let mine = pthread_getspecific(LockOrder.key).map { Unmanaged<ThreadLocks>.fromOpaque($0).takeUnretainedValue() }
            LockOrder.state.pointee.threads = [:]
            if let mine {
                mine.tid = threadID()
                LockOrder.state.pointee.threads[ObjectIdentifier(mine)] = mine
            }
            pthread_mutex_unlock(LockOrder.mutex)
        })
        return true
    }()

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { raw in
            guard let raw else { return }
            let record = Unmanaged<ThreadLocks>.fromOpaque(raw)
            pthread_mutex_lock(LockOrder.mutex)
            LockOrder.state.pointee.threads[ObjectIdentifier(record.takeUnretainedValue())] = nil
            pthread_mutex_unlock(LockOrder.mutex)
            record.release()
        }
        require(status == 0, "LockOrder: pthread_key_create failed (\(status))")
        return key
    }()

    /// Non-nil on a thread while it runs the site provider or the handler: the locks it takes
    /// or waits for there are not checked (they would need sites and reports themselves, and
    /// so callouts again). Releases are: a handler may release the thread's held locks.
    static let calloutKey: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        require(status == 0, "LockOrder: pthread_key_create failed (\(status))")
        return key
    }()

    /// Whether the calling thread is inside the site provider or the handler.
    static var inCallout: Bool { pthread_getspecific(calloutKey) != nil }

    /// Runs `body` with the calling thread marked as inside a callout.
    static func callingOut<R>(_ body: () -> R) -> R {
        let outer = pthread_getspecific(calloutKey)
        pthread_setspecific(calloutKey, UnsafeRawPointer(bitPattern: 1))
        defer { pthread_setspecific(calloutKey, outer) }
        return body()
    }

    /// The calling thread's record (made and registered on first use). Under `mutex`.
    static func current(_ state: inout State) -> ThreadLocks {
        if let raw = pthread_getspecific(key) {
            let record = Unmanaged<ThreadLocks>.fromOpaque(raw).takeUnretainedValue()
            record.renew(state.epoch)
            return record
        }
        let record = ThreadLocks(tid: threadID(), epoch: state.epoch)
        pthread_setspecific(key, Unmanaged.passRetained(record).toOpaque())
        state.threads[ObjectIdentifier(record)] = record
        return record
    }

    /// The lock's identity: a synchronized entry's token, else its address.
    static func resolve(_ state: inout State, _ lock: UnsafeRawPointer, _ kind: LockKind) -> (UInt, LockKind) {
        let address = UInt(bitPattern: lock)
        if !state.aliases.isEmpty, let token = state.aliases[address] { return (token, .synchronized) }
        return (address, kind)
    }

    static func node(_ state: inout State, _ address: UInt) -> Int {
        if let id = state.ids[address] { return id }
        let id = state.nextID
        state.nextID += 1
        state.ids[address] = id
        state.nodes[id] = address
        graphUsed.store(true, ordering: .relaxed)
        return id
    }

    /// The edges into `address` (taken as `kind`) from the locks `record` holds that the graph
    /// lacks, with the kinds of this order.
    static func missingEdges(_ state: inout State, _ record: ThreadLocks, _ address: UInt, _ kind: LockKind) -> [Order] {
        if record.held.isEmpty { return [] }
        let to = node(&state, address)
        var missing: [Order] = []
        for held in record.held where held.address != address {
            let from = node(&state, held.address)
            if state.edges[from]?[to] == nil && !missing.contains(where: { $0.from == from }) {
                missing.append(Order(from: from, to: to, fromKind: held.kind, toKind: kind))
            }
        }
        return missing
    }

    // MARK: hook bodies

    @usableFromInline @inline(never)
    static func noteAcquired(_ lock: UnsafeRawPointer, _ kind: LockKind, tried: Bool) {
        if inCallout { return }
        let (missing, provider) = withState { state -> ([Order], (() -> String?)?) in
            let record = current(&state)
            let (address, kind) = resolve(&state, lock, kind)
            let missing = tried ? [] : missingEdges(&state, record, address, kind)
            record.held.append(Held(address: address, kind: kind, tried: tried))
            record.waitingFor = nil
            return (missing, state.siteProvider)
        }
        if !missing.isEmpty { add(missing, provider) }
    }

    @usableFromInline @inline(never)
    static func noteWaiting(_ lock: UnsafeRawPointer, _ kind: LockKind) {
        if inCallout { return }
        let (missing, provider) = withState { state -> ([Order], (() -> String?)?) in
            let record = current(&state)
            let (address, kind) = resolve(&state, lock, kind)
            record.waitingFor = Held(address: address, kind: kind, tried: false)
            return (missingEdges(&state, record, address, kind), state.siteProvider)
        }
        if !missing.isEmpty { add(missing, provider) }
    }

    @usableFromInline @inline(never)
    static func noteSettled(_ lock: UnsafeRawPointer, _ kind: LockKind, _ result: Int32, tried: Bool) {
        if result == 0 || result == EOWNERDEAD { return noteAcquired(lock, kind, tried: tried) }
        if inCallout { return }
        withState { state in current(&state).waitingFor = nil }
    }

    @usableFromInline @inline(never)
    static func noteReleasing(_ lock: UnsafeRawPointer, _ kind: LockKind) {
        // A release removes the caller's own latest hold of the lock. Only an unowned mutex (a
        // binary semaphore) may be released by another thread than its taker: it has one
        // holder, so a hold on another thread's stack is the one released. A read lock has
        // many holders, and a caller that holds none on its stack releases a hold that
        // checking never saw (taken while off, or in a callout): no other thread's.
        let anyThread = kind == .mutex && UnsafeRawPointer(lock).load(as: UInt32.self) & MutexWord.unowned != 0
        withState { state in
            let (address, _) = resolve(&state, lock, kind)
            let record = current(&state)
            if let i = record.held.lastIndex(where: { $0.address == address }) {
                record.held.remove(at: i)
                return
            }
            guard anyThread else { return }
            for other in state.threads.values where other.epoch == state.epoch {
                if let i = other.held.lastIndex(where: { $0.address == address }) {
                    other.held.remove(at: i)
                    return
                }
            }
        }
    }

    @usableFromInline @inline(never)
    static func firstTrySlow(_ lock: UnsafeRawPointer, _ attempt: () -> Int32) -> Int32 {
        if !inCallout, let hook = withState({ $0.threadHook }) { callingOut(hook) }
        let result = attempt()
        if result == 0 || result == EOWNERDEAD { _ = promote(lock) }
        return result
    }

    /// The caller's latest held trylock of `lock` opened a blocking acquire (an interpreter's
    /// first attempt): it counts as a lock, with the orders from the locks held before it.
    /// 0, or EPERM if the caller holds no trylock of it. Nothing (0) while checking is off.
    package static func promote(_ lock: UnsafeRawPointer) -> Int32 {
        guard sync_lock_order_flag != 0, !inCallout else { return 0 }
        let (result, missing, provider) = withState { state -> (Int32, [Order], (() -> String?)?) in
            let record = current(&state)
            let (address, _) = resolve(&state, lock, .mutex)
            guard let i = record.held.lastIndex(where: { $0.address == address }), record.held[i].tried else {
                return (EPERM, [], nil)
            }
            record.held[i].tried = false
            let below = ThreadLocks(tid: record.tid)
            below.held = Array(record.held[..<i])
            return (0, missingEdges(&state, below, address, record.held[i].kind), state.siteProvider)
        }
        if !missing.isEmpty { add(missing, provider) }
        return result
    }

    @usableFromInline @inline(never)
    static func noteChanged(_ lock: UnsafeRawPointer, from: LockKind, to: LockKind) {
        if inCallout { return }
        withState { state in
            let record = current(&state)
            let address = UInt(bitPattern: lock)
            if let i = record.held.lastIndex(where: { $0.address == address && $0.kind == from }) {
                record.held[i].kind = to
            }
        }
    }

    @usableFromInline @inline(never)
    static func noteAlias(_ lock: UnsafeRawPointer, _ token: UInt) {
        withState { state in state.aliases[UInt(bitPattern: lock)] = token }
    }

    @usableFromInline @inline(never)
    static func forgetNode(_ address: UInt) {
        withState { state in
            if !state.names.isEmpty { state.names[address] = nil }
            guard let id = state.ids.removeValue(forKey: address) else { return }
            state.nodes[id] = nil
            state.edges[id] = nil  // edges into it are dead: their target id is no node
        }
    }

    /// Records the new edges (with the calling thread's site) and reports the cycles they close.
    static func add(_ missing: [Order], _ provider: (() -> String?)?) {
        let site = callingOut { captureSite(provider) }
        let me = threadID()
        let (reports, handler, abortOnCycle) = withState { state -> ([LockOrderCycle], ((LockOrderCycle) -> Void)?, Bool) in
            var reports: [LockOrderCycle] = []
            let myName = current(&state).name  // the site provider may have just named the thread
            for order in missing where state.nodes[order.from] != nil && state.nodes[order.to] != nil
                                       && state.edges[order.from]?[order.to] == nil {
                let (from, to) = (order.from, order.to)
                state.edges[from, default: [:]][to] = Edge(site: site, thread: me, threadName: myName,
                                                           fromKind: order.fromKind, toKind: order.toKind)
                guard let path = path(state, from: to, to: from) else { continue }
                let cycle = [from] + path  // from -> to -> ... -> from
                let ring = Array(cycle.dropLast())
                let start = ring.indices.min(by: { ring[$0] < ring[$1] })!
                let canonical = Array(ring[start...] + ring[..<start])
                if state.reported.insert(canonical).inserted { reports.append(describe(state, cycle)) }
            }
            return (reports, state.handler, state.abortOnCycle)
        }
        callingOut {
            for report in reports {
                if let handler { handler(report) } else { writeToStderr(report.description) }
            }
        }
        if !reports.isEmpty && abortOnCycle {
            writeToStderr("libsync: lock-order checking: aborting (LIBSYNC_CHECK_LOCK_ORDER=abort or the abort option)\n")
            abort()
        }
    }

    /// The shortest path of live nodes from `from` to `to` (both included), if any.
    static func path(_ state: State, from: Int, to: Int) -> [Int]? {
        var parent: [Int: Int] = [from: from]
        var queue = [from], head = 0
        while head < queue.count {
            let node = queue[head]
            head += 1
            if node == to {
                var path = [to], cursor = to
                while cursor != from { cursor = parent[cursor]!; path.append(cursor) }
                return path.reversed()
            }
            for next in (state.edges[node] ?? [:]).keys.sorted() where state.nodes[next] != nil && parent[next] == nil {
                parent[next] = node
                queue.append(next)
            }
        }
        return nil
    }

    static func describe(_ state: State, _ cycle: [Int]) -> LockOrderCycle {
        var edges: [LockOrderCycle.Edge] = []
        for i in 0..<(cycle.count - 1) {
            let from = state.nodes[cycle[i]]!, to = state.nodes[cycle[i + 1]]!
            let edge = state.edges[cycle[i]]![cycle[i + 1]]!
            edges.append(LockOrderCycle.Edge(from: from, to: to, fromKind: edge.fromKind.name, toKind: edge.toKind.name,
                                             fromName: state.names[from], toName: state.names[to],
                                             thread: edge.thread, threadName: edge.threadName, site: edge.site))
        }
        return LockOrderCycle(edges: edges)
    }

    /// Where the calling thread is: the site provider's text if it gives one, else a C
    /// backtrace without the library's own frames.
    static func captureSite(_ provider: (() -> String?)?) -> String {
        if let provider, let text = provider(), !text.isEmpty { return text }
        let capacity = 64
        let frames = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: capacity)
        defer { frames.deallocate() }
        let count = Int(sync_backtrace(frames, Int32(capacity)))
        guard count > 0, let symbols = sync_backtrace_symbols(frames, Int32(count)) else { return "(no backtrace)" }
        defer { free(symbols) }
        var lines: [String] = []
        var inLibrary = true
        for i in 0..<count {
            let line = symbols[i].map { String(cString: $0) } ?? "?"
            if inLibrary && (line.contains("libsync.so") || line.contains("$s7LibSync") || line.contains("$s8SyncCABI")
                             || line.contains("sync_mutex_") || line.contains("sync_rwlock_") || line.contains("sync_spinlock_")
                             || line.contains("sync_recursive_lock_") || line.contains("sync_synchronized")
                             || line.contains("sync_condition")) { continue }
            inLibrary = false
            lines.append(line)
        }
        return lines.isEmpty ? "(no frames outside libsync)" : lines.joined(separator: "\n")
    }

    static func writeToStderr(_ text: String) {
        var text = text
        if !text.hasSuffix("\n") { text += "\n" }
        text.withCString { pointer in
            var offset = 0
            let total = strlen(pointer)
            while offset < total {
                let n = write(2, pointer + offset, total - offset)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                offset += n
            }
        }
    }

    // MARK: control

    package static var isEnabled: Bool {
        get { sync_lock_order_on() != 0 }
        set {
            guard newValue else { return sync_lock_order_set(0) }
            _ = started
            // Off -> on starts a new period: the stacks of the last one may hold locks released
            // while checking was off. Under the mutex, so that no hook sees the flag on with
            // the old period.
            withState { state in
                if sync_lock_order_on() == 0 {
                    state.epoch += 1
                    sync_lock_order_set(1)
                }
            }
        }
    }

    // The replaced callout is returned from under the mutex and released after it: what it
    // captured may be freed then, and a freed lock calls `forget`, which takes the mutex.
    package static func setHandler(_ handler: ((LockOrderCycle) -> Void)?) {
        let replaced = withState { state in
            defer { state.handler = handler }
            return state.handler
        }
        withExtendedLifetime(replaced) {}
    }
    package static func setSiteProvider(_ provider: (() -> String?)?) {
        let replaced = withState { state in
            defer { state.siteProvider = provider }
            return state.siteProvider
        }
        withExtendedLifetime(replaced) {}
    }
    package static func setThreadHook(_ hook: (() -> Void)?) {
        let replaced = withState { state in
            defer { state.threadHook = hook }
            return state.threadHook
        }
        withExtendedLifetime(replaced) {}
    }
    package static var abortOnCycle: Bool {
        get { withState { $0.abortOnCycle } }
        set { withState { $0.abortOnCycle = newValue } }
    }

    /// Forgets every order and report. The held stacks stay (those locks are still held), and
    /// so do the aliases of the `synchronized` tokens on them, which their exits resolve.
    package static func reset() {
        withState { state in
            state.ids = [:]
            state.nodes = [:]
            state.edges = [:]
            state.reported = []
            var heldTokens = Set<UInt>()
            for record in state.threads.values where record.epoch == state.epoch {
                for held in record.held where held.kind == .synchronized { heldTokens.insert(held.address) }
            }
            state.aliases = state.aliases.filter { heldTokens.contains($0.value) }
        }
    }

    // MARK: waits

    /// Which thread holds and which waits for each lock, with the threads of a wait-for cycle
    /// marked `*`.
    package static func waitsDescription() -> String {
        withState { state in
            for record in state.threads.values { record.renew(state.epoch) }
            let records = state.threads.values.sorted { $0.tid < $1.tid }
            func holders(_ address: UInt) -> [ThreadLocks] { records.filter { $0.held.contains { $0.address == address } } }
            // A thread is on a wait-for cycle if following "waits for a lock held by" from it
            // comes back to it.
            func onCycle(_ start: ThreadLocks) -> [ThreadLocks]? {
                var parent: [ObjectIdentifier: ThreadLocks] = [:]
                var queue = [start], head = 0
                while head < queue.count {
                    let thread = queue[head]
                    head += 1
                    guard let wanted = thread.waitingFor else { continue }
                    for holder in holders(wanted.address) {
                        if holder === start {
                            var cycle = [start], cursor = thread
                            while cursor !== start { cycle.insert(cursor, at: 1); cursor = parent[ObjectIdentifier(cursor)]! }
                            return cycle
                        }
                        if parent[ObjectIdentifier(holder)] == nil {
                            parent[ObjectIdentifier(holder)] = thread
                            queue.append(holder)
                        }
                    }
                }
                return nil
            }
            func lockName(_ held: Held) -> String { lockText(held.kind.name, state.names[held.address], held.address) }
            func threadName(_ record: ThreadLocks) -> String { threadText(record.tid, record.name) }
            var text = "libsync: locks held and awaited, per thread (* = on a wait-for cycle: a deadlock)\n"
            var cycles: [[ThreadLocks]] = []
            var marked = Set<ObjectIdentifier>()
            for record in records {
                if let cycle = onCycle(record) {
                    if !marked.contains(ObjectIdentifier(record)) { cycles.append(cycle) }
                    for thread in cycle { marked.insert(ObjectIdentifier(thread)) }
                }
            }
            for record in records where !record.held.isEmpty || record.waitingFor != nil {
                let mark = marked.contains(ObjectIdentifier(record)) ? "*" : " "
                text += "\(mark) \(threadName(record))\n"
                for held in record.held { text += "      holds \(lockName(held))\(held.tried ? " (trylock)" : "")\n" }
                if let wanted = record.waitingFor {
                    let owners = holders(wanted.address).map(threadName)
                    text += "      waits for \(lockName(wanted)), held by \(owners.isEmpty ? "no checked thread" : owners.joined(separator: ", "))"
                    text += mark == "*" ? "   <-- deadlock\n" : "\n"
                }
            }
            if cycles.isEmpty { text += "no wait-for cycle\n" }
            for cycle in cycles {
                var line = "deadlock: wait-for cycle"
                for thread in cycle {
                    line += " \(threadName(thread)) -> \(lockName(thread.waitingFor!)) ->"
                }
                text += line + " \(threadName(cycle[0]))\n"
            }
            return text
        }
    }

    package static func dumpWaits() { writeToStderr(waitsDescription()) }

    // MARK: names

    /// A lock as reports show it: `mutex "accounts" 0x7f..`, or without a name `mutex 0x7f..`.
    static func lockText(_ kind: String, _ name: String?, _ address: UInt) -> String {
        "\(kind) \(name.map { "\"\($0)\" " } ?? "")0x\(String(address, radix: 16))"
    }

    /// A thread as reports show it: `thread 1234 "worker"`, or without a name `thread 1234`.
    static func threadText(_ tid: UInt32, _ name: String?) -> String {
        "thread \(tid)\(name.map { " \"\($0)\"" } ?? "")"
    }

    /// What `isValidName` requires, for messages.
    package static let nameRule = "a name is not empty and has no control character (such as a newline)"

    /// Whether `name` may name a lock or a thread: not empty, no control character (a report
    /// is one lock or thread a line).
    package static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// Names the lock at `lock` (its address; synchronized: the token) in reports and the waits
    /// dump, or removes its name (nil). The name lasts until the lock is initialized again,
    /// freed as a Swift object, forgotten, or named again; it is kept whether checking is on or
    /// off. 0, or EINVAL for a name that is not valid.
    package static func setName(_ lock: UnsafeRawPointer, _ name: String?) -> Int32 {
        if let name, !isValidName(name) { return EINVAL }
        graphUsed.store(true, ordering: .relaxed)  // forgets must now look
        withState { state in state.names[UInt(bitPattern: lock)] = name }
        return 0
    }

    /// The name of the lock at `lock`, if it has one.
    package static func name(of lock: UnsafeRawPointer) -> String? {
        withState { state in state.names[UInt(bitPattern: lock)] }
    }

    /// Names the calling thread in reports and the waits dump, or removes its name (nil): the
    /// edges it adds from now on keep that name. 0, or EINVAL for a name that is not valid.
    package static func setThreadName(_ name: String?) -> Int32 {
        if let name, !isValidName(name) { return EINVAL }
        withState { state in current(&state).name = name }
        return 0
    }
}

/// A potential deadlock found by lock-order checking: locks taken in orders that form a cycle.
/// `edges[i].to` is `edges[i + 1].from`, and the last edge's `to` the first's `from`.
public struct LockOrderCycle: Sendable, CustomStringConvertible {
    public struct Edge: Sendable {
        /// The locks' addresses (synchronized: the token, the object's address).
        public let from: UInt, to: UInt
        /// "mutex", "rwlock (read)", "rwlock (write)", "spin lock" or "synchronized": how each
        /// lock was taken on this edge (for an rwlock, the side).
        public let fromKind: String, toKind: String
        /// The locks' names (a Swift lock's `label`, C's `sync_debug_lock_name`, Python's
        /// `name=`), if they have one.
        public let fromName: String?, toName: String?
        /// The kernel id of the thread that first took (or waited for) `to` while holding `from`.
        public let thread: UInt32
        /// That thread's name then (`LockOrderChecking.threadName`; a Python thread's name), if any.
        public let threadName: String?
        /// Where: the site provider's text (Python: its stack), else a C backtrace, one frame a line.
        public let site: String
    }
    public let edges: [Edge]

    public var description: String {
        var text = "libsync: potential deadlock: lock-order cycle of \(edges.count) locks\n"
        for edge in edges {
            text += "  \(LockOrder.lockText(edge.fromKind, edge.fromName, edge.from))"
            text += " -> \(LockOrder.lockText(edge.toKind, edge.toName, edge.to))"
            text += ", first in this order in \(LockOrder.threadText(edge.thread, edge.threadName)) at:\n"
            for line in edge.site.split(separator: "\n", omittingEmptySubsequences: false) { text += "      \(line)\n" }
        }
        return text
    }
}

/// Lock-order checking (debug mode) for every libsync lock: mutex, recursive lock, rwlock,
/// spin lock, `synchronized`, conditions and condition locks. See docs/lock_order.md.
public enum LockOrderChecking {
    /// On or off (off by default; `LIBSYNC_CHECK_LOCK_ORDER=1` or `=abort` at load turns it on).
    /// Locks already held when it is turned on are not on the threads' stacks (their release
    /// is ignored); after an off -> on turn, neither are the locks held across it.
    public static var isEnabled: Bool {
        get { LockOrder.isEnabled }
        set { LockOrder.isEnabled = newValue }
    }

    /// Whether a reported cycle aborts the process (after the report).
    public static var abortsOnCycle: Bool {
        get { LockOrder.abortOnCycle }
        set { LockOrder.abortOnCycle = newValue }
    }

    /// Replaces the default report (stderr) with `handler`, called once per cycle in the thread
    /// that closed it, holding its locks; nil restores the default. The locks the handler takes
    /// are not checked.
    public static func onCycle(_ handler: (@Sendable (LockOrderCycle) -> Void)?) {
        LockOrder.setHandler(handler.map { handler in { handler($0) } })
    }

    /// Forgets the lock at `lock` (call before freeing memory that held a lock which is no
    /// Swift lock object and is not initialized again).
    public static func forget(_ lock: UnsafeRawPointer) { LockOrder.forgetNode(UInt(bitPattern: lock)) }

    /// Forgets every order seen and every cycle reported (held locks stay held, names stay).
    public static func reset() { LockOrder.reset() }

    /// The calling thread's name in reports and the waits dump (nil: none, the default); a
    /// name is not empty and has no control character (trap). The orders the thread records
    /// keep the name it had then.
    public static var threadName: String? {
        get { LockOrder.withState { state in LockOrder.current(&state).name } }
        set { require(LockOrder.setThreadName(newValue) == 0, "LockOrderChecking.threadName: \(LockOrder.nameRule)") }
    }

    /// The locks each thread holds and waits for, with any wait-for cycle marked.
    public static func waitsDescription() -> String { LockOrder.waitsDescription() }

    /// Writes `waitsDescription()` to stderr (so does SIGQUIT while checking is on, if its
    /// disposition was the default).
    public static func dumpWaits() { LockOrder.dumpWaits() }
}
