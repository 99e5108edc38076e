import CSyncShim
import Glibc
import LibSync
import Synchronization

// sync/locks.h: each function checks the pointer (EINVAL), converts arguments, and calls the
// Swift core (Sources/LibSync/Locks). `_interruptible` forms pass interruptible: true and, in
// the main thread, wait in slices (Interruptible.swift).

@inline(__always)
func lockMemory(_ pointer: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let pointer, Int(bitPattern: pointer) & 3 == 0 else { return nil }
    return pointer
}

@inline(__always)
func lockWord(_ pointer: UnsafeMutableRawPointer?) -> UnsafeMutablePointer<Atomic<UInt32>>? {
    lockMemory(pointer)?.assumingMemoryBound(to: Atomic<UInt32>.self)
}

// MARK: mutex

@_cdecl("sync_mutex_init") public func c_sync_mutex_init(_ m: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32 {
    guard let memory = lockMemory(m), flags & ~LockFlags.mutex == 0 else { return EINVAL }
    return MutexWord.initialize(memory, shared: flags & LockFlags.shared != 0, unowned: flags & LockFlags.unowned != 0,
                                robust: flags & LockFlags.robust != 0)
}
@_cdecl("sync_mutex_lock") @inline(__always) public func c_sync_mutex_lock(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return MutexWord.lock(word)
}
@_cdecl("sync_mutex_try_lock") public func c_sync_mutex_try_lock(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return MutexWord.tryLock(word)
}
@_cdecl("sync_mutex_trylock") public func c_sync_mutex_trylock(_ m: UnsafeMutableRawPointer?) -> Int32 { c_sync_mutex_try_lock(m) }  // deprecated alias
@_cdecl("sync_mutex_try_lock_first") public func c_sync_mutex_try_lock_first(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return LockOrder.firstTry(word) { MutexWord.tryLock(word) }
}
@_cdecl("sync_mutex_trylock_first") public func c_sync_mutex_trylock_first(_ m: UnsafeMutableRawPointer?) -> Int32 { c_sync_mutex_try_lock_first(m) }  // deprecated alias
@_cdecl("sync_mutex_lock_timed") public func c_sync_mutex_lock_timed(_ m: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return MutexWord.lock(word, deadline: Deadline.after(nanoseconds: timeout))
}
@_cdecl("sync_mutex_timedlock") public func c_sync_mutex_timedlock(_ m: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_mutex_lock_timed(m, timeout) }  // deprecated alias
@_cdecl("sync_mutex_lock_until") public func c_sync_mutex_lock_until(_ m: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return MutexWord.lock(word, deadline: Deadline.until(deadline))
}
@_cdecl("sync_mutex_lock_interruptible") public func c_sync_mutex_lock_interruptible(_ m: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return interruptible(deadline) { MutexWord.lock(word, deadline: $0, interruptible: true) }
}
@_cdecl("sync_mutex_unlock") @inline(__always) public func c_sync_mutex_unlock(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return MutexWord.unlock(word)
}
@_cdecl("sync_mutex_consistent") public func c_sync_mutex_consistent(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return EINVAL }
    return MutexWord.consistent(word)
}
@_cdecl("sync_mutex_is_locked") public func c_sync_mutex_is_locked(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return 0 }
    return MutexWord.isLocked(word) ? 1 : 0
}
@_cdecl("sync_mutex_is_owner") public func c_sync_mutex_is_owner(_ m: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(m) else { return 0 }
    return MutexWord.isOwnedByCaller(word) ? 1 : 0
}

// MARK: recursive lock

@_cdecl("sync_recursive_lock_init") public func c_sync_recursive_lock_init(_ l: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32 {
    guard let memory = lockMemory(l), flags & ~LockFlags.recursiveLock == 0 else { return EINVAL }
    return RecursiveWord.initialize(memory, shared: flags & LockFlags.shared != 0, robust: flags & LockFlags.robust != 0)
}

@_cdecl("sync_recursive_lock_lock") public func c_sync_recursive_lock_lock(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return RecursiveWord.lock(memory)
}
@_cdecl("sync_recursive_lock_try_lock") public func c_sync_recursive_lock_try_lock(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return RecursiveWord.tryLock(memory)
}
@_cdecl("sync_recursive_lock_trylock") public func c_sync_recursive_lock_trylock(_ l: UnsafeMutableRawPointer?) -> Int32 { c_sync_recursive_lock_try_lock(l) }  // deprecated alias
@_cdecl("sync_recursive_lock_try_lock_first") public func c_sync_recursive_lock_try_lock_first(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return LockOrder.firstTry(memory) { RecursiveWord.tryLock(memory) }
}
@_cdecl("sync_recursive_lock_trylock_first") public func c_sync_recursive_lock_trylock_first(_ l: UnsafeMutableRawPointer?) -> Int32 { c_sync_recursive_lock_try_lock_first(l) }  // deprecated alias
@_cdecl("sync_recursive_lock_lock_timed") public func c_sync_recursive_lock_lock_timed(_ l: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return RecursiveWord.lock(memory, deadline: Deadline.after(nanoseconds: timeout))
}
@_cdecl("sync_recursive_lock_timedlock") public func c_sync_recursive_lock_timedlock(_ l: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_recursive_lock_lock_timed(l, timeout) }  // deprecated alias
@_cdecl("sync_recursive_lock_lock_until") public func c_sync_recursive_lock_lock_until(_ l: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return RecursiveWord.lock(memory, deadline: Deadline.until(deadline))
}
@_cdecl("sync_recursive_lock_lock_interruptible") public func c_sync_recursive_lock_lock_interruptible(_ l: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return interruptible(deadline) { RecursiveWord.lock(memory, deadline: $0, interruptible: true) }
}
@_cdecl("sync_recursive_lock_unlock") public func c_sync_recursive_lock_unlock(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return RecursiveWord.unlock(memory)
}
@_cdecl("sync_recursive_lock_consistent") public func c_sync_recursive_lock_consistent(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return RecursiveWord.consistent(memory)
}
@_cdecl("sync_recursive_lock_depth") public func c_sync_recursive_lock_depth(_ l: UnsafeMutableRawPointer?) -> UInt32 {
    guard let memory = lockMemory(l) else { return 0 }
    return RecursiveWord.depthHeldByCaller(memory)
}
@_cdecl("sync_recursive_lock_release_save") public func c_sync_recursive_lock_release_save(_ l: UnsafeMutableRawPointer?, _ depth: UnsafeMutablePointer<UInt32>?) -> Int32 {
    guard let memory = lockMemory(l), let depth else { return EINVAL }
    let saved = RecursiveWord.releaseSaving(memory)
    if saved == 0 { return EPERM }
    depth.pointee = saved
    return 0
}
@_cdecl("sync_recursive_lock_restore_interruptible") public func c_sync_recursive_lock_restore_interruptible(_ l: UnsafeMutableRawPointer?, _ depth: UInt32, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(l) else { return EINVAL }
    return interruptible(deadline) { RecursiveWord.reacquire(memory, depth: depth, deadline: $0, interruptible: true) }
}

// MARK: read-write lock

@_cdecl("sync_rwlock_init") public func c_sync_rwlock_init(_ rw: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32 {
    guard let memory = lockMemory(rw), flags & ~LockFlags.rwlock == 0 else { return EINVAL }
    return RWLockWords.initialize(memory, shared: flags & LockFlags.shared != 0)
}
@_cdecl("sync_rwlock_rdlock") public func c_sync_rwlock_rdlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.readLock(memory)
}
@_cdecl("sync_rwlock_try_rdlock") public func c_sync_rwlock_try_rdlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.tryReadLock(memory)
}
@_cdecl("sync_rwlock_tryrdlock") public func c_sync_rwlock_tryrdlock(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_rdlock(rw) }  // deprecated alias
@_cdecl("sync_rwlock_try_rdlock_first") public func c_sync_rwlock_try_rdlock_first(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return LockOrder.firstTry(memory) { RWLockWords.tryReadLock(memory) }
}
@_cdecl("sync_rwlock_tryrdlock_first") public func c_sync_rwlock_tryrdlock_first(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_rdlock_first(rw) }  // deprecated alias
@_cdecl("sync_rwlock_rdlock_timed") public func c_sync_rwlock_rdlock_timed(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.readLock(memory, deadline: Deadline.after(nanoseconds: timeout))
}
@_cdecl("sync_rwlock_timedrdlock") public func c_sync_rwlock_timedrdlock(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_rwlock_rdlock_timed(rw, timeout) }  // deprecated alias
@_cdecl("sync_rwlock_rdlock_until") public func c_sync_rwlock_rdlock_until(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.readLock(memory, deadline: Deadline.until(deadline))
}
@_cdecl("sync_rwlock_rdlock_interruptible") public func c_sync_rwlock_rdlock_interruptible(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return interruptible(deadline) { RWLockWords.readLock(memory, deadline: $0, interruptible: true) }
}
@_cdecl("sync_rwlock_rdunlock") public func c_sync_rwlock_rdunlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.readUnlock(memory)
}
@_cdecl("sync_rwlock_wrlock") public func c_sync_rwlock_wrlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.writeLock(memory)
}
@_cdecl("sync_rwlock_try_wrlock") public func c_sync_rwlock_try_wrlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.tryWriteLock(memory)
}
@_cdecl("sync_rwlock_trywrlock") public func c_sync_rwlock_trywrlock(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_wrlock(rw) }  // deprecated alias
@_cdecl("sync_rwlock_try_wrlock_first") public func c_sync_rwlock_try_wrlock_first(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return LockOrder.firstTry(memory) { RWLockWords.tryWriteLock(memory) }
}
@_cdecl("sync_rwlock_trywrlock_first") public func c_sync_rwlock_trywrlock_first(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_wrlock_first(rw) }  // deprecated alias
@_cdecl("sync_rwlock_wrlock_timed") public func c_sync_rwlock_wrlock_timed(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.writeLock(memory, deadline: Deadline.after(nanoseconds: timeout))
}
@_cdecl("sync_rwlock_timedwrlock") public func c_sync_rwlock_timedwrlock(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_rwlock_wrlock_timed(rw, timeout) }  // deprecated alias
@_cdecl("sync_rwlock_wrlock_until") public func c_sync_rwlock_wrlock_until(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.writeLock(memory, deadline: Deadline.until(deadline))
}
@_cdecl("sync_rwlock_wrlock_interruptible") public func c_sync_rwlock_wrlock_interruptible(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return interruptible(deadline) { RWLockWords.writeLock(memory, deadline: $0, interruptible: true) }
}
@_cdecl("sync_rwlock_wrunlock") public func c_sync_rwlock_wrunlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.writeUnlock(memory)
}
@_cdecl("sync_rwlock_downgrade") public func c_sync_rwlock_downgrade(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.downgrade(memory)
}
@_cdecl("sync_rwlock_uprdlock") public func c_sync_rwlock_uprdlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgradableLock(memory)
}
@_cdecl("sync_rwlock_try_uprdlock") public func c_sync_rwlock_try_uprdlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.tryUpgradableLock(memory)
}
@_cdecl("sync_rwlock_tryuprdlock") public func c_sync_rwlock_tryuprdlock(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_uprdlock(rw) }  // deprecated alias
@_cdecl("sync_rwlock_try_uprdlock_first") public func c_sync_rwlock_try_uprdlock_first(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return LockOrder.firstTry(memory) { RWLockWords.tryUpgradableLock(memory) }
}
@_cdecl("sync_rwlock_tryuprdlock_first") public func c_sync_rwlock_tryuprdlock_first(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_uprdlock_first(rw) }  // deprecated alias
@_cdecl("sync_rwlock_uprdlock_timed") public func c_sync_rwlock_uprdlock_timed(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgradableLock(memory, deadline: Deadline.after(nanoseconds: timeout))
}
@_cdecl("sync_rwlock_timeduprdlock") public func c_sync_rwlock_timeduprdlock(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_rwlock_uprdlock_timed(rw, timeout) }  // deprecated alias
@_cdecl("sync_rwlock_uprdlock_until") public func c_sync_rwlock_uprdlock_until(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgradableLock(memory, deadline: Deadline.until(deadline))
}
@_cdecl("sync_rwlock_uprdlock_interruptible") public func c_sync_rwlock_uprdlock_interruptible(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return interruptible(deadline) { RWLockWords.upgradableLock(memory, deadline: $0, interruptible: true) }
}
@_cdecl("sync_rwlock_uprdunlock") public func c_sync_rwlock_uprdunlock(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgradableUnlock(memory)
}
@_cdecl("sync_rwlock_upgrade") public func c_sync_rwlock_upgrade(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgrade(memory)
}
@_cdecl("sync_rwlock_try_upgrade") public func c_sync_rwlock_try_upgrade(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.tryUpgrade(memory)
}
@_cdecl("sync_rwlock_tryupgrade") public func c_sync_rwlock_tryupgrade(_ rw: UnsafeMutableRawPointer?) -> Int32 { c_sync_rwlock_try_upgrade(rw) }  // deprecated alias
@_cdecl("sync_rwlock_upgrade_timed") public func c_sync_rwlock_upgrade_timed(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgrade(memory, deadline: Deadline.after(nanoseconds: timeout))
}
@_cdecl("sync_rwlock_timedupgrade") public func c_sync_rwlock_timedupgrade(_ rw: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_rwlock_upgrade_timed(rw, timeout) }  // deprecated alias
@_cdecl("sync_rwlock_upgrade_until") public func c_sync_rwlock_upgrade_until(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.upgrade(memory, deadline: Deadline.until(deadline))
}
@_cdecl("sync_rwlock_upgrade_interruptible") public func c_sync_rwlock_upgrade_interruptible(_ rw: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return interruptible(deadline) { RWLockWords.upgrade(memory, deadline: $0, interruptible: true) }
}
@_cdecl("sync_rwlock_uprd_downgrade") public func c_sync_rwlock_uprd_downgrade(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.downgradeUpgradable(memory)
}
@_cdecl("sync_rwlock_downgrade_to_uprd") public func c_sync_rwlock_downgrade_to_uprd(_ rw: UnsafeMutableRawPointer?) -> Int32 {
    guard let memory = lockMemory(rw) else { return EINVAL }
    return RWLockWords.downgradeToUpgradable(memory)
}
@_cdecl("sync_rwlock_waiting_writers") public func c_sync_rwlock_waiting_writers(_ rw: UnsafeMutableRawPointer?) -> UInt32 {
    guard let memory = lockMemory(rw) else { return 0 }
    return RWLockWords.waitingWriters(memory)
}

// MARK: spin lock

@_cdecl("sync_spinlock_init") public func c_sync_spinlock_init(_ s: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32 {
    guard let word = lockWord(s), flags & ~LockFlags.spinLock == 0 else { return EINVAL }
    return SpinWord.initialize(word, shared: flags & LockFlags.shared != 0)
}

@_cdecl("sync_spinlock_lock") public func c_sync_spinlock_lock(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(s) else { return EINVAL }
    return SpinWord.lock(word)
}
@_cdecl("sync_spinlock_try_lock") public func c_sync_spinlock_try_lock(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(s) else { return EINVAL }
    return SpinWord.tryLock(word)
}
@_cdecl("sync_spinlock_trylock") public func c_sync_spinlock_trylock(_ s: UnsafeMutableRawPointer?) -> Int32 { c_sync_spinlock_try_lock(s) }  // deprecated alias
@_cdecl("sync_spinlock_try_lock_first") public func c_sync_spinlock_try_lock_first(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(s) else { return EINVAL }
    return LockOrder.firstTry(word) { SpinWord.tryLock(word) }
}
@_cdecl("sync_spinlock_trylock_first") public func c_sync_spinlock_trylock_first(_ s: UnsafeMutableRawPointer?) -> Int32 { c_sync_spinlock_try_lock_first(s) }  // deprecated alias
@_cdecl("sync_spinlock_lock_until") public func c_sync_spinlock_lock_until(_ s: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let word = lockWord(s) else { return EINVAL }
    return SpinWord.lock(word, deadline: Deadline.until(deadline))
}
@_cdecl("sync_spinlock_lock_interruptible") public func c_sync_spinlock_lock_interruptible(_ s: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let word = lockWord(s) else { return EINVAL }
    return interruptible(deadline) { SpinWord.lock(word, deadline: $0, interruptible: true) }
}
@_cdecl("sync_spinlock_unlock") public func c_sync_spinlock_unlock(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(s) else { return EINVAL }
    return SpinWord.unlock(word)
}

// MARK: once

@_cdecl("sync_once") public func c_sync_once(_ o: UnsafeMutableRawPointer?, _ function: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
                                             _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(o), let function else { return EINVAL }
    let state = OnceWord.begin(word)
    if state != OnceWord.run { return state }
    function(context)
    return OnceWord.end(word, completed: true)
}
@_cdecl("sync_once_begin") public func c_sync_once_begin(_ o: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(o) else { return EINVAL }
    return OnceWord.begin(word)
}
@_cdecl("sync_once_begin_interruptible") public func c_sync_once_begin_interruptible(_ o: UnsafeMutableRawPointer?) -> Int32 {
    guard let word = lockWord(o) else { return EINVAL }
    return OnceWord.begin(word, interruptible: true)
}
@_cdecl("sync_once_end") public func c_sync_once_end(_ o: UnsafeMutableRawPointer?, _ completed: Int32) -> Int32 {
    guard let word = lockWord(o) else { return EINVAL }
    return OnceWord.end(word, completed: completed != 0)
}

// MARK: synchronized

@_cdecl("sync_synchronized") public func c_sync_synchronized(_ token: UnsafeRawPointer?, _ body: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
                                                             _ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let token, let body else { return EINVAL }
    let result = SynchronizedTable.enter(UInt(bitPattern: token))
    if result != 0 { return result }
    body(context)
    return SynchronizedTable.exit(UInt(bitPattern: token))
}
@_cdecl("sync_synchronized_enter") public func c_sync_synchronized_enter(_ token: UnsafeRawPointer?) -> Int32 {
    guard let token else { return EINVAL }
    return SynchronizedTable.enter(UInt(bitPattern: token))
}
@_cdecl("sync_synchronized_enter_interruptible") public func c_sync_synchronized_enter_interruptible(_ token: UnsafeRawPointer?, _ deadline: Int64) -> Int32 {
    guard let token else { return EINVAL }
    return interruptible(deadline) { SynchronizedTable.enter(UInt(bitPattern: token), deadline: $0, interruptible: true) }
}
@_cdecl("sync_synchronized_exit") public func c_sync_synchronized_exit(_ token: UnsafeRawPointer?) -> Int32 {
    guard let token else { return EINVAL }
    return SynchronizedTable.exit(UInt(bitPattern: token))
}
