"""Compiled linear quantization against the NumPy forms: the same bits.

Every compiled loop repeats the NumPy form's float32 operations in its order, and the integer
products are exact in both forms, so each comparison is bitwise (floats compared as their bit
patterns, so a zero's sign counts)."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import both_forms, node_forms
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.ops import integer_gemm

FORMS_TESTED = [
    ("", "QuantizeLinear"),
    ("", "DequantizeLinear"),
    ("", "DynamicQuantizeLinear"),
    ("", "MatMulInteger"),
    ("", "ConvInteger"),
    ("", "QLinearMatMul"),
    ("", "QLinearConv"),
    ("onnxflow.fused", "FakeQuantize"),
    ("com.microsoft", "QuantizeLinear"),
    ("com.microsoft", "DequantizeLinear"),
    ("com.microsoft", "QLinearConv"),
    ("com.microsoft", "QGemm"),
    ("com.microsoft", "QLinearAdd"),
    ("com.microsoft", "QLinearMul"),
    ("com.microsoft", "MatMulIntegerToFloat"),
    ("com.microsoft", "DynamicQuantizeMatMul"),
]

MS = "com.microsoft"
BYTE_TYPES = [np.uint8, np.int8]


def bits(x: np.ndarray) -> np.ndarray:
    """An array's bytes, so that equal means the same bits (NaN, -0.0 included)."""
    return np.ascontiguousarray(x).view(np.uint8)


def same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b, strict=True):
        u, v = np.asarray(u), np.asarray(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        assert np.array_equal(bits(u), bits(v))


def _floats(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Random floats with ties: halves of the scale, and values past the 8-bit range."""
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(scale * 80)
    flat = x.reshape(-1)
    n = flat.size
    flat[: n // 4] = (rng.integers(-300, 300, n // 4) + 0.5).astype(np.float32) * np.float32(scale)
    flat[n // 4 : n // 3] = rng.integers(-1, 2, n // 3 - n // 4) * np.float32(0.3 * scale)
    flat[-3:] = [1e30, -1e30, -0.0]
    return x


def _params(rng, dtype, count):
    scale = rng.uniform(0.01, 0.2, count).astype(np.float32)
    info = np.iinfo(dtype)
    zero = rng.integers(info.min, info.max + 1, count).astype(dtype)
    zero[0] = 0
    return scale, zero


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_quantize_and_dequantize(dtype, axis):
    rng = np.random.default_rng(3)
    shape = (3, 5, 7, 9)
    count = 1 if axis is None else shape[axis]
    scale, zero = _params(rng, dtype, count)
    if axis is None:
        scale, zero = scale.reshape(()), zero.reshape(())
    x = _floats(rng, shape, float(scale.reshape(-1)[0]))
    attrs = {} if axis is None else {"axis": axis}
    same(*node_forms("QuantizeLinear", [x, scale, zero], 21, **attrs))
    q = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
    same(*node_forms("DequantizeLinear", [q, scale, zero], 21, **attrs))
    same(*node_forms("DequantizeLinear", [q, scale], 21, **attrs))


def test_quantize_without_zero_point_and_other_types():
    rng = np.random.default_rng(4)
    x = _floats(rng, (4, 33), 0.05)
    same(*node_forms("QuantizeLinear", [x, np.float32(0.05)], 13))
    same(*node_forms("QuantizeLinear", [x.astype(np.float64), np.float64(0.05)], 21))
    same(*node_forms("QuantizeLinear", [x, np.float32(0.05), np.int16(3)], 21))
    same(*node_forms("DequantizeLinear", [np.arange(10, dtype=np.int32), np.float32(0.5)], 13))


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "empty", "nan"])
def test_dynamic_quantize_linear(case):
    rng = np.random.default_rng(5)
    x = {
        "mixed": _floats(rng, (17, 31), 0.02),
        "positive": np.abs(rng.standard_normal((8, 8))).astype(np.float32),
        "negative": -np.abs(rng.standard_normal(65)).astype(np.float32),
        "zeros": np.zeros((3, 4), np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "nan": np.array([1.0, np.nan, -2.0], np.float32),
    }[case]
    compiled, numpy_form = node_forms("DynamicQuantizeLinear", [x], 11, n_out=3)
    if case == "nan":  # the uint8 codes of NaN are undefined; both forms are the NumPy one
        compiled, numpy_form = compiled[1:], numpy_form[1:]
    same(compiled, numpy_form)


def test_dynamic_quantize_linear_ties():
    x = np.array([0.0, 255.0, 0.5, 1.5, 2.5, -0.5 + 254.0, 127.5], np.float32)
    same(*node_forms("DynamicQuantizeLinear", [x], 11, n_out=3))


def _qdq_model(x, scale, zero, axis):
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")]
    attrs = {} if axis is None else {"axis": axis}
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs),
        ],
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), {"x": x}


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("axis", [None, 1, -1])
def test_fake_quantize(dtype, axis):
    rng = np.random.default_rng(6)
    shape = (2, 6, 5, 4)
    count = 1 if axis is None else shape[axis]
    scale, zero = _params(rng, dtype, count)
    if axis is None:
        scale, zero = scale.reshape(()), zero.reshape(())
    x = _floats(rng, shape, float(scale.reshape(-1)[0]))
    x.reshape(-1)[5] = np.nan
    compiled, numpy_form = both_forms(*_qdq_model(x, scale, zero, axis))
    same(compiled, numpy_form)
    assert np.isnan(compiled[0].reshape(-1)[5])


def _integers(rng, dtype, shape):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    edges = [info.min, info.max][: x.size]
    x.reshape(-1)[: len(edges)] = edges
    return x


def _matmul_model(a, b, a_zero, b_zero, constant_b):
    inputs = {"a": a, "b": b, "az": a_zero, "bz": b_zero}
    consts = {"b", "bz"} if constant_b else set()
    names = [n if inputs[n] is not None else "" for n in ("a", "b", "az", "bz")]
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", names, ["y"])],
        "mmi",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs.items()
            if v is not None and n not in consts
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(inputs[n], n) for n in sorted(consts) if inputs[n] is not None],
    )
    feeds = {n: v for n, v in inputs.items() if v is not None and n not in consts}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), feeds


@pytest.fixture(params=["int16", "int16-no-vnni", "float32"])
def kernel(request, monkeypatch):
    """Every exact product: the int16 kernel (where the CPU has AVX-512), with and without
    VNNI, and float32 BLAS."""
    if request.param == "float32":
        monkeypatch.setattr(integer_gemm.QUANT, "PANEL", 0)
    if request.param == "int16-no-vnni":
        before = integer_gemm.QUANT.use_vnni(False)
        yield request.param
        integer_gemm.QUANT.use_vnni(before)
        return
    yield request.param


@pytest.mark.parametrize("a_type", BYTE_TYPES)
@pytest.mark.parametrize("b_type", BYTE_TYPES)
@pytest.mark.parametrize("constant_b", [False, True])
@pytest.mark.parametrize(("k", "n"), [(1, 11), (37, 32), (300, 65), (1100, 7)])
def test_matmul_integer(kernel, a_type, b_type, constant_b, k, n):
    rng = np.random.default_rng(k)
    a, b = _integers(rng, a_type, (2, 9, k)), _integers(rng, b_type, (k, n))
    a_zero, b_zero = _integers(rng, a_type, (9,)), _integers(rng, b_type, (n,))
    for zeros in [(a_zero, b_zero), (a_zero[:1], b_zero[:1]), (None, None)]:
        compiled, numpy_form = both_forms(*_matmul_model(a, b, *zeros, constant_b))
        same(compiled, numpy_form)
    exact = (a.astype(np.int64) - a_zero[:, None]) @ (b.astype(np.int64) - b_zero)
    assert np.array_equal(compiled[0], (a.astype(np.int64) @ b).astype(np.int32))
    assert np.array_equal(both_forms(*_matmul_model(a, b, a_zero, b_zero, constant_b))[0][0], exact)


def test_matmul_integer_batched_b_and_saturated_operands(kernel):
    a = np.full((3, 4, 2000), 255, np.uint8)
    b = np.zeros((3, 2000, 5), np.uint8)
    same(*node_forms("MatMulInteger", [a, b, np.uint8(0), np.uint8(255)], 10))
    same(*node_forms("MatMulInteger", [a[0, 0], b[0], np.uint8(0), np.uint8(255)], 10))


def _conv_model(op, inputs, constant, **attrs):
    """A one-node conv model; inputs named in ``constant`` are initializers."""
    names = [f"x{i}" if v is not None else "" for i, v in enumerate(inputs)]
    values = {n: v for n, v in zip(names, inputs, strict=True) if v is not None}
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)],
        op,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in values.items()
            if n not in constant
        ],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(v, n) for n, v in values.items() if n in constant],
    )
    feeds = {n: v for n, v in values.items() if n not in constant}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), feeds


CONV_CASES = {
    "3x3_padded": ((1, 8, 9, 10), (6, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    "strided": ((2, 4, 11, 9), (5, 4, 3, 2), {"strides": [2, 1], "dilations": [1, 2]}),
    "depthwise": ((1, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    "grouped": ((1, 6, 7, 7), (4, 3, 1, 1), {"group": 2}),
    "pointwise": ((2, 5, 4, 4), (7, 5, 1, 1), {}),
    "long_k_sliced": ((1, 70, 12, 12), (4, 70, 3, 3), {"auto_pad": "SAME_UPPER"}),
    "taps_sliced": ((1, 64, 40, 40), (3, 64, 3, 3), {}),
    "1d": ((2, 3, 20), (4, 3, 5), {"pads": [2, 1]}),
    "one_pixel": ((2, 41, 1, 1), (7, 41, 1, 1), {"strides": [2, 2]}),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize(
    ("x_type", "w_type"), [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)]
)
def test_conv_integer_and_qlinear_conv(kernel, case, x_type, w_type):
    x_shape, w_shape, attrs = CONV_CASES[case]
    rng = np.random.default_rng(len(case))
    x, w = _integers(rng, x_type, x_shape), _integers(rng, w_type, w_shape)
    x_zero = np.asarray(np.iinfo(x_type).min, x_type)  # the widest reach
    w_zero = _integers(rng, w_type, (w_shape[0],))
    for constant in [set(), {"x1", "x3"}]:
        model = _conv_model("ConvInteger", [x, w, x_zero, w_zero], constant, **attrs)
        same(*both_forms(*model))
    scales = rng.uniform(0.001, 0.01, w_shape[0]).astype(np.float32)
    y_zero = np.asarray(7, x_type)
    bias = rng.integers(-5000, 5000, w_shape[0]).astype(np.int32)
    for b in (bias, None):
        inputs = [x, np.float32(0.02), x_zero, w, scales, w_zero, np.float32(0.05), y_zero, b]
        for constant in [set(), {"x3", "x4", "x5", "x8"}, ALL_BUT_X]:
            same(*both_forms(*_conv_model("QLinearConv", inputs, constant, **attrs)))


#: Every input of a QLinearConv but X a constant: the compiled form made at compile time.
ALL_BUT_X = {f"x{i}" for i in range(1, 9)}


def test_qlinear_conv_prepared_for_its_constants(kernel):
    """With every input but X constant the node runs the form its constants prepared; fed
    parameters, or a bias the tail does not take (int32 sums float32 would round), keep it on
    the compiled form, which gives the same bits."""
    rng = np.random.default_rng(3)
    x, w = _integers(rng, np.uint8, (1, 8, 5, 5)), _integers(rng, np.int8, (6, 8, 1, 1))
    bias = rng.integers(-5000, 5000, 6).astype(np.int32)
    inputs = [x, np.float32(0.02), np.uint8(3), w, np.float32(0.01), np.int8(0)]
    inputs += [np.float32(0.05), np.uint8(7), bias]
    for constant, b, name in [
        (ALL_BUT_X, bias, "qlinear_conv_prepared"),
        (ALL_BUT_X - {"x6"}, bias, "qlinear_conv_compiled"),
        (ALL_BUT_X, np.full(6, 1 << 30, np.int32), "qlinear_conv_compiled"),
    ]:
        inputs[8] = b
        model, feeds = _conv_model("QLinearConv", inputs, constant)
        sess = onnxflow.InferenceSession(model.SerializeToString())
        assert _step_name(sess) == name
        same(*both_forms(model, feeds))


@pytest.mark.parametrize("dtype", BYTE_TYPES)
def test_quantize_and_dequantize_prepared_for_their_constants(kernel, dtype):
    """A constant per-tensor scale and zero point: the node runs the form they prepared, with
    the bits of the other two forms; per-axis, fed or omitted parameters keep it on the
    compiled form."""
    rng = np.random.default_rng(4)
    x = _floats(rng, (2, 3, 17), 0.05)
    q = _integers(rng, dtype, (2, 3, 17))
    scale, zero = np.float32(0.05), np.asarray(3, dtype)
    vector = rng.uniform(0.01, 0.1, 3).astype(np.float32), _integers(rng, dtype, (3,))
    for op, value, prepared in [
        ("QuantizeLinear", x, "quantize_linear_prepared"),
        ("DequantizeLinear", q, "dequantize_linear_prepared"),
    ]:
        compiled = prepared.replace("prepared", "compiled")
        for inputs, constant, name in [
            ([value, scale, zero], {"x1", "x2"}, prepared),
            ([value, scale, zero], {"x1"}, compiled),
            ([value, scale, None], {"x1"}, compiled),
            ([value, *vector], {"x1", "x2"}, compiled),
        ]:
            model, feeds = _conv_model(op, inputs, constant)
            assert _step_name(onnxflow.InferenceSession(model.SerializeToString())) == name
            same(*both_forms(model, feeds))


def _step_name(sess) -> str:
    """The name of the function a one-node session's step runs (attributes bound or not)."""
    fn = sess.plan.steps[0][0]
    return getattr(fn, "func", fn).__name__


def test_qlinear_conv_ties_and_saturation(kernel):
    """Scales whose ratio is 1/2 make every odd sum a tie; large sums saturate."""
    x = np.arange(2 * 9 * 9, dtype=np.uint8).reshape(1, 2, 9, 9)
    w = np.ones((3, 2, 3, 3), np.int8)
    w[1] = -1
    w[2, :, 1, 1] = 1
    inputs = [x, np.float32(0.5), np.uint8(0), w, np.float32(1.0), np.int8(0), np.float32(1.0)]
    for y_zero in (np.uint8(128), np.int8(0)):
        x_in = x if y_zero.dtype == np.uint8 else (x // 2).astype(np.int8)
        inputs[0], inputs[2] = x_in, np.zeros((), x_in.dtype)
        compiled, numpy_form = node_forms("QLinearConv", [*inputs, y_zero], 10)
        same(compiled, numpy_form)
        info = np.iinfo(y_zero.dtype)
        assert {info.min, info.max} & set(np.unique(compiled[0]).tolist())


#: Depthwise QLinearConvs (one input channel per group): the shapes of PP-OCR's classifier,
#: strides, dilations, a channel multiplier, 1-D, pads wider than the kernel, asymmetric pads,
#: outputs narrower and wider than the loop's vectors.
DEPTHWISE_CASES = {
    "5x5_two_rows": ((1, 20, 2, 96), (20, 1, 5, 5), {"pads": [2, 2, 2, 2]}),
    "3x3_strided_rows": ((2, 8, 12, 37), (8, 1, 3, 3), {"strides": [2, 1], "pads": [1] * 4}),
    "strided_columns": ((1, 4, 9, 21), (4, 1, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    "dilated": ((1, 3, 11, 40), (3, 1, 3, 2), {"dilations": [2, 3], "auto_pad": "SAME_UPPER"}),
    "multiplier": ((1, 3, 6, 5), (9, 1, 3, 3), {"pads": [3, 1, 0, 4]}),
    "1d": ((2, 5, 70), (5, 1, 7), {"pads": [3, 3]}),
    "one_channel": ((1, 1, 5, 5), (2, 1, 2, 2), {}),
}


@pytest.mark.parametrize("case", sorted(DEPTHWISE_CASES))
@pytest.mark.parametrize("dtype", BYTE_TYPES)
def test_qlinear_conv_depthwise_loop(monkeypatch, case, dtype):
    """A depthwise QLinearConv, its parameters constant or fed, runs the fused integer loop
    (exact sums, then the requantizing tail row by row) with the NumPy form's bits: per-tensor
    and per-channel W zero points, X's widest reach, ties and saturation."""
    x_shape, w_shape, attrs = DEPTHWISE_CASES[case]
    attrs = {"group": x_shape[1], **attrs}
    rng = np.random.default_rng(len(case))
    x, w = _integers(rng, dtype, x_shape), _integers(rng, np.int8, w_shape)
    calls = []
    loop = integer_gemm.QUANT.qlinear_depthwise
    monkeypatch.setattr(
        integer_gemm.QUANT, "qlinear_depthwise", lambda *a: calls.append(1) or loop(*a)
    )
    x_zero = np.asarray(np.iinfo(dtype).min, dtype)
    scales = rng.uniform(0.001, 0.01, w_shape[0]).astype(np.float32)
    bias = rng.integers(-5000, 5000, w_shape[0]).astype(np.int32)
    for w_zero in (_integers(rng, np.int8, (w_shape[0],)), np.int8(0)):
        for b, y_scale in [(bias, np.float32(0.05)), (None, np.float32(0.0001))]:
            inputs = [x, np.float32(0.02), x_zero, w, scales, w_zero, y_scale]
            inputs += [np.asarray(7, dtype), b]
            for constant in [set(), ALL_BUT_X]:
                calls.clear()
                same(*both_forms(*_conv_model("QLinearConv", inputs, constant, **attrs)))
                assert calls == [1]


@pytest.mark.parametrize("x_shape", [(1, 200, 1, 1), (3, 33, 1, 1), (2, 9, 1)])
@pytest.mark.parametrize("dtype", BYTE_TYPES)
def test_qlinear_conv_one_pixel_loop(monkeypatch, x_shape, dtype):
    """A 1x1 QLinearConv on one pixel (a squeeze-excite block's) with constant parameters runs
    one compiled call, the exact column product then the tail, with the NumPy form's bits;
    X of more than one pixel does not."""
    rng = np.random.default_rng(x_shape[1])
    w_shape = (50, x_shape[1], *[1] * (len(x_shape) - 2))
    x, w = _integers(rng, dtype, x_shape), _integers(rng, np.int8, w_shape)
    calls = []
    loop = integer_gemm.QUANT.qlinear_pixel
    monkeypatch.setattr(integer_gemm.QUANT, "qlinear_pixel", lambda *a: calls.append(1) or loop(*a))
    scales = rng.uniform(0.001, 0.01, w_shape[0]).astype(np.float32)
    bias = rng.integers(-5000, 5000, w_shape[0]).astype(np.int32)
    for w_zero in (_integers(rng, np.int8, (w_shape[0],)), np.int8(3)):
        for y_scale in (np.float32(0.05), np.float32(0.0001)):  # saturating
            inputs = [x, np.float32(0.02), np.asarray(np.iinfo(dtype).min, dtype), w, scales]
            inputs += [w_zero, y_scale, np.asarray(7, dtype), bias]
            calls.clear()
            same(*both_forms(*_conv_model("QLinearConv", inputs, ALL_BUT_X)))
            assert calls == [1]
    inputs[0] = _integers(rng, dtype, (1, x_shape[1], *[2] * (len(x_shape) - 2)))
    calls.clear()
    same(*both_forms(*_conv_model("QLinearConv", inputs, ALL_BUT_X)))
    assert calls == []


def _ms_model(op, inputs, constant, **attrs):
    """:func:`_conv_model` of a com.microsoft node."""
    model, feeds = _conv_model(op, inputs, constant, **attrs)
    model.graph.node[0].domain = MS
    model.opset_import.append(helper.make_opsetid(MS, 1))
    return model, feeds


@pytest.mark.parametrize("dtype", BYTE_TYPES)
def test_ms_quantize_dequantize_and_conv(kernel, dtype):
    rng = np.random.default_rng(8)
    scale, zero = _params(rng, dtype, 6)
    x = _floats(rng, (2, 6, 5), float(scale[0]))
    same(*both_forms(*_ms_model("QuantizeLinear", [x, scale, zero], set(), axis=1)))
    q = _integers(rng, dtype, (2, 6, 5))
    same(*both_forms(*_ms_model("DequantizeLinear", [q, scale[:1], zero[:1]], set())))
    x = _integers(rng, dtype, (1, 9, 10, 5))
    w = _integers(rng, np.int8, (4, 5, 3, 3))
    inputs = [x, np.float32(0.02), np.asarray(3, dtype), w, scale[:4], np.zeros(4, np.int8)]
    inputs += [np.float32(0.5), np.asarray(-1 if dtype == np.int8 else 1, dtype)]
    model = _ms_model("QLinearConv", inputs, {"x3"}, channels_last=1, pads=[1, 0, 1, 0])
    same(*both_forms(*model))


@pytest.mark.parametrize("b_type", BYTE_TYPES)
@pytest.mark.parametrize("trans_b", [0, 1])
def test_ms_qgemm(kernel, b_type, trans_b):
    rng = np.random.default_rng(9)
    a, b = _integers(rng, np.uint8, (7, 600)), _integers(rng, b_type, (600, 5))
    b = np.ascontiguousarray(b.T) if trans_b else b
    b_zero = _integers(rng, b_type, (5,))
    c = rng.integers(-1000, 1000, 5).astype(np.int32)
    scales = rng.uniform(0.01, 0.02, 5).astype(np.float32)
    head = [a, np.float32(0.03), np.uint8(200), b, scales, b_zero]
    for tail in ([c], [c, np.float32(0.7), np.uint8(3)], [None, np.float32(0.7), np.int8(3)]):
        for constant in [set(), {"x3", "x4", "x5"}]:
            model = _ms_model("QGemm", head + tail, constant, transB=trans_b, alpha=0.5)
            same(*both_forms(*model))


@pytest.mark.parametrize("b_type", BYTE_TYPES)
def test_ms_integer_matmuls_to_float(kernel, b_type):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 300)).astype(np.float32)
    a = _integers(rng, np.uint8, (2, 3, 300))
    b, b_zero = _integers(rng, b_type, (300, 8)), _integers(rng, b_type, (8,))
    b_scale = rng.uniform(0.01, 0.02, 8).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    for constant in [set(), {"x1", "x2", "x3"}]:
        inputs = [x, b, b_scale, b_zero, bias]
        same(*both_forms(*_ms_model("DynamicQuantizeMatMul", inputs, constant)))
        inputs = [x, b, b_scale[:1], None, None]
        same(*both_forms(*_ms_model("DynamicQuantizeMatMul", inputs, constant)))
    inputs = [a, b, np.float32(0.1), b_scale, np.uint8(100), b_zero, bias]
    for constant in [set(), {"x1", "x3", "x5"}]:
        same(*both_forms(*_ms_model("MatMulIntegerToFloat", inputs, constant)))


def test_matmul_integer_shape_mismatch_is_the_numpy_forms_error():
    a, b = np.zeros((2, 3), np.uint8), np.zeros((4, 5), np.uint8)
    with pytest.raises(Exception, match="MatMulInteger"):
        node_forms("MatMulInteger", [a, b], 10)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize(
    "b_shape",
    [(2, 3, 17), (1,), (), (3, 1), (17,), (1, 3, 17), (1, 1, 17), (2, 1, 1), (2, 3, 1), (2, 1, 17)],
)
def test_ms_qlinear_add_and_mul(op, dtype, b_shape):
    """Same shapes, one value on either side, a bias along the last axes, a value per channel
    held along the axes after it (one pass), axes that are no one run (the NumPy form); scales
    whose ratios make ties and saturation. Scales and zero points fed, or constants: then the
    node runs the form they prepared at compile time, with the same bits."""
    rng = np.random.default_rng(11)
    a, b = _integers(rng, dtype, (2, 3, 17)), _integers(rng, dtype, b_shape)
    z = [np.asarray(v, dtype) for v in (5, -3 if dtype == np.int8 else 250, 1)]
    prepared = op.lower().replace("qlinear", "qlinear_") + "_prepared"
    for scales in ([0.5, 0.25, 1.0], [0.02, 0.03, 0.04], [0.3, 0.2, 0.001]):
        s = [np.float32(v) for v in scales]
        for first, second in [
            ((a, s[0], z[0]), (b, s[1], z[1])),
            ((b, s[1], z[1]), (a, s[0], z[0])),
        ]:
            inputs = [*first, *second, s[2], z[2]]
            same(*both_forms(*_ms_model(op, inputs, set())))
            model, feeds = _ms_model(op, inputs, {"x1", "x2", "x4", "x5", "x6", "x7"})
            assert _step_name(onnxflow.InferenceSession(model.SerializeToString())) == prepared
            same(*both_forms(model, feeds))
    same(*both_forms(*_ms_model(op, [a, s[0], None, a, s[1], None, s[2]], set())))


@pytest.mark.parametrize("a_type", BYTE_TYPES)
@pytest.mark.parametrize("b_type", BYTE_TYPES)
@pytest.mark.parametrize("per_axis", [False, True])
def test_qlinear_matmul(a_type, b_type, per_axis):
    rng = np.random.default_rng(12)
    a, b = _integers(rng, a_type, (2, 5, 70)), _integers(rng, b_type, (70, 9))
    a_scale, a_zero = np.float32(0.02), np.asarray(3, a_type)
    b_scale = rng.uniform(0.01, 0.03, 9 if per_axis else 1).astype(np.float32)
    b_zero = _integers(rng, b_type, (9,) if per_axis else (1,))
    for y_type, y_scale in [(np.uint8, 0.5), (np.int8, 0.01), (np.uint8, 0.0002)]:
        inputs = [a, a_scale, a_zero, b, b_scale, b_zero, np.float32(y_scale), y_type(2)]
        for constant in [set(), {"x3", "x4", "x5"}]:
            same(*both_forms(*_conv_model("QLinearMatMul", inputs, constant)))
