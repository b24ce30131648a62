"""``InferenceSession.source()`` and ``onnxflow code``: the Python the plan runs, readable."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np

import onnxflow
from onnxflow.cli import main
from onnxflow.runtime.lower import lowered
from onnxflow.spec_models import rnn_scan

ROOT = Path(__file__).resolve().parent.parent


def _sections(text: str) -> dict[str, str]:
    """Each generated function by the comment line naming where it sits."""
    found: dict[str, str] = {}
    for part in text.split("\n\n"):
        where, _, code = part.partition("\n")
        assert where.startswith("# "), part
        found[where[2:]] = code
    return found


def test_source_shows_the_main_graph_and_every_body_as_valid_python() -> None:
    sess = onnxflow.InferenceSession(rnn_scan())
    before = _sections(sess.source())
    # main, the hoisted pre-body, what remains (the body as written compiles only when watched)
    assert len(before) == 3
    for code in before.values():
        ast.parse(code)
    assert any(code.startswith("def run(args):") for code in before.values())
    assert not any("run as a loop" in where for where in before)


def test_a_loop_that_ran_shows_its_whole_loop_function() -> None:
    sess = onnxflow.InferenceSession(rnn_scan())
    feeds = {"X": np.ones((3, 1, 4), np.float32), "H_0": np.zeros((1, 8), np.float32)}
    sess.run(None, feeds)
    loops = {w: c for w, c in _sections(sess.source()).items() if "run as a loop" in w}
    ((where, code),) = loops.items()
    assert "Scan 'rnn'" in where
    assert code.startswith("def drive(") and "while i < stop:" in code
    assert "# f0: numpy.dot, for MatMul" in code  # the legend names each kernel


def test_the_source_is_the_code_that_runs() -> None:
    """The text shown, compiled again, is the very bytecode of the function a run calls."""
    sess = onnxflow.InferenceSession(ROOT / "examples" / "loop_trip_count.onnx")
    sess.run(None, {"b": np.array(6, np.int32)})
    for where, code in _sections(sess.source()).items():
        text = "\n".join(line for line in code.splitlines() if not line.startswith("# "))
        (compiled,) = [
            c for c in compile(text, "<shown>", "exec").co_consts if hasattr(c, "co_code")
        ]
        plan = sess.plan if where.count(">") == 0 else sess.plan.children[0][1]
        made = lowered(plan)
        if compiled.co_name == "run":
            fn = made.function.fn  # type: ignore[union-attr]
        else:
            fn = next(value.fn for key, value in made.variants.items() if key.loop)
        assert compiled.co_code == fn.__code__.co_code, where


def test_cli_code_prints_the_source_and_keeps_stdout_python(capsys) -> None:  # type: ignore[no-untyped-def]
    assert (
        main(["code", str(ROOT / "examples" / "rnn_scan.onnx"), "--dim", "S=3", "--dim", "B=1"])
        == 0
    )
    out, err = capsys.readouterr()
    assert "generated input X" in err and "generated input" not in out
    sections = _sections(out.strip())
    assert any("run as a loop" in where for where in sections)
    for code in sections.values():
        ast.parse(code)


def test_docs_page_is_generated_from_this_code() -> None:
    spec = importlib.util.spec_from_file_location(
        "code_example", ROOT / "tools" / "code_example.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "generated_code.md").read_text()
    assert page == module.page(), "docs/generated_code.md is stale: run tools/code_example.py"
