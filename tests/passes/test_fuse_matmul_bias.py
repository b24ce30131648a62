"""MatMul and the Add of its constant bias (compile/passes/fuse_matmul_bias.py) run as one
node, bitwise equal to the two; what does not match stays as written."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

F = TensorProto.FLOAT


def _model(bias_first=False, bias_shape=(32,), outputs=("y",), dtype=np.float32, constant=False):
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(dtype), "w")
    b = numpy_helper.from_array(rng.standard_normal(bias_shape).astype(dtype), "b")
    add_in = ["b", "p"] if bias_first else ["p", "b"]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", add_in, ["y"])]
    inits = [w, b]
    if constant:
        nodes.insert(0, helper.make_node("Constant", [], ["b"], value=b))
        inits = [w]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", elem, None)],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _runs(model, x, kernels="native"):
    data = model.SerializeToString()
    out = []
    for optimize in (True, False):
        opts = onnxflow.SessionOptions(kernels=kernels, optimize=optimize)
        session = onnxflow.InferenceSession(data, opts)
        out.append((session.source(), session.run(None, {"x": x})))
    return out


@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 16), (16,)])
@pytest.mark.parametrize("kernels", ["native", "numpy"])
def test_linear_is_one_node_bitwise(bias_first, constant, shape, kernels):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (code, fused), (plain, written) = _runs(_model(bias_first, constant=constant), x, kernels)
    assert "for MatMulBias" in code and "for MatMulBias" not in plain
    assert fused[0].dtype == written[0].dtype and fused[0].shape == written[0].shape
    np.testing.assert_array_equal(fused[0], written[0])


def test_bias_of_more_dims_stays():
    x = np.ones((5, 16), np.float32)
    (code, fused), (_, written) = _runs(_model(bias_shape=(2, 1, 32)), x)
    assert "for MatMulBias" not in code
    np.testing.assert_array_equal(fused[0], written[0])


def test_product_read_elsewhere_stays():
    x = np.ones((5, 16), np.float32)
    (code, _), _ = _runs(_model(outputs=("y", "p")), x)
    assert "for MatMulBias" not in code


def test_float64_bias_stays():
    x = np.ones((5, 16), np.float64)
    (code, fused), (_, written) = _runs(_model(dtype=np.float64), x)
    assert "for MatMulBias" not in code
    np.testing.assert_array_equal(fused[0], written[0])
