import CSyncShim
import Glibc
import LibSync
import Synchronization

// sync/async.h: a handle is a retained `AsyncAcquire`; its address is the holder identity the
// core records for the locks it takes (AsyncHold). The core decides; this file converts.

/// sync_async_callback_fn.
public typealias AsyncCallback = @convention(c) (OpaquePointer?, Int32, UnsafeMutableRawPointer?) -> Void

final class AsyncAcquire: @unchecked Sendable {
    /// What the handle waits for (AsyncPrimitives.swift has the other kinds' functions).
    enum Kind { case mutex, read, write, semaphore, event, conditionLock, barrier, distributed, condition }

    /// The primitive's memory (for the mutex, its word).
    let word: UnsafeMutablePointer<Atomic<UInt32>>
    let kind: Kind
    let eventFD: Int32
    let callback: AsyncCallback?
    let context: UnsafeMutableRawPointer?
    let result = Atomic<Int32>(EINPROGRESS)
    var waiter: AsyncWaiter?
    /// A distributed lock's acquire (AsyncDistributedLock.swift): its object, and its pending
    /// wait (nil if it completed at once).
    var distributedLock: DistributedLock?
    var distributed: DistributedLockAcquire?
    /// A condition variable's wait (kind `.condition`; AsyncCondition.swift).
    var conditionWait: AsyncCondition.Operation?
    /// A condition wait's delivery: 0 pending, 1 being delivered, 2 abandoned, 3 delivered.
    let delivery = Atomic<Int>(0)
    /// The holder the core records for a lock this acquire takes: the caller's owner
    /// (sync_mutex_lock_async_owner), or the handle itself (its address).
    private(set) var identity: UInt = 0
    /// Whether the handle itself is the holder (it must not be freed while it holds the lock).
    let holdsItself: Bool
    /// A read-write lock's handle that holds a read lock (granted so, or downgraded): read locks
    /// have no owner in the lock, so the handle keeps it. Never set for an owner's acquire
    /// (sync_rwlock_rdlock_async_owner): its read lock is nobody's, as a blocking reader's.
    let holdsRead = Atomic<Bool>(false)
    /// What a completed wait returns beside its result (the barrier's arrival index).
    let detail = Atomic<UInt32>(0)

    init(word: UnsafeMutablePointer<Atomic<UInt32>>, kind: Kind = .mutex, eventFD: Int32, callback: AsyncCallback?,
         context: UnsafeMutableRawPointer?, owner: UInt = 0) {
        self.word = word
        self.kind = kind
        self.eventFD = eventFD
        self.callback = callback
        self.context = context
        holdsItself = owner == 0
        identity = owner != 0 ? owner : UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque())
    }

    var memory: UnsafeMutableRawPointer { UnsafeMutableRawPointer(word) }

    /// Whether the handle holds a lock now (it cannot be freed).
    var holdsLock: Bool {
        switch kind {
        case .mutex: holdsItself && AsyncRuntime.current.holder(of: UInt(bitPattern: word)) == identity
        case .read, .write:
            holdsItself && (holdsRead.load(ordering: .acquiring) || AsyncRWLock.isWriteLocked(memory, by: identity))
        case .semaphore, .event, .barrier, .condition: false
        case .conditionLock: holdsItself && AsyncConditionLock.isHeld(memory, by: identity)
        case .distributed:  // (a cancelled acquire's racing grant is the core's to give back)
            holdsItself && result.load(ordering: .acquiring) == 0 && (distributedLock?.countHeldByCaller(identity) ?? 0) > 0
        }
    }

    var handle: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

    static func from(_ handle: OpaquePointer?) -> AsyncAcquire? {
        handle.map { Unmanaged<AsyncAcquire>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
    }

    /// Delivers a completion: the result, then the descriptor, then the callback.
    func completed(_ code: Int32) {
        if code == 0 && kind == .read && holdsItself { holdsRead.store(true, ordering: .relaxed) }
        result.store(code, ordering: .releasing)
        if eventFD >= 0 {
            if eventFD &+ 1 == sync_async_local_fd && sync_async_local_granted == nil {
                // Completed inside sync_mutex_unlock_local by a release of the loop this
                // eventfd belongs to: that caller delivers it.
                sync_async_local_granted = UnsafeMutableRawPointer(handle)
            } else {
                var one: UInt64 = 1
                while write(eventFD, &one, 8) < 0 && errno == EINTR {}
            }
        }
        callback?(handle, code, context)
    }
}

@_cdecl("sync_mutex_lock_async")
public func c_sync_mutex_lock_async(_ m: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                    _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                    _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    lockAsync(m, deadline, fd, callback, context, owner: 0, out)
}

@_cdecl("sync_mutex_lock_async_owner")
public func c_sync_mutex_lock_async_owner(_ m: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                          _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                          _ owner: UInt, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard owner != 0 else {
        out?.pointee = nil
        return EINVAL
    }
    return lockAsync(m, deadline, fd, callback, context, owner: owner, out)
}

@_cdecl("sync_mutex_try_lock_async")
public func c_sync_mutex_try_lock_async(_ m: UnsafeMutableRawPointer?, _ owner: UInt) -> Int32 {
    guard let word = lockWord(m), owner != 0 else { return EINVAL }
    return AsyncMutex.tryFirst(word, deadline: Deadline.none, holder: owner) ?? EBUSY
}

@_cdecl("sync_mutex_unlock_async")
public func c_sync_mutex_unlock_async(_ m: UnsafeMutableRawPointer?, _ owner: UInt) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return AsyncHold.unlock(word, holder: owner)
}

@_cdecl("sync_mutex_unlock_local")
public func c_sync_mutex_unlock_local(_ m: UnsafeMutableRawPointer?, _ owner: UInt, _ fd: Int32,
                                      _ granted: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    granted?.pointee = nil
    guard let granted, lockWord(m) != nil else { return EINVAL }
    guard fd >= 0 else { return owner == 0 ? c_sync_mutex_unlock(m) : c_sync_mutex_unlock_async(m, owner) }
    // The release decides who gets the lock; a pending acquire of `fd` that it completes (a
    // handoff, in this thread) leaves its handle here instead of writing to `fd`.
    sync_async_local_fd = fd &+ 1
    sync_async_local_granted = nil
    let code = owner == 0 ? c_sync_mutex_unlock(m) : c_sync_mutex_unlock_async(m, owner)
    granted.pointee = OpaquePointer(sync_async_local_granted)
    sync_async_local_fd = 0
    sync_async_local_granted = nil
    return code
}

@_cdecl("sync_mutex_consistent_async")
public func c_sync_mutex_consistent_async(_ m: UnsafeMutableRawPointer?, _ owner: UInt) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    guard word.pointee.load(ordering: .relaxed) & MutexWord.robust != 0 else { return EINVAL }
    return AsyncHold.consistent(word, holder: owner)
}

func lockAsync(_ m: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32, _ callback: AsyncCallback?,
               _ context: UnsafeMutableRawPointer?, owner: UInt, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(m) else { return EINVAL }
    let acquire = AsyncAcquire(word: word, eventFD: fd, callback: callback, context: context, owner: owner)
    let retained = Unmanaged.passRetained(acquire)
    if let result = AsyncMutex.tryFirst(word, deadline: Deadline.until(deadline), holder: acquire.identity) {
        guard result == 0 || result == EOWNERDEAD else {
            retained.release()
            return result
        }
        acquire.result.store(result, ordering: .relaxed)
        out.pointee = acquire.handle
        return result
    }
    let waiter = AsyncWaiter(word: word, task: acquire.identity, deadline: Deadline.until(deadline), keepAlive: nil)
    acquire.waiter = waiter
    out.pointee = acquire.handle
    AsyncRuntime.current.register(waiter) { [acquire] code in acquire.completed(code) }
    return EINPROGRESS
}

@_cdecl("sync_async_result")
public func c_sync_async_result(_ handle: OpaquePointer?) -> Int32 {
    guard let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    return acquire.result.load(ordering: .acquiring)
}

@_cdecl("sync_async_cancel")
public func c_sync_async_cancel(_ handle: OpaquePointer?) -> Int32 {
    guard let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    if acquire.kind == .distributed { return cancelDistributed(acquire) }
    if let wait = acquire.conditionWait { return wait.cancel() ? 0 : EALREADY }  // its completion follows
    guard let waiter = acquire.waiter, AsyncRuntime.current.cancel(waiter, notify: false) else {
        // Completed: its result is known (the core stored it as the waiter left its queue),
        // even if its delivery (eventfd, callback) is still under way on another thread.
        if let outcome = acquire.waiter?.outcome.load(ordering: .acquiring), outcome != EINPROGRESS {
            _ = acquire.result.compareExchange(expected: EINPROGRESS, desired: outcome, ordering: .acquiringAndReleasing)
        }
        return EALREADY
    }
    // A barrier's party that gave up after its cycle tripped has passed (AsyncBarrier).
    if let party = waiter as? AsyncBarrier.Waiter, party.passed {
        acquire.detail.store(party.index, ordering: .relaxed)
        acquire.result.store(0, ordering: .releasing)
        return 0
    }
    acquire.result.store(ECANCELED, ordering: .releasing)
    return 0
}

@_cdecl("sync_async_unlock")
public func c_sync_async_unlock(_ m: UnsafeMutableRawPointer?, _ handle: OpaquePointer?) -> Int32 {
    guard let word = lockWord(m), let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    switch acquire.kind {
    case .mutex: return AsyncHold.unlock(word, holder: acquire.identity)
    case .read, .write: return releaseRWLock(acquire, m!)
    case .semaphore, .event, .barrier, .condition: return EPERM
    case .conditionLock: return AsyncConditionLock.unlock(m!, holder: acquire.identity, condition: nil)
    case .distributed: return releaseDistributed(acquire, m!)
    }
}

@_cdecl("sync_async_consistent")
public func c_sync_async_consistent(_ m: UnsafeMutableRawPointer?, _ handle: OpaquePointer?) -> Int32 {
    guard let word = lockWord(m), let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    guard acquire.kind == .mutex, word.pointee.load(ordering: .relaxed) & MutexWord.robust != 0 else { return EINVAL }
    return AsyncHold.consistent(word, holder: acquire.identity)
}

@_cdecl("sync_async_free")
public func c_sync_async_free(_ handle: OpaquePointer?) -> Int32 {
    guard let acquire = AsyncAcquire.from(handle) else { return 0 }
    if acquire.result.load(ordering: .acquiring) == EINPROGRESS { return EBUSY }
    if acquire.holdsLock { return EBUSY }
    Unmanaged.passUnretained(acquire).release()
    return 0
}
