import Glibc
import LibSync
import Synchronization

// sync/async.h for the primitives other than the mutex: the same handle (AsyncAcquire), the
// same result, cancel and free; the core (Sources/LibSync/Async) decides.

/// Starts an acquire of `kind` on the primitive at `primitive` for a sync_*_async function:
/// checks `out` and the address, makes the handle, then `first` tries at once (nil: it must
/// wait, through the waiter `makeWaiter` returns). Both get the handle and the deadline
/// (Deadline.until). Sets *out and returns as sync_mutex_lock_async does; `keeps` says which
/// immediate results leave the handle to the caller (the others free it).
func startAsync(_ primitive: UnsafeMutableRawPointer?, kind: AsyncAcquire.Kind, deadline: Int64, fd: Int32,
                callback: AsyncCallback?, context: UnsafeMutableRawPointer?,
                out: UnsafeMutablePointer<OpaquePointer?>?, owner: UInt = 0, keeps: (Int32) -> Bool = { $0 == 0 },
                first: (AsyncAcquire, Int64) -> Int32?, makeWaiter: (AsyncAcquire, Int64) -> AsyncWaiter) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(primitive) else { return EINVAL }
    let until = Deadline.until(deadline)
    let acquire = AsyncAcquire(word: word, kind: kind, eventFD: fd, callback: callback, context: context, owner: owner)
    let retained = Unmanaged.passRetained(acquire)
    if let first = first(acquire, until) {
        guard keeps(first) else {
            retained.release()
            return first
        }
        acquire.completedAtOnce(first)
        out.pointee = acquire.handle
        return first
    }
    let waiter = makeWaiter(acquire, until)
    acquire.waiter = waiter
    out.pointee = acquire.handle
    AsyncRuntime.current.register(waiter) { [acquire] code in acquire.completed(code) }
    return EINPROGRESS
}

extension AsyncAcquire {
    /// The result of an acquire that did not wait (no completion is delivered).
    func completedAtOnce(_ code: Int32) {
        if code == 0 && kind == .read && holdsItself { holdsRead.store(true, ordering: .relaxed) }
        result.store(code, ordering: .releasing)
    }
}

// MARK: read-write lock

@_cdecl("sync_rwlock_rdlock_async")
public func c_sync_rwlock_rdlock_async(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                       _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                       _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    startAsync(rw, kind: .read, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
               first: { AsyncRWLock.tryReadFirst($0.memory, deadline: $1, holder: $0.identity) },
               makeWaiter: { AsyncRWLock.ReadWaiter($0.memory, task: $0.identity, deadline: $1, keepAlive: nil) })
}

@_cdecl("sync_rwlock_wrlock_async")
public func c_sync_rwlock_wrlock_async(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                       _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                       _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    startAsync(rw, kind: .write, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
               first: { AsyncRWLock.tryWriteFirst($0.memory, deadline: $1, holder: $0.identity) },
               makeWaiter: { AsyncRWLock.WriteWaiter($0.memory, task: $0.identity, deadline: $1, keepAlive: nil) })
}

@_cdecl("sync_async_downgrade")
public func c_sync_async_downgrade(_ rw: UnsafeMutableRawPointer?, _ handle: OpaquePointer?) -> Int32 {
    guard let m = lockMemory(rw), let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    guard acquire.kind == .write || acquire.kind == .read, acquire.memory == m else { return EPERM }
    let result = AsyncRWLock.downgrade(m, holder: acquire.identity)
    if result == 0 { acquire.holdsRead.store(true, ordering: .releasing) }
    return result
}

// Held for an owner (LIBSYNC_1.7_PYAIO), as sync_mutex_lock_async_owner: the write lock is the
// owner's (a task's identity), a read lock nobody's (released with sync_rwlock_rdunlock); the
// handle only carries the completion.

@_cdecl("sync_rwlock_rdlock_async_owner")
public func c_sync_rwlock_rdlock_async_owner(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                             _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                             _ owner: UInt, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard owner != 0 else {
        out?.pointee = nil
        return EINVAL
    }
    return startAsync(rw, kind: .read, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
                      owner: owner,
                      first: { AsyncRWLock.tryReadFirst($0.memory, deadline: $1, holder: $0.identity) },
                      makeWaiter: { AsyncRWLock.ReadWaiter($0.memory, task: $0.identity, deadline: $1, keepAlive: nil) })
}

@_cdecl("sync_rwlock_wrlock_async_owner")
public func c_sync_rwlock_wrlock_async_owner(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                             _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                             _ owner: UInt, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard owner != 0 else {
        out?.pointee = nil
        return EINVAL
    }
    return startAsync(rw, kind: .write, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
                      owner: owner,
                      first: { AsyncRWLock.tryWriteFirst($0.memory, deadline: $1, holder: $0.identity) },
                      makeWaiter: { AsyncRWLock.WriteWaiter($0.memory, task: $0.identity, deadline: $1, keepAlive: nil) })
}

@_cdecl("sync_rwlock_wrunlock_async")
public func c_sync_rwlock_wrunlock_async(_ rw: UnsafeMutableRawPointer?, _ owner: UInt) -> Int32 {
    guard let m = lockMemory(rw) else { return EINVAL }
    guard owner != 0 else { return EPERM }
    return AsyncRWLock.writeUnlock(m, holder: owner)
}

@_cdecl("sync_rwlock_downgrade_async")
public func c_sync_rwlock_downgrade_async(_ rw: UnsafeMutableRawPointer?, _ owner: UInt) -> Int32 {
    guard let m = lockMemory(rw) else { return EINVAL }
    guard owner != 0 else { return EPERM }
    return AsyncRWLock.downgrade(m, holder: owner)
}

/// sync_async_unlock for a read-write lock's handle: the write lock it holds, else its read lock.
func releaseRWLock(_ acquire: AsyncAcquire, _ m: UnsafeMutableRawPointer) -> Int32 {
    guard acquire.memory == m else { return EPERM }
    if AsyncRWLock.isWriteLocked(m, by: acquire.identity) { return AsyncRWLock.writeUnlock(m, holder: acquire.identity) }
    guard acquire.holdsRead.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged else {
        return EPERM
    }
    let result = AsyncRWLock.readUnlock(m)
    if result != 0 { acquire.holdsRead.store(true, ordering: .releasing) }
    return result
}

// MARK: semaphore

@_cdecl("sync_semaphore_wait_async")
public func c_sync_semaphore_wait_async(_ sem: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                        _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                        _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    startAsync(sem, kind: .semaphore, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
               first: { AsyncSemaphore.tryFirst($0.memory, deadline: $1) },
               makeWaiter: { AsyncSemaphore.Waiter($0.memory, task: $0.identity, deadline: $1, keepAlive: nil) })
}

// MARK: event

@_cdecl("sync_event_wait_async")
public func c_sync_event_wait_async(_ event: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                    _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                    _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    var mark: UInt32 = 0
    return startAsync(event, kind: .event, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
                      first: { AsyncEvent.tryFirst($0.memory, deadline: $1, mark: &mark) },
                      makeWaiter: {
                          AsyncEvent.Waiter($0.memory, mark: mark, task: $0.identity, deadline: $1, keepAlive: nil)
                      })
}

// MARK: condition lock

/// sync_condition_lock_lock_async and sync_condition_lock_lock_when_async.
func conditionLockAsync(_ lock: UnsafeMutableRawPointer?, wanted: Int64?, _ deadline: Int64, _ fd: Int32,
                        _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                        _ out: UnsafeMutablePointer<OpaquePointer?>?, owner: UInt = 0) -> Int32 {
    startAsync(lock, kind: .conditionLock, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
               owner: owner,
               first: { AsyncConditionLock.tryFirst($0.memory, wanted: wanted, deadline: $1, holder: $0.identity) },
               makeWaiter: {
                   AsyncConditionLock.Waiter($0.memory, wanted: wanted, task: $0.identity, deadline: $1, keepAlive: nil)
               })
}

@_cdecl("sync_condition_lock_lock_async")
public func c_sync_condition_lock_lock_async(_ lock: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                             _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                             _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    conditionLockAsync(lock, wanted: nil, deadline, fd, callback, context, out)
}

@_cdecl("sync_condition_lock_lock_when_async")
public func c_sync_condition_lock_lock_when_async(_ lock: UnsafeMutableRawPointer?, _ condition: Int64, _ deadline: Int64,
                                                  _ fd: Int32, _ callback: AsyncCallback?,
                                                  _ context: UnsafeMutableRawPointer?,
                                                  _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    conditionLockAsync(lock, wanted: condition, deadline, fd, callback, context, out)
}

@_cdecl("sync_async_unlock_with")
public func c_sync_async_unlock_with(_ lock: UnsafeMutableRawPointer?, _ handle: OpaquePointer?, _ condition: Int64) -> Int32 {
    guard let base = lockMemory(lock), let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    guard acquire.kind == .conditionLock, acquire.memory == base else { return EPERM }
    return AsyncConditionLock.unlock(base, holder: acquire.identity, condition: condition)
}

@_cdecl("sync_condition_lock_lock_async_owner")
public func c_sync_condition_lock_lock_async_owner(_ lock: UnsafeMutableRawPointer?, _ condition: UnsafePointer<Int64>?,
                                                   _ deadline: Int64, _ fd: Int32, _ callback: AsyncCallback?,
                                                   _ context: UnsafeMutableRawPointer?, _ owner: UInt,
                                                   _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard owner != 0 else {
        out?.pointee = nil
        return EINVAL
    }
    return conditionLockAsync(lock, wanted: condition?.pointee, deadline, fd, callback, context, out, owner: owner)
}

@_cdecl("sync_condition_lock_try_lock_async")
public func c_sync_condition_lock_try_lock_async(_ lock: UnsafeMutableRawPointer?, _ condition: UnsafePointer<Int64>?,
                                                 _ owner: UInt) -> Int32 {
    guard let base = lockMemory(lock), owner != 0 else { return EINVAL }
    return AsyncConditionLock.tryFirst(base, wanted: condition?.pointee, deadline: Deadline.none, holder: owner) ?? EBUSY
}

@_cdecl("sync_condition_lock_unlock_async")
public func c_sync_condition_lock_unlock_async(_ lock: UnsafeMutableRawPointer?, _ owner: UInt,
                                               _ condition: UnsafePointer<Int64>?) -> Int32 {
    guard let base = lockMemory(lock) else { return EINVAL }
    return AsyncConditionLock.unlock(base, holder: owner, condition: condition?.pointee)
}

// MARK: barrier

@_cdecl("sync_barrier_wait_async")
public func c_sync_barrier_wait_async(_ barrier: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                      _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                      _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    var entered = false, index: UInt32 = 0
    return startAsync(barrier, kind: .barrier, deadline: deadline, fd: fd, callback: callback, context: context, out: out,
                      first: { acquire, until in
                          let first = AsyncBarrier.tryFirst(acquire.memory, deadline: until)
                          (entered, index) = (first.entered, first.index)
                          if first.result == 0 { acquire.detail.store(first.index, ordering: .relaxed) }
                          return first.result
                      },
                      makeWaiter: {
                          AsyncBarrier.waiter($0.memory, entered: entered, index: index, task: $0.identity, deadline: $1,
                                              keepAlive: nil)
                      })
}

@_cdecl("sync_async_index")
public func c_sync_async_index(_ handle: OpaquePointer?, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    guard let acquire = AsyncAcquire.from(handle), let index else { return EINVAL }
    guard acquire.kind == .barrier else { return EPERM }
    if let party = acquire.waiter as? AsyncBarrier.Waiter {
        guard acquire.result.load(ordering: .acquiring) != EINPROGRESS, party.passed else { return EPERM }
        index.pointee = party.index
        return 0
    }
    guard acquire.result.load(ordering: .acquiring) == 0 else { return EPERM }
    index.pointee = acquire.detail.load(ordering: .relaxed)
    return 0
}
