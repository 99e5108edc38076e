"""libsync: thread-synchronization primitives for Python, from libsync.so (Swift core, C ABI).

Modules:
    libsync.osatomic           Apple's OSAtomic operations on ctypes objects and shared buffers.
    libsync.locks              Lock/RLock (drop-in for threading's), Mutex, RWLock, SpinLock, once, synchronized.
    libsync.atomics            AtomicBool, AtomicInt, AtomicReference, Throttler, ConcurrentDict.
    libsync.conditions         Condition, Semaphore, BoundedSemaphore, Event, Barrier (drop-in for threading's), ConditionLock.
    libsync.distributed_lock   NSDistributedLock: a lock between processes and hosts (filelock-style).
    libsync.queues             SerialQueue, ConcurrentQueue (barriers), IsolatedValue, ThreadExecutor.
    libsync.signals            route(): a signal handled on a chosen thread or queue, with its siginfo.
    libsync.debug              check_lock_order(): potential deadlocks reported with their stacks; waits().
"""
from ._lib import path as library_path
from ._lib import version as __version__
from . import osatomic
from . import locks
from . import atomics
from . import conditions
from . import distributed_lock
from . import queues
from . import signals
from . import debug
from .osatomic import ref
from .conditions import Barrier, BoundedSemaphore, BrokenBarrierError, Condition, ConditionLock, Event, Semaphore
from .locks import Lock, RLock

debug._start_if_enabled()

__all__ = ["__version__", "library_path", "osatomic", "ref", "locks", "atomics", "distributed_lock", "queues", "conditions", "debug",
           "Lock", "RLock", "Condition", "ConditionLock", "Semaphore", "BoundedSemaphore", "Event", "Barrier",
           "BrokenBarrierError"]
