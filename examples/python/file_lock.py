"""A lock kept in the file system (libsync.distributed_lock): two objects for one path exclude
each other, in one process or in several (on one host or through NFS), and every acquisition
gets a fencing token larger than all earlier ones."""
import os
import sys
import tempfile
import threading

from libsync.distributed_lock import DistributedLock, FileLock, Timeout

with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "jobs.lock")
    first, second = DistributedLock(path), DistributedLock(path)

    with first:                                    # acquire ... release
        token = first.token
        print("held by pid", first.holder.pid, "with token", token)
        busy = not second.try_lock()               # another object: refused at once
        try:
            second.acquire(timeout=0.1)
            timed_out = False
        except Timeout:                            # filelock's exception
            timed_out = True
    with second:                                   # free again
        later = second.token

    counter = {"n": 0}

    def add():                                     # filelock's interface, on the same core
        lock = FileLock(path + "2")                # an object per thread: they exclude each other
        for _ in range(100):
            with lock:
                counter["n"] += 1

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

print(f"second object refused: {busy}, timed out: {timed_out}, later token larger: {later > token}, "
      f"count {counter['n']}")
sys.exit(0 if busy and timed_out and later > token and counter["n"] == 400 else 1)
