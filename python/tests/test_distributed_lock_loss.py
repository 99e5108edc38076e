"""A holder learns that its hold was lost without asking (``on_event``, ``lost``), on every
backend, through real faults: the file system's lock broken by another process while the holder
is stopped, PostgreSQL's session terminated or its server restarted, Redis's key deleted, its
lease run out while the holder was stopped, its server stopped (suspended) and resumed. A hold
released normally is never reported lost. The bounds only guard against a hang."""
import queue
import time

import pytest

from conftest import assert_stopped_holder_learns_of_its_loss
from libsync.distributed_lock import DistributedLock, FileLock, HoldEvent, LockLostError

from test_distributed_lock_backends import backend, control, make_target, servers  # noqa: F401 (fixtures)

HANG = 60  # seconds: only against a hang


def recorder():
    """An on_event handler putting (lock, event) on a queue, and the queue."""
    events = queue.Queue()
    return (lambda lock, event: events.put((lock, event))), events


def test_a_broken_hold_is_reported_lost_once(make_target):
    on_event, events = recorder()
    target = make_target()
    lock, other = DistributedLock(target, on_event=on_event), DistributedLock(target)
    assert lock.try_lock()
    assert not lock.lost and not lock.suspended
    other.break_lock()  # file: removes the entry; PostgreSQL: ends the session; Redis: DEL
    got, event = events.get(timeout=HANG)
    assert got is lock and event is HoldEvent.LOST
    assert lock.lost
    with pytest.raises(LockLostError):
        lock.release()
    assert lock.lost  # (the latest hold's state: until the next acquire)
    assert events.empty()  # once per acquisition: the release's loss is the one reported
    assert lock.try_lock()
    assert not lock.lost
    lock.release()
    assert not lock.lost


def test_a_normal_release_is_never_reported(make_target):
    on_event, events = recorder()
    extra = "&ttl=0.3" if make_target.backend == "redis" else ""
    lock = DistributedLock(make_target(extra), on_event=on_event)
    for _ in range(3):
        with lock:
            time.sleep(0.6)  # past the file watcher's look (250 ms) and Redis's renewals (every 0.1 s)
        for _ in range(50):
            with lock:
                pass
    assert not lock.lost
    # An event would come on the notifier thread after the fact: ask the detectors once more.
    time.sleep(0.6)
    assert events.empty()


@pytest.mark.parametrize("backend", ["file", "redis"], indirect=True)
def test_a_stopped_holder_learns_of_its_loss_when_it_runs_again(make_target):
    """File: another process breaks the stopped holder's lock and takes it. Redis: the stopped
    holder's lease runs out and another process takes the lock."""
    extra = "&ttl=0.3" if make_target.backend == "redis" else ""
    target = make_target(extra)

    def take(taker):
        if make_target.backend == "file":
            taker.break_lock()
        taker.acquire(timeout=HANG)
    assert_stopped_holder_learns_of_its_loss(target, take)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_session_ended_by_a_restart_is_reported(make_target, servers):  # noqa: F811
    on_event, events = recorder()
    lock = DistributedLock(make_target(), on_event=on_event)
    assert lock.try_lock()
    control(servers, "restart", "postgres")
    got, event = events.get(timeout=HANG)
    assert event is HoldEvent.LOST and lock.lost
    with pytest.raises(LockLostError):
        lock.release()


@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_redis_server_stopped_is_suspended_then_resumed(make_target, servers):  # noqa: F811
    on_event, events = recorder()
    # connect_timeout below the ttl: renewals give up on the stopped server while the lease lives.
    lock = DistributedLock(make_target("&ttl=3&connect_timeout=0.2"), on_event=on_event)
    assert lock.try_lock()
    control(servers, "pause", "redis")
    try:
        _, event = events.get(timeout=HANG)
        assert event is HoldEvent.SUSPENDED and lock.suspended and not lock.lost
    finally:
        control(servers, "resume", "redis")
    _, event = events.get(timeout=HANG)
    # The lease outlived the pause (3 s) unless the machine stalled: then the renewal says lost.
    assert event in (HoldEvent.RESUMED, HoldEvent.LOST)
    if event is HoldEvent.RESUMED:
        assert not lock.suspended and not lock.lost
        lock.release()


def test_filelock_interface_reports_too(make_target):
    on_event, events = recorder()
    target = make_target()
    lock = FileLock(target, on_event=on_event)
    assert not lock.lost
    with pytest.raises(LockLostError):
        with lock:
            DistributedLock(target).break_lock()
            got, event = events.get(timeout=HANG)
            assert got is lock and event is HoldEvent.LOST and lock.lost


def test_handler_may_call_the_lock_and_be_replaced(make_target):
    """The handler runs with no lock of libsync held: it may ask the lock (is_locked makes a
    round trip) and release a process-owned hold."""
    target = make_target()
    seen = queue.Queue()

    def on_event(lock, event):
        seen.put((event, lock.is_locked, lock.lost))
        try:
            lock.release(force=True)
        except LockLostError as error:
            seen.put(type(error).__name__)

    lock = FileLock(target, thread_local=False, on_event=on_event)
    lock.acquire()
    DistributedLock(target).break_lock()
    assert seen.get(timeout=HANG) == (HoldEvent.LOST, False, True)
    assert seen.get(timeout=HANG) == "LockBrokenError"
    assert lock.lock_counter == 0


def test_on_event_must_be_callable(tmp_path):
    with pytest.raises(TypeError):
        DistributedLock(str(tmp_path / "x"), on_event=42)
