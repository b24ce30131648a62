"""Compiled linear quantization against the NumPy forms: the same bits.

Every compiled loop repeats the NumPy form's float32 operations in its order, and the integer
products are exact in both forms, so each comparison is bitwise (floats compared as their bit
patterns, so a zero's sign counts)."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import both_forms, node_forms
from onnx import TensorProto, helper, numpy_helper

FORMS_TESTED = [
    ("", "QuantizeLinear"),
    ("", "DequantizeLinear"),
    ("", "DynamicQuantizeLinear"),
    ("", "MatMulInteger"),
    ("onnxflow.fused", "FakeQuantize"),
]

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
    x.reshape(-1)[:2] = [info.min, info.max]
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


@pytest.mark.parametrize("a_type", BYTE_TYPES)
@pytest.mark.parametrize("b_type", BYTE_TYPES)
@pytest.mark.parametrize("constant_b", [False, True])
@pytest.mark.parametrize("k", [1, 37, 300, 1100])
def test_matmul_integer(a_type, b_type, constant_b, k):
    rng = np.random.default_rng(k)
    a, b = _integers(rng, a_type, (2, 9, k)), _integers(rng, b_type, (k, 11))
    a_zero, b_zero = _integers(rng, a_type, (9,)), _integers(rng, b_type, (11,))
    for zeros in [(a_zero, b_zero), (a_zero[:1], b_zero[:1]), (None, None)]:
        compiled, numpy_form = both_forms(*_matmul_model(a, b, *zeros, constant_b))
        same(compiled, numpy_form)
    exact = (a.astype(np.int64) - a_zero[:, None]) @ (b.astype(np.int64) - b_zero)
    assert np.array_equal(compiled[0], (a.astype(np.int64) @ b).astype(np.int32))
    assert np.array_equal(both_forms(*_matmul_model(a, b, a_zero, b_zero, constant_b))[0][0], exact)


def test_matmul_integer_batched_b_and_saturated_operands():
    a = np.full((3, 4, 2000), 255, np.uint8)
    b = np.zeros((3, 2000, 5), np.uint8)
    same(*node_forms("MatMulInteger", [a, b, np.uint8(0), np.uint8(255)], 10))
    same(*node_forms("MatMulInteger", [a[0, 0], b[0], np.uint8(0), np.uint8(255)], 10))
