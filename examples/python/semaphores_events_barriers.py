"""A semaphore, an event and a barrier from libsync.conditions (threading's drop-ins): four
workers, at most two in the "database" at once, meet at a barrier between two phases, and stop
when the main thread sets an event."""
import sys
import threading

from libsync.conditions import Barrier, BoundedSemaphore, Event

database = BoundedSemaphore(2)          # at most 2 holders; a release too many raises ValueError
phase_done = Barrier(4)                 # the 4 workers leave together, then it refills
stop = Event()
lock = threading.Lock()
inside, most_inside, arrivals = 0, 0, []


def worker():
    global inside, most_inside
    for phase in range(2):
        with database:                  # acquire, release
            with lock:
                inside += 1
                most_inside = max(most_inside, inside)
            with lock:
                inside -= 1
        arrivals.append(phase_done.wait(timeout=10))   # arrival index 0..3
    stop.wait(timeout=10)               # True once set


threads = [threading.Thread(target=worker) for _ in range(4)]
for thread in threads:
    thread.start()
stop.set()
for thread in threads:
    thread.join()
print(f"at most {most_inside} workers inside at once; arrival indexes {sorted(arrivals)}")
try:
    database.release()                  # nobody holds it: an over-release
except ValueError as error:
    print("over-release refused:", error)
sys.exit(0 if most_inside <= 2 and sorted(arrivals) == [0, 0, 1, 1, 2, 2, 3, 3] else 1)
