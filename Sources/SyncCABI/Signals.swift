import Glibc
import LibSync

// sync/signals.h: signals routed to an executor or a queue. The core (SignalRouter) does the
// work; these functions read the C target, convert the info for the C handler, and map errors.

public typealias SignalHandlerFunction = @convention(c) (UnsafeRawPointer?, UnsafeMutableRawPointer?) -> Void

/// sync_signal_target_t's layout.
private struct CSignalTarget {
    var executor: OpaquePointer?
    var queue: OpaquePointer?
    var handler: SignalHandlerFunction?
    var context: UnsafeMutableRawPointer?
}

/// sync_signal_info_t's layout.
private struct CSignalInfo {
    var signo: Int32
    var code: Int32
    var pid: Int32
    var uid: UInt32
    var value: Int32
    var valuePointer: UnsafeMutableRawPointer?
}

@_cdecl("sync_signal_route")
public func c_sync_signal_route(_ signal: Int32, _ target: UnsafeRawPointer?) -> Int32 {
    guard let target = target?.assumingMemoryBound(to: CSignalTarget.self).pointee,
          let handler = target.handler, (target.executor == nil) != (target.queue == nil) else { return EINVAL }
    let destination: SignalTarget = if let executor = target.executor {
        .executor(Unmanaged<ThreadExecutor>.fromOpaque(UnsafeRawPointer(executor)).takeUnretainedValue())
    } else {
        .queue(Unmanaged<DispatchWorkQueue>.fromOpaque(UnsafeRawPointer(target.queue!)).takeUnretainedValue())
    }
    let context = Carried(target.context)
    do {
        _ = try SignalRouter.shared.route(signal, to: destination) { info in
            var c = CSignalInfo(signo: info.signal, code: info.code, pid: info.pid, uid: info.uid, value: info.value,
                                valuePointer: UnsafeMutableRawPointer(bitPattern: info.pointerValue))
            withUnsafePointer(to: &c) { handler(UnsafeRawPointer($0), context.value) }
        }
        return 0
    } catch {
        return error.code
    }
}

@_cdecl("sync_signal_unroute")
public func c_sync_signal_unroute(_ signal: Int32) -> Int32 {
    do {
        try SignalRouter.shared.unroute(signal)
        return 0
    } catch {
        return error.code
    }
}

@_cdecl("sync_signal_is_routable")
public func c_sync_signal_is_routable(_ signal: Int32) -> Bool { SignalRouter.isRoutable(signal) }
