"""Helpers shared by the test modules."""
import os
import signal
import subprocess
import sys
import textwrap
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
