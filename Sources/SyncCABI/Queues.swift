import Glibc
import LibSync

// sync/queues.h: serial and concurrent queues, thread executors and isolated values. Each C
// object is a retained reference to the Swift core's object; these functions only check
// arguments, convert errors to errno codes and call the core.

public typealias QueueWorkFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void
public typealias IsolatedWorkFunction = @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void
public typealias IsolatedPointer = IsolatedValue<UnsafeMutableRawPointer?>

/// Runs `body`, mapping the queues' errors to errno codes.
@inline(__always)
private func status(_ body: () throws -> Void) -> Int32 {
    do {
        try body()
        return 0
    } catch {
        return code(for: error)
    }
}

/// The errno code of a queue error (out of line: the successful path stays small enough to inline).
@inline(never)
private func code(for error: any Error) -> Int32 {
    switch error {
    case QueueError.wouldDeadlock: return EDEADLK
    case QueueError.stopped: return ECANCELED
    case QueueError.forked: return ESRCH
    case let error as ThreadExecutorError: return error.code
    case is Busy: return EBUSY
    case is NotHeld: return EPERM
    default: return EIO  // unreachable: the core throws nothing else
    }
}

/// Calls `body` with the object behind `pointer` without retaining it (the caller owns a
/// reference for the duration of the call; a retain would bounce the object's reference count
/// between cores on every call), or returns EINVAL when `pointer` or `work` is NULL.
@inline(__always)
private func with<T: AnyObject, W>(_ pointer: OpaquePointer?, _ type: T.Type, _ work: W?,
                                   _ body: (T, W) throws -> Void) -> Int32 {
    guard let pointer, let work else { return EINVAL }
    return status { try Unmanaged<T>.fromOpaque(UnsafeRawPointer(pointer))._withUnsafeGuaranteedRef { try body($0, work) } }
}

/// The value is held by others: the try_begin functions' EBUSY.
private struct Busy: Error {}
/// The calling thread holds no share to release: the end functions' EPERM.
private struct NotHeld: Error {}

private func object<T: AnyObject>(_ pointer: OpaquePointer?, _ type: T.Type) -> T? {
    pointer.map { Unmanaged<T>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
}

/// Stores a new retained object in `*out`.
private func create<T: AnyObject>(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ make: () throws -> T) -> Int32 {
    guard let out else { return EINVAL }
    return status { out.pointee = OpaquePointer(Unmanaged.passRetained(try make()).toOpaque()) }
}

private func release<T: AnyObject>(_ pointer: OpaquePointer?, _ type: T.Type) -> Int32 {
    guard let pointer else { return EINVAL }
    Unmanaged<T>.fromOpaque(UnsafeRawPointer(pointer)).release()
    return 0
}

// MARK: Queues

@_cdecl("sync_queue_create")
public func c_sync_queue_create(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ label: UnsafePointer<CChar>?, _ kind: Int32) -> Int32 {
    guard kind == 0 || kind == 1 else { return EINVAL }
    return create(out) { DispatchWorkQueue(label: label.map { String(cString: $0) } ?? "libsync.queue", concurrent: kind == 1) }
}

@_cdecl("sync_queue_destroy")
public func c_sync_queue_destroy(_ queue: OpaquePointer?) -> Int32 { release(queue, DispatchWorkQueue.self) }

private func queueSync(_ queue: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?, barrier: Bool) -> Int32 {
    with(queue, DispatchWorkQueue.self, work) { queue, work in try queue.sync(barrier: barrier) { work(context) } }
}

private func queueAsync(_ queue: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?, barrier: Bool) -> Int32 {
    let carried = Carried(context)
    return with(queue, DispatchWorkQueue.self, work) { queue, work in queue.async(barrier: barrier) { work(carried.value) } }
}

@_cdecl("sync_queue_sync")
public func c_sync_queue_sync(_ queue: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    queueSync(queue, work, context, barrier: false)
}

@_cdecl("sync_queue_async")
public func c_sync_queue_async(_ queue: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    queueAsync(queue, work, context, barrier: false)
}

@_cdecl("sync_queue_barrier_sync")
public func c_sync_queue_barrier_sync(_ queue: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    queueSync(queue, work, context, barrier: true)
}

@_cdecl("sync_queue_barrier_async")
public func c_sync_queue_barrier_async(_ queue: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    queueAsync(queue, work, context, barrier: true)
}

// MARK: Thread executors

@_cdecl("sync_executor_create")
public func c_sync_executor_create(_ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    create(out) { try ThreadExecutor() }
}

@_cdecl("sync_executor_async")
public func c_sync_executor_async(_ executor: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    let carried = Carried(context)
    return with(executor, ThreadExecutor.self, work) { executor, work in try executor.async { work(carried.value) } }
}

@_cdecl("sync_executor_sync")
public func c_sync_executor_sync(_ executor: OpaquePointer?, _ work: QueueWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    with(executor, ThreadExecutor.self, work) { executor, work in try executor.sync { work(context) } }
}

@_cdecl("sync_executor_stop")
public func c_sync_executor_stop(_ executor: OpaquePointer?) -> Int32 {
    guard let executor = object(executor, ThreadExecutor.self) else { return EINVAL }
    executor.stop()
    return 0
}

@_cdecl("sync_executor_destroy")
public func c_sync_executor_destroy(_ executor: OpaquePointer?) -> Int32 {
    object(executor, ThreadExecutor.self)?.stop()
    return release(executor, ThreadExecutor.self)
}

@_cdecl("sync_executor_is_current")
public func c_sync_executor_is_current(_ executor: OpaquePointer?) -> Bool {
    object(executor, ThreadExecutor.self)?.isCurrent ?? false
}

// MARK: IsolatedPointer values

@_cdecl("sync_isolated_create")
public func c_sync_isolated_create(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ value: UnsafeMutableRawPointer?) -> Int32 {
    create(out) { IsolatedPointer(value) }
}

@_cdecl("sync_isolated_destroy")
public func c_sync_isolated_destroy(_ isolated: OpaquePointer?) -> Int32 { release(isolated, IsolatedPointer.self) }

@_cdecl("sync_isolated_read")
public func c_sync_isolated_read(_ isolated: OpaquePointer?, _ work: IsolatedWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, work) { isolated, work in isolated.read { work($0, context) } }
}

@_cdecl("sync_isolated_write_async")
public func c_sync_isolated_write_async(_ isolated: OpaquePointer?, _ work: IsolatedWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, work) { isolated, work in
        if !isolated.writeIfFree({ work($0, context) }) {
            let carried = Carried(context)
            isolated.write { work($0, carried.value) }
        }
    }
}

@_cdecl("sync_isolated_write_sync")
public func c_sync_isolated_write_sync(_ isolated: OpaquePointer?, _ work: IsolatedWorkFunction?, _ context: UnsafeMutableRawPointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, work) { isolated, work in isolated.update { work($0, context) } }
}

// The non-blocking halves of read and write_async, for bindings that cannot pass work as a
// callback cheaply (Python): take the value without waiting, use it, release it.

@_cdecl("sync_isolated_try_begin_read")
public func c_sync_isolated_try_begin_read(_ isolated: OpaquePointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, ()) { isolated, _ in
        if !isolated.isolation.beginShared() { throw Busy() }
    }
}

@_cdecl("sync_isolated_end_read")
public func c_sync_isolated_end_read(_ isolated: OpaquePointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, ()) { isolated, _ in
        if !isolated.isolation.endShared() { throw NotHeld() }
    }
}

@_cdecl("sync_isolated_try_begin_write")
public func c_sync_isolated_try_begin_write(_ isolated: OpaquePointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, ()) { isolated, _ in
        if !isolated.isolation.beginWrite() { throw Busy() }
    }
}

@_cdecl("sync_isolated_end_write")
public func c_sync_isolated_end_write(_ isolated: OpaquePointer?) -> Int32 {
    with(isolated, IsolatedPointer.self, ()) { isolated, _ in
        if !isolated.isolation.endWrite() { throw NotHeld() }
    }
}
