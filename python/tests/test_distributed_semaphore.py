"""The distributed counting semaphore from Python, on every backend against a real store: the file
system, and private PostgreSQL, Redis and etcd servers (scripts/servers.sh starts them, or
LIBSYNC_TEST_SERVERS names a directory with running ones' postgres.url, redis.url, etcd.url).
At most N holders under contention between processes, distinct increasing tokens, a SIGKILLed
holder's permit recovered, timeouts, a count that disagrees, loss notification, bad input."""
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import assert_ctrl_c_interrupts, wait_until
from libsync.distributed_lock import DistributedSemaphore, LockBrokenError, NotLockedError

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SCRIPT = ROOT / "scripts" / "servers.sh"
_serial = itertools.count()


@pytest.fixture(scope="module")
def servers():
    """A directory with postgres.url, redis.url and etcd.url, or a loud skip."""
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    if given and all((Path(given) / f"{b}.url").exists() for b in ("postgres", "redis", "etcd")):
        yield Path(given)
        return
    directory = Path(tempfile.mkdtemp(prefix="libsync-servers-sem-"))
    started = subprocess.run([str(SERVERS_SCRIPT), "start", str(directory)])
    if started.returncode == 0:
        started = subprocess.run([str(SERVERS_SCRIPT), "start-etcd", str(directory)])
    if started.returncode != 0:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        message = f"!!!!!! SKIPPING the server backends: scripts/servers.sh failed (status {started.returncode}) !!!!!!"
        print("\n" + message, file=sys.stderr)
        pytest.skip(message)
    try:
        yield directory
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


@pytest.fixture(params=["file", "postgres", "redis", "etcd"])
def make_target(request, tmp_path):
    """A function returning a fresh semaphore target of the backend (extra: more URL parameters)."""
    backend = request.param
    base = None
    if backend != "file":
        base = (request.getfixturevalue("servers") / f"{backend}.url").read_text().strip()

    def make(extra: str = "") -> str:
        n = next(_serial)
        if backend == "file":
            return str(tmp_path / f"sem{n}")
        return f"{base}?lock=pysem{os.getpid()}-{n}{extra}"
    make.backend = backend
    return make


WORKER = textwrap.dedent("""
    import os, sys
    from libsync.distributed_lock import DistributedSemaphore
    target, permits, rounds, inside = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    semaphore = DistributedSemaphore(target, permits, poll_interval=0.001)
    most, tokens = 0, []
    for i in range(rounds):
        assert semaphore.acquire(timeout=120)
        tokens.append(semaphore.token)
        mark = os.path.join(inside, f"{os.getpid()}.{i}")
        open(mark, "w").close()
        most = max(most, len(os.listdir(inside)))   # the holders in place now, this one included
        os.sched_yield()
        os.unlink(mark)
        semaphore.release()
    print(most, *tokens, flush=True)
    """)


def test_at_most_n_holders_and_distinct_increasing_tokens(make_target, tmp_path):
    """Six processes take turns at a semaphore of 2: never more than 2 holders are inside (each
    marks its presence while it holds), every token is distinct, and each process's tokens grow."""
    target, permits = make_target(), 2
    inside = tmp_path / "inside"
    inside.mkdir()
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, target, str(permits), "15", str(inside)],
                                stdout=subprocess.PIPE, text=True, env=os.environ) for _ in range(6)]
    results = []
    for worker in workers:
        out, _ = worker.communicate(timeout=300)
        assert worker.returncode == 0
        most, *tokens = map(int, out.split())
        results.append((most, tokens))
    assert max(most for most, _ in results) <= permits
    every = [token for _, tokens in results for token in tokens]
    assert len(every) == 6 * 15 and len(set(every)) == len(every)
    for _, tokens in results:
        assert tokens == sorted(tokens)


def test_tokens_grow_from_one_holder_to_the_next(make_target):
    target = make_target()
    first, second = DistributedSemaphore(target, 2), DistributedSemaphore(target, 2)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert second.token > first.token
    seen = second.token
    first.release()
    assert first.acquire(blocking=False)
    assert first.token > seen
    first.release()
    second.release()
    assert first.token is None and not first.is_held


def test_all_taken_try_and_timeout_fail_then_a_release_lets_one_in(make_target):
    target = make_target()
    holders = [DistributedSemaphore(target, 2) for _ in range(2)]
    assert all(h.acquire(blocking=False) for h in holders)
    waiter = DistributedSemaphore(target, 2)
    assert not waiter.acquire(blocking=False)
    assert not waiter.acquire(timeout=0.2)
    assert waiter.token is None and not waiter.is_held
    holders[0].release()
    assert waiter.acquire(timeout=60)
    assert waiter.is_held and not holders[0].is_held and holders[1].is_held
    waiter.release()
    holders[1].release()


HOLDER = textwrap.dedent("""
    import sys, time
    from libsync.distributed_lock import DistributedSemaphore
    semaphore = DistributedSemaphore(sys.argv[1], 1)
    assert semaphore.acquire(blocking=False)
    print("held", semaphore.token, flush=True)
    time.sleep(3600)
    """)


def test_killed_holder_permit_is_recovered(make_target):
    """A holder SIGKILLed with its permit: the next acquire gets it (PostgreSQL: the session ends;
    Redis and etcd: the lease, ttl=1, runs out; file: the holder is stale on this host)."""
    target = make_target("&ttl=1" if make_target.backend in ("redis", "etcd") else "")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, target], stdout=subprocess.PIPE, text=True, env=os.environ)
    word, token = holder.stdout.readline().split()
    assert word == "held"
    other = DistributedSemaphore(target, 1)
    assert not other.acquire(blocking=False)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert other.acquire(timeout=60, poll_interval=0.01)
    assert other.token > int(token)
    other.release()


def test_count_must_agree_while_held(make_target):
    target = make_target()
    three = DistributedSemaphore(target, 3)
    assert three.acquire(blocking=False)
    five = DistributedSemaphore(target, 5)
    with pytest.raises(ValueError, match="has 3 permits"):
        five.acquire(blocking=False)
    with pytest.raises(ValueError, match="has 3 permits"):
        five.acquire(timeout=1)
    assert not five.is_held
    three.release()
    assert five.acquire(blocking=False)  # none held: the new count is the semaphore's
    with pytest.raises(ValueError, match="has 5 permits"):
        three.acquire(blocking=False)
    five.release()


def test_misuse_raises(make_target):
    target = make_target()
    semaphore = DistributedSemaphore(target, 2)
    with pytest.raises(NotLockedError):
        semaphore.release()
    assert semaphore.acquire(blocking=False)
    with pytest.raises(RuntimeError, match="already holds"):
        semaphore.acquire(blocking=False)
    with pytest.raises(RuntimeError, match="already holds"):
        semaphore.acquire(timeout=1)
    semaphore.release()
    with pytest.raises(NotLockedError):
        semaphore.release()
    with semaphore:
        assert semaphore.is_held and semaphore.token is not None
    assert not semaphore.is_held


@pytest.mark.parametrize("permits", [0, -1, 10001, 2**40])
def test_bad_counts(make_target, permits):
    with pytest.raises(ValueError, match="1...10000 permits"):
        DistributedSemaphore(make_target(), permits)


def test_bad_arguments(make_target):
    target = make_target()
    with pytest.raises(TypeError):
        DistributedSemaphore(target, True)
    with pytest.raises(TypeError):
        DistributedSemaphore(target, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DistributedSemaphore(target, 2, poll_interval=0)
    with pytest.raises(ValueError):
        DistributedSemaphore(target + "\0", 2)
    if make_target.backend != "file":
        with pytest.raises(ValueError, match="lock=NAME"):
            DistributedSemaphore(target.split("?")[0], 2)


def test_broken_permit_is_reported_lost(make_target):
    target = make_target()
    holder = DistributedSemaphore(target, 2, process_owned=True)
    assert holder.acquire(blocking=False)
    DistributedSemaphore(target, 2).break_lock()
    assert not holder.is_held
    if make_target.backend != "redis":  # (Redis learns it at the next renewal, ttl/3 later: below)
        wait_until(lambda: holder.lost, "the loss to be noticed")
    with pytest.raises(LockBrokenError):
        holder.release()
    assert holder.acquire(blocking=False)
    holder.release()


def test_redis_broken_permit_is_noticed_by_the_renewal(servers):
    target = (servers / "redis.url").read_text().strip() + f"?lock=pysem-lost{os.getpid()}&ttl=0.3"
    holder = DistributedSemaphore(target, 1)
    assert holder.acquire(blocking=False)
    DistributedSemaphore(target, 1).break_lock()
    wait_until(lambda: holder.lost, "the renewal to notice the loss")
    with pytest.raises(LockBrokenError):
        holder.release()


def test_ctrl_c_interrupts_a_wait(make_target):
    target = make_target()
    holder = DistributedSemaphore(target, 1)
    assert holder.acquire(blocking=False)
    assert_ctrl_c_interrupts(f"""
        from libsync.distributed_lock import DistributedSemaphore
        semaphore = DistributedSemaphore({target!r}, 1)
        """, "semaphore.acquire()")
    holder.release()
