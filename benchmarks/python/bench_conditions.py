"""Python: Condition.notify() with no waiter, Semaphore acquire+release, Event.is_set, and a
ping-pong hand-off through a Condition — libsync beside threading's."""
import threading

from harness import per_call_ns, table

import libsync

N = 200_000


def pingpong_ns(cond, rounds=5000):
    """ns per hand-off between two threads taking turns through `cond`."""
    import time
    turn = [0]

    def player(me):
        for _ in range(rounds):
            with cond:
                while turn[0] != me:
                    cond.wait()
                turn[0] = 1 - me
                cond.notify()

    threads = [threading.Thread(target=player, args=(i,)) for i in (0, 1)]
    start = time.perf_counter_ns()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter_ns() - start) / (2 * rounds)


def main():
    for lock_name, ours, theirs in (("Lock", libsync.Lock, threading.Lock), ("RLock", libsync.RLock, threading.RLock)):
        c_ours, c_theirs = libsync.Condition(ours()), threading.Condition(theirs())
        with c_ours, c_theirs:
            table(f"Condition({lock_name}).notify() with no waiter",
                  [("threading.Condition", per_call_ns(c_theirs.notify, N)),
                   ("libsync Condition", per_call_ns(c_ours.notify, N))])
    s_ours, s_theirs = libsync.Semaphore(1), threading.Semaphore(1)

    def cycle(s):
        def run():
            s.acquire()
            s.release()
        return run

    table("Semaphore acquire+release",
          [("threading.Semaphore", per_call_ns(cycle(s_theirs), N)), ("libsync Semaphore", per_call_ns(cycle(s_ours), N))])
    e_ours, e_theirs = libsync.Event(), threading.Event()
    table("Event.is_set()", [("threading.Event", per_call_ns(e_theirs.is_set, N)), ("libsync Event", per_call_ns(e_ours.is_set, N))])
    table("Ping-pong hand-off through a Condition",
          [("threading.Condition", min(pingpong_ns(threading.Condition()) for _ in range(3))),
           ("libsync Condition", min(pingpong_ns(libsync.Condition()) for _ in range(3)))], threads=2)


if __name__ == "__main__":
    main()
