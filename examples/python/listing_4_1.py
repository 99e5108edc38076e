"""Listing 4-1 of Apple's Threading Programming Guide, from Python on libsync."""
import ctypes
import sys

from libsync.osatomic import OSAtomicCompareAndSwap32, OSAtomicTestAndSet

failures = 0


def show(step, value, wanted):
    global failures
    failures += value != wanted
    print(f"{step:48} theValue = {value:4} ({'as Apple says' if value == wanted else 'WRONG'})")


print("Listing 4-1 (Python):")
theValue = ctypes.c_int32(0)
OSAtomicTestAndSet(0, theValue)
show("OSAtomicTestAndSet(0, theValue)", theValue.value, 128)
theValue.value = 0
OSAtomicTestAndSet(7, theValue)
show("OSAtomicTestAndSet(7, theValue)", theValue.value, 1)
theValue.value = 0
OSAtomicTestAndSet(15, theValue)
show("OSAtomicTestAndSet(15, theValue)", theValue.value, 256)
OSAtomicCompareAndSwap32(256, 512, theValue)
show("OSAtomicCompareAndSwap32(256, 512, theValue)", theValue.value, 512)
OSAtomicCompareAndSwap32(256, 1024, theValue)
show("OSAtomicCompareAndSwap32(256, 1024, theValue)", theValue.value, 512)
sys.exit(failures)
