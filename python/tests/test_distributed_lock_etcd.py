"""The distributed lock's etcd backend from Python, against a private etcd (scripts/servers.sh
start-etcd, auth on; or LIBSYNC_TEST_SERVERS names a directory with a running one's etcd.url):
acquire and release, contention between processes with fencing tokens in order, timed and try
acquires, a SIGKILLed holder whose lease frees the lock, a stopped holder that learns of its
loss when it runs again, Ctrl-C during a wait, bad targets. The bounds only guard against a
hang."""
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (assert_ctrl_c_interrupts, assert_exclusion_between_processes,
                      assert_stopped_holder_learns_of_its_loss, spawn_holder)
from libsync.distributed_lock import DistributedLock, FileLock, HoldEvent, LockLostError, NotLockedError, Timeout

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SCRIPT = ROOT / "scripts" / "servers.sh"
HANG = 60  # seconds: only against a hang
_serial = itertools.count()


@pytest.fixture(scope="module")
def etcd():
    """The etcd URL (without a lock), or a loud skip where etcd cannot be installed."""
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    if given and (Path(given) / "etcd.url").exists():
        yield (Path(given) / "etcd.url").read_text().strip()
        return
    directory = Path(tempfile.mkdtemp(prefix="libsync-etcd-py-"))
    started = subprocess.run([str(SERVERS_SCRIPT), "start-etcd", str(directory)])
    try:
        if started.returncode != 0:
            message = (f"!!!!!! SKIPPING the etcd backend: scripts/servers.sh could not install or start etcd "
                       f"(status {started.returncode}) !!!!!!")
            print("\n" + message, file=sys.stderr)
            pytest.skip(message)
        yield (directory / "etcd.url").read_text().strip()
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


@pytest.fixture
def make_target(etcd):
    def make(extra: str = "") -> str:
        return f"{etcd}?lock=py{os.getpid()}-{next(_serial)}{extra}"
    return make


def test_acquire_release_try_timeout_and_tokens(make_target):
    target = make_target()
    a, b = DistributedLock(target), DistributedLock(target)
    assert a.token is None and a.holder is None
    assert "secret" not in a.path  # never shows the password
    tokens = []
    for holder, other in [(a, b), (b, a), (a, b), (b, a)]:
        with holder:
            assert holder.is_locked and not other.is_locked
            assert not other.try_lock()
            tokens.append(holder.token)
            assert other.token is None
            assert other.holder.pid == os.getpid() and other.holder.on_this_host
    assert tokens == sorted(set(tokens))  # strictly increasing
    with a:
        with pytest.raises(Timeout) as caught:
            b.acquire(timeout=0.05)
        assert str(caught.value) == f"The distributed lock '{a.path}' could not be acquired."
        with pytest.raises(Timeout):
            b.acquire(blocking=False)
    with pytest.raises(NotLockedError):
        a.release()
    assert b.try_lock()  # the timed-out waits left nothing queued
    assert b.token > tokens[-1]
    a.break_lock()
    with pytest.raises(LockLostError):
        b.release()


def test_contention_between_processes_in_token_order(make_target, tmp_path):
    assert_exclusion_between_processes(make_target(), tmp_path / "log")


def test_a_killed_holders_lease_frees_the_lock(make_target):
    """Only tries (which never take a stale holder's lock over): the lock comes free when the
    dead holder's lease ends on the server, and the next token is larger than the dead one's."""
    target = make_target("&ttl=1")
    proc = spawn_holder(target)
    dead_token = proc.token
    proc.kill()
    proc.wait()
    lock = DistributedLock(target)
    assert lock.holder.stale
    assert not lock.try_lock()  # its lease runs yet
    deadline = time.monotonic() + HANG
    while not lock.try_lock():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert lock.token > dead_token
    lock.release()


def test_a_blocking_acquire_takes_a_dead_local_holders_lock(make_target):
    target = make_target()
    proc = spawn_holder(target)
    proc.kill()
    proc.wait()
    lock = DistributedLock(target)
    with lock.acquire(timeout=HANG):
        assert lock.is_locked


def test_a_stopped_holder_learns_of_its_loss_when_its_lease_ended(make_target):
    target = make_target("&ttl=1")
    # taken once the stopped holder's lease ran out
    assert_stopped_holder_learns_of_its_loss(target, lambda taker: taker.acquire(timeout=HANG))


def test_a_broken_hold_is_reported_lost(make_target):
    seen = []
    target = make_target("&ttl=1")
    lock = DistributedLock(target, on_event=lambda lock, event: seen.append(event))
    assert lock.try_lock()
    DistributedLock(target).break_lock()
    deadline = time.monotonic() + HANG
    while not seen:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert seen == [HoldEvent.LOST] and lock.lost
    with pytest.raises(LockLostError):
        lock.release()


def test_ctrl_c_interrupts_a_wait(make_target):
    target = make_target()
    with DistributedLock(target):
        assert_ctrl_c_interrupts(f"""
            from libsync.distributed_lock import DistributedLock
            lock = DistributedLock({target!r})
            """, "lock.acquire()")
        # the interrupted wait's queued key was withdrawn: once released, the lock is free
    other = DistributedLock(target)
    deadline = time.monotonic() + HANG
    while not other.try_lock():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    other.release()


def test_filelock_face(make_target):
    target = make_target()
    lock = FileLock(target)
    with lock:
        assert lock.is_locked
        with pytest.raises(Timeout):
            FileLock(target).acquire(timeout=0.01)
    assert not lock.is_locked


def test_bad_targets(etcd):
    with pytest.raises(ValueError, match="lock=NAME"):
        DistributedLock(etcd)
    with pytest.raises(ValueError, match="ttl"):
        DistributedLock(etcd + "?lock=x&ttl=0")
    with pytest.raises(ValueError, match="TLS"):
        DistributedLock(etcd + "?lock=x&cacert=/etc/ca.pem")
    with pytest.raises(PermissionError) as caught:
        DistributedLock(etcd.replace("secret", "wrong!") + "?lock=x")
    assert "wrong!" not in str(caught.value)
    with pytest.raises(PermissionError, match="password"):
        DistributedLock(etcd.replace("root:secret@", "") + "?lock=x")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        DistributedLock(f"etcd://127.0.0.1:{free}?lock=x")
