"""Queues, an isolated value and a thread executor from libsync.queues: a property read by many
threads and written in order, work serialized on a queue, and work run on one chosen thread."""
import sys
import threading

from libsync.queues import DeadlockError, IsolatedValue, SerialQueue, ThreadExecutor

# An isolated value: reads run in parallel; writes run alone, in the order they were issued.
name = IsolatedValue("initial")
name.set("new")                               # a write; returns without waiting
name.write(str.upper)                         # value = f(value), also without waiting
print("read after the writes:", name.get())   # a read sees every write issued before it

# A serial queue: work runs one item at a time, in order; sync returns the work's result.
queue = SerialQueue("example")
order = []
for i in range(3):
    queue.async_(lambda i=i: order.append(i))
answer = queue.sync(lambda: 6 * 7)            # runs after the three items above
try:
    queue.sync(lambda: queue.sync(lambda: None))   # re-entrant: reported, not a deadlock
except DeadlockError as error:
    print("re-entrant sync refused:", error)
queue.close()                                 # waits for pending work by default

# An executor: one dedicated thread runs the work delivered to it, in arrival order.
with ThreadExecutor() as worker:              # leaving the block stops it (delivered work runs)
    on_worker = worker.sync(lambda: worker.is_current)
    worker_thread = worker.sync(threading.get_ident)
print(f"order {order}, answer {answer}, on the worker's thread: {on_worker}")
ok = name.get() == "NEW" and order == [0, 1, 2] and answer == 42 and on_worker
sys.exit(0 if ok and worker_thread != threading.get_ident() else 1)
