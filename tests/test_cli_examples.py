"""The CLI on the bundled spec examples, checked against hand computations."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import onnxflow
from onnxflow.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_spec_loop_example_matches_the_spec_walkthrough() -> None:
    sess = onnxflow.InferenceSession(EXAMPLES / "loop_trip_count.onnx")
    b_final, vals = sess.run(None, {"b": np.array(6, np.int32)})
    # a = 3, b = 6: iteration 0 gives b = -3 (keep going: 9 > -3), iteration 1 gives b = 6
    # and stops (0 > 6 is false); the scan output collects b_in + b_in each time.
    assert b_final == 6
    np.testing.assert_array_equal(vals, np.array([12, -6], np.int32))


def test_spec_rnn_scan_matches_numpy_recurrence() -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(EXAMPLES / "rnn_scan.onnx")
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 2, 4)).astype(np.float32)
    h = np.zeros((2, 8), np.float32)
    y, y_h = onnxflow.InferenceSession(model).run(None, {"H_0": h, "X": x})
    states = []
    for t in range(5):
        h = np.tanh(x[t] @ w["WiT"] + h @ w["RiT"] + w["Wbi"] + w["Rbi"])
        states.append(h)
    np.testing.assert_allclose(y, np.stack(states), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_h, states[-1], rtol=1e-5, atol=1e-6)


def test_cli_run_generates_missing_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "rnn_scan.onnx"), "--dim", "S=5", "--dim", "B=2"]) == 0
    out = capsys.readouterr().out
    assert "generated input X: tensor(float) [5, 2, 4]" in out
    assert "output Y: float32 [5, 2, 8]" in out
    assert "output Y_h: float32 [2, 8]" in out


def test_cli_check_reports_ops_inside_subgraphs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES / "loop_trip_count.onnx")]) == 0
    out = capsys.readouterr().out
    assert "Loop: 1" in out and "Greater: 1" in out and "problems found: none" in out


def test_cli_reports_bad_input_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "loop_trip_count.onnx"), "--input", "nope=x.npy"]) == 1
    assert "no input 'nope'" in capsys.readouterr().err


def test_cli_profile_writes_a_trace_with_one_event_per_iteration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    trace = tmp_path / "rnn.json"
    model = str(EXAMPLES / "rnn_scan.onnx")
    args = ["profile", model, "--dim", "S=6", "--dim", "B=2", "--runs", "2", "--trace", str(trace)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "op type" in out and "Scan rnn" in out and "wrote Chrome trace" in out
    events = json.loads(trace.read_text())["traceEvents"]
    for run in (0, 1):
        assert [
            e["name"] for e in events if e["cat"] == "iteration" and e["args"]["run"] == run
        ] == [f"rnn iteration {t}" for t in range(6)]


def test_cli_run_saves_intermediate_values_and_prints_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "b.npy", np.array(6, np.int32))
    inter = tmp_path / "inter"
    args = ["run", str(EXAMPLES / "loop_trip_count.onnx"), "--input", f"b={tmp_path / 'b.npy'}"]
    assert main([*args, "--intermediate", str(inter), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "loop: 1 of 10" in out and "-> b_out: int32[] min=6 max=6" in out
    assert np.load(inter / "a.npy") == 3
    np.testing.assert_array_equal(np.load(inter / "user_defined_vals.npy"), [12, -6])


def test_cli_progress_bar_counts_loop_iterations(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", str(EXAMPLES / "rnn_scan.onnx"), "--dim", "S=3000", "--progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "rnn [" in err and "it/s" in err
    assert err.rstrip().split("\r")[-1].startswith("rnn [" + "#" * 30 + "] 3000/3000")


def test_cli_output_to_a_closed_pipe_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """``onnxflow profile m.onnx | head`` : the reader goes away; no traceback, exit 141."""
    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        code = main(["profile", str(EXAMPLES / "rnn_scan.onnx"), "--dim", "S=3", "--dim", "B=1"])
        stream.write("more\n")
        stream.flush()  # now goes to os.devnull: no BrokenPipeError at exit either
    finally:
        stream.close()
    assert code == 141


def _check_model(opset: int, nodes: list, functions: tuple = ()) -> object:
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4] if n == "x" else [4])
        for n in "xsb"
    ]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    imports += [helper.make_opsetid("local", 1)] if functions else []
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def _check_output(model: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    main(["check", str(path)])
    return capsys.readouterr().out


def test_cli_check_names_the_kernel_version_each_operator_resolves_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx import helper

    twice = helper.make_function(
        "local", "Twice", ["i"], ["o"], [helper.make_node("Add", ["i", "i"], ["o"])],
        [helper.make_opsetid("", 13)],
    )  # fmt: skip
    nodes = [
        helper.make_node("Gelu", ["x"], ["a"], domain="com.microsoft"),
        helper.make_node("LayerNormalization", ["a", "s", "b"], ["c"], axis=-1),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Twice", ["d"], ["y"], domain="local"),
    ]
    out = _check_output(_check_model(17, nodes, (twice,)), tmp_path, capsys)
    assert "com.microsoft.Gelu: 1 (opset 1) -> kernel since 1" in out
    assert "LayerNormalization: 1 (ai.onnx opset 17) -> kernel since 17" in out
    assert "Relu: 1 (ai.onnx opset 17) -> kernel since 14" in out
    assert "local.Twice: 1 (opset 1) -> model-local function (expanded)" in out
    assert "Add: 1 (ai.onnx opset 13) -> kernel since 13" in out  # the function's own opset
    assert "only onnxruntime defines" not in out and "problems found: none" in out


def test_cli_check_flags_default_domain_operators_only_onnxruntime_defines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx import helper

    nodes = [
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["c"], axis=-1),
        helper.make_node("SimplifiedLayerNormalization", ["c", "s"], ["y"], axis=-1),
    ]
    out = _check_output(_check_model(14, nodes), tmp_path, capsys)
    for op_type in ("LayerNormalization", "SimplifiedLayerNormalization"):
        assert (
            f"{op_type}: 1 (ai.onnx opset 14) -> onnxruntime's default-domain registration, "
            "kernel since 1 (onnx has no schema for it at opset 14)"
        ) in out
    flagged = out.split("only onnxruntime defines")[1].split("problems found")[0]
    assert "LayerNormalization (ai.onnx opset 14)" in flagged
    assert "SimplifiedLayerNormalization (ai.onnx opset 14)" in flagged
    assert "problems found: none" in out


def test_cli_check_says_an_unknown_operator_is_not_supported_without_flagging_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx import helper

    nodes = [helper.make_node("Frobnicate", ["x"], ["y"])]
    out = _check_output(_check_model(17, nodes), tmp_path, capsys)
    assert "Frobnicate: 1 (ai.onnx opset 17) -> not supported (onnx has no schema" in out
    assert "only onnxruntime defines" not in out
    assert "does not support: Frobnicate" in out
