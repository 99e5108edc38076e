import Glibc
import LibSync

// sync/distributed_lock.h: the object is a retained DistributedLock behind an opaque pointer;
// each function converts arguments and calls the core.

private func object(_ lock: OpaquePointer) -> DistributedLock {
    Unmanaged<DistributedLock>.fromOpaque(UnsafeRawPointer(lock)).takeUnretainedValue()
}

@_cdecl("sync_distributed_lock_create")
public func c_sync_distributed_lock_create(_ path: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    c_sync_distributed_lock_create_with(path, 0, -1, out)
}

@_cdecl("sync_distributed_lock_create_with")
public func c_sync_distributed_lock_create_with(_ path: UnsafePointer<CChar>?, _ flags: UInt32, _ mode: Int32,
                                                _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let path, let text = String(validatingCString: path) else { return EINVAL }  // (not UTF-8: EINVAL)
    let (lock, code) = DistributedLock.make(path: text, options: flags, mode: mode)
    if let lock { out.pointee = OpaquePointer(Unmanaged.passRetained(lock).toOpaque()) }
    return code
}

@_cdecl("sync_distributed_lock_destroy")
public func c_sync_distributed_lock_destroy(_ lock: OpaquePointer?) {
    guard let lock else { return }
    object(lock).setEventHandler(nil)  // (the handler's context may be freed once destroy returns)
    Unmanaged<DistributedLock>.fromOpaque(UnsafeRawPointer(lock)).release()
}

@_cdecl("sync_distributed_lock_path")
public func c_sync_distributed_lock_path(_ lock: OpaquePointer?) -> UnsafePointer<CChar>? {
    lock.map { UnsafePointer(object($0).cPath) }
}

@_cdecl("sync_distributed_lock_try_lock")
public func c_sync_distributed_lock_try_lock(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).tryLockCode() } ?? EINVAL
}

@_cdecl("sync_distributed_lock_lock")
public func c_sync_distributed_lock_lock(_ lock: OpaquePointer?, _ timeout: Int64, _ poll: Int64) -> Int32 {
    guard let lock else { return EINVAL }
    return object(lock).lockCode(deadline: Deadline.after(nanoseconds: timeout), pollNanoseconds: poll)
}

@_cdecl("sync_distributed_lock_lock_until")
public func c_sync_distributed_lock_lock_until(_ lock: OpaquePointer?, _ deadline: Int64, _ poll: Int64) -> Int32 {
    guard let lock else { return EINVAL }
    return object(lock).lockCode(deadline: Deadline.until(deadline), pollNanoseconds: poll, interrupts: .retried)
}

@_cdecl("sync_distributed_lock_lock_interruptible")
public func c_sync_distributed_lock_lock_interruptible(_ lock: OpaquePointer?, _ deadline: Int64, _ poll: Int64) -> Int32 {
    guard let lock else { return EINVAL }
    return object(lock).lockCode(deadline: Deadline.until(deadline), pollNanoseconds: poll, interrupts: .sliced)
}

@_cdecl("sync_distributed_lock_token")
public func c_sync_distributed_lock_token(_ lock: OpaquePointer?, _ out: UnsafeMutablePointer<UInt64>?) -> Int32 {
    guard let lock, let out else { return EINVAL }
    let (token, code) = object(lock).tokenCode()
    if code == 0 { out.pointee = token }
    return code
}

@_cdecl("sync_distributed_lock_error_message")
public func c_sync_distributed_lock_error_message() -> UnsafePointer<CChar> {
    DistributedLockMessage.cString ?? UnsafePointer(emptyMessage)
}

nonisolated(unsafe) private let emptyMessage: UnsafeMutablePointer<CChar> = strdup("")!

@_cdecl("sync_distributed_lock_unlock")
public func c_sync_distributed_lock_unlock(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).unlockCode() } ?? EINVAL
}

@_cdecl("sync_distributed_lock_unlock_all")
public func c_sync_distributed_lock_unlock_all(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).unlockAllCode() } ?? EINVAL
}

@_cdecl("sync_distributed_lock_count")
public func c_sync_distributed_lock_count(_ lock: OpaquePointer?) -> Int32 {
    lock.map { Int32(object($0).countHeldByCaller()) } ?? 0
}

@_cdecl("sync_distributed_lock_break")
public func c_sync_distributed_lock_break(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).breakLockCode() } ?? EINVAL
}

@_cdecl("sync_distributed_lock_recover")
public func c_sync_distributed_lock_recover(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).recoverStaleCode() } ?? EINVAL
}

@_cdecl("sync_distributed_lock_holder")
public func c_sync_distributed_lock_holder(_ lock: OpaquePointer?, _ out: UnsafeMutableRawPointer?) -> Int32 {
    guard let lock, let out else { return EINVAL }
    let (holder, code) = object(lock).holderCode()
    guard let holder else { return code == 0 ? ENOENT : code }
    // sync_distributed_lock_holder_t's layout (a C test checks these offsets).
    out.storeBytes(of: holder.acquiredNanoseconds, toByteOffset: 0, as: Int64.self)
    out.storeBytes(of: holder.processStart, toByteOffset: 8, as: UInt64.self)
    out.storeBytes(of: holder.pid, toByteOffset: 16, as: Int32.self)
    let flags: UInt32 = (holder.isOnThisHost ? 1 : 0) | (holder.isStale ? 2 : 0)
    out.storeBytes(of: flags, toByteOffset: 20, as: UInt32.self)
    let host = Array(holder.host.utf8.prefix(255)) + [0]
    host.withUnsafeBytes { (out + 24).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
    return 0
}

@_cdecl("sync_distributed_lock_date")
public func c_sync_distributed_lock_date(_ lock: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> Int32 {
    guard let lock, let out else { return EINVAL }
    let (holder, code) = object(lock).holderCode()
    guard let holder else { return code == 0 ? ENOENT : code }
    out.pointee = holder.acquiredNanoseconds
    return 0
}

@_cdecl("sync_distributed_lock_is_held")
public func c_sync_distributed_lock_is_held(_ lock: OpaquePointer?) -> Bool {
    lock.map { object($0).isHeldByCaller() } ?? false
}

@_cdecl("sync_distributed_lock_is_held_elsewhere")
public func c_sync_distributed_lock_is_held_elsewhere(_ lock: OpaquePointer?) -> Bool {
    lock.map { object($0).isHeldElsewhereByCaller() } ?? false
}

public typealias CEventHandler = @convention(c) (OpaquePointer?, Int32, UnsafeMutableRawPointer?) -> Void

@_cdecl("sync_distributed_lock_set_event_handler")
public func c_sync_distributed_lock_set_event_handler(_ lock: OpaquePointer?, _ handler: CEventHandler?,
                                                      _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let lock else { return EINVAL }
    guard let handler else {
        object(lock).setEventHandler(nil)
        return 0
    }
    let address = UInt(bitPattern: context)  // (a Sendable form of the caller's pointer)
    object(lock).setEventHandler { held, event in
        handler(OpaquePointer(Unmanaged.passUnretained(held).toOpaque()), event.rawValue, UnsafeMutableRawPointer(bitPattern: address))
    }
    return 0
}

@_cdecl("sync_distributed_lock_hold_state")
public func c_sync_distributed_lock_hold_state(_ lock: OpaquePointer?) -> Int32 {
    lock.map { object($0).holdStateCode() } ?? 0
}

@_cdecl("sync_distributed_lock_lost")
public func c_sync_distributed_lock_lost(_ lock: OpaquePointer?) -> Bool {
    lock.map { object($0).isLost } ?? false
}

@_cdecl("sync_distributed_lock_lock_cancellable")
public func c_sync_distributed_lock_lock_cancellable(_ lock: OpaquePointer?, _ deadline: Int64, _ poll: Int64,
                                                     _ cancelled: (@convention(c) (UnsafeMutableRawPointer?) -> Bool)?,
                                                     _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let lock else { return EINVAL }
    guard let cancelled else {
        return object(lock).lockCode(deadline: Deadline.until(deadline), pollNanoseconds: poll, interrupts: .sliced)
    }
    return object(lock).lockCode(deadline: Deadline.until(deadline), pollNanoseconds: poll, interrupts: .sliced) {
        cancelled(context)
    }
}

@_cdecl("sync_distributed_lock_is_url")
public func c_sync_distributed_lock_is_url(_ target: UnsafePointer<CChar>?) -> Bool {
    guard let target, let text = String(validatingCString: target) else { return false }
    return DistributedLock.isURL(text)
}

@_cdecl("sync_distributed_lock_canonical")
public func c_sync_distributed_lock_canonical(_ target: UnsafePointer<CChar>?, _ buffer: UnsafeMutablePointer<CChar>?,
                                              _ size: Int, _ length: UnsafeMutablePointer<Int>?) -> Int32 {
    guard let target, let text = String(validatingCString: target),  // (not UTF-8: EINVAL, as create)
          let canonical = DistributedLock.canonicalTarget(text) else { return EINVAL }
    let bytes = canonical.utf8.count
    length?.pointee = bytes
    guard let buffer, bytes < size else { return ERANGE }
    canonical.withCString { buffer.update(from: $0, count: bytes + 1) }
    return 0
}
