"""libsync.distributed_lock's ReadWriteLock and AsyncReadWriteLock (filelock 4's shapes) over the
file system's read/write lock: readers share, a writer excludes, a waiting writer stops new
readers, tokens order across both sides, errors as filelock's."""
import asyncio
import multiprocessing
import os
import threading
import time

import pytest

from conftest import assert_ctrl_c_interrupts
from libsync.distributed_lock import AsyncReadWriteLock, DistributedLock, ReadWriteLock, Timeout

fork = multiprocessing.get_context("fork")


def _until(condition, bound=30.0):
    """Waits for an observable state (the bound only guards against a hang)."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.001)


def test_readers_share_a_writer_excludes_tokens_order(tmp_path):
    path = tmp_path / "data.lock"
    a, b = ReadWriteLock(path), ReadWriteLock(path, is_singleton=False)
    w = ReadWriteLock(path, is_singleton=False)
    with a.read_lock(), b.read_lock():
        assert (a.mode, b.mode) == ("read", "read") and a.token < b.token
        with pytest.raises(Timeout):
            w.acquire_write(blocking=False)
        with pytest.raises(Timeout):
            w.acquire_write(timeout=0.01)
        last_read = b.token
    with w.write_lock():
        assert w.mode == "write" and w.token > last_read
        with pytest.raises(Timeout):
            a.acquire_read(blocking=False)
        written = w.token
    with a.acquire_read() as held:
        assert held is a and a.token > written and a.is_locked
    assert a.mode is None and a.token is None and not a.is_locked


def test_reentry_no_upgrade_no_downgrade_and_release_errors(tmp_path):
    lock = ReadWriteLock(tmp_path / "data.lock")
    with pytest.raises(RuntimeError, match="not held"):
        lock.release()
    lock.release(force=True)  # nothing held: nothing happens
    with lock.read_lock():
        with lock.read_lock():
            with pytest.raises(RuntimeError, match="upgrade"):
                lock.acquire_write()
        assert lock.mode == "read"
    with lock.write_lock():
        with pytest.raises(RuntimeError, match="downgrade"):
            lock.acquire_read()
        errors = []
        thread = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, lock.acquire_write)))
        thread.start()
        thread.join()
        assert errors and "another thread" in str(errors[0].value)
    lock.acquire_write()
    lock.acquire_write()
    lock.release(force=True)
    assert lock.mode is None


def test_singletons_and_bad_input(tmp_path):
    path = tmp_path / "data.lock"
    kept = ReadWriteLock(path)
    assert kept is ReadWriteLock(str(path)) is ReadWriteLock.get_lock(path)
    with pytest.raises(ValueError, match="cannot be changed"):
        ReadWriteLock(path, timeout=5)
    assert ReadWriteLock(path, is_singleton=False) is not kept
    with pytest.raises(ValueError, match="unsupported lock URL scheme"):
        ReadWriteLock("ftp://127.0.0.1/?lock=x")
    with pytest.raises(ValueError, match="poll_interval must be positive"):
        ReadWriteLock(tmp_path / "x", is_singleton=False, poll_interval=0)
    (tmp_path / "file").write_text("data")
    with pytest.raises(NotADirectoryError):
        ReadWriteLock(tmp_path / "file" / "x")
    lock = ReadWriteLock(tmp_path / "made" / "on" / "x.lock")  # missing parents made
    with lock.write_lock():
        pass
    lock.close()
    with pytest.raises(RuntimeError, match="has been closed"):
        lock.acquire_read()


def test_a_waiting_writer_stops_new_readers(tmp_path):
    path = tmp_path / "data.lock"
    reader = ReadWriteLock(path, is_singleton=False)
    late = ReadWriteLock(path, is_singleton=False)
    reader.acquire_read()
    writer_holds, writer_may_go = threading.Event(), threading.Event()
    tokens = {}

    def write():
        writer = ReadWriteLock(path, is_singleton=False, poll_interval=0.001)
        with writer.write_lock(timeout=60):
            tokens["write"] = writer.token
            writer_holds.set()
            writer_may_go.wait(60)

    thread = threading.Thread(target=write)
    thread.start()
    gate = DistributedLock(path)
    _until(lambda: gate.holder is not None)  # the writer's claim: it holds the gate
    with pytest.raises(Timeout):
        late.acquire_read(blocking=False)  # behind the waiting writer
    tokens["read"] = reader.token
    reader.release()
    assert writer_holds.wait(60) and tokens["write"] > tokens["read"]
    with pytest.raises(Timeout):
        late.acquire_read(blocking=False)
    writer_may_go.set()
    with late.read_lock(timeout=60):
        assert late.token > tokens["write"]
    thread.join()


def _hammer(path, seed, rounds, inside, violations):
    lock = ReadWriteLock(path, is_singleton=False, poll_interval=0.001)
    for i in range(rounds):
        write = (seed * 7 + i) % 3 == 0
        with (lock.write_lock() if write else lock.read_lock()):
            with inside.get_lock():
                if write:
                    if inside.value != 0:
                        violations.value += 1
                    inside.value = -1
                elif inside.value < 0:
                    violations.value += 1
                else:
                    inside.value += 1
            time.sleep(0.0005)
            with inside.get_lock():
                inside.value = 0 if write else inside.value - 1


def test_processes_never_overlap_a_writer(tmp_path):
    inside, violations = fork.Value("i", 0), fork.Value("i", 0)
    children = [fork.Process(target=_hammer, args=(tmp_path / "data.lock", seed, 40, inside, violations))
                for seed in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    assert violations.value == 0


def test_ctrl_c_interrupts_a_waiting_writer_and_gives_its_claim_up(tmp_path):
    path = tmp_path / "data.lock"
    reader = ReadWriteLock(path)
    reader.acquire_read()
    assert_ctrl_c_interrupts(f"""
        from libsync.distributed_lock import ReadWriteLock
        lock = ReadWriteLock({str(path)!r})
        """, "lock.acquire_write()")
    other = ReadWriteLock(path, is_singleton=False)
    with other.read_lock(blocking=False):  # no claim left behind: readers enter
        pass
    reader.release()


def test_async_read_write(tmp_path):
    path = tmp_path / "data.lock"

    async def main():
        reader = AsyncReadWriteLock(path, is_singleton=False)
        writer = AsyncReadWriteLock(path, is_singleton=False, poll_interval=0.001)
        async with reader.read_lock():
            assert reader.mode == "read"
            with pytest.raises(Timeout):
                await writer.acquire_write(blocking=False)
            waiting = asyncio.ensure_future(writer.acquire_write(timeout=60))
            ticks = 0
            gate = DistributedLock(path)
            while gate.holder is None:  # the loop keeps running while the writer waits
                ticks += 1
                await asyncio.sleep(0.001)
            assert ticks > 0 and not waiting.done()
        await waiting
        assert writer.mode == "write"
        with pytest.raises(Timeout):
            await reader.acquire_read(blocking=False)
        await writer.release()
        async with await reader.acquire_read() as held:
            assert held is reader
        # a waiting writer cancelled: its claim is given back
        async with reader.read_lock():
            task = asyncio.ensure_future(writer.acquire_write())
            while gate.holder is None:
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        probe = ReadWriteLock(path, is_singleton=False)
        for _ in range(30000):  # (the give-back runs once the slice ends; the bound guards a hang)
            try:
                probe.acquire_write(blocking=False)
                break
            except Timeout:
                await asyncio.sleep(0.001)
        assert probe.mode == "write"
        probe.release()
        owned = reader.executor  # its own worker, shut down by close()
        await reader.close()
        with pytest.raises(RuntimeError):
            owned.submit(int)
    asyncio.run(main())
