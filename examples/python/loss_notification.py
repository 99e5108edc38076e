"""Learning that a hold was lost: on a path in a temporary directory, a holder's lock is broken
by another process's object (an operator, say); the holder learns it from its handler and from
`lock.lost` (no round trip), and stops writing. A Redis or PostgreSQL URL works the same way."""
import os
import sys
import tempfile
import threading

from libsync.distributed_lock import DistributedLock, HoldEvent, LockBrokenError

told = threading.Event()


def on_event(lock, event):                       # on libsync's notifier thread, never under a lock
    print("the jobs lock:", event.name)
    if event == HoldEvent.LOST:
        told.set()


with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "jobs.lock")
    lock = DistributedLock(path, on_event=on_event)
    written = 0
    try:
        with lock:
            DistributedLock(path).break_lock()   # someone else breaks it
            for item in range(1000):
                if lock.lost or lock.suspended:  # one atomic load: cheap before each write
                    break
                written += 1                     # store.write(item, token=lock.token)
                told.wait(0.01)
    except LockBrokenError as error:             # the release says so too
        print("release:", error.__class__.__name__)
    print(f"wrote {written} items, then learned the hold was lost: lost={lock.lost}")
sys.exit(0 if told.is_set() and lock.lost and written < 1000 else 1)
