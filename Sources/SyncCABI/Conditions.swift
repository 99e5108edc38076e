import Glibc
import LibSync

// sync/conditions.h: semaphores, events and barriers in caller memory. NULL -> EINVAL; relative
// timeouts must be >= 0 (EINVAL otherwise); `*_until` deadlines are CLOCK_MONOTONIC ns (< 0: none)
// and return EINTR when a signal handler ran during the wait.

let syncProcessShared: UInt32 = 1

@inline(__always) func validFlags(_ flags: UInt32, allowed: UInt32) -> Bool { flags & ~allowed == 0 }

/// The deadline for a relative timeout, or nil if the timeout is negative.
@inline(__always) func relativeDeadline(_ timeout: Int64) -> Int64? { timeout < 0 ? nil : deadline(after: timeout) }

// MARK: Semaphore

let syncSemaphoreBounded: UInt32 = 4

@_cdecl("sync_semaphore_init")
public func c_sync_semaphore_init(_ s: UnsafeMutableRawPointer?, _ value: UInt32, _ limit: UInt32, _ flags: UInt32) -> Int32 {
    guard let s, validFlags(flags, allowed: syncProcessShared | syncSemaphoreBounded) else { return EINVAL }
    return SemaphoreWord.initialize(s, value: value, limit: flags & syncSemaphoreBounded != 0 ? limit : nil,
                                    shared: flags & syncProcessShared != 0)
}

@_cdecl("sync_semaphore_wait")
public func c_sync_semaphore_wait(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let s else { return EINVAL }
    return SemaphoreWord.wait(s, deadline: -1, interruptible: false)
}

@_cdecl("sync_semaphore_trywait")
public func c_sync_semaphore_trywait(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let s else { return EINVAL }
    return SemaphoreWord.tryWait(s) ? 0 : EAGAIN
}

@_cdecl("sync_semaphore_timedwait")
public func c_sync_semaphore_timedwait(_ s: UnsafeMutableRawPointer?, _ timeout: Int64) -> Int32 {
    guard let s, let deadline = relativeDeadline(timeout) else { return EINVAL }
    return SemaphoreWord.wait(s, deadline: deadline, interruptible: false)
}

@_cdecl("sync_semaphore_wait_until")
public func c_sync_semaphore_wait_until(_ s: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let s else { return EINVAL }
    return SemaphoreWord.wait(s, deadline: deadline, interruptible: true)
}

@_cdecl("sync_semaphore_signal")
public func c_sync_semaphore_signal(_ s: UnsafeMutableRawPointer?, _ count: UInt32) -> Int32 {
    guard let s, count > 0 else { return EINVAL }
    return SemaphoreWord.signal(s, count: count)
}

@_cdecl("sync_semaphore_value")
public func c_sync_semaphore_value(_ s: UnsafeMutableRawPointer?) -> UInt32 {
    guard let s else { return 0 }
    return SemaphoreWord.value(s)
}

// MARK: Event

@_cdecl("sync_event_init")
public func c_sync_event_init(_ e: UnsafeMutableRawPointer?, _ set: Bool, _ flags: UInt32) -> Int32 {
    guard let e, validFlags(flags, allowed: syncProcessShared) else { return EINVAL }
    EventWord.initialize(e, set: set, shared: flags & syncProcessShared != 0)
    return 0
}

@_cdecl("sync_event_set")
public func c_sync_event_set(_ e: UnsafeMutableRawPointer?) -> Int32 {
    guard let e else { return EINVAL }
    EventWord.set(e)
    return 0
}

@_cdecl("sync_event_clear")
public func c_sync_event_clear(_ e: UnsafeMutableRawPointer?) -> Int32 {
    guard let e else { return EINVAL }
    EventWord.clear(e)
    return 0
}

@_cdecl("sync_event_is_set")
public func c_sync_event_is_set(_ e: UnsafeMutableRawPointer?) -> Bool {
    guard let e else { return false }
    return EventWord.isSet(e)
}

@_cdecl("sync_event_wait")
public func c_sync_event_wait(_ e: UnsafeMutableRawPointer?) -> Int32 {
    guard let e else { return EINVAL }
    return EventWord.wait(e, deadline: -1, interruptible: false)
}

@_cdecl("sync_event_timedwait")
public func c_sync_event_timedwait(_ e: UnsafeMutableRawPointer?, _ timeout: Int64) -> Int32 {
    guard let e, let deadline = relativeDeadline(timeout) else { return EINVAL }
    return EventWord.wait(e, deadline: deadline, interruptible: false)
}

@_cdecl("sync_event_wait_until")
public func c_sync_event_wait_until(_ e: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let e else { return EINVAL }
    return EventWord.wait(e, deadline: deadline, interruptible: true)
}

// MARK: Barrier

let syncBarrierAction: UInt32 = 2

@_cdecl("sync_barrier_init")
public func c_sync_barrier_init(_ b: UnsafeMutableRawPointer?, _ parties: UInt32, _ flags: UInt32) -> Int32 {
    guard let b, validFlags(flags, allowed: syncProcessShared | syncBarrierAction) else { return EINVAL }
    return BarrierWord.initialize(b, parties: parties, hasAction: flags & syncBarrierAction != 0,
                                  shared: flags & syncProcessShared != 0)
}

@_cdecl("sync_barrier_wait")
public func c_sync_barrier_wait(_ b: UnsafeMutableRawPointer?, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    c_sync_barrier_wait_deadline(b, -1, false, index)
}

@_cdecl("sync_barrier_timedwait")
public func c_sync_barrier_timedwait(_ b: UnsafeMutableRawPointer?, _ timeout: Int64, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    guard let deadline = relativeDeadline(timeout) else { return EINVAL }
    return c_sync_barrier_wait_deadline(b, deadline, false, index)
}

@_cdecl("sync_barrier_wait_until")
public func c_sync_barrier_wait_until(_ b: UnsafeMutableRawPointer?, _ deadline: Int64, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    c_sync_barrier_wait_deadline(b, deadline, true, index)
}

func c_sync_barrier_wait_deadline(_ b: UnsafeMutableRawPointer?, _ deadline: Int64, _ interruptible: Bool,
                                  _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    guard let b else { return EINVAL }
    let (result, arrival) = BarrierWord.wait(b, deadline: deadline, interruptible: interruptible)
    if result == 0 { index?.pointee = arrival }
    return result
}

@_cdecl("sync_barrier_action_done")
public func c_sync_barrier_action_done(_ b: UnsafeMutableRawPointer?, _ succeeded: Bool) -> Int32 {
    guard let b else { return EINVAL }
    BarrierWord.actionDone(b, succeeded: succeeded)
    return 0
}

@_cdecl("sync_barrier_reset")
public func c_sync_barrier_reset(_ b: UnsafeMutableRawPointer?) -> Int32 {
    guard let b else { return EINVAL }
    BarrierWord.reset(b)
    return 0
}

@_cdecl("sync_barrier_abort")
public func c_sync_barrier_abort(_ b: UnsafeMutableRawPointer?) -> Int32 {
    guard let b else { return EINVAL }
    BarrierWord.abort(b)
    return 0
}

@_cdecl("sync_barrier_status")
public func c_sync_barrier_status(_ b: UnsafeMutableRawPointer?, _ parties: UnsafeMutablePointer<UInt32>?,
                                  _ waiting: UnsafeMutablePointer<UInt32>?, _ broken: UnsafeMutablePointer<Bool>?) -> Int32 {
    guard let b else { return EINVAL }
    let status = BarrierWord.status(b)
    parties?.pointee = status.parties
    waiting?.pointee = status.waiting
    broken?.pointee = status.broken
    return 0
}

// MARK: Clock

@_cdecl("sync_monotonic_ns")
public func c_sync_monotonic_ns() -> Int64 { monotonicNow() }
