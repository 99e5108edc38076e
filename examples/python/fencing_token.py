"""The fencing token: every acquisition's token is larger than all earlier ones, so a store that
refuses a token smaller than the largest it has seen refuses a holder that lost the lock."""
import os
import sys
import tempfile

from libsync.distributed_lock import DistributedLock


class Store:
    highest = 0

    def write(self, data, token):
        if token < self.highest:                 # a holder that lost the lock: refused
            return False
        self.highest, self.data = token, data
        return True


store = Store()
with tempfile.TemporaryDirectory() as directory:
    lock = DistributedLock(os.path.join(directory, "jobs.lock"))  # a path, or a postgresql:// or redis:// URL
    with lock:
        old = lock.token
        store.write("first", token=lock.token)
    with lock:                                   # a later acquisition (another holder, in real life)
        store.write("second", token=lock.token)
late = store.write("late", token=old)            # the first holder, woken from a pause, writes
print(f"a write with the old token: {'accepted' if late else 'refused'}; the store holds {store.data!r}")
sys.exit(0 if not late and store.data == "second" else 1)
