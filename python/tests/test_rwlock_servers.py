"""The shared/exclusive (read/write) lock on PostgreSQL, Redis and etcd from Python
(``ReadWriteLock`` with a URL), against private servers (scripts/servers.sh; or
LIBSYNC_TEST_SERVERS names a directory with running ones' postgres.url, redis.url, etcd.url):
readers share, a writer excludes, a waiting writer stops new readers, tokens ordered across both
sides, a SIGKILLed reader or writer recovered, timeouts, loss notification, bad input. The
bounds only guard against a hang."""
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import wait_until
from libsync.distributed_lock import HoldEvent, LockBrokenError, LockStolenError, ReadWriteLock, Timeout

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SCRIPT = ROOT / "scripts" / "servers.sh"
HANG = 60  # seconds: only against a hang
_serial = itertools.count()
FILES = {"postgres": "postgres.url", "redis": "redis.url", "etcd": "etcd.url"}


@pytest.fixture(scope="module")
def servers():
    """The directory holding the servers' URLs, or a loud skip where they cannot be had."""
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    if given and all((Path(given) / name).exists() for name in FILES.values()):
        yield Path(given)
        return
    directory = Path(tempfile.mkdtemp(prefix="libsync-rw-py-"))
    started = subprocess.run(f"'{SERVERS_SCRIPT}' start '{directory}' && '{SERVERS_SCRIPT}' start-etcd '{directory}'",
                             shell=True)
    try:
        if started.returncode != 0:
            print(f"\n!!!!!! SKIPPING the read/write lock on servers (status {started.returncode}) !!!!!!",
                  file=sys.stderr)
            pytest.skip("servers unavailable")
        yield directory
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


@pytest.fixture(params=list(FILES))
def url(request, servers):
    """A fresh lock's URL on each backend (a short lease where the backend has one)."""
    base = (servers / FILES[request.param]).read_text().strip()
    lease = "" if request.param == "postgres" else "&ttl=1"
    return f"{base}{'&' if '?' in base else '?'}lock=py-rw-{os.getpid()}-{next(_serial)}{lease}"


def make(url):
    return ReadWriteLock(url, is_singleton=False, poll_interval=0.001)


def test_readers_share_writer_excludes_tokens_ordered(url):
    a, b, w = make(url), make(url), make(url)
    a.acquire_read(blocking=False)
    b.acquire_read(timeout=HANG)
    assert a.mode == b.mode == "read"
    with pytest.raises(Timeout):
        w.acquire_write(blocking=False)
    with pytest.raises(Timeout):
        w.acquire_write(timeout=0.05)
    reads = [a.token, b.token]
    a.release()
    b.release()
    with w.write_lock(timeout=HANG):
        assert w.mode == "write"
        assert w.token > max(reads)
        written = w.token
        with pytest.raises(Timeout):
            a.acquire_read(timeout=0.05)
    with a.read_lock(timeout=HANG):
        assert a.token > written


def test_waiting_writer_stops_new_readers(url):
    first, later, probe = make(url), make(url), make(url)
    first.acquire_read()
    writer = make(url)
    got = {}

    def write():
        with writer.write_lock(timeout=HANG):
            got["writer"] = writer.token

    thread = threading.Thread(target=write)
    thread.start()
    while True:  # until the writer's wait is in place, a reader may still enter (and leaves)
        try:
            probe.acquire_read(blocking=False)
        except Timeout:
            break
        probe.release()
    for _ in range(20):
        with pytest.raises(Timeout):
            later.acquire_read(blocking=False)
    assert "writer" not in got
    held = first.token
    first.release()
    thread.join(HANG)
    assert got["writer"] > held


HOLDER = textwrap.dedent("""
    import sys, time
    from libsync.distributed_lock import ReadWriteLock
    lock = ReadWriteLock(sys.argv[1], is_singleton=False)
    (lock.acquire_read if sys.argv[2] == "read" else lock.acquire_write)(timeout=60)
    print("held", flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("kind", ["read", "write"])
def test_killed_holder_is_recovered(url, kind):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, url, kind], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    try:
        assert child.stdout.readline().strip() == "held"
        lock = make(url)
        with pytest.raises(Timeout):
            lock.acquire_write(blocking=False)
        child.send_signal(signal.SIGKILL)
        child.wait(HANG)
        other = "write" if kind == "read" else "read"
        with (lock.write_lock if other == "write" else lock.read_lock)(timeout=HANG):
            assert lock.mode == other
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("kind", ["read", "write"])
def test_loss_is_notified(url, kind):
    events = []
    holder = ReadWriteLock(url, is_singleton=False, on_event=lambda lock, event: events.append(event))
    (holder.acquire_read if kind == "read" else holder.acquire_write)(timeout=HANG)
    assert not holder.lost
    make(url).break_lock()
    wait_until(lambda: holder.lost and HoldEvent.LOST in events, "the loss", HANG)
    with pytest.raises((LockBrokenError, LockStolenError)):
        holder.release()
    assert holder.mode is None


def test_bad_input(url):
    lock, other = make(url), make(url)
    with pytest.raises(RuntimeError, match="not held"):
        lock.release()  # a release by a non-holder
    other.acquire_read()
    with pytest.raises(RuntimeError, match="not held"):
        lock.release()  # another object's share is not this one's
    with pytest.raises(RuntimeError, match="upgrade"):
        other.acquire_write(blocking=False)
    other.release()
    other.acquire_read()  # the caller waiting for the write through another object, without a timeout:
    with pytest.raises(RuntimeError, match="through another object of this process"):  # a reason, not a hang
        lock.acquire_write()
    other.release()
    other.acquire_write()
    with pytest.raises(RuntimeError, match="through another object of this process"):
        lock.acquire_read()
    other.release()
    with pytest.raises(ValueError, match="lock="):
        ReadWriteLock(url.split("?")[0], is_singleton=False)
    with pytest.raises(ValueError, match="poll_interval"):
        ReadWriteLock(url, is_singleton=False, poll_interval=0)


def test_singleton_per_url(url):
    assert ReadWriteLock(url) is ReadWriteLock(url)


def test_shown_without_password(url):
    lock = make(url)
    assert "secret" not in lock.lock_file and "secret" not in repr(lock)
    lock.acquire_write()
    with pytest.raises(Timeout) as raised:
        make(url).acquire_read(blocking=False)
    assert "secret" not in str(raised.value)
    lock.release()


def test_file_lock_has_no_detector(tmp_path):
    with pytest.raises(ValueError, match="server"):
        ReadWriteLock(tmp_path / "lock", is_singleton=False, on_event=lambda lock, event: None)
    assert not ReadWriteLock(tmp_path / "lock2", is_singleton=False).lost
