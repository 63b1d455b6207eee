"""Lines of the .py files under each DIR by kind (code, docstring, comment, blank), AST statements and the mean length
of a code line: the figures bench/RESULTS.md gives for the size of src/. Statements and the mean line say whether
lines went by removing code or by packing it.

usage: python scripts/count_lines.py [DIR ...]   (default: src)
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

KINDS = ("code", "doc", "comment", "blank")


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def count(dirs: list[Path]) -> dict[str, float]:
    totals = dict.fromkeys(("lines", *KINDS, "stmts"), 0)
    code_chars = 0
    for path in sorted(p for d in dirs for p in d.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        docs = _docstring_lines(tree)
        totals["stmts"] += sum(isinstance(n, ast.stmt) for n in ast.walk(tree))
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            kind = "doc" if number in docs else "blank" if not stripped else "comment" if stripped[0] == "#" else "code"
            totals["lines"] += 1
            totals[kind] += 1
            code_chars += len(stripped) if kind == "code" else 0
    return {**totals, "mean_code_line": round(code_chars / max(totals["code"], 1), 1)}


if __name__ == "__main__":
    print(json.dumps(count([Path(a) for a in sys.argv[1:]] or [Path("src")])))
