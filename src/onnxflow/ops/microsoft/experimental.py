"""The operators onnx once held as experimental, which onnxruntime still runs in the default
domain (old model-zoo models, e.g. tiny YOLOv2's ``ImageScaler``, use them). onnx has no schema
for them any more, so the registry resolves them to these since-version-1 kernels.

=========================  =====  ======================================================
operator                   since  meaning
=========================  =====  ======================================================
Affine                     1      ``alpha * x + beta``
Crop                       1      an NCHW image's borders cut (``border``, or ``scale``)
DynamicSlice               1      Slice-10 (starts, ends, axes as inputs, no steps)
ImageScaler                1      ``scale * x + bias[c]`` on NCHW
MeanVarianceNormalization  1      mean and variance removed over N, H, W (and C)
ParametricSoftplus         1      ``alpha * ln(exp(beta * x) + 1)``
Scale                      1      ``scale * x``
ScaledTanh                 1      ``alpha * tanh(beta * x)``
ThresholdedRelu            1      ``x`` where ``x > alpha``, else 0
=========================  =====  ======================================================
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops.registry import op
from onnxflow.ops.shape import slice_
from onnxflow.traits import Traits

#: An elementwise op computing a new array of its input's shape and type.
_ELEMENTWISE = Traits(static_shape=True, elementwise=True, fresh=True)
#: A new array whose shape follows from the input's shape and the attributes.
_FRESH = Traits(static_shape=True, fresh=True)


def _like(x: np.ndarray, value: np.ndarray) -> np.ndarray:
    return np.asarray(value).astype(x.dtype, copy=False)


@op("Affine", 1, traits=_ELEMENTWISE)
def affine(x: np.ndarray, *, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    """``alpha * x + beta`` elementwise."""
    return _like(x, x * x.dtype.type(alpha) + x.dtype.type(beta))


@op("Crop", 1, traits=_FRESH)
def crop(
    x: np.ndarray, *, border: list[int] | None = None, scale: list[int] | None = None
) -> np.ndarray:
    """An NCHW image cropped: ``border`` is (left, top, right, bottom); with ``scale``
    (height, width) the crop is that size, starting at (top, left)."""
    if x.ndim != 4 or border is None or len(border) != 4:
        raise ValueError(
            f"Crop expects an NCHW input and border = [left, top, right, bottom], found rank "
            f"{x.ndim} and border {border}"
        )
    left, top, right, bottom = border
    if scale:
        height, width = scale
        return x[:, :, top : top + height, left : left + width].copy()
    return x[:, :, top : x.shape[2] - bottom, left : x.shape[3] - right].copy()


@op("DynamicSlice", 1, traits=Traits(selects=True))  # as Slice
def dynamic_slice(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray | None = None
) -> np.ndarray:
    """onnx Slice-10 without steps: ``data`` sliced from ``starts`` to ``ends`` on ``axes``."""
    return slice_(data, starts, ends, axes)


@op("ImageScaler", 1, traits=_FRESH)
def image_scaler(
    x: np.ndarray, *, scale: float = 1.0, bias: list[float] | None = None
) -> np.ndarray:
    """``scale * x + bias[c]`` on an NCHW image, ``bias`` one value per channel."""
    shift = np.zeros(x.shape[1], x.dtype) if bias is None else np.asarray(bias, x.dtype)
    if shift.size != x.shape[1]:
        raise ValueError(f"ImageScaler bias has {shift.size} values, expected {x.shape[1]}")
    return _like(x, x * x.dtype.type(scale) + shift.reshape(1, -1, *([1] * (x.ndim - 2))))


@op("MeanVarianceNormalization", 1, traits=_FRESH)
def mean_variance_normalization_1(
    x: np.ndarray, *, across_channels: int = 0, normalize_variance: int = 1
) -> np.ndarray:
    """NCHW ``x`` minus its mean over N, H and W (and C when ``across_channels``), divided by
    the standard deviation there when ``normalize_variance``. The experimental schema says
    no more than "mean variance normalization"; the batch axis is in, as onnxruntime has it
    (and as version 9's default axes [0, 2, 3] are)."""
    axes = (0, 1, 2, 3) if across_channels else (0, 2, 3)
    centered = x - x.mean(axis=axes, keepdims=True)
    if not normalize_variance:
        return _like(x, centered)
    return _like(x, centered / np.sqrt((centered * centered).mean(axis=axes, keepdims=True)))


@op("ParametricSoftplus", 1, traits=_ELEMENTWISE)
def parametric_softplus(x: np.ndarray, *, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """``alpha * ln(exp(beta * x) + 1)``, written to stay finite for large ``beta * x``."""
    z = x * x.dtype.type(beta)
    return _like(x, x.dtype.type(alpha) * (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))))


@op("Scale", 1, traits=_ELEMENTWISE)
def scale(x: np.ndarray, *, scale: float = 1.0) -> np.ndarray:
    """``scale * x`` elementwise."""
    return _like(x, x * x.dtype.type(scale))


@op("ScaledTanh", 1, traits=_ELEMENTWISE)
def scaled_tanh(x: np.ndarray, *, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """``alpha * tanh(beta * x)`` elementwise."""
    return _like(x, x.dtype.type(alpha) * np.tanh(x * x.dtype.type(beta)))


@op("ThresholdedRelu", 1, traits=_ELEMENTWISE)
def thresholded_relu_1(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """``x`` where ``x > alpha``, else 0."""
    return np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))
