import ctypes
from multiprocessing import shared_memory

from libsync.osatomic import OSAtomicCompareAndSwap32, OSAtomicIncrement32, ref

counter = ctypes.c_int32(0)
print(OSAtomicIncrement32(counter))                 # 1: Apple's names, Apple's semantics

shm = shared_memory.SharedMemory(create=True, size=8)
try:
    shared = ref(shm.buf, 0, ctypes.c_int32)        # an atomic that processes share
    print(OSAtomicCompareAndSwap32(0, 42, shared))  # True: it was 0, it is 42 now
    del shared                                      # a ref pins the buffer: drop it before close
finally:
    shm.close()
    shm.unlink()
