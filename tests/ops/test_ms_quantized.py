"""com.microsoft quantized operators against onnxruntime (ops/microsoft/quantized.py): the
QOperator format, the contrib QuantizeLinear / DequantizeLinear and the dynamic MatMuls.

Integer outputs must equal onnxruntime's exactly; float outputs agree to float32 rounding.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import ModelProto, helper, numpy_helper
from ort_compare import assert_matches, ms_model, run_both

import onnxflow

RNG = np.random.default_rng(18)
BYTES = [np.uint8, np.int8]


def _q(dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


def _s(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def _zp(dtype: type, value: int) -> np.ndarray:
    return np.array(value if dtype == np.uint8 else value - 128, dtype)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# -- contrib QuantizeLinear / DequantizeLinear -------------------------------------------------
QDQ_TYPES = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.uint4, ml_dtypes.int4]


@pytest.mark.parametrize("dtype", QDQ_TYPES[:4], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("per_axis", [False, True], ids=["per_tensor", "per_axis"])
def test_contrib_quantize_then_dequantize(dtype: type, per_axis: bool) -> None:
    x = _f32(2, 3, 4) * 3
    scale = np.array([0.02, 0.05, 0.3], np.float32) if per_axis else _s(0.07)
    zero = np.full(scale.shape, 1, dtype)
    codes = assert_matches(*ms_model("QuantizeLinear", [x, scale, zero], axis=1))
    assert_matches(*ms_model("DequantizeLinear", [codes[0], scale, zero], axis=1))


def _qdq_model(x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> ModelProto:
    """contrib QuantizeLinear then DequantizeLinear along axis 1, the zero point a constant
    (onnxruntime neither takes nor returns 4-bit arrays, so the codes stay inside)."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain="com.microsoft"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", 1, x.shape)],
        [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


@pytest.mark.parametrize("dtype", QDQ_TYPES[4:], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("per_axis", [False, True], ids=["per_tensor", "per_axis"])
def test_contrib_4bit_quantize_then_dequantize(dtype: type, per_axis: bool) -> None:
    x = _f32(2, 3, 4) * 2
    scale = np.array([0.2, 0.3, 0.5], np.float32) if per_axis else _s(0.25)
    zero = np.full(scale.shape, 1, dtype)
    (y,) = assert_matches(_qdq_model(x, scale, zero), {"x": x})
    low, high = (0, 15) if dtype == ml_dtypes.uint4 else (-8, 7)
    bounds = scale.reshape(-1, 1) if per_axis else scale
    assert np.all(y >= (low - 1) * bounds - 1e-6) and np.all(y <= (high - 1) * bounds + 1e-6)


def test_contrib_quantize_rounds_half_to_even_and_saturates() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0], np.float32)
    out = assert_matches(*ms_model("QuantizeLinear", [x, _s(1.0), np.array(0, np.int8)]))
    np.testing.assert_array_equal(out[0], [0, 2, 2, 0, -2, 127, -128])


def test_contrib_dequantize_int32_without_zero_point() -> None:
    codes = RNG.integers(-(2**20), 2**20, size=(3, 5)).astype(np.int32)
    assert_matches(*ms_model("DequantizeLinear", [codes, _s(0.001)]))


def test_contrib_quantize_along_a_negative_axis() -> None:
    x, scale = _f32(3, 4), np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    assert_matches(*ms_model("QuantizeLinear", [x, scale, np.zeros(4, np.uint8)], axis=-1))


# -- elementwise ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((2, 4, 5), (5,)), ((3, 1), (1, 6))])
def test_binary_requantizes_to_c(dtype: type, op: str, shapes: tuple) -> None:
    a, b = _q(dtype, *shapes[0]), _q(dtype, *shapes[1])
    inputs = [a, _s(0.03), _zp(dtype, 120), b, _s(0.05), _zp(dtype, 130), _s(0.07), _zp(dtype, 128)]
    assert_matches(*ms_model(op, inputs))


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_with_c_zero_point_omitted(op: str) -> None:
    a, b = _q(np.int8, 3, 7), _q(np.int8, 3, 7)
    zero = np.array(3, np.int8)
    assert_matches(*ms_model(op, [a, _s(0.01), zero, b, _s(0.02), zero, _s(0.05)]))


@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
def test_sigmoid_over_every_code(dtype: type) -> None:
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(16, 16)
    assert_matches(
        *ms_model("QLinearSigmoid", [x, _s(0.05), _zp(dtype, 128), _s(1 / 256), _zp(dtype, 0)])
    )


@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.5])
def test_leaky_relu_over_every_code(dtype: type, alpha: float) -> None:
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(4, 64)
    inputs = [x, _s(0.05), _zp(dtype, 100), _s(0.04), _zp(dtype, 60)]
    assert_matches(*ms_model("QLinearLeakyRelu", inputs, alpha=alpha))


@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("same_as_z", [False, True], ids=["requantized", "same_scale"])
def test_where_requantizes_both_sides(dtype: type, same_as_z: bool) -> None:
    cond = RNG.random((3, 4)) > 0.5
    x, y = _q(dtype, 3, 4), _q(dtype, 4)
    z_scale, z_zero = (_s(0.02), _zp(dtype, 128)) if same_as_z else (_s(0.05), _zp(dtype, 100))
    inputs = [cond, x, _s(0.02), _zp(dtype, 128), y, _s(0.1), _zp(dtype, 110), z_scale, z_zero]
    assert_matches(*ms_model("QLinearWhere", inputs))


@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_concat_requantizes_inputs_with_other_scales(dtype: type, axis: int) -> None:
    a, b, c = _q(dtype, 2, 3, 4), _q(dtype, 2, 3, 4), _q(dtype, 2, 3, 4)
    inputs = [_s(0.05), _zp(dtype, 128)]
    inputs += [a, _s(0.05), _zp(dtype, 128), b, _s(0.02), _zp(dtype, 100)]
    inputs += [c, _s(0.3), _zp(dtype, 140)]
    assert_matches(*ms_model("QLinearConcat", inputs, axis=axis))


# -- softmax -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize(("opset", "axis"), [(13, -1), (13, 1), (12, 1), (11, -1)])
def test_softmax_along_axis_or_2d(dtype: type, opset: int, axis: int) -> None:
    x = _q(dtype, 2, 3, 10)
    y_zero = np.array(0 if dtype == np.uint8 else -128, dtype)
    inputs = [x, _s(0.1), _zp(dtype, 128), _s(1 / 256), y_zero]
    model, feeds = ms_model("QLinearSoftmax", inputs, axis=axis)
    model.graph.node[0].attribute.append(helper.make_attribute("opset", opset))
    assert_matches(model, feeds)


@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
def test_softmax_to_any_output_scale_is_the_nearest_code(dtype: type) -> None:
    """Softmax in float32, rounded to the nearest code. onnxruntime's kernel divides through a
    scaled table and may land one code lower unless the output scale is the quantizer's 1/256
    (the case above); the codes here are held to the float softmax and to within one code of
    onnxruntime's."""
    x = _q(dtype, 4, 12)
    inputs = [x, _s(0.3), _zp(dtype, 128), _s(0.0031), _zp(dtype, 32)]
    model, feeds = ms_model("QLinearSoftmax", inputs, axis=-1)
    model.graph.node[0].attribute.append(helper.make_attribute("opset", 13))
    ours, theirs = run_both(model, feeds)
    real = (x.astype(np.float64) - 128 + (0 if dtype == np.uint8 else 128)) * 0.3
    probs = np.exp(real - real.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    codes = np.asarray(ours[0]).astype(np.int64)
    expected = probs / np.float64(np.float32(0.0031)) + int(_zp(dtype, 32))
    info = np.iinfo(dtype)
    assert np.all(np.abs(codes - np.clip(expected, info.min, info.max)) <= 0.5 + 1e-3)
    assert np.abs(codes - theirs[0].astype(np.int64)).max() <= 1


# -- pooling and convolution ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_global_average_pool(dtype: type, channels_last: int) -> None:
    x = _q(dtype, 2, 3, 5, 7)
    inputs = [x, _s(0.05), _zp(dtype, 120), _s(0.02), _zp(dtype, 130)]
    assert_matches(*ms_model("QLinearGlobalAveragePool", inputs, channels_last=channels_last))


POOLS = {
    "valid_3x3": dict(kernel_shape=[3, 3]),
    "strided_padded": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "pad_counted": dict(kernel_shape=[2, 2], pads=[1, 0, 1, 0], count_include_pad=1),
    "ceil_mode": dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1),
    "same_upper": dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
}


@pytest.mark.parametrize("dtype", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("case", POOLS)
def test_average_pool(dtype: type, channels_last: int, case: str) -> None:
    x = _q(dtype, 1, 6, 7, 3) if channels_last else _q(dtype, 1, 3, 6, 7)
    inputs = [x, _s(0.05), _zp(dtype, 120), _s(0.04), _zp(dtype, 125)]
    attrs = dict(POOLS[case], channels_last=channels_last)
    assert_matches(*ms_model("QLinearAveragePool", inputs, **attrs))


CONV_TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]


@pytest.mark.parametrize(("xt", "wt"), CONV_TYPES, ids=["u8u8", "u8s8", "s8s8"])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_contrib_qlinear_conv(xt: type, wt: type, channels_last: int, per_channel: bool) -> None:
    x = _q(xt, 1, 5, 6, 4) if channels_last else _q(xt, 1, 4, 5, 6)
    w = _q(wt, 6, 2, 3, 3)
    w_scale = np.linspace(0.001, 0.01, 6).astype(np.float32) if per_channel else _s(0.004)
    w_zero = np.zeros(w_scale.shape, wt)
    bias = RNG.integers(-500, 500, size=6).astype(np.int32)
    inputs = [x, _s(0.05), _zp(xt, 120), w, w_scale, w_zero, _s(0.3), _zp(xt, 128), bias]
    attrs = dict(group=2, pads=[1, 1, 1, 1], strides=[1, 2], channels_last=channels_last)
    assert_matches(*ms_model("QLinearConv", inputs, **attrs))


# -- matrix products -----------------------------------------------------------------------------
GEMM_TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]


@pytest.mark.parametrize(("at", "bt"), GEMM_TYPES, ids=["u8u8", "u8s8", "s8s8"])
@pytest.mark.parametrize("output", ["float", "quantized"])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
def test_qgemm(at: type, bt: type, output: str, per_column: bool) -> None:
    a, b = _q(at, 4, 9), _q(bt, 9, 5)
    b_scale = np.linspace(0.01, 0.03, 5).astype(np.float32) if per_column else _s(0.02)
    b_zero = np.zeros(b_scale.shape, bt)
    c = RNG.integers(-1000, 1000, size=5).astype(np.int32)
    inputs = [a, _s(0.03), _zp(at, 120), b, b_scale, b_zero, c]
    if output == "quantized":
        inputs += [_s(2.0), _zp(at, 128)]
    assert_matches(*ms_model("QGemm", inputs, alpha=1.0), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 1), (1, 0), (1, 1)])
def test_qgemm_transposed_with_alpha_and_no_c(trans_a: int, trans_b: int) -> None:
    a = _q(np.uint8, 9, 4) if trans_a else _q(np.uint8, 4, 9)
    b = _q(np.int8, 5, 9) if trans_b else _q(np.int8, 9, 5)
    inputs = [a, _s(0.03), _zp(np.uint8, 100), b, _s(0.02), np.array(0, np.int8)]
    attrs = dict(alpha=0.5, transA=trans_a, transB=trans_b)
    assert_matches(*ms_model("QGemm", inputs, **attrs), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    ("at", "bt"), [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]
)
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_matmul_integer_to_float(at: type, bt: type, per_column: bool, with_bias: bool) -> None:
    a, b = _q(at, 2, 3, 8), _q(bt, 8, 6)
    b_scale = np.linspace(0.01, 0.03, 6).astype(np.float32) if per_column else _s(0.02)
    b_zero = (np.arange(6) % 3).astype(bt) if per_column else np.array(2, bt)
    bias = _f32(6) if with_bias else None
    inputs = [a, b, _s(0.04), b_scale, _zp(at, 125), b_zero, bias]
    assert_matches(*ms_model("MatMulIntegerToFloat", inputs), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("bt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_dynamic_quantize_matmul(bt: type, per_column: bool, with_bias: bool) -> None:
    a, b = _f32(3, 2, 16) * 2, _q(bt, 16, 7)
    b_scale = np.linspace(0.01, 0.03, 7).astype(np.float32) if per_column else _s(0.02)
    b_zero = np.zeros(b_scale.shape, bt)
    bias = _f32(7) if with_bias else None
    assert_matches(*ms_model("DynamicQuantizeMatMul", [a, b, b_scale, b_zero, bias]), 1e-5, 1e-4)


def test_dynamic_quantize_matmul_of_all_positive_a() -> None:
    a, b = np.abs(_f32(4, 8)) + 1, _q(np.int8, 8, 3)
    assert_matches(*ms_model("DynamicQuantizeMatMul", [a, b, _s(0.01)]), 1e-5, 1e-4)


# -- DynamicQuantizeLSTM -------------------------------------------------------------------------
def _lstm_inputs(direction: str, wt: type, per_channel: bool, hidden: int = 5) -> list[Any]:
    """X (3, 2, 6) and 8-bit W, R with their scales and zero points, B; no optional state."""
    dirs = 2 if direction == "bidirectional" else 1
    w, r = _q(wt, dirs, 6, 4 * hidden), _q(wt, dirs, hidden, 4 * hidden)
    params = (dirs, 4 * hidden) if per_channel else (dirs,)
    scale = lambda: (RNG.random(params) * 0.01 + 0.002).astype(np.float32)  # noqa: E731
    zero = lambda: _zp(wt, 128) + np.zeros(params, wt)  # noqa: E731
    b = _f32(dirs, 8 * hidden) * 0.1
    x = _f32(3, 2, 6)
    return [x, w, r, b, None, None, None, None, scale(), zero(), scale(), zero()]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("wt", BYTES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_dynamic_quantize_lstm(direction: str, wt: type, per_channel: bool) -> None:
    inputs = _lstm_inputs(direction, wt, per_channel)
    model = ms_model("DynamicQuantizeLSTM", inputs, n_out=3, hidden_size=5, direction=direction)
    assert_matches(*model, rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_lstm_with_states_lengths_and_peepholes() -> None:
    inputs = _lstm_inputs("bidirectional", np.int8, True)
    inputs[4] = np.array([3, 2], np.int32)
    inputs[5], inputs[6] = _f32(2, 2, 5) * 0.5, _f32(2, 2, 5) * 0.5
    inputs[7] = _f32(2, 15) * 0.1
    model = ms_model(
        "DynamicQuantizeLSTM", inputs, n_out=3, hidden_size=5, direction="bidirectional"
    )
    assert_matches(*model, rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_lstm_clip_and_coupled_gates() -> None:
    inputs = _lstm_inputs("forward", np.uint8, False)
    attrs = dict(
        hidden_size=5, clip=0.5, input_forget=1, activations=["HardSigmoid", "Tanh", "Softsign"]
    )
    model = ms_model("DynamicQuantizeLSTM", inputs, n_out=3, **attrs)
    assert_matches(*model, rtol=1e-5, atol=1e-5)


# -- errors --------------------------------------------------------------------------------------
def _fails(model: ModelProto, feeds: dict[str, Any], match: str) -> None:
    model.graph.output[0].type.tensor_type.elem_type = 2
    with pytest.raises(onnxflow.OnnxflowError, match=match):
        onnxflow.InferenceSession(model).run(None, feeds)


def test_concat_names_an_incomplete_triple() -> None:
    a = _q(np.uint8, 2, 3)
    inputs = [_s(0.1), _zp(np.uint8, 128), a, _s(0.1), _zp(np.uint8, 128), a, _s(0.1)]
    _fails(*ms_model("QLinearConcat", inputs, axis=0), "triples")


def test_binary_refuses_16_bit_codes() -> None:
    a, zero = np.zeros((2, 2), np.uint16), np.array(0, np.uint16)
    inputs = [a, _s(0.1), zero, a, _s(0.1), zero, _s(0.1), zero]
    _fails(*ms_model("QLinearAdd", inputs), "uint8 or int8")
