"""Attaching to shared memory from a second process never resets what the first one uses.

The parent creates every primitive in one file mapping, holds the locks and has a thread wait on
each of the others; a child interpreter (a new process, exec'd) maps the same file and makes
the mistake of the old default: without ``initialize=`` it gets TypeError, with
``initialize=True`` LockError (EBUSY), and with ``initialize=False`` it attaches (the lock still
held by the parent). The parent's releases then succeed."""
import ctypes
import errno
import gc
import json
import mmap
import os
import struct
import subprocess
import sys
import threading
import time

import pytest

from libsync import Barrier, BoundedSemaphore, ConditionLock, Event, Lock, RLock, Semaphore
from libsync.atomics import AtomicBool, AtomicInt
from libsync.locks import LockError, Mutex, RWLock, SpinLock

SIZE = 4096
# name: (make(memory, offset, initialize), how the parent keeps it busy)
KINDS = {
    "Lock": (lambda m, o, i: Lock(m, o, initialize=i), "hold"),
    "Mutex": (lambda m, o, i: Mutex(m, o, initialize=i), "hold"),
    "robust Mutex": (lambda m, o, i: Mutex(m, o, initialize=i, robust=True), "hold"),
    "RLock": (lambda m, o, i: RLock(m, o, initialize=i), "hold"),
    "robust RLock": (lambda m, o, i: RLock(m, o, initialize=i, robust=True), "hold"),
    "RWLock read": (lambda m, o, i: RWLock(m, o, initialize=i), "read"),
    "RWLock write": (lambda m, o, i: RWLock(m, o, initialize=i), "write"),
    "RWLock upgradable": (lambda m, o, i: RWLock(m, o, initialize=i), "upgradable"),
    "SpinLock": (lambda m, o, i: SpinLock(m, o, initialize=i), "hold"),
    "ConditionLock": (lambda m, o, i: ConditionLock(5, m, o, initialize=i), "hold"),
    "Semaphore": (lambda m, o, i: Semaphore(1, m, o, initialize=i), "wait"),
    "BoundedSemaphore": (lambda m, o, i: BoundedSemaphore(1, m, o, initialize=i), "wait"),
    "Event": (lambda m, o, i: Event(m, o, initialize=i), "wait"),
    "Barrier": (lambda m, o, i: Barrier(2, None, None, m, o, initialize=i), "wait"),
}
OFFSETS = {name: 64 * i for i, name in enumerate(KINDS)}
# Where each waited-on primitive counts the threads waiting (a byte offset into it).
COUNTED = {"Semaphore": 4, "BoundedSemaphore": 4, "Event": 4, "Barrier": 16}
ATOMIC_OFFSET = 64 * len(KINDS)


def _busy_in(obj, how: str) -> bool:
    """Whether an attached object sees the parent's hold or waiter (without changing either)."""
    if how == "hold":
        return obj.acquire(blocking=False) is False
    if how in ("read", "write", "upgradable"):
        return obj.acquire_write(blocking=False) is False
    if isinstance(obj, Semaphore):
        return obj.acquire(blocking=False) is False
    if isinstance(obj, Event):
        return not obj.is_set()
    return obj.n_waiting == 1


def child(path: str) -> None:
    """The second process: every mistake, then the attach; prints what each gave (JSON)."""
    with open(path, "r+b") as file:
        memory = mmap.mmap(file.fileno(), SIZE)
    outcome = {}
    for name, (make, how) in KINDS.items():
        row = outcome[name] = {}
        try:
            make(memory, OFFSETS[name], None)
            row["missing"] = "made"
        except TypeError as caught:
            row["missing"] = "initialize=True" in str(caught) and "initialize=False" in str(caught)
        try:
            make(memory, OFFSETS[name], True)
            row["initialize"] = "made"
        except LockError as caught:
            row["initialize"] = errno.errorcode.get(caught.errno)
        attached = make(memory, OFFSETS[name], False)
        row["attached"] = _busy_in(attached, how)
        del attached
    row = outcome["AtomicInt"] = {}
    try:
        AtomicInt(buffer=memory, offset=ATOMIC_OFFSET, initialize=None)
        row["missing"] = "made"
    except TypeError:
        row["missing"] = True
    try:
        AtomicInt(7, buffer=memory, offset=ATOMIC_OFFSET, initialize=False)
        row["value dropped"] = "made"
    except ValueError:
        row["value dropped"] = True
    row["attached"] = AtomicInt(buffer=memory, offset=ATOMIC_OFFSET, initialize=False).get()
    row["bool"] = AtomicBool(buffer=memory, offset=ATOMIC_OFFSET + 8, initialize=False).get()
    print(json.dumps(outcome), flush=True)
    gc.collect()


def _until_counted(memory, offset: int) -> None:
    """Waits until the word at `offset` counts a waiter (the bound only guards against a hang)."""
    deadline = time.monotonic() + 60
    while struct.unpack_from("I", memory, offset)[0] & 0x3FFFFFFF == 0:
        assert time.monotonic() < deadline, "the waiter never started waiting"
        time.sleep(0.001)


def test_a_second_process_cannot_reset_what_the_first_uses(tmp_path):
    path = tmp_path / "shared"
    path.write_bytes(bytes(SIZE))
    with open(path, "r+b") as file:
        memory = mmap.mmap(file.fileno(), SIZE)
    made = {name: make(memory, OFFSETS[name], True) for name, (make, _) in KINDS.items()}
    hits = AtomicInt(41, buffer=memory, offset=ATOMIC_OFFSET, initialize=True)
    flag = AtomicBool(True, buffer=memory, offset=ATOMIC_OFFSET + 8, initialize=True)
    waiters = []
    for name, (_, how) in KINDS.items():
        obj = made[name]
        if how == "hold":
            assert obj.acquire()
        elif how == "read":
            obj.acquire_read()
        elif how == "write":
            obj.acquire_write()
        elif how == "upgradable":
            obj.acquire_upgradable()
        else:
            if isinstance(obj, Semaphore):
                assert obj.acquire()  # its one unit: the waiter then waits
            waiter = threading.Thread(target=obj.acquire if isinstance(obj, Semaphore) else obj.wait, daemon=True)
            waiter.start()
            waiters.append(waiter)
            _until_counted(memory, OFFSETS[name] + COUNTED[name])

    script = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_attach; test_attach.child(sys.argv[1])"
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                            env=os.environ, timeout=120)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    for name in KINDS:
        assert outcome[name] == {"missing": True, "initialize": "EBUSY", "attached": True}, name
    assert outcome["AtomicInt"] == {"missing": True, "value dropped": True, "attached": 41, "bool": True}

    # Nothing was reset: every release of the parent succeeds, every waiter gets through.
    for name, (_, how) in KINDS.items():
        obj = made[name]
        if how == "hold":
            obj.release()
        elif how == "read":
            obj.release_read()
        elif how == "write":
            obj.release_write()
        elif how == "upgradable":
            obj.release_upgradable()
        elif isinstance(obj, Semaphore):
            obj.release()
        elif isinstance(obj, Event):
            obj.set()
        else:
            obj.wait()
    for waiter in waiters:
        waiter.join(60)
        assert not waiter.is_alive()
    assert made["ConditionLock"].condition == 5 and hits.get() == 41 and flag.get() is True
    # Once nothing uses them, initialize=True over them is allowed again (it starts them over).
    for name, (make, _) in KINDS.items():
        make(memory, OFFSETS[name], True)
    del made, hits, flag, obj
    gc.collect()
    memory.close()


def test_without_a_buffer_initialize_is_optional():
    """Memory of its own needs no choice (the default initializes it); a bad choice is refused."""
    assert Mutex().acquire(blocking=False) and Semaphore(2).acquire(blocking=False)
    with pytest.raises(TypeError, match="initialize must be True or False"):
        Lock(bytearray(8), initialize=1)
    buffer = bytearray(ctypes.sizeof(ctypes.c_int64))
    assert AtomicInt(9, buffer=buffer, initialize=True).get() == 9
    assert AtomicInt(buffer=buffer, initialize=False).get() == 9
