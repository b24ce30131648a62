"""LayerNorm and RMSNorm written as primitives (compile/passes/fuse_norms.py) run as one node
with the values of the nodes as written; what does not match stays as written."""

from __future__ import annotations

import numpy as np
import pytest
from norm_models import activations, layer_norm_nodes, norm_model, rms_norm_nodes
from onnx import TensorProto, helper

import onnxflow


def _sessions(model, **options):
    data = model.SerializeToString()
    fused = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy", **options))
    written = onnxflow.InferenceSession(
        data, onnxflow.SessionOptions(kernels="numpy", optimize=False, **options)
    )
    return fused, written


def _fused_ops(session) -> int:
    code = session.source()
    return code.count("for PrimitiveLayerNorm") + code.count("for PrimitiveRMSNorm")


VARIANTS = [
    dict(),
    dict(square="Mul"),
    dict(divide="Reciprocal"),
    dict(divide="DivOne", affine="scale"),
    dict(affine="none"),
    dict(opset=18),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
@pytest.mark.parametrize("constant_nodes", [False, True])
def test_layer_norm_is_one_node_with_the_values_as_written(variant, constant_nodes):
    opset = variant.get("opset", 14)
    model = norm_model(layer_norm_nodes(**variant), opset=opset, constant_nodes=constant_nodes)
    fused, written = _sessions(model)
    assert _fused_ops(fused) == 1 and _fused_ops(written) == 0
    assert "for ReduceMean" not in fused.source().split("\n\n")[0]
    x = activations()
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


@pytest.mark.parametrize("cast", [True, False])
@pytest.mark.parametrize("opset", [14, 18])
def test_rms_norm_is_one_node_with_the_values_as_written(cast, opset):
    model = norm_model(rms_norm_nodes(opset, cast=cast), opset=opset)
    fused, written = _sessions(model)
    assert "for PrimitiveRMSNorm" in fused.source()
    x = activations()
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


def _not_fused(model) -> None:
    fused, written = _sessions(model)
    assert _fused_ops(fused) == 0
    x = activations()
    for a, b in zip(fused.run(None, {"x": x}), written.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)


def test_other_axis_stays():
    _not_fused(norm_model(layer_norm_nodes(axis=1)))


def test_inner_value_read_elsewhere_stays():
    """The variance is also a graph output: the chain would hide it."""
    _not_fused(norm_model(layer_norm_nodes(), outputs=("y", "v")))


def test_declared_float64_input_stays():
    fused, _ = _sessions(norm_model(layer_norm_nodes(), x_type=TensorProto.DOUBLE))
    assert _fused_ops(fused) == 0


def test_epsilon_fed_by_the_caller_stays():
    """eps a graph input, not a constant: the pass cannot read it."""
    model = norm_model(layer_norm_nodes())
    model.graph.input.append(helper.make_tensor_value_info("eps", TensorProto.FLOAT, []))
    fused, _ = _sessions(model)
    assert _fused_ops(fused) == 0


def test_exponent_other_than_two_stays():
    model = norm_model(layer_norm_nodes())
    for t in model.graph.initializer:
        if t.name == "two":
            t.float_data[:] = []
            t.raw_data = np.array(3.0, np.float32).tobytes()
    _not_fused(model)


def _body_plans(session) -> list:
    plan = session.plan
    return [c for k, c in plan.children if plan.infos[k].op_type == "PrimitiveLayerNorm"]


def test_the_compiled_form_compiles_the_nodes_as_written_when_it_first_runs_them():
    """Its fallback (an empty x here) is compiled the first time it runs, not with the session;
    the NumPy form runs the nodes, so compiles them with the session."""
    data = norm_model(layer_norm_nodes()).SerializeToString()
    native = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="native"))
    numpy_form, written = _sessions(norm_model(layer_norm_nodes()))
    assert _fused_ops(native) == 1
    assert _body_plans(native) == [] and len(_body_plans(numpy_form)) == 1
    for x in (activations()[:0], activations(), activations()[:0]):
        got, expected = native.run(None, {"x": x})[0], written.run(None, {"x": x})[0]
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
