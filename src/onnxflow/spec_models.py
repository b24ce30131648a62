"""The models of the ONNX spec's control-flow pages, built in code.

- :func:`rnn_scan`: the Scan page's "encoding RNN using a Scan", H_t = tanh(X_t·Wiᵀ + H·Riᵀ + Wbi
  + Rbi), its weights outer-scope initializers the body reads.
- :func:`loop_trip_count`: the Loop page's sample with a trip count and a condition.

The bundled examples (``examples/make_examples.py``) and the benchmark build on these.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
IR_VERSION = 10


def _vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxflow"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def rnn_scan(hidden: int = 8, input_size: int = 4, seed: int = 0) -> onnx.ModelProto:
    """The spec's RNN as a Scan over axis 0 of X [S, B, input]; outputs Y [S, B, H] and Y_h.

    The weights are scaled so that the recurrence contracts: a chaotic one would amplify the
    engines' last-bit rounding differences over a long sequence and defeat the output check.
    """
    rng = np.random.default_rng(seed)
    weights = {
        "WiT": rng.standard_normal((input_size, hidden)).astype(np.float32) / input_size**0.5,
        "RiT": rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.5 / hidden**0.5,
        "Wbi": rng.standard_normal(hidden).astype(np.float32) * 0.1,
        "Rbi": rng.standard_normal(hidden).astype(np.float32) * 0.1,
    }
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["X_t", "WiT"], ["t1"]),
            helper.make_node("MatMul", ["H_tminus1", "RiT"], ["t2"]),
            helper.make_node("Add", ["t1", "t2"], ["t3"]),
            helper.make_node("Add", ["t3", "Wbi"], ["t4"]),
            helper.make_node("Add", ["t4", "Rbi"], ["t5"]),
            helper.make_node("Tanh", ["t5"], ["H_t"]),
            helper.make_node("Identity", ["H_t"], ["Accumulate"]),
        ],
        "rnn-cell-1",
        [_vi("H_tminus1", f32, ["B", hidden]), _vi("X_t", f32, ["B", input_size])],
        [_vi("H_t", f32, ["B", hidden]), _vi("Accumulate", f32, ["B", hidden])],
    )
    scan = helper.make_node(
        "Scan", ["H_0", "X"], ["Y_h", "Y"], name="rnn", body=body, num_scan_inputs=1
    )
    graph = helper.make_graph(
        [scan],
        "rnn-encoding",
        [_vi("H_0", f32, ["B", hidden]), _vi("X", f32, ["S", "B", input_size])],
        [_vi("Y", f32, ["S", "B", hidden]), _vi("Y_h", f32, ["B", hidden])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return _model(graph)


def loop_trip_count(trip_count: int = 10) -> onnx.ModelProto:
    """The spec's Loop sample: a = 3 from the outer scope, b fed, stop when a + b <= a - b."""
    i32 = TensorProto.INT32
    body = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b_in"], ["my_local"]),
            helper.make_node("Sub", ["a", "b_in"], ["b_out"]),
            helper.make_node("Greater", ["my_local", "b_out"], ["keepgoing_out"]),
            helper.make_node("Add", ["b_in", "b_in"], ["user_defined_val"]),
        ],
        "body-net",
        [
            _vi("i", TensorProto.INT64, []),
            _vi("keepgoing_in", TensorProto.BOOL, []),
            _vi("b_in", i32, []),
        ],
        [
            _vi("keepgoing_out", TensorProto.BOOL, []),
            _vi("b_out", i32, []),
            _vi("user_defined_val", i32, []),
        ],
    )
    loop = helper.make_node(
        "Loop",
        ["max_trip_count", "keepgoing", "b"],
        ["b_final", "user_defined_vals"],
        name="loop",
        body=body,
    )
    graph = helper.make_graph(
        [loop],
        "predict-net",
        [_vi("b", i32, [])],
        [_vi("b_final", i32, []), _vi("user_defined_vals", i32, ["N"])],
        [
            numpy_helper.from_array(np.array(3, np.int32), "a"),
            numpy_helper.from_array(np.array(trip_count, np.int64), "max_trip_count"),
            numpy_helper.from_array(np.array(True), "keepgoing"),
        ],
    )
    return _model(graph)
