/// Labels: a lock's name in lock-order reports and the waits dump (docs/lock_order.md). The
/// core keeps it (`LockOrder.setName`), keyed by the lock's memory: it goes when the object is
/// freed or its memory is initialized again. A label is kept whether checking is on or off;
/// one that is empty or has a control character (such as a newline) traps.

/// Reads and sets the label of the lock at `memory`.
private func label(at memory: UnsafeRawPointer) -> String? { LockOrder.name(of: memory) }
private func setLabel(_ label: String?, at memory: UnsafeRawPointer, _ type: StaticString) {
    require(LockOrder.setName(memory, label) == 0, "\(type).label: \(LockOrder.nameRule)")
}

extension SyncMutex {
    /// The mutex's name in lock-order reports (`let accounts = SyncMutex(); accounts.label = "accounts"`).
    public var label: String? {
        get { LibSync.label(at: memory.raw) }
        set { setLabel(newValue, at: memory.raw, "SyncMutex") }
    }
}

extension SyncRecursiveLock {
    /// The lock's name in lock-order reports.
    public var label: String? {
        get { LibSync.label(at: memory.raw) }
        set { setLabel(newValue, at: memory.raw, "SyncRecursiveLock") }
    }
}

extension SyncRWLock {
    /// The lock's name in lock-order reports (both sides).
    public var label: String? {
        get { LibSync.label(at: memory.raw) }
        set { setLabel(newValue, at: memory.raw, "SyncRWLock") }
    }
}

extension SyncSpinLock {
    /// The lock's name in lock-order reports.
    public var label: String? {
        get { LibSync.label(at: memory.raw) }
        set { setLabel(newValue, at: memory.raw, "SyncSpinLock") }
    }
}

extension SyncCondition {
    /// The name of the condition's mutex in lock-order reports.
    public var label: String? {
        get { LibSync.label(at: memory.raw) }
        set { setLabel(newValue, at: memory.raw, "SyncCondition") }
    }
}

extension SyncConditionLock {
    /// The lock's name in lock-order reports.
    public var label: String? {
        get { LibSync.label(at: memory.raw) }
        set { setLabel(newValue, at: memory.raw, "SyncConditionLock") }
    }
}
