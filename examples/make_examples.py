"""Write the bundled example models of the spec's control-flow pages.

- ``rnn_scan.onnx``: the Scan page's "encoding RNN using a Scan": H_t = tanh(X_t·Wiᵀ + H·Riᵀ + Wbi
  + Rbi), with the weights as outer-scope initializers the body reads (captures).
- ``loop_trip_count.onnx``: the Loop page's sample with a trip count and a condition.

Run ``python examples/make_examples.py [OUT_DIR]``; the models are small and deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
IR_VERSION = 10


def rnn_scan(hidden: int = 8, input_size: int = 4, seed: int = 0) -> onnx.ModelProto:
    """The spec's RNN as a Scan over axis 0 of X [S, B, input_size]; returns Y and Y_h."""
    rng = np.random.default_rng(seed)
    weights = {
        "WiT": rng.standard_normal((input_size, hidden)).astype(np.float32) * 0.3,
        "RiT": rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.3,
        "Wbi": rng.standard_normal(hidden).astype(np.float32) * 0.1,
        "Rbi": rng.standard_normal(hidden).astype(np.float32) * 0.1,
    }
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
        [
            helper.make_tensor_value_info("H_tminus1", TensorProto.FLOAT, ["B", hidden]),
            helper.make_tensor_value_info("X_t", TensorProto.FLOAT, ["B", input_size]),
        ],
        [
            helper.make_tensor_value_info("H_t", TensorProto.FLOAT, ["B", hidden]),
            helper.make_tensor_value_info("Accumulate", TensorProto.FLOAT, ["B", hidden]),
        ],
    )
    scan = helper.make_node(
        "Scan", ["H_0", "X"], ["Y_h", "Y"], name="rnn", body=body, num_scan_inputs=1
    )
    graph = helper.make_graph(
        [scan],
        "rnn-encoding",
        [
            helper.make_tensor_value_info("H_0", TensorProto.FLOAT, ["B", hidden]),
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["S", "B", input_size]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["S", "B", hidden]),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, ["B", hidden]),
        ],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return _model(graph)


def loop_trip_count() -> onnx.ModelProto:
    """The spec's Loop sample: M = 10, cond = true, a = 3 from the outer scope, b fed."""
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
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("keepgoing_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("b_in", i32, []),
        ],
        [
            helper.make_tensor_value_info("keepgoing_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("b_out", i32, []),
            helper.make_tensor_value_info("user_defined_val", i32, []),
        ],
    )
    loop = helper.make_node(
        "Loop", ["max_trip_count", "keepgoing", "b"], ["b_final", "user_defined_vals"],
        name="loop", body=body,
    )
    graph = helper.make_graph(
        [loop],
        "predict-net",
        [helper.make_tensor_value_info("b", i32, [])],
        [
            helper.make_tensor_value_info("b_final", i32, []),
            helper.make_tensor_value_info("user_defined_vals", i32, ["N"]),
        ],
        [
            numpy_helper.from_array(np.array(3, np.int32), "a"),
            numpy_helper.from_array(np.array(10, np.int64), "max_trip_count"),
            numpy_helper.from_array(np.array(True), "keepgoing"),
        ],
    )
    return _model(graph)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxflow-examples"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def main(out_dir: str | Path = Path(__file__).parent) -> None:
    """Write every example model into ``out_dir``."""
    out = Path(out_dir)
    onnx.save(rnn_scan(), out / "rnn_scan.onnx")
    onnx.save(loop_trip_count(), out / "loop_trip_count.onnx")


if __name__ == "__main__":
    main(*sys.argv[1:])
