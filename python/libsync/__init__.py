"""libsync: thread-synchronization primitives for Python, from libsync.so (Swift core, C ABI).

Modules:
    libsync.osatomic   Apple's OSAtomic operations on ctypes objects and shared buffers.
    libsync.queues     Serial/concurrent queues, a thread executor, isolated values.
"""
from ._lib import path as library_path
from . import osatomic
from . import queues
from .osatomic import ref

__all__ = ["library_path", "osatomic", "ref"]
__version__ = "0.1.0"
