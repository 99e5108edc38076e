"""The fencing token: every acquisition's token is larger than all earlier ones, so a store that
refuses a token smaller than the largest it has seen, at every read and every write, refuses a
holder that lost the lock, even in the middle of its read-modify-write."""
import os
import sys
import tempfile

from libsync.distributed_lock import DistributedLock


class Store:
    highest = 0
    value = 0

    def read(self, token):
        if token < self.highest:                 # a holder that lost the lock: refused
            raise PermissionError("stale token")
        self.highest = token                     # recorded at the read too
        return self.value

    def write(self, value, token):
        if token < self.highest:
            raise PermissionError("stale token")
        self.highest, self.value = token, value


store = Store()
with tempfile.TemporaryDirectory() as directory:
    lock = DistributedLock(os.path.join(directory, "jobs.lock"))  # a path, or a postgresql:// or redis:// URL
    with lock:
        old = lock.token
        seen_by_old = store.read(token=old)      # the first holder reads, then pauses past its lease
    with lock:                                   # a later acquisition (another holder, in real life)
        new = lock.token
        seen_by_new = store.read(token=new)      # the new holder reads: the store records its token
        try:
            store.write(seen_by_old + 1, token=old)  # the first holder wakes and writes: refused
            late = "accepted"
        except PermissionError:
            late = "refused"
        store.write(seen_by_new + 1, token=new)
print(f"the late write: {late}; the store holds {store.value}")
sys.exit(0 if late == "refused" and store.value == 1 else 1)
