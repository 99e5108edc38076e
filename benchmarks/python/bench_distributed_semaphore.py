"""Python: one permit of a distributed semaphore (4 permits), taken and given back uncontended
(acquire(blocking=False)+release), beside the exclusive distributed lock's try_lock+release on the
same backend, measured in the same run, the rows taking turns: the file system (in $BENCH_DIR),
and private PostgreSQL, Redis and etcd servers (scripts/servers.sh, or $LIBSYNC_TEST_SERVERS's).
Target: within 1.5x of the exclusive lock. Not a test: run it on a quiet machine."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench_distributed_lock import table
from libsync.distributed_lock import DistributedLock, DistributedSemaphore

ROOT = Path(__file__).resolve().parents[2]
CALLS = 200 if os.environ.get("BENCH_QUICK") else 2000


def compare(name, target, calls=CALLS):
    lock = DistributedLock(target if "://" not in target else target + "?lock=bench-lock")
    semaphore = DistributedSemaphore(target if "://" not in target else target + "?lock=bench-semaphore", 4)
    rows = [(f"DistributedLock try_lock+release ({name})", lambda: (lock.try_lock(), lock.release())),
            (f"DistributedSemaphore(4) acquire(blocking=False)+release ({name})",
             lambda: (semaphore.acquire(blocking=False), semaphore.release()))]
    table(f"{name}: one permit vs the exclusive lock, uncontended", rows, calls)


def main():
    directory = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR", "/tmp"))
    compare("file system", directory + "/semaphore")
    shutil.rmtree(directory)
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    servers = Path(given) if given else Path(tempfile.mkdtemp(prefix="libsync-bench-servers-"))
    script = ROOT / "scripts" / "servers.sh"
    try:
        if not given and (subprocess.run([str(script), "start", str(servers)]).returncode != 0
                          or subprocess.run([str(script), "start-etcd", str(servers)]).returncode != 0):
            print("(no servers: scripts/servers.sh could not start them)")
            return
        for name, file in (("PostgreSQL", "postgres"), ("Redis", "redis"), ("etcd", "etcd")):
            url_file = servers / f"{file}.url"
            if url_file.exists():
                compare(name, url_file.read_text().strip(), CALLS // 4 if file == "etcd" else CALLS)
    finally:
        if not given:
            subprocess.run([str(script), "stop", str(servers)])
            shutil.rmtree(servers, ignore_errors=True)


if __name__ == "__main__":
    main()
