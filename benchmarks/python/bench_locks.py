"""libsync.locks beside threading.Lock/RLock and the readerwriterlock package: uncontended
acquire+release (method calls and `with`), and RWLock reads."""
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from harness import per_call_ns, per_call_ns_threads, per_statement_ns, table  # noqa: E402
from libsync import locks  # noqa: E402
from libsync.locks import Lock, Mutex, RLock, RWLock  # noqa: E402

N = 200_000


def pair(lock):
    acquire, release = lock.acquire, lock.release
    return lambda: (acquire(), release())


def with_block(lock):
    def body():
        with lock:
            pass
    return body


def acquire_release(lock):
    """ns of `acquire(); release()` on bound methods, as a program calls them."""
    return per_statement_ns("acquire(); release()", {"acquire": lock.acquire, "release": lock.release}, N)


def with_statement(lock):
    return per_statement_ns("with lock: pass", {"lock": lock}, N)


floor_lock = Lock()
table("Lock acquire()+release()", [
    ("threading.Lock", acquire_release(threading.Lock())),
    ("libsync Lock", acquire_release(Lock())),
    ("libsync Mutex", acquire_release(Mutex())),
    ("(floor: the two ctypes calls alone, no Python method)", per_statement_ns(
        "trylock(p); unlock(p)", {"trylock": locks._mutex_trylock, "unlock": locks._mutex_unlock, "p": floor_lock._p}, N)),
])
table("with lock: pass", [
    ("threading.Lock", with_statement(threading.Lock())),
    ("libsync Lock", with_statement(Lock())),
])
table("RLock acquire()+release()", [
    ("threading.RLock", acquire_release(threading.RLock())),
    ("libsync RLock", acquire_release(RLock())),
])
table("Lock, threads contending (GIL)", [
    ("threading.Lock", per_call_ns_threads(pair(threading.Lock()), N // 4, 4)),
    ("libsync Lock", per_call_ns_threads(pair(Lock()), N // 4, 4)),
], threads=4)

rows = []
try:
    from readerwriterlock import rwlock
    for name, make in [("readerwriterlock RWLockWrite (writer-preferring)", rwlock.RWLockWrite),
                       ("readerwriterlock RWLockFair", rwlock.RWLockFair)]:
        lock = make()
        reader = lock.gen_rlock()
        rows.append((name, per_call_ns(pair(reader), N // 4)))
except ImportError:
    print("(readerwriterlock not installed: pip install readerwriterlock)")
rw = RWLock()
rows.append(("libsync RWLock acquire_read+release_read", per_call_ns(lambda: (rw.acquire_read(), rw.release_read()), N)))
rows.append(("libsync RWLock with rw.read()", per_call_ns(with_block(rw.read()), N)))
table("RWLock read acquire+release", rows)
