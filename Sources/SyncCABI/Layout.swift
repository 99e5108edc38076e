import Glibc
import LibSync
import Synchronization

// sync/layout.h: where the words a binding reads without a call live, and what they hold,
// taken from the core's own constants and accessors (Sources/LibSync), never restated here.

/// sync_layout_t, field for field (the header's order; fields are only appended).
struct SyncLayout {
    var mutexRobust: UInt32
    var mutexUnownedHeld: UInt32
    var recursiveDepthOffset: UInt32
    var robustRecursiveDepthOffset: UInt32
    var condWaitersOffset: UInt32
    var condWaitersMask: UInt32
    var condWaiterSize: UInt32
    var condWaiterStateOffset: UInt32
    var condWaiterIdle: UInt32
    var eventStateOffset: UInt32
    var eventFlag: UInt32
    var semaphoreLimitOffset: UInt32
    var onceDone: UInt32
    var lockShared: UInt32
    var lockUnowned: UInt32
    var lockRobust: UInt32
}

/// The byte offset at which `word` places its word in a primitive's memory. The accessors only
/// compute addresses; the scratch memory is never read.
func offset(of word: (UnsafeMutableRawPointer) -> UnsafeMutablePointer<Atomic<UInt32>>) -> UInt32 {
    withUnsafeTemporaryAllocation(byteCount: 64, alignment: 16) { scratch in
        let base = scratch.baseAddress!
        return UInt32(UnsafeMutableRawPointer(word(base)) - base)
    }
}

extension SyncLayout {
    static var library: SyncLayout {
        SyncLayout(
            mutexRobust: MutexWord.robust,
            mutexUnownedHeld: MutexWord.unowned | MutexWord.anonymous,
            recursiveDepthOffset: offset(of: RecursiveWord.plainDepth),
            robustRecursiveDepthOffset: offset(of: RobustWord.depth),
            condWaitersOffset: offset(of: ConditionWord.count),
            condWaitersMask: impossibleWaiterCount - 1,
            condWaiterSize: UInt32(Waiter.size),
            condWaiterStateOffset: offset { Waiter($0).state },
            condWaiterIdle: Waiter.idle,
            eventStateOffset: offset(of: EventWord.state),
            eventFlag: EventWord.flag,
            semaphoreLimitOffset: offset(of: SemaphoreWord.bound),
            onceDone: OnceWord.done,
            lockShared: UInt32(LockFlags.shared),
            lockUnowned: UInt32(LockFlags.unowned),
            lockRobust: UInt32(LockFlags.robust))
    }
}

@_cdecl("sync_layout") public func c_sync_layout(_ layout: UnsafeMutableRawPointer?, _ size: Int) -> Int32 {
    guard let layout, size >= 0, size <= MemoryLayout<SyncLayout>.size, size % 4 == 0 else { return EINVAL }
    withUnsafeBytes(of: SyncLayout.library) { layout.copyMemory(from: $0.baseAddress!, byteCount: size) }
    return 0
}
