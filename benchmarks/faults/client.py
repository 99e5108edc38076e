"""One client of the fault workload (benchmarks/faults/faults.py starts N of them).

It loops: acquire the lock, read both counters of the resource (the fenced one with its
token), "work" a few ms, write both back incremented (the fenced one with its token), release.
Every step is logged, one JSON object per line, with CLOCK_MONOTONIC times (one clock for every
process of the host), for the driver to analyse: acquired (token), released (or the loss the
release reported), and the LOST / SUSPENDED / RESUMED events the library told the holder.

    client.py TARGET RESOURCE_SOCKET LOG CLIENT_ID CLIENTS STATE_FILE WORK_MIN WORK_MAX

While it holds the lock, byte CLIENT_ID of STATE_FILE is 1 (the driver stops or kills holders
by it, confirming the byte once the process is stopped); it ends when byte CLIENTS is 1.
"""
import json
import mmap
import os
import random
import socket
import sys
import time

from libsync.distributed_lock import DistributedLock, HoldEvent, LockLostError, Timeout


class Resource:
    """The resource service (faults.py's), over a UNIX socket: one request, one answer line."""

    def __init__(self, path: str) -> None:
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.connect(path)
        self.reader = self.socket.makefile("r")

    def ask(self, *words) -> list:
        self.socket.sendall((" ".join(str(w) for w in words) + "\n").encode())
        return self.reader.readline().split()


def main() -> None:
    target, resource_path, log_path, client, clients, state_path, work_min, work_max = sys.argv[1:9]
    client, clients, work = int(client), int(clients), (float(work_min), float(work_max))
    log = open(log_path, "a", buffering=1)
    with open(state_path, "r+b") as file:
        state = mmap.mmap(file.fileno(), 0)

    def note(kind: str, **fields) -> None:
        log.write(json.dumps(dict(t=time.monotonic(), kind=kind, client=client, pid=os.getpid(), **fields)) + "\n")

    def on_event(lock, event: HoldEvent) -> None:
        note(event.name.lower())

    resource = Resource(resource_path)
    lock = None
    while not state[clients]:
        try:
            if lock is None:
                lock = DistributedLock(target, poll_interval=0.002, on_event=on_event)
            lock.acquire(timeout=5)
        except Timeout:
            note("timeout")
            continue
        except OSError as error:  # the server restarting: try again
            note("error", error=str(error))
            lock = None
            time.sleep(0.05)
            continue
        token = lock.token
        note("acquired", token=token)
        state[client] = 1
        read = resource.ask("R", client, token)               # the fenced read: checks the token
        unfenced = int(resource.ask("UR")[0])
        time.sleep(random.uniform(*work))                     # the work of the critical section
        if read[0] == "OK":
            resource.ask("W", client, token, int(read[1]) + 1)  # the fenced write: checks it again
        resource.ask("UW", client, unfenced + 1)
        state[client] = 0
        note("releasing", token=token)
        try:
            lock.release()
            note("released", token=token)
        except LockLostError as error:
            note("release_lost", token=token, error=type(error).__name__)
        except OSError as error:
            note("release_error", token=token, error=str(error))
            lock = None  # (a server lock left behind: its session or lease ends without us)


if __name__ == "__main__":
    main()
