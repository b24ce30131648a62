"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul,
MatMulInteger.

=====================  ======================================
QuantizeLinear         10, 13, 19, 21, 23, 24, 25, 28
DequantizeLinear       10, 13, 19, 21, 23, 24, 25, 28
DynamicQuantizeLinear  11
QLinearMatMul          10, 21
MatMulInteger          10
=====================  ======================================

The module-level :func:`quantize` and :func:`dequantize` implement the spec's formulas for every
granularity (per tensor, per axis, blocked) and are shared with QLinearConv and ConvInteger.
Later versions only add attributes and types, so one kernel serves every version of an op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxflow.ops import integer_gemm as ig
from onnxflow.ops._common import clamp, normalize_axis
from onnxflow.ops.cast import E8M0, convert, is_float
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form
from onnxflow.values import np_dtype


def quantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    axis: int,
    block_size: int,
    output_dtype_np: np.dtype,
    saturate: bool,
    precision: np.dtype | None = None,
) -> np.ndarray:
    """Return ``saturate(round(x / scale) + zero_point)`` as ``output_dtype_np``.

    ``scale`` and ``zero_point`` are a scalar (per tensor), a 1-D tensor along ``axis`` (per
    axis) or, with ``block_size > 0``, ``x``'s shape with ``axis`` divided in blocks. The
    division runs in ``precision`` (default: the scale's type) and rounds half to even for
    integer outputs; float outputs round to nearest even, and float 8 ones clamp out-of-range
    values when ``saturate`` (see :func:`onnxflow.ops.cast.convert`). A missing ``zero_point``
    is 0.
    """
    compute = _arithmetic_dtype(scale.dtype) if precision is None else np.dtype(precision)
    scale = expand_param(scale, x.shape, axis, block_size, "scale")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scaled = (x.astype(compute) / scale.astype(compute)).astype(np.float64)
    if zero_point is not None:
        zero_point = expand_param(zero_point, x.shape, axis, block_size, "zero point")
    return store_quantized(scaled, zero_point, np.dtype(output_dtype_np), saturate)


def dequantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    axis: int,
    block_size: int,
    out_dtype: np.dtype,
) -> np.ndarray:
    """Return ``(x - zero_point) * scale`` as ``out_dtype``.

    ``scale`` and ``zero_point`` are laid out as for :func:`quantize`; a missing
    ``zero_point`` is 0. The subtraction is exact and the product is rounded once, to
    ``out_dtype``.
    """
    wide = np.float64 if is_float(x.dtype) else np.int64
    diff = x.astype(wide)
    if zero_point is not None:
        diff = diff - expand_param(zero_point, x.shape, axis, block_size, "zero point").astype(wide)
    scale = expand_param(scale, x.shape, axis, block_size, "scale").astype(np.float64)
    return convert(np.asarray(diff * scale, dtype=np.float64), np.dtype(out_dtype))


def expand_param(
    param: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int, what: str
) -> np.ndarray:
    """Return a scale or zero point shaped to broadcast against a tensor of ``shape``."""
    rank = len(shape)
    if param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    axis = normalize_axis(axis, rank)
    if block_size > 0:
        return _expand_blocked(param, shape, axis, block_size, what)
    if param.ndim == 1:
        if param.shape[0] != shape[axis]:
            raise ValueError(
                f"per-axis {what} has {param.shape[0]} values, expected {shape[axis]} "
                f"(the size of axis {axis} of the input of shape {list(shape)})"
            )
        return param.reshape([-1 if d == axis else 1 for d in range(rank)])
    raise ValueError(
        f"{what} of shape {list(param.shape)} is neither a scalar nor 1-D, and block_size is "
        f"not set (input shape {list(shape)})"
    )


def _expand_blocked(
    param: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int, what: str
) -> np.ndarray:
    expected = [-(-d // block_size) if i == axis else d for i, d in enumerate(shape)]
    if list(param.shape) != expected:
        raise ValueError(
            f"blocked {what} has shape {list(param.shape)}, expected {expected} for an input "
            f"of shape {list(shape)}, axis {axis} and block_size {block_size}"
        )
    repeated = np.repeat(param, block_size, axis=axis)
    return np.take(repeated, np.arange(shape[axis]), axis=axis)


def store_quantized(
    scaled: np.ndarray, zero_point: np.ndarray | None, dtype: np.dtype, saturate: bool
) -> np.ndarray:
    """Return ``scaled + zero_point`` in a quantized ``dtype``.

    Integer outputs round ``scaled`` half to even before adding the zero point and clamp to the
    type's range; float outputs convert ``scaled + zero_point`` (see ``convert``).
    """
    zp = 0.0 if zero_point is None else zero_point.astype(np.float64)
    if is_float(dtype):
        return convert(np.asarray(scaled + zp, dtype=np.float64), dtype, saturate=bool(saturate))
    info = ml_dtypes.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(scaled) + zp, int(info.min), int(info.max))
        return np.asarray(q.astype(dtype))


def _arithmetic_dtype(dtype: np.dtype) -> np.dtype:
    """Return the type a scale's arithmetic runs in: its own, or float32 if it has none."""
    return dtype if is_float(dtype) and dtype != E8M0 else np.dtype(np.float32)


def quantize_linear_compiled(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    saturate: int = 1,
    output_dtype: int = 0,
    block_size: int = 0,
    precision: int = 0,
) -> np.ndarray:
    """QuantizeLinear's compiled form: float32 to 8 bits per tensor or per axis in one pass,
    else the NumPy form."""
    dtype = _quantized_type(y_zero_point, output_dtype)
    compute = np_dtype(precision) if precision else None
    layout = ig.channels(x.shape, y_scale, axis)
    if (
        not _fast_quantize(x, y_scale, dtype, block_size, compute)
        or layout is None
        or (y_zero_point is not None and y_zero_point.shape != y_scale.shape)
    ):
        return quantize_linear(
            x,
            y_scale,
            y_zero_point,
            axis=axis,
            saturate=saturate,
            output_dtype=output_dtype,
            block_size=block_size,
            precision=precision,
        )
    y = np.empty(x.shape, dtype)
    s, z = ig.scalar(y_scale), ig.scalar(y_zero_point)
    if s is not None and z is not None:
        ig.QUANT.quantize_tensor(ig.flat(x), y.reshape(-1), s, z)
        return y
    loop = ig.QUANT.quantize_u8 if dtype == np.uint8 else ig.QUANT.quantize_i8
    scale = ig.vector(y_scale, y_scale)
    loop(ig.flat(x), y.reshape(-1), scale, ig.vector(y_zero_point, scale), *layout)
    return y


def _per_tensor(
    constants: tuple[np.ndarray | None, ...],
) -> tuple[np.ndarray, float, float] | None:
    """``(zero point, scale, zero point as floats)`` of a QuantizeLinear or DequantizeLinear
    whose float32 scale and 8-bit zero point are constants of one value each; else None."""
    if len(constants) != 3 or constants[1] is None or constants[2] is None:
        return None
    scale, zero = constants[1], constants[2]
    s, z = ig.scalar(scale), ig.scalar(zero)
    if s is None or z is None or scale.dtype != _F32 or zero.dtype not in _BYTES:
        return None
    return zero, s, z


def quantize_linear_prepare(
    constants: tuple[np.ndarray | None, ...], **attrs: Any
) -> Callable[..., np.ndarray] | None:
    """QuantizeLinear's compiled form made for a constant per-tensor float32 scale and 8-bit
    zero point (read once, at compile time), or None: X to 8 bits in one pass."""
    params = _per_tensor(constants)
    if params is None or attrs.get("output_dtype", 0) or attrs.get("block_size", 0):
        return None
    if attrs.get("precision", 0):
        return None
    zero, s, z = params
    loop = ig.QUANT.quantize_tensor

    def prepared(x: np.ndarray, *params: np.ndarray | None) -> np.ndarray:
        if x.dtype != _F32 or not x.ndim:
            return quantize_linear_compiled(x, *params, **attrs)
        y = np.empty(x.shape, zero.dtype)
        loop(ig.flat(x), y.reshape(-1), s, z)
        return y

    prepared.__name__ = prepared.__qualname__ = "quantize_linear_prepared"
    return prepared


@op(
    "QuantizeLinear",
    10,
    13,
    19,
    21,
    23,
    24,
    25,
    28,
    traits=Traits(
        native=native_form(ig.QUANT and quantize_linear_compiled, prepare=quantize_linear_prepare)
    ),
)
def quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    saturate: int = 1,
    output_dtype: int = 0,
    block_size: int = 0,
    precision: int = 0,
) -> np.ndarray:
    """Quantize ``x``; the output type is ``output_dtype``, else the zero point's, else uint8."""
    dtype = _quantized_type(y_zero_point, output_dtype)
    compute = np_dtype(precision) if precision else None
    if _fast_quantize(x, y_scale, dtype, block_size, compute):
        return _quantize_8bit(x, y_scale, y_zero_point, axis, dtype)
    return quantize(x, y_scale, y_zero_point, axis, block_size, dtype, bool(saturate), compute)


def _quantized_type(y_zero_point: np.ndarray | None, output_dtype: int) -> np.dtype:
    """QuantizeLinear's output type: ``output_dtype``, else the zero point's, else uint8."""
    dtype = np.dtype(np.uint8) if y_zero_point is None else y_zero_point.dtype
    if output_dtype:
        dtype = np_dtype(output_dtype)
        if y_zero_point is not None and y_zero_point.dtype != dtype:
            raise ValueError(
                f"output_dtype is {dtype} but y_zero_point has type {y_zero_point.dtype}"
            )
    return dtype


_F32 = np.dtype(np.float32)
#: The 8-bit integer types' ranges, as floats (the fast float32 paths clamp to them).
BYTE_RANGE = {np.dtype(np.int8): (-128.0, 127.0), np.dtype(np.uint8): (0.0, 255.0)}
_BYTES = tuple(BYTE_RANGE)


def _fast_quantize(
    x: np.ndarray, scale: np.ndarray, dtype: np.dtype, block_size: int, compute: Any
) -> bool:
    """Whether QuantizeLinear is the common float32 -> 8-bit case :func:`_quantize_8bit` does."""
    return (
        x.dtype == _F32
        and scale.dtype == _F32
        and dtype in _BYTES
        and not block_size
        and compute in (None, _F32)
        and x.ndim > 0
    )


def fast_fake_quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> bool:
    """Whether a QuantizeLinear -> DequantizeLinear pair on these inputs is float32 in and out
    with an 8-bit zero point (the fused kernel's one-buffer case)."""
    return _fast_quantize(x, scale, zero_point.dtype, 0, None)


def _quantize_8bit(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int, dtype: np.dtype
) -> np.ndarray:
    """:func:`quantize` for float32 in, a float32 scale and 8-bit integers out, in float32
    throughout: the quotient is the same float32, its rounding the same, and adding a zero
    point is exact wherever the result is not clamped anyway."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.rint(x / expand_param(scale, x.shape, axis, 0, "scale"))
    if zero_point is not None:
        q += expand_param(zero_point, x.shape, axis, 0, "zero point")
    lo, hi = BYTE_RANGE[dtype]
    clamp(q, q.dtype.type(lo), q.dtype.type(hi), out=q)
    with np.errstate(invalid="ignore"):  # NaN: as undefined as in the general path
        return q.astype(dtype)


def dequantize_linear_compiled(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    """DequantizeLinear's compiled form: 8 bits to float32 per tensor or per axis in one
    pass, else the NumPy form."""
    layout = ig.channels(x.shape, x_scale, axis)
    if (
        layout is None
        or _dequantized_type(x_scale, output_dtype) != _F32
        or not _fast_dequantize(x, x_scale, _F32, block_size)
        or (x_zero_point is not None and x_zero_point.shape != x_scale.shape)
        or (x_zero_point is not None and x_zero_point.dtype != x.dtype)
    ):
        return dequantize_linear(
            x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype
        )
    y = np.empty(x.shape, _F32)
    s, z = ig.scalar(x_scale), ig.scalar(x_zero_point)
    if s is not None and z is not None:
        ig.QUANT.dequantize_tensor(ig.flat(x), y.reshape(-1), s, z)
        return y
    loop = ig.QUANT.dequantize_u8 if x.dtype == np.uint8 else ig.QUANT.dequantize_i8
    scale = ig.vector(x_scale, x_scale)
    loop(ig.flat(x), y.reshape(-1), scale, ig.vector(x_zero_point, scale), *layout)
    return y


def dequantize_linear_prepare(
    constants: tuple[np.ndarray | None, ...], **attrs: Any
) -> Callable[..., np.ndarray] | None:
    """DequantizeLinear's compiled form made for a constant per-tensor float32 scale and 8-bit
    zero point (read once, at compile time), or None: 8 bits of that type to float32 in one
    pass."""
    params = _per_tensor(constants)
    if params is None or attrs.get("block_size", 0):
        return None
    if attrs.get("output_dtype", 0) not in (0, TensorProto.FLOAT):
        return None
    zero, s, z = params
    loop = ig.QUANT.dequantize_tensor

    def prepared(x: np.ndarray, *params: np.ndarray | None) -> np.ndarray:
        if x.dtype != zero.dtype:
            return dequantize_linear_compiled(x, *params, **attrs)
        y = np.empty(x.shape, _F32)
        loop(ig.flat(x), y.reshape(-1), s, z)
        return y

    prepared.__name__ = prepared.__qualname__ = "dequantize_linear_prepared"
    return prepared


@op(
    "DequantizeLinear",
    10,
    13,
    19,
    21,
    23,
    24,
    25,
    28,
    traits=Traits(
        native=native_form(
            ig.QUANT and dequantize_linear_compiled, prepare=dequantize_linear_prepare
        )
    ),
)
def dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    """Dequantize ``x``; the output type is ``output_dtype``, else the scale's type."""
    dtype = _dequantized_type(x_scale, output_dtype)
    if _fast_dequantize(x, x_scale, dtype, block_size):
        return _dequantize_8bit(x, x_scale, x_zero_point, axis)
    return dequantize(x, x_scale, x_zero_point, axis, block_size, dtype)


def _dequantized_type(x_scale: np.ndarray, output_dtype: int) -> np.dtype:
    """DequantizeLinear's output type: ``output_dtype``, else the scale's type."""
    if output_dtype:
        return np_dtype(output_dtype)
    if x_scale.dtype == E8M0:
        raise ValueError("x_scale is float8e8m0, so output_dtype must be set")
    return x_scale.dtype


def _fast_dequantize(x: np.ndarray, scale: np.ndarray, dtype: np.dtype, block_size: int) -> bool:
    """Whether DequantizeLinear is the common 8-bit -> float32 case, computed in float32."""
    return x.dtype in _BYTES and scale.dtype == _F32 and dtype == _F32 and not block_size


def _dequantize_8bit(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int
) -> np.ndarray:
    """:func:`dequantize` for 8-bit integers and a float32 scale, in float32: the difference
    is exact there and the product rounds once, as in the general path."""
    if zero_point is None:
        diff = x.astype(_F32)
    else:
        diff = np.subtract(x, expand_param(zero_point, x.shape, axis, 0, "zero point"), dtype=_F32)
    diff *= expand_param(scale, x.shape, axis, 0, "scale")
    return diff


def dynamic_quantize_linear_compiled(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DynamicQuantizeLinear's compiled form: one pass for the range, one to quantize; a
    float32 x holding NaN or infinities goes to the NumPy form."""
    if x.dtype != _F32:
        return dynamic_quantize_linear(x)
    data = ig.flat(x)
    low, high, nan = ig.QUANT.range_of(data, 0.0, 0.0)
    if nan or not np.isfinite(low) or not np.isfinite(high):
        return dynamic_quantize_linear(x)
    scale, zero = _dynamic_parameters(np.float32(low), np.float32(high))
    if scale == 0:
        return np.zeros(x.shape, dtype=np.uint8), np.asarray(np.float32(1)), zero
    y = np.empty(x.shape, np.uint8)
    ig.QUANT.quantize_tensor(data, y.reshape(-1), float(scale), float(zero))
    return y, np.asarray(scale), zero


@op(
    "DynamicQuantizeLinear",
    11,
    traits=Traits(native=native_form(ig.QUANT and dynamic_quantize_linear_compiled)),
)
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(y, y_scale, y_zero_point)``: x quantized to uint8 over its range widened to 0.

    An all-zero (or empty) ``x`` has an empty range: scale 1 and zero point 0, as the node
    suite (onnx 1.24) and onnxruntime give, rather than dividing by zero.
    """
    low = np.minimum(np.float32(0), x.min(initial=np.float32(0)))
    high = np.maximum(np.float32(0), x.max(initial=np.float32(0)))
    scale, zero = _dynamic_parameters(low, high)
    if scale == 0:
        return np.zeros(x.shape, dtype=np.uint8), np.asarray(np.float32(1)), zero
    y = quantize(x, np.asarray(scale), zero, 1, 0, np.dtype(np.uint8), True)
    return y, np.asarray(scale), zero


def _dynamic_parameters(low: np.float32, high: np.float32) -> tuple[np.float32, np.ndarray]:
    """DynamicQuantizeLinear's scale and zero point for the range ``[low, high]`` (which
    holds 0); a zero scale comes with zero point 0."""
    scale = np.float32((high - low) / np.float32(255))
    if scale == 0:
        return scale, np.zeros((), dtype=np.uint8)
    return scale, np.asarray(np.rint(np.clip(-low / scale, 0, 255))).astype(np.uint8)


def _rows(param: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Lay a per-row vector of an ``[..., M, K]`` operand out as ``[M, 1]``."""
    if param.ndim == 1 and param.size > 1 and matrix.ndim >= 2:
        return param.reshape(-1, 1)
    return param


def _centered(q: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """Return ``q - zero_point`` in float64 (exact for every 8-bit integer and float type)."""
    centered = q.astype(np.float64)
    return centered if zero_point is None else centered - zero_point.astype(np.float64)


def _qlinear_matmul_compiled(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """QLinearMatMul's compiled form: the exact product (:func:`onnxflow.ops.integer_gemm.
    product`), then scale, divide, round, zero point and saturate in one pass in double; A's
    scale per tensor, B's per tensor or column. Others go to the NumPy form."""
    inputs = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
    s, z, sa = ig.scalar(y_scale), ig.scalar(y_zero_point), ig.scalar(a_scale)
    fits = y_zero_point.dtype in _BYTES and b.ndim == 2 and b.shape[0] * 255 * 255 < 1 << 31
    if s is None or z is None or sa is None or not fits or b_scale.size not in (1, b.shape[1]):
        return qlinear_matmul(*inputs)
    acc = ig.product(a, a_zero_point, b, b_zero_point)
    if acc is None:
        return qlinear_matmul(*inputs)
    column = np.float64(sa) * np.broadcast_to(b_scale.astype(np.float64).reshape(-1), b.shape[1:])
    y = np.empty(acc.shape, y_zero_point.dtype)
    ig.QUANT.requantize_f64(ig.flat(acc), y.reshape(-1), np.ascontiguousarray(column), s, z)
    return y


@op(
    "QLinearMatMul",
    10,
    21,
    traits=Traits(native=native_form(ig.QUANT and _qlinear_matmul_compiled)),
)
def qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """Return the quantized product of two quantized matrices, typed like ``y_zero_point``.

    ``a``'s scale and zero point may be per row, ``b``'s per column. The integer product is
    exact (float64 holds it), the product of the two scales too (two float32 values), so
    ``acc * (a_scale * b_scale) / y_scale`` rounds twice before rounding to an integer.
    """
    acc = np.matmul(_centered(a, _rows(a_zero_point, a)), _centered(b, b_zero_point))
    scale = _rows(a_scale, a).astype(np.float64) * b_scale.astype(np.float64)
    scaled = acc * scale / y_scale.astype(np.float64)
    return store_quantized(scaled, y_zero_point, y_zero_point.dtype, True)


def _matmul_integer_compiled(
    a: np.ndarray,
    b: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """MatMulInteger's compiled form: the exact product on float32 BLAS
    (:mod:`onnxflow.ops.integer_gemm`), B shifted once when it is a constant; other layouts
    go to the NumPy form."""
    product = ig.product(a, a_zero_point, b, b_zero_point)
    if product is None:
        return matmul_integer(a, b, a_zero_point, b_zero_point)
    return product


@op("MatMulInteger", 10, traits=Traits(native=native_form(ig.QUANT and _matmul_integer_compiled)))
def matmul_integer(
    a: np.ndarray,
    b: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """Return ``(a - a_zero_point) @ (b - b_zero_point)`` as int32 (zero points per row/column)."""
    a_zp = None if a_zero_point is None else _rows(a_zero_point, a)
    product = np.matmul(_centered(a, a_zp), _centered(b, b_zero_point))
    return np.asarray(product.astype(np.int64).astype(np.int32))
