"""A cache filled on a miss: look the key up under the upgradable read (plain readers keep
reading beside it); on a miss, upgrade to insert it. No writer gets in between the look and
the insert, so each key is computed once, however many threads miss it."""
import threading

from libsync.locks import DeadlockError, RWLock

lock = RWLock()
cache: dict = {}
computed = []


def lookup(key: int) -> int:
    with lock.upgradable() as guard:
        if key not in cache:
            guard.upgrade()  # still missing: nobody wrote in between
            cache[key] = key * key
            computed.append(key)
        return cache[key]


threads = [threading.Thread(target=lambda: [lookup(i % 8) for i in range(200)]) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert sorted(computed) == list(range(8)), computed

with lock.read():  # a plain reader cannot upgrade: an error, not a hang
    try:
        lock.upgrade()
        raise SystemExit("a plain reader upgraded")
    except DeadlockError:
        print(f"{len(computed)} values computed once each; a plain reader's upgrade: DeadlockError")
