import Glibc
import LibSync

// sync/distributed_lock.h, the distributed semaphore: the object is a retained
// DistributedSemaphore behind an opaque pointer; each function converts arguments and calls the core.

private func object(_ semaphore: OpaquePointer) -> DistributedSemaphore {
    Unmanaged<DistributedSemaphore>.fromOpaque(UnsafeRawPointer(semaphore)).takeUnretainedValue()
}

@_cdecl("sync_distributed_semaphore_create")
public func c_sync_distributed_semaphore_create(_ target: UnsafePointer<CChar>?, _ permits: Int32, _ flags: UInt32,
                                                _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let target, let text = String(validatingCString: target) else { return EINVAL }
    let (semaphore, code) = DistributedSemaphore.make(text, permits: Int(permits), options: flags)
    if let semaphore { out.pointee = OpaquePointer(Unmanaged.passRetained(semaphore).toOpaque()) }
    return code
}

@_cdecl("sync_distributed_semaphore_destroy")
public func c_sync_distributed_semaphore_destroy(_ semaphore: OpaquePointer?) {
    guard let semaphore else { return }
    Unmanaged<DistributedSemaphore>.fromOpaque(UnsafeRawPointer(semaphore)).release()
}

@_cdecl("sync_distributed_semaphore_path")
public func c_sync_distributed_semaphore_path(_ semaphore: OpaquePointer?) -> UnsafePointer<CChar>? {
    semaphore.map { UnsafePointer(object($0).cPath) }
}

@_cdecl("sync_distributed_semaphore_permits")
public func c_sync_distributed_semaphore_permits(_ semaphore: OpaquePointer?) -> Int32 {
    semaphore.map { Int32(object($0).permits) } ?? -1
}

@_cdecl("sync_distributed_semaphore_try_acquire")
public func c_sync_distributed_semaphore_try_acquire(_ semaphore: OpaquePointer?) -> Int32 {
    semaphore.map { object($0).tryAcquireCode() } ?? EINVAL
}

@_cdecl("sync_distributed_semaphore_acquire")
public func c_sync_distributed_semaphore_acquire(_ semaphore: OpaquePointer?, _ timeout: Int64, _ poll: Int64) -> Int32 {
    guard let semaphore else { return EINVAL }
    return object(semaphore).acquireCode(deadline: Deadline.after(nanoseconds: timeout), pollNanoseconds: poll)
}

@_cdecl("sync_distributed_semaphore_acquire_until")
public func c_sync_distributed_semaphore_acquire_until(_ semaphore: OpaquePointer?, _ deadline: Int64, _ poll: Int64) -> Int32 {
    guard let semaphore else { return EINVAL }
    return object(semaphore).acquireCode(deadline: Deadline.until(deadline), pollNanoseconds: poll)
}

@_cdecl("sync_distributed_semaphore_acquire_interruptible")
public func c_sync_distributed_semaphore_acquire_interruptible(_ semaphore: OpaquePointer?, _ deadline: Int64, _ poll: Int64) -> Int32 {
    guard let semaphore else { return EINVAL }
    return object(semaphore).acquireCode(deadline: Deadline.until(deadline), pollNanoseconds: poll, interruptible: true)
}

@_cdecl("sync_distributed_semaphore_release")
public func c_sync_distributed_semaphore_release(_ semaphore: OpaquePointer?) -> Int32 {
    semaphore.map { object($0).releaseCode() } ?? EINVAL
}

@_cdecl("sync_distributed_semaphore_token")
public func c_sync_distributed_semaphore_token(_ semaphore: OpaquePointer?, _ token: UnsafeMutablePointer<UInt64>?) -> Int32 {
    guard let semaphore, let token else { return EINVAL }
    let (value, code) = object(semaphore).tokenCode()
    if code == 0 { token.pointee = value }
    return code
}

@_cdecl("sync_distributed_semaphore_is_held")
public func c_sync_distributed_semaphore_is_held(_ semaphore: OpaquePointer?) -> Bool {
    semaphore.map { object($0).isHeldByCaller() } ?? false
}

@_cdecl("sync_distributed_semaphore_hold_state")
public func c_sync_distributed_semaphore_hold_state(_ semaphore: OpaquePointer?) -> Int32 {
    semaphore.map { object($0).holdStateCode() } ?? -EINVAL
}

@_cdecl("sync_distributed_semaphore_break")
public func c_sync_distributed_semaphore_break(_ semaphore: OpaquePointer?) -> Int32 {
    semaphore.map { object($0).breakCode() } ?? EINVAL
}
