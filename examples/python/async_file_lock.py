"""asyncio: AsyncFileLock waits with asyncio.sleep and never blocks the event loop. Give each task
its own lock object: one object shared by several tasks does not exclude them (they re-enter it
as one holder), as with filelock's AsyncFileLock."""
import asyncio
import os
import sys
import tempfile

from libsync.distributed_lock import AsyncFileLock


async def alone(lock: AsyncFileLock, inside: list, most: list) -> None:
    async with lock:                                # waits with asyncio.sleep
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        await asyncio.sleep(0.01)                   # other tasks run meanwhile
        inside[0] -= 1


async def together(lock: AsyncFileLock, inside: list, everyone_in: asyncio.Event) -> None:
    async with lock:
        inside[0] += 1
        if inside[0] == 3:
            everyone_in.set()
        await asyncio.wait_for(everyone_in.wait(), timeout=30)  # all three tasks are inside at once


async def main(path: str) -> bool:
    inside, most = [0], [0]
    await asyncio.gather(*(alone(AsyncFileLock(path), inside, most) for _ in range(3)))  # an object per task
    print(f"an object per task: at most {most[0]} task inside")

    shared, everyone_in = AsyncFileLock(path), asyncio.Event()
    await asyncio.gather(*(together(shared, inside, everyone_in) for _ in range(3)))      # one object shared
    print("one object shared by three tasks: all three were inside together (no exclusion)")
    return most[0] == 1 and everyone_in.is_set() and not shared.is_locked


with tempfile.TemporaryDirectory() as directory:
    sys.exit(0 if asyncio.run(main(os.path.join(directory, "jobs.lock"))) else 1)
