"""Readable size: no function of ``src/onnxflow`` over 60 lines or above cyclomatic complexity 15
(as ``radon cc`` counts it), unless its docstring says why under a ``Size:`` note (a table-like
dispatch, say). Methods and nested functions count on their own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import radon.visitors as radon_visitors

import onnxflow

ROOT = Path(onnxflow.__file__).parent
MAX_LINES = 60
MAX_COMPLEXITY = 15


def _blocks(blocks: list) -> Iterator:
    for b in blocks:
        yield b
        yield from _blocks(getattr(b, "methods", None) or [])
        yield from _blocks(getattr(b, "closures", None) or [])


def _excused(tree: ast.Module, lineno: int) -> bool:
    """Whether the function defined at ``lineno`` says in its docstring why it is large."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == lineno:
            return "Size:" in (ast.get_docstring(node) or "")
    return False


def _too_large() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        visitor = radon_visitors.ComplexityVisitor.from_code(text)
        tree = ast.parse(text)
        for b in _blocks([*visitor.functions, *visitor.classes]):
            if isinstance(b, radon_visitors.Class):
                continue
            lines = b.endline - b.lineno + 1
            if (lines > MAX_LINES or b.complexity > MAX_COMPLEXITY) and not _excused(
                tree, b.lineno
            ):
                where = f"{path.relative_to(ROOT)}:{b.lineno} {b.fullname}"
                found.append(f"{where}: {lines} lines, complexity {b.complexity}")
    return found


def test_no_function_is_too_large_to_read_at_once() -> None:
    assert _too_large() == []


def test_the_check_sees_a_large_function(tmp_path: Path) -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(20))
    code = f"def big(x):\n{branches}\n    return -1\n"
    (block,) = radon_visitors.ComplexityVisitor.from_code(code).functions
    assert block.complexity > MAX_COMPLEXITY
    excused = code.replace("def big(x):\n", 'def big(x):\n    """Size: a table."""\n')
    assert _excused(ast.parse(excused), 1) and not _excused(ast.parse(code), 1)
