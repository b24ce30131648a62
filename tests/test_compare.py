"""onnxflow compare (issue 21): the first divergence between two runs, bodies included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import parser

import onnxflow
from onnxflow.cli import main

ROOT = Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.onnx"))
EXPORTED = ROOT / "tests" / "exporters" / "data"


def _loop_model(body_op: str) -> onnx.ModelProto:
    """A Loop of 3 iterations whose body computes y = x + 1 then ``body_op``(y, x)."""
    return parser.parse_model(
        f"""
        <ir_version: 8, opset_import: ["": 17]>
        g (float[2] x0) => (float[2] x_final, float[N, 2] ys) {{
            m = Constant <value = int64 {{3}}> ()
            x_final, ys = Loop <body = body (int64 i, bool c, float[2] x) =>
                                         (bool c_out, float[2] x_out, float[2] y) {{
                one = Constant <value = float {{1.0}}> ()
                y = Add (x, one)
                x_out = {body_op} (y, x)
                c_out = Identity (c)
            }}> (m, , x0)
        }}
        """
    )


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    model.graph.node[1].name = "L"
    return model


def test_one_node_differs_in_a_loop_body_names_it_at_iteration_0(tmp_path: Path) -> None:
    ours, other = _named(_loop_model("Mul")), _named(_loop_model("Sub"))
    x0 = {"x0": np.array([1.0, 2.0], np.float32)}
    report = onnxflow.compare(ours, x0, against=other)
    div = report.first_divergence
    assert not report.agree and div is not None
    assert (div.node, div.op_type, div.output) == ("x_out", "Mul", "x_out")
    assert div.graph_path == ["L", "body"] and div.iteration == [0]
    assert div.agreeing_inputs == ["y", "x"]
    assert div.max_abs_err == pytest.approx(5.0)  # y = [2, 3]: y * x = [2, 6], y - x = [1, 1]


def test_trip_count_with_body_condition_against_onnxruntime_explains_the_counts() -> None:
    model = parser.parse_model(
        """
        <ir_version: 8, opset_import: ["": 17]>
        g (float x0) => (float x_final) {
            m = Constant <value = int64 {5}> ()
            x_final = Loop <body = body (int64 i, bool c, float x) => (bool c_out, float x_out) {
                one = Constant <value = float {1.0}> ()
                x_out = Add (x, one)
                three = Constant <value = float {3.0}> ()
                c_out = Less (x_out, three)
            }> (m, , x0)
        }
        """
    )
    model.graph.node[1].name = "L"
    with pytest.warns(onnxflow.OnnxflowWarning, match="cond is omitted"):
        report = onnxflow.compare(model, {"x0": np.array(0.0, np.float32)}, against="onnxruntime")
    assert not report.agree
    (count,) = report.iteration_counts
    assert (count["node"], count["ours"], count["theirs"]) == ("L", 5, 3)
    assert "Loop 'L': onnxflow ran 5 iterations, onnxruntime 3" in count["note"]
    assert "spec's Loop table" in count["note"] and "loop_condition='always'" in count["note"]
    assert "spec's Loop table" in report.summary()
    div = report.first_divergence
    assert div is not None and (div.node, div.iteration) == ("L", [])


def _add_to_sub(path: Path) -> tuple[Path, Path]:
    text = """
        <ir_version: 8, opset_import: ["": 17]>
        g (float[3] a, float[3] b) => (float[3] z) {
            s = Mul (a, b)
            t = OP (s, a)
            z = Relu (t)
        }
        """
    ours, other = path / "ours.onnx", path / "other.onnx"
    onnx.save(parser.parse_model(text.replace("OP", "Add")), ours)
    onnx.save(parser.parse_model(text.replace("OP", "Sub")), other)
    return ours, other


def test_main_graph_divergence_names_the_node_and_its_agreeing_inputs(tmp_path: Path) -> None:
    ours, other = _add_to_sub(tmp_path)
    feeds = {"a": np.array([1, 2, 3], np.float32), "b": np.array([4, 5, 6], np.float32)}
    report = onnxflow.compare(str(ours), feeds, against=str(other))
    div = report.first_divergence
    assert div is not None
    assert (div.node, div.op_type, div.graph_path, div.iteration) == ("t", "Add", [], [])
    assert div.agreeing_inputs == ["s", "a"]
    assert div.ours.shape == [3] and div.ours.dtype == "float32" and div.ours.max == 21.0
    assert "first divergence: Add 't' at main graph" in report.summary()


def test_cli_json_report_fields_and_exit_codes(tmp_path: Path) -> None:
    ours, other = _add_to_sub(tmp_path)
    out = tmp_path / "report.json"
    assert main(["compare", str(ours), "--against", str(other), "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["agree"] is False
    div = data["first_divergence"]
    types = {"node": str, "op_type": str, "graph_path": list, "iteration": list, "output": str}
    for key, kind in {**types, "max_abs_err": float, "max_rel_err": float}.items():
        assert isinstance(div[key], kind), key
    assert set(div["ours"]) == {"shape", "dtype", "min", "max", "mean", "nan", "inf"}
    assert main(["compare", str(ours), "--against", str(ours)]) == 0
    assert main(["compare", str(tmp_path / "missing.onnx")]) == 2


@pytest.mark.parametrize("against", ["onnxruntime", "reference"])
@pytest.mark.parametrize("model", EXAMPLES, ids=lambda p: p.stem)
def test_examples_agree(model: Path, against: str, capsys: pytest.CaptureFixture[str]) -> None:
    dims = ["--dim", "B=2", "--dim", "S=3"] if model.stem == "rnn_scan" else []
    assert main(["compare", str(model), "--against", against, *dims]) == 0
    assert "agree" in capsys.readouterr().out


@pytest.mark.parametrize("against", ["onnxruntime", "reference"])
@pytest.mark.parametrize(
    "name",
    [
        "scripted_loops_torchscript_opset13",
        "scan_rnn_cell_dynamo_default",
        "gru_dynamo_default",
        "while_counter_dynamo_default",  # onnx.reference stacks its 2-d body values flat
    ],
)
def test_exported_models_agree(name: str, against: str) -> None:
    model = onnx.load(EXPORTED / f"{name}.onnx")
    data = np.load(EXPORTED / f"{name}.npz")
    names = [i.name for i in model.graph.input]
    feeds = {n: data[f"in0_{k}"] for k, n in enumerate(names) if f"in0_{k}" in data}
    report = onnxflow.compare(model, feeds, against=against)
    assert report.agree, report.summary()
    assert report.compared > 0
