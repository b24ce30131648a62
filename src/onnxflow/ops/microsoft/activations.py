"""The GELU family onnxruntime's transformer optimizer fuses.

=========  ====  ==================================================================
operator   since  meaning
=========  ====  ==================================================================
Gelu       1     x * (1 + erf(x / sqrt(2))) / 2
BiasGelu   1     Gelu(A + B)
FastGelu   1     Gelu's tanh approximation, of X (+ bias):
                 x * (1 + tanh(x * (0.044715 * sqrt(2/pi) * x * x + sqrt(2/pi)))) / 2
QuickGelu  1     x * sigmoid(alpha * x), onnx Swish with ``alpha`` 1.702 by default
=========  ====  ==================================================================

Each computes in float32 (float64 for float64) and rounds once to the input type, in the form
onnxruntime's CPU kernels evaluate: Gelu through erf, not the normal CDF's complement that onnx
Gelu-20 uses for its negative tail. BiasAdd, BiasSplitGelu and BiasSoftmax are not here: only
onnxruntime's CUDA provider runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.activations import swish
from onnxflow.ops.elementwise import erf
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

_ELEMENTWISE = Traits(static_shape=True, elementwise=True)
#: The compiled loops (float32 computed in double, rounded once): ``_math``, or None.
_MATH = compiled.module("_math")


def _compiled(form: Callable[..., np.ndarray]) -> Traits:
    """Elementwise traits with ``form`` as the compiled form (none when ``_math`` is not
    built)."""
    return _ELEMENTWISE.replace(native=native_form(compiled.when(_MATH, form)))


def _biased(loop_name: str, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray | None:
    """``_math.<loop_name>`` of float32 x (+ a float32 bias over its last axis) in one pass;
    None for other inputs (the NumPy form then runs)."""
    if x.dtype != np.float32 or not compiled.row_vector(x, bias):
        return None
    loop = getattr(_MATH, loop_name)
    b = compiled.flat32(bias)
    return compiled.elementwise(x, lambda v, out: loop(v, b, out))


def _gelu_compiled(x: np.ndarray) -> np.ndarray:
    """Gelu's compiled form: float32 x * Phi(x) in one pass (within 1 ulp)."""
    y = _biased("gelu_f32", x, None)
    return gelu_ms(x) if y is None else y


def _bias_gelu_compiled(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """BiasGelu's compiled form: float32 A + B (B over A's last axis) and GELU in one pass."""
    y = _biased("gelu_f32", a, b)
    return bias_gelu(a, b) if y is None else y


def _fast_gelu_compiled(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """FastGelu's compiled form: float32 X (+ bias over its last axis) in one pass, as
    v / (1 + exp(-2 inner)), the same function without 1 + tanh's cancellation."""
    y = _biased("gelu_tanh_f32", x, bias)
    return fast_gelu(x, bias) if y is None else y


def _quick_gelu_compiled(x: np.ndarray, *, alpha: float = 1.702) -> np.ndarray:
    """QuickGelu's compiled form: float32 x / (1 + exp(-alpha x)) in one pass."""
    if x.dtype != np.float32:
        return quick_gelu(x, alpha=alpha)
    a = float(np.float32(alpha))
    return compiled.elementwise(x, lambda v, out: _MATH.swish_f32(v, out, a))


_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_CUBIC = 0.044715 * _SQRT_2_OVER_PI


def _with_bias(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x (+ bias) in the compute dtype (a new array when a bias is added)."""
    w = x.astype(float_compute_dtype(x.dtype), copy=False)
    return w if bias is None else w + bias.astype(w.dtype, copy=False)


def _gelu(w: np.ndarray) -> np.ndarray:
    """w * (1 + erf(w / sqrt(2))) / 2, for w in its compute dtype."""
    c = w.dtype.type
    return w * c(0.5) * (c(1) + erf(w * c(_SQRT_HALF)))


def _fast_gelu(w: np.ndarray) -> np.ndarray:
    """w * (1 + tanh(w * (C * w * w + B))) / 2 with B = sqrt(2/pi), C = 0.044715 * B."""
    c = w.dtype.type
    inner = w * (c(_CUBIC) * w * w + c(_SQRT_2_OVER_PI))
    return c(0.5) * w * (c(1) + np.tanh(inner))


@op("Gelu", 1, domain=MS_DOMAIN, traits=_compiled(_gelu_compiled))
def gelu_ms(x: np.ndarray) -> np.ndarray:
    """The exact GELU, x * Phi(x), through erf."""
    return _gelu(_with_bias(x, None)).astype(x.dtype, copy=False)


@op("BiasGelu", 1, domain=MS_DOMAIN, traits=_compiled(_bias_gelu_compiled))
def bias_gelu(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Gelu(A + B), B broadcast over A (a vector over A's last axis, as fused)."""
    return _gelu(_with_bias(a, b)).astype(a.dtype, copy=False)


@op("FastGelu", 1, domain=MS_DOMAIN, traits=_compiled(_fast_gelu_compiled))
def fast_gelu(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """GELU's tanh approximation of X + bias (bias optional, broadcast over X)."""
    return _fast_gelu(_with_bias(x, bias)).astype(x.dtype, copy=False)


@op("QuickGelu", 1, domain=MS_DOMAIN, traits=_compiled(_quick_gelu_compiled))
def quick_gelu(x: np.ndarray, *, alpha: float = 1.702) -> np.ndarray:
    """x * sigmoid(alpha * x)."""
    w = x.astype(float_compute_dtype(x.dtype), copy=False)
    return swish(w, alpha=alpha).astype(x.dtype, copy=False)
