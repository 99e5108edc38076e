"""What the asyncio tests share (test_aio*.py): the hang bound, waits for a condition from a
thread or a task, the count of a loop's pending operations, a thread that holds a lock, and a
shared-memory fixture."""
import asyncio
import gc
import multiprocessing
import threading
import time
from multiprocessing import shared_memory

import pytest

from libsync import _aio

SPAWN = multiprocessing.get_context("spawn")  # children exec: no forked Swift runtime
BOUND = 60.0  # seconds: only guards against a hang


@pytest.fixture
def shm():
    """128 bytes of shared memory (a primitive and a counter behind it), unlinked after."""
    memory = shared_memory.SharedMemory(create=True, size=128)
    yield memory
    gc.collect()
    memory.close()
    memory.unlink()


def until(condition, bound=BOUND):
    """Waits (a thread) until `condition()` holds; the bound only guards against a hang."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "hang"
        time.sleep(0.001)


async def until_async(condition, bound=BOUND):
    """Waits (a task) until `condition()` holds; the bound only guards against a hang."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "hang"
        await asyncio.sleep(0.001)


def pending(loop=None):
    """How many async operations the loop (the running one) waits for."""
    waits = _aio._loops.get(id(loop or asyncio.get_running_loop()))
    return 0 if waits is None else len(waits.pending)


class Holder:
    """A thread that holds `lock` (anything with acquire/release) until told to release it."""

    def __init__(self, lock):
        self.lock, self.taken, self.go = lock, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self.taken.wait(BOUND)

    def _run(self):
        self.lock.acquire()
        self.taken.set()
        self.go.wait()
        self.lock.release()

    def release(self):
        self.go.set()
        self.thread.join(BOUND)
