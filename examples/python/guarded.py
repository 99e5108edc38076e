"""A value and its lock in one object: libsync.locks.Guarded (Swift's SyncLockedValue)."""
import threading

from libsync.locks import DeadlockError, Guarded

visits = Guarded({})


def browse():
    for page in ("home", "about", "home"):
        with visits as table:  # the lock is held for the block; `table` must not escape it
            table[page] = table.get(page, 0) + 1


threads = [threading.Thread(target=browse) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()

with visits as table:
    print("visits:", table)
    counted = dict(table)
    try:
        with visits:  # the same thread again, inside the block: an error, not a hang
            pass
    except DeadlockError as e:
        print("re-entered:", e)
    else:
        raise SystemExit("re-entering did not raise")

if counted != {"home": 8, "about": 4}:
    raise SystemExit(f"lost updates: {counted}")
