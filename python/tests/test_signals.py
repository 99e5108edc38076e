"""Signals routed to an executor or a queue from Python: 1,000 real-time signals from another
process in order on the executor's thread, queues, a standard signal during a busy handler, the
signal.signal handler restored by unroute, threads started before the route, SIGINT and
KeyboardInterrupt, the handler unrouting itself, fork, errors. Waits are for observable state;
their bounds only guard against hangs."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from libsync import signals
from libsync.queues import ConcurrentQueue, DeadlockError, SerialQueue, ThreadExecutor

HANG_GUARD = 60.0
SI_QUEUE, SI_TKILL = -1, -6


def wait_until(predicate, what="the condition"):
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


# A child process that sigqueues values first..first+count-1 to us (Python has no sigqueue).
SENDER = textwrap.dedent("""
    import ctypes, errno, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sigqueue.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p)  # union sigval: one word
    pid, signo, first, count = map(int, sys.argv[1:])
    for value in range(first, first + count):
        while libc.sigqueue(pid, signo, value) != 0:
            if ctypes.get_errno() != errno.EAGAIN:
                sys.exit(2)
            os.sched_yield()
    """)


def queue_from_child(signo, first, count):
    proc = subprocess.run([sys.executable, "-c", SENDER, str(os.getpid()), str(signo), str(first), str(count)],
                          timeout=HANG_GUARD)
    assert proc.returncode == 0


class Recorder:
    """Records deliveries and where they ran."""

    def __init__(self, executor=None):
        self.infos = []
        self.threads = set()
        self.executor = executor

    def __call__(self, info):
        self.threads.add(threading.get_ident())
        self.infos.append(info)


def test_info_is_a_frozen_dataclass():
    info = signals.SignalInfo(signo=10, pid=1, uid=2, code=0, value=3)
    with pytest.raises(Exception):
        info.value = 4
    assert info == signals.SignalInfo(10, 1, 2, 0, 3)


def test_errors():
    with ThreadExecutor() as executor:
        for bad in (0, -1, 65, signal.SIGKILL, signal.SIGSTOP, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE,
                    signal.SIGILL, signal.SIGPIPE, 32, 33):
            with pytest.raises(ValueError):
                signals.route(bad, executor, print)
            with pytest.raises(ValueError):
                signals.unroute(bad)
            assert not signals.is_routable(bad)
        assert signals.is_routable(signal.SIGUSR1) and signals.is_routable(signal.SIGRTMAX)
        with pytest.raises(TypeError):
            signals.route(signal.SIGUSR1, object(), print)
        with pytest.raises(TypeError):
            signals.route(signal.SIGUSR1, executor, 42)
        with pytest.raises(TypeError):
            signals.route("SIGUSR1", executor, print)
        with pytest.raises(RuntimeError):
            signals.unroute(signal.SIGUSR1)
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL

        route = signals.route(signal.SIGUSR1, executor, print)
        with pytest.raises(RuntimeError):
            signals.route(signal.SIGUSR1, executor, print)
        assert route.routed
        route.unroute()
        assert not route.routed
        route.unroute()  # idempotent
        with pytest.raises(RuntimeError):
            signals.unroute(signal.SIGUSR1)


def test_thousand_realtime_signals_from_another_process_arrive_in_order_on_the_executor_thread():
    signo = signal.SIGRTMIN + 1
    with ThreadExecutor() as executor:
        executor_thread = executor.sync(threading.get_ident)
        record = Recorder()
        with signals.route(signo, executor, record):
            queue_from_child(signo, 0, 1000)
            wait_until(lambda: len(record.infos) >= 1000, "1,000 deliveries")
            assert [info.value for info in record.infos] == list(range(1000))
            assert record.threads == {executor_thread}
            sender = {(info.signo, info.code, info.uid) for info in record.infos}
            assert sender == {(signo, SI_QUEUE, os.getuid())}
            assert len({info.pid for info in record.infos}) == 1 and record.infos[0].pid != os.getpid()
        assert len(record.infos) == 1000


@pytest.mark.parametrize("queue_type", [SerialQueue, ConcurrentQueue])
def test_queue_targets_run_the_handler_as_work_of_the_queue(queue_type):
    signo = signal.SIGRTMIN + 2
    queue = queue_type()
    values, on_queue = [], []

    def handler(info):
        values.append(info.value)
        try:
            queue.sync(lambda: None)
            on_queue.append(False)
        except DeadlockError:  # re-entrant: we are running as work of the queue
            on_queue.append(True)

    with signals.route(signo, queue, handler):
        queue_from_child(signo, 0, 50)
        wait_until(lambda: len(values) >= 50, "50 deliveries")
    assert values == list(range(50)) and all(on_queue)
    queue.close()


def test_standard_signal_sent_during_a_busy_handler_is_not_lost():
    entered, release = threading.Event(), threading.Event()
    count = []

    def busy(info):
        count.append(info)
        if len(count) == 1:
            entered.set()
            release.wait(HANG_GUARD)

    with ThreadExecutor() as executor, signals.route(signal.SIGUSR1, executor, busy):
        os.kill(os.getpid(), signal.SIGUSR1)
        assert entered.wait(HANG_GUARD)
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler is busy with the first
        release.set()
        wait_until(lambda: len(count) >= 2, "a delivery after the busy one")
    assert count[1].code == 0 and count[1].pid == os.getpid()


def test_unroute_restores_the_python_handler():
    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signo, frame: calls.append(signo))
    try:
        routed = []
        with ThreadExecutor() as executor:
            route = signals.route(signal.SIGUSR2, executor, routed.append)
            assert signal.SIGUSR2 in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            os.kill(os.getpid(), signal.SIGUSR2)
            wait_until(lambda: routed, "the routed delivery")
            route.unroute()
            assert signal.SIGUSR2 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            signal.raise_signal(signal.SIGUSR2)  # the Python handler runs before this returns
            assert calls == [signal.SIGUSR2]
            assert len(routed) == 1
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_threads_started_before_the_route_forward_every_signal_exactly_once():
    signo = signal.SIGRTMIN + 4
    done = threading.Event()
    bystanders = [threading.Thread(target=done.wait) for _ in range(3)]
    for thread in bystanders:
        thread.start()
    try:
        with ThreadExecutor() as executor:
            executor_thread = executor.sync(threading.get_ident)
            record = Recorder()
            with signals.route(signo, executor, record):
                direct = 300
                for j in range(direct):  # only these threads can take these: they forward them
                    signal.pthread_kill(bystanders[j % 3].ident, signo)
                queue_from_child(signo, 0, 1000)
                wait_until(lambda: len(record.infos) >= 1000 + direct, "1,300 deliveries")
            queued = sorted(info.value for info in record.infos if info.code == SI_QUEUE)
            assert queued == list(range(1000))
            assert len([info for info in record.infos if info.code == SI_TKILL]) == direct
            assert len(record.infos) == 1000 + direct
            assert record.threads == {executor_thread}
    finally:
        done.set()
        for thread in bystanders:
            thread.join()


def test_the_handler_may_unroute_itself():
    signo = signal.SIGRTMIN + 7
    calls, previous_calls = [], []
    previous = signal.signal(signo, lambda s, f: previous_calls.append(s))
    try:
        with ThreadExecutor() as executor:
            def once(info):
                calls.append(info)
                route.unroute()

            route = signals.route(signo, executor, once)
            os.kill(os.getpid(), signo)
            wait_until(lambda: not route.routed, "the handler's unroute")
            executor.sync(lambda: None)
            assert len(calls) == 1
            with pytest.raises(RuntimeError):
                signals.unroute(signo)
    finally:
        signal.signal(signo, previous)


def test_unroute_by_number_and_context_manager():
    with ThreadExecutor() as executor:
        with signals.route(signal.SIGRTMIN + 3, executor, print) as route:
            assert route.routed
            signals.unroute(signal.SIGRTMIN + 3)
            assert not route.routed
        with pytest.raises(RuntimeError):
            signals.unroute(signal.SIGRTMIN + 3)


def test_routing_sigint_takes_it_from_keyboard_interrupt_until_unrouted():
    script = textwrap.dedent("""
        import signal, sys, threading, time
        from libsync import signals
        from libsync.queues import ThreadExecutor
        got = threading.Event()
        def on_sigint(info):
            print("routed", info.code, flush=True)
            got.set()
        executor = ThreadExecutor()
        route = signals.route(signal.SIGINT, executor, on_sigint)
        print("ready", flush=True)
        got.wait(60)
        route.unroute()
        try:
            print("unrouted", flush=True)
            time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline().strip() == "routed 0"  # SI_USER: from kill(2)
        assert proc.stdout.readline().strip() == "unrouted"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=HANG_GUARD)
    finally:
        proc.kill()
    assert out.strip() == "interrupted" and proc.returncode == 0


def test_fork_child_starts_unrouted_and_may_route_again():
    signo = signal.SIGRTMIN + 6
    with ThreadExecutor() as executor:
        record = Recorder()
        with signals.route(signo, executor, record):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report through the exit code
                status = 1
                try:
                    assert signo not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                    try:
                        signals.unroute(signo)
                        status = 3
                    except RuntimeError:
                        mine = Recorder()
                        child_executor = ThreadExecutor()
                        with signals.route(signo, child_executor, mine):
                            os.kill(os.getpid(), signo)
                            wait_until(lambda: mine.infos)
                        status = 0 if [i.pid for i in mine.infos] == [os.getpid()] else 4
                finally:
                    os._exit(status)
            os.close(read_end)
            os.close(write_end)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            os.kill(os.getpid(), signo)
            wait_until(lambda: record.infos)
        assert [info.pid for info in record.infos] == [os.getpid()]


def test_routes_left_in_place_are_unrouted_at_interpreter_exit():
    script = textwrap.dedent("""
        import atexit, signal

        def after_libsync():  # registered first, so it runs after libsync's own exit hook
            from libsync import signals
            try:
                signals.unroute(signal.SIGRTMIN + 9)
                print("still routed at exit", flush=True)
            except RuntimeError:
                print("unrouted at exit", flush=True)

        atexit.register(after_libsync)
        from libsync import signals
        from libsync.queues import ThreadExecutor
        route = signals.route(signal.SIGRTMIN + 9, ThreadExecutor(), lambda info: None)
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_GUARD)
    assert proc.stdout.strip() == "unrouted at exit" and proc.returncode == 0, proc.stderr
