"""QDQ fusion (compile/passes/fuse_qdq.py): a QuantizeLinear read only by a DequantizeLinear of
the same scale and zero point runs as one FakeQuantize node with the pair's exact result; other
pairs are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

F = TensorProto.FLOAT


def _model(
    zp_dtype: type,
    per_axis: bool,
    *,
    x_type: int = F,
    extra_reader: bool = False,
    dq_scale: str = "s",
) -> onnxflow.InferenceSession:
    rng = np.random.default_rng(0)
    n = 3 if per_axis else 1
    scale = (rng.random(n) * 0.1 + 0.01).astype(np.float32).reshape(-1 if per_axis else ())
    lo, hi = np.iinfo(zp_dtype).min, np.iinfo(zp_dtype).max
    zp = rng.integers(lo // 4, hi // 4 + 1, n).astype(zp_dtype).reshape(scale.shape)
    inits = [
        numpy_helper.from_array(scale, "s"),
        numpy_helper.from_array(scale * 2, "s2"),
        numpy_helper.from_array(zp, "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", dq_scale, "z"], ["d"], axis=1),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", x_type, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("q", TensorProto.UNDEFINED, None))
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", x_type, [2, 3, 4])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _ops(sess: onnxflow.InferenceSession) -> list[str]:
    return [info.op_type for info in sess.plan.infos]


@pytest.mark.parametrize("zp_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_a_qdq_pair_runs_as_one_node_with_the_pairs_result(zp_dtype: type, per_axis: bool) -> None:
    model = _model(zp_dtype, per_axis)
    fused = onnxflow.InferenceSession(model)
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    assert _ops(fused) == ["FakeQuantize", "Relu"]
    assert _ops(plain) == ["QuantizeLinear", "DequantizeLinear", "Relu"]
    x = (np.random.default_rng(1).standard_normal((2, 3, 4)) * 3).astype(np.float32)
    x.flat[:4] = [np.inf, -np.inf, 2.5, -1e9]
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])


def test_pairs_that_do_not_match_are_left_alone() -> None:
    for model in (
        _model(np.int8, False, extra_reader=True),  # the 8-bit value is read again
        _model(np.int8, False, dq_scale="s2"),  # another scale
    ):
        assert "FakeQuantize" not in _ops(onnxflow.InferenceSession(model))


def test_other_input_types_run_the_pair_as_written() -> None:
    model = _model(np.int8, True, x_type=TensorProto.FLOAT16)
    fused = onnxflow.InferenceSession(model)
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float16)
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])
