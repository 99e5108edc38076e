"""Python asyncio, the distributed lock across processes: another process releases, the task
waiting in this one runs holding the lock (the wake-up latency), median and spread, the rows
taking turns in one run:
  libsync AsyncFileLock and DistributedLock on a path (woken by inotify: no polling);
  libsync DistributedLock on Redis (polls with backoff, 1 ms doubling up to poll_interval);
beside filelock's AsyncFileLock (polls every poll_interval, default 50 ms) and redis-py's
asyncio Lock (polls every sleep, default 100 ms), each with its defaults, as a user runs them
(a private Redis from scripts/servers.sh, or $LIBSYNC_TEST_SERVERS's). Goal: libsync's file
lock at most 100 µs at the median. Not a test: run on a quiet machine."""
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import QUICK
from bench_aio import report

from libsync.distributed_lock import AsyncFileLock, DistributedLock

ROOT = Path(__file__).resolve().parents[2]


def child(kind, arg):
    """Holds the lock when told, releases it when told and reports the CLOCK_MONOTONIC time of
    its release (just before the release call)."""
    if kind == "libsync-file":
        from libsync.distributed_lock import FileLock
        lock = FileLock(arg)
    elif kind == "libsync":
        lock = DistributedLock(arg)
    elif kind == "filelock":
        import filelock
        lock = filelock.FileLock(arg)
    else:
        import redis
        lock = redis.Redis.from_url(arg).lock("libsync-bench-daio")
    for line in sys.stdin:
        if line.strip() == "hold":
            lock.acquire()
            print("held", flush=True)
        elif line.strip() == "release":
            released = time.monotonic_ns()
            lock.release()
            print(released, flush=True)


def spawn(kind, arg):
    return subprocess.Popen([sys.executable, __file__, "child", kind, arg], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=os.environ)


async def once(proc, acquire, release):
    proc.stdin.write("hold\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "held"
    got = []

    async def waiter():
        await acquire()
        got.append(time.monotonic_ns())
        await release()

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0.002)  # the waiter enters its wait
    proc.stdin.write("release\n")
    proc.stdin.flush()
    released = int(await asyncio.to_thread(proc.stdout.readline))
    await task
    return got[0] - released


async def main_async(redis_url):
    directory = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR", "/tmp"))
    rows, procs = [], []
    try:
        path = os.path.join(directory, "libsync-file.lock")
        file_lock = AsyncFileLock(path)
        procs.append(spawn("libsync-file", path))
        rows.append(("libsync AsyncFileLock (inotify)", procs[-1], file_lock.acquire, file_lock.release))

        path = os.path.join(directory, "libsync-dist.lock")
        dist = DistributedLock(path)

        async def dist_release():
            dist.release()
        procs.append(spawn("libsync", path))
        rows.append(("libsync DistributedLock, path (inotify)", procs[-1], dist.acquire_async, dist_release))
        if redis_url:
            target = f"{redis_url}?lock=bench-daio-{os.getpid()}"
            on_redis = DistributedLock(target)

            async def redis_release():
                on_redis.release()
            procs.append(spawn("libsync", target))
            rows.append(("libsync DistributedLock, Redis (polls, backoff)", procs[-1], on_redis.acquire_async,
                         redis_release))
        try:
            import filelock
            path = os.path.join(directory, "peer.lock")
            peer = filelock.AsyncFileLock(path)
            procs.append(spawn("filelock", path))
            rows.append(("filelock.AsyncFileLock (peer, polls)", procs[-1], peer.acquire, peer.release))
        except ImportError:
            print("(filelock is not installed: pip install filelock)")
        if redis_url:
            try:
                import redis.asyncio
                client = redis.asyncio.Redis.from_url(redis_url)
                redis_lock = client.lock("libsync-bench-daio")
                procs.append(spawn("redis", redis_url))
                rows.append(("redis-py asyncio Lock (peer, polls)", procs[-1], redis_lock.acquire, redis_lock.release))
            except ImportError:
                print("(redis is not installed: pip install redis)")
        samples = 30 if QUICK else 300
        slow = max(10, samples // 10)  # the polling rows cost their polling interval per sample
        times = [[] for _ in rows]
        for i in range(samples):
            for (name, proc, acquire, release), out in zip(rows, times):
                if i < slow or "inotify" in name:
                    out.append(await once(proc, acquire, release))
        report("asyncio: distributed lock wake-up across processes (another process releases -> the waiting "
               "task runs holding it)", [(row[0], out) for row, out in zip(rows, times)], unit="µs")
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(60)
        shutil.rmtree(directory, ignore_errors=True)


def main():
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    servers = Path(given) if given else Path(tempfile.mkdtemp(prefix="libsync-bench-servers-"))
    script = ROOT / "scripts" / "servers.sh"
    started = bool(given) or subprocess.run([str(script), "start-redis", str(servers)],
                                            stdout=subprocess.DEVNULL).returncode == 0
    if not started:
        print("(no Redis server: scripts/servers.sh could not start one)")
    try:
        url = (servers / "redis.url").read_text().strip() if started else None
        asyncio.run(main_async(url))
    finally:
        if not given:
            subprocess.run([str(script), "stop", str(servers)], stdout=subprocess.DEVNULL)
            shutil.rmtree(servers, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
