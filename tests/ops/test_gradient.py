"""Gradient (ai.onnx.preview.training): reverse-mode results against central finite differences
(float64) and hand-derived gradients; zs held constant; an intermediate tensor as an x evaluated
at the value fed to the node; broadcasting; non-scalar y as sum(y); omitted outputs; float32
preserved; inputs untouched; compile-time errors naming what cannot be differentiated.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import helper

import onnxflow
from onnxflow.errors import OnnxflowError

TRAINING = "ai.onnx.preview.training"
RNG = np.random.default_rng(3)


def forward_model(text: str, opset: int = 17) -> onnx.ModelProto:
    """Parse a graph whose only output is y."""
    header = f'<ir_version: 8, opset_import: ["" : {opset}, "{TRAINING}" : 1]>\n'
    return onnx.parser.parse_model(header + text)


def with_gradient(
    model: onnx.ModelProto, xs: list[str], zs: list[str] = (), outs: list[str] | None = None
) -> onnx.ModelProto:
    """Return a copy of the forward model that also outputs Gradient(xs, zs, y) of its output."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    y = model.graph.output[0].name
    outs = [f"d_{x}" for x in xs] if outs is None else outs
    node = helper.make_node("Gradient", [*xs, *zs], outs, domain=TRAINING, xs=xs, y=y)
    if zs:
        node.attribute.append(helper.make_attribute("zs", list(zs)))
    model.graph.node.append(node)
    model.graph.output.extend(
        helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs if o
    )
    return model


def numeric_gradient(model: onnx.ModelProto, feeds: dict, x: str, eps: float = 1e-6) -> np.ndarray:
    """Central differences of sum(y) with respect to feed x."""
    sess = onnxflow.InferenceSession(model)
    grad = np.zeros_like(feeds[x])
    for i in np.ndindex(feeds[x].shape):
        total = []
        for step in (eps, -eps):
            shifted = feeds[x].copy()
            shifted[i] += step
            total.append(sess.run(None, {**feeds, x: shifted})[0].sum())
        grad[i] = (total[0] - total[1]) / (2 * eps)
    return grad


def gradients(model: onnx.ModelProto, feeds: dict, xs: list[str], zs: list[str] = ()) -> list:
    return onnxflow.InferenceSession(with_gradient(model, xs, zs)).run(None, feeds)[1:]


CASES = {
    "broadcast_add_mul_sub": (
        """g (double[2,3] a, double[3] b, double[2,1] c) => (double[2,3] y) {
            s = Add(a, b)
            m = Mul(s, c)
            y = Sub(m, b)
        }""",
        {"a": (2, 3), "b": (3,), "c": (2, 1)},
    ),
    "mlp_relu_tanh_mean": (
        """g (double[4,3] x, double[3,5] w, double[5] b) => (double y) {
            h = MatMul(x, w)
            hb = Add(h, b)
            r = Relu(hb)
            t = Tanh(r)
            y = ReduceMean<keepdims = 0>(t)
        }""",
        {"x": (4, 3), "w": (3, 5), "b": (5,)},
    ),
    "div_sqrt_exp_log_pow": (
        """g (double[3] x, double[3] z) => (double[3] y) {
            two = Constant<value = double {2.0}>()
            ex = Exp(x)
            e = Sqrt(ex)
            p = Pow(x, two)
            one = Constant<value = double {1.0}>()
            p1 = Add(p, one)
            l = Log(p1)
            ez = Mul(e, z)
            y = Div(ez, l)
        }""",
        {"x": (3,), "z": (3,)},
    ),
    "shapes_transpose_reshape_sigmoid": (
        """g (double[2,3,4] x, double[4] v) => (double[6] y) {
            t = Transpose<perm = [2, 0, 1]>(x)
            shape = Constant<value = int64[2] {4, 6}>()
            n = Neg(t)
            r = Reshape(n, shape)
            i = Identity(r)
            s = Sigmoid(i)
            y = MatMul(v, s)
        }""",
        {"x": (2, 3, 4), "v": (4,)},
    ),
    "batched_matmul_1d_and_sum_axes_input": (
        """g (double[2,3,4] a, double[4] b) => (double[3] y) {
            m = MatMul(a, b)
            axes = Constant<value = int64[1] {0}>()
            y = ReduceSum<keepdims = 0>(m, axes)
        }""",
        {"a": (2, 3, 4), "b": (4,)},
    ),
    "gemm_transposed_with_broadcast_c": (
        """g (double[3,2] a, double[4,3] b, double[4] c) => (double[2,4] y) {
            y = Gemm<alpha = 0.5, beta = 2.0, transA = 1, transB = 1>(a, b, c)
        }""",
        {"a": (3, 2), "b": (4, 3), "c": (4,)},
    ),
    "expand_unsqueeze_flatten": (
        """g (double[3] x) => (double[2,6] y) {
            axes = Constant<value = int64[1] {1}>()
            u = Unsqueeze(x, axes)
            shape = Constant<value = int64[3] {2, 3, 2}>()
            e = Expand(u, shape)
            ee = Mul(e, e)
            y = Flatten<axis = 1>(ee)
        }""",
        {"x": (3,)},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_finite_differences(name: str) -> None:
    text, shapes = CASES[name]
    model = forward_model(text)
    feeds = {n: RNG.uniform(0.2, 2.0, s) for n, s in shapes.items()}
    xs = list(shapes)
    for x, got in zip(xs, gradients(model, feeds, xs), strict=True):
        assert got.shape == feeds[x].shape and got.dtype == np.float64
        np.testing.assert_allclose(got, numeric_gradient(model, feeds, x), rtol=1e-6, atol=1e-8)


def test_reduce_mean_axes_input_form_opset_18() -> None:
    model = forward_model(
        """g (double[2,3,4] x) => (double[3] y) {
            axes = Constant<value = int64[2] {0, -1}>()
            xx = Mul(x, x)
            y = ReduceMean<keepdims = 0>(xx, axes)
        }""",
        opset=18,
    )
    x = RNG.normal(size=(2, 3, 4))
    (got,) = gradients(model, {"x": x}, ["x"])
    np.testing.assert_allclose(got, 2 * x / 8)


def test_zs_are_constants_and_hand_derived() -> None:
    model = forward_model(
        """g (double[3] x, double[3] w) => (double y) {
            xx = Mul(x, x)
            xxw = Mul(xx, w)
            y = ReduceSum(xxw)
        }"""
    )
    x, w = RNG.normal(size=3), RNG.normal(size=3)
    (dx,) = gradients(model, {"x": x, "w": w}, ["x"], zs=["w"])
    np.testing.assert_allclose(dx, 2 * x * w)


def test_intermediate_x_evaluated_at_the_value_fed_to_the_node() -> None:
    # y = h * h with h = x + 1; Gradient(xs=[h]) fed h1 gives 2 * h1, whatever x is.
    model = forward_model(
        """g (double[2] x, double[2] h1) => (double[2] y) {
            one = Constant<value = double {1.0}>()
            h = Add(x, one)
            y = Mul(h, h)
        }"""
    )
    model = with_gradient(model, ["h"], outs=["d_h"])
    model.graph.node[-1].input[0] = "h1"
    x, h1 = np.array([1.0, 2.0]), np.array([5.0, -3.0])
    _, d_h = onnxflow.InferenceSession(model).run(None, {"x": x, "h1": h1})
    np.testing.assert_allclose(d_h, 2 * h1)


def test_unused_x_gets_zeros_and_omitted_output_is_skipped() -> None:
    model = forward_model(
        """g (float[2] a, float[2] b, float[3] c) => (float[2] y) {
            y = Mul(a, b)
        }"""
    )
    model = with_gradient(model, ["a", "b", "c"], outs=["", "d_b", "d_c"])
    a, b, c = (np.arange(n, dtype=np.float32) + 1 for n in (2, 2, 3))
    feeds = {"a": a, "b": b, "c": c}
    before = {k: v.copy() for k, v in feeds.items()}
    _, d_b, d_c = onnxflow.InferenceSession(model).run(None, feeds)
    assert d_b.dtype == np.float32 and d_c.dtype == np.float32
    np.testing.assert_array_equal(d_b, a)
    np.testing.assert_array_equal(d_c, np.zeros(3, np.float32))
    for k, v in feeds.items():
        np.testing.assert_array_equal(v, before[k])


def test_y_that_is_an_x_has_gradient_ones() -> None:
    model = forward_model("g (double[2] a) => (double[2] y) { y = Identity(a) }")
    model = with_gradient(model, ["a"])
    model.graph.node[-1].attribute[1].s = b"a"  # y = "a"
    (d_a,) = onnxflow.InferenceSession(model).run(None, {"a": np.zeros(2)})[1:]
    np.testing.assert_array_equal(d_a, np.ones(2))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("y = Sin(x)", "cannot differentiate Sin node"),
        ("y = Pow(x, x)", "Pow node"),
        ("y = Sum(x, x)", "supported ops: Add"),
    ],
)
def test_compile_time_errors(text: str, message: str) -> None:
    model = forward_model(f"g (double[2] x) => (double[2] y) {{ {text} }}")
    with pytest.raises(OnnxflowError, match=message):
        onnxflow.InferenceSession(with_gradient(model, ["x"]))


def test_ops_off_the_differentiated_path_need_no_rule() -> None:
    model = forward_model(
        """g (double[2] x, double[2] z) => (double[2] y) {
            s = Sin(z)
            y = Mul(x, s)
        }"""
    )
    x, z = RNG.normal(size=2), RNG.normal(size=2)
    (dx,) = gradients(model, {"x": x, "z": z}, ["x"], zs=["z"])
    np.testing.assert_allclose(dx, np.sin(z))


def test_wrong_input_count_is_an_error() -> None:
    model = with_gradient(forward_model("g (double[2] x) => (double[2] y) { y = Neg(x) }"), ["x"])
    model.graph.node[-1].input.append("x")
    with pytest.raises(OnnxflowError, match="expected 1 inputs"):
        onnxflow.InferenceSession(model)


def test_gradient_node_placed_before_the_forward_nodes() -> None:
    model = forward_model(
        """g (double[2] x, double[2] w) => (double[2] y) {
            h = Mul(x, w)
            y = Tanh(h)
        }"""
    )
    model = with_gradient(model, ["x"], zs=["w"])
    model.graph.node.insert(0, model.graph.node.pop())
    x, w = RNG.normal(size=2), RNG.normal(size=2)
    _, dx = onnxflow.InferenceSession(model).run(None, {"x": x, "w": w})
    np.testing.assert_allclose(dx, w * (1 - np.tanh(x * w) ** 2))
