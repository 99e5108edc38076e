"""libsync.distributed_lock's filelock interface: what filelock's own test suite checks of
FileLock, SoftFileLock, AsyncFileLock and Timeout (run offline, against libsync only), and what a
drop-in owes beyond it: many threads sharing one lock take turns, processes exclude each other,
Ctrl-C interrupts a wait, waiting tasks never block the event loop."""
import asyncio
import logging
import multiprocessing
import os
import stat
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePath

import pytest

from conftest import assert_ctrl_c_interrupts
from libsync.distributed_lock import (AsyncFileLock, AsyncSoftFileLock, BaseAsyncFileLock, BaseFileLock, DistributedLock,
                                      FileLock, LockStolenError, SoftFileLock, Timeout)

fork = multiprocessing.get_context("fork")
LOCKS = [FileLock, SoftFileLock]
ASYNC_LOCKS = [AsyncFileLock, AsyncSoftFileLock]
TIMEOUT_MESSAGE = r"The file lock '.*' could not be acquired\."


@pytest.mark.parametrize("lock_type", LOCKS)
@pytest.mark.parametrize("path_type", [str, PurePath, Path])
@pytest.mark.parametrize("filename", ["a", "new/b", "new2/new3/c"])
def test_simple_makes_parents_and_logs(lock_type, path_type, filename, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="filelock")
    lock_path = tmp_path / filename
    lock = lock_type(path_type(lock_path))
    assert lock.lock_file == str(lock_path) and not lock.is_locked
    with lock as locked:
        assert locked is lock and lock.is_locked and lock.lock_counter == 1
    assert not lock.is_locked and lock.lock_counter == 0
    assert caplog.messages == [f"Attempting to acquire lock {id(lock)} on {lock_path}",
                               f"Lock {id(lock)} acquired on {lock_path}",
                               f"Attempting to release lock {id(lock)} on {lock_path}",
                               f"Lock {id(lock)} released on {lock_path}"]
    assert {r.name for r in caplog.records} == {"filelock"}


@pytest.mark.parametrize("lock_type", LOCKS)
@pytest.mark.parametrize(("error", "match", "bad"), [(FileNotFoundError, "No such file or directory", ""),
                                                     (ValueError, "embedded null byte", "\0"),
                                                     (IsADirectoryError, "Is a directory", ".")])
def test_bad_lock_file_fails_at_acquire(lock_type, error, match, bad):
    lock = lock_type(bad)  # as filelock's: making the object never fails for a path
    with pytest.raises(error, match=match):
        lock.acquire()
    assert not lock.is_locked


@pytest.mark.parametrize("lock_type", LOCKS)
def test_reentrant_counter_and_forced_release(lock_type, tmp_path):
    lock = lock_type(tmp_path / "a")
    with lock as first:
        with lock.acquire() as second:
            with lock:
                assert first is lock and second is lock and lock.lock_counter == 3
            assert lock.is_locked and lock.lock_counter == 2
        assert lock.is_locked
        lock.acquire()
        lock.acquire()
        assert lock.lock_counter == 3
        lock.release(force=True)
        assert not lock.is_locked and lock.lock_counter == 0
    assert not lock.is_locked
    lock.release()  # releasing what is not held: nothing happens, as filelock's
    lock.release(force=True)


@pytest.mark.parametrize("lock_type", LOCKS)
def test_timeouts_blocking_and_the_timeout_error(lock_type, tmp_path):
    path = str(tmp_path / "a")
    holder = lock_type(path)
    holder.acquire()
    for waiter, call in [(lock_type(path), lambda l: l.acquire(timeout=0.05)),
                         (lock_type(path), lambda l: l.acquire(blocking=False)),
                         (lock_type(path, blocking=False), lambda l: l.acquire()),
                         (lock_type(path, timeout=0), lambda l: l.acquire()),
                         (lock_type(path, blocking=False, timeout=-1), lambda l: l.acquire()),  # blocking wins
                         (lock_type(path, timeout=0.05), lambda l: l.__enter__())]:
        with pytest.raises(Timeout, match=TIMEOUT_MESSAGE) as raised:
            call(waiter)
        assert isinstance(raised.value, TimeoutError) and raised.value.lock_file == path
        assert not waiter.is_locked and holder.is_locked
    waiter = lock_type(path, timeout=0.05)
    assert waiter.timeout == pytest.approx(0.05)
    waiter.timeout = "0"  # filelock's setter takes what float() takes
    assert waiter.timeout == 0
    with pytest.raises(Timeout):
        waiter.acquire()
    waiter.blocking = False
    assert waiter.blocking is False
    holder.release()
    with waiter:
        assert waiter.is_locked


@pytest.mark.parametrize("lock_type", LOCKS)
def test_released_on_exception_and_as_decorator(lock_type, tmp_path):
    lock = lock_type(tmp_path / "a")
    with pytest.raises(ValueError):
        with lock:
            raise ValueError
    assert not lock.is_locked
    with pytest.raises(ValueError):
        with lock.acquire():
            raise ValueError
    assert not lock.is_locked

    @lock
    def decorated():
        assert lock.is_locked
        return 42

    assert decorated() == 42 and not lock.is_locked


@pytest.mark.parametrize("lock_type", LOCKS)
def test_object_going_away_releases(lock_type, tmp_path):
    first, second = lock_type(tmp_path / "a"), lock_type(tmp_path / "a")
    first.acquire()
    with pytest.raises(Timeout):
        second.acquire(timeout=0.01)
    del first
    with second.acquire(timeout=0):
        assert second.is_locked


def test_soft_lock_leaves_nothing_file_lock_leaves_a_free_lock(tmp_path):
    with SoftFileLock(tmp_path / "soft"):
        assert (tmp_path / "soft").is_dir()
    assert not (tmp_path / "soft").exists()
    with FileLock(tmp_path / "hard"):
        pass
    assert (tmp_path / "hard").is_dir() and not os.listdir(tmp_path / "hard")


@pytest.mark.parametrize("lock_type", LOCKS)
def test_poll_interval_settings(lock_type, tmp_path):
    lock = lock_type(tmp_path / "a")
    assert lock.poll_interval == pytest.approx(0.05)
    lock.poll_interval = 0.2
    assert lock.poll_interval == pytest.approx(0.2)
    assert lock_type(tmp_path / "a", poll_interval=0.1).poll_interval == pytest.approx(0.1)
    with pytest.warns(DeprecationWarning, match="use poll_interval instead of poll_intervall") as caught:
        lock.acquire(poll_intervall=0.05)
    assert caught[0].filename == __file__  # stacklevel 2: the caller's line
    lock.release()
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            lock_type(tmp_path / "a", poll_interval=bad)


@pytest.mark.parametrize("lock_type", LOCKS)
def test_mode_sets_the_lock_directorys_bits(lock_type, tmp_path):
    assert lock_type(tmp_path / "a").mode == 0o644 and not lock_type(tmp_path / "a").has_explicit_mode
    lock = lock_type(tmp_path / "a", mode=0o666)
    assert lock.mode == 0o666 and lock.has_explicit_mode
    umask = os.umask(0o077)  # an explicit mode is exact, whatever the umask
    try:
        with lock:
            assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o777  # each read bit adds a search bit
    finally:
        os.umask(umask)
    with pytest.raises(ValueError):
        lock_type(tmp_path / "b", mode=0o1000)


@pytest.mark.parametrize("lock_type", LOCKS)
def test_singletons(lock_type, tmp_path):
    path = str(tmp_path / "a")
    plain = lock_type(path)
    one, two = lock_type(path, is_singleton=True), lock_type(path, is_singleton=True)
    assert one is two and one is not plain and one.is_singleton and not plain.is_singleton
    assert lock_type(str(tmp_path / "b"), is_singleton=True) is not one
    assert lock_type(os.path.join(str(tmp_path), ".", "a"), is_singleton=True) is one  # equivalent spellings
    with one:
        with lock_type(path, is_singleton=True):  # re-entrant through the one object
            assert one.lock_counter == 2
    for name, value in [("timeout", 10), ("mode", 0), ("thread_local", False), ("blocking", False),
                        ("poll_interval", 0.1)]:
        with pytest.raises(ValueError, match=f"Singleton lock instances cannot be initialized with differing arguments(.|\\n)*{name}"):
            lock_type(path, is_singleton=True, **{name: value})

    class Sub(lock_type):
        pass

    assert Sub(path, is_singleton=True) is not one  # one registry per class
    assert Sub._instances is not lock_type._instances
    del one, two
    assert path not in lock_type._instances  # weak: gone with the last reference


def test_singleton_built_once_under_racing_construction(tmp_path):
    built, barrier = [], threading.Barrier(4)

    def build():
        barrier.wait()
        built.append(FileLock(tmp_path / "a", is_singleton=True))

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(lock is built[0] for lock in built)


@pytest.mark.parametrize("lock_type", LOCKS)
def test_many_threads_share_one_lock(lock_type, tmp_path):
    """filelock's usual module-level lock: every thread gets it in turn (today's RuntimeError is gone)."""
    lock = lock_type(tmp_path / "a")
    inside, turns, overlaps = [0], [0], []

    def work():
        for _ in range(20):
            with lock:
                assert lock.is_locked and lock.lock_counter == 1
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(inside[0])
                time.sleep(0)
                turns[0] += 1
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [] and turns[0] == 100 * 20 and not lock.is_locked


def _check_file_read_write(text_file):
    for _ in range(3):
        value = str(uuid.uuid4())
        text_file.write_text(value)
        assert text_file.read_text() == value


@pytest.mark.parametrize("lock_type", LOCKS)
@pytest.mark.parametrize("sharing", ["global", "passed", "recreated"])
def test_thread_pool_thrashing(lock_type, sharing, tmp_path):
    lock_file, text_file = tmp_path / "t.lock", tmp_path / "t.txt"
    lock = lock_type(lock_file)

    def work(passed):
        with (lock_type(lock_file) if sharing == "recreated" else passed):
            _check_file_read_write(text_file)

    with ThreadPoolExecutor() as pool:
        results = [pool.submit(work, lock) for _ in range(100)]
    assert all(r.result() is None for r in results)


@pytest.mark.parametrize("lock_type", LOCKS)
def test_two_objects_in_many_threads(lock_type, tmp_path):
    first, second = lock_type(tmp_path / "a"), lock_type(tmp_path / "a")

    def use(mine, other):
        for _ in range(50):
            with mine:
                assert mine.is_locked and not other.is_locked

    threads = [threading.Thread(target=use, args=pair) for _ in range(5) for pair in ((first, second), (second, first))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not first.is_locked and not second.is_locked


@pytest.mark.parametrize("lock_type", LOCKS)
def test_thread_local_false_is_reentrant_across_threads(lock_type, tmp_path):
    lock = lock_type(tmp_path / "a", thread_local=False)
    for _ in range(2):
        thread = threading.Thread(target=lock.acquire, kwargs={"timeout": 2})
        thread.start()
        thread.join()
    assert lock.lock_counter == 2 and lock.is_locked and not lock.is_thread_local()
    lock.release(force=True)
    assert lock.lock_counter == 0


@pytest.mark.parametrize("thread_local", [True, False])
def test_settings_are_per_thread_when_thread_local(thread_local, tmp_path):
    lock = FileLock(tmp_path / "a", thread_local=thread_local, poll_interval=0.05, timeout=3)
    lock.poll_interval, lock.timeout = 0.5, 7
    seen = []
    thread = threading.Thread(target=lambda: seen.append((lock.poll_interval, lock.timeout)))
    thread.start()
    thread.join()
    assert seen == ([(0.05, 3.0)] if thread_local else [(0.5, 7.0)])


@pytest.mark.parametrize("lock_type", LOCKS)
def test_deadlock_instead_of_waiting_for_oneself(lock_type, tmp_path):
    path = tmp_path / "a"
    with lock_type(path):
        with pytest.raises(RuntimeError, match="Deadlock"):
            lock_type(path).acquire()
        with pytest.raises(RuntimeError, match="Deadlock"):  # an endless wait in tries: the same
            lock_type(path).acquire(cancel_check=lambda: pytest.fail("asked instead of Deadlock"))
        with pytest.raises(Timeout):
            lock_type(path, timeout=0.01).acquire()  # a bounded wait times out
        with pytest.raises(Timeout):
            lock_type(path, timeout=60).acquire(cancel_check=lambda: True)
        with pytest.raises(Timeout):
            lock_type(path, blocking=False).acquire()
        errors = []

        def other_thread():
            try:
                lock_type(path, timeout=0).acquire()
            except BaseException as error:
                errors.append(error)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert [type(e) for e in errors] == [Timeout]  # another thread: no false deadlock
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        with lock_type(tmp_path / "real" / "b"):
            with pytest.raises(RuntimeError, match="Deadlock"):  # the same lock through a symlinked parent
                lock_type(tmp_path / "link" / "b").acquire()
            with pytest.raises(RuntimeError, match="Deadlock"):
                lock_type(tmp_path / "link" / "b").acquire(cancel_check=lambda: True)
    lock = lock_type(path)
    with lock:
        lock.acquire()
    lock.release(force=True)
    with lock_type(path) as again:  # nothing left behind by the releases
        assert again.is_locked


@pytest.mark.parametrize("lock_type", LOCKS)
def test_cancel_check(lock_type, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="filelock")
    holder, waiter = lock_type(tmp_path / "a"), lock_type(tmp_path / "a")
    free = lock_type(tmp_path / "free")
    free.acquire(cancel_check=lambda: pytest.fail("asked while the lock was free"))
    free.release()
    holder.acquire()
    calls = []
    with pytest.raises(Timeout, match=TIMEOUT_MESSAGE):
        waiter.acquire(timeout=60, poll_interval=0.001, cancel_check=lambda: calls.append(1) or len(calls) >= 3)
    assert len(calls) == 3 and not waiter.is_locked
    assert any("Cancellation requested" in m for m in caplog.messages)
    holder.release()
    waiter.acquire(cancel_check=lambda: False)
    assert waiter.is_locked
    waiter.release()


def _steal(path):
    DistributedLock(path).break_lock()
    thief = DistributedLock(path)
    thief.acquire()
    return thief


@pytest.mark.parametrize("policy", ["chain", "group"])
def test_context_error_policy(policy, tmp_path):
    path = str(tmp_path / "a")
    lock = FileLock(path, context_error_policy=policy)
    assert lock.context_error_policy == policy
    body = ValueError("body failed")
    with pytest.raises(BaseException) as raised:
        with lock:
            thief = _steal(path)  # broken and taken while held: the release fails
            raise body
    if policy == "chain":
        assert type(raised.value) is LockStolenError and raised.value.__context__ is body
    else:
        assert isinstance(raised.value, ExceptionGroup)
        assert [type(e) for e in raised.value.exceptions] == [ValueError, LockStolenError]
    thief.release()
    with pytest.raises(LockStolenError):  # no body error: the release's alone, either way
        with lock:
            thief = _steal(path)
    thief.release()
    with pytest.raises(ValueError):
        FileLock(path, context_error_policy="other")


def test_filelock_options_without_a_descriptor(tmp_path):
    path = tmp_path / "a"
    lock = FileLock(path, preserve_lock_file=True, fallback_to_soft=False, close_error_policy="raise")
    assert (lock.preserve_lock_file, lock.fallback_to_soft, lock.close_error_policy) == (True, False, "raise")
    assert lock.on_acquired is None and lock.lifetime is None
    with pytest.raises(ValueError, match="preserve_lock_file"):
        SoftFileLock(path, preserve_lock_file=True)  # it removes its lock on release, as filelock's
    with pytest.raises(TypeError, match="on_acquired"):
        FileLock(path, on_acquired=lambda fd: None)
    with pytest.raises(ValueError, match="lifetime"):
        FileLock(path, lifetime=5)
    with pytest.raises(ValueError):
        FileLock(path, close_error_policy="loud")


def test_ctrl_c_interrupts_a_wait_for_another_thread(tmp_path):
    assert_ctrl_c_interrupts(f"""
        import threading
        from libsync.distributed_lock import FileLock
        lock = FileLock({str(tmp_path / 'a')!r})
        held = threading.Event()
        def hold():
            lock.acquire()
            held.set()
            threading.Event().wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        """, "lock.acquire()")


def test_ctrl_c_interrupts_a_wait_for_another_process(tmp_path):
    holder = FileLock(tmp_path / "a")
    holder.acquire()
    assert_ctrl_c_interrupts(f"""
        from libsync.distributed_lock import FileLock
        lock = FileLock({str(tmp_path / 'a')!r}, poll_interval=10)
        """, "lock.acquire()")
    holder.release()


def _add_under_lock(lock_path, counter_path, rounds):
    lock = FileLock(lock_path)  # (and a module-level one would do: each process is its own holder)
    for _ in range(rounds):
        with lock:
            value = int(Path(counter_path).read_text())
            time.sleep(0)
            Path(counter_path).write_text(str(value + 1))


def test_processes_exclude_each_other(tmp_path):
    counter = tmp_path / "counter"
    counter.write_text("0")
    workers = [fork.Process(target=_add_under_lock, args=(str(tmp_path / "a"), str(counter), 50)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert counter.read_text() == "200"


def test_forked_child_never_releases_the_parents_file_lock(tmp_path):
    lock = FileLock(tmp_path / "a")
    lock.acquire()
    lock.acquire()

    def child():
        assert not lock.is_locked and lock.lock_counter == 0
        lock.release(force=True)  # nothing of the child's: nothing happens, as filelock's

    process = fork.Process(target=child)
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert lock.is_locked and lock.lock_counter == 2
    assert DistributedLock(tmp_path / "a").holder.pid == os.getpid()
    lock.release(force=True)


# asyncio


@pytest.mark.parametrize("lock_type", ASYNC_LOCKS)
def test_async_with_timeout_and_non_blocking(lock_type, tmp_path):
    async def main():
        lock = lock_type(tmp_path / "a")
        async with lock as locked:
            assert locked is lock and lock.is_locked
            async with lock:  # one object: re-entered (thread_local=False, as filelock's)
                assert lock.lock_counter == 2
        assert not lock.is_locked
        proxy = await lock.acquire()
        other = lock_type(tmp_path / "a", timeout=0.05)
        with pytest.raises(Timeout, match=TIMEOUT_MESSAGE):
            await other.acquire()
        with pytest.raises(Timeout):
            await other.acquire(blocking=False)
        with pytest.raises(Timeout):
            await other.acquire(timeout=60, cancel_check=lambda: True)
        async with proxy:
            pass
        assert not lock.is_locked
        async with await other.acquire() as again:
            assert again is other and other.is_locked

    asyncio.run(main())


def test_async_tasks_take_turns_without_blocking_the_loop(tmp_path):
    """Several tasks, each with its lock object: they take turns, a bounded wait times out, and
    while they wait the event loop keeps running (a heartbeat task ticks)."""

    async def main():
        inside, order, beats = [0], [], [0]
        stop = asyncio.Event()

        async def heartbeat():
            while not stop.is_set():
                beats[0] += 1
                await asyncio.sleep(0.001)

        async def task(number):
            async with AsyncFileLock(tmp_path / "a", poll_interval=0.005):
                inside[0] += 1
                assert inside[0] == 1
                order.append(number)
                before = beats[0]
                while beats[0] < before + 3:  # hold it while the loop runs on
                    await asyncio.sleep(0.001)
                inside[0] -= 1

        beating = asyncio.create_task(heartbeat())
        await asyncio.gather(*(task(n) for n in range(5)))
        assert sorted(order) == list(range(5))
        holder = AsyncFileLock(tmp_path / "a")
        await holder.acquire()
        before = beats[0]
        with pytest.raises(Timeout):
            await AsyncFileLock(tmp_path / "a", timeout=0.2, poll_interval=0.01).acquire()
        assert beats[0] > before  # the loop ran while it waited
        await holder.release()
        stop.set()
        await beating

    asyncio.run(main())


def test_async_cancelled_wait_leaves_nothing_held(tmp_path):
    async def main():
        holder = AsyncFileLock(tmp_path / "a")
        await holder.acquire()
        waiter = AsyncFileLock(tmp_path / "a", poll_interval=0.001)
        waiting = asyncio.create_task(waiter.acquire())
        while waiter._made() is None:  # (started trying)
            await asyncio.sleep(0.001)
        for _ in range(20):
            await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await holder.release()
        assert waiter.lock_counter == 0 and not waiter.is_locked
        async with AsyncFileLock(tmp_path / "a", timeout=5) as next_one:
            assert next_one.is_locked

    asyncio.run(main())


def test_async_rules(tmp_path):
    with pytest.raises(ValueError, match="run_in_executor is not supported when thread_local is True"):
        AsyncFileLock(tmp_path / "a", thread_local=True)
    with pytest.raises(NotImplementedError):
        with AsyncFileLock(tmp_path / "a"):
            pass

    async def main():
        for thread_local in (True, False):
            lock = AsyncSoftFileLock(tmp_path / "b", thread_local=thread_local, run_in_executor=False)
            async with lock:
                assert lock.is_locked
        first = AsyncFileLock(tmp_path / "a")
        async with first:
            with pytest.raises(RuntimeError, match="Deadlock"):
                await AsyncFileLock(tmp_path / "a").acquire()  # the same task, another object, forever

            async def other_task():  # another task queues (times out here), no false deadlock
                with pytest.raises(Timeout):
                    await AsyncFileLock(tmp_path / "a", timeout=0.02).acquire()

            await asyncio.create_task(other_task())
        lock = AsyncFileLock(tmp_path / "a")
        await lock.acquire()
        await asyncio.create_task(lock.release())  # released from another task
        async with AsyncFileLock(tmp_path / "a", timeout=0):
            pass

    asyncio.run(main())
    assert issubclass(AsyncFileLock, BaseAsyncFileLock) and issubclass(BaseAsyncFileLock, BaseFileLock)


def test_targets_follow_the_core_rules(tmp_path, monkeypatch):
    """URL or path, and a path's one spelling, are the core's rules (sync_distributed_lock_is_url,
    sync_distributed_lock_canonical), whatever the letters: a scheme of non-ASCII letters is a
    path, and a trailing slash or a symbolic link in the parent names the same lock."""
    from libsync._distributed import canonical, is_url
    assert is_url("redis://127.0.0.1/?lock=a") and is_url("Postgres+x://h/?lock=a")
    assert not is_url("é://x") and not is_url("rédis://x") and not is_url("/tmp/a://b") and not is_url(b"redis://x")
    monkeypatch.chdir(tmp_path)
    lock = FileLock("é://lock")  # a path: its parents are made, as for any path
    assert lock.lock_file == "é://lock"
    with lock:
        assert os.path.isdir(tmp_path / "é:" / "lock")
    assert str(Timeout("é://lock")) == "The file lock 'é://lock' could not be acquired."
    real = tmp_path / "réal"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    made = DistributedLock(str(tmp_path / "link" / "dïr.lock") + "/")
    for spelling in ("link/dïr.lock/", "link/./dïr.lock", str(real / "dïr.lock"), "link/mïssing/../dïr.lock"):
        assert canonical(spelling) == made.path, spelling
    one = FileLock("link/dïr.lock/", is_singleton=True)
    assert FileLock(real / "dïr.lock", is_singleton=True) is one
    assert canonical("redis://u:secret@h/?lock=a") == "redis://u:secret@h/?lock=a"
    assert canonical("") == "" and canonical("a/..") == "a/.."  # no lock file: their own keys


@pytest.mark.parametrize("lock_type", LOCKS)
def test_cancel_check_error_ends_the_wait(lock_type, tmp_path):
    """cancel_check runs inside the core's wait: an error it raises ends the wait and propagates,
    leaving the lock untouched; the object's other thread's hold is waited for the same way."""
    holder = lock_type(tmp_path / "a")
    holder.acquire()
    with pytest.raises(ZeroDivisionError):
        lock_type(tmp_path / "a").acquire(timeout=60, cancel_check=lambda: 1 / 0)
    assert holder.is_locked
    holder.release()
    shared = lock_type(tmp_path / "b")
    shared.acquire()
    calls = []
    outcome = []
    waiter = threading.Thread(target=lambda: outcome.append(
        shared.acquire(timeout=60, cancel_check=lambda: calls.append(1) or False) and shared.release()))
    waiter.start()
    deadline = time.monotonic() + 60
    while not calls and time.monotonic() < deadline:  # the waiter found it held: asked once at least
        time.sleep(0.001)
    assert calls
    shared.release()
    waiter.join(timeout=60)
    assert outcome == [None] and not shared.is_locked
