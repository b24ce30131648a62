"""``InferenceSession.source()`` and ``onnxflow code``: the Python the plan runs, readable."""

from __future__ import annotations

import ast
import importlib.util
import keyword
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

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
    assert "# MatMul: numpy.dot, for MatMul" in code  # the legend names each kernel


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


def _named_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model whose value names are paths, keywords, builtins, names of the generated code's
    own and names that collide once made identifiers; a Loop body reads some of them."""
    F = onnx.TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["i_f", "/layer.0/MatMul_output_0"], ["len"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Mul", ["len", "class"], ["b0"]),
        ],
        "body",
        [helper.make_tensor_value_info(n, t, []) for n, t in (("i", 7), ("cond", 9))],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("cond_out", 9), ("b0", F))],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["/layer.0/MatMul_output_0"]),
        helper.make_node("Relu", ["/layer.0/MatMul_output_0"], ["a.b"]),
        helper.make_node("Neg", ["a.b"], ["a_b"]),
        helper.make_node("Add", ["a_b", "a.b"], ["0abc"]),
        helper.make_node("Loop", ["trips", ""], ["_many"], body=body),
        helper.make_node("Identity", ["0abc"], ["MatMul"]),
    ]
    w = np.arange(6, dtype=np.float32).reshape(3, 2) - 2
    graph = helper.make_graph(
        nodes,
        "named",
        [helper.make_tensor_value_info("x", F, [1, 3])],
        [helper.make_tensor_value_info(n, F, None) for n in ("MatMul", "_many")],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
            numpy_helper.from_array(np.array(2, np.float32), "class"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[1, -2, 3]], np.float32)
    m = x @ w
    r = np.maximum(m, 0)
    rows = np.stack([(np.float32(i) + m) * 2 for i in range(3)])
    return model, {"x": x, "MatMul": -r + r, "_many": rows}


def test_generated_code_names_values_after_their_onnx_names() -> None:
    """``onnxflow code`` reads like the model: locals and constants named after the ONNX
    values (made identifiers, unique, never a keyword, builtin or the code's own helper
    names), kernels after their operators; not ``v12``, ``c3``, ``f0``."""
    model, want = _named_model()
    sess = onnxflow.InferenceSession(model)
    got = sess.run(None, {"x": want["x"]})
    np.testing.assert_array_equal(got[0], want["MatMul"])
    np.testing.assert_array_equal(got[1], want["_many"])
    text = sess.source()
    assert "layer_0_MatMul_output_0 = MatMul(x, W)" in text
    assert "a_b = Relu(layer_0_MatMul_output_0" in text
    assert "a_b_1 = Neg(a_b" in text  # "a.b" and "a_b" are both a_b made identifiers
    assert "v_0abc = Add(a_b_1, a_b" in text  # an identifier starts with no digit
    assert "(many,) = _many(Loop(trips, None, layer_0" in text  # "_many": the helper's name
    assert "return [MatMul_1, many]" in text  # the value "MatMul", apart from the kernel
    assert "v_len = Add(i_f" in text and "v_b0 = Mul(v_len, v_class, out=...)" in text
    assert "v_i" in text  # the loop body's input "i", not the drive's counter
    assert not re.search(r"\b[vcfg]\d+\b", text), text
    for section in _sections(text).values():
        tree = ast.parse(section)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not names & set(keyword.kwlist)
        assert names.isdisjoint({"len", "class", "i_"})


def test_generated_loops_run_the_same_with_onnx_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-loop function, named after ONNX values too, runs (twice: the second run
    reuses what the first kept) and keeps its own counter ``i`` apart from the body's."""
    model, want = _named_model()
    sess = onnxflow.InferenceSession(model)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": want["x"]})[1], want["_many"])
    loops = {w: c for w, c in _sections(sess.source()).items() if "run as a loop" in w}
    ((code),) = loops.values()
    assert "while i < stop:" in code and "v_i = _index(i)" in code
