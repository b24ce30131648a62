"""Compiled float math against the NumPy forms and against float64 rounded once.

The compiled float32 loops compute in double and round once, so each is held within a stated
ulp bound of float64 math rounded once (the math written out here with NumPy and SciPy in
float64). Against the NumPy form, which computes in float32, the bound is that form's own error:
an ulp count where it is relative, an absolute one (times float32's epsilon) where the NumPy
form cancels (1 + erf near -1, a normalized value near 0).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from native_forms import node_forms, ulp_distance
from onnx import helper
from scipy.special import expit, ndtr

import onnxflow

MS = "com.microsoft"

FORMS_TESTED = [
    ("", "Erf"),
    ("", "Relu"),
    ("", "Sigmoid"),
    ("", "Swish"),
    ("", "Gelu"),
    ("", "Softmax"),
    ("", "LogSoftmax"),
    ("", "LayerNormalization"),
    ("", "RMSNormalization"),
    ("", "SimplifiedLayerNormalization"),
    ("com.microsoft", "Gelu"),
    ("com.microsoft", "BiasGelu"),
    ("com.microsoft", "FastGelu"),
    ("com.microsoft", "QuickGelu"),
    ("com.microsoft", "FusedGemm"),
    ("com.microsoft", "SkipLayerNormalization"),
    ("com.microsoft", "SkipSimplifiedLayerNormalization"),
    ("", "Pow"),
]

EPS32 = float(np.finfo(np.float32).eps)

#: The compiled erf is float64 erf rounded once: within 1 ulp of the exact value rounded.
ERF_ULP = 1
#: How far the two forms may differ: the NumPy form's own error (measured: 3 ulp in float32, 83
#: in float64, where its polynomials are sized for 1e-16 relative error) plus the compiled one's.
ERF_FORMS_ULP = {np.float32: 4, np.float64: 100}
#: sigmoid, swish, both GELUs: double math (polynomial errors below 3e-12) rounded once.
UNARY_ULP = 1
#: The NumPy form's float32 error (measured: sigmoid 3.2 ulp), plus the compiled form's 1.
UNARY_FORMS_ULP = {"Sigmoid": 4}
#: Swish and QuickGelu in NumPy round alpha * x to float32 before the exponential: that error
#: (half an ulp of alpha * x) grows the result's relative error by up to |alpha * x| ulp.
SWISH_FORMS_ULP = 4
#: Where the NumPy form computes 1 + erf(x / sqrt 2) or 1 + tanh(u) in float32, it cancels for
#: negative x: the two forms then differ by up to a few float32 epsilons times |x|.
GELU_FORMS_ABS = 8
#: Softmax and log-softmax in double rounded once: within 1 ulp of float64 math rounded.
SOFTMAX_ULP = 1
#: The NumPy form's float32 sums and subtraction: a few epsilons of the row's largest value.
SOFTMAX_FORMS_ABS = 8
#: Layer/RMS norm in double rounded once. The statistics are summed in another order than
#: NumPy's float64 reference, so 1 ulp of the result, plus an absolute 1e-12 of scale for
#: results that cancel to near 0 (normalized * gamma + beta).
NORM_ULP = 1
#: The NumPy form's float32 statistics and its rounding of normalized values before scaling:
#: a few float32 epsilons of the output's scale (|normalized| * |gamma| + |beta|).
NORM_FORMS_ABS = 16


def _values(n: int = 20000, seed: int = 1) -> np.ndarray:
    """Normal and wide uniform float32 values, tiny ones, and the special values."""
    rng = np.random.default_rng(seed)
    tiny = np.geomspace(1e-30, 1e-3, 200)
    special = [0.0, -0.0, 0.5, -0.5, 4.0, 10.0, -10.0, 1e-45, -1e-45, np.inf, -np.inf, np.nan]
    parts = [rng.standard_normal(n) * 3, rng.uniform(-30, 30, n), tiny, -tiny, special]
    return np.concatenate(parts).astype(np.float32)


def _within_ulp(got: np.ndarray, exact: np.ndarray, bound: int) -> None:
    """got is within ``bound`` ulp of ``exact`` (float64) rounded to got's dtype, NaN where it
    is NaN."""
    want = exact.astype(got.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert ulp_distance(got, want).max() <= bound


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf(dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [rng.standard_normal(5000) * 3, [0.0, -0.0, 0.5, -0.5, 4.0, 10.0, -10.0, np.inf, -np.inf]]
    ).astype(dtype)
    (compiled,), (numpy_form,) = node_forms("Erf", [x], 13)
    exact = np.array([math.erf(float(v)) for v in x]).astype(dtype)
    assert compiled.dtype == dtype and compiled.shape == x.shape
    assert ulp_distance(compiled, exact).max() <= ERF_ULP
    assert ulp_distance(compiled, numpy_form).max() <= ERF_FORMS_ULP[dtype]
    assert np.array_equal(np.signbit(compiled[x == 0]), np.signbit(x[x == 0]))


def test_erf_nan_and_other_dtypes():
    x = np.array([np.nan, 1.0, -2.0], np.float16)
    (compiled,), (numpy_form,) = node_forms("Erf", [x], 13)
    assert np.isnan(compiled[0]) and np.array_equal(compiled[1:], numpy_form[1:])


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    """GELU's tanh form in float64, as v / (1 + exp(-2u)) (no cancellation)."""
    u = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
    with np.errstate(all="ignore"):
        return v / (1 + np.exp(-2 * u))


def _times(fn):
    def product(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return v * fn(v)

    return product


#: QuickGelu's default alpha, 1.702, as the float32 attribute holds it.
QUICK_ALPHA = float(np.float32(1.702))

#: (op, opset, domain, attributes, float64 math, NumPy-form bound: (ulp, ulp per unit of |x|),
#: or None for GELU_FORMS_ABS)
UNARY = [
    ("Sigmoid", 13, "", {}, expit, (UNARY_FORMS_ULP["Sigmoid"], 0)),
    ("Swish", 24, "", {"alpha": 1.5}, _times(lambda v: expit(1.5 * v)), (SWISH_FORMS_ULP, 1.5)),
    ("Gelu", 20, "", {}, _times(ndtr), None),
    ("Gelu", 20, "", {"approximate": "tanh"}, _gelu_tanh, None),
    ("Gelu", 1, MS, {}, _times(ndtr), None),
    ("FastGelu", 1, MS, {}, _gelu_tanh, None),
    ("QuickGelu", 1, MS, {}, _times(lambda v: expit(QUICK_ALPHA * v)), (SWISH_FORMS_ULP, 1.702)),
]


@pytest.mark.parametrize(("op", "opset", "domain", "attrs", "exact", "forms_ulp"), UNARY)
def test_unary(op, opset, domain, attrs, exact, forms_ulp):
    x = _values()
    (compiled,), (numpy_form,) = node_forms(op, [x], opset, domain=domain, **attrs)
    _within_ulp(compiled, exact(x.astype(np.float64)), UNARY_ULP)
    finite = np.isfinite(x)
    if forms_ulp is not None:
        bound = forms_ulp[0] + forms_ulp[1] * np.abs(x[finite])
        assert (ulp_distance(compiled[finite], numpy_form[finite]) <= bound).all()
    else:
        gap = np.abs(compiled[finite].astype(np.float64) - numpy_form[finite])
        assert (gap <= GELU_FORMS_ABS * EPS32 * np.maximum(1, np.abs(x[finite]))).all()
    assert np.array_equal(np.isnan(compiled), np.isnan(numpy_form))
    zeros = x == 0
    assert np.array_equal(np.signbit(compiled[zeros]), np.signbit(numpy_form[zeros]))


@pytest.mark.parametrize(("op", "exact"), [("BiasGelu", _times(ndtr)), ("FastGelu", _gelu_tanh)])
def test_bias_then_activation(op, exact):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 5, 96)) * 3).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    (compiled,), (numpy_form,) = node_forms(op, [x, bias], 1, domain=MS)
    v = (x + bias).astype(np.float64)  # A + B is a float32 tensor
    _within_ulp(compiled, exact(v), UNARY_ULP)
    gap = np.abs(compiled.astype(np.float64) - numpy_form)
    assert (gap <= GELU_FORMS_ABS * EPS32 * np.maximum(1, np.abs(v))).all()


def test_unary_other_dtypes_run_numpy():
    x = np.array([np.nan, 1.0, -2.0, 0.25], np.float64)
    for op, opset, domain in [("Sigmoid", 13, ""), ("Gelu", 20, ""), ("BiasGelu", 1, MS)]:
        inputs = [x, x] if op == "BiasGelu" else [x]
        (compiled,), (numpy_form,) = node_forms(op, inputs, opset, domain=domain)
        assert np.array_equal(compiled, numpy_form, equal_nan=True)


def _softmax64(x: np.ndarray, log_form: bool) -> np.ndarray:
    s = x.astype(np.float64) - x.max(-1, keepdims=True)
    total = np.exp(s).sum(-1, keepdims=True)
    return s - np.log(total) if log_form else np.exp(s) / total


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("opset", "axis"), [(13, -1), (11, 1), (11, 2), (1, 1)])
def test_softmax(op, opset, axis):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 7, 77)) * 6).astype(np.float32)
    x[0, 0, :] = -np.inf
    x[0, 1, 3] = np.inf
    x[0, 2, 5] = np.nan
    x[1, 0, :] = 0
    (compiled,), (numpy_form,) = node_forms(op, [x], opset, axis=axis)
    rows = x.reshape(math.prod(x.shape[:axis]), -1)  # the rows the opset normalizes
    with np.errstate(invalid="ignore"):
        exact = _softmax64(rows, op == "LogSoftmax").reshape(x.shape)
    _within_ulp(compiled, exact, SOFTMAX_ULP)
    assert np.array_equal(np.isnan(compiled), np.isnan(numpy_form))
    ok = ~np.isnan(compiled)
    scale = np.maximum(1, np.abs(rows)).max(-1, keepdims=True) * np.ones_like(rows)
    gap = np.abs(compiled[ok].astype(np.float64) - numpy_form[ok])
    assert (gap <= SOFTMAX_FORMS_ABS * EPS32 * scale.reshape(x.shape)[ok]).all()


def test_softmax_other_axes_run_numpy():
    x = np.random.default_rng(4).standard_normal((3, 4, 5)).astype(np.float32)
    for op in ("Softmax", "LogSoftmax"):
        (compiled,), (numpy_form,) = node_forms(op, [x], 13, axis=1)
        assert np.array_equal(compiled, numpy_form)


def _norm64(s: np.ndarray, axes: tuple[int, ...], epsilon: float, rms: bool):
    """(normalized, mean, inverse deviation) of float64 s over ``axes``."""
    mean = 0 if rms else s.mean(axes, keepdims=True)
    inv = 1 / np.sqrt(((s - mean) ** 2).mean(axes, keepdims=True) + np.float32(epsilon))
    return (s - mean) * inv, mean, inv


def _close_norm(got: np.ndarray, numpy_form: np.ndarray, exact: np.ndarray, scale) -> None:
    """got within NORM_ULP of ``exact`` (or 1e-12 of ``scale``), and NORM_FORMS_ABS float32
    epsilons of ``scale`` from the NumPy form."""
    want = exact.astype(np.float32)
    near = np.abs(got.astype(np.float64) - exact) <= 1e-12 * scale
    assert ((ulp_distance(got, want) <= NORM_ULP) | near).all()
    assert (np.abs(got.astype(np.float64) - numpy_form) <= NORM_FORMS_ABS * EPS32 * scale).all()


def _params(rng, *shape):
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(axis):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 6, 40)) * 3 + 2).astype(np.float32)
    gamma, beta, _ = _params(rng, *x.shape[axis:])
    compiled, numpy_form = node_forms("LayerNormalization", [x, gamma, beta], 17, 3, axis=axis)
    axes = tuple(range(axis % 3, 3))
    normalized, mean, inv = _norm64(x.astype(np.float64), axes, 1e-5, False)
    scale = np.abs(normalized * gamma) + np.abs(beta)
    _close_norm(compiled[0], numpy_form[0], normalized * gamma + beta, scale)
    _close_norm(compiled[1], numpy_form[1], mean, np.abs(x).max())
    _close_norm(compiled[2], numpy_form[2], inv, inv)


RMS_OPS = [("RMSNormalization", 23, 1), ("SimplifiedLayerNormalization", 1, 2)]


@pytest.mark.parametrize(("op", "opset", "n_out"), RMS_OPS)
def test_rms_normalization(op, opset, n_out):
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 4, 48)) * 3).astype(np.float32)
    gamma = _params(rng, 48)[0]
    compiled, numpy_form = node_forms(op, [x, gamma], opset, n_out)
    normalized, _, inv = _norm64(x.astype(np.float64), (2,), 1e-5, True)
    _close_norm(compiled[0], numpy_form[0], normalized * gamma, np.abs(normalized * gamma))
    if n_out == 2:
        _close_norm(compiled[1], numpy_form[1], inv, inv)


@pytest.mark.parametrize("skip_shape", [(2, 5, 64), (1, 5, 64), (5, 64)])
@pytest.mark.parametrize("rms", [False, True])
def test_skip_layer_normalization(skip_shape, rms):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 5, 64)) * 3 + 1).astype(np.float32)
    skip = rng.standard_normal(skip_shape).astype(np.float32)
    gamma, beta, bias = _params(rng, 64)
    op = "SkipSimplifiedLayerNormalization" if rms else "SkipLayerNormalization"
    inputs = [x, skip, gamma, bias] if rms else [x, skip, gamma, beta, bias]
    compiled, numpy_form = node_forms(op, inputs, 1, 4, domain=MS)
    s = x.astype(np.float64) + skip + bias
    normalized, mean, inv = _norm64(s, (2,), 1e-12, rms)
    shift = 0 if rms else beta
    terms = np.abs(x) + np.abs(skip) + np.abs(bias)  # the NumPy form's float32 sum errs by these
    scale = (np.abs(normalized) + terms * inv) * np.abs(gamma) + np.abs(shift)
    _close_norm(compiled[0], numpy_form[0], normalized * gamma + shift, scale)
    _close_norm(compiled[1], numpy_form[1], mean * np.ones((2, 5, 1)), np.abs(s).max())
    _close_norm(compiled[2], numpy_form[2], inv, inv)
    _close_norm(compiled[3], numpy_form[3], s, terms)


def test_norm_other_inputs_run_numpy():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 8))
    gamma, beta, _ = (p.astype(np.float64) for p in _params(rng, 8))
    compiled, numpy_form = node_forms("LayerNormalization", [x, gamma, beta], 17, 3)
    for c, n in zip(compiled, numpy_form, strict=True):
        assert np.array_equal(c, n)


@pytest.mark.parametrize("activation", ["Sigmoid", "Relu"])
def test_fused_gemm_activation(activation):
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((6, 40), (40, 32)))
    c = rng.standard_normal(32).astype(np.float32)
    (compiled,), (numpy_form,) = node_forms(
        "FusedGemm", [a, b, c], 1, domain=MS, activation=activation
    )
    if activation == "Relu":  # no compiled form: the NumPy activation, bit for bit
        assert np.array_equal(compiled, numpy_form)
        return
    product = a @ b + c  # float32, as Gemm rounds it before the activation
    _within_ulp(compiled, expit(product.astype(np.float64)), UNARY_ULP)
    assert ulp_distance(compiled, numpy_form).max() <= UNARY_FORMS_ULP["Sigmoid"]


# -- the norms' call in C (_math.norm_rows) against the loop called from Python -----------------
def _norm_by_buffers(x, gamma, beta, axis, epsilon, rms):
    """What LayerNormalization's compiled form computed before its glue moved to C: the row
    loop (``_math.norm_f32``) on contiguous buffers, outputs allocated here."""
    from onnxflow.native import module

    first = axis % x.ndim
    stat_shape = x.shape[:first] + (1,) * (x.ndim - first)
    y, mean, inv = (np.empty(s, np.float32) for s in (x.shape, stat_shape, stat_shape))
    flat = [None if v is None else np.ascontiguousarray(v).reshape(-1) for v in (x, gamma, beta)]
    module("_math").norm_f32(
        flat[0], None, None, flat[1], flat[2], y.reshape(-1), mean.reshape(-1),
        inv.reshape(-1), None, float(np.float32(epsilon)), rms,
    )  # fmt: skip
    return y, mean, inv


@pytest.mark.parametrize("axis", [-1, -2, 0, 2])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("strided", [False, True])
def test_norm_rows_is_the_row_loop(axis, rms, with_beta, strided):
    from onnxflow.native import module

    rng = np.random.default_rng(9)
    x = (rng.standard_normal((3, 5, 16)) * 2 + 1).astype(np.float32)
    if strided:
        x = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)
    gamma, beta, _ = _params(rng, *x.shape[axis:])
    beta = beta if with_beta else None
    got = module("_math").norm_rows(x, gamma, beta, axis, 1e-5, rms)
    want = _norm_by_buffers(x, gamma, beta, axis, 1e-5, rms)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == np.float32
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32))


def test_norm_rows_leaves_other_inputs_to_numpy():
    from onnxflow.native import module

    norm_rows = module("_math").norm_rows
    x = np.ones((2, 8), np.float32)
    g = np.ones(8, np.float32)
    assert norm_rows(x, g, None, -1, 1e-5, False) is not None
    for args in (
        (x.astype(np.float64), g, None, -1),  # x not float32
        (x.astype(">f4"), g, None, -1),  # swapped bytes
        (x, g.astype(np.float64), None, -1),  # gamma not float32
        (x, g, g.astype(np.float64), -1),  # beta not float32
        (x, np.ones(4, np.float32), None, -1),  # gamma not shaped as the rows
        (x, g, np.ones((1, 8), np.float32), -1),  # beta neither
        (x, np.ones((2, 8), np.float32), None, -1),
        (x, g, None, 2),  # axis out of range
        (x, g, None, -3),
        (np.ones((0, 8), np.float32), g, None, -1),  # empty
        (x, None, None, -1),  # no gamma
        (x.tolist(), g, None, -1),  # not an array
    ):
        assert norm_rows(*args, 1e-5, False) is None, args


# -- Softmax's call in C (_math.softmax_rows) against the loop called from Python --------------
@pytest.mark.parametrize("log_form", [False, True])
@pytest.mark.parametrize(
    ("shape", "axis", "coerced", "h"),
    [
        ((1, 4, 1, 9), -1, False, 9),  # a decoder step's scores
        ((2, 3, 5), 2, False, 5),
        ((7,), 0, False, 7),
        ((2, 3, 5), 1, True, 15),  # before opset 13: every axis from axis on
        ((2, 3, 5), -2, True, 15),
        ((2, 3, 5), 0, True, 30),
        ((2, 3, 5), 3, True, 1),
    ],
)
def test_softmax_rows_is_the_row_loop(shape, axis, coerced, h, log_form):
    from onnxflow.native import module

    math_ = module("_math")
    rng = np.random.default_rng(len(shape) + h)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    for v in (x, np.asfortranarray(x)):
        want = np.empty(v.shape, np.float32)
        math_.softmax_f32(np.ascontiguousarray(v).reshape(-1), want.reshape(-1), h, log_form)
        got = math_.softmax_rows(v, axis, coerced, log_form)
        assert got.shape == v.shape and got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_softmax_rows_leaves_other_inputs_to_numpy():
    from onnxflow.native import module

    softmax_rows = module("_math").softmax_rows
    x = np.ones((2, 3), np.float32)
    for args in (
        (x, 0, False),  # not the last axis (opset 13 on)
        (x, -2, False),
        (x, 3, True),  # beyond the rank
        (x, -3, True),
        (x.astype(np.float64), -1, False),
        (x.astype(">f4"), -1, False),
        (np.ones((0, 3), np.float32), -1, False),  # empty
        (np.float32(1.0), -1, False),  # not an array
        (np.ones((), np.float32), -1, False),  # rank 0
        (x.tolist(), -1, False),
    ):
        assert softmax_rows(*args, False) is None, args


# -- Pow by a small integer: one C pass, the NumPy form's bits ----------------------------------
def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and np.array_equal(nan, np.isnan(b))
        and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))
    )


@pytest.mark.parametrize("n", [-4, -3, -2, 3, 4, 3.0, -2.0])
@pytest.mark.parametrize("exponent_dtype", [np.float32, np.int64])
def test_pow_by_a_small_integer_is_the_numpy_form(n, exponent_dtype):
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((2, 3, 50)) * 3).astype(np.float32)
    x.reshape(-1)[:9] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3e38, 1e-45]
    for y in (np.array(n, exponent_dtype), np.array([n], exponent_dtype)):
        (compiled,), (numpy_form,) = node_forms("Pow", [x, y], 15)
        assert _bits_equal(compiled, numpy_form)
    (compiled,), (numpy_form,) = node_forms("Pow", [x.T, np.array(n, exponent_dtype)], 15)
    assert _bits_equal(compiled, numpy_form)  # a strided x


def test_pow_others_run_numpy():
    from onnxflow.native import module

    x = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    small_power = module("_math").small_power
    assert small_power(x, np.array(3, np.int64)) is not None
    for base, y in (
        (x, np.array(2.0, np.float32)),  # 2: np.power squares exactly
        (x, np.array(2.5, np.float32)),
        (x, np.array(np.nan, np.float32)),
        (x, np.full(4, 3.0, np.float32)),  # not one element
        (x, np.ones((1, 1, 1), np.float32) * 3),  # of higher rank: the result's shape
        (x, np.array(3 + 0j)),  # neither an integer nor a float
        (x.astype(np.float64), np.array(3.0)),  # not float32
        (x.astype(">f4"), np.array(3.0)),
        (x, 3.0),  # not an array
    ):
        assert small_power(base, y) is None
        if isinstance(y, np.ndarray) and y.dtype.kind != "c" and base.dtype.isnative:
            (compiled,), (numpy_form,) = node_forms("Pow", [base, y], 15)
            assert np.array_equal(compiled, numpy_form, equal_nan=True)
            assert compiled.shape == numpy_form.shape


def test_sigmoid_in_one_call_gives_the_loops_bits():
    """_math.sigmoid (Sigmoid's compiled form in one call: checks, new array, loop) gives
    sigmoid_f32's bits for every shape and layout, a new array of x's shape; None for what
    it does not take (the NumPy form then runs)."""
    from onnxflow.native import _math

    rng = np.random.default_rng(21)
    base = (rng.standard_normal((4, 6, 5)) * 8).astype(np.float32)
    for x in [
        base,
        base[:, ::2],
        base[0, 0, 0:1],
        np.full((), 3.5, np.float32),
        base[:0],
        base.transpose(2, 0, 1),
    ]:
        want = np.empty(x.size, np.float32)
        _math.sigmoid_f32(np.ascontiguousarray(x).reshape(-1), want)
        got = _math.sigmoid(x)
        assert got.shape == x.shape and got.dtype == np.float32 and got.flags.c_contiguous
        assert got.tobytes() == want.tobytes() and not np.shares_memory(got, x)
    for other in [base.astype(np.float64), base.astype(">f4"), [1.0, 2.0], 3.0]:
        assert _math.sigmoid(other) is None


def test_relu_in_one_call_is_numpys_maximum():
    """_math.relu (Relu's compiled form for small float32 tensors: checks, array and pass in
    one call) gives np.maximum(x, 0)'s bits (NaN payloads kept, -0.0 made +0.0), in a new
    array or in place; None (the NumPy form then runs) past its limit or for other inputs; a
    node's two forms agree bit for bit, in place too."""
    from onnxflow.native import _math

    special = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 3, -3])
    base = np.concatenate([special, np.random.default_rng(4).standard_normal(50)])
    base = base.astype(np.float32).reshape(2, 30)
    for x in [base, base[:, ::3], base[:1, :1], np.full((), -2.5, np.float32), base[:0]]:
        want = np.maximum(x, np.float32(0))
        got = _math.relu(x, None, 4096)
        assert got.shape == x.shape and got.tobytes() == want.tobytes()
        assert not np.shares_memory(got, x)
    own = base.copy()
    assert _math.relu(own, own, 4096) is own and own.tobytes() == np.maximum(base, 0).tobytes()
    for args in [
        (base, None, 59),
        (base.astype(np.float64), None, 4096),
        (base[:, ::3], base[:, ::3], 4096),
        (base, base.copy(), 4096),
        ([1.0, -1.0], None, 4096),
    ]:
        assert _math.relu(*args) is None
    (compiled,), (numpy_form,) = node_forms("Relu", [base], 14)
    assert compiled.tobytes() == numpy_form.tobytes()
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "neg_relu",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 30])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    sess = onnxflow.InferenceSession(model.SerializeToString())
    assert "_relu_compiled_over_x" in sess.source()  # Neg's array dies at Relu: in place
    got = sess.run(None, {"x": base})[0]
    assert got.tobytes() == np.maximum(-base, 0).tobytes()
