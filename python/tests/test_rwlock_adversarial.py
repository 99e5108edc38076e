"""libsync.locks.RWLock's upgradable read used as an adversarial caller would: Ctrl-C landing
as a blocking acquire or upgrade succeeds, exceptions inside ``with lock.upgradable()``, timeouts
at their edges, many threads checking exclusion and the upgrade's atomicity, and processes (each
a new interpreter, exec'd) killed or stopped while they hold the upgradable read or upgrade."""
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
from multiprocessing import shared_memory

import pytest

from conftest import assert_ctrl_c_interrupts, in_thread, wait_until
from libsync.locks import DeadlockError, NotOwnerError, RWLock


def free(lock: RWLock) -> bool:
    """Whether nobody holds `lock` (another thread's write try gets in, and gives it back)."""
    return in_thread(lambda: lock.acquire_write(blocking=False) and (lock.release_write() or True))


# ---- Ctrl-C as the wait succeeds -----------------------------------------------------------------

# Each round: another thread holds what keeps the main thread waiting, and once the main thread
# sleeps in its wait (the lock's state says so), releases it and at once sends it SIGINT. The main thread's KeyboardInterrupt lands before, during or
# after its wait, often right as the wait's C call returns having taken the lock: whatever
# the interleaving, the lock must be free again once the main thread has released what it
# knows it holds (and an interrupted upgrade leaves exactly the upgradable read).
_CTRL_C_ROUNDS = """
import ctypes, signal, sys, threading, time
from libsync.locks import RWLock, NotOwnerError
mode, rounds = sys.argv[1], int(sys.argv[2])
lock = RWLock()
main = threading.main_thread().ident
blocker = {"acquire_upgradable": (lock.acquire_upgradable, lock.release_upgradable),
           "acquire_write": (lock.acquire_read, lock.release_read),
           "upgrade": (lock.acquire_read, lock.release_read),
           "guard": (lock.acquire_read, lock.release_read)}[mode]
interrupted = 0

state = ctypes.c_uint32.from_address(lock._p.value)  # the lock's state word (sync/locks.h)
waiting = {"acquire_upgradable": lambda: state.value & (1 << 30),  # READERS_PARKED: it sleeps
           "acquire_write": lambda: lock.waiting_writers() == 1,
           "upgrade": lambda: state.value & (1 << 26),             # UPGRADING: the upgrade waits
           "guard": lambda: state.value & (1 << 26)}[mode]

def other(ready, go):
    blocker[0]()
    ready.set()
    go.wait()
    end = time.monotonic() + 60
    while not waiting():  # the main thread is in its blocking wait (the GIL released)
        assert time.monotonic() < end, "the main thread never waited"
        time.sleep(0.0002)
    blocker[1]()
    signal.pthread_kill(main, signal.SIGINT)

def probe_free():
    got = []
    def probe():
        got.append(lock.acquire_write(blocking=False))
        if got[0]:
            lock.release_write()
    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return got[0]

for i in range(rounds):
    ready, go = threading.Event(), threading.Event()
    thread = threading.Thread(target=other, args=(ready, go))
    thread.start()
    ready.wait()
    held = "upgradable" if mode == "upgrade" else None
    if mode == "upgrade":
        lock.acquire_upgradable()
    try:
        go.set()
        if mode == "acquire_upgradable":
            lock.acquire_upgradable()
            held = "upgradable"
        elif mode == "acquire_write":
            lock.acquire_write()
            held = "write"
        elif mode == "upgrade":
            lock.upgrade()
            held = "write"
        else:
            with lock.upgradable() as guard:
                guard.upgrade()
                thread.join()
                while True:   # until the signal's handler runs, inside the block
                    pass
        thread.join()
        while True:           # until the signal's handler runs
            pass
    except KeyboardInterrupt:
        interrupted += 1
    thread.join()
    try:
        if held == "upgradable":
            lock.release_upgradable()
        elif held == "write":
            lock.release_write()
    except NotOwnerError as error:
        sys.exit(f"round {i}: held {held!r} per the caller, but: {error}")
    if not probe_free():
        sys.exit(f"round {i}: the lock is still held after KeyboardInterrupt (the caller knew of {held!r})")
print("rounds", rounds, "interrupted", interrupted, flush=True)
"""


@pytest.mark.parametrize("mode", ["acquire_upgradable", "upgrade", "guard", "acquire_write"])
def test_ctrl_c_as_the_wait_succeeds_leaves_nothing_held(mode):
    """A KeyboardInterrupt raised as the blocking C call returns, having taken the lock, gave
    the caller neither the lock nor a way to release it: the upgradable read (or, after an
    interrupted upgrade, the write side) stayed held forever."""
    rounds = 40
    child = subprocess.run([sys.executable, "-c", _CTRL_C_ROUNDS, mode, str(rounds)], capture_output=True,
                           text=True, env=os.environ, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.split()[:2] == ["rounds", str(rounds)]


# ---- Exceptions inside `with lock.upgradable()` --------------------------------------------------

class Boom(Exception):
    pass


@pytest.mark.parametrize("steps", [[], ["upgrade"], ["upgrade", "downgrade_to_upgradable"],
                                   ["downgrade"], ["upgrade", "downgrade"],
                                   ["upgrade", "downgrade_to_upgradable", "upgrade"]])
def test_exception_in_upgradable_block_releases_what_is_held(steps):
    lock = RWLock()
    with pytest.raises(Boom):
        with lock.upgradable() as guard:
            for step in steps:
                getattr(guard, step)()
            raise Boom
    assert free(lock)
    assert lock.acquire_upgradable(blocking=False)  # and the upgradable read is free too
    lock.release_upgradable()


def test_failed_step_inside_the_block_keeps_the_guard_true():
    """Misuse inside the block raises, and the block's end still releases what is held."""
    lock = RWLock()
    with pytest.raises(DeadlockError):
        with lock.upgradable() as guard:
            guard.upgrade()
            guard.upgrade()  # a second upgrade
    assert free(lock)
    with pytest.raises(NotOwnerError):
        with lock.upgradable() as guard:
            guard.downgrade_to_upgradable()  # not the writer
    assert free(lock)
    lock.acquire_read()
    with lock.upgradable() as guard:  # beside its own plain read: a timed upgrade times out
        assert guard.upgrade(timeout=0.01) is False
        assert guard.mode == "upgradable"
    lock.release_read()
    assert free(lock)


# ---- Timeouts at their edges ---------------------------------------------------------------------

def test_timeouts_at_the_edges():
    lock = RWLock()
    lock.acquire_read()
    lock.acquire_upgradable()
    for bad, error in [(-2, ValueError), (-math.inf, ValueError), (math.nan, ValueError),
                       (threading.TIMEOUT_MAX * 2, OverflowError)]:
        with pytest.raises(error):
            lock.upgrade(timeout=bad)
        with pytest.raises(error):
            in_thread(lambda: lock.acquire_upgradable(timeout=bad))
    with pytest.raises(ValueError):
        lock.upgrade(blocking=False, timeout=1)
    assert lock.upgrade(timeout=0) is False       # one try: a plain reader holds it
    assert lock.upgrade(blocking=False) is False
    assert in_thread(lambda: lock.acquire_upgradable(timeout=0)) is False
    assert in_thread(lambda: lock.acquire_read(timeout=0) and (lock.release_read() or True))  # no UPGRADING left
    # inf waits without a deadline: the upgrade ends when the reader leaves
    threading.Timer(0.01, lock.release_read).start()
    assert lock.upgrade(timeout=math.inf) is True
    lock.release_write()
    assert free(lock)


# ---- Many threads --------------------------------------------------------------------------------

def test_many_threads_keep_exclusion_and_upgrades_atomic():
    lock = RWLock()
    state = {"readers": 0, "upgradable": 0, "writers": 0, "value": 0, "failures": [], "writes": 0}
    count = threading.Lock()

    def enter(kind):
        with count:
            state[kind] += 1
            if state["writers"] > 1 or state["upgradable"] > 1 or (
                    state["writers"] and (state["readers"] or state["upgradable"])):
                state["failures"].append(dict(state, failures=None))

    def leave(kind):
        with count:
            state[kind] -= 1

    def worker(seed):
        for i in range(300):
            seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
            kind = seed % 20
            if kind < 12:
                with lock.read():
                    enter("readers")
                    leave("readers")
            elif kind < 18:
                with lock.upgradable() as guard:
                    enter("upgradable")
                    seen = state["value"]
                    leave("upgradable")
                    if kind == 17 and not guard.upgrade(timeout=0):
                        continue  # readers hold it: the block's end releases the upgradable read
                    if kind != 17:
                        guard.upgrade()
                    enter("writers")
                    if state["value"] != seen:
                        state["failures"].append(f"upgrade not atomic: read {seen}, then {state['value']}")
                    state["value"] = seen + 1
                    leave("writers")
                    if kind == 16:
                        guard.downgrade()
            else:
                with lock.write():
                    enter("writers")
                    state["value"] += 1
                    leave("writers")
    threads = [threading.Thread(target=worker, args=(i + 1,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
        assert not thread.is_alive()
    assert state["failures"] == []
    assert free(lock)


# ---- Processes: killed or stopped while holding --------------------------------------------------

_HOLDER = """
import sys
from multiprocessing import resource_tracker, shared_memory
from libsync.locks import RWLock
shm = shared_memory.SharedMemory(name=sys.argv[1])
resource_tracker.unregister(shm._name, "shared_memory")  # the parent owns it
lock = RWLock(buffer=shm, initialize=False)
lock.acquire_upgradable()
if sys.argv[2] == "upgrade":
    print("holding", flush=True)
    lock.upgrade()            # waits for the parent's plain read: killed while it waits
else:
    print("holding", flush=True)
    sys.stdin.read()          # until killed or stopped
    if sys.argv[2] == "stop":
        lock.upgrade()
        shm.buf[RWLock.SIZE] += 1
        lock.release_write()
        print("released", flush=True)
"""


def _holder(shm, how):
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, shm.name, how], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=os.environ)
    assert child.stdout.readline().strip() == "holding"
    return child


@pytest.mark.parametrize("how", ["hold", "upgrade"])
def test_killed_upgradable_holder_leaves_it_held_as_documented(how):
    """sync/locks.h: "A process that dies holding it leaves it held, as a writer does." The
    others time out (never hang past their timeout, never get in), plain readers still come and
    go unless the killed one was upgrading, and initializing the memory in use is refused."""
    shm = shared_memory.SharedMemory(create=True, size=RWLock.SIZE + 1)
    try:
        lock = RWLock(buffer=shm, initialize=True)
        if how == "upgrade":
            lock.acquire_read()
        child = _holder(shm, how)
        if how == "upgrade":
            wait_until(lambda: (int.from_bytes(shm.buf[0:4], "little") >> 26) & 1, "the child's upgrade to wait")
        child.kill()
        child.wait(60)
        child.stdin.close()
        child.stdout.close()
        assert lock.acquire_upgradable(timeout=0.05) is False
        assert lock.acquire_write(timeout=0.05) is False
        with pytest.raises(NotOwnerError):
            lock.release_upgradable()       # not the dead one's heir
        with pytest.raises(DeadlockError):
            lock.upgrade()
        if how == "upgrade":
            assert lock.acquire_read(timeout=0.05) is False  # behind the dead upgrade
            lock.release_read()                # the parent's own read still goes
        else:
            assert lock.acquire_read(timeout=0.05) is True   # beside the dead upgradable reader
            lock.release_read()
        with pytest.raises(Exception, match="in use"):
            RWLock(buffer=shm, initialize=True)
        del lock
    finally:
        shm.close()
        shm.unlink()


def test_stopped_upgradable_holder_times_others_out_then_goes_on():
    """SIGSTOP of the upgradable holder: the others' timed waits time out with nothing changed;
    after SIGCONT the holder upgrades and releases, and all of them get in."""
    shm = shared_memory.SharedMemory(create=True, size=RWLock.SIZE + 1)
    try:
        lock = RWLock(buffer=shm, initialize=True)
        shm.buf[RWLock.SIZE] = 0
        child = _holder(shm, "stop")
        os.kill(child.pid, signal.SIGSTOP)
        results = []

        def waiter(kind):
            results.append((kind, getattr(lock, f"acquire_{kind}")(timeout=0.1)))
            if results[-1][1]:
                getattr(lock, f"release_{kind}")()
        threads = [threading.Thread(target=waiter, args=(kind,)) for kind in ("upgradable", "write", "upgradable")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(results) == [("upgradable", False), ("upgradable", False), ("write", False)]
        assert lock.acquire_read(timeout=5) is True  # no writer mark left behind by the timed-out writer
        lock.release_read()
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.close()
        assert child.stdout.readline().strip() == "released"
        assert child.wait(60) == 0
        child.stdout.close()
        assert shm.buf[RWLock.SIZE] == 1
        assert lock.acquire_upgradable(timeout=30) is True
        assert lock.upgrade(timeout=0) is True
        lock.release_write()
        del lock
    finally:
        shm.close()
        shm.unlink()


# ---- Ctrl-C while blocked ------------------------------------------------------------------------

_BLOCKED_SETUP = """
    import threading
    from libsync.locks import RWLock
    lock = RWLock()
    held, leave = threading.Event(), threading.Event()
    def reader():
        lock.acquire_read()
        held.set()
        leave.wait()
        lock.release_read()
    threading.Thread(target=reader, daemon=True).start()
    held.wait()
    def other(body):
        result = []
        thread = threading.Thread(target=lambda: result.append(body()))
        thread.start()
        thread.join()
        return result[0]
    def blocked_upgrade():
        lock.acquire_upgradable()
        try:
            lock.upgrade()
        finally:  # the upgradable read kept, no upgrade left waiting: readers get in, not writers
            assert other(lambda: lock.acquire_read(timeout=10) and (lock.release_read() or True))
            assert other(lambda: lock.acquire_upgradable(blocking=False)) is False
            lock.release_upgradable()
            leave.set()
            assert other(lambda: lock.acquire_write(timeout=10) and (lock.release_write() or True))
    holder_in, holder_out = threading.Event(), threading.Event()
    def holder():
        lock.acquire_upgradable()
        holder_in.set()
        holder_out.wait()
        lock.release_upgradable()
    thread = threading.Thread(target=holder, daemon=True)
    if HOLDER:  # before the main thread blocks: the signal must find it in its acquire
        thread.start()
        holder_in.wait()
    def blocked_upgradable():
        try:
            lock.acquire_upgradable()
        finally:  # not taken; the other holder's release lets a third in
            holder_out.set()
            thread.join()
            assert other(lambda: lock.acquire_upgradable(timeout=10) and (lock.release_upgradable() or True))
            leave.set()
            assert other(lambda: lock.acquire_write(timeout=10) and (lock.release_write() or True))
    """


@pytest.mark.parametrize("blocker", ["blocked_upgrade()", "blocked_upgradable()"])
def test_ctrl_c_while_blocked_leaves_the_lock_as_it_was(blocker):
    holder = blocker == "blocked_upgradable()"
    assert_ctrl_c_interrupts(f"HOLDER = {holder}\n" + textwrap.dedent(_BLOCKED_SETUP), blocker)


# ---- Many processes ------------------------------------------------------------------------------

_WORKER = """
import sys
from multiprocessing import resource_tracker, shared_memory
from libsync.locks import RWLock
shm = shared_memory.SharedMemory(name=sys.argv[1])
resource_tracker.unregister(shm._name, "shared_memory")  # the parent owns it
lock = RWLock(buffer=shm, initialize=False)
seed, writes, failures = int(sys.argv[2]), 0, 0
view = shm.buf[RWLock.SIZE:RWLock.SIZE + 8]
for i in range(1500):
    seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
    kind = seed % 10
    if kind < 5:
        with lock.read():
            pass
    elif kind < 9:
        with lock.upgradable() as guard:
            seen = int.from_bytes(view, "little")
            if kind == 8 and not guard.upgrade(timeout=0):
                continue
            if kind != 8:
                guard.upgrade()
            failures += int.from_bytes(view, "little") != seen  # the upgrade is atomic
            view[:] = (seen + 1).to_bytes(8, "little")
            writes += 1
            if kind == 7:
                guard.downgrade()
    else:
        with lock.write():
            view[:] = (int.from_bytes(view, "little") + 1).to_bytes(8, "little")
            writes += 1
print(writes, failures, flush=True)
del view, lock, guard
shm.close()
"""


def test_processes_share_upgradable_reads():
    shm = shared_memory.SharedMemory(create=True, size=RWLock.SIZE + 8)
    try:
        lock = RWLock(buffer=shm, initialize=True)
        shm.buf[RWLock.SIZE:RWLock.SIZE + 8] = bytes(8)
        children = [subprocess.Popen([sys.executable, "-c", _WORKER, shm.name, str(seed)], stdout=subprocess.PIPE,
                                     text=True, env=os.environ) for seed in (1, 2, 3)]
        results = [child.communicate(timeout=300)[0].split() for child in children]
        assert [child.returncode for child in children] == [0, 0, 0]
        assert [int(failures) for _, failures in results] == [0, 0, 0]
        assert int.from_bytes(shm.buf[RWLock.SIZE:RWLock.SIZE + 8], "little") == sum(int(w) for w, _ in results)
        assert lock.acquire_write(blocking=False) is True
        lock.release_write()
        del lock
    finally:
        shm.close()
        shm.unlink()
