"""Listings 4-3 to 4-6 and the NSConditionLock producer/consumer, from Python on libsync."""
import sys
import threading

import libsync

# Listings 4-5 / 4-6: a condition and its predicate (a threading.Condition drop-in).
condition = libsync.Condition(libsync.Lock())
state = {"ready_to_go": False, "work_done": 0}


def my_wait_on_condition():
    with condition:
        while not state["ready_to_go"]:
            condition.wait()
        state["work_done"] += 1          # Do work. (The lock stays held.)
        state["ready_to_go"] = False


waiter = threading.Thread(target=my_wait_on_condition)
waiter.start()
with condition:                          # SignalThreadUsingCondition
    state["ready_to_go"] = True
    condition.notify()
waiter.join()
print(f"Listings 4-5/4-6: the waiting thread did its work {state['work_done']} time")

# Listings 4-3 / 4-4: lock the condition, wait while there is no work.
cocoa = libsync.Condition()
work = {"timeToDoWork": 0, "done": 0}


def cocoa_waiter():
    for _ in range(3):
        with cocoa:
            while work["timeToDoWork"] <= 0:
                cocoa.wait()
            work["timeToDoWork"] -= 1
            work["done"] += 1            # Do real work here.


waiter = threading.Thread(target=cocoa_waiter)
waiter.start()
for _ in range(3):
    with cocoa:
        work["timeToDoWork"] += 1
        cocoa.notify()
waiter.join()
print(f"Listings 4-3/4-4: {work['done']} units of work done, timeToDoWork = {work['timeToDoWork']}")

# NSConditionLock: the seed's producer and consumer.
NO_DATA, HAS_DATA = 0, 1
cond_lock, queue, consumed = libsync.ConditionLock(NO_DATA), [], []


def consumer():
    for _ in range(10):
        cond_lock.lock_when_condition(HAS_DATA)
        item = queue.pop()               # Remove data from the queue.
        cond_lock.unlock_with_condition(NO_DATA if not queue else HAS_DATA)
        consumed.append(item)            # Process the data locally.


waiter = threading.Thread(target=consumer)
waiter.start()
for i in range(1, 11):
    cond_lock.lock()
    queue.append(i)                      # Add data to the queue.
    cond_lock.unlock_with_condition(HAS_DATA)
waiter.join()
print(f"NSConditionLock producer/consumer: consumed 1..10, sum {sum(consumed)}, "
      f"condition NO_DATA = {'yes' if cond_lock.condition == NO_DATA else 'no'}")
sys.exit(0 if state["work_done"] == 1 and work["done"] == 3 and sum(consumed) == 55 else 1)
