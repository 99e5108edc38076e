"""The distributed lock's backends from Python, each against a real store: the file system, and
private PostgreSQL and Redis servers (scripts/servers.sh starts them, or LIBSYNC_TEST_SERVERS
names running ones). The same tests for every backend: mutual exclusion between processes with
fencing tokens, a SIGKILLed holder, Ctrl-C during a wait, filelock's face; for the servers: a
stopped (SIGSTOP) server while waiting, a restart while held, a lost lease, bad targets, a
missing client library."""
import errno
import itertools
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import assert_ctrl_c_interrupts, assert_exclusion_between_processes, spawn_holder
from libsync.distributed_lock import (DistributedLock, FileLock, LockLostError, LockStolenError, NotLockedError,
                                      Timeout)

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SCRIPT = ROOT / "scripts" / "servers.sh"
_serial = itertools.count()


@pytest.fixture(scope="module")
def servers():
    """The servers' directory (with postgres.url and redis.url), or a loud skip where they cannot
    be installed."""
    given = os.environ.get("LIBSYNC_TEST_SERVERS")
    if given:
        yield Path(given)
        return
    directory = Path(tempfile.mkdtemp(prefix="libsync-servers-py-"))
    started = subprocess.run([str(SERVERS_SCRIPT), "start", str(directory)])
    if started.returncode != 0:
        message = (f"!!!!!! SKIPPING the PostgreSQL and Redis backends: scripts/servers.sh could not install or "
                   f"start the servers (status {started.returncode}) !!!!!!")
        print("\n" + message, file=sys.stderr)
        pytest.skip(message)
    try:
        yield directory
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


def control(servers, what: str, backend: str) -> None:
    subprocess.run([str(SERVERS_SCRIPT), what, backend, str(servers)], check=True)


@pytest.fixture(params=["file", "postgres", "redis"])
def backend(request):
    return request.param


@pytest.fixture
def make_target(request, backend, tmp_path):
    """A function returning a fresh lock target of the backend (extra: more URL parameters)."""
    base = None
    if backend != "file":
        servers = request.getfixturevalue("servers")
        base = (servers / f"{backend}.url").read_text().strip()

    def make(extra: str = "") -> str:
        n = next(_serial)
        if backend == "file":
            return str(tmp_path / f"lock{n}")
        return f"{base}?lock=py{os.getpid()}-{n}{extra}"
    make.backend = backend
    return make


def test_mutual_exclusion_and_fencing_between_processes(make_target, tmp_path):
    assert_exclusion_between_processes(make_target(), tmp_path / "log", poll_interval=0.002)


def test_tokens_holder_and_release_errors(make_target):
    target = make_target()
    a, b = DistributedLock(target), DistributedLock(target)
    assert a.token is None and a.holder is None
    tokens = []
    for holder, other in [(a, b), (b, a), (a, b)]:
        with holder:
            assert not other.try_lock()
            tokens.append(holder.token)
            assert other.token is None
            assert other.holder.pid == os.getpid() and other.holder.on_this_host
    assert tokens == sorted(set(tokens))
    assert a.try_lock()
    b.break_lock()
    with pytest.raises(LockLostError):
        a.release()
    with pytest.raises(Timeout):
        with b:
            a.acquire(timeout=0.05)
    assert "://" not in target or "secret" not in a.path  # never shows the password


def test_timeout_says_which_kind_of_lock(make_target):
    """A server lock's Timeout is no "file lock": it names the URL (without its password)."""
    target = make_target()
    holder = DistributedLock(target)
    with holder:
        for face in (DistributedLock(target), FileLock(target)):
            with pytest.raises(Timeout) as caught:
                face.acquire(timeout=0.01)
            kind = "file lock" if make_target.backend == "file" else "distributed lock"
            assert str(caught.value) == f"The {kind} '{holder.path}' could not be acquired."
            assert caught.value.lock_file == holder.path and "secret" not in str(caught.value)


def test_acquire_after_a_lost_hold_reports_the_loss_once(make_target):
    """A hold lost meanwhile reads as not held; the next acquire (or try_lock) raises its
    LockLostError once, ending it, and the one after acquires."""
    target = make_target()
    a, b = DistributedLock(target), DistributedLock(target)
    a.acquire(timeout=5)
    b.break_lock()
    assert not a.is_locked
    with pytest.raises(LockLostError):
        a.acquire(timeout=5)
    with a.acquire(timeout=5):
        assert a.is_locked
    a.acquire(timeout=5)
    b.break_lock()
    with pytest.raises(LockLostError):
        a.try_lock()
    assert a.try_lock()
    a.release()
    with pytest.raises(NotLockedError):
        a.release()


def test_huge_and_tiny_waits_saturate(make_target):
    """A timeout or poll interval too long for C is as long as C can wait (never OverflowError);
    a positive poll interval below 1 ns is 1 ns; 0 and less are refused."""
    target = make_target()
    lock, other = DistributedLock(target, timeout=1e300, poll_interval=1e300), DistributedLock(target)
    FileLock(target, timeout=1e300, poll_interval=1e-12)
    with lock.acquire(timeout=1e300, poll_interval=1e300):
        with pytest.raises(Timeout):
            other.acquire(timeout=0.05, poll_interval=1e-12)
    with other.acquire(timeout=2**80, poll_interval=1e-300):
        assert other.is_locked
    for bad in (0, -1, 0.0):
        with pytest.raises(ValueError, match="poll_interval"):
            other.acquire(timeout=1, poll_interval=bad)


def test_killed_holder_is_recovered(make_target):
    target = make_target()
    holder = spawn_holder(target)
    lock = DistributedLock(target)
    assert not lock.try_lock()
    holder.kill()
    holder.wait()
    with lock.acquire(timeout=30):  # stale (file, Redis on this host) or its session ended (PostgreSQL)
        assert lock.holder.pid == os.getpid()


@pytest.mark.parametrize("poll_interval", [math.inf, 5e18, 2.0 ** 62 / 1e9 + 1])
def test_longest_poll_intervals_end_at_the_timeout(make_target, poll_interval):
    """A poll interval as long as C can sleep (inf) or beyond 2**62 ns: the pauses saturate, and
    a wait for a held lock ends with Timeout at its timeout."""
    target = make_target()
    holder, waiter = DistributedLock(target), DistributedLock(target)
    with holder.acquire(timeout=5):
        with pytest.raises(Timeout):
            waiter.acquire(timeout=0.2, poll_interval=poll_interval)
    with waiter.acquire(timeout=5, poll_interval=poll_interval):  # a free lock: taken at once
        assert waiter.token is not None


def test_no_time_left_still_tries(make_target):
    """timeout=0, blocking=False and tiny timeouts make their one try: a free lock is taken, a
    held one raises Timeout, and the object goes on working."""
    target = make_target()
    lock, other, face = DistributedLock(target), DistributedLock(target), FileLock(target, timeout=0)
    tokens = []
    for _ in range(5):
        for holder, acquire in ((lock, lambda: lock.acquire(timeout=0)), (lock, lambda: lock.acquire(blocking=False)),
                                (lock, lambda: lock.acquire(timeout=1e-6)), (face, face.acquire)):
            acquire()
            tokens.append(holder.token)
            holder.release()
    assert tokens == sorted(set(tokens)) and len(tokens) == 20
    with other.acquire(timeout=5):
        with pytest.raises(Timeout):
            lock.acquire(timeout=0)
        with pytest.raises(Timeout):
            lock.acquire(blocking=False)
    with lock.acquire(timeout=0):
        assert lock.token > tokens[-1]


def test_ctrl_c_interrupts_a_wait(make_target):
    target = make_target()
    holder = spawn_holder(target)
    try:
        assert_ctrl_c_interrupts(f"""
            from libsync.distributed_lock import DistributedLock
            lock = DistributedLock({target!r})
            """, "lock.acquire(timeout=60)")  # PostgreSQL: a wait in the server
    finally:
        holder.kill()
        holder.wait()


def test_filelock_face_takes_urls(make_target):
    target = make_target()
    lock, other = FileLock(target, timeout=5), FileLock(target, timeout=0.05)
    with lock:
        with lock.acquire():
            assert lock.lock_counter == 2 and lock.token is not None
        with pytest.raises(Timeout):
            other.acquire()
        first = lock.token
    assert not lock.is_locked
    with other.acquire(timeout=5):
        assert other.token > first
    if make_target.backend != "file":
        assert "secret" not in lock.lock_file


servers_only = pytest.mark.parametrize("backend", ["postgres", "redis"])


@servers_only
def test_server_paused_while_waiting(make_target, servers, backend):
    """A server that stops answering (SIGSTOP) ends a wait with Timeout at its deadline, never
    with another error, wherever in the wait the pause lands (a try, a stale-holder check, a
    pause between polls); paused before the wait, its note says the server did not answer."""
    target = make_target("&connect_timeout=2")
    holder = spawn_holder(target)
    lock = DistributedLock(target)
    try:
        # Paused at some point of the wait (which one is left to the scheduler: each must give
        # Timeout).
        pauser = threading.Timer(0.2, control, (servers, "pause", backend))
        pauser.start()
        try:
            start = time.monotonic()
            with pytest.raises(Timeout):
                lock.acquire(timeout=1.5)
            assert time.monotonic() - start < 12  # (a hang guard)
        finally:
            pauser.join()
            control(servers, "resume", backend)
        # Paused before the wait (connected: `holder` asks the server): every request of the
        # wait meets a server that does not answer.
        assert lock.holder is not None
        control(servers, "pause", backend)
        try:
            start = time.monotonic()
            with pytest.raises(Timeout) as caught:
                lock.acquire(timeout=1.5)
            assert time.monotonic() - start < 12  # (a hang guard)
            assert any("did not answer" in note for note in getattr(caught.value, "__notes__", []))
        finally:
            control(servers, "resume", backend)
    finally:
        holder.kill()
        holder.wait()
    with lock.acquire(timeout=30):
        pass


@servers_only
@pytest.mark.parametrize("held", [False, True])
def test_ctrl_c_while_the_server_does_not_answer(servers, backend, held):
    """Ctrl-C during an acquire whose server stopped answering (SIGSTOP) raises KeyboardInterrupt
    at once, not after connect_timeout (60 s here), whether the lock is free or held; the
    acquire it interrupted leaves the lock free (Redis: a lease left behind would hold it for
    the 60 s ttl)."""
    url = (servers / f"{backend}.url").read_text().strip()
    target = f"{url}?lock=py{os.getpid()}-{next(_serial)}&connect_timeout=60" + ("&ttl=60" if backend == "redis" else "")
    holder = spawn_holder(target) if held else None
    try:
        assert_ctrl_c_interrupts(f"""
            import subprocess
            from libsync.distributed_lock import DistributedLock
            lock = DistributedLock({target!r})
            if not {held!r}:  # (connected, scripts loaded: the interrupted request is the acquire)
                lock.acquire(timeout=5)
                lock.release()
            subprocess.run([{str(SERVERS_SCRIPT)!r}, "pause", {backend!r}, {str(servers)!r}], check=True)
            """, "lock.acquire(timeout=120)")
    finally:
        control(servers, "resume", backend)
        if holder:
            holder.kill()
            holder.wait()
    with DistributedLock(target).acquire(timeout=30):  # (30 s: a hang guard)
        pass


@servers_only
def test_server_restarted_while_held(make_target, servers, backend):
    target = make_target()
    lock = DistributedLock(target)
    lock.acquire()
    before = lock.token
    control(servers, "restart", backend)
    assert not lock.is_locked
    with pytest.raises(LockLostError):
        lock.release()
    with lock.acquire(timeout=30):
        assert lock.token > before


LEASED = """
import os, signal, sys
from libsync.distributed_lock import DistributedLock, LockStolenError
lock = DistributedLock(sys.argv[1])
lock.try_lock() or sys.exit(3)
print("holding", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)    # longer than the lease
try:
    lock.release()
except LockStolenError as error:
    print("lost:", error, flush=True)
    sys.exit(0)
sys.exit(4)
"""


@pytest.mark.parametrize("backend", ["redis"])
def test_redis_lease_lost_by_a_stopped_holder(make_target, servers):
    target = make_target("&ttl=0.3")
    lock = DistributedLock(target)
    with lock:  # a live holder keeps it (renewed) however long it holds it
        time.sleep(1.0)
        assert lock.is_locked and not DistributedLock(target).try_lock()
    proc = subprocess.Popen([sys.executable, "-c", LEASED, target], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert proc.stdout.readline().strip() == "holding"
    os.waitpid(proc.pid, os.WUNTRACED)
    with lock.acquire(timeout=30):  # the lease ran out
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read().startswith("lost:")


@pytest.mark.parametrize("backend", ["redis"])
def test_bad_targets(servers, backend):
    with pytest.raises(ValueError, match="lock=NAME"):
        DistributedLock("redis://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match="ttl"):
        FileLock("redis://127.0.0.1/?lock=x&ttl=-1")
    with pytest.raises(ValueError, match="scheme"):
        DistributedLock("gopher://127.0.0.1/?lock=x")
    redis_url = (servers / "redis.url").read_text().strip()
    with pytest.raises(ValueError, match="NUL"):  # never a name cut short: two holders at once
        DistributedLock(redis_url + "?lock=job%00ABCDEFGHIJKLMNOP")
    for name in ("redis", "postgres"):
        url = (servers / f"{name}.url").read_text().strip().replace("secret", "wrong!")
        with pytest.raises(PermissionError) as caught:
            DistributedLock(url + "?lock=x")
        assert "wrong!" not in str(caught.value)
    with pytest.raises(PermissionError, match="password"):  # none given: refused at creation too
        DistributedLock(redis_url.replace(":secret@", "", 1) + "?lock=x")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        DistributedLock(f"redis://127.0.0.1:{port}?lock=x")
    with pytest.raises(ConnectionRefusedError):
        DistributedLock(f"postgresql://postgres:secret@127.0.0.1:{port}/postgres?lock=x")


def test_postgres_bad_libpq_options_are_refused_at_once(servers):
    """Options libpq rejects before connecting give its own message: ValueError for a bad option or
    value, ConnectionRefusedError for a socket directory with no server; never a wait for an
    answer that cannot come ("no answer within ...")."""
    url = (servers / "postgres.url").read_text().strip() + "?lock=x&connect_timeout=2"
    for extra, error, says in (("&sslmode=bogus", ValueError, "sslmode"), ("&foo=bar", ValueError, "foo"),
                               ("&host=/nonexistent", ConnectionRefusedError, "/nonexistent")):
        with pytest.raises(error) as caught:
            DistributedLock(url + extra)
        assert says in str(caught.value) and "no answer" not in str(caught.value), caught.value


def test_postgres_server_probes_a_silent_holder_within_connect_timeout(servers):
    """The server side of a lock's session probes a silent client after connect_timeout (TCP
    keepalive), not after the system's 2 hours: a holder whose host died loses the lock soon."""
    import re
    url = (servers / "postgres.url").read_text().strip()
    port = url.rsplit(":", 1)[1].split("/")[0]
    lock = DistributedLock(f"{url}?lock=py{os.getpid()}-{next(_serial)}&connect_timeout=7")
    with lock.acquire(timeout=5):
        client_port = subprocess.run(
            ["psql", "-Atq", url, "-c", "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
             f"WHERE l.locktype = 'advisory' AND a.application_name LIKE 'libsync {os.getpid()} %'"],
            check=True, capture_output=True, text=True).stdout.split()
        assert len(client_port) == 1, client_port
        # The socket shows its keepalive timer while idle; while a reply is in flight (the hold's
        # own checks), it shows the retransmission timer instead: read it again then.
        deadline = time.monotonic() + 30  # (only a bound against a hang)
        while True:
            sockets = subprocess.run(["ss", "-tnoH", "state", "established", f"( sport = :{port} and dport = :{client_port[0]} )"],
                                     check=True, capture_output=True, text=True).stdout
            timer = re.search(r"timer:\(keepalive,([\d.]+)(ms|sec|min)", sockets)
            if timer or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert timer, sockets
    seconds = float(timer.group(1)) * {"ms": 0.001, "sec": 1, "min": 60}[timer.group(2)]
    assert seconds <= 7, sockets


SIGNALLED_WAITER = """
import signal, sys
from libsync.distributed_lock import DistributedLock
lock = DistributedLock(sys.argv[1])
ticks = 0
def tick(*_):
    global ticks
    ticks += 1
    if ticks == 40:
        print("ticked", flush=True)
signal.signal(signal.SIGALRM, tick)
signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
print("waiting", flush=True)
lock.acquire(timeout=60)
signal.setitimer(signal.ITIMER_REAL, 0)
print("acquired", lock.token, flush=True)
"""


def test_postgres_wait_keeps_its_place_through_signals(servers):
    """A Python wait for a held PostgreSQL lock, in a process whose signal handlers run every 5 ms
    (a profiler's or watchdog's timer), stays one queued request in one session: no reconnect,
    no lock timeout logged per 50 ms slice; it gets the lock when it is released."""
    url = (servers / "postgres.url").read_text().strip()
    target = f"{url}?lock=py{os.getpid()}-{next(_serial)}&connect_timeout=30"
    log = servers / "postgres.log"

    def waiting_session():
        out = subprocess.run(["psql", "-Atq", url, "-c", "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"],
                             check=True, capture_output=True, text=True).stdout.split()
        return out[0] if len(out) == 1 else None

    holder = DistributedLock(target)
    holder.acquire(timeout=5)
    waiter = subprocess.Popen([sys.executable, "-c", SIGNALLED_WAITER, target], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert waiter.stdout.readline().strip() == "waiting"
        deadline = time.monotonic() + 30  # (a hang guard)
        while (first := waiting_session()) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        timeouts_before = log.read_text(errors="replace").count("canceling statement due to lock timeout")
        assert waiter.stdout.readline().strip() == "ticked"  # 40 signal handlers ran meanwhile
        assert waiting_session() == first  # the same session, still queued
        assert log.read_text(errors="replace").count("canceling statement due to lock timeout") == timeouts_before
        token = holder.token
        holder.release()
        line = waiter.stdout.readline().split()
        assert line[0] == "acquired" and int(line[1]) > token
        assert waiter.wait(timeout=30) == 0
    finally:
        waiter.kill()
        waiter.wait()


def test_postgres_given_up_wait_leaves_the_lock_free(servers):
    """A wait given up by an exception from a signal handler withdraws its queued request: the
    lock, released later, goes to another process instead of to the idle object."""
    url = (servers / "postgres.url").read_text().strip()
    target = f"{url}?lock=py{os.getpid()}-{next(_serial)}"
    holder, quitter = DistributedLock(target), DistributedLock(target)
    holder.acquire(timeout=5)

    class GiveUp(Exception):
        pass

    def give_up(*_):
        raise GiveUp()
    previous = signal.signal(signal.SIGALRM, give_up)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(GiveUp):
            quitter.acquire(timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    holder.release()
    other = DistributedLock(target)
    with other.acquire(timeout=0):  # free: the quitter's request did not take it
        assert not quitter.is_locked


def test_postgres_scheme_alias_is_the_same_lock(servers):
    url = (servers / "postgres.url").read_text().strip()
    assert url.startswith("postgresql://")
    long_form, short_form = DistributedLock(url + "?lock=alias"), DistributedLock(url.replace("postgresql://", "postgres://", 1) + "?lock=alias")
    with long_form:
        assert not short_form.try_lock()
        assert short_form.holder.pid == os.getpid()
    with short_form:
        assert not long_form.try_lock()


SELF_DEADLOCK = """
import sys
from libsync.distributed_lock import DistributedLock, Timeout
held = DistributedLock(sys.argv[1])
held.acquire(timeout=5)
for spelling in sys.argv[2:]:
    other = DistributedLock(spelling)
    try:
        other.acquire()  # no timeout: it would wait for itself forever
        sys.exit(f"acquired twice through {spelling}")
    except RuntimeError as error:
        assert "never end" in str(error), error
    try:
        other.acquire(timeout=0)
        sys.exit(f"{spelling} is another lock")
    except Timeout:
        pass
print("ok")
"""


@servers_only
def test_self_deadlock_whatever_the_spelling(servers, backend):
    """A thread holding a server lock that waits for it without a timeout through an object whose
    URL spells the lock differently gets RuntimeError (EDEADLK), not a wait forever."""
    url = (servers / f"{backend}.url").read_text().strip()
    target = f"{url}?lock=spelling{os.getpid()}-{next(_serial)}"
    spellings = [target + "&connect_timeout=7", target.replace("127.0.0.1", "localhost", 1)]
    if backend == "postgres":
        spellings.append(target.replace("postgresql://", "postgres://", 1))
    else:
        spellings.append(target.replace("?lock", "/0?lock", 1))
    done = subprocess.run([sys.executable, "-c", SELF_DEADLOCK, target, *spellings], capture_output=True, text=True,
                          env=os.environ, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _first_users(url: str, barrier) -> None:
    lock = DistributedLock(url)  # connects now
    barrier.wait(30)
    lock.acquire(timeout=30)
    lock.release()


def test_postgres_first_users_race_to_make_the_token_sequence(servers):
    """Processes that use a server for the first time at once all make the token sequence
    (CREATE SEQUENCE IF NOT EXISTS fails with a unique violation when two run together)."""
    import multiprocessing
    url = (servers / "postgres.url").read_text().strip()
    context = multiprocessing.get_context("fork")
    for round in range(3):
        subprocess.run(["psql", "-q", url, "-c", "DROP SEQUENCE IF EXISTS public.libsync_fencing_token"], check=True)
        barrier = context.Barrier(8)
        workers = [context.Process(target=_first_users, args=(f"{url}?lock=first{round}", barrier)) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert [w.exitcode for w in workers] == [0] * 8


def _psql(url: str, sql: str) -> None:
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql], check=True, capture_output=True)


def test_postgres_tokens_are_one_sequence_for_every_role(servers):
    """Roles with a schema of their own (first in their search_path) share the one sequence
    public.libsync_fencing_token: tokens strictly increase across all holders. A role that may not
    use it, or make it, gets PermissionError naming the exact commands, and leaves the lock free."""
    url = (servers / "postgres.url").read_text().strip()
    port = url.rsplit(":", 1)[1].split("/")[0]
    roles = ("libsync_alice", "libsync_bob", "libsync_carol")
    def drop_roles():
        for r in roles:
            _psql(url, f"DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{r}') THEN "
                       f"EXECUTE 'DROP OWNED BY {r} CASCADE'; EXECUTE 'DROP ROLE {r}'; END IF; END $$;")
    drop_roles()
    _psql(url, "DROP SEQUENCE IF EXISTS public.libsync_fencing_token;")
    for r in roles:
        _psql(url, f"CREATE ROLE {r} LOGIN PASSWORD 'pw'; CREATE SCHEMA {r} AUTHORIZATION {r};")
    _psql(url, "GRANT CREATE ON SCHEMA public TO libsync_alice;")
    name = f"roles{os.getpid()}-{next(_serial)}"
    owner = DistributedLock(f"{url}?lock={name}")
    alice, bob, carol = (DistributedLock(f"postgresql://{r}:pw@127.0.0.1:{port}/postgres?lock={name}") for r in roles)
    try:
        with alice.acquire(timeout=5):  # the first user: makes the sequence
            pass
        _psql(url, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO libsync_bob;")
        tokens = []
        for _ in range(3):
            for lock in (alice, bob, owner):
                with lock.acquire(timeout=5):
                    tokens.append(lock.token)
        assert tokens == sorted(set(tokens)), tokens
        with pytest.raises(PermissionError, match="GRANT USAGE ON SEQUENCE public.libsync_fencing_token TO libsync_carol"):
            carol.acquire(timeout=5)
        with owner.acquire(timeout=0):  # carol's failed try left the lock free
            pass
        _psql(url, "DROP SEQUENCE public.libsync_fencing_token;")
        with pytest.raises(PermissionError, match="CREATE SEQUENCE public.libsync_fencing_token"):
            carol.acquire(timeout=5)
        with owner.acquire(timeout=0):
            pass
    finally:
        del alice, bob, carol  # (their sessions end with the objects)
        drop_roles()
        _psql(url, "CREATE SEQUENCE IF NOT EXISTS public.libsync_fencing_token;")


def test_missing_client_library_names_the_package(servers):
    script = textwrap.dedent("""
        import errno, sys
        from libsync.distributed_lock import DistributedLock
        try:
            DistributedLock(sys.argv[1])
        except OSError as error:
            assert error.errno == errno.ELIBACC, error
            print(error)
        """)
    env = dict(os.environ, LIBSYNC_HIREDIS="/nonexistent/libhiredis.so.0.14", LIBSYNC_LIBPQ="/nonexistent/libpq.so.5")
    for name, package in (("redis", "apt install libhiredis0.14"), ("postgres", "apt install libpq5")):
        url = (servers / f"{name}.url").read_text().strip() + "?lock=x"
        out = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, env=env, check=True).stdout
        assert package in out


@pytest.fixture
def async_commit_postgres():
    """A private PostgreSQL server of its own (it is crashed) running with
    synchronous_commit=off, whose WAL writer waits 10 s between flushes: a commit's WAL is
    written only when someone asks for it."""
    directory = Path(tempfile.mkdtemp(prefix="libsync-pg-async-"))  # (in /tmp: the postgres user enters it)
    if subprocess.run([str(SERVERS_SCRIPT), "start-postgres", str(directory)]).returncode != 0:
        subprocess.run(["rm", "-rf", str(directory)])
        pytest.skip("!!!!!! SKIPPING: scripts/servers.sh could not install or start PostgreSQL !!!!!!")
    try:
        url = (directory / "postgres.url").read_text().strip()
        _psql(url, "ALTER SYSTEM SET synchronous_commit = off")
        _psql(url, "ALTER SYSTEM SET wal_writer_delay = '10s'")
        control(directory, "restart", "postgres")
        yield directory, url
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


def test_postgres_tokens_survive_crashes_with_asynchronous_commits(async_commit_postgres):
    """A server that commits asynchronously (synchronous_commit=off) and crashes (pg_ctl stop -m
    immediate) right after handing out tokens: every token issued after the crash is above every
    token issued before it."""
    directory, url = async_commit_postgres
    lock = DistributedLock(f"{url}?lock=crash")
    issued = 0
    for crash in range(4):
        for _ in range(40):  # (a sequence logs ahead every 32 values)
            with lock.acquire(timeout=30):
                assert lock.token > issued, (crash, lock.token, issued)
                issued = lock.token
        control(directory, "restart", "postgres")  # pg_ctl stop -m immediate; start
    with lock.acquire(timeout=30):
        assert lock.token > issued, (lock.token, issued)


class _Redis:
    """A plain connection to the test's Redis server (to watch its keys from outside)."""

    def __init__(self, url: str):
        import socket
        port = int(url.rsplit(":", 1)[1].split("/")[0].split("?")[0])
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.input = self.sock.makefile("rb")
        assert self.ask("AUTH", "secret") == "OK"

    def ask(self, *words: str):
        self.sock.sendall(f"*{len(words)}\r\n".encode() + b"".join(f"${len(w)}\r\n{w}\r\n".encode() for w in words))
        line = self.input.readline().decode().rstrip("\r\n")
        kind, rest = line[0], line[1:]
        if kind == ":":
            return int(rest)
        if kind == "$":
            return None if rest == "-1" else self.input.read(int(rest) + 2)[:-2].decode()
        assert kind == "+", line
        return rest

    def close(self):
        self.sock.close()


def _lock_key(target: str) -> str:
    return "libsync:lock:" + target.split("lock=", 1)[1].split("&", 1)[0]


def _stop_just_before_a_renewal(pid: int, redis: _Redis, key: str, ttl: float) -> None:
    """SIGSTOPs the holder `pid` when its lease has the least time left that it ever has while
    held: watching the key's time to live on the server over two renewals (its jumps up), then
    stopping the holder once it is within 1% of ttl of the lowest seen, just before the next
    renewal. (If that moment does not come again within 20 s, it stops the holder anyway.)"""
    lowest, previous, jumps = None, None, 0
    while jumps < 2:
        left = redis.ask("PTTL", key)
        assert left > 0, left
        if previous is not None and left > previous + 10:
            jumps += 1
        lowest = left if lowest is None else min(lowest, left)
        previous = left
        time.sleep(0.002)
    give_up = time.monotonic() + 20
    while redis.ask("PTTL", key) > lowest + 10 * ttl and time.monotonic() < give_up:
        time.sleep(0.002)
    os.kill(pid, signal.SIGSTOP)


PAUSED_HOLDER = """
import sys
from libsync.distributed_lock import DistributedLock
lock = DistributedLock(sys.argv[1])
lock.try_lock() or sys.exit(3)
print("holding", flush=True)
sys.stdin.readline()        # (after its pause)
lock.release()              # LockLostError if the lease was lost
print("released", flush=True)
"""


def test_redis_holder_stopped_for_less_than_ttl_keeps_the_lock(servers):
    """The promise: a holder stopped for less than ttl keeps the lock, even one stopped just
    before a renewal was due. Stopped there for 0.75 ttl: nobody else acquires it meanwhile,
    and its release succeeds afterwards."""
    ttl = 4.0
    target = f"{(servers / 'redis.url').read_text().strip()}?lock=py{os.getpid()}-{next(_serial)}&ttl={ttl}"
    redis, other = _Redis((servers / "redis.url").read_text().strip()), DistributedLock(target)
    holder = subprocess.Popen([sys.executable, "-c", PAUSED_HOLDER, target], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert holder.stdout.readline().strip() == "holding"
        _stop_just_before_a_renewal(holder.pid, redis, _lock_key(target), ttl)
        resume = time.monotonic() + 0.75 * ttl
        taken = False
        while time.monotonic() < resume and not taken:
            taken = other.try_lock()
            time.sleep(0.01)
        holder.send_signal(signal.SIGCONT)
        assert not taken, "another client acquired the lock while its holder was stopped for less than ttl"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
        redis.close()


def test_redis_killed_holder_frees_the_lock_within_ttl_and_a_third(servers):
    """A holder that dies leaves its lease for ttl to 4/3 ttl (on another host: on this host
    a blocking acquire takes a dead holder's lock over at once, which try_lock never does): still
    held 0.5 ttl after a SIGKILL, free 2 ttl after it."""
    ttl = 2.0
    target = f"{(servers / 'redis.url').read_text().strip()}?lock=py{os.getpid()}-{next(_serial)}&ttl={ttl}"
    holder = spawn_holder(target)
    other = DistributedLock(target)
    time.sleep(ttl / 2)  # (renewed meanwhile)
    holder.kill()
    killed = time.monotonic()
    holder.wait()
    time.sleep(max(0.0, killed + 0.5 * ttl - time.monotonic()))
    assert not other.try_lock()
    time.sleep(max(0.0, killed + 2 * ttl - time.monotonic()))
    assert other.try_lock()
    other.release()


def _request_queued(pid: int, port: int) -> bool:
    """Whether a request of process `pid` waits, unread, in the receive queue of the server
    listening on 127.0.0.1:`port` (from /proc: the server-side socket whose peer is one of
    `pid`'s sockets)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    mine = {int(row[1].split(":")[1], 16) for row in rows if row[9] in inodes and int(row[2].split(":")[1], 16) == port}
    return any(int(row[1].split(":")[1], 16) == port and int(row[2].split(":")[1], 16) in mine
               and int(row[4].split(":")[1], 16) > 0 for row in rows)


STOPPED_IN_ACQUIRE = """
import sys
from libsync.distributed_lock import DistributedLock
lock = DistributedLock(sys.argv[1])
with lock:                  # (connected, script loaded: the try below is one request)
    pass
print("ready", flush=True)
sys.stdin.readline()
print("acquired" if lock.try_lock() else "busy", flush=True)
"""


def test_redis_grant_read_after_its_lease_ran_out_is_refused(servers):
    """A client stopped right after sending its acquire, whose lease the server grants and then
    expires, and another client takes, before the first reads the answer: the first must not
    report the lock as acquired (its try says busy), and the other still holds it."""
    url = (servers / "redis.url").read_text().strip()
    target = f"{url}?lock=py{os.getpid()}-{next(_serial)}&ttl=1&connect_timeout=60"
    redis, other = _Redis(url), DistributedLock(target)
    client = subprocess.Popen([sys.executable, "-c", STOPPED_IN_ACQUIRE, target], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert client.stdout.readline().strip() == "ready"
        control(servers, "pause", "redis")
        try:
            client.stdin.write("\n")
            client.stdin.flush()
            give_up = time.monotonic() + 60  # (a hang guard)
            while not _request_queued(client.pid, redis.port):
                assert time.monotonic() < give_up
                time.sleep(0.001)
            client.send_signal(signal.SIGSTOP)  # sent, its answer not read
            os.waitpid(client.pid, os.WUNTRACED)
        finally:
            control(servers, "resume", "redis")
        key = _lock_key(target)
        while redis.ask("EXISTS", key) == 0:  # the server granted it...
            assert time.monotonic() < give_up
            time.sleep(0.001)
        while redis.ask("EXISTS", key) == 1:  # ...and the lease ran out
            assert time.monotonic() < give_up
            time.sleep(0.01)
        assert other.try_lock()
        client.send_signal(signal.SIGCONT)
        assert client.stdout.readline().strip() == "busy"
        assert client.wait(timeout=30) == 0
        assert other.is_locked
        other.release()
    finally:
        client.kill()
        client.wait()
        redis.close()


def test_cancel_check_ends_a_wait_on_every_backend(make_target):
    """cancel_check is asked inside the core's wait (PostgreSQL: between the slices of its wait in
    the server): True raises Timeout, and the wait leaves nothing queued behind it."""
    target = make_target()
    holder, waiter = DistributedLock(target), FileLock(target)
    holder.acquire(timeout=30)
    calls = []
    with pytest.raises(Timeout):
        waiter.acquire(timeout=60, poll_interval=0.001, cancel_check=lambda: calls.append(1) or len(calls) >= 3)
    assert len(calls) == 3 and not waiter.is_locked
    holder.release()
    with waiter.acquire(timeout=30):  # the lock goes to whoever asks next, not to the given-up wait
        assert waiter.is_locked and not holder.try_lock()
    assert holder.try_lock()
    holder.release()
