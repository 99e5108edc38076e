import Glibc
import LibSync

// sync/distributed_lock.h's read/write lock: a retained DistributedReadWriteLock behind an opaque
// pointer; each function converts arguments and calls the core.

private func object(_ lock: OpaquePointer) -> DistributedReadWriteLock {
    Unmanaged<DistributedReadWriteLock>.fromOpaque(UnsafeRawPointer(lock)).takeUnretainedValue()
}

@_cdecl("sync_distributed_rwlock_create")
public func c_sync_distributed_rwlock_create(_ path: UnsafePointer<CChar>?, _ flags: UInt32, _ mode: Int32,
                                             _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let path, let text = String(validatingCString: path), mode >= -1 else { return EINVAL }
    let (lock, code) = DistributedReadWriteLock.make(text, options: DistributedLock.Options(rawValue: flags),
                                                     mode: mode < 0 ? nil : UInt32(mode))
    if let lock { out.pointee = OpaquePointer(Unmanaged.passRetained(lock).toOpaque()) }
    return code
}

@_cdecl("sync_distributed_rwlock_destroy")
public func c_sync_distributed_rwlock_destroy(_ lock: OpaquePointer?) {
    guard let lock else { return }
    Unmanaged<DistributedReadWriteLock>.fromOpaque(UnsafeRawPointer(lock)).release()
}

@_cdecl("sync_distributed_rwlock_try_lock")
public func c_sync_distributed_rwlock_try_lock(_ lock: OpaquePointer?, _ kind: Int32) -> Int32 {
    guard let lock, let kind = DistributedReadWriteLock.Kind(rawValue: kind) else { return EINVAL }
    return object(lock).tryLockCode(kind)
}

@_cdecl("sync_distributed_rwlock_lock")
public func c_sync_distributed_rwlock_lock(_ lock: OpaquePointer?, _ kind: Int32, _ timeout: Int64, _ poll: Int64) -> Int32 {
    guard let lock, let kind = DistributedReadWriteLock.Kind(rawValue: kind) else { return EINVAL }
    return object(lock).lockCode(kind, deadline: Deadline.after(nanoseconds: timeout), pollNanoseconds: poll)
}

@_cdecl("sync_distributed_rwlock_lock_interruptible")
public func c_sync_distributed_rwlock_lock_interruptible(_ lock: OpaquePointer?, _ kind: Int32, _ deadline: Int64,
                                                         _ poll: Int64) -> Int32 {
    guard let lock, let kind = DistributedReadWriteLock.Kind(rawValue: kind) else { return EINVAL }
    return object(lock).lockCode(kind, deadline: Deadline.until(deadline), pollNanoseconds: poll, interruptible: true)
}

@_cdecl("sync_distributed_rwlock_cancel")
public func c_sync_distributed_rwlock_cancel(_ lock: OpaquePointer?) {
    lock.map { object($0).cancel() }
}

@_cdecl("sync_distributed_rwlock_unlock")
public func c_sync_distributed_rwlock_unlock(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).unlockCode() } ?? EINVAL
}

@_cdecl("sync_distributed_rwlock_unlock_all")
public func c_sync_distributed_rwlock_unlock_all(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).unlockCode(all: true) } ?? EINVAL
}

@_cdecl("sync_distributed_rwlock_kind")
public func c_sync_distributed_rwlock_kind(_ lock: OpaquePointer?) -> Int32 {
    lock.flatMap { object($0).state.kind?.rawValue } ?? 0
}

@_cdecl("sync_distributed_rwlock_count")
public func c_sync_distributed_rwlock_count(_ lock: OpaquePointer?) -> Int32 {
    lock.map { Int32(object($0).state.count) } ?? 0
}

@_cdecl("sync_distributed_rwlock_token")
public func c_sync_distributed_rwlock_token(_ lock: OpaquePointer?, _ out: UnsafeMutablePointer<UInt64>?) -> Int32 {
    guard let lock, let out else { return EINVAL }
    let (token, code) = object(lock).tokenCode()
    if code == 0 { out.pointee = token }
    return code
}

@_cdecl("sync_distributed_rwlock_break")
public func c_sync_distributed_rwlock_break(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).breakCode() } ?? EINVAL
}

/// An event handler of a read/write lock: (lock, event, context).
public typealias CReadWriteEventHandler = @convention(c) (OpaquePointer?, Int32, UnsafeMutableRawPointer?) -> Void

@_cdecl("sync_distributed_rwlock_set_event_handler")
public func c_sync_distributed_rwlock_set_event_handler(_ lock: OpaquePointer?, _ handler: CReadWriteEventHandler?,
                                                        _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let lock else { return EINVAL }
    guard let handler else { return object(lock).setEventHandlerCode(nil) }
    let address = UInt(bitPattern: context)  // (a Sendable form of the caller's pointer)
    return object(lock).setEventHandlerCode { held, event in
        handler(OpaquePointer(Unmanaged.passUnretained(held).toOpaque()), event.rawValue, UnsafeMutableRawPointer(bitPattern: address))
    }
}

@_cdecl("sync_distributed_rwlock_hold_state")
public func c_sync_distributed_rwlock_hold_state(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).holdStateCode() } ?? 0
}

@_cdecl("sync_distributed_rwlock_lost")
public func c_sync_distributed_rwlock_lost(_ lock: OpaquePointer?) -> Bool {
    lock.map { object($0).isLost } ?? false
}

@_cdecl("sync_distributed_rwlock_path")
public func c_sync_distributed_rwlock_path(_ lock: OpaquePointer?) -> UnsafePointer<CChar>? {
    lock.map { UnsafePointer(object($0).cPath) }
}
