"""The distributed lock between processes, through each backend, guarding a resource that
checks fencing tokens.

    python3 examples/python/distributed_lock.py [TARGET ...]

A TARGET is a path, postgresql://user:password@host:port/db?lock=NAME or
redis://:password@host:port/db?lock=NAME. With none, it runs a path in a temporary directory and,
when scripts/servers.sh can start them, private PostgreSQL and Redis servers.

Each run: four worker processes add 1 to a counter in a shared store five times each, holding the
lock: the total comes out right. Then a holder loses its lock while it is "paused" (an operator
breaks it; with Redis a lease that runs out has the same effect), another process takes the lock
and writes, and the paused holder's late write is refused: its fencing token is older.
"""
import fcntl
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # (the source tree's package)
from libsync.distributed_lock import DistributedLock  # noqa: E402


class FencedStore:
    """A resource that remembers the largest fencing token it saw and refuses smaller ones, at
    the read as at the write (a file here; a database row, an object store, a service in real
    life). Its own steps are atomic (flock): the lock is for the clients' read-modify-write, the
    token for stale ones."""

    def __init__(self, path: str) -> None:
        self.path = path

    def value(self) -> int:
        """The value, for looking (not for a read-modify-write)."""
        with open(self.path) as f:
            return json.load(f)["value"]

    def read(self, token: int) -> Optional[int]:
        """The value, for the holder of `token`; None (refused) if a larger token was seen."""
        return self._fenced(token, None)

    def write(self, token: int, value: int) -> bool:
        return self._fenced(token, value) is not None

    def _fenced(self, token: int, value: Optional[int]) -> Optional[int]:
        with open(self.path, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            state = json.load(f)
            if token < state["highest"]:
                return None  # a holder that lost the lock: refused
            state["highest"] = token  # (recorded at the read too: a late write is refused once the new holder has read)
            if value is not None:
                state["value"] = value
            f.seek(0)
            f.truncate()
            json.dump(state, f)
            return state["value"]


def worker(target: str, store_path: str, rounds: int) -> None:
    lock, store = DistributedLock(target, timeout=30), FencedStore(store_path)
    for _ in range(rounds):
        with lock:
            assert store.write(lock.token, store.read(lock.token) + 1)


def paused_holder(target: str, store_path: str, holding, resume, result) -> None:
    lock, store = DistributedLock(target), FencedStore(store_path)
    lock.acquire()
    value = store.read(lock.token)
    holding.set()
    resume.wait()  # "paused" (a GC pause, SIGSTOP...): meanwhile the lock was broken and retaken
    result.put((store.write(lock.token, value + 100), lock.is_locked))


def run(target: str) -> None:
    print(f"== {DistributedLock(target).path}")  # (a URL is shown without its password)
    with tempfile.TemporaryDirectory() as directory:
        store_path = os.path.join(directory, "store.json")
        Path(store_path).write_text(json.dumps({"highest": 0, "value": 0}))
        context = multiprocessing.get_context("fork")
        workers = [context.Process(target=worker, args=(target, store_path, 5)) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        value = FencedStore(store_path).value()
        print(f"   4 processes x 5 increments under the lock: counter = {value}")
        assert value == 20 and all(w.exitcode == 0 for w in workers)

        holding, resume, result = context.Event(), context.Event(), context.Queue()
        paused = context.Process(target=paused_holder, args=(target, store_path, holding, resume, result))
        paused.start()
        holding.wait()
        operator = DistributedLock(target)
        print(f"   holder: {operator.holder}; an operator breaks the lock")
        operator.break_lock()
        with operator.acquire(timeout=30):
            store = FencedStore(store_path)
            store.write(operator.token, store.read(operator.token) + 1)
            print(f"   another process took it (token {operator.token}) and wrote: counter = {store.value()}")
        resume.set()
        accepted, still_held = result.get(timeout=30)
        paused.join()
        print(f"   the paused holder wakes, still thinks it holds the lock, and writes: "
              f"{'accepted' if accepted else 'REFUSED (older token)'} (is_locked: {still_held})")
        assert not accepted and not still_held and FencedStore(store_path).value() == 21


def main() -> None:
    targets = sys.argv[1:]
    if targets:
        for target in targets:
            run(target)
        return
    with tempfile.TemporaryDirectory() as directory:
        run(os.path.join(directory, "example.lock"))
        servers = Path(tempfile.mkdtemp(prefix="libsync-example-servers-"))  # (readable by the postgres user)
        script = Path(__file__).resolve().parents[2] / "scripts" / "servers.sh"
        if subprocess.run([str(script), "start", str(servers)], stdout=subprocess.DEVNULL).returncode != 0:
            print("(PostgreSQL and Redis skipped: scripts/servers.sh could not start them)")
            return
        try:
            for name in ("postgres", "redis"):
                run((servers / f"{name}.url").read_text().strip() + "?lock=example")
        finally:
            subprocess.run([str(script), "stop", str(servers)])
            subprocess.run(["rm", "-rf", str(servers)])


if __name__ == "__main__":
    main()
