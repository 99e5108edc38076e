"""Python: seed 003's property read 90% / written 10% by 2 and 8 threads, through
threading.RLock (the @synchronized analogue: recursive), threading.Lock, libsync's own
synchronized(obj), Mutex and RWLock, serial queue (sync get, async set), concurrent queue (sync
get, barrier async set) and isolated value (get, set). Adding a row is one line in ROWS."""
import threading

from harness import per_call_ns_threads, table
from libsync.locks import Mutex, RWLock, synchronized
from libsync.queues import ConcurrentQueue, IsolatedValue, SerialQueue

N = 20_000  # calls per table row, split among the threads


class Locked:
    def __init__(self, lock):
        self.lock, self.value = lock, 0

    def get(self):
        with self.lock:
            return self.value

    def set(self, value):
        with self.lock:
            self.value = value


class Synchronized:
    def __init__(self):
        self.value = 0

    def get(self):
        with synchronized(self):
            return self.value

    def set(self, value):
        with synchronized(self):
            self.value = value


class ReadWrite:
    def __init__(self):
        self.lock, self.value = RWLock(), 0

    def get(self):
        with self.lock.read():
            return self.value

    def set(self, value):
        with self.lock.write():
            self.value = value


class OnQueue:
    """The seed's pattern by hand: reads by sync, writes by (barrier) async."""

    def __init__(self, queue, write):
        self.queue, self.value, self._write = queue, 0, write

    def get(self):
        return self.queue.sync(lambda: self.value)

    def set(self, value):
        self._write(lambda: setattr(self, "value", value))


serial, concurrent = SerialQueue(), ConcurrentQueue()
ROWS = [
    ("threading.RLock (the @synchronized analogue)", Locked(threading.RLock())),
    ("threading.Lock", Locked(threading.Lock())),
    ("libsync synchronized(obj)", Synchronized()),
    ("libsync Mutex", Locked(Mutex())),
    ("libsync RWLock (read() / write())", ReadWrite()),
    ("SerialQueue: sync get, async_ set", OnQueue(serial, serial.async_)),
    ("ConcurrentQueue: sync get, barrier_async set", OnQueue(concurrent, concurrent.barrier_async)),
    ("IsolatedValue: get, set", IsolatedValue(0)),
]


def mixed(target):
    count = [0]

    def call():
        count[0] += 1
        if count[0] % 10 == 0:
            target.set(count[0])
        else:
            target.get()
    return call


def main():
    for threads in (2, 8):
        table("Python property 90% read / 10% write",
              [(name, per_call_ns_threads(mixed(target), N // threads, threads)) for name, target in ROWS],
              baseline=1, threads=threads)
    serial.close()
    concurrent.close()


if __name__ == "__main__":
    main()
