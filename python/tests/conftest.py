"""Helpers shared by the test modules."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time


def assert_ctrl_c_interrupts(setup: str, blocker: str) -> None:
    """Runs `setup`, then `blocker` in the main thread of a child interpreter, sends it SIGINT
    once that thread sleeps in the kernel (in the blocker's wait), and asserts that
    KeyboardInterrupt got it out."""
    script = textwrap.dedent(setup) + textwrap.dedent(f"""
        import sys
        try:
            print("waiting", flush=True)
            {blocker}
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert proc.stdout.readline().strip() == "waiting"
    _wait_until_asleep(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert out.strip() == "interrupted" and proc.returncode == 0


def _wait_until_asleep(pid: int, bound: float = 10.0) -> None:
    """Polls /proc until the main thread of `pid` sleeps (state S): it then waits in the kernel
    rather than running toward its wait (the bound only guards against a hang)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "S":
                return
        time.sleep(0.001)


def wait_until(condition, what: str, bound: float = 60.0) -> None:
    """Polls `condition`; fails after `bound` seconds (a guard against hangs, not a timing)."""
    end = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.001)


def in_thread(body):
    """Runs `body` in another thread; returns what it returned (or raises what it raised)."""
    result = {}

    def run():
        try:
            result["value"] = body()
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            result["error"] = error
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    if "error" in result:
        raise result["error"]
    return result.get("value")


# ---- Distributed-lock children (test_distributed_lock_*.py) ----------------------------------

HOLDER = """
import sys, time
from libsync.distributed_lock import DistributedLock
lock = DistributedLock(sys.argv[1])
lock.try_lock() or sys.exit(3)
print("holding", lock.token, flush=True)
time.sleep(600)
"""


def spawn_holder(target: str) -> subprocess.Popen:
    """A process holding `target` (until killed); its fencing token is the result's `token`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, target], stdout=subprocess.PIPE, text=True, env=os.environ)
    line = proc.stdout.readline().split()
    assert line and line[0] == "holding", line
    proc.token = int(line[1])
    return proc


WORKER = """
import sys
from libsync.distributed_lock import DistributedLock
target, log, worker, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = {"poll_interval": float(sys.argv[5])} if len(sys.argv) > 5 else {}
lock = DistributedLock(target, timeout=60, **options)
with open(log, "a", buffering=1) as out:
    for _ in range(rounds):
        with lock:
            out.write(f"E {worker} {lock.token}\\n")
            out.write(f"X {worker} 0\\n")
"""


def assert_exclusion_between_processes(target: str, log, poll_interval=None, workers: int = 4,
                                       rounds: int = 15) -> None:
    """Runs `workers` processes that each take `target` `rounds` times (with `poll_interval`, or
    the default), logging their entries and exits to `log`; asserts that one held it at a time
    and that the fencing tokens strictly increased from holder to holder."""
    extra = [] if poll_interval is None else [str(poll_interval)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, target, str(log), str(w), str(rounds)] + extra,
                              env=os.environ)
             for w in range(workers)]
    assert [p.wait(timeout=300) for p in procs] == [0] * workers
    holder, last, entries = None, 0, 0
    for line in log.read_text().splitlines():
        kind, worker, token = line.split()
        if kind == "E":
            assert holder is None
            assert int(token) > last  # the fencing tokens strictly increase from holder to holder
            holder, last, entries = worker, int(token), entries + 1
        else:
            assert holder == worker
            holder = None
    assert entries == workers * rounds


STOPPED_HOLDER = """
import os, sys
from libsync.distributed_lock import DistributedLock
target = sys.argv[1]
report = os.fdopen(int(sys.argv[2]), "w", buffering=1)
lock = DistributedLock(target, on_event=lambda lock, event: report.write(f"{event.name} {int(lock.lost)}\\n"))
lock.try_lock() or sys.exit(3)
report.write("holding\\n")
os.kill(os.getpid(), __import__("signal").SIGSTOP)
__import__("time").sleep(600)
"""


def spawn_stopped_holder(target):
    """A process that holds `target`, reports its events on a pipe, and stops itself; returns it
    and the pipe's reading end (a line an event: its name and whether `lost` was set)."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_HOLDER, target, str(write)], pass_fds=[write], env=os.environ)
    os.close(write)
    report = os.fdopen(read)
    try:
        assert report.readline() == "holding\n"
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, report


def assert_stopped_holder_learns_of_its_loss(target: str, take) -> None:
    """A process holds `target` and stops itself (spawn_stopped_holder); `take(lock)` takes the
    lock from it with a new DistributedLock of `target` (`lost` is then the holder's). Resumed,
    the holder must be told LOST, with `lost` set before its handler runs."""
    from libsync.distributed_lock import DistributedLock  # here: importing libsync loads it
    proc, report = spawn_stopped_holder(target)
    try:
        taker = DistributedLock(target)
        take(taker)
        proc.send_signal(signal.SIGCONT)
        assert report.readline() == "LOST 1\n"
    finally:
        proc.kill()
        proc.wait()
    taker.release()
