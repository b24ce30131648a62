"""Convolutions of empty tensors: no image (batch 0) or no input channel (C = 0).

Each output of a convolution is a sum over the input channels and taps: with no input channel
the sum is empty, so the output is the bias broadcast over it (zeros without a bias), which is
onnxruntime's answer too; with no image, the output is empty, of shape ``[0, M, *spatial]``.
These crashed (a division by the zero size of a row of columns, reshapes by -1 that NumPy
cannot infer for an empty array). Every form is run: the NumPy and the compiled kernels, as
written and after the compile passes (which make a Conv with its bias Add and activation one
``ConvActivation`` node), FusedConv, the NCHWc Conv, the quantized convolutions, ConvTranspose
and DeformConv. Float results are compared with onnxruntime; the integer ones with the spec's
answer computed here (onnxruntime's ConvInteger, and its QLinearConv with a 3x3 kernel, return
uninitialised memory when C = 0).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from model_builders import F, model, vi
from onnx import ModelProto, TensorProto, helper
from onnx import numpy_helper as nh

import onnxflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_ms_fused import nchwc_conv_model

FORMS = [(k, o) for k in ("native", "numpy") for o in (True, False)]
MS = ("com.microsoft", 1)


def _ours(m: ModelProto, feeds: dict) -> list[np.ndarray]:
    """``m``'s first output in every form: compiled and NumPy kernels, with and without the
    compile passes."""
    found = []
    for kernels, optimize in FORMS:
        options = onnxflow.SessionOptions(optimize=optimize, kernels=kernels)
        found.append(onnxflow.InferenceSession(m, sess_options=options).run(None, feeds)[0])
    return found


def _theirs(m: ModelProto, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]


def _agree(found: list[np.ndarray], expected: np.ndarray) -> None:
    for (kernels, optimize), y in zip(FORMS, found, strict=True):
        where = f"kernels={kernels}, optimize={optimize}"
        assert y.shape == expected.shape and y.dtype == expected.dtype, where
        np.testing.assert_allclose(y, expected, rtol=1e-6, err_msg=where)


def _graph(nodes: list, x_shape: tuple, inits: list, *opsets: tuple, out=F) -> ModelProto:
    m = model(nodes, [vi("x", F, x_shape)], [vi("y", out)], inits)
    m.opset_import.extend(helper.make_opsetid(d, v) for d, v in opsets)
    m.ir_version = 8
    return m


def _weights(shape: tuple, with_bias: bool, dtype: type = np.float32) -> list[TensorProto]:
    w = (np.arange(math.prod(shape)) % 7 - 3).astype(dtype).reshape(shape) / 4
    found = [nh.from_array(w, "w")]
    if with_bias:
        found.append(nh.from_array(np.arange(1, shape[0] + 1).astype(dtype), "b"))
    return found


# X shape, W shape, attributes: 2-D, pointwise, 1-D, grouped, padded.
NO_CHANNELS = [
    ((1, 0, 5, 5), (3, 0, 3, 3), {}),
    ((2, 0, 5, 5), (3, 0, 1, 1), {}),
    ((1, 0, 9), (3, 0, 3), {}),
    ((2, 0, 5, 5), (4, 0, 3, 3), {"group": 2}),
    ((1, 0, 5, 5), (3, 0, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
]
NO_IMAGES = [
    ((0, 2, 5, 5), (3, 2, 3, 3), {}),
    ((0, 2, 5, 5), (3, 2, 1, 1), {}),
    ((0, 2, 9), (3, 2, 3), {}),
    ((0, 3, 5, 5), (3, 1, 3, 3), {"group": 3}),
]
CASES = NO_CHANNELS + NO_IMAGES
IDS = [f"x{x}_w{w}{'_' + '_'.join(a) if a else ''}" for x, w, a in CASES]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("x_shape, w_shape, attrs", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_conv_of_an_empty_tensor_is_the_bias_or_empty(x_shape, w_shape, attrs, bias, dtype):
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    node = helper.make_node("Conv", inputs, ["y"], name="conv", **attrs)
    graph = helper.make_graph(
        [node], "g", [vi("x", elem, x_shape)], [vi("y", elem)], _weights(w_shape, bias, dtype)
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": np.ones(x_shape, dtype)}
    _agree(_ours(m, feeds), _theirs(m, feeds))


@pytest.mark.parametrize("x_shape, w_shape, attrs", CASES, ids=IDS)
@pytest.mark.parametrize("tail", ["Relu", "Add+LeakyRelu"])
def test_conv_with_its_activation_fused_of_an_empty_tensor(x_shape, w_shape, attrs, tail):
    """A Conv and its bias Add and activation, which the compile passes make one node."""
    inits = _weights(w_shape, tail == "Relu")
    if tail == "Relu":
        nodes = [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
            helper.make_node("Relu", ["c"], ["y"], name="act"),
        ]
    else:
        bias = np.arange(-1, w_shape[0] - 1, dtype=np.float32)
        inits.append(nh.from_array(bias.reshape(1, -1, *[1] * (len(x_shape) - 2)), "bb"))
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", **attrs),
            helper.make_node("Add", ["c", "bb"], ["a"], name="add"),
            helper.make_node("LeakyRelu", ["a"], ["y"], name="act", alpha=0.1),
        ]
    m = _graph(nodes, x_shape, inits)
    feeds = {"x": np.ones(x_shape, np.float32)}
    _agree(_ours(m, feeds), _theirs(m, feeds))


@pytest.mark.parametrize("x_shape, w_shape, attrs", CASES, ids=IDS)
def test_fused_conv_of_an_empty_tensor(x_shape, w_shape, attrs):
    node = helper.make_node(
        "FusedConv", ["x", "w", "b"], ["y"], name="fc", domain=MS[0], activation="Relu", **attrs
    )
    m = _graph([node], x_shape, _weights(w_shape, True), MS)
    feeds = {"x": np.ones(x_shape, np.float32)}
    _agree(_ours(m, feeds), _theirs(m, feeds))


@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((0, 32, 7, 7), (16, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((0, 3, 9, 9), (16, 3, 3, 3), {"strides": [2, 2]}),
        ((0, 32, 8, 8), (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}),
    ],
    ids=["blocked_input", "nchw_input", "depthwise"],
)
def test_nchwc_conv_of_no_images_is_empty(x_shape, w_shape, attrs, block):
    x, w = np.ones(x_shape, np.float32), np.ones(w_shape, np.float32)
    m, feeds = nchwc_conv_model(x, w, np.ones(w_shape[0], np.float32), block, **attrs)
    plain = _graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], x_shape, [nh.from_array(w, "w")]
    )
    for y in _ours(m, feeds):
        assert y.shape == _theirs(plain, {"x": x}).shape


def _spatial(x_shape: tuple, w_shape: tuple) -> tuple[int, ...]:
    """The output sizes of an unpadded stride-1 convolution."""
    return tuple(i - k + 1 for i, k in zip(x_shape[2:], w_shape[2:]))


INTEGER_CASES = [c for c in CASES if not c[2]]  # the quantized forms: no attributes


@pytest.mark.parametrize("x_shape, w_shape, attrs", INTEGER_CASES)
@pytest.mark.parametrize("domain", ["", "com.microsoft"])
def test_qlinear_conv_of_an_empty_tensor_is_the_requantized_bias(x_shape, w_shape, attrs, domain):
    m_out = w_shape[0]
    scales = {"xs": 0.5, "ws": 0.25, "ys": 0.1}
    bias = np.arange(1, m_out + 1, dtype=np.int32) * 10
    inits = [nh.from_array(np.float32(v), k) for k, v in scales.items()]
    inits += [
        nh.from_array(np.uint8(3), "xz"),
        nh.from_array(np.ones(w_shape, np.int8), "w"),
        nh.from_array(np.int8(0), "wz"),
        nh.from_array(np.uint8(5), "yz"),
        nh.from_array(bias, "b"),
    ]
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    node = helper.make_node("QLinearConv", inputs, ["y"], name="qc", domain=domain)
    m = _graph([node], x_shape, inits, MS, out=TensorProto.UINT8)
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8
    # No product to sum: each output is its channel's bias, requantized.
    step = np.float32(scales["xs"]) * np.float32(scales["ws"]) / np.float32(scales["ys"])
    per_channel = np.clip(np.rint(bias * step) + 5, 0, 255).astype(np.uint8)
    shape = (x_shape[0], m_out, *_spatial(x_shape, w_shape))
    expected = np.broadcast_to(per_channel.reshape(1, -1, *[1] * (len(shape) - 2)), shape)
    _agree(_ours(m, {"x": np.full(x_shape, 7, np.uint8)}), expected)


@pytest.mark.parametrize("x_shape, w_shape, attrs", INTEGER_CASES)
def test_conv_integer_of_an_empty_tensor_is_zeros(x_shape, w_shape, attrs):
    inits = [
        nh.from_array(np.ones(w_shape, np.int8), "w"),
        nh.from_array(np.uint8(3), "xz"),
        nh.from_array(np.int8(1), "wz"),
    ]
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], name="ci")
    m = _graph([node], x_shape, inits, out=TensorProto.INT32)
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8
    expected = np.zeros((x_shape[0], w_shape[0], *_spatial(x_shape, w_shape)), np.int32)
    _agree(_ours(m, {"x": np.full(x_shape, 7, np.uint8)}), expected)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((0, 2, 5, 5), (2, 3, 3, 3), {}),
        ((0, 2, 5, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}),
        ((0, 4, 5, 5), (4, 3, 3, 3), {"group": 2, "pads": [1, 0, 1, 0]}),
        ((0, 2, 7), (2, 3, 3), {"dilations": [2]}),
        ((1, 0, 5, 5), (0, 3, 3, 3), {}),
        ((2, 0, 4), (0, 3, 3), {"strides": [3]}),
    ],
)
def test_conv_transpose_of_an_empty_tensor(x_shape, w_shape, attrs, bias):
    inits = _weights(w_shape, False)
    if bias:
        m_out = w_shape[1] * attrs.get("group", 1)
        inits.append(nh.from_array(np.arange(1, m_out + 1, dtype=np.float32), "b"))
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    m = _graph(
        [helper.make_node("ConvTranspose", inputs, ["y"], name="ct", **attrs)], x_shape, inits
    )
    feeds = {"x": np.ones(x_shape, np.float32)}
    _agree(_ours(m, feeds), _theirs(m, feeds))


@pytest.mark.parametrize("x_shape", [(0, 2, 5, 5), (1, 0, 5, 5)])
def test_deform_conv_of_an_empty_tensor(x_shape):
    n, w_shape = x_shape[0], (3, x_shape[1], 3, 3)
    node = helper.make_node("DeformConv", ["x", "w", "off", "b"], ["y"], name="dc")
    m = model(
        [node],
        [vi("x", F, x_shape), vi("off", F, [n, 18, 3, 3])],
        [vi("y", F)],
        _weights(w_shape, True),
        opset=19,
    )
    m.ir_version = 8
    feeds = {"x": np.ones(x_shape, np.float32), "off": np.full((n, 18, 3, 3), 0.25, np.float32)}
    if n == 0:
        expected = _theirs(m, feeds)
    else:  # onnxruntime refuses C = 0 here; the spec's answer: the bias over the output
        expected = np.broadcast_to(
            np.arange(1, 4, dtype=np.float32).reshape(1, 3, 1, 1), (1, 3, 3, 3)
        )
    _agree(_ours(m, feeds), expected)
