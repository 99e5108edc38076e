"""Keeps the code in the documentation runnable or, at least, true to the API.

Every ```c, ```python and ```swift block of the given Markdown files is one of two kinds:

- an example: the comment on the line before it names an example file, and the block is that
  file's whole text; the test command compiles and runs the file (scripts/test.sh):

      <!-- example: examples/python/quickstart.py -->
      ```python
      ...the file's whole text...
      ```

- a fragment (no such comment): a piece of code that is not run, whose names are checked
  against the API it uses:
    C       every identifier of the library (sync_*, SYNC_*, OSAtomic*, OSSpinLock*, OSQueue*,
            OSFifo*, OSMemoryBarrier, OS_*) is declared in include/ (comments excluded);
    Python  the fragment parses; every name imported from libsync exists in that module;
            `libsync.x` attributes exist; on an object made from a libsync class (`x = C(...)`,
            `with C(...) as x`) every attribute used is one the class (or its libsync bases)
            defines; keyword arguments of a call to a libsync class or function are parameters
            of it (unless it takes **kwargs);
    Swift   every capitalized name (a type, or a function such as OSAtomicAdd32) is declared
            by the LibSync module or the fragment itself, or is one of the standard library's
            names below; every `.member` is a public member or
            enum case of LibSync or a member the fragment declares, or one of the standard library's
            members below.

Each page's index of names (between <!-- index --> and <!-- /index -->) must be what
scripts/api_index.py makes from the sources; --write rewrites it.

Inline code spans of the prose are checked too: each C name of the library quoted in `...`
(sync_*, SYNC_*, OSAtomic*...) must be declared in include/ (or be a Swift type of LibSync,
such as OSAtomicStorage).

    python3 scripts/snippets.py README.md docs/*.md     # check: exit 1 and say where, on any problem
    python3 scripts/snippets.py --write README.md       # copy each example file into its block
    python3 scripts/snippets.py --list docs/*.md        # list the fragments (blocks that are no example)
    python3 scripts/snippets.py --swift-modules .build/debug/Modules docs/*.md   # also compile Swift fragments
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import api_index  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = {"c", "python", "swift"}
MARKER = re.compile(r"^<!-- example: (?P<path>\S+) -->$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")


def blocks(lines: list[str]):
    """Yields (language, example path or None, index of the opening fence, of the closing one)."""
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
            if end is None:
                raise SystemExit(f"unclosed ``` block at line {i + 1}")
            marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
            yield fence["lang"], marker["path"] if marker else None, i, end
            i = end
        i += 1


# ---- C ------------------------------------------------------------------------------------------

C_LIBRARY_NAME = re.compile(r"^(sync_|SYNC_|OSAtomic|OSSpinLock|OSQueue|OSFifo|OSMemoryBarrier|OS_|os_unfair_lock)")
C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
C_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


@lru_cache(maxsize=None)
def c_declared() -> frozenset[str]:
    """Every identifier in the code (not the comments) of the public headers."""
    names = set()
    for header in (ROOT / "include").rglob("*.h"):
        names.update(IDENTIFIER.findall(C_COMMENT.sub(" ", header.read_text(encoding="utf-8"))))
    return frozenset(names)


def check_c(code: str) -> list[str]:
    code = C_STRING.sub('""', C_COMMENT.sub(" ", code))
    return [f"`{name}` is not declared in include/" for name in dict.fromkeys(IDENTIFIER.findall(code))
            if C_LIBRARY_NAME.match(name) and name not in c_declared()]


def check_inline_c(text: str) -> list[str]:
    """C names of the library in the prose's `code spans`, outside code blocks."""
    problems = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for token in re.findall(r"[\w*]+", span):
            if "*" not in token and not token.endswith("_") and C_LIBRARY_NAME.match(token) and token not in c_declared() \
                    and token not in swift_declared()[0]:
                problems.append(f"`{token}` (in the text) is not declared in include/")
    return list(dict.fromkeys(problems))


# ---- Python -------------------------------------------------------------------------------------

PACKAGE = ROOT / "python" / "libsync"


class PyClass:
    def __init__(self, module: str, node: ast.ClassDef):
        self.module, self.node, self.name = module, node, node.name
        self.attributes: set[str] = set()
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.attributes.add(item.name)
            elif isinstance(item, ast.Assign):
                for target in item.targets:
                    self.attributes.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                self.attributes.add(item.target.id)
        for sub in ast.walk(node):  # self.x = ... in any method
            if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                    and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                self.attributes.add(sub.attr)

    def all_attributes(self) -> set[str] | None:
        """The attributes of the class and its bases; None if a base lies outside the package."""
        names = set(self.attributes) | {"__class__", "__dict__", "__doc__", "__enter__", "__exit__"}
        for base in self.node.bases:
            if isinstance(base, ast.Name) and base.id == "object":
                continue
            if isinstance(base, ast.Name) and base.id in ("Exception", "RuntimeError", "ValueError", "OSError",
                                                           "TimeoutError", "TypeError"):
                names |= {"args", "errno", "strerror", "filename", "with_traceback"}
                continue
            resolved = py_resolve_in_module(self.module, base)
            if not isinstance(resolved, PyClass):
                return None
            inherited = resolved.all_attributes()
            if inherited is None:
                return None
            names |= inherited
        return names

    def init(self):
        for item in self.node.body:
            if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "__new__"):
                return item
        return None


@lru_cache(maxsize=None)
def py_module(name: str):
    """(top-level names -> ast node or ("import", module, name) / ("module", module), classes)."""
    parts = name.split(".")[1:]
    path = PACKAGE.joinpath(*parts).with_suffix(".py") if parts else PACKAGE / "__init__.py"
    if not path.is_file():
        path = PACKAGE.joinpath(*parts, "__init__.py")
        if not path.is_file():
            return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, object] = {}
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]

    def absolute(module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        base = package.split(".")
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    for node in tree.body:
        statements = [node]
        if isinstance(node, (ast.If, ast.Try)):  # names defined under `if`/`try` at top level
            statements = list(ast.walk(node))
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                names[stmt.name] = PyClass(name, stmt)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            names[n.id] = stmt
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names[stmt.target.id] = stmt
            elif isinstance(stmt, ast.ImportFrom):
                source = absolute(stmt.module, stmt.level)
                for alias in stmt.names:
                    names[alias.asname or alias.name] = ("import", source, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    names[alias.asname or alias.name.split(".")[0]] = ("module", alias.name if alias.asname else alias.name.split(".")[0])
    return names


def py_lookup(module: str, name: str):
    """What `name` is in libsync module `module`: a PyClass, an ast node, ("module", m), or None."""
    for _ in range(10):  # follow re-exports
        names = py_module(module)
        if names is None:
            return None
        value = names.get(name)
        if value is None and module == "libsync.osatomic" and name.startswith("OS") and name in c_declared():
            return ("generated", name)  # the module makes one function per declaration of the header
        if value is None:
            return ("module", f"{module}.{name}") if py_module(f"{module}.{name}") is not None else None
        if isinstance(value, tuple) and value[0] == "import":
            _, source, original = value
            if not source.startswith("libsync"):
                return ("external", source)
            if py_module(f"{source}.{original}") is not None:
                return ("module", f"{source}.{original}")
            module, name = source, original
            continue
        return value
    return None


def py_resolve_in_module(module: str, node: ast.expr):
    if isinstance(node, ast.Name):
        return py_lookup(module, node.id)
    if isinstance(node, ast.Attribute):
        owner = py_resolve_in_module(module, node.value)
        if isinstance(owner, tuple) and owner[0] == "module" and owner[1].startswith("libsync"):
            return py_lookup(owner[1], node.attr)
    return None


def check_python(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return [f"does not parse: {error.msg} (line {error.lineno})"]
    problems: list[str] = []
    bound: dict[str, object] = {}      # name -> what it is in libsync (module, class, function)
    instances: dict[str, PyClass] = {}  # name -> the libsync class it was made from

    def resolve(node: ast.expr):
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = resolve(node.value)
            if isinstance(owner, tuple) and owner[0] == "module":
                found = py_lookup(owner[1], node.attr)
                if found is None:
                    problems.append(f"`{owner[1]}.{node.attr}` does not exist")
                return found
            if isinstance(owner, PyClass):
                attributes = owner.all_attributes()
                if attributes is not None and node.attr not in attributes:
                    problems.append(f"`{owner.name}.{node.attr}` does not exist")
        return None

    def bind_instance(target: ast.expr, value: ast.expr):
        if isinstance(target, ast.Name) and isinstance(value, ast.Call):
            made = resolve(value.func)
            if isinstance(made, PyClass):
                instances[target.id] = made
            else:
                instances.pop(target.id, None)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "libsync":
                    if py_module(alias.name) is None:
                        problems.append(f"module `{alias.name}` does not exist")
                    bound[alias.asname or "libsync"] = ("module", alias.name if alias.asname else "libsync")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "libsync":
            if py_module(node.module) is None:
                problems.append(f"module `{node.module}` does not exist")
                continue
            for alias in node.names:
                found = py_lookup(node.module, alias.name)
                if found is None:
                    problems.append(f"`{alias.name}` is not in `{node.module}`")
                else:
                    bound[alias.asname or alias.name] = found
    # Statements in order, so that a name's binding is the one before its use.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            bind_instance(node.targets[0], node.value)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind_instance(node.optional_vars, node.context_expr)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in instances:
                cls = instances[node.value.id]
                attributes = cls.all_attributes()
                if attributes is not None and node.attr not in attributes:
                    problems.append(f"`{cls.name}` objects have no `{node.attr}`")
            else:
                resolve(node)
        elif isinstance(node, ast.Call):
            target = resolve(node.func) if not isinstance(node.func, ast.Name) else bound.get(node.func.id)
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in instances:
                cls = instances[node.func.value.id]
                method = next((item for item in cls.node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                               and item.name == node.func.attr), None)
                target = method
            function = target.init() if isinstance(target, PyClass) else target
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and function.args.kwarg is None:
                arguments = function.args
                parameters = {a.arg for a in arguments.args + arguments.kwonlyargs}
                for keyword in node.keywords:
                    if keyword.arg is not None and keyword.arg not in parameters:
                        problems.append(f"`{ast.unparse(node.func)}` takes no argument `{keyword.arg}`")
    return list(dict.fromkeys(problems))


# ---- Swift --------------------------------------------------------------------------------------

SWIFT_STANDARD_TYPES = {
    "Int", "Int8", "Int16", "Int32", "Int64", "UInt", "UInt8", "UInt16", "UInt32", "UInt64", "Bool",
    "Double", "Float", "String", "Character", "Array", "Dictionary", "Set", "Optional", "Void", "Never",
    "Error", "Sendable", "Duration", "ContinuousClock", "UnsafeMutablePointer", "UnsafeMutableRawPointer",
    "UnsafeRawPointer", "UnsafePointer", "OpaquePointer", "Equatable", "Hashable", "Self", "Type",
    "Foundation", "Glibc", "Synchronization", "Mutex", "NSLock", "NSCondition", "DispatchQueue",
    "DispatchSemaphore", "LibSync", "URL", "Data", "Date", "ProcessInfo",
}
SWIFT_STANDARD_MEMBERS = {
    "seconds", "milliseconds", "microseconds", "nanoseconds", "count", "isEmpty", "append", "removeLast",
    "removeFirst", "first", "last", "uppercased", "lowercased", "description", "reduce", "map", "filter",
    "sorted", "contains", "pointee", "allocate", "deallocate", "initialize", "deinitialize", "self", "init",
    "now", "sleep", "max", "min", "zero", "some", "none",
}
SWIFT_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
SWIFT_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


@lru_cache(maxsize=None)
def swift_declared() -> tuple[frozenset[str], frozenset[str]]:
    """(type names, member names) that the LibSync module declares publicly, with enum cases."""
    types, members = set(), set()
    declaration = re.compile(
        r"\b(?:public|open)\s+(?:(?:static|final|override|mutating|nonisolated|convenience|required|indirect)\s+)*"
        r"(class|struct|enum|protocol|typealias|actor|func|var|let|case|subscript|init)\b\s*`?(\w*)")
    enum_case = re.compile(r"^\s*(?:indirect\s+)?case\s+(.+?)\s*(?://.*)?$")
    for source in (ROOT / "Sources" / "LibSync").rglob("*.swift"):
        text = source.read_text(encoding="utf-8")
        for kind, name in declaration.findall(text):
            if kind in ("class", "struct", "enum", "protocol", "typealias", "actor"):
                types.add(name)
            elif name:
                members.add(name)
        for line in text.splitlines():
            match = enum_case.match(line)
            if match and not match[1].rstrip().endswith(":"):
                for part in re.split(r",(?![^()]*\))", match[1]):
                    name = re.match(r"\s*`?(\w+)", part)
                    if name:
                        members.add(name[1])
        # Members of public types declared without `public` are invisible to users: not added.
    return frozenset(types), frozenset(members)


def check_swift(code: str) -> list[str]:
    code = SWIFT_STRING.sub('""', SWIFT_COMMENT.sub(" ", code))
    types, members = swift_declared()
    local = set(re.findall(r"\b(?:class|struct|enum|protocol|typealias|actor)\s+(\w+)", code))
    types = types | local
    members = members | set(re.findall(r"\b(?:let|var|func|case)\s+(\w+)", code))  # the fragment's own
    problems = []
    for match in re.finditer(r"(?<![\w.])([A-Z]\w*)", code):
        name = match[1]
        if name in types or name in members or name in SWIFT_STANDARD_TYPES or re.fullmatch(r"SIG[A-Z0-9]+|E[A-Z0-9]+|[A-Z_0-9]+", name):
            continue
        problems.append(f"type `{name}` is not declared by LibSync")
    for match in re.finditer(r"\.(\w+)", code):
        name = match[1]
        if name[0].isdigit() or name in members or name in types or name in SWIFT_STANDARD_MEMBERS:
            continue
        problems.append(f"`.{name}` is no public member of LibSync")
    return list(dict.fromkeys(problems))


def typecheck_swift(code: str, modules: Path) -> list[str]:
    """Compiles a Swift fragment as a program's main file against the built LibSync module
    (swiftc -typecheck): its types, labels and throwing calls must be right, not only its names."""
    import subprocess
    import tempfile
    if "import LibSync" not in code:
        code = "import LibSync\n" + code
    with tempfile.TemporaryDirectory() as directory:
        main = Path(directory) / "main.swift"
        main.write_text(code, encoding="utf-8")
        result = subprocess.run(["swiftc", "-typecheck", "-I", str(modules), "-I", str(ROOT / "Sources/CSyncShim/include"),
                                 str(main)], capture_output=True, text=True)
    return [f"swiftc: {line.split('main.swift:', 1)[-1].strip()}" for line in result.stderr.splitlines()
            if "main.swift:" in line and ("error:" in line or "warning:" in line)]


CHECKERS = {"c": check_c, "python": check_python, "swift": check_swift}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="copy each example file into its block")
    mode.add_argument("--list", action="store_true", help="list the fragments (blocks that are no example)")
    parser.add_argument("--swift-modules", type=Path, metavar="DIR",
                        help="also type-check Swift fragments against the LibSync module built in DIR (.build/debug/Modules)")
    parser.add_argument("markdown", nargs="+", type=Path)
    args = parser.parse_args()
    if args.swift_modules and not (args.swift_modules / "LibSync.swiftmodule").exists():
        parser.error(f"{args.swift_modules} holds no LibSync.swiftmodule (run swift build first)")
    problems, fragments = [], []
    for doc in args.markdown:
        text = doc.read_text(encoding="utf-8")
        lines = text.splitlines()
        out, last = [], 0
        for lang, path, start, end in blocks(lines):
            where = f"{doc}:{start + 1}"
            if lang not in LANGUAGES:
                continue
            if path is None:
                fragments.append(f"{where}: a ```{lang} fragment (names checked, not run)")
                code = "\n".join(lines[start + 1:end])
                found = CHECKERS[lang](code)
                if lang == "swift" and args.swift_modules and not found:
                    found = typecheck_swift(code, args.swift_modules)
                for problem in found:
                    problems.append(f"{where}: {problem}")
                continue
            example = ROOT / path
            if not example.is_file():
                problems.append(f"{where}: {path} does not exist")
                continue
            text_lines = example.read_text(encoding="utf-8").splitlines()
            if lines[start + 1:end] != text_lines:
                if args.write:
                    out += lines[last:start + 1] + text_lines
                    last = end
                else:
                    problems.append(f"{where}: the block differs from {path} (run: python3 scripts/snippets.py --write {doc})")
        outside = "\n".join(line for i, line in enumerate(lines) if not in_block(lines, i))
        problems += [f"{doc}: {problem}" for problem in check_inline_c(outside)]
        if args.write and last:
            doc.write_text("\n".join(out + lines[last:]) + "\n", encoding="utf-8")
            print(f"{doc}: blocks updated from their example files")
    if not args.list:  # each page's index of names (scripts/api_index.py) is current
        problems += api_index.check(args.write, args.markdown)
    if args.list:
        print("\n".join(fragments))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def in_block(lines: list[str], index: int, _cache: dict = {}) -> bool:
    key = id(lines)
    if key not in _cache or _cache[key][0] is not lines:
        inside = set()
        for _, _, start, end in blocks(lines):
            inside.update(range(start, end + 1))
        _cache.clear()
        _cache[key] = (lines, inside)
    return index in _cache[key][1]


if __name__ == "__main__":
    sys.exit(main())
