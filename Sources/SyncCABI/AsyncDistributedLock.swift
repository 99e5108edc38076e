import Glibc
import LibSync
import Synchronization

// sync/async.h for the distributed lock: the handle (AsyncAcquire, kind .distributed) carries a
// `DistributedLockAcquire` of the core, whose task waits; its holder is the caller's owner or
// the handle itself. The core decides; this file converts.

private func object(_ lock: OpaquePointer) -> DistributedLock {
    Unmanaged<DistributedLock>.fromOpaque(UnsafeRawPointer(lock)).takeUnretainedValue()
}

@_cdecl("sync_distributed_lock_lock_async")
public func c_sync_distributed_lock_lock_async(_ lock: OpaquePointer?, _ deadline: Int64, _ poll: Int64, _ fd: Int32,
                                               _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                               _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    distributedLockAsync(lock, deadline, poll, fd, callback, context, owner: 0, out)
}

@_cdecl("sync_distributed_lock_lock_async_owner")
public func c_sync_distributed_lock_lock_async_owner(_ lock: OpaquePointer?, _ deadline: Int64, _ poll: Int64,
                                                     _ fd: Int32, _ callback: AsyncCallback?,
                                                     _ context: UnsafeMutableRawPointer?, _ owner: UInt,
                                                     _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard owner != 0 else {
        out?.pointee = nil
        return EINVAL
    }
    return distributedLockAsync(lock, deadline, poll, fd, callback, context, owner: owner, out)
}

private func distributedLockAsync(_ lock: OpaquePointer?, _ deadline: Int64, _ poll: Int64, _ fd: Int32,
                                  _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?, owner: UInt,
                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let lock else { return EINVAL }
    let target = object(lock)
    let acquire = AsyncAcquire(word: UnsafeMutableRawPointer(lock).assumingMemoryBound(to: Atomic<UInt32>.self),
                               kind: .distributed, eventFD: fd, callback: callback, context: context, owner: owner)
    acquire.distributedLock = target
    let retained = Unmanaged.passRetained(acquire)
    let (pending, code) = DistributedLockAcquire.start(target, deadline: deadline, pollNanoseconds: poll,
                                                       holder: acquire.identity) { [acquire] code in acquire.completed(code) }
    switch code {
    case EINPROGRESS:
        acquire.distributed = pending
    case 0:
        acquire.completedAtOnce(0)
    default:
        retained.release()
        return code
    }
    out.pointee = acquire.handle
    return code
}

@_cdecl("sync_distributed_lock_unlock_async")
public func c_sync_distributed_lock_unlock_async(_ lock: OpaquePointer?, _ owner: UInt) -> Int32 {
    guard let lock, owner != 0 else { return EINVAL }
    return object(lock).unlockCode(caller: owner)
}

@_cdecl("sync_distributed_lock_unlock_all_async")
public func c_sync_distributed_lock_unlock_all_async(_ lock: OpaquePointer?, _ owner: UInt) -> Int32 {
    guard let lock, owner != 0 else { return EINVAL }
    return object(lock).unlockAllCode(caller: owner)
}

@_cdecl("sync_distributed_lock_count_async")
public func c_sync_distributed_lock_count_async(_ lock: OpaquePointer?, _ owner: UInt) -> Int32 {
    guard let lock, owner != 0 else { return 0 }
    return Int32(object(lock).countHeldByCaller(owner))
}

@_cdecl("sync_distributed_lock_is_held_async")
public func c_sync_distributed_lock_is_held_async(_ lock: OpaquePointer?, _ owner: UInt) -> Bool {
    guard let lock, owner != 0 else { return false }
    return object(lock).isHeldByCaller(owner)
}

@_cdecl("sync_distributed_lock_token_async")
public func c_sync_distributed_lock_token_async(_ lock: OpaquePointer?, _ owner: UInt,
                                                _ out: UnsafeMutablePointer<UInt64>?) -> Int32 {
    guard let lock, let out, owner != 0 else { return EINVAL }
    let (token, code) = object(lock).tokenCode(caller: owner)
    if code == 0 { out.pointee = token }
    return code
}

/// sync_async_unlock for a distributed lock's handle.
func releaseDistributed(_ acquire: AsyncAcquire, _ lock: UnsafeMutableRawPointer) -> Int32 {
    guard acquire.memory == lock, let target = acquire.distributedLock else { return EPERM }
    return target.unlockCode(caller: acquire.identity)
}

/// sync_async_cancel for a distributed lock's handle.
func cancelDistributed(_ acquire: AsyncAcquire) -> Int32 {
    guard let pending = acquire.distributed else { return EALREADY }  // (completed at once)
    if pending.cancel() {
        acquire.result.store(ECANCELED, ordering: .releasing)
        return 0
    }
    // Completed: its result is known, even if its delivery is still under way.
    let outcome = pending.result.load(ordering: .acquiring)
    _ = acquire.result.compareExchange(expected: EINPROGRESS, desired: outcome, ordering: .acquiringAndReleasing)
    return EALREADY
}
