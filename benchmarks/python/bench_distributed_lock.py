"""Python: acquire+release of the distributed lock, uncontended, per backend, beside the peer a
user would pick, measured in the same run:
  file system  filelock.FileLock and fasteners.InterProcessLock (flock-based), in $BENCH_DIR
  Redis        redis-py's Lock (SET NX PX + a release script); the floor: two PINGs (redis-py)
  PostgreSQL   pg_try_advisory_lock + pg_advisory_unlock through psycopg; floor: two SELECT 1
The servers are private ones (scripts/servers.sh), or $LIBSYNC_TEST_SERVERS's. Each row: the
median call and its spread (10th...90th percentile), the rows taking turns. Targets: within 1.2x of the floor (the round
trips the operation needs), no slower than redis-py's Lock. Not a test: run it on a quiet machine."""
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from harness import _emit
from libsync.distributed_lock import DistributedLock

ROOT = Path(__file__).resolve().parents[2]


BLOCK = 50


def table(title, rows, calls):
    """Times every call of each row alone, the rows taking turns in blocks of BLOCK calls (a round
    trip's cost on a VM swings with where client and server run: turns expose every row to the
    same swings); prints each row's median call, its spread (10th...90th percentile), and the
    ratio to the first row."""
    samples = [[] for _ in rows]
    clock = time.perf_counter_ns
    for _ in range(0, calls, BLOCK):
        for (name, function), times in zip(rows, samples):
            for _ in range(BLOCK):
                start = clock()
                function()
                times.append(clock() - start)
    base = statistics.median(samples[0])
    print(f"\n{title} — median of {calls} calls, in turns of {BLOCK} (spread: 10th...90th percentile)")
    print(f"  {'':50} {'µs/call':>9} {'spread':>17} {'ratio':>7}")
    for (name, _), times in zip(rows, samples):
        times.sort()
        median = statistics.median(times)
        print(f"  {name:50} {median / 1e3:9.1f} {times[len(times) // 10] / 1e3:8.1f}...{times[len(times) * 9 // 10] / 1e3:<8.1f}"
              f" {median / base:6.2f}x")
        _emit(title, 1, name, median, median / base, name == rows[0][0])  # into RESULTS.md


def file_system():
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
    print(f"(lock files in {directory})")
    table("File system: acquire+release, uncontended", rows, 2000)
    del ours
    shutil.rmtree(directory)


def redis_backend(url):
    import redis
    client = redis.Redis.from_url(url)
    peer = client.lock("bench-redis-py", timeout=10)
    ours = DistributedLock(url + "?lock=bench-libsync")
    rows = [("floor: 2 round trips (redis-py PING, PING)", lambda: (client.ping(), client.ping())),
            ("redis-py Lock acquire(blocking=False)+release", lambda: (peer.acquire(blocking=False), peer.release())),
            ("libsync DistributedLock try_lock+release", lambda: (ours.try_lock(), ours.release())),
            ("libsync DistributedLock acquire+release", lambda: (ours.acquire(), ours.release()))]
    table("Redis: acquire+release, uncontended (loopback)", rows, 2000)


def postgres_backend(url):
    import psycopg
    connection = psycopg.connect(url, autocommit=True)
    ours = DistributedLock(url + "?lock=bench-libsync")

    def select_twice():
        connection.execute("SELECT 1").fetchone()
        connection.execute("SELECT 1").fetchone()

    def advisory():
        connection.execute("SELECT pg_try_advisory_lock(42)").fetchone()
        connection.execute("SELECT pg_advisory_unlock(42)").fetchone()

    rows = [("floor: 2 round trips (psycopg SELECT 1, SELECT 1)", select_twice),
            ("psycopg pg_try_advisory_lock+pg_advisory_unlock", advisory),
            ("libsync DistributedLock try_lock+release", lambda: (ours.try_lock(), ours.release())),
            ("libsync DistributedLock acquire+release", lambda: (ours.acquire(), ours.release()))]
    table("PostgreSQL: acquire+release, uncontended (loopback)", rows, 2000)


def main():
    file_system()
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    servers = Path(given) if given else Path(tempfile.mkdtemp(prefix="libsync-bench-servers-"))
    script = ROOT / "scripts" / "servers.sh"
    if not given and subprocess.run([str(script), "start", str(servers)]).returncode != 0:
        print("(no PostgreSQL/Redis servers: scripts/servers.sh could not start them)")
        return
    try:
        for name, bench in (("redis", redis_backend), ("postgres", postgres_backend)):
            try:
                bench((servers / f"{name}.url").read_text().strip())
            except ImportError as error:
                print(f"({error.name} is not installed: pip install redis 'psycopg[binary]')")
    finally:
        if not given:
            subprocess.run([str(script), "stop", str(servers)])
            shutil.rmtree(servers, ignore_errors=True)


if __name__ == "__main__":
    main()
