/// The flags of the lock initializers (`sync_mutex_init`, `sync_recursive_lock_init`,
/// `sync_rwlock_init`, `sync_spinlock_init`): the one place their values are chosen. The C
/// header restates them as #defines (Tests/c/test_layout.c checks they agree), Python reads them
/// from `sync_layout()`, and `LockOptions` uses the same values.
package enum LockFlags {
    /// The lock is in memory that processes share.
    package static let shared: Int32 = 1
    /// A mutex that any thread may unlock (no owner checks).
    package static let unowned: Int32 = 2
    /// A robust mutex or recursive lock (16 bytes).
    package static let robust: Int32 = 4

    /// The flags each initializer accepts.
    package static let mutex = shared | unowned | robust
    package static let recursiveLock = shared | robust
    package static let rwlock = shared
    package static let spinLock = shared
}
