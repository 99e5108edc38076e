"""Python: acquire+release of the distributed lock beside filelock.FileLock and
fasteners.InterProcessLock (both PyPI, flock-based), uncontended, in $BENCH_DIR (default /tmp).
Target: no slower than filelock."""
import os
import shutil
import tempfile

from harness import per_call_ns, table
from libsync.distributed_lock import DistributedLock

N = 2_000


def main():
    directory = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR", "/tmp"))
    ours = DistributedLock(os.path.join(directory, "libsync.lock"))
    rows = []
    try:
        import filelock
        peer = filelock.FileLock(os.path.join(directory, "filelock.lock"))
        rows.append(("filelock.FileLock acquire+release", lambda: (peer.acquire(), peer.release())))
    except ImportError:
        print("(filelock is not installed: pip install filelock)")
    try:
        import fasteners
        other = fasteners.InterProcessLock(os.path.join(directory, "fasteners.lock"))
        rows.append(("fasteners.InterProcessLock acquire+release", lambda: (other.acquire(), other.release())))
    except ImportError:
        print("(fasteners is not installed: pip install fasteners)")
    rows.append(("libsync DistributedLock acquire+release", lambda: (ours.acquire(), ours.release())))
    rows.append(("libsync DistributedLock try_lock+release", lambda: (ours.try_lock(), ours.release())))

    def with_block():
        with ours:
            pass
    rows.append(("libsync `with DistributedLock`", with_block))
    print(f"(lock files in {directory})")
    table("Python lock acquire+release, uncontended", [(name, per_call_ns(f, N)) for name, f in rows])
    del ours
    shutil.rmtree(directory)


if __name__ == "__main__":
    main()
