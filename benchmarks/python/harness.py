"""The Python benchmark harness: median ns per call over several runs, printed beside peers
measured in the same run, with the ratio to a baseline row (ratio > 1: slower than it).

Environment, as the C harness's: BENCH_ROWS, a file to which each row is also appended as a
JSON line (read by benchmarks/report.py); BENCH_QUICK, a smoke run (3 runs of a tenth of the
calls)."""
from __future__ import annotations

import json
import os
import statistics
import threading
import time
import timeit
from typing import Callable, List, Optional, Sequence, Tuple

QUICK = bool(os.environ.get("BENCH_QUICK"))
REPEATS = 3 if QUICK else 7


def _work(number: int) -> int:
    return max(1, number // 10) if QUICK else number


def per_call_ns(function: Callable[[], object], number: int) -> float:
    """Median over REPEATS runs of the time of one call of `function`, in ns (loop included)."""
    number = _work(number)
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
    number = _work(number)
    timer = timeit.Timer(statement, globals=namespace)
    return statistics.median(timer.timeit(number) / number * 1e9 for _ in range(REPEATS))


def per_call_ns_threads(function: Callable[[], object], number: int, threads: int) -> float:
    """As per_call_ns, with `threads` threads each making `number` calls: wall time / all calls."""
    number = _work(number)
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


def table(title: str, rows: Sequence[Tuple[str, float]], baseline: int = 0,
          threads: Optional[int] = None) -> List[Tuple[str, float, float]]:
    """Prints rows of (name, ns per call) with ratios to rows[baseline]; returns them with ratios.
    `threads`: how many threads made the calls, if more than one (tables of the same title at
    several thread counts are plotted against it)."""
    base = rows[baseline][1]
    on = f"{threads} thread{'s' if threads != 1 else ''}, " if threads else ""
    print(f"\n{title} — {on}median of {REPEATS} runs")
    print(f"  {'':52} {'ns/call':>10} {'ratio':>9}")
    out = []
    for i, (name, ns) in enumerate(rows):
        mark = "  (baseline)" if i == baseline else ""
        print(f"  {name:52} {ns:10.1f} {ns / base:8.2f}x{mark}")
        out.append((name, ns, ns / base))
        _emit(title, threads or 1, name, ns, ns / base, i == baseline)
    return out


def _emit(title: str, threads: int, row: str, ns: float, ratio: float, baseline: bool) -> None:
    path = os.environ.get("BENCH_ROWS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"table": title, "threads": threads, "row": row, "ns": ns, "ratio": ratio,
                                  "baseline": baseline, "fairness": None}, ensure_ascii=False) + "\n")
