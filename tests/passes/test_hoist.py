"""Loop-invariant hoisting and scan-input batching: same results, errors only when they would be."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.compile.compiler import Compiler
from onnxflow.compile.passes.hoist import split_body
from onnxflow.ir.validate import opset_map
from onnxflow.ops import load_all
from onnxflow.ops.registry import REGISTRY
from onnxflow.runtime.executor import execute

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _loop_with_invariant_reshape(shape: list[int]) -> onnx.ModelProto:
    """x' = x + Reshape(w, shape): the Reshape reads only outer values, so it is invariant."""
    body = helper.make_graph(
        [
            helper.make_node("Reshape", ["w", "shape"], ["w2"], name="invariant_reshape"),
            helper.make_node("Add", ["x", "w2"], ["x_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x", F, [4]),
        ],
        [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x_out", F, [4])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x0"], ["x_final"], body=body)],
        "g",
        [
            helper.make_tensor_value_info("M", I64, []),
            helper.make_tensor_value_info("x0", F, [4]),
        ],
        [helper.make_tensor_value_info("x_final", F, [4])],
        [
            numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"),
            numpy_helper.from_array(np.array(shape, np.int64), "shape"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_failing_invariant_node_is_not_run_by_a_zero_iteration_loop() -> None:
    sess = onnxflow.InferenceSession(_loop_with_invariant_reshape([3]))  # 4 values into [3]
    x0 = np.ones(4, np.float32)
    (out,) = sess.run(None, {"M": np.array(0, np.int64), "x0": x0})
    np.testing.assert_array_equal(out, x0)
    with pytest.raises(onnxflow.RuntimeFailure, match="invariant_reshape"):
        sess.run(None, {"M": np.array(2, np.int64), "x0": x0})


def test_hoisted_loop_matches_unhoisted() -> None:
    sess = onnxflow.InferenceSession(_loop_with_invariant_reshape([4]))
    (out,) = sess.run(None, {"M": np.array(5, np.int64), "x0": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(out, 5 * np.arange(4, dtype=np.float32))


def _rnn_body() -> onnx.GraphProto:
    return helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "W"], ["t1"]),
            helper.make_node("MatMul", ["h", "R"], ["t2"]),
            helper.make_node("Add", ["t1", "t2"], ["t3"]),
            helper.make_node("Add", ["t3", "bias"], ["t4"]),
            helper.make_node("Tanh", ["t4"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["y"]),
        ],
        "cell",
        [
            helper.make_tensor_value_info("h", F, [2, 3]),
            helper.make_tensor_value_info("x_t", F, [2, 5]),
        ],
        [
            helper.make_tensor_value_info("h_out", F, [2, 3]),
            helper.make_tensor_value_info("y", F, [2, 3]),
        ],
        [numpy_helper.from_array(np.ones(3, np.float32), "bias")],
    )


def test_split_batches_the_input_projection_only() -> None:
    body = _rnn_body()
    ranks = {"x_t": 2, "h": 2, "W": 2, "R": 2, "bias": 1}
    split = split_body(body, ["x_t"], ranks.get, 21, REGISTRY)
    assert split is not None
    assert [n.op_type for n in split.pre.node] == ["MatMul"]
    assert split.batched == ("t1",)
    assert [n.op_type for n in split.body.node] == ["MatMul", "Add", "Add", "Tanh", "Identity"]


def test_batched_scan_matches_numpy_and_unoptimized_compile() -> None:
    rng = np.random.default_rng(0)
    w, r = (
        rng.standard_normal((5, 3)).astype(np.float32),
        rng.standard_normal((3, 3)).astype(np.float32),
    )
    graph = helper.make_graph(
        [helper.make_node("Scan", ["h0", "X"], ["h", "Y"], body=_rnn_body(), num_scan_inputs=1)],
        "g",
        [
            helper.make_tensor_value_info("h0", F, [2, 3]),
            helper.make_tensor_value_info("X", F, [6, 2, 5]),
        ],
        [
            helper.make_tensor_value_info("h", F, [2, 3]),
            helper.make_tensor_value_info("Y", F, [6, 2, 3]),
        ],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = rng.standard_normal((6, 2, 5)).astype(np.float32)
    h = np.zeros((2, 3), np.float32)
    got_h, got_y = onnxflow.InferenceSession(model).run(None, {"h0": h, "X": x})
    ys = []
    for t in range(6):
        h = np.tanh(x[t] @ w + h @ r + 1)
        ys.append(h)
    np.testing.assert_allclose(got_y, np.stack(ys), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_h, ys[-1], rtol=1e-5, atol=1e-6)
    load_all()
    plain = Compiler(optimize=False).compile_main(model.graph, opset_map(model.opset_import))
    unoptimized = execute(plain, [np.zeros((2, 3), np.float32), x])
    np.testing.assert_allclose(unoptimized[1], got_y, rtol=1e-6)
