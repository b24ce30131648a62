"""Kernel of the node the QDQ pass makes of a QuantizeLinear -> DequantizeLinear pair
(:mod:`onnxflow.compile.passes.fuse_qdq`): ``FakeQuantize``. In a module of its own, so that a
model with no such pair does not import the quantization kernels it builds on."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxflow.ops import integer_gemm as ig
from onnxflow.ops._common import clamp
from onnxflow.ops.pass_made import FAKE_QUANTIZE, FUSED_DOMAIN
from onnxflow.ops.quantization import (
    BYTE_RANGE,
    dequantize_linear,
    expand_param,
    fast_fake_quantize,
    quantize_linear,
)
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form


def _fake_quantize_compiled(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, *, axis: int = 1
) -> np.ndarray:
    """FakeQuantize's compiled form: the float32 case in one pass, clipped as the NumPy form's
    clip does (per tensor against scalars, per axis against arrays); else the NumPy form."""
    layout = ig.channels(x.shape, scale, axis)
    if not fast_fake_quantize(x, scale, zero_point) or layout is None:
        return fake_quantize(x, scale, zero_point, axis=axis)
    if zero_point.shape != scale.shape:
        return fake_quantize(x, scale, zero_point, axis=axis)
    lo, hi = BYTE_RANGE[zero_point.dtype]
    y = np.empty(x.shape, np.float32)
    if scale.size == 1 and scale.ndim <= 1:
        z = float(zero_point.reshape(()))
        ig.QUANT.fake_quantize(ig.flat(x), y.reshape(-1), float(scale.reshape(())), lo - z, hi - z)
        return y
    z = ig.vector(zero_point, zero_point)
    s = ig.vector(scale, scale)
    ig.QUANT.fake_quantize_axis(ig.flat(x), y.reshape(-1), s, lo - z, hi - z, *layout)
    return y


@op(
    FAKE_QUANTIZE,
    1,
    domain=FUSED_DOMAIN,
    traits=Traits(fresh=True, native=native_form(ig.QUANT and _fake_quantize_compiled)),
)
def fake_quantize(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, *, axis: int = 1
) -> np.ndarray:
    """``DequantizeLinear(QuantizeLinear(x, scale, zero_point))`` in one float32 buffer when
    x and the scale are float32 and the zero point 8-bit; else the two kernels as written.

    Equal to the pair for every number; a NaN stays NaN (the pair's 8-bit cast of NaN is
    undefined)."""
    if not fast_fake_quantize(x, scale, zero_point):
        q = quantize_linear(x, scale, zero_point, axis=axis)
        return dequantize_linear(q, scale, zero_point, axis=axis)
    # clamp(rint(x / s) + z, lo, hi) - z is rint(x / s) clamped to [lo - z, hi - z], exactly
    lo, hi = BYTE_RANGE[zero_point.dtype]
    if zero_point.size == 1 and zero_point.ndim <= 1:  # small integers: exact as Python floats
        z: Any = float(zero_point.reshape(()))
    else:
        z = expand_param(zero_point, x.shape, axis, 0, "zero point").astype(np.float32)
    s = expand_param(scale, x.shape, axis, 0, "scale")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = np.divide(x, s)
    np.rint(y, out=y)
    clamp(y, lo - z, hi - z, out=y)
    y *= s
    return y
