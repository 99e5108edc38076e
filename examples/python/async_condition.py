"""A job queue between a worker thread and asyncio tasks, on libsync's Condition: the tasks
wait with `await cond.wait_for_async(...)` (suspended, never the loop), the thread puts jobs in
with `with cond:` and `notify()`, and the tasks' results wake the thread's blocking wait."""
import asyncio
import threading

from libsync.conditions import Condition
from libsync.locks import Mutex

cond = Condition(Mutex())
jobs: list[int] = []
results: list[int] = []
closed = False


def feeder(count):  # a thread of the same process, blocking forms
    global closed
    for job in range(count):
        with cond:
            jobs.append(job)
            cond.notify()  # wakes one waiting task
    with cond:
        cond.wait_for(lambda: len(results) == count)  # woken by the tasks' notify_all
        closed = True
        cond.notify_all()


async def worker():
    while True:
        async with cond:  # the task holds the Mutex
            await cond.wait_for_async(lambda: jobs or closed)  # releases it while it waits
            if not jobs:
                return
            job = jobs.pop(0)
        await asyncio.sleep(0)  # the work, outside the lock
        async with cond:
            results.append(job * job)
            cond.notify_all()


async def main():
    thread = threading.Thread(target=feeder, args=(50,))
    thread.start()
    await asyncio.gather(*(worker() for _ in range(4)))
    await asyncio.to_thread(thread.join)
    print(f"{len(results)} jobs done, sum of squares {sum(results)}")
    return sorted(results) == [n * n for n in range(50)]


if not asyncio.run(main()):
    raise SystemExit("a job was lost or done twice")
