"""The Python benchmark harness: median ns per call over several runs, printed beside peers
measured in the same run, with the ratio to a baseline row (ratio > 1: slower than it)."""
from __future__ import annotations

import statistics
import threading
import time
import timeit
from typing import Callable, List, Sequence, Tuple

REPEATS = 7


def per_call_ns(function: Callable[[], object], number: int) -> float:
    """Median over REPEATS runs of the time of one call of `function`, in ns (loop included)."""
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        for _ in range(number):
            function()
        samples.append((time.perf_counter_ns() - start) / number)
    return statistics.median(samples)


def per_statement_ns(statement: str, namespace: dict, number: int) -> float:
    """Median over REPEATS runs of the time of one execution of `statement`, in ns. timeit runs it
    inline, with no function call around it: a wrapper's own ~70 ns would hide most of what an
    operation as cheap as threading.Lock's acquire+release costs, and flatter a slower peer."""
    timer = timeit.Timer(statement, globals=namespace)
    return statistics.median(timer.timeit(number) / number * 1e9 for _ in range(REPEATS))


def per_call_ns_threads(function: Callable[[], object], number: int, threads: int) -> float:
    """As per_call_ns, with `threads` threads each making `number` calls: wall time / all calls."""
    samples = []
    for _ in range(REPEATS):
        barrier = threading.Barrier(threads + 1)

        def work():
            barrier.wait()
            for _ in range(number):
                function()

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        start = time.perf_counter_ns()
        barrier.wait()
        for w in workers:
            w.join()
        samples.append((time.perf_counter_ns() - start) / (number * threads))
    return statistics.median(samples)


def table(title: str, rows: Sequence[Tuple[str, float]], baseline: int = 0) -> List[Tuple[str, float, float]]:
    """Prints rows of (name, ns per call) with ratios to rows[baseline]; returns them with ratios."""
    base = rows[baseline][1]
    print(f"\n{title} — median of {REPEATS} runs")
    print(f"  {'':52} {'ns/call':>10} {'ratio':>9}")
    out = []
    for i, (name, ns) in enumerate(rows):
        mark = "  (baseline)" if i == baseline else ""
        print(f"  {name:52} {ns:10.1f} {ns / base:8.2f}x{mark}")
        out.append((name, ns, ns / base))
    return out
