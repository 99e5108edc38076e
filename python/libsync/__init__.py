"""libsync: thread-synchronization primitives for Python, from libsync.so (Swift core, C ABI).

Modules:
    libsync.osatomic     Apple's OSAtomic operations on ctypes objects and shared buffers.
    libsync.locks        Lock/RLock (drop-in for threading's), Mutex, RWLock, SpinLock, once, synchronized.
    libsync.atomics      AtomicBool, AtomicInt, AtomicReference, Throttler, ConcurrentDict.
    libsync.conditions   Semaphore, BoundedSemaphore, Event, Barrier (drop-in for threading's).
"""
from ._lib import path as library_path
from . import osatomic
from . import locks
from . import atomics
from . import conditions
from .osatomic import ref
from .conditions import Barrier, BoundedSemaphore, BrokenBarrierError, Event, Semaphore

__all__ = ["library_path", "osatomic", "ref", "locks", "atomics", "conditions",
           "Semaphore", "BoundedSemaphore", "Event", "Barrier", "BrokenBarrierError"]
__version__ = "0.1.0"
