"""Atomic objects from libsync.atomics: a counter threads share, a throttler that admits at most
two callers and refuses the rest at once, and a dictionary whose reads never lock."""
import sys
import threading

from libsync.atomics import AtomicInt, ConcurrentDict, Throttler

hits = AtomicInt(bits=64)
throttle = Throttler(2)
names = ConcurrentDict()
inside = threading.Barrier(3)           # two admitted callers and the main thread
leave = threading.Event()


def count():
    for _ in range(10_000):
        hits.increment_and_get()


def admitted():
    with throttle:                      # raises ThrottlerFull when full
        inside.wait(timeout=10)
        leave.wait(timeout=10)


threads = [threading.Thread(target=count) for _ in range(4)]
holders = [threading.Thread(target=admitted) for _ in range(2)]
for thread in threads + holders:
    thread.start()
inside.wait(timeout=10)                 # both slots taken now
refused = not throttle.try_enter()      # full: refused without waiting, and counted
leave.set()
for thread in threads + holders:
    thread.join()

names["name"] = "Pat"
print(f"hits = {hits.get()}, third caller refused: {refused}, rejections = {throttle.rejections}, "
      f"name = {names.get('name')}")
sys.exit(0 if hits.get() == 40_000 and refused and throttle.rejections == 1 else 1)
