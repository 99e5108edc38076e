"""The read/write distributed lock from Python: many readers or one writer, fencing tokens on
both sides, a resource that refuses a stale writer. TARGET: a path (default: one in a temporary
directory), postgresql://user:pw@host:port/db?lock=NAME, redis://:pw@host:port/db?lock=NAME&ttl=10
or etcd://user:pw@host:port?lock=NAME.

    python3 examples/python/distributed_rwlock.py [TARGET]
"""
import os
import shutil
import sys
import tempfile

from libsync.distributed_lock import ReadWriteLock, Timeout


class Catalog:
    """What the lock guards: it refuses a write whose token is older than one it saw."""
    newest = 0

    def write(self, data, token):
        if token < self.newest:
            raise PermissionError(f"token {token} is older than {self.newest}")
        self.newest, self.data = token, data


directory = tempfile.mkdtemp()
target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(directory, "catalog.lock")
catalog = Catalog()
reader1 = ReadWriteLock(target, is_singleton=False)
reader2 = ReadWriteLock(target, is_singleton=False)
writer = ReadWriteLock(target, is_singleton=False)

with reader1.read_lock(timeout=10), reader2.read_lock(timeout=10):  # readers share it
    read_token = reader1.token
    try:
        writer.acquire_write(blocking=False)                         # a writer must wait
        busy = False
    except Timeout:
        busy = True
with writer.write_lock(timeout=10):                                  # alone
    catalog.write("v2", token=writer.token)
    write_token = writer.token
try:
    catalog.write("stale", token=read_token)                         # an older token: refused
    refused = False
except PermissionError:
    refused = True
print(f"writer waited: {busy}; token {write_token} > {read_token}; stale write refused: {refused}")
shutil.rmtree(directory)
sys.exit(0 if busy and refused and write_token > read_token and catalog.data == "v2" else 1)
