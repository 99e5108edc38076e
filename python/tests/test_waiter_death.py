"""Process-shared locks whose waiters die: a waiter that leaves (woken and killed before it takes
the lock, or killed while it waits) never keeps the others waiting.

The kernel's count of the sleepers on a futex word (FUTEX_CMP_REQUEUE that wakes nobody and
requeues the sleepers onto the same word, where they keep their places) tells when each process
sleeps. The waiter that is woken and dies is a stand-in process sleeping first on the lock's
word: the kernel wakes the oldest sleeper, and the stand-in exits without taking the lock, as a
waiter SIGKILLed between its wakeup and its compare-and-swap does."""
import ctypes
import os
import platform
import signal
import threading
import time
from multiprocessing import shared_memory

import pytest

import libsync
from conftest import wait_until
from libsync.locks import Mutex, RWLock

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_CMP_REQUEUE = 0, 4
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

pytestmark = pytest.mark.skipif(_SYS_FUTEX is None, reason="futex syscall number unknown for this machine")


def _word(shm: shared_memory.SharedMemory, offset: int = 0) -> ctypes.c_uint32:
    return ctypes.c_uint32.from_buffer(shm.buf, offset)


def sleepers(word: ctypes.c_uint32) -> int:
    """How many threads sleep on the shared futex `word`, by the kernel's count."""
    address = ctypes.addressof(word)
    while True:
        n = _libc.syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_long(_FUTEX_CMP_REQUEUE),
                          ctypes.c_long(0), ctypes.c_long(2**31 - 1), ctypes.c_void_p(address),
                          ctypes.c_long(word.value))
        if n >= 0:
            return n
        assert ctypes.get_errno() == 11, os.strerror(ctypes.get_errno())  # EAGAIN: the word changed


def stand_in(word: ctypes.c_uint32) -> int:
    """A process that sleeps on `word` until woken, then exits without touching the lock."""
    pid = os.fork()
    if pid == 0:
        _libc.syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(ctypes.addressof(word)), ctypes.c_long(_FUTEX_WAIT),
                      ctypes.c_long(word.value), None, None, ctypes.c_long(0))
        os._exit(0)
    return pid


def in_child_thread(body) -> int:
    """A process whose second thread runs `body` (no interrupt slices there); exits 0 if it
    returns True."""
    pid = os.fork()
    if pid == 0:
        result = []
        thread = threading.Thread(target=lambda: result.append(body()))
        thread.start()
        thread.join()
        os._exit(0 if result == [True] else 1)
    return pid


def exit_code(pid: int, bound: float = 60.0) -> int:
    """The exit code of child `pid`; a child still running after `bound` seconds (a guard
    against a hang) is killed and fails the test."""
    deadline = time.monotonic() + bound
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"process {pid} never got the lock (a lost wakeup)")
        time.sleep(0.001)


@pytest.mark.parametrize("kind", ["Mutex", "Semaphore"])
def test_woken_waiter_that_dies_blocks_nobody(kind):
    shm = shared_memory.SharedMemory(create=True, size=64)
    word = _word(shm)
    try:
        make = {"Mutex": lambda initialize: Mutex(buffer=shm, initialize=initialize),
                "Semaphore": lambda initialize: libsync.Semaphore(0, buffer=shm, initialize=initialize)}[kind]
        lock = make(True)
        if kind == "Mutex":
            lock.acquire()
        first = stand_in(word)
        wait_until(lambda: sleepers(word) == 1, "the stand-in to sleep")

        def take():
            other = make(False)
            if not other.acquire():
                return False
            other.release()
            return True

        second = in_child_thread(take)
        wait_until(lambda: sleepers(word) == 2, "the second waiter to sleep")
        lock.release()
        assert exit_code(first) == 0   # woken, gone without taking it
        assert exit_code(second) == 0  # the live waiter found the lock free
        del lock, word
    finally:
        shm.close()
        shm.unlink()


def _writer_marked(lock: RWLock) -> bool:
    if lock.acquire_read(blocking=False):
        lock.release_read()
        return False
    return True


def test_killed_waiting_writer_stops_no_reader():
    """A writer SIGKILLed while it waits, a reader holding the lock: new readers (another
    process's, untimed, and the holder's second read lock) get in while the reader holds it."""
    shm = shared_memory.SharedMemory(create=True, size=RWLock.SIZE)
    try:
        lock = RWLock(buffer=shm, initialize=True)
        lock.acquire_read()
        writer = os.fork()
        if writer == 0:
            RWLock(buffer=shm, initialize=False).acquire_write()
            os._exit(0)
        wait_until(lambda: lock.waiting_writers() == 1 and _writer_marked(lock), "the writer to wait")
        os.kill(writer, signal.SIGKILL)
        assert exit_code(writer) == -signal.SIGKILL

        def read():
            other = RWLock(buffer=shm, initialize=False)
            other.acquire_read()
            other.release_read()
            return True

        assert exit_code(in_child_thread(read)) == 0
        assert lock.acquire_read(timeout=60) is True  # the holder's second read lock
        lock.release_read()
        lock.release_read()
        assert lock.acquire_write(timeout=60) is True
        lock.release_write()
        del lock
    finally:
        shm.close()
        shm.unlink()
