"""Apple's "Thread Safety and Signals" rule from Python, on libsync: SIGUSR1 handled on a chosen
thread (Python's own handlers only run in the main thread), with the sender's siginfo."""
import os
import signal
import sys
import threading

from libsync import signals
from libsync.queues import ThreadExecutor

done = threading.Event()
seen = []

with ThreadExecutor() as worker:
    worker_thread = worker.sync(threading.get_ident)

    def on_usr1(info):
        on_worker = threading.get_ident() == worker_thread
        print(f"SIGUSR1 from pid {info.pid} (uid {info.uid}, code {info.code}); on the worker's thread: {on_worker}")
        seen.append(on_worker)
        done.set()

    with signals.route(signal.SIGUSR1, worker, on_usr1):
        os.kill(os.getpid(), signal.SIGUSR1)
        done.wait(10)
    # Unrouted: SIGUSR1 has its previous action again (here SIG_DFL).
    print("previous action (SIG_DFL) back:", signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)

sys.exit(0 if seen == [True] else 1)
