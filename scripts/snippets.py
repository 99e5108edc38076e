"""Keeps the code in the documentation runnable: every ```c, ```python and ```swift block of the
given Markdown files must be an example file, named by the comment on the line before it,

    <!-- example: examples/python/quickstart.py -->
    ```python
    ...the file's whole text...
    ```

and equal to that file, which the test command compiles and runs (scripts/test.sh).

    python3 scripts/snippets.py README.md           # check: exit 1 and say where, on any mismatch
    python3 scripts/snippets.py --write README.md   # copy each example file into its block
    python3 scripts/snippets.py --list docs/*.md    # list the code blocks that are no example yet
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = {"c", "python", "swift"}
MARKER = re.compile(r"^<!-- example: (?P<path>\S+) -->$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")


def blocks(lines: list[str]):
    """Yields (language, example path or None, index of the opening fence, of the closing one)."""
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence and fence["lang"]:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
            if end is None:
                raise SystemExit(f"unclosed ``` block at line {i + 1}")
            marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
            yield fence["lang"], marker["path"] if marker else None, i, end
            i = end
        i += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="copy each example file into its block")
    mode.add_argument("--list", action="store_true", help="list code blocks that are no example yet")
    parser.add_argument("markdown", nargs="+", type=Path)
    args = parser.parse_args()
    problems = []
    for doc in args.markdown:
        lines = doc.read_text(encoding="utf-8").splitlines()
        out, last = [], 0
        for lang, path, start, end in blocks(lines):
            where = f"{doc}:{start + 1}"
            if lang not in LANGUAGES:
                continue
            if path is None:
                problems.append(f"{where}: a ```{lang} block that is no example file (add <!-- example: PATH --> above it)")
                continue
            example = ROOT / path
            if not example.is_file():
                problems.append(f"{where}: {path} does not exist")
                continue
            text = example.read_text(encoding="utf-8").splitlines()
            if lines[start + 1:end] != text:
                if args.write:
                    out += lines[last:start + 1] + text
                    last = end
                else:
                    problems.append(f"{where}: the block differs from {path} (run: python3 scripts/snippets.py --write {doc})")
        if args.write and last:
            doc.write_text("\n".join(out + lines[last:]) + "\n", encoding="utf-8")
            print(f"{doc}: blocks updated from their example files")
    for problem in problems:
        print(problem, file=sys.stdout if args.list else sys.stderr)
    if args.list:
        return 0
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
