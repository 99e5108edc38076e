"""The distributed lock from asyncio (DistributedLock.acquire_async, ``async with``; AsyncFileLock),
on every backend: the file system, and private PostgreSQL, Redis and etcd servers
(scripts/servers.sh starts them, or LIBSYNC_TEST_SERVERS names running ones). Tasks, threads and
processes exclude one another; timeouts; cancellation (task.cancel, asyncio.timeout) never leaves
the lock held, also when a grant races it; the task is the holder; a lost hold is reported as
before; a file lock's waiter is woken by the release, not by polling. No test asserts a time:
HANG bounds only guard against a hang."""
import asyncio
import itertools
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from libsync.distributed_lock import (AsyncFileLock, AsyncSoftFileLock, DistributedLock, FileLock, HoldEvent,
                                      LockBrokenError, NotLockedError, Timeout)

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SCRIPT = ROOT / "scripts" / "servers.sh"
HANG = 60  # seconds: only against a hang
_serial = itertools.count()


@pytest.fixture(scope="module")
def servers():
    """The servers' directory (postgres.url, redis.url, etcd.url), or None where they could not be had."""
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    if given:
        yield Path(given)
        return
    directory = Path(tempfile.mkdtemp(prefix="libsync-servers-py-"))
    subprocess.run([str(SERVERS_SCRIPT), "start", str(directory)])
    subprocess.run([str(SERVERS_SCRIPT), "start-etcd", str(directory)])
    try:
        yield directory
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


@pytest.fixture(params=["file", "postgres", "redis", "etcd"])
def target(request, tmp_path):
    """A fresh lock target of the backend."""
    n = next(_serial)
    if request.param == "file":
        return str(tmp_path / f"lock{n}")
    url = request.getfixturevalue("servers") / f"{request.param}.url"
    if not url.exists():
        message = f"!!!!!! SKIPPING {request.param}: its server could not be installed or started !!!!!!"
        print("\n" + message, file=sys.stderr)
        pytest.skip(message)
    return f"{url.read_text().strip()}?lock=pyasync{os.getpid()}-{n}"


def take(lock):
    """In a thread: the lock is free for it (a hang guard aside): acquire, release."""
    lock.acquire(HANG)
    lock.release()


def run(coroutine):
    async def bounded():
        async with asyncio.timeout(HANG):
            return await coroutine
    return asyncio.run(bounded())


def test_tasks_threads_and_another_object_exclude_one_another(target):
    lock, other = DistributedLock(target, poll_interval=0.002), DistributedLock(target, poll_interval=0.002)
    inside, entries, tokens = [0], [0], []
    stop = threading.Event()

    def enter(token):
        inside[0] += 1
        assert inside[0] == 1
        entries[0] += 1
        tokens.append(token)

    def thread():  # another object, blocking form
        for _ in range(5):
            with other:
                enter(other.token)
                inside[0] -= 1

    async def task():
        for _ in range(5):
            async with lock:
                assert lock.is_locked
                enter(lock.token)
                await asyncio.sleep(0)  # held across an await
                inside[0] -= 1

    async def main():
        worker = threading.Thread(target=thread)
        worker.start()
        await asyncio.gather(*(task() for _ in range(4)))
        await asyncio.to_thread(worker.join)

    run(main())
    stop.set()
    assert entries[0] == 25
    assert tokens == sorted(tokens) and len(set(tokens)) == 25  # fencing tokens in the order of holds
    assert other.try_lock()
    other.release()


def test_timeout_and_one_try(target):
    lock, other = DistributedLock(target), DistributedLock(target)

    async def main():
        with pytest.raises(Timeout):
            await lock.acquire_async(timeout=0.05, poll_interval=0.005)
        with pytest.raises(Timeout):
            await lock.acquire_async(blocking=False)
        with pytest.raises(Timeout):
            await lock.acquire_async(timeout=0)
        assert not lock.is_locked
        with pytest.raises(ValueError):
            await lock.acquire_async(timeout=float("nan"))
        with pytest.raises(ValueError):
            await lock.acquire_async(poll_interval=0)

    other.acquire()
    run(main())
    other.release()


def test_the_task_is_the_holder(target):
    lock = DistributedLock(target)

    async def main():
        await lock.acquire_async()
        with pytest.raises(RuntimeError):  # the same task again (not recursive): never waits
            await lock.acquire_async()

        async def stranger():
            assert not lock.is_locked and lock.token is None
            with pytest.raises(NotLockedError):
                lock.release()
        await asyncio.create_task(stranger())
        with pytest.raises(NotLockedError):
            await asyncio.to_thread(lock.release)
        assert lock.is_locked and lock.token is not None
        lock.release()
        assert not lock.is_locked
        async with await lock.acquire_async(timeout=1):  # acquire()'s shape: its result releases
            assert lock.is_locked
        assert not lock.is_locked

    run(main())


def test_cancellation_withdraws_and_never_leaks(target):
    lock, other, third = DistributedLock(target), DistributedLock(target), DistributedLock(target)

    async def main():
        other.acquire()
        waiter = asyncio.create_task(lock.acquire_async(poll_interval=0.002))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await lock.acquire_async(poll_interval=0.002)
        other.release()
        # Nobody holds it for the withdrawn waits.
        await asyncio.to_thread(take, third)

    run(main())


def test_a_grant_racing_a_cancellation_is_released(target):
    lock, other = DistributedLock(target, poll_interval=0.001), DistributedLock(target, poll_interval=0.001)
    rounds = 60 if target.startswith("/") else 20

    async def take_and_release():
        await lock.acquire_async()
        lock.release()  # (no await in between: a cancellation lands in the acquire or not at all)

    async def main():
        granted = cancelled = 0
        for round in range(rounds):
            other.acquire(timeout=HANG)
            waiter = asyncio.create_task(take_and_release())
            await asyncio.sleep(0)  # the acquire is pending
            other.release()
            for _ in range(round % 4):
                await asyncio.sleep(0)  # vary where the cancellation lands
            waiter.cancel()
            try:
                await waiter
                granted += 1  # granted before the cancellation: it held and released it
            except asyncio.CancelledError:
                cancelled += 1
            # The lock was not left held for a cancelled waiter: another object takes it.
            await asyncio.to_thread(take, other)
        assert granted + cancelled == rounds

    run(main())


def test_a_release_in_another_process_wakes_the_waiter(tmp_path):
    """File system: the waiter polls every hour, so only the release (inotify) can wake it
    before the hang guard."""
    path = str(tmp_path / "lock")
    ctx = multiprocessing.get_context("fork")
    held, go = ctx.Event(), ctx.Event()

    def holder():
        lock = DistributedLock(path)
        lock.acquire()
        held.set()
        go.wait(HANG)
        lock.release()

    child = ctx.Process(target=holder)
    child.start()
    assert held.wait(HANG)
    lock = DistributedLock(path)

    async def wait_for_it():
        await lock.acquire_async(poll_interval=3600)
        assert lock.is_locked
        lock.release()

    async def main():
        waiter = asyncio.create_task(wait_for_it())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        go.set()
        await waiter

    run(main())
    child.join(HANG)
    assert child.exitcode == 0


def test_a_lost_hold_is_reported(tmp_path):
    events = []
    lost = threading.Event()

    def on_event(lock, event):
        events.append(event)
        if event == HoldEvent.LOST:
            lost.set()

    path = str(tmp_path / "lock")
    lock, breaker = DistributedLock(path, on_event=on_event), DistributedLock(path)

    async def main():
        await lock.acquire_async()
        breaker.break_lock()
        assert await asyncio.to_thread(lost.wait, HANG)
        assert lock.lost
        with pytest.raises(LockBrokenError):
            lock.release()

    run(main())
    assert HoldEvent.LOST in events


@pytest.mark.parametrize("cls", [AsyncFileLock, AsyncSoftFileLock])
@pytest.mark.parametrize("thread_local", [False, True])
def test_async_file_lock_is_woken_by_the_release_not_by_polling(cls, thread_local, tmp_path):
    """Two objects in one process (other tasks) and a blocking holder in another process: each
    waiter polls every hour, so only releases can wake them before the hang guard."""
    path = tmp_path / "a.lock"
    ctx = multiprocessing.get_context("fork")
    held, go = ctx.Event(), ctx.Event()

    def holder():
        from libsync.distributed_lock import FileLock
        lock = FileLock(path)
        lock.acquire()
        held.set()
        go.wait(HANG)
        lock.release()

    child = ctx.Process(target=holder)
    child.start()
    assert held.wait(HANG)
    options = {"thread_local": thread_local, "poll_interval": 3600}
    if thread_local:
        options["run_in_executor"] = False
    order = []

    async def worker(i):
        lock = cls(path, **options)
        async with lock:
            assert lock.is_locked and lock.lock_counter == 1
            order.append(i)
            await asyncio.sleep(0)
            order.append(i)

    async def main():
        workers = [asyncio.create_task(worker(i)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert not any(w.done() for w in workers)
        go.set()
        await asyncio.gather(*workers)

    run(main())
    child.join(HANG)
    assert child.exitcode == 0
    assert sorted(order) == [0, 0, 1, 1, 2, 2] and all(order[k] == order[k + 1] for k in range(0, 6, 2))


def test_async_file_lock_cancellation_and_timeout(tmp_path):
    path = tmp_path / "a.lock"
    holder, lock = FileLock(path, thread_local=False), AsyncFileLock(path, poll_interval=3600)

    async def main():
        holder.acquire()  # (another object of the process: the waits below wait for it)
        with pytest.raises(Timeout):
            await lock.acquire(timeout=0.02)
        with pytest.raises(Timeout):
            await lock.acquire(blocking=False)
        calls = []
        with pytest.raises(Timeout):
            await lock.acquire(poll_interval=0.005, cancel_check=lambda: calls.append(1) or len(calls) > 2)
        assert len(calls) == 3
        waiter = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        holder.release()
        assert not lock.is_locked
        async with lock:  # free: the cancelled wait holds nothing
            assert lock.is_locked
        assert not lock.is_locked

    run(main())
