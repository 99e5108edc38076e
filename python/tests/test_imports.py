"""The package's modules import one another one way only: no module imports (at top level or
inside a function) a module that imports it back, directly or through others."""
import ast
from pathlib import Path

import libsync

PACKAGE = Path(libsync.__file__).resolve().parent


def imports(path: Path) -> set:
    """The package's modules that the module at `path` imports, anywhere in its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:          # from .x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:                         # from . import x, y
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.split(".")[0] == "libsync":
                parts = node.module.split(".")
                found.update([parts[1]] if len(parts) > 1 else [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[1] for alias in node.names
                         if alias.name.startswith("libsync."))
    return found


def graph() -> dict:
    modules = {path.stem: path for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    return {name: sorted(imports(path) & modules.keys() - {name}) for name, path in modules.items()}


def circles(edges: dict) -> list:
    """Every module that reaches itself, with the path it takes."""
    found = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for target in edges[module]:
                if target == start:
                    found.append(" -> ".join(path + [start]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, path + [target]))
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a -> b -> c -> a", "b -> c -> a -> b",
                                                                         "c -> a -> b -> c"]


def test_no_module_of_the_package_imports_itself_back():
    edges = graph()
    assert "debug" in edges["locks"] and "locks" in edges["conditions"]  # the graph is read
    assert "_distributed" in edges["_filelock"] and "_filelock" in edges["distributed_lock"]
    assert circles(edges) == []
