"""Queues, executors and isolated values from Python: FIFO, barriers, results and exceptions,
the async exception handler, re-entrancy, shutdown."""
import os
import signal
import threading
import time

import pytest

from libsync import queues
from libsync.queues import (ConcurrentQueue, DeadlockError, IsolatedValue, SerialQueue,
                            ThreadExecutor, set_exception_handler)


def run_threads(count, target):
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_serial_sync_returns_results_and_raises_exceptions():
    q = SerialQueue("test")
    assert q.sync(lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        q.sync(lambda: 1 / 0)
    with pytest.raises(TypeError):
        q.sync(42)
    q.close()
    with pytest.raises(RuntimeError):
        q.sync(lambda: 1)


def test_serial_queue_is_fifo_under_concurrent_submitters():
    q = SerialQueue()
    log = []
    run_threads(4, lambda s: [q.async_(lambda s=s, i=i: log.append((s, i))) for i in range(500)])
    q.sync(lambda: None)
    assert len(log) == 2000
    for s in range(4):
        assert [i for (t, i) in log if t == s] == list(range(500))
    q.close()


def test_reentrant_sync_raises_instead_of_deadlocking():
    q, other = SerialQueue(), ConcurrentQueue()
    with pytest.raises(DeadlockError):
        q.sync(lambda: q.sync(lambda: None))
    with pytest.raises(DeadlockError):
        q.sync(lambda: other.sync(lambda: q.sync(lambda: None)))
    with pytest.raises(DeadlockError):
        other.barrier_sync(lambda: other.barrier_sync(lambda: None))


def test_barriers_run_alone_after_earlier_work_and_before_later_work():
    q = ConcurrentQueue()
    state = {"readers": 0, "in_barrier": False, "done": 0, "violations": 0}
    lock = threading.Lock()

    def reader():
        with lock:
            state["readers"] += 1
            state["violations"] += state["in_barrier"]
        time.sleep(0)
        with lock:
            state["readers"] -= 1
            state["done"] += 1

    def barrier(before):
        with lock:
            state["in_barrier"] = True
            state["violations"] += state["readers"] != 0 or state["done"] != before
        time.sleep(0)
        with lock:
            state["in_barrier"] = False
            state["done"] += 1

    submitted = 0
    for i in range(600):
        q.async_(reader)
        submitted += 1
        if i % 20 == 0:
            q.barrier_async(lambda before=submitted: barrier(before))
            submitted += 1
    assert q.barrier_sync(lambda: state["done"]) == submitted
    assert state["violations"] == 0
    q.close()


def test_async_exceptions_reach_the_handler():
    seen = []
    set_exception_handler(lambda exc, owner: seen.append((type(exc), owner)))
    try:
        q = SerialQueue()
        q.async_(lambda: 1 / 0)
        q.sync(lambda: None)
        assert seen == [(ZeroDivisionError, q)]
        with ThreadExecutor() as e:
            e.async_(lambda: [][1])
        assert seen[1] == (IndexError, e)
    finally:
        set_exception_handler(None)


def test_default_handler_prints_like_an_unhandled_thread_exception(capsys, monkeypatch):
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # pytest sets its own
    q = SerialQueue()
    q.async_(lambda: 1 / 0)
    q.close()
    err = capsys.readouterr().err
    assert "Exception in thread" in err and "ZeroDivisionError" in err


def test_close_runs_pending_work_and_pending_work_keeps_the_queue_alive():
    ran = []
    q = SerialQueue()
    for i in range(50):
        q.async_(lambda i=i: (time.sleep(0.0005), ran.append(i)))
    q.close()  # waits for them
    assert ran == list(range(50))
    q = SerialQueue()
    done = threading.Event()
    for i in range(20):
        q.async_(lambda i=i: ran.append(i))
    q.async_(done.set)
    del q  # pending work still runs
    assert done.wait(5)
    assert not queues._pending


def test_executor_runs_everything_on_its_thread_in_order():
    e = ThreadExecutor()
    ident = e.sync(threading.get_ident)
    assert ident != threading.get_ident()
    assert not e.is_current and e.sync(lambda: e.is_current)
    log, wrong = [], []

    def item(s, i):
        if threading.get_ident() != ident:
            wrong.append(1)
        log.append((s, i))

    run_threads(4, lambda s: [e.async_(lambda s=s, i=i: item(s, i)) for i in range(500)])
    assert e.sync(lambda: len(log)) == 2000  # runs after all of them
    for s in range(4):
        assert [i for (t, i) in log if t == s] == list(range(500))
    assert not wrong
    with pytest.raises(KeyError):
        e.sync(lambda: {}["x"])
    with pytest.raises(DeadlockError):
        e.sync(lambda: e.sync(lambda: None))
    e.stop()


def test_executor_stop_runs_pending_work_then_refuses():
    e = ThreadExecutor()
    ran = []
    for i in range(30):
        e.async_(lambda i=i: (time.sleep(0.0005), ran.append(i)))
    e.stop()
    assert ran == list(range(30))
    with pytest.raises(RuntimeError):
        e.async_(lambda: None)
    with pytest.raises(RuntimeError):
        e.sync(lambda: None)
    e.stop()


def test_executor_in_a_forked_child_raises_instead_of_hanging():
    """The child has no executor thread: sync/async_ raise (sync never waits forever), stop
    and the finalizer return at once; the parent's executor works on."""
    e = ThreadExecutor()
    for _ in range(50):
        e.async_(lambda: time.sleep(0.0002))  # busy at the fork
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for call in (lambda: e.sync(lambda: None), lambda: e.async_(lambda: None)):
                try:
                    call()
                    os._exit(2)
                except RuntimeError as error:
                    if "fork" not in str(error):
                        os._exit(3)
            e.stop()
            del e
            code = 0
        finally:
            os._exit(code)
    assert wait_for_exit(pid) == 0
    assert e.sync(lambda: 42) == 42
    e.stop()


def wait_for_exit(pid, bound=10.0):
    """The child's exit status; kills it and fails if it has not exited within `bound` seconds
    (a guard against a hang, not a timing assertion)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the child hung")


def test_isolated_value_reads_see_whole_writes_in_order():
    iv = IsolatedValue((0, 0))
    torn = []

    def worker(_):
        for i in range(2000):
            if i % 10 == 0:
                iv.write(lambda v: (v[0] + 1, v[1] + 1))
            else:
                a, b = iv.get()
                if a != b:
                    torn.append((a, b))

    run_threads(4, worker)
    assert iv.get() == (800, 800)
    assert not torn
    log = IsolatedValue([])
    for i in range(100):
        log.write(lambda v, i=i: v + [i])
        assert log.read(lambda v: v[-1]) == i
    assert log.update(lambda v: v + ["end"])[-1] == "end"
    log.set("replaced")
    assert log.get() == "replaced"
    with pytest.raises(ValueError):
        log.update(lambda v: int(v))
    assert log.get() == "replaced"
    with pytest.raises(TypeError):
        log.read(None)
