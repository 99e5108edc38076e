"""The distributed lock from Python, between PROCESSES: mutual exclusion and progress, try_lock
busy, each release error, SIGKILLed holders recovered, racing breakers, bad paths, Ctrl-C; between
the threads of one object; forked children (never the parent's holder); paths at PATH_MAX;
Timeout's pickling."""
import copy
import errno
import gc
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from conftest import assert_ctrl_c_interrupts
from libsync.distributed_lock import (DistributedLock, FileLock, Holder, LockBrokenError, LockStolenError,
                                      NotLockedError, SoftFileLock, Timeout)

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


# Threads of one object, fork, long paths, Timeout, bad input


def test_threads_take_turns_through_one_object(path):
    lock = DistributedLock(path, timeout=60)
    inside, turns, overlaps = [0], [0], []

    def work():
        for _ in range(25):
            with lock:
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(inside[0])
                time.sleep(0)
                turns[0] += 1
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [] and turns[0] == 16 * 25
    lock.acquire()
    seen = {}

    def other_thread():  # the holder is the thread: another may neither take nor release it
        seen["is_locked"], seen["try_lock"] = lock.is_locked, lock.try_lock()
        try:
            lock.release()
        except NotLockedError:
            seen["release"] = "NotLockedError"
        try:
            lock.acquire(timeout=0.01)
        except Timeout:
            seen["acquire"] = "Timeout"

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == {"is_locked": False, "try_lock": False, "release": "NotLockedError", "acquire": "Timeout"}
    lock.release()


def test_ctrl_c_interrupts_a_wait_for_the_objects_other_thread(path):
    assert_ctrl_c_interrupts(f"""
        import threading
        from libsync.distributed_lock import DistributedLock
        lock = DistributedLock({path!r})
        held = threading.Event()
        def hold():
            lock.acquire()
            held.set()
            threading.Event().wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        """, "lock.acquire()")


_FORK_SCRIPT = """
import os, sys
from libsync.distributed_lock import DistributedLock, FileLock, NotLockedError
lock = {kind}({path!r})
lock.acquire()
pid = os.fork()
if pid == 0:
    if {call_release}:
        try:
            lock.release()
            sys.exit(3)          # released the parent's lock
        except NotLockedError:
            pass
    sys.exit(0 if not lock.is_locked else 4)   # a normal exit: the lock object's finalizer runs
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), DistributedLock({path!r}).holder.pid == os.getpid(), lock.is_locked)
lock.release()
"""


@pytest.mark.parametrize("kind", ["DistributedLock", "FileLock"])
@pytest.mark.parametrize("call_release", [True, False])
def test_forked_child_never_releases_the_parents_lock(path, kind, call_release):
    """os.fork: the child's release() raises NotLockedError (FileLock's does nothing, as
    filelock's), and its normal exit (finalizers, atexit) leaves the parent holding."""
    script = _FORK_SCRIPT.format(kind=kind, path=path, call_release=call_release and kind == "DistributedLock")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "True", "True"]


def _child_touches(lock, result):
    held = lock.is_locked
    try:
        lock.release()
        outcome = "released"
    except NotLockedError:
        outcome = "NotLockedError"
    result.put((held, outcome))
    del lock
    gc.collect()


def test_forked_child_never_releases_with_multiprocessing(path):
    lock = DistributedLock(path)
    lock.acquire()
    for _ in range(3):
        result = fork.Queue()
        child = fork.Process(target=_child_touches, args=(lock, result))
        child.start()
        assert result.get(timeout=60) == (False, "NotLockedError")
        child.join(60)
        assert child.exitcode == 0
        assert lock.is_locked and lock.holder.pid == os.getpid()
    lock.release()
    assert lock.holder is None


def _child_uses_inherited(lock, result):
    held = lock.is_locked
    try:
        lock.release()
        released = True
    except NotLockedError:
        released = False
    with lock.acquire(timeout=30):  # the child may take the lock for itself
        mine = lock.holder.pid == os.getpid()
    result.put((held, released, mine))


def test_fork_while_other_threads_use_the_object(path):
    """Forks while the parent's threads are inside the object's operations: the child's calls
    never hang on state a parent thread held at the fork, nor touch the parent's holds."""
    lock, stop = DistributedLock(path), threading.Event()

    def churn():
        while not stop.is_set():
            if lock.try_lock():
                lock.release()

    threads = [threading.Thread(target=churn) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(15):
            result = fork.Queue()
            child = fork.Process(target=_child_uses_inherited, args=(lock, result))
            child.start()
            assert result.get(timeout=60) == (False, False, True)
            child.join(60)
            assert child.exitcode == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _long_lock_path(base, total):
    """A lock path of exactly `total` bytes under `base`, its file name 150 bytes."""
    parent = os.path.join(str(base), "long")
    os.mkdir(parent)
    while len(os.fsencode(parent)) + 1 + 200 + 1 + 150 <= total:
        parent = os.path.join(parent, "d" * 200)
        os.mkdir(parent)
    parent = os.path.join(parent, "e" * (total - len(os.fsencode(parent)) - 2 - 150))
    os.mkdir(parent)
    lock_path = os.path.join(parent, "n" * 150)
    assert len(os.fsencode(lock_path)) == total
    return lock_path


@pytest.mark.parametrize("beyond", [0, 60])
def test_paths_at_path_max(tmp_path, beyond):
    long = _long_lock_path(tmp_path, os.pathconf("/", "PC_PATH_MAX") - 1 + beyond)
    a, b = DistributedLock(long), DistributedLock(long)
    assert a.path == long
    for _ in range(2):
        assert a.try_lock() and not b.try_lock()
        assert b.holder.pid == os.getpid()
        a.release()
        b.acquire(timeout=5)
        a.break_lock()
        with pytest.raises(LockBrokenError):
            b.release()
    with FileLock(long) as through_filelock:
        assert through_filelock.is_locked and through_filelock.holder.pid == os.getpid()
    with SoftFileLock(long):
        pass


def test_timeout_survives_pickling_and_copying():
    timeout = Timeout("/path/to/lock")
    assert str(timeout) == "The file lock '/path/to/lock' could not be acquired."
    assert repr(timeout) == "Timeout('/path/to/lock')"
    assert timeout.__reduce__() == (Timeout, ("/path/to/lock",))
    for copied in (pickle.loads(pickle.dumps(timeout)), copy.copy(timeout), copy.deepcopy(timeout)):
        assert type(copied) is Timeout and isinstance(copied, TimeoutError)
        assert (str(copied), repr(copied), copied.lock_file) == (str(timeout), repr(timeout), timeout.lock_file)


def _raise_timeout(path):
    raise Timeout(path)


def test_timeout_comes_back_from_a_process_pool(path):
    with fork.Pool(1) as pool:
        with pytest.raises(Timeout) as raised:
            pool.apply(_raise_timeout, (path,))
    assert str(raised.value) == f"The file lock '{path}' could not be acquired." and raised.value.lock_file == path


def test_bad_input_is_refused_or_understood(path, tmp_path):
    lock = DistributedLock(path, timeout=float("inf"), poll_interval=float("inf"))  # forever, as in threading
    with lock.acquire():
        assert lock.is_locked
    with lock.acquire(timeout=float("inf")):
        pass
    for bad in (float("nan"),):
        with pytest.raises(ValueError):
            DistributedLock(path, timeout=bad)
        with pytest.raises(ValueError):
            lock.acquire(timeout=bad)
    with pytest.raises(ValueError):
        DistributedLock(os.fsencode(str(tmp_path)) + b"/not-utf8-\xff")  # refused, not silently renamed
    with pytest.raises(ValueError):
        DistributedLock(str(tmp_path) + "/nul\0byte")
    with pytest.raises(OSError) as too_long:
        DistributedLock(str(tmp_path / ("n" * 300)))
    assert too_long.value.errno == errno.ENAMETOOLONG
    with pytest.raises(TypeError):
        lock.acquire(poll_interval="fast")
    assert not lock.is_locked and lock.holder is None
