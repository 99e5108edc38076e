import Glibc
import LibSync

// sync/debug.h: lock-order checking. The core (LockOrder) does the work; these functions convert
// the C handler and site hook into its closures and a cycle into sync_lock_order_cycle_t.

public typealias LockOrderHandlerFunction = @convention(c) (UnsafeRawPointer?, UnsafeMutableRawPointer?) -> Void
public typealias LockOrderSiteHookFunction = @convention(c) (UnsafeMutablePointer<CChar>?, Int, UnsafeMutableRawPointer?) -> Int

/// sync_lock_order_edge_t's layout.
private struct CLockOrderEdge {
    var from: UnsafeRawPointer?
    var to: UnsafeRawPointer?
    var fromKind: UnsafePointer<CChar>?
    var toKind: UnsafePointer<CChar>?
    var thread: UInt32
    var site: UnsafePointer<CChar>?
    var fromName: UnsafePointer<CChar>?
    var toName: UnsafePointer<CChar>?
    var threadName: UnsafePointer<CChar>?
}

/// sync_lock_order_cycle_t's layout.
private struct CLockOrderCycle {
    var length: Int
    var edges: UnsafePointer<CLockOrderEdge>?
    var text: UnsafePointer<CChar>?
}

/// A C handler and its context, carried into the core's closure.
private struct CHandler: @unchecked Sendable {
    let function: LockOrderHandlerFunction
    let context: UnsafeMutableRawPointer?
}

@_cdecl("sync_debug_lock_order")
public func c_sync_debug_lock_order(_ on: Bool) {
    LockOrderChecking.isEnabled = on
}

@_cdecl("sync_debug_lock_order_enabled")
public func c_sync_debug_lock_order_enabled() -> Bool {
    LockOrderChecking.isEnabled
}

@_cdecl("sync_debug_lock_order_set_action")
public func c_sync_debug_lock_order_set_action(_ action: Int32) -> Int32 {
    guard action == 0 || action == 1 else { return EINVAL }
    LockOrderChecking.abortsOnCycle = action == 1
    return 0
}

@_cdecl("sync_debug_lock_order_set_handler")
public func c_sync_debug_lock_order_set_handler(_ function: LockOrderHandlerFunction?, _ context: UnsafeMutableRawPointer?) {
    guard let function else { return LockOrder.setHandler(nil) }
    let handler = CHandler(function: function, context: context)
    LockOrder.setHandler { cycle in
        // Every string lives until the call returns; a missing name is NULL.
        let strings = cycle.edges.flatMap {
            [strdup($0.fromKind), strdup($0.toKind), strdup($0.site), $0.fromName.flatMap { strdup($0) },
             $0.toName.flatMap { strdup($0) }, $0.threadName.flatMap { strdup($0) }]
        } + [strdup(cycle.description)]
        defer { strings.forEach { free($0) } }
        var edges: [CLockOrderEdge] = []
        for (i, edge) in cycle.edges.enumerated() {
            let s = strings[(6 * i)..<(6 * i + 6)].map { $0.map { UnsafePointer($0) } }
            edges.append(CLockOrderEdge(from: UnsafeRawPointer(bitPattern: edge.from), to: UnsafeRawPointer(bitPattern: edge.to),
                                        fromKind: s[0], toKind: s[1], thread: edge.thread, site: s[2],
                                        fromName: s[3], toName: s[4], threadName: s[5]))
        }
        edges.withUnsafeBufferPointer { buffer in
            var c = CLockOrderCycle(length: buffer.count, edges: buffer.baseAddress, text: UnsafePointer(strings.last!))
            withUnsafePointer(to: &c) { handler.function(UnsafeRawPointer($0), handler.context) }
        }
    }
}

@_cdecl("sync_debug_lock_order_set_site_hook")
public func c_sync_debug_lock_order_set_site_hook(_ hook: LockOrderSiteHookFunction?, _ context: UnsafeMutableRawPointer?) {
    guard let hook else { return LockOrder.setSiteProvider(nil) }
    nonisolated(unsafe) let context = context
    LockOrder.setSiteProvider {
        let size = 16384
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
        defer { buffer.deallocate() }
        let written = min(hook(buffer, size, context), size)
        guard written > 0 else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: buffer, count: written), as: UTF8.self)
    }
}

public typealias LockOrderThreadHookFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void

@_cdecl("sync_debug_lock_order_set_thread_hook")
public func c_sync_debug_lock_order_set_thread_hook(_ hook: LockOrderThreadHookFunction?, _ context: UnsafeMutableRawPointer?) {
    guard let hook else { return LockOrder.setThreadHook(nil) }
    nonisolated(unsafe) let context = context
    LockOrder.setThreadHook { hook(context) }
}

@_cdecl("sync_debug_lock_forget")
public func c_sync_debug_lock_forget(_ lock: UnsafeRawPointer?) -> Int32 {
    guard let lock else { return EINVAL }
    LockOrderChecking.forget(lock)
    return 0
}

@_cdecl("sync_debug_lock_name")
public func c_sync_debug_lock_name(_ lock: UnsafeRawPointer?, _ name: UnsafePointer<CChar>?) -> Int32 {
    guard let lock else { return EINVAL }
    guard let name else { return LockOrder.setName(lock, nil) }
    guard let text = String(validatingCString: name) else { return EINVAL }  // not UTF-8
    return LockOrder.setName(lock, text)
}

@_cdecl("sync_debug_thread_name")
public func c_sync_debug_thread_name(_ name: UnsafePointer<CChar>?) -> Int32 {
    guard let name else { return LockOrder.setThreadName(nil) }
    guard let text = String(validatingCString: name) else { return EINVAL }
    return LockOrder.setThreadName(text)
}

@_cdecl("sync_debug_lock_order_promote")
public func c_sync_debug_lock_order_promote(_ lock: UnsafeRawPointer?) -> Int32 {
    guard let lock else { return EINVAL }
    return LockOrder.promote(lock)
}

@_cdecl("sync_debug_lock_order_reset")
public func c_sync_debug_lock_order_reset() {
    LockOrderChecking.reset()
}

@_cdecl("sync_debug_format_waits")
public func c_sync_debug_format_waits(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int {
    let text = Array(LockOrderChecking.waitsDescription().utf8)
    if let buffer, size > 0 {
        let n = min(text.count, size - 1)
        text.withUnsafeBufferPointer { UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress!, byteCount: n) }
        buffer[n] = 0
    }
    return text.count
}

@_cdecl("sync_debug_dump_waits")
public func c_sync_debug_dump_waits() -> Int32 {
    let text = Array(LockOrderChecking.waitsDescription().utf8)
    var offset = 0
    while offset < text.count {
        let n = text.withUnsafeBufferPointer { write(2, $0.baseAddress! + offset, text.count - offset) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { return errno }
        offset += n
    }
    return 0
}
