"""libsync: thread-synchronization primitives for Python, from libsync.so (Swift core, C ABI).

Modules:
    libsync.osatomic   Apple's OSAtomic operations on ctypes objects and shared buffers.
"""
from ._lib import path as library_path
from . import osatomic
from .osatomic import ref
from .conditions import Barrier, BoundedSemaphore, BrokenBarrierError, Event, Semaphore

__all__ = ["library_path", "osatomic", "ref",
           "Semaphore", "BoundedSemaphore", "Event", "Barrier", "BrokenBarrierError"]
__version__ = "0.1.0"
