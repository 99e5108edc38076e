"""libsync.distributed_lock.DistributedLock, NSDistributedLock's shape (not recursive, strict about
misuse), on a path in a temporary directory or on the TARGET given: a path,
postgresql://user:pw@host:port/db?lock=NAME, redis://:pw@host:port/db?lock=NAME&ttl=10 or
etcd://user:pw@host:port?lock=NAME.

    python3 examples/python/distributed_lock_usage.py [TARGET]
"""
import os
import shutil
import sys
import tempfile

from libsync.distributed_lock import DistributedLock, LockLostError


class Resource:
    """What the lock guards: it refuses a write whose fencing token is older than one it saw."""
    newest = 0

    def write(self, data, token):
        if token < self.newest:
            raise PermissionError(f"token {token} is older than {self.newest}: the lock was lost")
        self.newest, self.data = token, data


directory = tempfile.mkdtemp()
target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(directory, "jobs.lock")
resource = Resource()

lock = DistributedLock(target, timeout=10)            # poll_interval=0.05
with lock:                                            # or: with lock.acquire(timeout=1):
    resource.write("first", token=lock.token)         # the fencing token
    print(lock.holder, lock.lock_date, lock.is_locked)  # Holder(host, pid, process_start, acquired, on_this_host, stale)
try:
    with lock:
        resource.write("second", token=lock.token)
except LockLostError:                                 # a lost hold (a Redis lease ran out, an operator broke it)
    print("the lock was lost while held")
if lock.try_lock():                                   # NSDistributedLock's calls
    lock.release()

shutil.rmtree(directory)
sys.exit(0 if resource.data == "second" and not lock.is_locked else 1)
