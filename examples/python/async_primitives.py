"""asyncio forms of RWLock, Semaphore and Event: a cache that many request tasks read at once
(read side), that a refresh task rewrites alone (write side), with at most 2 upstream fetches at
a time (Semaphore) and requests that wait until the first fill (Event). Every wait suspends a
task, never the loop; a blocking thread uses the same objects with `with`."""
import asyncio

from libsync.conditions import Event, Semaphore
from libsync.locks import RWLock

cache: dict[str, int] = {}
cache_lock = RWLock()
upstream = Semaphore(2)  # at most 2 fetches in flight
warm = Event()
in_flight, most_in_flight = [0], [0]


async def fetch(key):  # e.g. an HTTP request
    async with upstream:
        in_flight[0] += 1
        most_in_flight[0] = max(most_in_flight[0], in_flight[0])
        await asyncio.sleep(0.001)
        in_flight[0] -= 1
        return len(key)


async def refresh(keys):
    values = await asyncio.gather(*(fetch(key) for key in keys))
    async with cache_lock.write():  # alone: readers wait, and wait behind it once it waits
        cache.update(zip(keys, values))
    warm.set()


async def handle(key):
    if not await warm.wait_async(timeout=5):
        return None
    async with cache_lock.read():  # many at once
        return cache.get(key)


def audit(seen):  # a thread of the same process, blocking form
    with cache_lock.read():
        seen.append(len(cache))


async def main():
    keys = ["apples", "pears", "plums", "figs", "dates"]
    requests = [asyncio.create_task(handle(key)) for key in keys]
    await refresh(keys)
    answers = await asyncio.gather(*requests)
    seen = []
    await asyncio.to_thread(audit, seen)
    print(f"answers {answers}, at most {most_in_flight[0]} fetches at once, audit saw {seen[0]} keys")
    return answers == [len(key) for key in keys] and most_in_flight[0] <= 2 and seen == [5]


if not asyncio.run(main()):
    raise SystemExit("the cache does not add up")
