import CSyncShim
import Glibc
import LibSync

// sync/conditions.h (every entry point @inline(__always), so that the C symbol holds the code
// rather than a jump to it): each function checks its pointers (EINVAL), converts arguments, and calls
// the Swift core (Sources/LibSync/Conditions). As in sync/locks.h: `timed` forms take a relative
// timeout in ns, `_until` forms a CLOCK_MONOTONIC deadline (< 0: none), `_interruptible` forms
// also return EINTR when a signal handler ran.

let syncProcessShared: Int32 = 1
let syncBarrierAction: Int32 = 2
let syncSemaphoreBounded: Int32 = 4

/// The three ways of waiting that every blocking function offers, as (deadline, interruptible).
@inline(__always) func forever() -> (Int64, Bool) { (-1, false) }
@inline(__always) func within(_ timeout: UInt64) -> (Int64, Bool) { (Deadline.after(nanoseconds: timeout), false) }
@inline(__always) func until(_ deadline: Int64) -> (Int64, Bool) { (Deadline.until(deadline), false) }

@_cdecl("sync_monotonic_ns") @inline(__always) public func c_sync_monotonic_ns() -> Int64 { sync_monotonic_now_ns() }

// MARK: Condition variable

func condWait(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ how: (Int64, Bool)) -> Int32 {
    guard let c = lockMemory(c), let m = lockWord(m) else { return EINVAL }
    return ConditionWord.wait(c, mutex: m, deadline: how.0, interruptible: how.1)
}

/// A sync_cond_waiter_t: 40 bytes, 8-byte aligned.
@inline(__always) func condWaiter(_ w: UnsafeMutableRawPointer?) -> Waiter? {
    guard let w, Int(bitPattern: w) & 7 == 0 else { return nil }
    return Waiter(w)
}

@_cdecl("sync_cond_init") @inline(__always) public func c_sync_cond_init(_ c: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32 {
    guard let c = lockMemory(c), flags & ~syncProcessShared == 0 else { return EINVAL }
    return ConditionWord.initialize(c, shared: flags & syncProcessShared != 0)
}
@_cdecl("sync_cond_wait") @inline(__always) public func c_sync_cond_wait(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?) -> Int32 {
    condWait(c, m, forever())
}
@_cdecl("sync_cond_wait_timed") @inline(__always) public func c_sync_cond_wait_timed(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    condWait(c, m, within(timeout))
}
@_cdecl("sync_cond_timedwait") public func c_sync_cond_timedwait(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_cond_wait_timed(c, m, timeout) }  // deprecated alias
@_cdecl("sync_cond_wait_until") @inline(__always) public func c_sync_cond_wait_until(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    condWait(c, m, until(deadline))
}
@_cdecl("sync_cond_wait_interruptible") @inline(__always) public func c_sync_cond_wait_interruptible(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    interruptible(deadline) { condWait(c, m, ($0, true)) }
}
@_cdecl("sync_cond_wait_recursive_interruptible") @inline(__always)
public func c_sync_cond_wait_recursive_interruptible(_ c: UnsafeMutableRawPointer?, _ l: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let c = lockMemory(c), let l = lockMemory(l) else { return EINVAL }
    return interruptible(deadline) { ConditionWord.wait(c, recursiveLock: l, deadline: $0, interruptible: true) }
}
@_cdecl("sync_cond_wait_resumable") @inline(__always)
public func c_sync_cond_wait_resumable(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ w: UnsafeMutableRawPointer?,
                                       _ deadline: Int64) -> Int32 {
    guard let c = lockMemory(c), let m = lockWord(m), let w = condWaiter(w) else { return EINVAL }
    return ConditionWord.waitSlice(c, w, mutex: m, deadline: Deadline.until(deadline), sliceEnd: sliceEnd())
}
@_cdecl("sync_cond_wait_recursive_resumable") @inline(__always)
public func c_sync_cond_wait_recursive_resumable(_ c: UnsafeMutableRawPointer?, _ l: UnsafeMutableRawPointer?, _ w: UnsafeMutableRawPointer?,
                                                 _ deadline: Int64) -> Int32 {
    guard let c = lockMemory(c), let l = lockMemory(l), let w = condWaiter(w) else { return EINVAL }
    return ConditionWord.waitSlice(c, w, recursiveLock: l, deadline: Deadline.until(deadline), sliceEnd: sliceEnd())
}
@_cdecl("sync_cond_wait_begin") @inline(__always) public func c_sync_cond_wait_begin(_ c: UnsafeMutableRawPointer?, _ w: UnsafeMutableRawPointer?) -> Int32 {
    guard let c = lockMemory(c), let w = condWaiter(w) else { return EINVAL }
    return ConditionWord.enter(c, w)
}
@_cdecl("sync_cond_wait_sleep") @inline(__always) public func c_sync_cond_wait_sleep(_ w: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let w = condWaiter(w) else { return EINVAL }
    return interruptible(deadline) { ConditionWord.sleep(w, deadline: $0, interruptible: true) }
}
@_cdecl("sync_cond_wait_end") @inline(__always) public func c_sync_cond_wait_end(_ w: UnsafeMutableRawPointer?) -> Int32 {
    guard let w = condWaiter(w) else { return EINVAL }
    return ConditionWord.leave(w)
}
@_cdecl("sync_cond_signal") @inline(__always) public func c_sync_cond_signal(_ c: UnsafeMutableRawPointer?) -> Int32 {
    guard let c = lockMemory(c) else { return EINVAL }
    return ConditionWord.signal(c)
}
@_cdecl("sync_cond_signal_count") @inline(__always) public func c_sync_cond_signal_count(_ c: UnsafeMutableRawPointer?, _ count: UInt32) -> Int32 {
    guard let c = lockMemory(c) else { return EINVAL }
    return ConditionWord.wake(c, count: count)
}
@_cdecl("sync_cond_signal_checked") @inline(__always)
public func c_sync_cond_signal_checked(_ c: UnsafeMutableRawPointer?, _ m: UnsafeMutableRawPointer?, _ count: UInt32) -> Int32 {
    guard let c = lockMemory(c), let m = lockWord(m) else { return EINVAL }
    return ConditionWord.wake(c, holding: m, count: count)
}
@_cdecl("sync_cond_broadcast") @inline(__always) public func c_sync_cond_broadcast(_ c: UnsafeMutableRawPointer?) -> Int32 {
    guard let c = lockMemory(c) else { return EINVAL }
    return ConditionWord.broadcast(c)
}

// MARK: Condition (a mutex and a condition variable in one: NSCondition)

/// The mutex (word 0) and condition variable (words 1-2) of a sync_condition_t.
@inline(__always) func conditionParts(_ c: UnsafeMutableRawPointer?) -> (UnsafeMutableRawPointer, UnsafeMutableRawPointer)? {
    guard let c = lockMemory(c) else { return nil }
    return (c, c + 4)
}

@_cdecl("sync_condition_init") @inline(__always) public func c_sync_condition_init(_ c: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32 {
    guard let (m, cv) = conditionParts(c), flags & ~syncProcessShared == 0 else { return EINVAL }
    return ConditionWord.initialize(cv, mutex: m, shared: flags & syncProcessShared != 0)
}
@_cdecl("sync_condition_enter") @inline(__always) public func c_sync_condition_enter(_ c: UnsafeMutableRawPointer?) -> Int32 { c_sync_mutex_lock(c) }
@_cdecl("sync_condition_lock") public func c_sync_condition_lock(_ c: UnsafeMutableRawPointer?) -> Int32 { c_sync_condition_enter(c) }  // deprecated alias
@_cdecl("sync_condition_try_enter") @inline(__always) public func c_sync_condition_try_enter(_ c: UnsafeMutableRawPointer?) -> Int32 { c_sync_mutex_try_lock(c) }
@_cdecl("sync_condition_trylock") public func c_sync_condition_trylock(_ c: UnsafeMutableRawPointer?) -> Int32 { c_sync_condition_try_enter(c) }  // deprecated alias
@_cdecl("sync_condition_enter_interruptible") @inline(__always) public func c_sync_condition_enter_interruptible(_ c: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    c_sync_mutex_lock_interruptible(c, deadline)
}
@_cdecl("sync_condition_lock_interruptible") public func c_sync_condition_lock_interruptible(_ c: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 { c_sync_condition_enter_interruptible(c, deadline) }  // deprecated alias
@_cdecl("sync_condition_exit") @inline(__always) public func c_sync_condition_exit(_ c: UnsafeMutableRawPointer?) -> Int32 { c_sync_mutex_unlock(c) }
@_cdecl("sync_condition_unlock") public func c_sync_condition_unlock(_ c: UnsafeMutableRawPointer?) -> Int32 { c_sync_condition_exit(c) }  // deprecated alias
@_cdecl("sync_condition_wait") @inline(__always) public func c_sync_condition_wait(_ c: UnsafeMutableRawPointer?) -> Int32 {
    guard let (m, cv) = conditionParts(c) else { return EINVAL }
    return condWait(cv, m, forever())
}
@_cdecl("sync_condition_wait_timed") @inline(__always) public func c_sync_condition_wait_timed(_ c: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    guard let (m, cv) = conditionParts(c) else { return EINVAL }
    return condWait(cv, m, within(timeout))
}
@_cdecl("sync_condition_timedwait") public func c_sync_condition_timedwait(_ c: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_condition_wait_timed(c, timeout) }  // deprecated alias
@_cdecl("sync_condition_wait_until") @inline(__always) public func c_sync_condition_wait_until(_ c: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    guard let (m, cv) = conditionParts(c) else { return EINVAL }
    return condWait(cv, m, until(deadline))
}
@_cdecl("sync_condition_signal") @inline(__always) public func c_sync_condition_signal(_ c: UnsafeMutableRawPointer?) -> Int32 {
    guard let (_, cv) = conditionParts(c) else { return EINVAL }
    return ConditionWord.signal(cv)
}
@_cdecl("sync_condition_broadcast") @inline(__always) public func c_sync_condition_broadcast(_ c: UnsafeMutableRawPointer?) -> Int32 {
    guard let (_, cv) = conditionParts(c) else { return EINVAL }
    return ConditionWord.broadcast(cv)
}

// MARK: Condition lock (NSConditionLock)

@inline(__always) func conditionLock(_ l: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let l, Int(bitPattern: l) & 7 == 0 else { return nil }
    return l
}

func conditionLockLock(_ l: UnsafeMutableRawPointer?, _ wanted: Int64?, _ how: (Int64, Bool)) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return ConditionLockWord.lock(l, whenCondition: wanted, deadline: how.0, interruptible: how.1)
}

@_cdecl("sync_condition_lock_init") @inline(__always) public func c_sync_condition_lock_init(_ l: UnsafeMutableRawPointer?, _ condition: Int64, _ flags: Int32) -> Int32 {
    guard let l = conditionLock(l), flags & ~syncProcessShared == 0 else { return EINVAL }
    return ConditionLockWord.initialize(l, condition: condition, shared: flags & syncProcessShared != 0)
}
@_cdecl("sync_condition_lock_lock") @inline(__always) public func c_sync_condition_lock_lock(_ l: UnsafeMutableRawPointer?) -> Int32 {
    conditionLockLock(l, nil, forever())
}
@_cdecl("sync_condition_lock_lock_until") @inline(__always) public func c_sync_condition_lock_lock_until(_ l: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    conditionLockLock(l, nil, until(deadline))
}
@_cdecl("sync_condition_lock_try_lock") @inline(__always) public func c_sync_condition_lock_try_lock(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return ConditionLockWord.tryLock(l, whenCondition: nil)
}
@_cdecl("sync_condition_lock_trylock") public func c_sync_condition_lock_trylock(_ l: UnsafeMutableRawPointer?) -> Int32 { c_sync_condition_lock_try_lock(l) }  // deprecated alias
@_cdecl("sync_condition_lock_try_lock_first") public func c_sync_condition_lock_try_lock_first(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return LockOrder.firstTry(l) { ConditionLockWord.tryLock(l, whenCondition: nil) }
}
@_cdecl("sync_condition_lock_trylock_first") public func c_sync_condition_lock_trylock_first(_ l: UnsafeMutableRawPointer?) -> Int32 { c_sync_condition_lock_try_lock_first(l) }  // deprecated alias
@_cdecl("sync_condition_lock_lock_when") @inline(__always) public func c_sync_condition_lock_lock_when(_ l: UnsafeMutableRawPointer?, _ condition: Int64) -> Int32 {
    conditionLockLock(l, condition, forever())
}
@_cdecl("sync_condition_lock_lock_when_timed") @inline(__always) public func c_sync_condition_lock_lock_when_timed(_ l: UnsafeMutableRawPointer?, _ condition: Int64, _ timeout: UInt64) -> Int32 {
    conditionLockLock(l, condition, within(timeout))
}
@_cdecl("sync_condition_lock_timedlock_when") public func c_sync_condition_lock_timedlock_when(_ l: UnsafeMutableRawPointer?, _ condition: Int64, _ timeout: UInt64) -> Int32 { c_sync_condition_lock_lock_when_timed(l, condition, timeout) }  // deprecated alias
@_cdecl("sync_condition_lock_lock_when_until") @inline(__always) public func c_sync_condition_lock_lock_when_until(_ l: UnsafeMutableRawPointer?, _ condition: Int64, _ deadline: Int64) -> Int32 {
    conditionLockLock(l, condition, until(deadline))
}
@_cdecl("sync_condition_lock_lock_when_interruptible") @inline(__always)
public func c_sync_condition_lock_lock_when_interruptible(_ l: UnsafeMutableRawPointer?, _ any: Bool, _ condition: Int64, _ deadline: Int64) -> Int32 {
    interruptible(deadline) { conditionLockLock(l, any ? nil : condition, ($0, true)) }
}
@_cdecl("sync_condition_lock_try_lock_when") @inline(__always) public func c_sync_condition_lock_try_lock_when(_ l: UnsafeMutableRawPointer?, _ condition: Int64) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return ConditionLockWord.tryLock(l, whenCondition: condition)
}
@_cdecl("sync_condition_lock_trylock_when") public func c_sync_condition_lock_trylock_when(_ l: UnsafeMutableRawPointer?, _ condition: Int64) -> Int32 { c_sync_condition_lock_try_lock_when(l, condition) }  // deprecated alias
@_cdecl("sync_condition_lock_try_lock_when_first") public func c_sync_condition_lock_try_lock_when_first(_ l: UnsafeMutableRawPointer?, _ condition: Int64) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return LockOrder.firstTry(l) { ConditionLockWord.tryLock(l, whenCondition: condition) }
}
@_cdecl("sync_condition_lock_trylock_when_first") public func c_sync_condition_lock_trylock_when_first(_ l: UnsafeMutableRawPointer?, _ condition: Int64) -> Int32 { c_sync_condition_lock_try_lock_when_first(l, condition) }  // deprecated alias
@_cdecl("sync_condition_lock_unlock") @inline(__always) public func c_sync_condition_lock_unlock(_ l: UnsafeMutableRawPointer?) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return ConditionLockWord.unlock(l, condition: nil)
}
@_cdecl("sync_condition_lock_unlock_with") @inline(__always) public func c_sync_condition_lock_unlock_with(_ l: UnsafeMutableRawPointer?, _ condition: Int64) -> Int32 {
    guard let l = conditionLock(l) else { return EINVAL }
    return ConditionLockWord.unlock(l, condition: condition)
}
@_cdecl("sync_condition_lock_condition") @inline(__always) public func c_sync_condition_lock_condition(_ l: UnsafeMutableRawPointer?) -> Int64 {
    guard let l = conditionLock(l) else { return 0 }
    return ConditionLockWord.condition(of: l)
}

// MARK: Semaphore

func semaphoreWait(_ s: UnsafeMutableRawPointer?, _ how: (Int64, Bool)) -> Int32 {
    guard let s = lockMemory(s) else { return EINVAL }
    return SemaphoreWord.wait(s, deadline: how.0, interruptible: how.1)
}

@_cdecl("sync_semaphore_init") @inline(__always)
public func c_sync_semaphore_init(_ s: UnsafeMutableRawPointer?, _ value: UInt32, _ limit: UInt32, _ flags: Int32) -> Int32 {
    guard let s = lockMemory(s), flags & ~(syncProcessShared | syncSemaphoreBounded) == 0 else { return EINVAL }
    return SemaphoreWord.initialize(s, value: value, limit: flags & syncSemaphoreBounded != 0 ? limit : nil,
                                    shared: flags & syncProcessShared != 0)
}
@_cdecl("sync_semaphore_wait") @inline(__always) public func c_sync_semaphore_wait(_ s: UnsafeMutableRawPointer?) -> Int32 {
    semaphoreWait(s, forever())
}
@_cdecl("sync_semaphore_try_wait") @inline(__always) public func c_sync_semaphore_try_wait(_ s: UnsafeMutableRawPointer?) -> Int32 {
    guard let s = lockMemory(s) else { return EINVAL }
    return SemaphoreWord.tryTake(s)
}
@_cdecl("sync_semaphore_trywait") public func c_sync_semaphore_trywait(_ s: UnsafeMutableRawPointer?) -> Int32 { c_sync_semaphore_try_wait(s) }  // deprecated alias
@_cdecl("sync_semaphore_wait_timed") @inline(__always) public func c_sync_semaphore_wait_timed(_ s: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    semaphoreWait(s, within(timeout))
}
@_cdecl("sync_semaphore_timedwait") public func c_sync_semaphore_timedwait(_ s: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_semaphore_wait_timed(s, timeout) }  // deprecated alias
@_cdecl("sync_semaphore_wait_until") @inline(__always) public func c_sync_semaphore_wait_until(_ s: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    semaphoreWait(s, until(deadline))
}
@_cdecl("sync_semaphore_wait_interruptible") @inline(__always) public func c_sync_semaphore_wait_interruptible(_ s: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    interruptible(deadline) { semaphoreWait(s, ($0, true)) }
}
@_cdecl("sync_semaphore_signal") @inline(__always) public func c_sync_semaphore_signal(_ s: UnsafeMutableRawPointer?, _ count: UInt32) -> Int32 {
    guard let s = lockMemory(s), count > 0 else { return EINVAL }
    return SemaphoreWord.signal(s, count: count)
}
@_cdecl("sync_semaphore_value") @inline(__always) public func c_sync_semaphore_value(_ s: UnsafeMutableRawPointer?) -> UInt32 {
    guard let s = lockMemory(s) else { return 0 }
    return SemaphoreWord.value(s)
}

// MARK: Event

func eventWait(_ e: UnsafeMutableRawPointer?, _ how: (Int64, Bool)) -> Int32 {
    guard let e = lockMemory(e) else { return EINVAL }
    return EventWord.wait(e, deadline: how.0, interruptible: how.1)
}

@_cdecl("sync_event_init") @inline(__always) public func c_sync_event_init(_ e: UnsafeMutableRawPointer?, _ set: Bool, _ flags: Int32) -> Int32 {
    guard let e = lockMemory(e), flags & ~syncProcessShared == 0 else { return EINVAL }
    return EventWord.initialize(e, set: set, shared: flags & syncProcessShared != 0)
}
@_cdecl("sync_event_set") @inline(__always) public func c_sync_event_set(_ e: UnsafeMutableRawPointer?) -> Int32 {
    guard let e = lockMemory(e) else { return EINVAL }
    return EventWord.set(e)
}
@_cdecl("sync_event_clear") @inline(__always) public func c_sync_event_clear(_ e: UnsafeMutableRawPointer?) -> Int32 {
    guard let e = lockMemory(e) else { return EINVAL }
    EventWord.clear(e)
    return 0
}
@_cdecl("sync_event_is_set") @inline(__always) public func c_sync_event_is_set(_ e: UnsafeMutableRawPointer?) -> Bool {
    guard let e = lockMemory(e) else { return false }
    return EventWord.isSet(e)
}
@_cdecl("sync_event_wait") @inline(__always) public func c_sync_event_wait(_ e: UnsafeMutableRawPointer?) -> Int32 { eventWait(e, forever()) }
@_cdecl("sync_event_wait_timed") @inline(__always) public func c_sync_event_wait_timed(_ e: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 {
    eventWait(e, within(timeout))
}
@_cdecl("sync_event_timedwait") public func c_sync_event_timedwait(_ e: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int32 { c_sync_event_wait_timed(e, timeout) }  // deprecated alias
@_cdecl("sync_event_wait_until") @inline(__always) public func c_sync_event_wait_until(_ e: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    eventWait(e, until(deadline))
}
@_cdecl("sync_event_wait_interruptible") @inline(__always) public func c_sync_event_wait_interruptible(_ e: UnsafeMutableRawPointer?, _ deadline: Int64) -> Int32 {
    interruptible(deadline) { eventWait(e, ($0, true)) }
}
@_cdecl("sync_event_mark") @inline(__always) public func c_sync_event_mark(_ e: UnsafeMutableRawPointer?) -> UInt32 {
    guard let e = lockMemory(e) else { return 0 }
    return EventWord.mark(e)
}
@_cdecl("sync_event_wait_since_interruptible") @inline(__always)
public func c_sync_event_wait_since_interruptible(_ e: UnsafeMutableRawPointer?, _ mark: UInt32, _ deadline: Int64) -> Int32 {
    guard let e = lockMemory(e) else { return EINVAL }
    return interruptible(deadline) { EventWord.wait(e, since: mark, deadline: $0, interruptible: true) }
}

// MARK: Barrier

func barrierWait(_ b: UnsafeMutableRawPointer?, _ how: (Int64, Bool), _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    guard let b = lockMemory(b) else { return EINVAL }
    let (result, arrival) = BarrierWord.wait(b, deadline: how.0, interruptible: how.1)
    if result == 0 { index?.pointee = arrival }
    return result
}

@_cdecl("sync_barrier_init") @inline(__always) public func c_sync_barrier_init(_ b: UnsafeMutableRawPointer?, _ parties: UInt32, _ flags: Int32) -> Int32 {
    guard let b = lockMemory(b), flags & ~(syncProcessShared | syncBarrierAction) == 0 else { return EINVAL }
    return BarrierWord.initialize(b, parties: parties, hasAction: flags & syncBarrierAction != 0,
                                  shared: flags & syncProcessShared != 0)
}
@_cdecl("sync_barrier_wait") @inline(__always) public func c_sync_barrier_wait(_ b: UnsafeMutableRawPointer?, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    barrierWait(b, forever(), index)
}
@_cdecl("sync_barrier_wait_timed") @inline(__always) public func c_sync_barrier_wait_timed(_ b: UnsafeMutableRawPointer?, _ timeout: UInt64, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    barrierWait(b, within(timeout), index)
}
@_cdecl("sync_barrier_timedwait") public func c_sync_barrier_timedwait(_ b: UnsafeMutableRawPointer?, _ timeout: UInt64, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 { c_sync_barrier_wait_timed(b, timeout, index) }  // deprecated alias
@_cdecl("sync_barrier_wait_until") @inline(__always)
public func c_sync_barrier_wait_until(_ b: UnsafeMutableRawPointer?, _ deadline: Int64, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    barrierWait(b, until(deadline), index)
}
@_cdecl("sync_barrier_wait_interruptible") @inline(__always)
public func c_sync_barrier_wait_interruptible(_ b: UnsafeMutableRawPointer?, _ deadline: Int64, _ index: UnsafeMutablePointer<UInt32>?) -> Int32 {
    // Not sliced: leaving the barrier every slice would let it fill without this thread.
    barrierWait(b, (Deadline.until(deadline), true), index)
}
@_cdecl("sync_barrier_action_done") @inline(__always) public func c_sync_barrier_action_done(_ b: UnsafeMutableRawPointer?, _ succeeded: Bool) -> Int32 {
    guard let b = lockMemory(b) else { return EINVAL }
    return BarrierWord.actionDone(b, succeeded: succeeded)
}
@_cdecl("sync_barrier_reset") @inline(__always) public func c_sync_barrier_reset(_ b: UnsafeMutableRawPointer?) -> Int32 {
    guard let b = lockMemory(b) else { return EINVAL }
    return BarrierWord.reset(b)
}
@_cdecl("sync_barrier_abort") @inline(__always) public func c_sync_barrier_abort(_ b: UnsafeMutableRawPointer?) -> Int32 {
    guard let b = lockMemory(b) else { return EINVAL }
    return BarrierWord.abort(b)
}
@_cdecl("sync_barrier_status") @inline(__always)
public func c_sync_barrier_status(_ b: UnsafeMutableRawPointer?, _ parties: UnsafeMutablePointer<UInt32>?,
                                  _ waiting: UnsafeMutablePointer<UInt32>?, _ broken: UnsafeMutablePointer<Bool>?) -> Int32 {
    guard let b = lockMemory(b), let status = BarrierWord.status(b) else { return EINVAL }
    parties?.pointee = status.parties
    waiting?.pointee = status.waiting
    broken?.pointee = status.broken
    return 0
}
