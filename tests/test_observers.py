"""Seeing inside a run: intermediate values, per-iteration traces, verbose output, profiles."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.observers import Profiler, Trace, Verbose

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _spec_loop() -> onnxflow.InferenceSession:
    return onnxflow.InferenceSession(EXAMPLES / "loop_trip_count.onnx")


def test_intermediate_returns_every_main_graph_value() -> None:
    values = _spec_loop().run(None, {"b": np.array(6, np.int32)}, intermediate=True)
    assert set(values) == {"b", "a", "max_trip_count", "keepgoing", "b_final", "user_defined_vals"}
    assert values["a"] == 3 and values["b_final"] == 6
    np.testing.assert_array_equal(values["user_defined_vals"], [12, -6])


def test_intermediate_with_names_returns_just_those_values() -> None:
    sess = _spec_loop()
    values = sess.run(["a", "b_final"], {"b": np.array(6, np.int32)}, intermediate=True)
    assert set(values) == {"a", "b_final"} and values["b_final"] == 6
    with pytest.raises(onnxflow.InputError, match=r"unknown value name\(s\) \['my_local'\]"):
        sess.run(["my_local"], {"b": np.array(6, np.int32)}, intermediate=True)  # a body value


def test_per_iteration_values_of_the_spec_loop_match_a_hand_computation() -> None:
    trace = Trace()
    _spec_loop().run(None, {"b": np.array(6, np.int32)}, observers=[trace])
    assert trace.iterations_of("loop") == [0, 1]
    # a = 3. Iteration 0: b_in = 6, my_local = 9, b_out = -3, keep going (9 > -3), val = 12.
    # Iteration 1: b_in = -3, my_local = 0, b_out = 6, stop (0 > 6 is false), val = -6.
    expected = [
        {
            "i": 0,
            "b_in": 6,
            "my_local": 9,
            "b_out": -3,
            "keepgoing_out": True,
            "user_defined_val": 12,
        },
        {
            "i": 1,
            "b_in": -3,
            "my_local": 0,
            "b_out": 6,
            "keepgoing_out": False,
            "user_defined_val": -6,
        },
    ]
    for i, want in enumerate(expected):
        got = trace.at("loop", i)
        assert {k: got[k].item() for k in want} == want


def test_trace_keeps_only_the_chosen_iterations() -> None:
    trace = Trace(iterations=range(1, 2))
    _spec_loop().run(None, {"b": np.array(6, np.int32)}, observers=[trace])
    assert trace.iterations_of("loop") == [1]
    with pytest.raises(KeyError, match="no values recorded"):
        trace.at("loop", 0)


def _nested_loops() -> onnxflow.InferenceSession:
    inner = helper.make_graph(
        [helper.make_node("Add", ["acc2", "i"], ["acc2_out"], name="inner_add")],
        "inner",
        [
            helper.make_tensor_value_info(n, t, [])
            for n, t in (("j", I64), ("c2", B), ("acc2", I64))
        ],
        [helper.make_tensor_value_info(n, t, []) for n, t in (("c2", B), ("acc2_out", I64))],
    )
    outer = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "acc"], ["acc_out"], body=inner, name="inner")],
        "outer",
        [helper.make_tensor_value_info(n, t, []) for n, t in (("i", I64), ("c", B), ("acc", I64))],
        [helper.make_tensor_value_info(n, t, []) for n, t in (("c", B), ("acc_out", I64))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "zero"], ["total"], body=outer, name="outer")],
        "g",
        [helper.make_tensor_value_info("M", I64, [])],
        [helper.make_tensor_value_info("total", I64, [])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )
    return onnxflow.InferenceSession(helper.make_model(graph))


def test_nested_bodies_are_addressed_by_path() -> None:
    trace = Trace()
    (total,) = _nested_loops().run(None, {"M": np.array(3, np.int64)}, observers=[trace])
    assert total == 3 * (0 + 1 + 2)  # the inner loop adds the outer iteration number 3 times
    # Outer iterations 0 and 1 leave acc = 0 + 3 * 1 = 3; in outer iteration 2 the inner loop
    # adds i = 2 each time, so its iteration 1 starts from 3 + 2 and ends at 3 + 4.
    inner = trace.at("outer", 2, "inner", 1)
    assert inner["acc2"] == 3 + 2 and inner["acc2_out"] == 3 + 4
    assert trace.iterations_of("inner") == [0, 1, 2] * 3


def test_if_branch_and_scan8_batch_keys() -> None:
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y_then"])],
        "then",
        [],
        [helper.make_tensor_value_info("y_then", F, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["y_else"])],
        "else",
        [],
        [helper.make_tensor_value_info("y_else", F, [2])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="pick")],
        "g",
        [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    trace = Trace()
    sess.run(None, {"c": np.array(False), "x": np.array([-1, 2], np.float32)}, observers=[trace])
    np.testing.assert_array_equal(trace.at("pick", "else_branch")["y_else"], [1, 2])


def test_observed_runs_show_work_that_optimised_runs_hoist() -> None:
    sess = onnxflow.InferenceSession(EXAMPLES / "rnn_scan.onnx")
    x = np.random.default_rng(0).standard_normal((4, 1, 4)).astype(np.float32)
    feeds = {"X": x, "H_0": np.zeros((1, 8), np.float32)}
    trace = Trace(nodes=["rnn"])
    observed = sess.run(None, feeds, observers=[trace])
    plain = sess.run(None, feeds)
    # Batched, the projection is one BLAS product over all steps' rows, row by row when observed:
    # BLAS blocks the two differently, so float32 results may differ in the last bits.
    np.testing.assert_allclose(observed[0], plain[0], rtol=1e-5, atol=1e-7)
    w = {t.name: numpy_helper.to_array(t) for t in sess.model.graph.initializer}
    for t in range(4):  # the input projection X_t . Wi^T, batched in optimised runs
        np.testing.assert_allclose(trace.at("rnn", t)["t1"], x[t] @ w["WiT"], rtol=1e-6)


def test_verbose_prints_nodes_and_flags_the_first_nan() -> None:
    graph = helper.make_graph(
        [helper.make_node("Log", ["x"], ["y"], name="log"), helper.make_node("Neg", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("z", F, [2])],
    )
    out = io.StringIO()
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    sess.run(None, {"x": np.array([1.0, -1.0], np.float32)}, observers=[Verbose(out)])
    text = out.getvalue()
    assert "Log 'log' (float32[2] min=-1 max=1)" in text
    assert "-> y: float32[2] min=0 max=0 nan=1" in text
    assert text.count("first NaN/Inf") == 1 and "'y' from Log 'log' at main graph" in text


def test_profile_of_the_spec_rnn_is_a_valid_trace_with_one_event_per_iteration(
    tmp_path: Path,
) -> None:
    sess = onnxflow.InferenceSession(EXAMPLES / "rnn_scan.onnx")
    profiler = Profiler()
    x = np.zeros((7, 2, 4), np.float32)
    sess.run(None, {"X": x, "H_0": np.zeros((2, 8), np.float32)}, observers=[profiler])
    doc = json.loads(profiler.write_chrome_trace(tmp_path / "trace.json").read_text())
    events = doc["traceEvents"]
    assert all({"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) for e in events)
    iterations = [e for e in events if e["cat"] == "iteration"]
    assert [e["name"] for e in iterations] == [f"rnn iteration {t}" for t in range(7)]
    (scan,) = [e for e in events if e["name"] == "Scan rnn"]
    for e in iterations:  # nested: inside the Scan node's span
        assert scan["ts"] <= e["ts"] and e["ts"] + e["dur"] <= scan["ts"] + scan["dur"] + 1
    ops = {op: calls for op, _, calls in profiler.top_ops()}
    assert ops["MatMul"] == 14 and ops["Tanh"] == 7 and ops["Scan"] == 1


def test_iteration_bound_applies_to_if_branches_inside_a_loop() -> None:
    then = helper.make_graph(
        [helper.make_node("Neg", ["i"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", I64, [])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["i"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", I64, [])],
    )
    body = helper.make_graph(
        [helper.make_node("If", ["c"], ["v"], then_branch=then, else_branch=other, name="branch")],
        "body",
        [helper.make_tensor_value_info(n, t, []) for n, t in (("i", I64), ("c", B))],
        [helper.make_tensor_value_info(n, t, []) for n, t in (("c", B), ("v", I64))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", ""], ["vs"], body=body, name="loop")],
        "g",
        [helper.make_tensor_value_info("M", I64, [])],
        [helper.make_tensor_value_info("vs", I64, [None])],
    )
    trace = Trace(iterations=[2])
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    sess.run(None, {"M": np.array(5, np.int64)}, observers=[trace])
    assert sorted(trace.records) == [(("loop", 2),), (("loop", 2), ("branch", "then_branch"))]
    assert trace.at("loop", 2, "branch", "then_branch")["t"] == -2
