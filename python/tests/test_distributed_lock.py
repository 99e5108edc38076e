"""The distributed lock from Python, between PROCESSES: mutual exclusion and progress, try_lock
busy, each release error, SIGKILLed holders recovered, racing breakers, bad paths, Ctrl-C."""
import errno
import multiprocessing
import os
import signal
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from libsync.distributed_lock import (DistributedLock, Holder, LockBrokenError, LockStolenError,
                                      NotLockedError, Timeout)

fork = multiprocessing.get_context("fork")


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "resource.lock")


def _hold(path, ready, stop):
    lock = DistributedLock(path)
    ready.put(lock.try_lock())
    stop.wait()


@pytest.fixture
def other_process(path):
    """Runs a process that takes the lock and holds it until told (or killed)."""
    started = []

    def start():
        ready, stop = fork.Queue(), fork.Event()
        process = fork.Process(target=_hold, args=(path, ready, stop))
        process.start()
        assert ready.get(timeout=30) is True
        started.append((process, stop))
        return process

    yield start
    for process, stop in started:
        if process.exitcode is None:  # (an Event's set() waits for a killed waiter forever)
            stop.set()
            process.join(30)


def test_try_lock_holder_and_release(path):
    a, b = DistributedLock(path), DistributedLock(path)
    assert a.holder is None and a.lock_date is None and not a.is_locked
    before = datetime.now(timezone.utc)
    assert a.try_lock() is True
    assert b.try_lock() is False
    assert a.is_locked and not b.is_locked
    holder = b.holder
    assert isinstance(holder, Holder)
    assert holder.pid == os.getpid() and holder.host == os.uname().nodename
    assert holder.on_this_host and not holder.stale and holder.process_start > 0
    assert before - timedelta(seconds=1) <= holder.acquired <= before + timedelta(seconds=60)
    assert b.lock_date == holder.acquired
    with pytest.raises(RuntimeError, match="not recursive"):
        a.try_lock()
    assert b.recover() is False  # a live holder is not stale
    a.release()
    assert a.holder is None and os.listdir(path) == []  # released: an empty directory
    assert a.path == path and a.lock_file == path


def test_context_manager_and_acquire(path):
    lock = DistributedLock(path, timeout=5)
    with lock as entered:
        assert entered is lock and lock.is_locked
    assert not lock.is_locked
    with lock.acquire(timeout=1) as entered:
        assert entered is lock and lock.is_locked
    assert not lock.is_locked
    lock.acquire(blocking=False)
    lock.unlock()
    with pytest.raises(ValueError):
        lock.acquire(poll_interval=0)
    with pytest.raises(TypeError):
        lock.acquire(timeout="soon")


def test_release_errors(path):
    a, b = DistributedLock(path), DistributedLock(path)
    with pytest.raises(NotLockedError):
        a.release()
    a.try_lock()
    with pytest.raises(NotLockedError):
        b.release()
    b.break_lock()                     # broken meanwhile, free now
    assert not a.is_locked
    with pytest.raises(LockBrokenError) as broken:
        a.release()
    assert type(broken.value) is LockBrokenError
    with pytest.raises(NotLockedError):
        a.release()
    a.try_lock()
    b.break_lock()
    assert b.try_lock()                # broken meanwhile, and someone else holds it now
    with pytest.raises(LockStolenError):
        a.release()
    b.release()


def test_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        DistributedLock(tmp_path / "missing" / "lock")
    (tmp_path / "file").write_text("data")
    with pytest.raises(FileExistsError):
        DistributedLock(tmp_path / "file")                 # the path is an existing file
    with pytest.raises(NotADirectoryError):
        DistributedLock(tmp_path / "file" / "lock")        # the parent is a file
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "data.txt").write_text("data")
    with pytest.raises(FileExistsError):
        DistributedLock(tmp_path / "foreign")              # a directory with other content
    for bad in ("", "/"):
        with pytest.raises(ValueError):
            DistributedLock(bad)
    with pytest.raises(TypeError):
        DistributedLock(42)


def _create_as_nobody(path, result):
    if os.getuid() == 0:
        os.setuid(65534)
    try:
        DistributedLock(path)
        result.put("created")
    except PermissionError:
        result.put("PermissionError")


def test_parent_not_writable(tmp_path):
    # Root may write anywhere: the child drops to nobody; the directory is root's, mode 0755.
    tmp_path.chmod(0o755)
    (tmp_path / "private").mkdir(mode=0o755)
    result = fork.Queue()
    child = fork.Process(target=_create_as_nobody, args=(str(tmp_path / "private" / "lock"), result))
    child.start()
    assert result.get(timeout=30) == "PermissionError"
    child.join(30)


def test_busy_without_blocking_and_timeout(path, other_process):
    holder = other_process()
    lock = DistributedLock(path)
    start = time.monotonic()
    assert lock.try_lock() is False
    with pytest.raises(Timeout) as timeout:
        lock.acquire(blocking=False)
    assert time.monotonic() - start < 5
    assert isinstance(timeout.value, TimeoutError) and timeout.value.lock_file == path
    assert lock.holder.pid == holder.pid and not lock.holder.stale
    start = time.monotonic()
    with pytest.raises(Timeout):
        with DistributedLock(path, timeout=0.1, poll_interval=0.01):
            pass
    assert 0.099 <= time.monotonic() - start < 5


def test_ctrl_c_interrupts_a_wait(path, other_process):
    other_process()
    lock = DistributedLock(path, poll_interval=10)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert time.monotonic() - start < 5
    timer.join()


def test_killed_holder_is_stale_and_recovered(path, other_process):
    holder = other_process()
    lock = DistributedLock(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    assert lock.holder.pid == holder.pid and lock.holder.stale
    assert lock.try_lock() is False    # try_lock never breaks a lock
    assert lock.recover() is True      # recover takes it over
    assert lock.is_locked and lock.holder.pid == os.getpid()
    lock.release()
    assert lock.recover() is False     # free: nothing to recover

    holder = other_process()
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    with DistributedLock(path, timeout=10, poll_interval=0.001) as recovered:  # by itself
        assert recovered.holder.pid == os.getpid()


def _recover(path, barrier, results, done):
    lock = DistributedLock(path)
    barrier.wait()
    results.put((os.getpid(), lock.recover()))
    done.wait()  # stay alive (else the loser may rightly see the winner dead and recover again)
    if lock.is_locked:
        os._exit(0)  # die holding it: the next round's stale lock


def test_racing_breakers_exactly_one_wins(path, other_process):
    holder = other_process()
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    for _ in range(30):
        barrier, results, done = fork.Barrier(2), fork.Queue(), fork.Event()
        breakers = [fork.Process(target=_recover, args=(path, barrier, results, done)) for _ in range(2)]
        for b in breakers:
            b.start()
        outcome = dict(results.get(timeout=30) for _ in breakers)
        assert sorted(outcome.values()) == [False, True]
        winner = next(pid for pid, won in outcome.items() if won)
        assert DistributedLock(path).holder.pid == winner  # the loser sees it held
        done.set()
        for b in breakers:
            b.join(30)
    assert DistributedLock(path).holder.stale


def _worker(path, log_path, worker, rounds):
    lock = DistributedLock(path, timeout=60, poll_interval=0.0005)
    for r in range(rounds):
        if r % 5 == 4:  # a child takes the lock and dies holding it: others must recover it
            doomed = os.fork()
            if doomed == 0:
                mine = DistributedLock(path, timeout=60, poll_interval=0.0005)
                mine.acquire()
                with open(log_path, "a") as log:
                    log.write(f"E{worker}\nA{worker}\n")
                os._exit(0)
            os.waitpid(doomed, 0)
            continue
        with lock:
            with open(log_path, "a") as log:
                log.write(f"E{worker}\n")
                log.flush()
                time.sleep(0)
                log.write(f"X{worker}\n")


def test_mutual_exclusion_between_processes(path, tmp_path):
    log_path = str(tmp_path / "log")
    workers, rounds = 4, 25
    processes = [fork.Process(target=_worker, args=(path, log_path, w, rounds)) for w in range(workers)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
        assert p.exitcode == 0
    holder, entries, abandoned = None, 0, 0
    with open(log_path) as log:
        for line in log:
            kind, worker = line[0], line[1:].strip()
            if kind == "E":
                assert holder is None, f"{worker} entered while {holder} held the lock"
                holder, entries = worker, entries + 1
            else:
                assert holder == worker
                holder, abandoned = None, abandoned + (kind == "A")
    assert entries == workers * rounds
    assert abandoned == workers * rounds // 5


def test_object_going_away_releases(path):
    lock = DistributedLock(path)
    lock.try_lock()
    del lock
    assert DistributedLock(path).holder is None
