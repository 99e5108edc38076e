import Glibc
import LibSync
import Synchronization

// sync/async.h, condition variables (LIBSYNC_1.7_CONDVARASYNC): a wait by the holder of a mutex
// taken through this API (a handle, or an owner) that releases it, waits for a signal and takes
// it again for the same holder before it completes. The core (AsyncCondition) decides.

/// Starts the wait; `holder` is the identity the mutex is held for.
func condWaitAsync(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, holder: UInt?, _ deadline: Int64,
                   _ fd: Int32, _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                   _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let c = lockMemory(c), let word = lockWord(m), let holder, holder != 0 else { return EINVAL }
    let acquire = AsyncAcquire(word: word, kind: .condition, eventFD: fd, callback: callback, context: context, owner: holder)
    let retained = Unmanaged.passRetained(acquire)
    let wait = AsyncCondition.Operation(c, mutex: word, holder: holder, deadline: Deadline.until(deadline), keepAlive: nil)
    acquire.conditionWait = wait
    out.pointee = acquire.handle
    if let result = wait.start({ [acquire] code in deliver(acquire, code) }) {
        out.pointee = nil
        retained.release()
        return result
    }
    return EINPROGRESS
}

/// The holder identity of a handle that holds a mutex (sync_mutex_lock_async's).
func mutexHolder(_ handle: OpaquePointer?) -> UInt? {
    guard let acquire = AsyncAcquire.from(handle), acquire.kind == .mutex else { return nil }
    return acquire.identity
}

@_cdecl("sync_cond_wait_async")
public func c_sync_cond_wait_async(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ holder: OpaquePointer?,
                                   _ deadline: Int64, _ fd: Int32, _ callback: AsyncCallback?,
                                   _ context: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    condWaitAsync(c, m, holder: mutexHolder(holder), deadline, fd, callback, context, out)
}

@_cdecl("sync_cond_wait_async_owner")
public func c_sync_cond_wait_async_owner(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ owner: UInt,
                                         _ deadline: Int64, _ fd: Int32, _ callback: AsyncCallback?,
                                         _ context: UnsafeMutableRawPointer?,
                                         _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    condWaitAsync(c, m, holder: owner, deadline, fd, callback, context, out)
}

@_cdecl("sync_condition_wait_async")
public func c_sync_condition_wait_async(_ c: UnsafeMutableRawPointer?, _ holder: OpaquePointer?, _ deadline: Int64,
                                        _ fd: Int32, _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                        _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let (m, cv) = conditionParts(c) else {
        out?.pointee = nil
        return EINVAL
    }
    return condWaitAsync(cv, m, holder: mutexHolder(holder), deadline, fd, callback, context, out)
}

@_cdecl("sync_condition_wait_async_owner")
public func c_sync_condition_wait_async_owner(_ c: UnsafeMutableRawPointer?, _ owner: UInt, _ deadline: Int64,
                                              _ fd: Int32, _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                              _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let (m, cv) = conditionParts(c) else {
        out?.pointee = nil
        return EINVAL
    }
    return condWaitAsync(cv, m, holder: owner, deadline, fd, callback, context, out)
}

/// Delivers a condition wait's completion, unless it was abandoned: then the mutex, held again
/// for nobody who will run, is released, and the handle freed.
func deliver(_ acquire: AsyncAcquire, _ code: Int32) {
    if acquire.delivery.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged {
        acquire.completed(code)
        acquire.delivery.store(3, ordering: .releasing)
        return
    }
    giveBack(acquire, code)
    Unmanaged.passUnretained(acquire).release()
}

/// Releases the mutex a condition wait that completed with `code` holds again (every result but
/// ENOTRECOVERABLE).
func giveBack(_ acquire: AsyncAcquire, _ code: Int32) {
    if code != ENOTRECOVERABLE { _ = AsyncHold.unlock(acquire.word, holder: acquire.identity) }
}

@_cdecl("sync_async_abandon")
public func c_sync_async_abandon(_ handle: OpaquePointer?) -> Int32 {
    guard let acquire = AsyncAcquire.from(handle), let wait = acquire.conditionWait else { return EINVAL }
    wait.cancel()
    if acquire.delivery.compareExchange(expected: 0, desired: 2, ordering: .acquiringAndReleasing).exchanged {
        return 0  // its completion releases the mutex and frees the handle
    }
    while acquire.delivery.load(ordering: .acquiring) != 3 { sched_yield() }  // a delivery under way ends first
    giveBack(acquire, acquire.result.load(ordering: .acquiring))
    Unmanaged.passUnretained(acquire).release()
    return 0
}

@_cdecl("sync_cond_signal_checked_async")
public func c_sync_cond_signal_checked_async(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ owner: UInt,
                                             _ count: UInt32) -> Int32 {
    guard let c = lockMemory(c), let m = lockWord(m) else { return EINVAL }
    return AsyncCondition.wake(c, holding: m, holder: owner, count: count)
}
