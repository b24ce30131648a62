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

import numpy as np

from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.activations import swish
from onnxflow.ops.elementwise import erf
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.registry import op
from onnxflow.traits import Traits

_ELEMENTWISE = Traits(static_shape=True, elementwise=True)

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


@op("Gelu", 1, domain=MS_DOMAIN, traits=_ELEMENTWISE)
def gelu_ms(x: np.ndarray) -> np.ndarray:
    """The exact GELU, x * Phi(x), through erf."""
    return _gelu(_with_bias(x, None)).astype(x.dtype, copy=False)


@op("BiasGelu", 1, domain=MS_DOMAIN, traits=_ELEMENTWISE)
def bias_gelu(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Gelu(A + B), B broadcast over A (a vector over A's last axis, as fused)."""
    return _gelu(_with_bias(a, b)).astype(a.dtype, copy=False)


@op("FastGelu", 1, domain=MS_DOMAIN, traits=_ELEMENTWISE)
def fast_gelu(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """GELU's tanh approximation of X + bias (bias optional, broadcast over X)."""
    return _fast_gelu(_with_bias(x, bias)).astype(x.dtype, copy=False)


@op("QuickGelu", 1, domain=MS_DOMAIN, traits=_ELEMENTWISE)
def quick_gelu(x: np.ndarray, *, alpha: float = 1.702) -> np.ndarray:
    """x * sigmoid(alpha * x)."""
    w = x.astype(float_compute_dtype(x.dtype), copy=False)
    return swish(w, alpha=alpha).astype(x.dtype, copy=False)
