"""Lock-order checking from Python (libsync.debug): inversions reported with their Python stacks,
consistent orders not, reused memory gives no false report, abort and LIBSYNC_CHECK_LOCK_ORDER
in child interpreters, and the waits of a real deadlock (child killed afterwards)."""
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import libsync
from libsync import debug
from libsync.locks import Mutex, RWLock, SpinLock, synchronized

HANG_GUARD = 60  # seconds: only against a hang


@pytest.fixture
def reports():
    """Checking on, reports collected into the list this fixture gives; all off afterwards."""
    got = []
    debug.reset()
    debug.set_handler(got.append)
    debug.check_lock_order(True)
    yield got
    debug.check_lock_order(False)
    debug.set_handler(None)
    debug.reset()


def in_order(first, second):
    with first:
        with second:
            pass


def take_a_then_b(a, b):
    in_order(a, b)


def take_b_then_a(a, b):
    in_order(b, a)


def run_thread(target, *args):
    thread = threading.Thread(target=target, args=args)
    thread.start()
    thread.join()
    return thread


def test_two_thread_inversion_is_reported_with_both_python_stacks(reports):
    a, b = libsync.Lock(), libsync.Lock()
    first = run_thread(take_a_then_b, a, b)
    assert reports == []
    second = run_thread(take_b_then_a, a, b)  # after the first has ended: no deadlock
    assert len(reports) == 1
    cycle = reports[0]
    assert len(cycle.edges) == 2
    ab = next(e for e in cycle.edges if e.from_lock == debug.address_of(a))
    ba = next(e for e in cycle.edges if e.from_lock == debug.address_of(b))
    assert ab.to_lock == debug.address_of(b) and ba.to_lock == debug.address_of(a)
    assert ab.thread == first.native_id and ba.thread == second.native_id
    assert "in take_a_then_b" in ab.site and "in take_b_then_a" in ba.site
    assert "Python stack" in ab.site
    assert "potential deadlock" in str(cycle)
    in_order(b, a)  # once per cycle
    in_order(a, b)
    assert len(reports) == 1


def test_consistent_order_over_a_hundred_locks_reports_nothing(reports):
    locks = [libsync.Lock() if i % 2 else Mutex() for i in range(100)]

    def worker(t):
        for round_ in range(5):
            taken = [lock for i, lock in enumerate(locks) if (i + round_ + t) % 3]
            for lock in taken:
                lock.acquire()
            for lock in (taken if round_ % 2 else reversed(taken)):
                lock.release()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reports == []
    in_order(locks[99], locks[0])  # one step against the order: the check can fail
    assert len(reports) == 1


def test_three_lock_cycle_across_kinds(reports):
    a, b, c = Mutex(), RWLock(), SpinLock()
    with a:
        with b.write():
            pass
    with b.read():
        with c:
            pass
    assert reports == []
    with c:
        with a:
            pass
    assert len(reports) == 1
    edges = reports[0].edges
    assert len(edges) == 3
    assert all(edges[i].to_lock == edges[(i + 1) % 3].from_lock for i in range(3))
    assert {e.from_lock for e in edges} == {debug.address_of(x) for x in (a, b, c)}
    assert {e.from_kind for e in edges} >= {"mutex", "spin lock"}


@pytest.mark.parametrize("write_first", [True, False])
def test_each_edge_names_the_rwlock_side_taken_on_it(reports, write_first):
    cache, m = RWLock(), Mutex()
    first, second = (cache.write, cache.read) if write_first else (cache.read, cache.write)
    with first():
        with m:
            pass
    with m:
        with second():
            pass
    assert len(reports) == 1
    edges = reports[0].edges
    out = next(e for e in edges if e.from_lock == debug.address_of(cache))
    into = next(e for e in edges if e.to_lock == debug.address_of(cache))
    first_kind, second_kind = ("rwlock (write)", "rwlock (read)") if write_first else ("rwlock (read)", "rwlock (write)")
    assert (out.from_kind, out.to_kind) == (first_kind, "mutex")
    assert (into.from_kind, into.to_kind) == ("mutex", second_kind)
    text = str(reports[0])
    assert f"{first_kind} {debug.address_of(cache):#x} -> mutex" in text
    assert f"mutex {debug.address_of(m):#x} -> {second_kind}" in text


def test_upgradable_read_is_checked_and_an_upgrade_changes_the_mode(reports):
    """The upgradable side is a side of its own in reports; after an upgrade the hold is the
    write side (its later edges say so)."""
    cache, m, n = RWLock(), Mutex(), Mutex()
    with cache.upgradable():
        with m:
            pass
    with m:
        with cache.upgradable():
            pass
    assert len(reports) == 1
    kinds = {(e.from_kind, e.to_kind) for e in reports[0].edges}
    assert kinds == {("rwlock (upgradable read)", "mutex"), ("mutex", "rwlock (upgradable read)")}
    with cache.upgradable() as guard:
        guard.upgrade()
        with n:
            pass
    with n:
        with cache.read():
            pass
    assert len(reports) == 2
    kinds = {(e.from_kind, e.to_kind) for e in reports[1].edges}
    assert kinds == {("rwlock (write)", "mutex"), ("mutex", "rwlock (read)")}


def test_rlock_condition_and_synchronized(reports):
    token = object()
    r, condition = libsync.RLock(), libsync.Condition(libsync.Lock())
    with synchronized(token):
        with r:
            with r:
                pass
    with r:
        with condition:
            pass
    assert reports == []
    with condition:
        with synchronized(token):
            pass
    assert len(reports) == 1
    edges = reports[0].edges
    assert len(edges) == 3
    assert any(e.from_kind == "synchronized" and e.from_lock == id(token) for e in edges)
    assert any(e.from_lock == debug.address_of(condition) for e in edges)


def test_condition_lock_and_non_blocking_acquire(reports):
    a, b = libsync.ConditionLock(0), libsync.Lock()
    with a:
        assert b.acquire(blocking=False)  # a trylock: no order a -> b
        b.release()
    in_order(b, a)
    assert reports == []
    with a:
        assert b.acquire(timeout=5)        # a blocking acquire (with a timeout) is a lock
        b.release()
    assert len(reports) == 1


def test_freed_locks_and_reused_memory_give_no_false_report(reports):
    for _ in range(200):
        a, b = libsync.Lock(), libsync.Lock()
        in_order(a, b)
        del a, b
    gc.collect()
    for _ in range(200):
        a, b = libsync.Lock(), libsync.Lock()
        in_order(b, a)
        del a, b
    assert reports == []

    # Caller memory initialized again: new locks; attached (not initialized): the same locks.
    buffer = bytearray(64)
    a, b = Mutex(buffer, 0, initialize=True), Mutex(buffer, 8, initialize=True)
    in_order(a, b)
    a, b = Mutex(buffer, 8, initialize=True), Mutex(buffer, 0, initialize=True)
    in_order(a, b)
    assert reports == []
    c, d = Mutex(buffer, 0, initialize=False), Mutex(buffer, 8, initialize=False)
    in_order(c, d)
    assert len(reports) == 1


def test_a_spin_lock_initialized_again_starts_without_orders(reports):
    buffer = bytearray(16)
    other = Mutex()
    first = SpinLock(buffer, 0, initialize=True)
    in_order(first, other)
    again = SpinLock(buffer, 0, initialize=True)  # a new lock in the same memory
    in_order(other, again)
    assert reports == []
    in_order(SpinLock(buffer, 0, initialize=False), other)  # attached: the same lock
    assert len(reports) == 1


def test_off_records_nothing_and_bad_input():
    debug.reset()
    got = []
    debug.set_handler(got.append)
    try:
        assert not debug.is_checking()
        a, b = libsync.Lock(), libsync.Lock()
        in_order(a, b)
        in_order(b, a)
        assert got == []
    finally:
        debug.set_handler(None)
    with pytest.raises(TypeError):
        debug.check_lock_order("yes")
    with pytest.raises(ValueError):
        debug.set_action("explode")
    with pytest.raises(TypeError):
        debug.set_handler(42)
    with pytest.raises(TypeError):
        debug.address_of(object())
    assert "no wait-for cycle" in debug.waits()


def test_lock_released_while_off_is_not_held_when_back_on(reports):
    a, b = libsync.Lock(), libsync.Lock()
    a.acquire()
    debug.check_lock_order(False)
    a.release()                 # unseen
    debug.check_lock_order(True)
    with b:                     # no order a -> b: a is free
        pass
    in_order(b, a)              # the only order
    assert reports == []
    assert "holds" not in debug.waits()


def test_handler_that_raises_is_reported_and_checking_goes_on(reports, capfd):
    def broken(cycle):
        raise RuntimeError("handler bug")
    debug.set_handler(broken)
    a, b = libsync.Lock(), libsync.Lock()
    in_order(a, b)
    in_order(b, a)
    err = capfd.readouterr().err
    assert "handler raised" in err and "handler bug" in err
    assert debug.is_checking()


INVERSION = """
    import libsync
    def take_a_then_b(a, b):
        with a:
            with b: pass
    def take_b_then_a(a, b):
        with b:
            with a: pass
    a, b = libsync.Lock(), libsync.Lock()
    take_a_then_b(a, b)
    take_b_then_a(a, b)
    print("survived", flush=True)
"""


def run_child(script, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=HANG_GUARD)


def test_default_report_goes_to_stderr_with_python_stacks():
    proc = run_child("import libsync.debug\nlibsync.debug.check_lock_order(True)\n" + textwrap.dedent(INVERSION))
    assert proc.returncode == 0 and "survived" in proc.stdout
    assert "potential deadlock: lock-order cycle of 2 locks" in proc.stderr
    assert "in take_a_then_b" in proc.stderr and "in take_b_then_a" in proc.stderr


def test_abort_action_aborts_in_a_child():
    proc = run_child("import libsync.debug\nlibsync.debug.set_action('abort')\nlibsync.debug.check_lock_order(True)\n"
                     + textwrap.dedent(INVERSION))
    assert proc.returncode == -signal.SIGABRT
    assert "potential deadlock" in proc.stderr and "survived" not in proc.stdout


@pytest.mark.parametrize("value, aborts", [("1", False), ("abort", True)])
def test_environment_variable_turns_checking_on_in_a_child(value, aborts):
    proc = run_child(INVERSION, LIBSYNC_CHECK_LOCK_ORDER=value)
    assert "potential deadlock" in proc.stderr
    assert "in take_b_then_a" in proc.stderr  # Python stacks: the package saw it on at import
    if aborts:
        assert proc.returncode == -signal.SIGABRT
    else:
        assert proc.returncode == 0 and "survived" in proc.stdout


def test_environment_variable_not_understood_leaves_checking_off():
    proc = run_child(INVERSION, LIBSYNC_CHECK_LOCK_ORDER="maybe")
    assert proc.returncode == 0 and "survived" in proc.stdout
    assert "not understood" in proc.stderr and "potential deadlock" not in proc.stderr


DEADLOCK = """
    import sys, threading, time
    import libsync
    from libsync import debug
    debug.set_handler(lambda cycle: None)
    debug.check_lock_order(True)
    a, b = libsync.Lock(), libsync.Lock()
    both = threading.Barrier(2)
    def hold_then_take(first, second):
        with first:
            both.wait()
            second.acquire()  # never returns: the other thread holds it and waits for ours
    for first, second in ((a, b), (b, a)):
        threading.Thread(target=hold_then_take, args=(first, second), daemon=True).start()
    deadline = time.monotonic() + 60  # against a hang only
    while "deadlock: wait-for cycle" not in debug.waits() and time.monotonic() < deadline:
        time.sleep(0.001)
    print(hex(debug.address_of(a)), hex(debug.address_of(b)), flush=True)
    debug.dump_waits(sys.stdout)
    print("END", flush=True)
    while True:
        time.sleep(1)
"""


def test_waits_show_a_real_deadlock_and_sigquit_dumps_them():
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(DEADLOCK)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ)
    try:
        addresses = proc.stdout.readline().split()
        lines = []
        for line in proc.stdout:
            if line == "END\n":
                break
            lines.append(line)
        dump = "".join(lines)
        assert "deadlock: wait-for cycle" in dump
        assert dump.count("<-- deadlock") == 2
        for address in addresses:
            assert f"mutex {address}" in dump
        # SIGQUIT (disposition default in Python) prints the same to stderr, and the process goes on.
        proc.send_signal(signal.SIGQUIT)
        err = ""
        deadline = time.monotonic() + HANG_GUARD
        while "deadlock: wait-for cycle" not in err and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            err += line
        assert "deadlock: wait-for cycle" in err
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_shared_lock_keeps_its_orders_when_a_wrapper_goes(reports):
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(create=True, size=64)
    try:
        libsync.Lock(shm.buf, 0, initialize=True)
        other = libsync.Lock()
        with libsync.Lock(shm.buf, 0, initialize=False):  # a short-lived attachment, as another
            with other:                                   # process makes
                pass
        gc.collect()
        with other:
            with libsync.Lock(shm.buf, 0, initialize=False):
                pass
        assert len(reports) == 1
    finally:
        gc.collect()
        shm.close()
        shm.unlink()


def rotate(cache, accounts):
    with cache.write():
        with accounts:
            pass


def test_names_of_locks_and_python_threads_are_in_reports(reports):
    accounts, cache = Mutex(name="accounts"), RWLock(name="cache")
    with accounts:
        with cache.read():
            pass
    thread = threading.Thread(target=rotate, args=(cache, accounts), name="rotate-log")
    thread.start()
    thread.join()
    assert len(reports) == 1
    edge = next(e for e in reports[0].edges if e.from_lock == debug.address_of(cache))
    assert (edge.from_name, edge.to_name, edge.thread_name) == ("cache", "accounts", "rotate-log")
    text = str(reports[0])
    assert (f'rwlock (write) "cache" {debug.address_of(cache):#x} -> mutex "accounts" {debug.address_of(accounts):#x}, '
            f'first in this order in thread {thread.native_id} "rotate-log" at:') in text
    # threading.py's own frames (the thread's bootstrap) are not in the stacks.
    assert "in rotate" in edge.site and "threading.py" not in edge.site and "_bootstrap" not in edge.site


def test_every_lock_kind_takes_a_name(reports):
    token = object()
    locks = {"lock": libsync.Lock(name="lock"), "mutex": Mutex(name="mutex"), "rlock": libsync.RLock(name="rlock"),
             "rwlock": RWLock(name="rwlock"), "spin": SpinLock(name="spin"),
             "condition": libsync.Condition(name="condition"),
             "condition on a lock": libsync.Condition(libsync.Lock(), name="condition on a lock"),
             "condition lock": libsync.ConditionLock(name="condition lock")}
    with synchronized(token, name="token"):
        for name, lock in locks.items():
            with lock.write() if isinstance(lock, RWLock) else lock:
                assert f'"{name}" {debug.address_of(lock):#x}' in debug.waits()
        assert f'synchronized "token" {id(token):#x}' in debug.waits()


def test_a_name_goes_with_its_memory(reports):
    buffer = bytearray(64)
    Mutex(buffer, 0, initialize=True, name="old")
    attached = Mutex(buffer, 0, initialize=False)  # attaching keeps the name
    with attached:
        assert '"old"' in debug.waits()
    renewed = Mutex(buffer, 0, initialize=True)    # initializing again forgets it
    with renewed:
        assert '"old"' not in debug.waits()


def test_names_are_checked():
    for kind in (libsync.Lock, Mutex, libsync.RLock, RWLock, SpinLock, libsync.ConditionLock):
        with pytest.raises(TypeError):
            kind(name=b"bytes")
        for bad in ("", "two\nlines", "nul\0"):
            with pytest.raises(ValueError):
                kind(name=bad)
    with pytest.raises(TypeError):
        libsync.Condition(threading.Lock(), name="not a libsync lock")
    with pytest.raises(ValueError):
        synchronized(object(), name="")


def test_waits_name_a_blocked_python_thread(reports):
    gate = Mutex(name="gate")
    gate.acquire()
    waiter = threading.Thread(target=lambda: gate.acquire() and gate.release(), name="waiter")
    waiter.start()
    deadline = time.monotonic() + HANG_GUARD
    while f'thread {waiter.native_id} "waiter"' not in debug.waits() and time.monotonic() < deadline:
        time.sleep(0.01)
    text = debug.waits()
    gate.release()
    waiter.join()
    assert f'thread {waiter.native_id} "waiter"\n      waits for mutex "gate"' in text
    assert f'held by thread {threading.get_native_id()} "MainThread"' in text
