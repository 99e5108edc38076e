"""filelock's interface on libsync's distributed lock: `from libsync.distributed_lock import ...`
in place of `from filelock import ...`. The path would be on a shared file system (NFS too), or
a postgresql:// or redis:// URL (docs/distributed_lock.md, "Lock targets")."""
import os
import shutil
import sys
import tempfile
import threading

from libsync.distributed_lock import FileLock, Timeout

directory = tempfile.mkdtemp()
lock = FileLock(os.path.join(directory, "jobs.lock"), timeout=10)  # a module-level lock, shared by threads

with lock:                                      # re-entrant; the object's other threads wait
    with lock.acquire(timeout=1):
        depth = lock.lock_counter               # 2


@lock                                           # a decorator too
def job():
    return lock.is_locked


other = FileLock(lock.lock_file, timeout=0.1)   # another object for the same lock
with lock:
    try:
        other.acquire()                         # waits up to its timeout
        excluded = False
    except Timeout:                             # filelock's exception ("The file lock '...' could not be acquired.")
        excluded = True

results = []
threads = [threading.Thread(target=lambda: results.append(job())) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()

shutil.rmtree(directory)
print(f"depth {depth}, the decorated job ran locked: {results}, another object excluded: {excluded}")
sys.exit(0 if depth == 2 and results == [True] * 4 and excluded and not lock.is_locked else 1)
