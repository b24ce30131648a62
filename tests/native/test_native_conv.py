"""The compiled direct convolution (Conv, FusedConv) against the NumPy forms, on random
geometries of the convolutions it takes: depthwise, small-channel, long 1-D kernels."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from native_forms import node_forms, ulp_distance
from onnx import helper, numpy_helper

import onnxflow
from onnxflow.ops import conv_direct
from onnxflow.ops.conv import conv
from onnxflow.ops.microsoft.nchwc import machine_block_size, unblock_filter

FORMS_TESTED = [
    ("", "Conv"),
    ("com.microsoft", "FusedConv"),
    ("com.microsoft.nchwc", "Conv"),
    ("onnxflow.fused", "ConvActivation"),
]

#: Both forms sum each output's K terms (products, then the bias and Z) in float32, in different
#: orders: each is within (K - 1) * eps * sum|terms| of the exact sum (the classic bound for
#: recursive summation, whatever the order), so the two are within twice that of each other.
SUM_ORDER_FACTOR = 2
#: How far the activation's own roundings may set the forms apart, in ulp of the result: the
#: compiled sigmoid and tanh are double rounded once, the NumPy ones float32 (a few ulp).
ACTIVATION_ULPS = 4
#: activation -> (activation_params, a Lipschitz constant over the reals).
ACTIVATIONS = {
    "Relu": ([], 1.0),
    "LeakyRelu": ([0.1], 1.0),
    "Sigmoid": ([], 0.25),
    "Tanh": ([], 1.0),
    "HardSigmoid": ([0.2, 0.5], 0.2),
    "Clip": ([-1.0, 6.0], 1.0),
    "HardSwish": ([], 1.5),
}

pytestmark = pytest.mark.skipif(conv_direct._CONV is None, reason="native/_conv not built")


def _case(rng: np.random.Generator, kind: str, rank: int) -> tuple[dict, tuple, tuple]:
    """Random attributes and X, W shapes of a convolution of ``kind``."""
    c = int(rng.integers(1, 4))
    if kind == "depthwise":
        group, cg, m = c * 2, 1, c * 2 * int(rng.integers(1, 3))
        c *= 2
        kernel = [int(rng.integers(1, 6)) for _ in range(rank)]
    elif kind == "small":
        group, cg, m = 1, c, int(rng.integers(1, 9))
        kernel = [int(rng.integers(1, 4)) for _ in range(rank)]
    else:  # a long 1-D kernel
        group, cg, m = 1, c, int(rng.integers(1, 5))
        kernel = [int(rng.integers(conv_direct.LONG_ROW, 130))]  # by taps, then by dots
    spatial = [int(rng.integers(k, k + 70)) for k in kernel]
    attrs = {"group": group, "strides": [int(rng.integers(1, 4)) for _ in kernel]}
    if kind != "long":
        attrs["dilations"] = [int(rng.integers(1, 3)) for _ in kernel]
        spatial = [s + (d - 1) * (k - 1) for s, d, k in zip(spatial, attrs["dilations"], kernel)]
    auto_pad = str(rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, 3)) for _ in range(2 * rank)]
    else:
        attrs["auto_pad"] = auto_pad
    return attrs, (int(rng.integers(1, 3)), c, *spatial), (m, cg, *kernel)


def _bound(x, w, b, z, attrs, compiled, lipschitz=1.0):
    """The largest difference the summation orders (then the activation) allow, per output."""
    grid = {k: v for k, v in attrs.items() if k != "group"}
    terms = conv(
        np.abs(x).astype(np.float64), np.abs(w).astype(np.float64), **grid, group=attrs["group"]
    )
    k = math.prod(w.shape[1:])
    if b is not None:
        terms += np.abs(b).reshape(-1, *[1] * (x.ndim - 2))
        k += 1
    if z is not None:
        terms += np.abs(z)
        k += 1
    eps = np.finfo(np.float32).eps
    sums = SUM_ORDER_FACTOR * (k - 1) * eps * terms * lipschitz
    return sums + ACTIVATION_ULPS * np.spacing(np.abs(compiled).astype(np.float32))


@pytest.mark.parametrize("kind", ["depthwise", "small", "long"])
@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("seed", range(6))
def test_conv_random_geometry(kind, rank, seed):
    if kind == "long" and rank == 2:
        pytest.skip("long kernels are 1-D")
    rng = np.random.default_rng([seed, rank, len(kind)])
    attrs, xs, ws = _case(rng, kind, rank)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    assert conv_direct.direct(x, w, b, None, attrs) is not None  # the loop takes it
    (compiled,), (numpy_form,) = node_forms("Conv", [x, w, b], 22, **attrs)
    assert compiled.shape == numpy_form.shape and compiled.dtype == np.float32
    assert np.all(np.abs(compiled - numpy_form) <= _bound(x, w, b, None, attrs, compiled))


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("kind", ["depthwise", "small", "long"])
def test_fused_conv_activations(activation, kind):
    rng = np.random.default_rng([len(activation), len(kind)])
    attrs, xs, ws = _case(rng, kind, 2 if kind != "long" else 1)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    shape = conv(x, w, **attrs).shape
    z = rng.standard_normal(shape).astype(np.float32)
    params, lipschitz = ACTIVATIONS[activation]
    fused = dict(attrs, activation=activation)
    if params:
        fused["activation_params"] = params
    for inputs in ([x, w, b], [x, w, b, z], [x, w, None, z]):
        (compiled,), (numpy_form,) = node_forms(
            "FusedConv", inputs, 1, domain="com.microsoft", **fused
        )
        bound = _bound(
            x, w, inputs[2], inputs[3] if len(inputs) > 3 else None, attrs, compiled, lipschitz
        )
        assert np.all(np.abs(compiled - numpy_form) <= bound), activation


def test_first_layer_and_depthwise_shapes():
    """The shapes the loop is for, with blocks of 32 and 8 outputs and both edges."""
    rng = np.random.default_rng(7)
    cases = [
        ((1, 3, 48, 70), (16, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 8, 40, 45), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
        ((1, 8, 40, 45), (8, 1, 5, 5), {"group": 8, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
        ((1, 1, 1600), (4, 1, 400), {"strides": [160]}),
        ((2, 2, 900), (2, 1, 100), {"group": 2, "pads": [40, 3], "strides": [7]}),
        ((1, 2, 5, 200), (3, 2, 2, 80), {"pads": [1, 5, 0, 7], "strides": [1, 3]}),  # dots, 2-D
    ]
    for xs, ws, attrs in cases:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        assert conv_direct.direct(x, w, None, None, attrs) is not None
        (compiled,), (numpy_form,) = node_forms("Conv", [x, w], 22, **attrs)
        assert np.all(
            np.abs(compiled - numpy_form)
            <= _bound(x, w, None, None, dict(attrs, group=attrs.get("group", 1)), compiled)
        )


def test_what_the_loop_does_not_take_runs_the_numpy_form():
    """Other dtypes, wide and pointwise convolutions, 3-D: the NumPy form, bit for bit."""
    rng = np.random.default_rng(3)
    cases = [
        ((1, 4, 9, 9), (6, 4, 3, 3), {}, np.float64),  # float64
        ((1, 16, 9, 9), (6, 16, 3, 3), {}, np.float32),  # 144 products per output: BLAS
        ((1, 4, 9, 9), (6, 4, 1, 1), {}, np.float32),  # pointwise
        ((1, 2, 5, 6, 7), (3, 2, 2, 2, 2), {}, np.float32),  # 3-D
        ((1, 1, 900), (32, 1, 64), {}, np.float32),  # a long kernel with many filters
    ]
    for xs, ws, attrs, dtype in cases:
        x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
        assert conv_direct.direct(x, w, None, None, attrs) is None
        (compiled,), (numpy_form,) = node_forms("Conv", [x, w], 22, **attrs)
        assert np.array_equal(compiled, numpy_form)


def test_pointwise_gemm_is_the_numpy_forms_product_and_bias():
    """A 1x1 float32 convolution of one image (the compiled form's product without the checks
    again): bit for bit the NumPy form, with and without B, contiguous or not, run after run
    (the kept plan); a batch, groups or strides are not its."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 24, 7, 9)).astype(np.float32)
    w = rng.standard_normal((40, 24, 1, 1)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    for xi in (x, np.asfortranarray(x)):
        for bias in (None, b):
            for _ in range(2):
                got = conv_direct.pointwise_gemm(xi, w, bias, {})
                assert got is not None
                assert np.array_equal(got, conv(xi, w, bias))
                (compiled,), (numpy_form,) = node_forms(
                    "Conv", [xi, w] if bias is None else [xi, w, bias], 22
                )
                assert np.array_equal(compiled, numpy_form)
    assert conv_direct.pointwise_gemm(np.concatenate([x, x]), w, b, {}) is None
    assert conv_direct.pointwise_gemm(x, w, b, {"strides": [2, 2]}) is None
    assert conv_direct.pointwise_gemm(x, w.reshape(40, 12, 2, 1)[:, :, :1], b, {"group": 2}) is None


def test_bad_attributes_raise_in_both_forms():
    x = np.zeros((1, 2, 8, 8), np.float32)
    w = np.zeros((2, 1, 3, 3), np.float32)
    for attrs in ({"group": 2, "kernel_shape": [2, 2]}, {"group": 2, "pads": [-1, 0, 0, 0]}):
        with pytest.raises(ValueError):
            conv_direct.direct(x, w, None, None, attrs)
    with pytest.raises(Exception, match="B has shape"):
        node_forms("Conv", [x, w, np.zeros(3, np.float32)], 22, group=2)


@pytest.mark.parametrize(
    "xs, ws, attrs",
    [
        ((1, 16, 20, 45), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),  # depthwise
        ((1, 16, 20, 45), (16, 1, 5, 5), {"group": 16, "pads": [2] * 4, "strides": [2, 2]}),
        ((1, 3, 30, 40), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # NCHW in
    ],
)
def test_nchwc_conv(xs, ws, attrs):
    """The NCHWc Conv of depthwise and first layers, with Sum and an activation."""
    rng = np.random.default_rng(len(ws) + ws[2])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    filters = unblock_filter(w, machine_block_size(), False)
    full = dict(attrs, group=attrs.get("group", 1))
    z = rng.standard_normal(conv(x, filters, **attrs).shape).astype(np.float32)
    assert conv_direct.direct(x, filters, b, z, attrs) is not None
    fused = dict(attrs, activation="Clip", activation_params=[-1.0, 2.0])
    domain = "com.microsoft.nchwc"
    (compiled,), (numpy_form,) = node_forms("Conv", [x, w, b, z], 1, domain=domain, **fused)
    assert np.all(np.abs(compiled - numpy_form) <= _bound(x, filters, b, z, full, compiled))


#: The activations both forms compute with the same float32 operations in the same order.
EXACT_ACTIVATIONS = ("Relu", "LeakyRelu", "HardSigmoid", "Clip", "HardSwish")


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_fused_conv_by_blas_then_one_pass(activation):
    """FusedConv's convolutions the loop does not take (pointwise, many channels): the NumPy
    form's product, then B, Z and the activation in one compiled pass, the same operations in
    the same order (bit for bit, but for sigmoid's and tanh's own rounding)."""
    rng = np.random.default_rng(len(activation))
    params = ACTIVATIONS[activation][0]
    fused = {"activation": activation} | ({"activation_params": params} if params else {})
    for ws, attrs in (((8, 16, 1, 1), {}), ((8, 16, 3, 3), {"pads": [1, 1, 1, 1]})):
        x = rng.standard_normal((1, 16, 9, 11)).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        b = rng.standard_normal(8).astype(np.float32)
        z = rng.standard_normal(conv(x, w, **attrs).shape).astype(np.float32)
        assert conv_direct.direct(x, w, b, z, attrs) is None
        act = conv_direct.loop_activation(activation, params)
        assert conv_direct.by_blas(x, w, b, z, attrs, act) is not None
        inputs = [x, w, b, z]
        (compiled,), (numpy_form,) = node_forms(
            "FusedConv", inputs, 1, domain="com.microsoft", **attrs, **fused
        )
        if activation in EXACT_ACTIVATIONS:
            assert np.array_equal(compiled, numpy_form)
        else:
            assert ulp_distance(compiled, numpy_form).max() <= ACTIVATION_ULPS


#: (X shape, W shape, strides, pads) of convolutions the NumPy form runs as one GEMM (gathered
#: columns, pointwise), as a streaming model's encoder calls them: Conv's stateful compiled form
#: makes their path once and reruns it.
GEMM_CASES = [
    ((1, 1, 640), (24, 1, 64), [16], [0, 0]),
    ((1, 33, 4), (16, 33, 3), [1], [1, 1]),
    ((1, 16, 4), (8, 16, 3), [2], [1, 1]),
    ((1, 12, 5, 5), (6, 12, 3, 3), [1, 1], [1, 1, 1, 1]),
    ((1, 16, 3), (4, 16, 1), [1], [0, 0]),
]


@pytest.mark.parametrize("x_shape, w_shape, strides, pads", GEMM_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_stateful_form_reruns_the_numpy_gemm(x_shape, w_shape, strides, pads, bias):
    """Every run of a session (the first through the compiled form, later ones through the path
    it made) gives bit for bit the NumPy form's result; a new X shape makes a new path."""
    rng = np.random.default_rng(len(x_shape) * 10 + w_shape[0])
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    names = ["x", "w", "b"] if bias else ["x", "w"]
    node = helper.make_node("Conv", names, ["y"], strides=strides, pads=pads)
    spatial = [f"L{i}" for i in range(len(x_shape) - 2)]
    x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, x_shape[1], *spatial])
    y_info = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")][: len(names) - 1]
    graph = helper.make_graph([node], "conv", [x_info], [y_info], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    kept = onnxflow.InferenceSession(data)
    numpy_form = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy"))
    longer = (*x_shape[:-1], x_shape[-1] + 2)
    for shape in (x_shape, x_shape, x_shape, longer, longer, x_shape):
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        np.testing.assert_array_equal(kept.run(None, feeds)[0], numpy_form.run(None, feeds)[0])


@pytest.mark.parametrize("activation", [None, "Relu", "HardSigmoid"])
@pytest.mark.parametrize("bias_shape", [(8,), (1, 8, 1, 1)])
def test_conv_activation_reads_its_bias_flat(activation, bias_shape):
    """The pass-made ConvActivation (FusedConv with B of one value per channel, any shape):
    a pointwise one bit for bit (the NumPy form's product, then B and the activation in one
    pass), a 3x3 depthwise one within the loop's summation bound."""
    rng = np.random.default_rng(len(bias_shape))
    fused = {"activation": activation} if activation else {}
    if activation == "HardSigmoid":
        fused["activation_params"] = [0.2, 0.5]
    x = rng.standard_normal((1, 8, 6, 7)).astype(np.float32)
    b = rng.standard_normal(bias_shape).astype(np.float32)
    for ws, attrs in (((8, 8, 1, 1), {}), ((8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]})):
        w = rng.standard_normal(ws).astype(np.float32)
        (compiled,), (numpy_form,) = node_forms(
            "ConvActivation", [x, w, b], 1, domain="onnxflow.fused", **attrs, **fused
        )
        if ws[2] == 1:
            assert compiled.tobytes() == numpy_form.tobytes()
        else:
            full = dict(attrs, group=attrs.get("group", 1))
            assert np.all(
                np.abs(compiled - numpy_form) <= _bound(x, w, b.reshape(-1), None, full, compiled)
            )


def _taps_in_order(x, w, b, group, strides, dilations, pads):
    """The loop's sums, by NumPy: each output the float32 sum over (input channel, kernel row,
    kernel column), in that order, of w * x over the zero-padded input, then the bias (a tap on
    the padding adds a zero: the same bits as skipping it, since such a sum never becomes -0)."""
    rank = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + rank]) for i in range(rank)])
    kernel, cg = w.shape[2:], w.shape[1]
    out = [
        (xp.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
        for i in range(rank)
    ]
    y = np.zeros((x.shape[0], w.shape[0], *out), np.float32)
    per_group = w.shape[0] // group
    for m in range(w.shape[0]):
        acc = np.zeros((x.shape[0], *out), np.float32)
        for ci in range(cg):
            channel = xp[:, (m // per_group) * cg + ci]
            for k in np.ndindex(*kernel):
                window = tuple(slice(k[i] * dilations[i], None, strides[i]) for i in range(rank))
                part = channel[(slice(None), *window)][(slice(None), *[slice(0, o) for o in out])]
                acc = acc + w[m, ci][k] * part
        y[:, m] = acc + b[m]
    return y


@pytest.mark.parametrize(
    "xs, ws, group, strides, dilations, pads",
    [
        ((1, 6, 2, 96), (6, 1, 5, 5), 6, [1, 1], [1, 1], [2, 2, 2, 2]),  # PP-OCR's narrow planes
        ((1, 4, 3, 37), (4, 1, 5, 5), 4, [1, 1], [1, 1], [2, 2, 2, 2]),
        ((1, 5, 6, 29), (5, 1, 5, 5), 5, [2, 1], [1, 1], [2, 2, 2, 2]),
        ((1, 4, 9, 41), (4, 1, 3, 3), 4, [2, 2], [1, 1], [1, 1, 1, 1]),
        ((1, 4, 9, 40), (8, 1, 3, 3), 4, [1, 1], [2, 2], [2, 0, 1, 3]),  # dilated, asymmetric
        ((1, 3, 7, 7), (3, 1, 5, 5), 3, [1, 3], [1, 1], [0, 4, 1, 2]),  # narrower than a block
        ((2, 2, 5, 50), (4, 2, 3, 2), 1, [1, 2], [1, 3], [1, 0, 0, 5]),  # small-channel
        ((1, 3, 45), (6, 1, 5), 3, [1], [1], [3, 1]),  # 1-D
        ((1, 2, 4, 33), (2, 1, 3, 7), 2, [3, 3], [1, 2], [1, 6, 2, 6]),
    ],
)
def test_loop_sums_each_output_in_tap_order(xs, ws, group, strides, dilations, pads):
    """The loop's edges and blocks (kernel widths 3, 5 and others, strides, dilations,
    asymmetric pads, narrow rows) give bit for bit the float32 sums in tap order."""
    rng = np.random.default_rng(xs[-1] + ws[-1])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    attrs = {"group": group, "strides": strides, "dilations": dilations, "pads": pads}
    got = conv_direct.direct(x, w, b, None, attrs)
    assert got is not None
    np.testing.assert_array_equal(got, _taps_in_order(x, w, b, group, strides, dilations, pads))


def test_infinite_weight_on_the_padding_makes_nan_as_the_numpy_form():
    """A tap that falls on the left or right padding multiplies the weight by a zero, as the
    NumPy form's product over padded windows does: an infinite weight there makes NaN in both."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 3, 1, 40)).astype(np.float32)
    w = rng.standard_normal((3, 1, 1, 5)).astype(np.float32)
    w[1, 0, 0, 0] = np.inf
    attrs = {"group": 3, "pads": [0, 2, 0, 2]}
    (compiled,), (numpy_form,) = node_forms("Conv", [x, w], 22, **attrs)
    assert np.isnan(numpy_form[0, 1, 0, :2]).all()
    np.testing.assert_array_equal(np.isnan(compiled), np.isnan(numpy_form))


@pytest.mark.parametrize("activation", ["Relu", "HardSigmoid", None])
def test_fused_pointwise_product_decided_per_shape(activation):
    """A FusedConv node met with several X shapes in one session (an SE block's [1, C, 1, 1],
    a pointwise layer's image, a batch of two; strided, which is not one product): its
    one-product path is decided per shape and gives the NumPy form's bits each time (40
    channels: more than the direct loop sums, whose order differs)."""
    rng = np.random.default_rng(3)
    fused = {"activation": activation} if activation else {}
    if activation == "HardSigmoid":
        fused["activation_params"] = [0.2, 0.5]
    w = rng.standard_normal((6, 40, 1, 1)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    for attrs in ({}, {"strides": [2, 2]}):
        node = helper.make_node(
            "FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft", **attrs, **fused
        )
        x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
        z_info = helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)
        y_info = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
        graph = helper.make_graph([node], "se", [x_info, z_info], [y_info], inits)
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        data = helper.make_model(graph, opset_imports=opsets).SerializeToString()
        sessions = [
            onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels=k))
            for k in ("native", "numpy")
        ]
        for shape in [(1, 40, 1, 1), (1, 40, 5, 4), (2, 40, 1, 1), (1, 40, 1, 1), (1, 40, 5, 4)]:
            x = rng.standard_normal(shape).astype(np.float32)
            stride = attrs.get("strides", [1, 1])
            out = (shape[0], 6, -(-shape[2] // stride[0]), -(-shape[3] // stride[1]))
            z = rng.standard_normal(out).astype(np.float32)
            got, want = (s.run(None, {"x": x, "z": z})[0] for s in sessions)
            assert got.shape == want.shape == out
            assert got.tobytes() == want.tobytes()


#: (X shape, W shape, strides, bias shape) of ConvActivation nodes by_blas serves (too many
#: channels for the loop), as a voice detector's encoder calls them one chunk at a time.
FUSED_GEMM_CASES = [
    ((1, 33, 3), (32, 33, 3), [1], (32, 1)),
    ((1, 32, 3), (16, 32, 3), [2], (1, 16, 1)),
    ((1, 16, 1), (32, 16, 3), [1], (1, 32, 1)),
]


@pytest.mark.parametrize("x_shape, w_shape, strides, bias_shape", FUSED_GEMM_CASES)
def test_conv_activation_stateful_form_reruns_by_blas_path(
    x_shape, w_shape, strides, bias_shape, monkeypatch
):
    """A Conv, bias Add and Relu fused into ConvActivation, run chunk after chunk: from the
    third run of one X shape on, the node reruns the GEMM path it made (by_blas is not called
    again), bit for bit the NumPy form's result; another X shape goes through by_blas."""
    rng = np.random.default_rng(w_shape[0] + strides[0])
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(bias_shape).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=strides, pads=[1, 1]),
        helper.make_node("Add", ["c", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, x_shape[1], "L"])
    y_info = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph(nodes, "encoder", [x_info], [y_info], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    kept = onnxflow.InferenceSession(data)
    assert "ConvActivation" in kept.source()
    numpy_form = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy"))
    calls = []
    by_blas = conv_direct.by_blas
    monkeypatch.setattr(conv_direct, "by_blas", lambda *a: calls.append(1) or by_blas(*a))
    longer = (*x_shape[:-1], x_shape[-1] + 1)
    runs = [(x_shape, 1), (x_shape, 1), (x_shape, 0), (longer, 1), (x_shape, 0), (longer, 1)]
    for shape, through_by_blas in runs:
        calls.clear()
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        got = kept.run(None, feeds)[0]
        assert got.tobytes() == numpy_form.run(None, feeds)[0].tobytes(), shape
        assert len(calls) == through_by_blas, (shape, calls)


def test_gathered_columns_are_takes_copy():
    """The compiled gather of im2col columns copies what NumPy's take copies from X with a zero
    after it (NaN, -0.0 and infinities bit for bit), and refuses a position past that zero."""
    from onnxflow.ops.im2col import _column_index

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, np.inf]
    index = _column_index(x.shape, (3,), (4,), (2,), (1,), (1,))
    padded = np.concatenate([x.reshape(-1), np.zeros(1, np.float32)])
    got = np.empty(index.size, np.float32)
    conv_direct._CONV.gather_columns_f32(x.reshape(-1), index.reshape(-1), got)
    assert got.tobytes() == padded.take(index).reshape(-1).tobytes()
    with pytest.raises(ValueError, match="index 22 outside 0..21"):
        conv_direct._CONV.gather_columns_f32(x.reshape(-1), np.array([0, 22], np.intp), got[:2])


@pytest.mark.parametrize("activation", [None, "Relu", "Sigmoid", "HardSigmoid"])
@pytest.mark.parametrize("pointwise", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_columns_product_is_the_numpy_forms_gather_product_and_pass(activation, pointwise, bias):
    """The GEMM path in one compiled call gives the bits of its steps run from Python (take's
    columns, NumPy's matmul, the compiled bias and activation pass), NaN, -0.0 and infinities
    included; any other X (shape, dtype, layout), W or B object, or an addend Z, gives None."""
    from onnxflow.ops.im2col import _column_index

    rng = np.random.default_rng(len(activation or "") + 2 * pointwise + bias)
    c, m, length = 5, 7, 9
    x = rng.standard_normal((1, c, length)).astype(np.float32)
    x[0, 0, :3] = [np.nan, -0.0, np.inf]
    w = rng.standard_normal((m, c, 1 if pointwise else 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    if pointwise:
        index, out, cols = None, (1, m, length), x.reshape(c, -1)
    else:  # kernel 3, stride 2, one pad before and after: windows on the zero past X
        index = _column_index(x.shape[1:], (3,), (5,), (2,), (1,), (1,))
        out = (1, m, 5)
        cols = np.concatenate([x.reshape(-1), np.zeros(1, np.float32)]).take(index)
    act = conv_direct.loop_activation(activation, [0.2, 0.5])
    wm = w.reshape(m, -1)
    product = conv_direct._CONV.ColumnsProduct(x.shape, w, b, index, wm, b, out, *act)
    want = wm @ cols
    no_bias = np.empty(0, np.float32)
    conv_direct._CONV.epilogue_f32(want.reshape(1, m, -1), no_bias if b is None else b, None, *act)
    assert product(x, w, b).tobytes() == want.reshape(out).tobytes()
    assert product(x, w, b).shape == out
    other = np.ascontiguousarray(np.asfortranarray(x)[..., ::-1][..., ::-1])
    assert product(other, w, b) is not None  # another array of the same shape
    strided = np.empty((1, c, 2 * length), np.float32)[..., ::2]
    for args in [
        (x[..., :-1], w, b),
        (x.astype(np.float64), w, b),
        (strided, w, b),
        (x, w.copy(), b),
        (x, w, None if bias else np.zeros(m, np.float32)),
        (x, w, b, x),
    ]:
        assert product(*args) is None


#: (X shape, W shape, group, strides, pads) of convolutions the direct loop takes, as the PP-OCR
#: classifiers call them (depthwise 5x5 on two rows, strided depthwise 3x3, a first layer), and
#: an audio model's long 1-D row.
LOOP_CASES = [
    ((1, 6, 2, 20), (6, 1, 5, 5), 6, [1, 1], [2, 2, 2, 2]),
    ((1, 4, 7, 19), (4, 1, 3, 3), 4, [2, 1], [1, 1, 1, 1]),
    ((1, 3, 9, 18), (5, 3, 3, 3), 1, [2, 2], [1, 1, 1, 1]),
    ((2, 4, 5, 9), (8, 1, 3, 3), 4, [1, 2], [0, 1, 1, 0]),
    ((1, 2, 100), (3, 2, 20), 1, [2], [3, 3]),  # a long 1-D kernel row
]


@pytest.mark.parametrize("x_shape, w_shape, group, strides, pads", LOOP_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_stateful_form_reruns_the_loop_without_its_plan(
    x_shape, w_shape, group, strides, pads, bias, monkeypatch
):
    """A Conv the direct loop takes, run again on the same X shape: its stateful form calls the
    loop it made once (the plan is not looked up again) and gives the compiled form's bits (which
    test_conv_random_geometry holds to the NumPy form); a new X shape makes a new one."""
    rng = np.random.default_rng(w_shape[0] * 7 + group)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    attrs = dict(group=group, strides=strides, pads=pads)
    names = ["x", "w", "b"] if bias else ["x", "w"]
    node = helper.make_node("Conv", names, ["y"], **attrs)
    x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
    y_info = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")][: len(names) - 1]
    graph = helper.make_graph([node], "conv", [x_info], [y_info], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    kept = onnxflow.InferenceSession(data)
    compiled_form = conv_direct.compiled_conv(conv)
    xs = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(3)]
    for x in xs[:2]:
        kept.run(None, {"x": x})

    def no_plan(*args: object) -> tuple:
        raise AssertionError("the kept loop looked its plan up again")

    with monkeypatch.context() as patched:
        patched.setattr(conv_direct, "_cached_plan", no_plan)
        got = kept.run(None, {"x": xs[2]})[0]
    want = compiled_form(xs[2], w, b if bias else None, **attrs)
    assert got.tobytes() == want.tobytes()
    longer = (*x_shape[:-1], x_shape[-1] + 3)
    for _ in range(3):
        x = rng.standard_normal(longer).astype(np.float32)
        y = kept.run(None, {"x": x})[0]
        assert y.tobytes() == compiled_form(x, w, b if bias else None, **attrs).tobytes()


@pytest.mark.parametrize("x_shape, w_shape, group, strides, pads", LOOP_CASES)
@pytest.mark.parametrize("activation", ["Relu", "HardSigmoid"])
def test_fused_conv_reruns_the_loop_without_its_plan(
    x_shape, w_shape, group, strides, pads, activation, monkeypatch
):
    """A FusedConv the direct loop takes, run again on the same X shape: it calls the loop with
    the plan it kept (not looked up again) and gives the bits of :func:`conv_direct.direct`
    (which test_fused_conv_activations holds to the NumPy form); a new X shape makes a new one."""
    rng = np.random.default_rng(w_shape[0] * 5 + group)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    attrs = dict(group=group, strides=strides, pads=pads)
    params = ACTIVATIONS[activation][0]
    fused = {"activation": activation, **({"activation_params": params} if params else {})}
    node = helper.make_node(
        "FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft", **attrs, **fused
    )
    infos = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in "xzy"]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph([node], "fused", infos[:2], infos[2:], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    data = helper.make_model(graph, opset_imports=opsets).SerializeToString()
    kept = onnxflow.InferenceSession(data)
    act = conv_direct.loop_activation(activation, params)

    def feeds(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        x = rng.standard_normal(shape).astype(np.float32)
        out = conv_direct._plan(x, w, attrs)[1]
        return {"x": x, "z": rng.standard_normal(out).astype(np.float32)}

    def want(f: dict[str, np.ndarray]) -> bytes:
        return conv_direct.direct(f["x"], w, b, f["z"], attrs, act).tobytes()

    runs = [feeds(x_shape) for _ in range(3)]
    for f in runs[:2]:
        assert kept.run(None, f)[0].tobytes() == want(f)

    def no_plan(*args: object) -> tuple:
        raise AssertionError("the kept loop looked its plan up again")

    with monkeypatch.context() as patched:
        patched.setattr(conv_direct, "_cached_plan", no_plan)
        got = kept.run(None, runs[2])[0]
    assert got.tobytes() == want(runs[2])
    f = feeds((*x_shape[:-1], x_shape[-1] + 3))
    assert kept.run(None, f)[0].tobytes() == want(f)


def test_stateful_gemm_adds_its_bias_in_the_compiled_pass(monkeypatch):
    """The GEMM path a Conv's stateful form keeps runs as one compiled call, which adds B in the
    loop's compiled pass (NumPy's add of a (M, 1) column went through a buffer an element at a
    time), with the NumPy form's bits."""
    calls, module = [], conv_direct._CONV

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(module, name)

        def ColumnsProduct(self, *args: object) -> object:
            made = module.ColumnsProduct(*args)

            def call(*operands: object) -> object:
                y = made(*operands)
                calls.append(None if y is None else y.shape)
                return y

            return call

    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 12, 1, 1)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"])
    x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
    y_info = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph([node], "conv", [x_info], [y_info], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    kept = onnxflow.InferenceSession(data)
    numpy_form = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy"))
    monkeypatch.setattr(conv_direct, "_CONV", Counting())
    for _ in range(4):
        feeds = {"x": rng.standard_normal((1, 12, 3, 5)).astype(np.float32)}
        assert kept.run(None, feeds)[0].tobytes() == numpy_form.run(None, feeds)[0].tobytes()
    assert calls == [(1, 8, 3, 5)] * 2  # the third and fourth runs: the kept path
