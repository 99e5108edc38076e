"""Python asyncio: libsync's Lock and Mutex awaited from tasks (docs/async.md) beside the peers a
user would pick, measured in the same run, the rows taking turns:
  uncontended  `async with` in one task, against asyncio.Lock (goal: at most 1.0x), in the
               thread's CPU time;
  handoff      one task releases, the task waiting for the lock in the same loop runs holding
               it: the time between (goal: at most 1.5x asyncio.Lock's);
  notify       a task notifies a Condition and releases its lock, the task waiting on it in the
               same loop runs holding the lock: the time between, against asyncio.Condition;
  processes    another process releases, the task waiting in this one runs holding it (goal:
               100 µs at the median), against filelock's AsyncFileLock (polls) and redis-py's
               asyncio Lock (polls; a private server from scripts/servers.sh, or
               $LIBSYNC_TEST_SERVERS's).
Each row: its median and spread (10th...90th percentile). Not a test: run on a quiet machine."""
import asyncio
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import shared_memory
from pathlib import Path

from harness import QUICK, _emit

from libsync import _aio
from libsync.conditions import Condition
from libsync.locks import Lock, Mutex

ROOT = Path(__file__).resolve().parents[2]
clock = time.perf_counter_ns


def report(title, rows, unit="ns"):
    """rows: (name, samples in ns); prints median, spread, ratio to the first row."""
    base = statistics.median(rows[0][1])
    scale = 1e3 if unit == "µs" else 1
    print(f"\n{title} — median (spread: 10th...90th percentile) of n samples, the rows in turns")
    print(f"  {'':52} {unit + '/op':>10} {'spread':>19} {'ratio':>7} {'n':>6}")
    for name, times in rows:
        times = sorted(times)
        median = statistics.median(times)
        low, high = times[len(times) // 10] / scale, times[len(times) * 9 // 10] / scale
        print(f"  {name:52} {median / scale:10.1f} {low:9.1f}...{high:<9.1f} {median / base:6.2f}x {len(times):6}")
        _emit(title, 1, name, median, median / base, name == rows[0][0])


# ---- uncontended ------------------------------------------------------------------------------

BLOCK = 1000


async def uncontended_block(lock, n):
    # The thread's CPU time, as the Swift and C harnesses time one thread: on a shared machine a
    # block of wall time also holds whatever ran instead of this process (nothing here waits).
    start = time.thread_time_ns()
    for _ in range(n):
        async with lock:
            pass
    return (time.thread_time_ns() - start) / n


async def uncontended():
    rows = [("asyncio.Lock (peer)", asyncio.Lock()), ("libsync Lock", Lock()), ("libsync Mutex", Mutex())]
    samples = [[] for _ in rows]
    for _ in range(20 if QUICK else 200):
        for (_, lock), times in zip(rows, samples):
            times.append(await uncontended_block(lock, BLOCK // (10 if QUICK else 1)))
    report("asyncio: uncontended `async with` (one task)", [(name, times) for (name, _), times in zip(rows, samples)])


# ---- handoff between tasks of one loop -------------------------------------------------------

def queued(lock):
    """Whether a task waits for `lock` (asyncio.Lock's own queue, or libsync's pending acquires)."""
    if lock is not None and isinstance(lock, asyncio.Lock):
        return bool(lock._waiters)
    waits = _aio._loops.get(id(asyncio.get_running_loop()))
    return bool(waits and waits.pending)


async def handoff_once(lock):
    got = []

    async def waiter():
        async with lock:
            got.append(clock())

    await lock.acquire() if isinstance(lock, asyncio.Lock) else await lock.acquire_async()
    task = asyncio.create_task(waiter())
    while not queued(lock):
        await asyncio.sleep(0)
    start = clock()
    lock.release()
    await task
    return got[0] - start


async def handoff():
    rows = [("asyncio.Lock (peer)", asyncio.Lock()), ("libsync Lock", Lock()), ("libsync Mutex", Mutex())]
    samples = [[] for _ in rows]
    for _ in range(100 if QUICK else 2000):
        for (_, lock), times in zip(rows, samples):
            times.append(await handoff_once(lock))
    report("asyncio: handoff to a waiting task of the same loop (release -> the waiter runs holding it)",
           [(name, times) for (name, _), times in zip(rows, samples)], unit="µs")


# ---- condition: notify, then the waiting task runs holding the lock ---------------------------

async def notify_once(cond):
    got = []
    peer = isinstance(cond, asyncio.Condition)

    async def waiter():
        async with cond:
            await (cond.wait() if peer else cond.wait_async())
            got.append(clock())

    task = asyncio.create_task(waiter())
    while not (cond._waiters if peer else queued(None)):
        await asyncio.sleep(0)
    async with cond:
        start = clock()
        cond.notify()
    await task
    return got[0] - start


async def notify():
    rows = [("asyncio.Condition (peer)", asyncio.Condition()), ("libsync Condition(Lock())", Condition(Lock())),
            ("libsync Condition(Mutex())", Condition(Mutex()))]
    samples = [[] for _ in rows]
    for _ in range(100 if QUICK else 2000):
        for (_, cond), times in zip(rows, samples):
            times.append(await notify_once(cond))
    report("asyncio: notify to a task waiting on a Condition of the same loop (notify, release -> the waiter runs "
           "holding the lock)", [(name, times) for (name, _), times in zip(rows, samples)], unit="µs")


# ---- across processes ------------------------------------------------------------------------
# The child (this file, `child KIND ARG`, exec'd) holds the lock when told, releases it when told
# and reports the CLOCK_MONOTONIC time of its release; the parent's task, waiting meanwhile,
# notes the time it runs holding the lock.

def child(kind, arg):
    if kind == "libsync":
        memory = shared_memory.SharedMemory(name=arg)
        from multiprocessing import resource_tracker  # the parent's to unlink, not this process's
        resource_tracker.unregister(memory._name, "shared_memory")
        lock = Mutex(buffer=memory, initialize=False)
    elif kind == "filelock":
        import filelock
        lock = filelock.FileLock(arg)
    else:
        import redis
        client = redis.Redis.from_url(arg)
        lock = client.lock("libsync-bench-aio")
    for line in sys.stdin:
        if line.strip() == "hold":
            lock.acquire()
            print("held", flush=True)
        elif line.strip() == "release":
            released = time.monotonic_ns()
            lock.release()
            print(released, flush=True)
    if kind == "libsync":
        del lock
        memory.close()


async def cross_once(proc, acquire, release, settle):
    proc.stdin.write("hold\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "held"
    got = []

    async def waiter():
        await acquire()
        got.append(time.monotonic_ns())
        await release()

    task = asyncio.create_task(waiter())
    await settle()
    proc.stdin.write("release\n")
    proc.stdin.flush()
    released = int(await asyncio.to_thread(proc.stdout.readline))
    await task
    return got[0] - released


def spawn(kind, arg):
    return subprocess.Popen([sys.executable, __file__, "child", kind, arg], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=os.environ)


async def across_processes(redis_url):
    rows = []
    samples = 50 if QUICK else 300
    memory = shared_memory.SharedMemory(create=True, size=64)
    directory = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR", "/tmp"))
    procs = []
    try:
        mutex = Mutex(buffer=memory, initialize=True)

        async def libsync_settle():
            while not queued(mutex):
                await asyncio.sleep(0)

        async def libsync_release():
            mutex.release()

        procs.append(spawn("libsync", memory.name))
        rows.append(("libsync Mutex (shared memory)", procs[-1], mutex.acquire_async, libsync_release, libsync_settle))

        async def settle_a_while():  # a polling peer: let it enter its wait
            await asyncio.sleep(0.002)

        try:
            import filelock
            path = os.path.join(directory, "peer.lock")
            peer = filelock.AsyncFileLock(path)
            procs.append(spawn("filelock", path))
            rows.append(("filelock.AsyncFileLock (peer, polls)", procs[-1], peer.acquire, peer.release, settle_a_while))
        except ImportError:
            print("(filelock is not installed: pip install filelock)")
        if redis_url:
            try:
                import redis.asyncio
                client = redis.asyncio.Redis.from_url(redis_url)
                redis_lock = client.lock("libsync-bench-aio")
                procs.append(spawn("redis", redis_url))
                rows.append(("redis-py asyncio Lock (peer, polls)", procs[-1], redis_lock.acquire, redis_lock.release,
                             settle_a_while))
            except ImportError:
                print("(redis is not installed: pip install redis)")
        times = [[] for _ in rows]
        peer_samples = max(10, samples // 10)
        for i in range(samples):
            for (name, proc, acquire, release, settle), out in zip(rows, times):
                if i < peer_samples or name.startswith("libsync"):
                    out.append(await cross_once(proc, acquire, release, settle))
        # the polling peers' samples are fewer (each costs its polling interval): the first
        # peer_samples libsync samples, taken in turns with them, stand beside them
        report("asyncio: wake-up across processes (another process releases -> the waiting task runs holding it)",
               [(rows[0][0], times[0])] + [(row[0], out) for row, out in zip(rows[1:], times[1:])], unit="µs")
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(60)
        rows.clear()
        mutex = libsync_settle = libsync_release = None
        gc.collect()
        memory.close()
        memory.unlink()
        shutil.rmtree(directory, ignore_errors=True)


def main():
    asyncio.run(uncontended())
    asyncio.run(handoff())
    asyncio.run(notify())
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    servers = Path(given) if given else Path(tempfile.mkdtemp(prefix="libsync-bench-servers-"))
    script = ROOT / "scripts" / "servers.sh"
    started = bool(given) or subprocess.run([str(script), "start-redis", str(servers)],
                                            stdout=subprocess.DEVNULL).returncode == 0
    if not started:
        print("(no Redis server: scripts/servers.sh could not start one)")
    try:
        url = (servers / "redis.url").read_text().strip() if started else None
        asyncio.run(across_processes(url))
    finally:
        if not given:
            subprocess.run([str(script), "stop", str(servers)], stdout=subprocess.DEVNULL)
            shutil.rmtree(servers, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
