"""filelock 4's SoftFileLease / AsyncSoftFileLease (on_compromise mapped onto libsync's loss
notification) and SoftReadWriteLock / AsyncSoftReadWriteLock (ReadWriteLock's lock) in
libsync.distributed_lock."""
import asyncio
import threading
import time

import pytest

from libsync.distributed_lock import (AsyncSoftFileLease, AsyncSoftReadWriteLock, DistributedLock, LeaseCompromise,
                                      LockBrokenError, LockStolenError, SoftFileLease, SoftReadWriteLock, Timeout)


def _wait(event: threading.Event) -> None:
    assert event.wait(60), "never told"  # (the bound only guards against a hang)


@pytest.mark.parametrize("taken", [False, True])
def test_on_compromise_is_told_when_the_hold_is_lost(tmp_path, taken):
    path = tmp_path / "a.lock"
    told, seen = threading.Event(), []

    def on_compromise(compromise):
        seen.append(compromise)
        told.set()

    lease = SoftFileLease(path, lease_duration=6, on_compromise=on_compromise)
    assert (lease.lease_duration, lease.heartbeat_interval, lease.compromise) == (6.0, 2.0, None)
    with pytest.raises(LockStolenError if taken else LockBrokenError):
        with lease:
            token = lease.token
            other = DistributedLock(path)
            other.break_lock()
            if taken:
                assert other.try_lock()
            _wait(told)
    [compromise] = seen
    assert compromise == LeaseCompromise(str(path), str(token), "owner-changed" if taken else "marker-missing")
    assert lease.compromise == compromise  # kept after the release...
    if taken:
        other.release()
    with lease:
        assert lease.compromise is None  # ...until the next acquisition


def test_settings_checked_as_filelock_checks_them(tmp_path):
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="lease_duration"):
            SoftFileLease(tmp_path / "a", lease_duration=bad)
    with pytest.raises(ValueError, match="heartbeat_interval"):
        SoftFileLease(tmp_path / "a", lease_duration=3, heartbeat_interval=3)
    with pytest.raises(TypeError, match="on_compromise"):
        SoftFileLease(tmp_path / "a", on_compromise=42)
    with pytest.raises(ValueError, match="on_compromise is not supported"):
        SoftReadWriteLock(tmp_path / "b", on_compromise=print)
    with pytest.raises(ValueError, match="stale_threshold must exceed"):
        SoftReadWriteLock(tmp_path / "b", heartbeat_interval=5, stale_threshold=1)
    soft = SoftReadWriteLock(tmp_path / "b", heartbeat_interval=12, poll_interval=0.5, is_singleton=False)
    assert (soft.heartbeat_interval, soft.stale_threshold, soft.poll_interval) == (12, 36, 0.5)


def test_soft_read_write_lock_is_the_read_write_lock(tmp_path):
    path = tmp_path / "a.lock"
    a, b = SoftReadWriteLock(path), SoftReadWriteLock(path, is_singleton=False)
    with a.read_lock(), b.read_lock():
        with pytest.raises(Timeout):
            SoftReadWriteLock(path, is_singleton=False).acquire_write(blocking=False)

    async def main():
        lock = AsyncSoftReadWriteLock(tmp_path / "c.lock")
        assert lock.executor is None  # the loop's default executor, as filelock's
        async with lock.write_lock():
            assert lock.mode == "write"
        told = asyncio.Event()
        loop = asyncio.get_running_loop()
        lease = AsyncSoftFileLease(tmp_path / "d.lock", on_compromise=lambda c: loop.call_soon_threadsafe(told.set))
        async with lease:
            DistributedLock(tmp_path / "d.lock").break_lock()
            await asyncio.wait_for(told.wait(), 60)
            assert lease.compromise.reason == "marker-missing"
            with pytest.raises(LockBrokenError):
                await lease.release()
    asyncio.run(main())
