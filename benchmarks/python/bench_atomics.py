"""Python: libsync.atomics beside the same thing built from threading.Lock + plain Python."""
import threading

from harness import per_call_ns, per_call_ns_threads, table
from libsync.atomics import AtomicInt, AtomicReference, ConcurrentDict, Throttler

N = 100_000


class LockedInt:
    def __init__(self):
        self.lock, self.value = threading.Lock(), 0

    def increment_and_get(self):
        with self.lock:
            self.value += 1
            return self.value


class LockedRef:
    def __init__(self, value):
        self.lock, self.value = threading.Lock(), value

    def get(self):
        with self.lock:
            return self.value


class LockedThrottler:
    def __init__(self, limit):
        self.lock, self.count, self.limit, self.rejections = threading.Lock(), 0, limit, 0

    def try_enter(self):
        with self.lock:
            if self.count >= self.limit:
                self.rejections += 1
                return False
            self.count += 1
            return True


def main():
    obj = object()
    locked_dict, lock = {"name": obj}, threading.Lock()

    def locked_get():
        with lock:
            return locked_dict.get("name")
    ours_dict = ConcurrentDict({"name": obj})
    full, locked_full = Throttler(1), LockedThrottler(1)
    full.try_enter(), locked_full.try_enter()
    pairs = [("AtomicInt.increment_and_get", LockedInt().increment_and_get, AtomicInt().increment_and_get),
             ("AtomicReference.get", LockedRef(obj).get, AtomicReference(obj).get),
             ("Throttler.try_enter (full)", locked_full.try_enter, full.try_enter),
             ("ConcurrentDict.get", locked_get, lambda: ours_dict.get("name"))]
    for threads in (1, 2):
        rows = []
        for name, peer, ours in pairs:
            measure = (lambda f: per_call_ns(f, N)) if threads == 1 else (lambda f: per_call_ns_threads(f, N // 2, 2))
            rows += [(f"threading.Lock + Python: {name}", measure(peer)), (f"libsync: {name}", measure(ours))]
        for i in range(0, len(rows), 2):
            table(rows[i + 1][0], rows[i:i + 2], threads=threads)


if __name__ == "__main__":
    main()
