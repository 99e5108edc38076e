"""Lock-order checking: two threads take two locks in opposite orders, one after the other, so
nothing deadlocks, and libsync still reports the potential deadlock with both Python stacks."""
import threading

import libsync
from libsync import debug

accounts, audit_log = libsync.Lock(name="accounts"), libsync.Lock(name="audit_log")  # names for the reports
cycles = []


def on_cycle(cycle):
    cycles.append(cycle)
    print(f"potential deadlock among {len(cycle.edges)} locks:")
    for edge in cycle.edges:
        where = edge.site.strip().splitlines()[-2].strip()  # the innermost frame: 'File ..., in ...'
        print(f"  {edge.from_name} -> {edge.to_name} (thread {edge.thread_name!r}, {where})")


def transfer():  # accounts, then audit_log
    with accounts:
        with audit_log:
            pass


def rotate_log():  # audit_log, then accounts: the other order
    with audit_log:
        with accounts:
            pass


debug.set_handler(on_cycle)  # instead of the report on stderr
debug.check_lock_order(True)  # or LIBSYNC_CHECK_LOCK_ORDER=1 in the environment
for work in (transfer, rotate_log):  # one after the other: no deadlock
    thread = threading.Thread(target=work, name=work.__name__)
    thread.start()
    thread.join()
debug.check_lock_order(False)
assert len(cycles) == 1
assert {edge.thread_name for edge in cycles[0].edges} == {"transfer", "rotate_log"}
