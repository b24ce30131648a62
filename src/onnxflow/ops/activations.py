"""Activation functions and the Softmax family.

Rectifiers   Relu LeakyRelu PRelu ThresholdedRelu Elu Selu Celu Shrink
Smooth       Sigmoid HardSigmoid HardSwish Softplus Softsign Mish Gelu Swish SwiGLU
Normalizers  Softmax LogSoftmax Hardmax

Kernels compute in the input's dtype (float16 and bfloat16 included), with constants converted
to that dtype so that NumPy promotion never widens the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import PerDtype, accumulation_dtype, clamp
from onnxflow.ops.elementwise import normal_cdf
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits, native_form

#: The compiled loops (float32 computed in double, rounded once): ``_math``, or None.
_MATH = compiled.module("_math")


def _like(result: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Return ``result`` as an array of x's dtype."""
    return np.asarray(result).astype(x.dtype, copy=False)


def _sigmoid(
    x: np.ndarray, out: np.ndarray | None = None, scratch: np.ndarray | None = None
) -> np.ndarray:
    """Return 1 / (1 + exp(-x)) in x's dtype, as exp(min(x, 0)) / (1 + exp(-|x|)), a few ulp
    off at most (measured: 3.2 in float32, 2.3 in float64).

    Given ``out`` (which may be x; ``scratch`` too, else made here), arrays of x's shape and
    dtype, the result is written to ``out`` as exp(min(x, 0)) / (exp(min(x, 0)) +
    exp(-max(x, 0))): one term of that sum is 1 and the other exp(-|x|), so the values are
    the same bit for bit (a NaN stays a NaN). That form makes no other array and converts no
    scalar, what a recurrent cell wants at every time step.
    """
    if out is None:
        e = np.exp(-np.abs(x))  # max(e, x >= 0) below is exp(min(x, 0)), without a second exp
        return np.maximum(e, x >= 0) / (x.dtype.type(1) + e)
    scratch = np.empty_like(x) if scratch is None else scratch
    zero = _ZERO[x.dtype]
    m = np.exp(np.negative(np.maximum(x, zero, out=scratch), out=scratch), out=scratch)
    n = np.exp(np.minimum(x, zero, out=out), out=out)
    return np.divide(n, np.add(n, m, out=m), out=out)


#: A 0-d zero per dtype: NumPy converts a Python or NumPy scalar operand at every call.
_ZERO = PerDtype(lambda dt: np.zeros((), dt))


def _softplus(x: np.ndarray) -> np.ndarray:
    """Return log(1 + exp(x)) in x's dtype, as max(x, 0) + log1p(exp(-|x|))."""
    return np.maximum(x, x.dtype.type(0)) + np.log1p(np.exp(-np.abs(x)))


def _exp_linear(x: np.ndarray, alpha: float, scale: float = 1.0) -> np.ndarray:
    """Return x where x > 0, else alpha * (exp(x / scale) - 1), in x's dtype."""
    c = x.dtype.type
    negative = np.minimum(x, c(0))
    if scale != 1.0:
        negative = negative / c(scale)
    return np.maximum(x, c(0)) + c(alpha) * np.expm1(negative)


# -- rectifiers -------------------------------------------------------------------------------
def _relu_over_x(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
    return _relu(x, out=x)


#: Up to this many elements, Relu calls ``np.maximum`` itself: the clip ufunc's faster loop
#: does not make up for the two calls around it (measured, float32: 128 to 4096 elements 0.6 to
#: 2.1 us against 2.3 to 3.1; at 65536, 25 us against 13).
_SMALL_RELU = 4096
#: The dtypes whose clip-then-add gives ``np.maximum``'s bits (-0.0, NaN, infinities checked).
_MAXIMUM_SAME = (np.dtype(np.float32), np.dtype(np.float64))


def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) as ``np.maximum`` gives it, through the clip ufunc (4x faster on float32); for
    floats, ``+ 0.0`` then turns the -0.0 that clip keeps into the +0.0 maximum returns."""
    if x.dtype.kind not in "fiu":  # ml_dtypes' bfloat16 and the like
        return np.maximum(x, x.dtype.type(0), out=out)
    if x.ndim and x.size <= _SMALL_RELU and x.dtype in _MAXIMUM_SAME:
        return np.maximum(x, x.dtype.type(0), out=out)
    y = np.asarray(clamp(x, x.dtype.type(0), None, out=out))  # 0-d: a scalar comes back
    if x.dtype.kind == "f":
        np.add(y, x.dtype.type(0), out=y)
    return y


def _relu_compiled(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
    """Relu's compiled form: a small float32 ``x`` in one compiled call (``_math.relu``: the
    checks, the new array and np.maximum's values), other inputs to the NumPy form."""
    y = _MATH.relu(x, None, _SMALL_RELU)  # type: ignore[union-attr]
    return _relu(x) if y is None else y


def _relu_compiled_over_x(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
    """:func:`_relu_compiled` over x's own array (x dies at this node)."""
    y = _MATH.relu(x, x, _SMALL_RELU)  # type: ignore[union-attr]
    return _relu(x, out=x) if y is None else y


@op(
    "Relu",
    *(1, 6, 13, 14),
    traits=Traits(
        fresh=True,
        in_place=_relu_over_x,
        static_shape=True,
        elementwise=True,
        selects=True,
        numpy="np.maximum({0}, 0)",
        pointwise="relu",
        native=native_form(compiled.when(_MATH, _relu_compiled), in_place=_relu_compiled_over_x),
    ),
)
def relu(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
    """Return max(x, 0)."""
    return _relu(x)


def _alpha_numpy(name: str, *attrs: tuple[str, float]) -> Callable[[NumpyCall], str]:
    """The NumPy form ``onnx_<name>(x, <attrs>...)``, each attribute given or its default."""

    def form(f: NumpyCall) -> str:
        return f"onnx_{name}({', '.join([f.ins[0], *(f.arg(a, d) for a, d in attrs)])})"

    return form


@op("LeakyRelu", 1, 6, 16, traits=Traits(numpy=_alpha_numpy("leaky_relu", ("alpha", 0.01))))
def leaky_relu(
    x: np.ndarray, *, alpha: float = 0.01, consumed_inputs: list[int] | None = None
) -> np.ndarray:
    """Return x where x >= 0, else alpha * x."""
    scaled = x * x.dtype.type(alpha)
    return _like(np.maximum(x, scaled) if alpha <= 1 else np.minimum(x, scaled), x)


@op("PRelu", 1, 6)
def prelu_legacy(
    x: np.ndarray, slope: np.ndarray, *, consumed_inputs: list[int] | None = None
) -> np.ndarray:
    """Return PRelu; a 1-D slope that does not broadcast applies per channel (axis 1)."""
    if slope.ndim == 1 and x.ndim >= 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return prelu(x, slope)


@op("PRelu", 7, 9, 16)
def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """Return x where x >= 0, else slope * x (slope broadcasts to x)."""
    zero = x.dtype.type(0)
    return _like(np.maximum(x, zero) + slope * np.minimum(x, zero), x)


@op("ThresholdedRelu", 10, 22)
def thresholded_relu(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """Return x where x > alpha, else 0."""
    return _like(np.where(x > x.dtype.type(alpha), x, 0), x)


@op("Elu", 1, 6, 22)
def elu(
    x: np.ndarray, *, alpha: float = 1.0, consumed_inputs: list[int] | None = None
) -> np.ndarray:
    """Return x where x >= 0, else alpha * (exp(x) - 1)."""
    return _like(_exp_linear(x, alpha), x)


@op("Selu", 1, 6, 22)
def selu(
    x: np.ndarray,
    *,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
    consumed_inputs: list[int] | None = None,
) -> np.ndarray:
    """Return gamma * x where x > 0, else gamma * alpha * (exp(x) - 1)."""
    return _like(x.dtype.type(gamma) * _exp_linear(x, alpha), x)


@op("Celu", 12, 28)
def celu(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """Return max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return _like(_exp_linear(x, alpha, scale=alpha), x)


@op("Shrink", 9)
def shrink(x: np.ndarray, *, bias: float = 0.0, lambd: float = 0.5) -> np.ndarray:
    """Return x - bias where x > lambd, x + bias where x < -lambd, else 0."""
    w = x.astype(np.float64) if x.dtype.kind in "iu" else x
    c = w.dtype.type
    return _like(np.where(w < c(-lambd), w + c(bias), np.where(w > c(lambd), w - c(bias), 0)), x)


# -- smooth activations -----------------------------------------------------------------------
def _sigmoid_compiled(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
    """Sigmoid's compiled form: float32 in one pass, within 1 ulp (from the checks to the new
    array in one compiled call); other dtypes in NumPy."""
    y = _MATH.sigmoid(x)
    return sigmoid(x) if y is None else y


@op(
    "Sigmoid",
    *(1, 6, 13),
    traits=Traits(
        static_shape=True,
        elementwise=True,
        native=native_form(compiled.when(_MATH, _sigmoid_compiled)),
        pointwise="sigmoid",
        numpy="onnx_sigmoid({0})",
    ),
)
def sigmoid(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
    """Return 1 / (1 + exp(-x))."""
    return _like(_sigmoid(x), x)


@op(
    "HardSigmoid",
    *(1, 6, 22),
    traits=Traits(
        rounds_once=True, numpy=_alpha_numpy("hard_sigmoid", ("alpha", 0.2), ("beta", 0.5))
    ),
)
def hard_sigmoid(
    x: np.ndarray,
    *,
    alpha: float = 0.2,
    beta: float = 0.5,
    consumed_inputs: list[int] | None = None,
) -> np.ndarray:
    """Return max(0, min(1, alpha * x + beta)), float16 computed in float32 and rounded once."""
    w = x.astype(accumulation_dtype(x.dtype), copy=False)
    c = w.dtype.type
    return _like(clamp(w * c(alpha) + c(beta), c(0), c(1)), x)


@op("HardSwish", 14, 22, traits=Traits(rounds_once=True, numpy="onnx_hard_swish({0})"))
def hard_swish(x: np.ndarray) -> np.ndarray:
    """Return x * max(0, min(1, x / 6 + 0.5)), float16 computed in float32 and rounded once."""
    w = x.astype(accumulation_dtype(x.dtype), copy=False)
    c = w.dtype.type
    return _like(w * clamp(w * c(1 / 6) + c(0.5), c(0), c(1)), x)


@op("Softplus", 1, 22)
def softplus(x: np.ndarray) -> np.ndarray:
    """Return log(exp(x) + 1)."""
    return _like(_softplus(x), x)


@op("Softsign", 1, 22)
def softsign(x: np.ndarray) -> np.ndarray:
    """Return x / (1 + |x|)."""
    return _like(x / (x.dtype.type(1) + np.abs(x)), x)


@op("Mish", 18, 22)
def mish(x: np.ndarray) -> np.ndarray:
    """Return x * tanh(softplus(x))."""
    return _like(x * np.tanh(_softplus(x)), x)


def _gelu_compiled(x: np.ndarray, *, approximate: str = "none") -> np.ndarray:
    """Gelu's compiled form: float32 in one pass, within 1 ulp of x * Phi(x) (or of the tanh
    form, as x / (1 + exp(-2 inner))); other dtypes and attributes in NumPy."""
    loops = {"none": _MATH.gelu_f32, "tanh": _MATH.gelu_tanh_f32}
    if x.dtype != np.float32 or approximate not in loops:
        return gelu(x, approximate=approximate)
    return compiled.elementwise(x, lambda a, out: loops[approximate](a, None, out))


@op("Gelu", 20, traits=Traits(native=native_form(compiled.when(_MATH, _gelu_compiled))))
def gelu(x: np.ndarray, *, approximate: str = "none") -> np.ndarray:
    """Return x * Phi(x) (Phi the normal CDF), or its tanh approximation."""
    c = x.dtype.type
    if approximate == "none":
        return _like(x * normal_cdf(x).astype(x.dtype), x)
    if approximate == "tanh":
        inner = c(math.sqrt(2 / math.pi)) * (x + c(0.044715) * x * x * x)
        return _like(c(0.5) * x * (c(1) + np.tanh(inner)), x)
    raise ValueError(f"Gelu attribute approximate must be 'none' or 'tanh', found {approximate!r}")


def _swish_compiled(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """Swish's compiled form: float32 in one pass, x / (1 + exp(-alpha x)) with alpha a
    float32 taken exactly; other dtypes in NumPy."""
    if x.dtype != np.float32:
        return swish(x, alpha=alpha)
    a = float(np.float32(alpha))
    return compiled.elementwise(x, lambda v, out: _MATH.swish_f32(v, out, a))


@op("Swish", 24, traits=Traits(native=native_form(compiled.when(_MATH, _swish_compiled))))
def swish(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """Return x * sigmoid(alpha * x)."""
    return _like(x * _sigmoid(x * x.dtype.type(alpha)), x)


@op("SwiGLU", 28)
def swiglu(a: np.ndarray, b: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """Return Swish_alpha(a) * b, for a and b of one shape."""
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU inputs must have the same shape, found {a.shape} and {b.shape}")
    return _like(a * _sigmoid(a * a.dtype.type(alpha)) * b, a)


# -- softmax family ---------------------------------------------------------------------------
def _softmax(w: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(w - w.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _log_softmax(w: np.ndarray, axis: int) -> np.ndarray:
    s = w - w.max(axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis, keepdims=True))


def _hardmax(w: np.ndarray, axis: int) -> np.ndarray:
    out = np.zeros_like(w)
    np.put_along_axis(out, np.argmax(w, axis, keepdims=True), 1, axis)
    return out


Normalizer = Callable[[np.ndarray, int], np.ndarray]


def _on_axis(fn: Normalizer, x: np.ndarray, axis: int) -> np.ndarray:
    """Apply ``fn`` along ``axis`` of x (opset >= 13 semantics)."""
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for an input of rank {x.ndim}")
    if x.size == 0:
        return np.empty_like(x)
    return _like(fn(x, axis), x)


def _on_2d(fn: Normalizer, x: np.ndarray, axis: int) -> np.ndarray:
    """Apply ``fn`` to x coerced to 2-D at ``axis`` (rows: dims before axis), opset < 13."""
    if not -x.ndim <= axis <= x.ndim:
        raise ValueError(f"axis {axis} is out of range for an input of rank {x.ndim}")
    rows = math.prod(x.shape[: axis + x.ndim if axis < 0 else axis])
    flat = x.reshape(rows, x.size // rows if rows else 0)
    return _on_axis(fn, flat, 1).reshape(x.shape)


def _softmax_form(
    kernel: Callable[..., np.ndarray], log_form: bool, coerced: bool
) -> Callable[..., np.ndarray] | None:
    """The compiled form of the (log)softmax ``kernel``: float32 rows in one pass, in double
    and rounded once, the checks and the output in C too (``_math.softmax_rows``: the last
    axis, from opset 13 on, or every axis from ``axis`` on when ``coerced``, x coerced to 2-D
    before opset 13); other inputs to ``kernel``. None when ``_math`` is not built."""

    def form(x: np.ndarray, *, axis: int = 1 if coerced else -1) -> np.ndarray:
        out = _MATH.softmax_rows(x, axis, coerced, log_form)
        return kernel(x, axis=axis) if out is None else out

    name = f"{kernel.__name__}_compiled"
    form.__name__ = form.__qualname__ = name
    form.__doc__ = f"{name}: float32 rows in one pass (in double, rounded once), else NumPy."
    return compiled.when(_MATH, form)


def softmax_2d(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Return softmax over the columns of x coerced to 2-D at axis."""
    return _on_2d(_softmax, x, axis)


def softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """Return exp(x) / sum(exp(x)) along axis."""
    return _on_axis(_softmax, x, axis)


def log_softmax_2d(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Return log-softmax over the columns of x coerced to 2-D at axis."""
    return _on_2d(_log_softmax, x, axis)


def log_softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """Return x - log(sum(exp(x))) along axis."""
    return _on_axis(_log_softmax, x, axis)


def _softmax_numpy(coerced: bool) -> Callable[[NumpyCall], str]:
    """Softmax's NumPy form: over x coerced to 2-D at ``axis`` (before opset 13) or along it."""

    def form(f: NumpyCall) -> str:
        axis = f.arg("axis", 1 if coerced else -1)
        return f"onnx_softmax({f.ins[0]}, {axis}{', coerced=True' if coerced else ''})"

    return form


for _kernel, _log, _coerced, _versions, _traits in (
    (softmax_2d, False, True, (1, 11), Traits(static_shape=True, numpy=_softmax_numpy(True))),
    (softmax, False, False, (13,), Traits(static_shape=True, numpy=_softmax_numpy(False))),
    (log_softmax_2d, True, True, (1, 11), Traits()),
    (log_softmax, True, False, (13,), Traits()),
):
    _native = native_form(_softmax_form(_kernel, _log, _coerced))
    op("LogSoftmax" if _log else "Softmax", *_versions, traits=_traits.replace(native=_native))(
        _kernel
    )


@op("Hardmax", 1, 11)
def hardmax_2d(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Return one-hot of the first maximum per row of x coerced to 2-D at axis."""
    return _on_2d(_hardmax, x, axis)


@op("Hardmax", 13)
def hardmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """Return 1 at the first maximum along axis and 0 elsewhere."""
    return _on_axis(_hardmax, x, axis)
