"""libsync.locks beside threading.Lock/RLock and the readerwriterlock package: uncontended
acquire+release (method calls and `with`), and RWLock reads."""
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from harness import per_call_ns, per_call_ns_threads, table  # noqa: E402
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


floor_lock = Lock()
floor_p, trylock, unlock = floor_lock._p, locks._mutex_trylock, locks._mutex_unlock
table("Lock acquire()+release()", [
    ("threading.Lock", per_call_ns(pair(threading.Lock()), N)),
    ("libsync Lock", per_call_ns(pair(Lock()), N)),
    ("libsync Mutex", per_call_ns(pair(Mutex()), N)),
    ("(floor: the two ctypes calls alone, no wrapper)", per_call_ns(lambda: (trylock(floor_p), unlock(floor_p)), N)),
])
table("with lock: pass", [
    ("threading.Lock", per_call_ns(with_block(threading.Lock()), N)),
    ("libsync Lock", per_call_ns(with_block(Lock()), N)),
])
table("RLock acquire()+release()", [
    ("threading.RLock", per_call_ns(pair(threading.RLock()), N)),
    ("libsync RLock", per_call_ns(pair(RLock()), N)),
])
table("Lock, 4 threads contending (GIL)", [
    ("threading.Lock", per_call_ns_threads(pair(threading.Lock()), N // 4, 4)),
    ("libsync Lock", per_call_ns_threads(pair(Lock()), N // 4, 4)),
])

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
