"""Helpers shared by the test modules."""
import os
import signal
import subprocess
import sys
import textwrap
import time


def assert_ctrl_c_interrupts(setup: str, blocker: str) -> None:
    """Runs `setup`, then `blocker` in the main thread of a child interpreter, sends it SIGINT
    while it blocks, and asserts that KeyboardInterrupt got it out."""
    script = textwrap.dedent(setup) + textwrap.dedent(f"""
        import sys
        print("waiting", flush=True)
        try:
            {blocker}
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert proc.stdout.readline().strip() == "waiting"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert out.strip() == "interrupted" and proc.returncode == 0
