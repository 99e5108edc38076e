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
