import Glibc
import LibSync
import Synchronization

// sync/async.h for the primitives other than the mutex: the same handle (AsyncAcquire), the
// same result, cancel and free; the core (Sources/LibSync/Async) decides.

/// Starts the acquire `acquire` whose immediate try gave `first` (nil: it must wait, through
/// the waiter `makeWaiter` returns): sets *out and returns as sync_mutex_lock_async does.
/// `keeps` says which immediate results leave the handle to the caller (the others free it).
func startAsync(_ acquire: AsyncAcquire, first: Int32?, keeps: (Int32) -> Bool,
                out: UnsafeMutablePointer<OpaquePointer?>, makeWaiter: () -> AsyncWaiter) -> Int32 {
    let retained = Unmanaged.passRetained(acquire)
    if let first {
        guard keeps(first) else {
            retained.release()
            return first
        }
        acquire.completedAtOnce(first)
        out.pointee = acquire.handle
        return first
    }
    let waiter = makeWaiter()
    acquire.waiter = waiter
    out.pointee = acquire.handle
    AsyncRuntime.current.register(waiter) { [acquire] code in acquire.completed(code) }
    return EINPROGRESS
}

extension AsyncAcquire {
    /// The result of an acquire that did not wait (no completion is delivered).
    func completedAtOnce(_ code: Int32) {
        if code == 0 && kind == .read { holdsRead.store(true, ordering: .relaxed) }
        result.store(code, ordering: .releasing)
    }
}

// MARK: read-write lock

@_cdecl("sync_rwlock_rdlock_async")
public func c_sync_rwlock_rdlock_async(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                       _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                       _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(rw) else { return EINVAL }
    let m = UnsafeMutableRawPointer(word), until = Deadline.until(deadline)
    let acquire = AsyncAcquire(word: word, kind: .read, eventFD: fd, callback: callback, context: context)
    return startAsync(acquire, first: AsyncRWLock.tryReadFirst(m, deadline: until, holder: acquire.identity),
                      keeps: { $0 == 0 }, out: out) {
        AsyncRWLock.ReadWaiter(m, task: acquire.identity, deadline: until, keepAlive: nil)
    }
}

@_cdecl("sync_rwlock_wrlock_async")
public func c_sync_rwlock_wrlock_async(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                       _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                       _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(rw) else { return EINVAL }
    let m = UnsafeMutableRawPointer(word), until = Deadline.until(deadline)
    let acquire = AsyncAcquire(word: word, kind: .write, eventFD: fd, callback: callback, context: context)
    return startAsync(acquire, first: AsyncRWLock.tryWriteFirst(m, deadline: until, holder: acquire.identity),
                      keeps: { $0 == 0 }, out: out) {
        AsyncRWLock.WriteWaiter(m, task: acquire.identity, deadline: until, keepAlive: nil)
    }
}

@_cdecl("sync_async_downgrade")
public func c_sync_async_downgrade(_ rw: UnsafeMutableRawPointer?, _ handle: OpaquePointer?) -> Int32 {
    guard let m = lockMemory(rw), let acquire = AsyncAcquire.from(handle) else { return EINVAL }
    guard acquire.kind == .write || acquire.kind == .read, acquire.memory == m else { return EPERM }
    let result = AsyncRWLock.downgrade(m, holder: acquire.identity)
    if result == 0 { acquire.holdsRead.store(true, ordering: .releasing) }
    return result
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
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(sem) else { return EINVAL }
    let base = UnsafeMutableRawPointer(word), until = Deadline.until(deadline)
    let acquire = AsyncAcquire(word: word, kind: .semaphore, eventFD: fd, callback: callback, context: context)
    return startAsync(acquire, first: AsyncSemaphore.tryFirst(base, deadline: until), keeps: { $0 == 0 }, out: out) {
        AsyncSemaphore.Waiter(base, task: acquire.identity, deadline: until, keepAlive: nil)
    }
}

// MARK: event

@_cdecl("sync_event_wait_async")
public func c_sync_event_wait_async(_ event: UnsafeMutableRawPointer?, _ deadline: Int64, _ fd: Int32,
                                    _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                                    _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(event) else { return EINVAL }
    let base = UnsafeMutableRawPointer(word), until = Deadline.until(deadline)
    let acquire = AsyncAcquire(word: word, kind: .event, eventFD: fd, callback: callback, context: context)
    var mark: UInt32 = 0
    let first = AsyncEvent.tryFirst(base, deadline: until, mark: &mark)
    return startAsync(acquire, first: first, keeps: { $0 == 0 }, out: out) {
        AsyncEvent.Waiter(base, mark: mark, task: acquire.identity, deadline: until, keepAlive: nil)
    }
}

// MARK: condition lock

/// sync_condition_lock_lock_async and sync_condition_lock_lock_when_async.
func conditionLockAsync(_ lock: UnsafeMutableRawPointer?, wanted: Int64?, _ deadline: Int64, _ fd: Int32,
                        _ callback: AsyncCallback?, _ context: UnsafeMutableRawPointer?,
                        _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return EINVAL }
    out.pointee = nil
    guard let word = lockWord(lock) else { return EINVAL }
    let base = UnsafeMutableRawPointer(word), until = Deadline.until(deadline)
    let acquire = AsyncAcquire(word: word, kind: .conditionLock, eventFD: fd, callback: callback, context: context)
    let first = AsyncConditionLock.tryFirst(base, wanted: wanted, deadline: until, holder: acquire.identity)
    return startAsync(acquire, first: first, keeps: { $0 == 0 }, out: out) {
        AsyncConditionLock.Waiter(base, wanted: wanted, task: acquire.identity, deadline: until, keepAlive: nil)
    }
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
