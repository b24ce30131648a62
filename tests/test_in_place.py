"""Steps that write their result over an input that dies with them (runtime/codegen.py).

A step may overwrite its first input only when that input is an array made by an earlier step,
read by no other step and not a graph output. Each model below is run through the generated
code and through the interpreter (an observed run), against NumPy; the feeds, the constants and
every other value must come out as if nothing had been written in place.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.observers import Trace
from onnxflow.runtime.codegen import Block, Emitter, keeps_dtype

F = TensorProto.FLOAT
W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
X = np.array([[1, -2, 0.5], [-1, 0.25, 2]], np.float32)


def _model(nodes, outputs, inits=(), x_type=F) -> helper.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", x_type, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(W, "W"), *inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _lines(sess: onnxflow.InferenceSession) -> list[str]:
    """The generated lines of the session's main graph."""
    block = Block()
    Emitter(sess.plan, checked=False).steps(block)
    return block.texts()


def _run_both(model, feeds):
    sess = onnxflow.InferenceSession(model)
    before = {k: v.copy() for k, v in feeds.items()}
    plain = sess.run(None, feeds)
    observed = sess.run(None, feeds, observers=[Trace()])
    for a, b in zip(plain, observed):
        np.testing.assert_array_equal(a, b)
    for k, v in feeds.items():
        np.testing.assert_array_equal(v, before[k])
    return sess, plain


MM = np.matmul(X, W)
assert (MM < 0).any() and (MM > 0).any()  # so Relu in the wrong place shows


def test_relu_and_tanh_overwrite_a_product_used_once() -> None:
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Tanh", ["r"], ["y"]),
    ]
    sess, (y,) = _run_both(_model(nodes, ["y"]), {"X": X})
    np.testing.assert_allclose(y, np.tanh(np.maximum(MM, 0)), rtol=1e-6)
    text = "\n".join(_lines(sess))
    assert "y = Tanh(r, out=r)" in text  # Tanh writes over Relu's result


def test_a_value_read_twice_is_not_overwritten() -> None:
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Sub", ["m", "r"], ["y"]),  # min(m, 0): wrong if Relu wrote over m
    ]
    _, (y,) = _run_both(_model(nodes, ["y"]), {"X": X})
    np.testing.assert_allclose(y, np.minimum(MM, 0), rtol=1e-6)


def test_graph_outputs_and_their_aliases_are_not_overwritten() -> None:
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["m"]),
        helper.make_node("Identity", ["m"], ["alias"]),
        helper.make_node("Relu", ["alias"], ["y"]),
        helper.make_node("MatMul", ["X", "W"], ["m2"]),
        helper.make_node("Neg", ["m2"], ["z"]),
    ]
    _, (alias, y, m2, z) = _run_both(_model(nodes, ["alias", "y", "m2", "z"]), {"X": X})
    np.testing.assert_allclose(alias, MM, rtol=1e-6)
    np.testing.assert_allclose(m2, MM, rtol=1e-6)
    np.testing.assert_allclose(y, np.maximum(MM, 0), rtol=1e-6)
    np.testing.assert_allclose(z, -MM, rtol=1e-6)


def test_views_of_a_value_are_not_overwritten() -> None:
    shape = numpy_helper.from_array(np.array([4, 2], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["m"]),
        helper.make_node("Reshape", ["m", "shape"], ["view"]),
        helper.make_node("Relu", ["view"], ["y"]),
        helper.make_node("Identity", ["view"], ["v2"]),
    ]
    _, (y, v2) = _run_both(_model(nodes, ["y", "v2"], [shape]), {"X": X})
    np.testing.assert_allclose(v2, MM.reshape(4, 2), rtol=1e-6)
    np.testing.assert_allclose(y, np.maximum(MM, 0).reshape(4, 2), rtol=1e-6)


def test_ufuncs_that_change_dtype_are_never_run_in_place() -> None:
    assert keeps_dtype(np.tanh) and keeps_dtype(np.negative)
    assert not keeps_dtype(np.isnan) and not keeps_dtype(np.absolute)  # complex abs is real
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["m"]),
        helper.make_node("IsNaN", ["m"], ["y"]),
    ]
    _, (y,) = _run_both(_model(nodes, ["y"]), {"X": X})
    assert y.dtype == np.bool_ and not y.any()


@pytest.mark.parametrize(
    ("other", "want_shape"),
    [(np.ones((2, 4), np.float32), (2, 4)), (np.ones((3, 2, 4), np.float32), (3, 2, 4))],
)
def test_sum_over_its_first_input_only_when_shapes_allow(other, want_shape) -> None:
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["m"]),
        helper.make_node("Sum", ["m", "o", "o"], ["y"]),
    ]
    model = _model(nodes, ["y"], [numpy_helper.from_array(other, "o")])
    _, (y,) = _run_both(model, {"X": X})
    assert y.shape == want_shape  # the second case broadcasts m up: no room in m
    np.testing.assert_allclose(y, MM + other + other, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm_then_relu_over_a_conv(dtype, opset) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(dtype)
    w = rng.standard_normal((3, 2, 3, 3)).astype(dtype)
    stats = [rng.uniform(0.5, 1.5, 3).astype(dtype) for _ in range(4)]
    names = ["s", "b", "mean", "var"]
    elem = F if dtype == np.float32 else TensorProto.FLOAT16
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", *names], ["n"]),
            helper.make_node("Relu", ["n"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", elem, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(v, n) for v, n in zip([w, *stats], ["w", *names])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    sess, (y,) = _run_both(model, {"x": x})
    assert y.dtype == dtype and (y >= 0).all() and (y > 0).any()
    lines = _lines(sess)
    calls = [ln for ln in lines if not ln.startswith("del ")]
    if dtype == np.float32:  # the Conv, the BatchNormalization folded in, the Relu: one node
        assert calls == ["y = ConvActivation(x, n_folded_W, n_folded_B)"], lines
    else:  # (compile/passes/fuse_conv_activation.py)
        assert any(ln.startswith("n__unrounded = BatchNormalization(c, ") for ln in calls)
