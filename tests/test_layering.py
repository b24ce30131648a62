"""The package's import graph: load -> validate -> compile -> run, with no way back.

Every ``import`` counts, module level or inside a function: a function-local import hides a
cycle from Python, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import onnxflow

ROOT = Path(onnxflow.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["onnxflow", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Module -> the onnxflow modules it imports (a package's ``__init__`` as the package)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n)) is not None:
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def _edges(graph: dict[str, set[str]], src: str, dst: str) -> list[str]:
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        if a.startswith(src)
        for b in targets
        if b.startswith(dst)
    )


def test_there_is_no_import_cycle() -> None:
    assert _cycle(_graph()) is None


def test_compile_never_imports_the_runtime() -> None:
    assert _edges(_graph(), "onnxflow.compile", "onnxflow.runtime") == []


def test_the_passes_reach_no_runtime_module() -> None:
    """Nothing compile/passes imports, directly or through other modules, is in runtime/."""
    graph = _graph()
    seen: set[str] = set()
    todo = [m for m in graph if m.startswith("onnxflow.compile.passes")]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    assert seen > {"onnxflow.compile.passes.hoist", "onnxflow.ops.registry"}
    assert sorted(m for m in seen if m.startswith("onnxflow.runtime")) == []


def test_the_runtime_knows_no_operators() -> None:
    """runtime/ reads kernels' promises (onnxflow.traits), never a kernel module."""
    assert _edges(_graph(), "onnxflow.runtime", "onnxflow.ops") == []


def test_the_checker_finds_a_cycle_and_an_edge() -> None:
    """The helpers above can fail: a made-up graph with a cycle and a forbidden edge."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "onnxflow.compile.x": {"onnxflow.runtime.y"}}
    graph["onnxflow.runtime.y"] = set()
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _edges(graph, "onnxflow.compile", "onnxflow.runtime") == [
        "onnxflow.compile.x -> onnxflow.runtime.y"
    ]
