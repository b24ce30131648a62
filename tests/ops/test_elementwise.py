"""Elementwise, activation and Softmax-family kernels: what the node suite does not pin down.

Legacy ``broadcast``/``axis`` rules of the opset < 7 binary operators, ``consumed_inputs``,
C-style integer division, Mod's sign rules, Pow's result dtype, BitShift past the bit width,
Softmax's 2-D coercion before opset 13, Clip's attribute and input forms, erf accuracy, dtype
preservation for 16-bit floats and 0-d inputs, inputs left untouched, and clear errors.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from op_testing import runner

from onnxflow.errors import OnnxflowError

F32 = np.float32
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


run = runner(opset=22)


def rand(*shape, dtype=F32):
    return RNG.uniform(-3, 3, shape).astype(dtype)


# -- legacy broadcasting (opset < 7) ----------------------------------------------------------
@pytest.mark.parametrize(
    ("b_shape", "axis", "aligned"),
    [
        ((), None, ()),
        ((1, 1), None, ()),
        ((5,), None, (5,)),
        ((4, 5), None, (4, 5)),
        ((3, 4), 1, (3, 4, 1)),
        ((2,), 0, (2, 1, 1, 1)),
        ((3,), -3, (3, 1, 1)),
    ],
)
def test_legacy_broadcast_aligns_b_at_axis(b_shape, axis, aligned):
    a, b = rand(2, 3, 4, 5), rand(*b_shape)
    attrs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    for op, ufunc in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)):
        got = run(op, [a, b], opset=6, **attrs)
        np.testing.assert_array_equal(got, ufunc(a, b.reshape(aligned)))
    np.testing.assert_allclose(
        run("Pow", [np.abs(a), b], opset=1, **attrs), np.abs(a) ** b.reshape(aligned), rtol=1e-6
    )


def test_legacy_broadcast_zero_requires_equal_shapes():
    a = rand(2, 3)
    np.testing.assert_array_equal(run("Add", [a, a], opset=6), a + a)
    with pytest.raises(OnnxflowError, match=r"same shape when broadcast=0.*\(2, 3\) and \(3,\)"):
        run("Add", [a, rand(3)], opset=6)


def test_legacy_broadcast_rejects_misaligned_b():
    with pytest.raises(OnnxflowError, match="cannot broadcast B of shape"):
        run("Mul", [rand(2, 3, 4), rand(4)], opset=6, broadcast=1, axis=1)


def test_legacy_logic_and_comparison_take_broadcast_and_axis():
    a, b = RNG.integers(0, 3, (2, 3)).astype(np.int32), np.array([1, 2], np.int32)
    np.testing.assert_array_equal(
        run("Equal", [a, b], opset=1, broadcast=1, axis=0), a == b[:, None]
    )
    x, y = a > 0, np.array([True, False, True])
    np.testing.assert_array_equal(run("Xor", [x, y], opset=1, broadcast=1), x ^ y)


@pytest.mark.parametrize(
    ("op", "n_inputs"), [("Abs", 1), ("Relu", 1), ("Add", 2), ("Sum", 3), ("Max", 2)]
)
def test_consumed_inputs_is_accepted_in_version_1(op, n_inputs):
    xs = [rand(2, 3) for _ in range(n_inputs)]
    assert run(op, xs, opset=1, consumed_inputs=[0] * n_inputs).shape == (2, 3)


# -- integer arithmetic -----------------------------------------------------------------------
A_INT = np.array([7, -7, 7, -7, 0, 1, -1], np.int64)
B_INT = np.array([2, 2, -2, -2, 3, -3, 3], np.int64)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_div_truncates_toward_zero(dtype):
    got = run("Div", [A_INT.astype(dtype), B_INT.astype(dtype)], opset=14)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 0, 0, 0])


def test_mod_sign_follows_divisor_or_dividend():
    np.testing.assert_array_equal(run("Mod", [A_INT, B_INT]), [1, 1, -1, -1, 0, -2, 2])
    np.testing.assert_array_equal(run("Mod", [A_INT, B_INT], fmod=1), [1, -1, 1, -1, 0, 1, -1])
    a = np.array([5.5, -5.5, 5.5, -5.5, 1.0, -1.0], F32)
    b = np.array([2, 2, -2, -2, np.inf, np.inf], F32)
    np.testing.assert_array_equal(run("Mod", [a, b], fmod=1), [1.5, -1.5, 1.5, -1.5, 1, -1])
    np.testing.assert_array_equal(run("Mod", [a, b], opset=28), [1.5, 0.5, -0.5, -1.5, 1, np.inf])


def test_mod_rejects_bad_fmod():
    with pytest.raises(OnnxflowError, match="fmod must be 0 or 1, found 2"):
        run("Mod", [A_INT, B_INT], fmod=2)


@pytest.mark.parametrize(
    ("base", "exponent", "expected"),
    [
        (np.array([2, 3], np.int32), np.array([0.5, 2.0], F32), [1, 9]),
        (np.array([2.0, 4.0], F32), np.array([3, -1], np.int64), [8.0, 0.25]),
        (np.array([2, -2, 1], np.int64), np.array([-1, 2, -3], np.int64), [0, 4, 1]),
        (np.array([4.0, 9.0], np.float16), np.array([0.5, 0.5], np.float64), [2.0, 3.0]),
    ],
)
def test_pow_result_has_base_dtype(base, exponent, expected):
    got = run("Pow", [base, exponent], opset=15)
    assert got.dtype == base.dtype
    np.testing.assert_array_equal(got, expected)


def test_bit_shift_direction_and_oversized_shifts():
    x = np.array([1, 0x81, 0xFF], np.uint8)
    y = np.array([1, 7, 8], np.uint8)
    np.testing.assert_array_equal(run("BitShift", [x, y], direction="LEFT"), [2, 0x80, 0])
    np.testing.assert_array_equal(run("BitShift", [x, y], direction="RIGHT"), [0, 1, 0])
    neg = np.array([-8, -8, 8], np.int32)
    shift = np.array([1, 40, 40], np.int32)
    np.testing.assert_array_equal(
        run("BitShift", [neg, shift], opset=28, direction="RIGHT"), [-4, -1, 0]
    )
    with pytest.raises(OnnxflowError, match="direction must be 'LEFT' or 'RIGHT', found 'UP'"):
        run("BitShift", [x, y], direction="UP")


# -- variadic, selection ----------------------------------------------------------------------
def test_variadic_ops_broadcast_all_inputs():
    a, b, c = rand(3, 1), rand(4), rand(1, 4)
    np.testing.assert_allclose(run("Sum", [a, b, c]), a + b + c, rtol=1e-6)
    np.testing.assert_allclose(run("Mean", [a, b, c]), (a + b + c) / 3, rtol=1e-6)
    np.testing.assert_array_equal(run("Max", [a, b, c]), np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(run("Min", [a, b, c]), np.minimum(np.minimum(a, b), c))
    half = run("Mean", [a.astype(BF16), b.astype(BF16)])
    assert half.dtype == BF16


def test_max_min_propagate_nan():
    a = np.array([np.nan, 1.0, 2.0], F32)
    b = np.array([0.0, np.nan, 3.0], F32)
    np.testing.assert_array_equal(run("Max", [a, b]), [np.nan, np.nan, 3.0])
    np.testing.assert_array_equal(run("Min", [a, b]), [np.nan, np.nan, 2.0])


def test_clip_attribute_forms():
    x = np.array([-5.0, -0.5, 0.5, 5.0], F32)
    np.testing.assert_array_equal(run("Clip", [x], opset=1), x)
    np.testing.assert_array_equal(run("Clip", [x], opset=1, min=-1.0), [-1, -0.5, 0.5, 5])
    np.testing.assert_array_equal(run("Clip", [x], opset=6, max=1.0), [-5, -0.5, 0.5, 1])
    big = np.array([-1e300, 1e300], np.float64)
    np.testing.assert_array_equal(run("Clip", [big], opset=6), [-F32_MAX, F32_MAX])
    half = np.array([-np.inf, 1.0, np.inf], np.float16)
    np.testing.assert_array_equal(run("Clip", [half], opset=6), half)


F32_MAX = float(np.finfo(F32).max)


def test_clip_input_forms():
    x = np.array([-5, -1, 1, 5], np.int8)
    lo, hi = np.array(-2, np.int8), np.array(3, np.int8)
    np.testing.assert_array_equal(run("Clip", [x, None, hi], opset=13), [-5, -1, 1, 3])
    np.testing.assert_array_equal(run("Clip", [x, lo], opset=13), [-2, -1, 1, 5])
    np.testing.assert_array_equal(run("Clip", [x, hi, lo], opset=13), [-2, -2, -2, -2])
    assert run("Clip", [x, lo, hi], opset=13).dtype == np.int8


def test_where_and_equal_on_strings():
    a = np.array(["a", "bb", "c"], dtype=object)
    b = np.array(["a", "b", "c"], dtype=object)
    np.testing.assert_array_equal(run("Equal", [a, b], opset=19), [True, False, True])
    got = run("Where", [np.array([True, False, True]), a, b])
    assert got.tolist() == ["a", "b", "c"]


# -- softmax family ---------------------------------------------------------------------------
def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_before_13_coerces_to_2d(axis):
    x = rand(2, 3, 4)
    k = axis % x.ndim
    expected = _softmax(x.reshape(math.prod(x.shape[:k]), -1), 1).reshape(x.shape)
    for opset in (1, 11):
        np.testing.assert_allclose(run("Softmax", [x], opset=opset, axis=axis), expected, 1e-6)
        np.testing.assert_allclose(
            run("LogSoftmax", [x], opset=opset, axis=axis), np.log(expected), 1e-5, 1e-6
        )
    np.testing.assert_allclose(run("Softmax", [x], opset=13, axis=axis), _softmax(x, axis), 1e-6)


def test_softmax_default_axis_changes_at_13():
    x = rand(2, 3, 4)
    old = run("Softmax", [x], opset=11)
    np.testing.assert_allclose(old.reshape(2, -1).sum(1), [1, 1], rtol=1e-6)
    np.testing.assert_allclose(run("Softmax", [x], opset=13).sum(-1), np.ones((2, 3)), 1e-6)


def test_hardmax_marks_first_maximum_only():
    x = np.array([[1, 3, 3], [2, 2, 1]], F32)
    np.testing.assert_array_equal(run("Hardmax", [x], opset=13), [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(run("Hardmax", [x], opset=11, axis=0), [[0, 1, 0], [0, 0, 0]])


def test_softmax_of_empty_input_and_bad_axis():
    assert run("Softmax", [np.zeros((0, 3), F32)], opset=13).shape == (0, 3)
    assert run("Hardmax", [np.zeros((2, 0), F32)], opset=11).shape == (2, 0)
    with pytest.raises(OnnxflowError, match="axis 3 is out of range for an input of rank 2"):
        run("Softmax", [rand(2, 3)], opset=13, axis=3)


# -- accuracy ---------------------------------------------------------------------------------
def test_erf_matches_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 20001), np.logspace(-30, 0.5, 500)])
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(run("Erf", [x]), expected, rtol=1e-13, atol=0)
    np.testing.assert_allclose(run("Erf", [x.astype(F32)]), expected, rtol=1e-6, atol=1e-30)
    special = np.array([np.nan, np.inf, -np.inf, -0.0], F32)
    got = run("Erf", [special])
    np.testing.assert_array_equal(got, [np.nan, 1, -1, 0])
    assert np.signbit(got[3])


def test_float32_erf_is_within_three_ulp():
    # float32 Erf has its own lighter polynomials: hold them to 3 units in the last place of the
    # float32 result, on both sides of the 0.5 switch and up to where erf rounds to 1.
    x = np.concatenate([np.linspace(-4.5, 4.5, 90001), np.logspace(-38, 0, 2000)]).astype(F32)
    expected = np.array([math.erf(v) for v in x.astype(float)])
    got = run("Erf", [x]).astype(float)
    ulps = np.abs(got - expected) / np.spacing(np.abs(expected).astype(F32)).astype(float)
    assert ulps.max() <= 3, x[np.argmax(ulps)]


def test_gelu_is_accurate_in_the_negative_tail():
    def gelu(x):
        return [v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(float)]

    x = np.array([-2.8, -6.0, -10.0, 0.5], np.float64)
    expected = gelu(x)
    np.testing.assert_allclose(run("Gelu", [x], opset=20), expected, rtol=1e-12)
    half = x.astype(np.float16)
    np.testing.assert_allclose(run("Gelu", [half], opset=20), gelu(half), rtol=1e-3, atol=1e-7)
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    tanh = run("Gelu", [x], opset=20, approximate="tanh")
    np.testing.assert_allclose(tanh, 0.5 * x * (1 + np.tanh(inner)), rtol=1e-12)
    with pytest.raises(OnnxflowError, match="approximate must be 'none' or 'tanh'"):
        run("Gelu", [x], opset=20, approximate="fast")


def test_sigmoid_does_not_overflow_and_keeps_tails():
    x = np.array([-800.0, -50.0, 0.0, 50.0, 800.0])
    with np.errstate(over="raise", invalid="raise"):
        got = run("Sigmoid", [x])
    np.testing.assert_allclose(got, [0.0, math.exp(-50), 0.5, 1.0, 1.0], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_sigmoid_into_buffers_gives_the_same_bits(dtype) -> None:
    """The form an LSTM runs every step (written to ``out``, which may be x, through
    ``scratch``) computes the kernel's values bit for bit, overflows nowhere either."""
    from onnxflow.ops.activations import _sigmoid

    x = (np.random.default_rng(5).standard_normal((3, 400)) * 40).astype(dtype)
    x[0, :5] = [-np.inf, -0.0, 0.0, np.inf, 1e-30]
    want = _sigmoid(x)
    with np.errstate(over="raise", invalid="raise"):
        into = _sigmoid(x, np.empty_like(x), np.empty_like(x))
        y = x.copy()
        _sigmoid(y, out=y)
    for got in (into, y):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_softplus_and_mish_are_stable_for_large_inputs():
    x = np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0])
    with np.errstate(over="raise", invalid="raise"):
        soft = run("Softplus", [x])
        mish = run("Mish", [x])
    np.testing.assert_allclose(soft, [0.0, math.exp(-40), math.log(2), 40.0, 1000.0], rtol=1e-12)
    np.testing.assert_allclose(mish, x * np.tanh(soft), rtol=1e-12)


@pytest.mark.parametrize("alpha", [0.01, -0.5, 1.0, 3.0])
def test_leaky_relu_any_alpha(alpha):
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, np.nan], F32)
    expected = np.where(x < 0, x * F32(alpha), x)
    np.testing.assert_array_equal(run("LeakyRelu", [x], alpha=alpha), expected)


# -- dtypes and inputs ------------------------------------------------------------------------
ACTIVATIONS = [
    ("Celu", 22), ("Elu", 22), ("Gelu", 20), ("HardSigmoid", 22), ("HardSwish", 22),
    ("LeakyRelu", 22), ("Mish", 22), ("Relu", 22), ("Selu", 22), ("Shrink", 22),
    ("Sigmoid", 22), ("Softplus", 22), ("Softsign", 22), ("Swish", 24),
    ("ThresholdedRelu", 22), ("Softmax", 22), ("LogSoftmax", 22), ("Hardmax", 22),
    ("Tanh", 22), ("Erf", 22), ("Exp", 22), ("Round", 22),
]  # fmt: skip


@pytest.mark.parametrize(("op", "opset"), ACTIVATIONS)
@pytest.mark.parametrize("dtype", [np.float16, BF16, F32, np.float64])
def test_activations_keep_dtype_and_inputs(op, opset, dtype):
    x = rand(2, 5, dtype=dtype)
    before = x.copy()
    got = run(op, [x], opset=opset)
    assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(x, before)
    reference = run(op, [x.astype(np.float64)], opset=opset)
    np.testing.assert_allclose(got.astype(np.float64), reference, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sigmoid", "Erf", "Relu", "Softplus", "IsNaN"])
def test_zero_d_input_gives_zero_d_array(op):
    got = run(op, [np.array(-0.25, F32)])
    assert isinstance(got, np.ndarray) and got.shape == ()


def test_binary_zero_d_inputs_give_arrays():
    for op in ("Add", "Div", "Pow", "Equal", "Max", "Where"):
        ins = [np.array(1.5, F32), np.array(2.0, F32)]
        if op == "Where":
            ins = [np.array(True), *ins]
        got = run(op, ins)
        assert isinstance(got, np.ndarray) and got.shape == ()


def test_binary_kernels_leave_inputs_untouched():
    a, b = rand(3, 4), rand(4)
    before = a.copy(), b.copy()
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "PRelu"):
        run(op, [a, b])
    run("Clip", [a, np.array(-1, F32), np.array(1, F32)])
    np.testing.assert_array_equal(a, before[0])
    np.testing.assert_array_equal(b, before[1])


def test_prelu_legacy_slope_applies_per_channel():
    x, slope = rand(2, 3, 4), np.array([0.1, 0.2, 0.3], F32)
    expected = np.where(x < 0, x * slope[:, None], x)
    np.testing.assert_allclose(run("PRelu", [x, slope], opset=6), expected, rtol=1e-6)


def test_is_inf_detects_requested_signs():
    x = np.array([-np.inf, np.inf, np.nan, 1.0], F32)
    np.testing.assert_array_equal(run("IsInf", [x], opset=20), [1, 1, 0, 0])
    np.testing.assert_array_equal(run("IsInf", [x], detect_negative=0), [0, 1, 0, 0])
    np.testing.assert_array_equal(run("IsInf", [x], detect_positive=0), [1, 0, 0, 0])
    np.testing.assert_array_equal(
        run("IsInf", [x], detect_positive=0, detect_negative=0), [0, 0, 0, 0]
    )


def test_swiglu_gates_b_and_requires_equal_shapes():
    a, b = rand(2, 4), rand(2, 4)
    expected = a / (1 + np.exp(-1.5 * a)) * b
    np.testing.assert_allclose(run("SwiGLU", [a, b], opset=28, alpha=1.5), expected, 1e-5)
    with pytest.raises(OnnxflowError, match=r"same shape, found \(2, 4\) and \(4,\)"):
        run("SwiGLU", [a, rand(4)], opset=28)


_SPECIAL = [-0.0, 0.0, np.nan, -np.inf, np.inf, -1.5, 2.5, 7.0, -1e-40, 1e-40]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int64])
@pytest.mark.parametrize("repeats", [3, 1000])  # small tensors (np.maximum) and large (clip)
def test_relu_and_clip_through_the_clip_ufunc_keep_numpys_bits(dtype: type, repeats: int) -> None:
    """Relu equals np.maximum(x, 0) (with +0.0 for -0.0) and Clip equals np.clip (what
    onnx.reference computes) bit for bit, signed zeros and NaN included, whatever path the
    kernels take inside."""
    from onnxflow.ops._common import clamp

    if np.issubdtype(dtype, np.floating):
        with np.errstate(over="ignore"):
            x = np.array(_SPECIAL * repeats, dtype)
    else:
        info = np.iinfo(dtype)
        x = np.array([info.min, -1, 0, 1, 5, info.max] * repeats, dtype)
    x = x.reshape(repeats, -1)
    relu = np.maximum(x, dtype(0))
    if np.issubdtype(dtype, np.floating):
        relu += dtype(0)  # +0.0 for -0.0 (IEEE maximum), where NumPy's float16 loop keeps -0.0
    np.testing.assert_array_equal(run("Relu", [x], 14).view(np.uint8), relu.view(np.uint8))
    for lo, hi in [(0, 6), (-1, None), (None, 2), (3, 2)]:
        bounds = [None if b is None else np.array(b, dtype) for b in (lo, hi)]
        want = np.clip(x, *bounds)
        got = run("Clip", [x, *bounds], 13)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        np.testing.assert_array_equal(clamp(x, *bounds).view(np.uint8), want.view(np.uint8))


# -- integer division: the spec leaves division by zero undefined; onnxflow raises ----------


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
@pytest.mark.parametrize("op, attrs", [("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1})])
def test_integer_division_by_zero_is_an_error_naming_the_node(dtype, op, attrs):
    a, b = np.array([7, 1], dtype), np.array([2, 0], dtype)
    with pytest.raises(OnnxflowError, match=f"{op} .*integer {op} by zero"):
        run(op, [a, b], **attrs)


def test_integer_minimum_divided_by_minus_one_overflows():
    low = np.iinfo(np.int32).min
    with pytest.raises(OnnxflowError, match="type's minimum divided by -1"):
        run("Div", [np.array([low], np.int32), np.array([-1], np.int32)])
    assert run("Mod", [np.array([low], np.int32), np.array([-1], np.int32)]).tolist() == [0]


def test_integer_division_without_zero_truncates_toward_zero():
    a, b = np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)
    assert run("Div", [a, b]).tolist() == [3, -3, -3, 3]
