"""Writes the report of a benchmark run: RESULTS.md (every table of the run, the machine, the
date, then the earlier measurements and experiments kept in benchmarks/history.md) and one plot
per table measured at several thread counts (throughput against threads, libsync's rows beside
their peers').

    python benchmarks/report.py ROWS_DIR OUT_DIR [--quick] [--log FILE]

ROWS_DIR holds one file of JSON lines per benchmark program (c_bench_locks.jsonl, swift.jsonl,
python_bench_locks.jsonl, ...), as the harnesses write them when BENCH_ROWS names the file.
OUT_DIR receives RESULTS.md and results/*.svg (benchmarks/ for a full run).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
from collections import OrderedDict
from pathlib import Path

LANGUAGES = {"c": "C (libsync.so's C ABI)", "swift": "Swift (the LibSync module)", "python": "Python (the libsync package)"}


def load(rows_dir: Path):
    """{program: {table title: [rows in order]}}, programs in C, Swift, Python order."""
    programs = OrderedDict()
    order = {name: i for i, name in enumerate(LANGUAGES)}
    files = sorted(rows_dir.glob("*.jsonl"), key=lambda f: (order.get(f.stem.split("_")[0], 9), f.stem))
    for path in files:
        tables = OrderedDict()
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                tables.setdefault(row["table"], []).append(row)
        if tables:
            programs[path.stem] = tables
    return programs


def is_ours(name: str) -> bool:
    """libsync's rows: named for the library, or for its C functions."""
    return "libsync" in name.lower() or name.startswith("sync_")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def first_line(command) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def machine() -> list[str]:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = "unknown"
    try:
        kib = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")))
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    system = platform.platform()
    try:
        system = re.search(r'^PRETTY_NAME="?(.*?)"?$', Path("/etc/os-release").read_text(), re.M)[1] + f", Linux {platform.release()}"
    except (OSError, TypeError):
        pass
    return [f"CPU: {cpu}, {os.cpu_count()} logical cores visible; memory {memory}",
            f"System: {system}",
            f"Compilers: {first_line(['cc', '--version'])}; {first_line(['swift', '--version'])}",
            f"Python: {platform.python_implementation()} {platform.python_version()}"]


def plot(program: str, title: str, rows: list[dict], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "libsync"  # the same run draws the same file
    matplotlib.rcParams["svg.fonttype"] = "none"     # text as text: a small file
    import matplotlib.pyplot as plt

    counts = sorted({row["threads"] for row in rows})
    names = list(OrderedDict.fromkeys(row["row"] for row in rows))
    tasks = rows[0].get("axis") == "tasks"  # ns per operation against the number of tasks
    figure, axes = plt.subplots(figsize=(7.5, 4.2))
    for name in names:
        points = sorted((row["threads"], row["ns"] if tasks else 1e3 / row["ns"]) for row in rows if row["row"] == name)
        axes.plot([counts.index(t) for t, _ in points], [mops for _, mops in points],
                  marker="o", linewidth=2.2 if is_ours(name) else 1.3,
                  linestyle="-" if is_ours(name) else "--", label=name)
    axes.set_xticks(range(len(counts)), [str(c) for c in counts])
    axes.set_xlabel("tasks on one lock" if tasks else "threads")
    axes.set_ylabel("ns per operation (wall time, lower is better)" if tasks else "throughput, million operations/s (all threads)")
    axes.set_ylim(bottom=0)
    language = program.split("_")[0]
    axes.set_title(f"{language.capitalize() if language != 'c' else 'C'}: {title}", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7.5, loc="best")
    figure.tight_layout()
    figure.savefig(out, metadata={"Date": None})
    plt.close(figure)


def markdown_table(rows: list[dict]) -> list[str]:
    fairness = any(row.get("fairness") is not None for row in rows)
    spread = any(row.get("spread") is not None for row in rows)
    head = "| | ns/op | Mops/s | ratio |" + (" ratio range |" if spread else "") + (" min/max |" if fairness else "")
    lines = [head, "|---|---:|---:|---:|" + ("---:|" if spread else "") + ("---:|" if fairness else "")]
    for row in rows:
        name = row["row"] + (" (baseline)" if row["baseline"] else "")
        if is_ours(row["row"]):
            name = f"**{name}**"
        cells = [name, f"{row['ns']:.2f}", f"{1e3 / row['ns']:.2f}", f"{row['ratio']:.2f}x"]
        if spread:
            low, high = row.get("spread") or (row["ratio"], row["ratio"])
            cells.append(f"{low:.2f}-{high:.2f}x")
        if fairness:
            cells.append("" if row.get("fairness") is None else f"{row['fairness']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


HISTORY = Path(__file__).resolve().parent / "history.md"


def history() -> list[str]:
    """The section of RESULTS.md that no run re-measures: benchmarks/history.md, verbatim, without
    its leading comment."""
    if not HISTORY.is_file():
        return []
    body = re.sub(r"\A\s*<!--.*?-->\s*", "", HISTORY.read_text(encoding="utf-8"), flags=re.S)
    return ["## Earlier measurements and experiments", "", body.rstrip("\n"), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true", help="the run was a smoke run (--quick)")
    parser.add_argument("--command", default="bash benchmarks/run.sh", help="the command that made the run")
    args = parser.parse_args()

    programs = load(args.rows)
    plots_dir = args.out / "results"
    plots_dir.mkdir(parents=True, exist_ok=True)
    for old in plots_dir.glob("*.svg"):
        old.unlink()

    finished = max((f.stat().st_mtime for f in args.rows.glob("*.jsonl")), default=datetime.datetime.now().timestamp())
    when = datetime.datetime.fromtimestamp(finished, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = ["# Benchmark results", "",
            f"Written by `{args.command}`, a run that ended {when}. Do not edit: run the benchmarks again.", ""]
    if args.quick:
        text += ["**A smoke run (`--quick`): 3 runs of a tenth of the work per row. The figures are noise;",
                 "they show that every benchmark runs, not how fast anything is.**", ""]
    text += ["## Machine", ""] + [f"- {line}" for line in machine()] + [""]
    runs = "3 runs" if args.quick else "7 runs (21 for the C tables with a min/max column)"
    text += ["## How to read this", "",
             f"Each figure is the median of {runs}.",
             "The rows of a table are measured in the same run, interleaved round-robin, so that",
             "drift hits all alike. ns/op is wall time divided",
             "by the operations of all threads (with one thread, the process's CPU time: what other",
             "processes of a shared machine run meanwhile is not counted): with several threads, the cost per operation of the",
             "whole machine, and Mops/s its throughput. The ratio is to the baseline row (below 1:",
             "faster than the baseline), and its range the lowest and highest ratio of one round (the",
             "row's run over the baseline's run in the same round); min/max is the fewest operations any thread made over the",
             "most (1: fair, 0: a thread starved). libsync's rows are in bold. Tables measured at",
             "several thread counts are drawn as throughput against threads: libsync's rows solid,",
             "their peers dashed. Tables measured at several numbers of tasks (Swift async) are in",
             "wall time, drawn as ns per operation against the number of tasks.", ""]
    for program, tables in programs.items():
        language = program.split("_")[0]
        heading = LANGUAGES.get(language, language)
        text += [f"## {heading}: {program.split('_', 1)[1] if '_' in program else 'all families'}", ""]
        for title, rows in tables.items():
            counts = sorted({row["threads"] for row in rows})
            if len(counts) > 1:
                name = f"{program}-{slug(title)}.svg"
                plot(program, title, rows, plots_dir / name)
                what = "ns per operation against tasks" if rows[0].get("axis") == "tasks" else "throughput against threads"
                text += [f"![{title}: {what}](results/{name})", ""]
            for threads in counts:
                unit = "task" if rows[0].get("axis") == "tasks" else "thread"
                text += [f"**{title}** — {threads} {unit}{'s' if threads != 1 else ''}", ""]
                text += markdown_table([row for row in rows if row["threads"] == threads]) + [""]
    text += history()
    (args.out / "RESULTS.md").write_text("\n".join(text), encoding="utf-8")
    print(f"report: {args.out / 'RESULTS.md'} and {len(list(plots_dir.glob('*.svg')))} plots in {plots_dir}")


if __name__ == "__main__":
    main()
