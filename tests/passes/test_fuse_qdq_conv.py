"""QDQ convolution fusion (compile/passes/fuse_qdq_conv.py): the nodes of a quantized pointwise
convolution become one QDQConv node where the integer kernel pays; other convolutions, and
groups whose values are read elsewhere, are left as written. (The two forms' values:
tests/native/test_native_qdq_conv.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

import onnxflow


def _model(
    m: int = 128, c: int = 128, k: int = 1, *, group: int = 1, also_read: str = ""
) -> ModelProto:
    """A quantized convolution as onnxruntime's quantizer writes it; ``also_read`` a value
    made a graph output too."""
    rng = np.random.default_rng(0)
    inits = {
        "sx": np.array(0.02, np.float32),
        "zx": np.array(128, np.uint8),
        "w": rng.integers(-127, 128, (m, c // group, k, k)).astype(np.int8),
        "sw": np.full(m, 0.004, np.float32),
        "zw": np.zeros(m, np.int8),
        "sy": np.array(0.5, np.float32),
        "zy": np.array(128, np.uint8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["c"], kernel_shape=[k, k], group=group),
        helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if also_read:
        outputs.append(helper.make_tensor_value_info(also_read, TensorProto.UNDEFINED, None))
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 4, 4])],
        outputs,
        [numpy_helper.from_array(v, name) for name, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _ops(model: ModelProto, **options: object) -> list[str]:
    sess = onnxflow.InferenceSession(model, onnxflow.SessionOptions(**options))  # type: ignore[arg-type]
    return [info.op_type for info in sess.plan.infos]


def test_a_pointwise_quantized_convolution_runs_as_one_node() -> None:
    # the input's QuantizeLinear stays; its DequantizeLinear, W's, the Conv and the output's
    # QuantizeLinear go into the node; the output's DequantizeLinear stays
    assert _ops(_model()) == ["QuantizeLinear", "QDQConv", "DequantizeLinear"]


def test_without_optimize_the_nodes_stay() -> None:
    assert "QDQConv" not in _ops(_model(), optimize=False)


@pytest.mark.parametrize(
    "model",
    [
        _model(k=3),  # a spatial kernel: the integer path gathers columns, slower
        _model(64, 64),  # too few weights to pay
        _model(128, 128, group=2),  # grouped
        _model(also_read="c"),  # the Conv's float output is read elsewhere
    ],
)
def test_other_convolutions_stay_as_written(model: ModelProto) -> None:
    assert "QDQConv" not in _ops(model)


def test_a_dequantized_input_read_elsewhere_stays_for_its_other_readers() -> None:
    model = _model(also_read="xd")
    assert _ops(model) == ["QuantizeLinear", "DequantizeLinear", "QDQConv", "DequantizeLinear"]
    x = np.random.default_rng(1).uniform(-2, 2, (1, 128, 4, 4)).astype(np.float32)
    fused = onnxflow.InferenceSession(model, onnxflow.SessionOptions(kernels="numpy"))
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    for a, b in zip(fused.run(None, {"x": x}), plain.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)
