"""The index of names at the top of each page of docs/ (and the README's library-wide names),
made from the real API, so that no name is found only with dir() or by reading a header.

A page's index lies between `<!-- index -->` and `<!-- /index -->`: a table with one row per
primitive, its C, Swift and Python spellings side by side (the rows are chosen in PAGES below;
the names in each cell come from the sources), and a last row for the page's other names.

    python3 scripts/api_index.py                 # check: every page's index is current, and every
                                                 # public name (C, Swift, Python) is in some index
    python3 scripts/api_index.py --write         # rewrite the indexes from the sources
    python3 scripts/api_index.py --print docs/locks.md

scripts/snippets.py runs the same check on the pages it is given (and --write rewrites them).

The names come from:
    C       the functions, types and macros the page's headers declare (include/);
    Swift   the public types of the page's files in Sources/LibSync, with their public members,
            and its public functions;
    Python  the page's modules' `__all__`, with each class's public methods and properties.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- index -->", "<!-- /index -->"


@dataclass
class Row:
    """One primitive: the C names starting with one of `c` (functions, types and macros; an
    upper-case prefix for macros is derived), the Swift types `swift`, the Python names `python`."""
    what: str
    c: tuple = ()
    swift: tuple = ()
    python: tuple = ()


@dataclass
class Page:
    headers: tuple                 # under include/
    swift_files: tuple             # under Sources/LibSync (globs; a file is the first page's that matches it)
    python_modules: tuple          # libsync.x
    rows: list = field(default_factory=list)


PAGES = {
    "docs/osatomic.md": Page(
        ("libkern/OSAtomic.h",), ("Atomics/OSAtomic.swift", "Atomics/OSAtomicQueue.swift", "Locks/OSSpinLock.swift"),
        ("libsync.osatomic",), [
            Row("arithmetic, logic, compare-and-swap, test-and-set, barrier",
                ("OSAtomic", "OSMemoryBarrier"), ("OSAtomicStorage", "OSAtomicAddress"), ("ref",)),
            Row("OSSpinLock", ("OSSpinLock", "OS_SPINLOCK_INIT"), ("OSSpinLock",), ("OSSpinLock", "OS_SPINLOCK_INIT")),
            Row("LIFO and FIFO queues", ("OSQueue", "OSFifo", "OS_ATOMIC_QUEUE_INIT", "OS_ATOMIC_FIFO_QUEUE_INIT",
                                         "OSAtomicEnqueue", "OSAtomicDequeue", "OSAtomicFifo"),
                ("OSQueueHead", "OSFifoQueueHead"), ("OSQueueHead", "OSFifoQueueHead")),
        ]),
    "docs/locks.md": Page(
        ("sync/locks.h", "os/lock.h", "os/lock_private.h"), ("Locks/*.swift", "Support/*.swift"),
        ("libsync.locks",), [
            Row("mutex", ("sync_mutex_", "sync_robust_mutex"), ("SyncMutex", "LockOptions"), ("Mutex", "Lock")),
            Row("recursive lock", ("sync_recursive_lock_",), ("SyncRecursiveLock",), ("RLock",)),
            Row("read-write lock", ("sync_rwlock_",), ("SyncRWLock",), ("RWLock",)),
            Row("spin lock", ("sync_spin_lock_", "sync_spinlock_"), ("SyncSpinLock",), ("SpinLock",)),
            Row("upgradable read (parking_lot's)", ("sync_rwlock_uprd", "sync_rwlock_try_uprd", "sync_rwlock_upgrade",
                                                     "sync_rwlock_try_upgrade", "sync_rwlock_downgrade_to_uprd"),
                (), ("UpgradableRead",)),
            Row("os_unfair_lock (Apple's <os/lock.h>)", ("os_unfair_lock", "OS_UNFAIR_LOCK"),
                ("OSAllocatedUnfairLock", "OSAllocatedUnfairLockFlags"), ()),
            Row("a lock that guards a value", (), ("SyncLockedValue", "SyncRWLockedValue"), ("Guarded",)),
            Row("once", ("sync_once",), ("SyncOnce",), ("Once", "once")),
            Row("synchronized (a lock per object)", ("sync_synchronized",), ("synchronized",), ("synchronized",)),
            Row("errors", (), ("LockError",),
                ("LockError", "DeadlockError", "OwnerDiedError", "NotRecoverableError", "NotOwnerError")),
        ]),
    "docs/conditions.md": Page(
        ("sync/conditions.h",), ("Conditions/*.swift",), ("libsync.conditions",), [
            Row("condition variable", ("sync_cond_",), ("SyncConditionVariable",), ()),
            Row("condition (NSCondition)", ("sync_condition_", "SYNC_CONDITION_INIT", "sync_condition_t"),
                ("SyncCondition",), ("Condition",)),
            Row("condition lock (NSConditionLock)", ("sync_condition_lock_",), ("SyncConditionLock",), ("ConditionLock",)),
            Row("semaphore", ("sync_semaphore_", "SYNC_BOUNDED_SEMAPHORE"), ("SyncSemaphore",),
                ("Semaphore", "BoundedSemaphore")),
            Row("event", ("sync_event_",), ("SyncEvent",), ("Event",)),
            Row("barrier", ("sync_barrier_",), ("SyncBarrier",), ("Barrier", "BrokenBarrierError")),
        ]),
    "docs/atomics.md": Page(
        ("sync/atomics.h",), ("Atomics/*.swift", "Collections/*.swift", "Memory/*.swift"),
        ("libsync.atomics",), [
            Row("atomic boolean", ("sync_atomic_bool",), ("AtomicBoolean",), ("AtomicBool",)),
            Row("atomic integer", ("sync_atomic_int",), ("AtomicInteger", "AtomicInteger32", "AtomicInteger64",
                                                          "AtomicIntegerValue"), ("AtomicInt",)),
            Row("atomic reference", ("sync_atomic_ref", "sync_object"), ("AtomicReference",), ("AtomicReference",)),
            Row("throttler", ("sync_throttler",), ("SyncThrottler", "Throttler", "ThrottlerError"),
                ("Throttler", "ThrottlerFull")),
            Row("thread-safe dictionary", ("sync_dictionary",), ("ConcurrentDictionary",), ("ConcurrentDict",)),
            Row("autorelease pool", ("sync_autorelease",), ("AutoreleasePool",), ()),
        ]),
    "docs/distributed_lock.md": Page(
        ("sync/distributed_lock.h",), ("DistributedLock/*.swift",), ("libsync.distributed_lock",), [
            Row("distributed lock", ("sync_distributed_lock_",), ("DistributedLock",), ("DistributedLock",)),
            Row("holder", ("sync_distributed_lock_holder",), ("DistributedLockHolder",), ("Holder",)),
            Row("read/write lock (file system, servers)", ("sync_distributed_rwlock_", "SYNC_DISTRIBUTED_RWLOCK"),
                ("DistributedReadWriteLock",),
                ("ReadWriteLock", "AsyncReadWriteLock", "SoftReadWriteLock", "AsyncSoftReadWriteLock",
                 "AcquireReadWriteReturnProxy", "AsyncAcquireReadWriteReturnProxy")),
            Row("distributed semaphore (N holders)", ("sync_distributed_semaphore_", "SYNC_DISTRIBUTED_SEMAPHORE"),
                ("DistributedSemaphore",), ("DistributedSemaphore",)),
            Row("errors", (), ("DistributedLockError",),
                ("Timeout", "NotLockedError", "LockLostError", "LockBrokenError", "LockStolenError")),
            Row("filelock's interface", (), (),
                ("FileLock", "SoftFileLock", "AsyncFileLock", "AsyncSoftFileLock", "BaseFileLock", "BaseAsyncFileLock",
                 "AcquireReturnProxy", "AsyncAcquireReturnProxy", "SoftFileLease", "AsyncSoftFileLease", "LeaseCompromise")),
        ]),
    "docs/queues.md": Page(
        ("sync/queues.h",), ("Queues/*.swift",), ("libsync.queues",), [
            Row("serial and concurrent queues", ("sync_queue", "SYNC_QUEUE"), ("SerialQueue", "ConcurrentQueue", "QueueError"),
                ("SerialQueue", "ConcurrentQueue", "DeadlockError")),
            Row("thread executor", ("sync_executor",), ("ThreadExecutor", "ThreadExecutorError"), ("ThreadExecutor",)),
            Row("isolated value", ("sync_isolated",), ("IsolatedValue",), ("IsolatedValue",)),
        ]),
    "docs/async.md": Page(
        ("sync/async.h",), ("Async/*.swift",), (), [
            Row("async read-write lock", ("sync_rwlock_rdlock_async", "sync_rwlock_wrlock_async", "sync_async_downgrade",
                                          "sync_rwlock_wrunlock_async", "sync_rwlock_downgrade_async"),
                ("SyncRWLock",), ()),
            Row("async semaphore wait", ("sync_semaphore_wait_async",), ("SyncSemaphore",), ()),
            Row("async event wait", ("sync_event_wait_async",), ("SyncEvent",), ()),
            Row("async distributed lock", ("sync_distributed_lock_",), ("DistributedLock",), ()),
            Row("async condition lock", ("sync_condition_lock_lock_async", "sync_condition_lock_lock_when_async",
                                         "sync_async_unlock_with", "sync_condition_lock_try_lock_async",
                                         "sync_condition_lock_unlock_async"), ("SyncConditionLock",), ()),
            Row("async barrier wait", ("sync_barrier_wait_async", "sync_async_index"), ("SyncBarrier",), ()),
            Row("async condition wait", ("sync_cond_wait_async", "sync_condition_wait_async", "sync_cond_signal_checked_async",
                                         "sync_async_abandon"), ("SyncConditionVariable",), ()),
            Row("async mutex acquire", ("sync_mutex_lock_async", "sync_mutex_try_lock_async", "sync_mutex_unlock_async", "sync_mutex_unlock_local",
                                        "sync_mutex_consistent_async", "sync_async_"), ("SyncMutex",), ()),
        ]),
    "docs/signals.md": Page(
        ("sync/signals.h",), ("Signals/*.swift",), ("libsync.signals",), [
            Row("route", ("sync_signal_",), ("SignalRoute", "SignalRouteError"), ("Route", "route", "unroute", "is_routable")),
            Row("one arrival", ("sync_signal_info",), ("SignalInfo",), ("SignalInfo",)),
        ]),
    "docs/lock_order.md": Page(
        ("sync/debug.h",), ("Debug/*.swift",), ("libsync.debug",), [
            Row("lock-order checking", ("sync_debug_lock_order", "sync_lock_order", "SYNC_LOCK_ORDER"),
                ("LockOrderChecking", "LockOrderCycle"),
                ("check_lock_order", "is_checking", "set_handler", "set_action", "reset", "Cycle", "Edge")),
            Row("one lock", ("sync_debug_lock_",), (), ("forget", "address_of")),
            Row("deadlock dump (the wait-for cycle)", ("sync_debug_format_waits", "sync_debug_dump_waits"), (),
                ("waits", "dump_waits")),
        ]),
    "README.md": Page(
        ("sync.h", "sync/layout.h"), (), ("libsync",), [
            Row("version", ("sync_version", "SYNC_VERSION_"), (), ("__version__",)),
            Row("the package", (), (), ("library_path", "ref")),
            Row("word layouts for bindings", ("sync_layout",), (), ()),
        ]),
}


# ---- C ------------------------------------------------------------------------------------------

C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def c_names(header: str) -> list[str]:
    """The functions, types and macros a header declares (not its include guard, nor the names
    kept as deprecated aliases: a declaration marked SYNC_DEPRECATED)."""
    text = C_COMMENT.sub(" ", (ROOT / "include" / header).read_text(encoding="utf-8"))
    text = re.sub(r"^[^\n#]*\bSYNC_DEPRECATED\b[^\n]*$", " ", text, flags=re.M)
    names = re.findall(r"\b([A-Za-z_]\w*)\s*\(", text)                   # functions
    names = [n for n in names if re.match(r"sync_|OS|os_", n) and not re.search(r"#\s*define\s+" + n + r"\b", text)]
    names += re.findall(r"\b((?:sync|OS|os_)\w*_t|OS\w+)\s*;", text)       # typedef names
    names += re.findall(r"typedef\s+(?:struct|union|enum)?\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text)
    names += [n for n in re.findall(r"#\s*define\s+(\w+)", text)
              if not n.endswith("_H") and not n.startswith("_") and n != "SYNC_DEPRECATED"]
    public = re.compile(r"^(sync_|SYNC_|OS|os_)")
    return sorted(dict.fromkeys(n for n in names if public.match(n)), key=str.lower)


# ---- Swift --------------------------------------------------------------------------------------

SWIFT_DECL = re.compile(
    r"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:public|open)\s+(?:(?:static|final|override|mutating|nonisolated|"
    r"convenience|required|indirect|class|nonmutating|dynamic|lazy|package)\s+)*"
    r"(class|struct|enum|protocol|typealias|actor|func|var|let|case|subscript|init)\b\s*`?(\w*)")
SWIFT_EXTENSION = re.compile(r"^\s*(?:public\s+)?extension\s+(\w+)")
SWIFT_TYPE = re.compile(r"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:(?:public|open|package|internal|private|fileprivate|final|indirect)\s+)*"
                        r"(class|struct|enum|protocol|actor)\s+(\w+)")


@dataclass
class SwiftAPI:
    types: dict = field(default_factory=dict)      # type -> [member names]
    functions: list = field(default_factory=list)  # public functions, constants outside types


def swift_files(page_path: str) -> list[Path]:
    """The page's Swift files: those its globs match that no earlier page's globs match."""
    def matched(page: Page) -> list[Path]:
        return [f for g in page.swift_files for f in sorted((ROOT / "Sources" / "LibSync").glob(g))]
    earlier = set()
    for path, page in PAGES.items():
        if path == page_path:
            return [f for f in dict.fromkeys(matched(page)) if f not in earlier]
        earlier.update(matched(page))
    return []


def swift_api(page_path: str) -> SwiftAPI:
    api = SwiftAPI()
    for source in swift_files(page_path):
        scan_swift(source.read_text(encoding="utf-8"), api)
    return api


def scan_swift(text: str, api: SwiftAPI) -> None:
    scopes: list[tuple[str | None, bool, int]] = []  # (public type or None, is an enum, depth at its {)
    depth = 0
    deprecated = False  # the line before was @available(*, deprecated, ...): an old name, not listed
    for line in text.splitlines():
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line.split("//")[0])
        declaration = SWIFT_DECL.match(code)
        if declaration and (deprecated or re.search(r"@available\(\*,\s*deprecated", code)):
            declaration = None
        deprecated = bool(re.match(r"\s*@available\(\*,\s*deprecated", code)) and not SWIFT_DECL.match(code)
        extension = SWIFT_EXTENSION.match(code)
        opened = None
        inner = scopes[-1] if scopes else None
        if declaration:
            kind, name = declaration.groups()
            if kind in ("class", "struct", "enum", "protocol", "actor"):
                owner = f"{inner[0]}.{name}" if inner and inner[0] else name
                api.types.setdefault(owner, [])
                opened = (owner, kind == "enum")
            elif kind == "typealias":
                api.types.setdefault(f"{inner[0]}.{name}" if inner and inner[0] else name, [])
            elif inner and inner[0]:
                if kind != "init" and name:
                    api.types[inner[0]].append(name + ("()" if kind == "func" else ""))
                if kind in ("let", "var"):  # public let from: UInt, to: UInt
                    api.types[inner[0]] += re.findall(r",\s*(\w+)\s*:", re.split(r"[={(]", code[declaration.end():])[0])
            elif kind in ("func", "var", "let") and name and not scopes:
                api.functions.append(name + ("()" if kind == "func" else ""))
        elif extension:
            opened = (extension[1] if extension[1] in api.types else None, False)
        elif SWIFT_TYPE.match(code):
            opened = (None, False)   # a non-public type: its members are not public API
        elif inner and inner[0] and inner[1] and re.match(r"\s*(?:indirect\s+)?case\s+\w", code):
            for part in re.split(r",(?![^()]*\))", re.sub(r"^\s*(?:indirect\s+)?case\s+", "", code)):
                name = re.match(r"\s*`?(\w+)", part)
                if name:
                    api.types[inner[0]].append(name[1])
        for char in code:
            if char == "{":
                depth += 1
                if opened is not None:
                    scopes.append((opened[0], opened[1], depth))
                    opened = None
                else:
                    scopes.append((None, False, depth)) if not scopes or scopes[-1][2] != depth else None
            elif char == "}":
                if scopes and scopes[-1][2] == depth:
                    scopes.pop()
                depth -= 1
    # Members are listed once, in order.
    for name, members in api.types.items():
        api.types[name] = list(dict.fromkeys(m for m in members if m != "init"))


# ---- Python -------------------------------------------------------------------------------------

PACKAGE = ROOT / "python" / "libsync"


def python_module(module: str) -> tuple[ast.Module, Path]:
    parts = module.split(".")[1:]
    path = PACKAGE.joinpath(*parts).with_suffix(".py") if parts else PACKAGE / "__init__.py"
    return ast.parse(path.read_text(encoding="utf-8")), path


def python_all(module: str) -> list[str]:
    """The module's __all__ as written (osatomic adds one function per C function of the header
    at import: those are the C names, indexed in the C column)."""
    tree, _ = python_module(module)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def python_function(module: str, name: str) -> bool:
    """Whether `name` is a function of the module (following `from .x import name`)."""
    tree, _ = python_module(module)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level and any((a.asname or a.name) == name for a in node.names):
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            return python_function("libsync" + ("." + node.module if node.module else ""), original)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
    return False


def python_deprecated(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the method is an old name kept for compatibility: it calls `deprecated(...)`
    (libsync._common), which warns."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "deprecated"
               for n in ast.walk(function))


def python_class(module: str, name: str, seen: frozenset = frozenset()) -> list[str] | None:
    """The public methods and properties of class `name` as the module sees it (following
    `from .x import name`), with those of its private bases; None if `name` is no class."""
    tree, _ = python_module(module)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level and any((a.asname or a.name) == name for a in node.names):
            source = "libsync" + ("." + node.module if node.module else "")
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            return python_class(source, original, seen)
        if isinstance(node, ast.ClassDef) and node.name == name:
            members = []
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id.startswith("_") and base.id not in seen:
                    members += python_class(module, base.id, seen | {name}) or []
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                    if python_deprecated(item):
                        continue
                    attribute = any(isinstance(d, ast.Name) and d.id == "property" or
                                    isinstance(d, ast.Attribute) and d.attr == "setter" for d in item.decorator_list)
                    members.append(item.name + ("" if attribute else "()"))
                elif isinstance(item, ast.Assign):
                    members += [t.id for t in item.targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                        and not item.target.id.startswith("_"):
                    members.append(item.target.id)
            return list(dict.fromkeys(members))
    return None


# ---- The index ----------------------------------------------------------------------------------

def code(name: str) -> str:
    return f"`{name}`"


def members_cell(owner: str, members: list[str] | None) -> str:
    if not members:
        return code(owner)
    return code(owner) + ": " + ", ".join(map(code, members))


def render(page_path: str, page: Page) -> tuple[str, set[str]]:
    """The index's Markdown, and every name it lists."""
    c_all = []
    for header in page.headers:
        c_all += c_names(header)
    swift = swift_api(page_path)
    python_names = []
    for module in page.python_modules:
        python_names += [(module, n) for n in python_all(module) if not (module == "libsync" and n not in
                                                                          ("__version__", "library_path", "ref"))]
    c_left = list(dict.fromkeys(c_all))
    swift_left = [t for t in swift.types if "." not in t]
    python_left = list(dict.fromkeys(python_names))
    listed: set[str] = set()
    lines = [START, "**Index of names**: each primitive's C, Swift and Python names side by side (made from the "
             "sources by `scripts/api_index.py`)." if page_path != "README.md" else
             "**Library-wide names** (each page of `docs/` starts with the index of its own):",
             "", "| | C | Swift | Python |", "|---|---|---|---|"]

    def match(name: str, row: Row) -> int:
        """The length of the row's longest C prefix that `name` starts with (0: none)."""
        return max((len(p) for p in row.c if name.startswith(p) or name.startswith(p.upper())), default=0)

    def take_c(row: Row) -> list[str]:
        """The C names whose longest matching prefix among all rows is this row's."""
        taken = [n for n in c_left if match(n, row) and match(n, row) == max(match(n, r) for r in page.rows)]
        for n in taken:
            c_left.remove(n)
        return taken

    def same_as_c(c_row: list[str], names: list[str]) -> str:
        """The Swift or Python functions that bear the row's C names: said once, not listed again."""
        same = [n for n in names if n.rstrip("()") in c_row]
        for n in same:
            names.remove(n)
        listed.update(n.rstrip("()") for n in same)
        return "the C functions, same names" if same else ""

    def swift_cell(names) -> str:
        cells = []
        for name in names:
            if name in swift.types:
                swift_left.remove(name) if name in swift_left else None
                cells.append(members_cell(name, swift.types[name]))
                listed.update(swift.types[name])
                for nested in [t for t in swift.types if t.startswith(name + ".")]:
                    cells.append(members_cell(nested, swift.types[nested]))
                    listed.update(swift.types[nested])
            elif name + "()" in swift.functions or name in swift.functions:
                function = name + "()" if name + "()" in swift.functions else name
                swift.functions.remove(function)
                cells.append(code(function))
            listed.add(name)
        return "; ".join(cells)

    def python_cell(names) -> str:
        cells = []
        for name in names:
            found = next((m for m, n in python_left if n == name), None)
            if found is None:
                continue
            python_left.remove((found, name))
            members = python_class(found, name)
            cells.append(members_cell(name, members) if members else code(name + ("()" if python_function(found, name) else "")))
            listed.update(members or [])
            listed.add(name)
        return "; ".join(cells)

    python_generated = [n for n in c_all if module_generates(page, n)]
    for row in page.rows:
        c_row = take_c(row)
        listed.update(c_row)
        swift_same = same_as_c(c_row, swift.functions)
        python_same = same_as_c(c_row, python_generated)
        swift_text = "; ".join(filter(None, [swift_same, swift_cell(row.swift)]))
        python_text = "; ".join(filter(None, [python_same, python_cell(row.python)]))
        lines.append(f"| {row.what} | {' '.join(map(code, c_row))} | {swift_text} | {python_text} |")
    c_other = list(c_left)
    listed.update(c_other)
    swift_other = swift_cell(swift_left + swift.functions)
    python_other = python_cell([n for _, n in python_left])
    if c_other or swift_other or python_other:
        lines.append(f"| other | {' '.join(map(code, c_other))} | {swift_other} | {python_other} |")
    lines += ["", END]
    return "\n".join(lines), listed


def module_generates(page: Page, name: str) -> bool:
    """libsync.osatomic makes one function per function of <libkern/OSAtomic.h>, with its name."""
    return "libsync.osatomic" in page.python_modules and re.match(r"OS[A-Z]\w*$", name) is not None \
        and name not in python_all("libsync.osatomic") and not name.endswith(("Head", "Lock"))


def update(text: str, index: str) -> str | None:
    """The page with its index replaced; None if the page has no index markers."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < 0:
        return None
    return text[:start] + index + text[end + len(END):]


def check(write: bool = False, pages: list[Path] | None = None) -> list[str]:
    """Problems with the indexes of `pages` (default: all), rewriting them first if `write`, and
    sources that no page indexes."""
    problems = []
    chosen = None if pages is None else {p.resolve() for p in pages}
    for page_path, page in PAGES.items():
        path = ROOT / page_path
        if chosen is not None and path.resolve() not in chosen:
            continue
        index, _ = render(page_path, page)
        text = path.read_text(encoding="utf-8")
        new = update(text, index)
        if new is None:
            problems.append(f"{page_path}: no {START} ... {END} (the page's index of names)")
        elif new != text:
            if write:
                path.write_text(new, encoding="utf-8")
                print(f"{page_path}: index updated")
            else:
                problems.append(f"{page_path}: the index of names is out of date "
                                f"(run: python3 scripts/snippets.py --write {page_path})")
    return problems + uncovered()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite each page's index from the sources")
    parser.add_argument("--print", metavar="PAGE", help="print one page's index")
    args = parser.parse_args()
    if args.print:
        print(render(args.print, PAGES[args.print])[0])
        return 0
    problems = check(args.write)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def uncovered() -> list[str]:
    """Sources no page indexes: each page's index lists every name of its sources (what no row
    takes is in its last row), so every public name is indexed once every source is some page's."""
    problems = []
    headers = {(ROOT / "include" / h).resolve() for page in PAGES.values() for h in page.headers}
    for header in sorted((ROOT / "include").rglob("*.h")):
        if header.resolve() not in headers:
            problems.append(f"{header.relative_to(ROOT)}: no page indexes it (add it to PAGES in scripts/api_index.py)")
    swift = {f for page in PAGES.values() for g in page.swift_files for f in (ROOT / "Sources" / "LibSync").glob(g)}
    for source in sorted((ROOT / "Sources" / "LibSync").rglob("*.swift")):
        if source not in swift and SWIFT_DECL.search(source.read_text(encoding="utf-8")) \
                and re.search(r"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:public|open)\s", source.read_text(encoding="utf-8"), re.M):
            problems.append(f"{source.relative_to(ROOT)}: declares public API no page indexes (add it to PAGES)")
    modules = {m for page in PAGES.values() for m in page.python_modules}
    for module in sorted(PACKAGE.glob("*.py")):
        name = "libsync" if module.name == "__init__.py" else f"libsync.{module.stem}"
        if not module.stem.startswith("_") and name not in modules:
            problems.append(f"python/libsync/{module.name}: no page indexes it (add it to PAGES)")
    return problems


if __name__ == "__main__":
    sys.exit(main())
