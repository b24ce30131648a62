"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, CausalConvWithState,
Col2Im.

All work on channels-first tensors ``(N, C, D1, ..., Dn)`` of any spatial rank. A convolution is
computed by :func:`onnxflow.ops.conv_paths.convolve` (pointwise, depthwise, tap products or
im2col columns and one GEMM per group); ConvTranspose and Col2Im are the reverse: a GEMM, then a
scatter-add of the columns into the image ("fold"). float16 and bfloat16 are computed in float32
and rounded back once; integer convolutions accumulate in float64, which is exact for 8-bit
operands (every partial sum stays far below 2**53).

The window geometry is :mod:`onnxflow.ops.window_geometry`'s, shared with the pools."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from onnxflow.ops import integer_gemm as ig
from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.conv_direct import compiled_conv, direct, prepared_conv
from onnxflow.ops.conv_paths import _geometry, _tuple, check_kernel_shape, convolve, grouped_gemm
from onnxflow.ops.im2col import im2col
from onnxflow.ops.registry import op
from onnxflow.ops.window_geometry import SAME, per_axis, spatial_geometry
from onnxflow.traits import NumpyCall, Traits, native_form


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is not None:
        if b.shape != (y.shape[1],):
            raise ValueError(f"B has shape {b.shape}, expected ({y.shape[1]},)")
        y += b.astype(y.dtype, copy=False).reshape(-1, *[1] * (y.ndim - 2))
    return y


# -- kernels ------------------------------------------------------------------------------------
def conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Return the N-d convolution of X with W (kernel_shape taken from W), plus bias B."""
    check_kernel_shape(kernel_shape, w)
    dtype = float_compute_dtype(x.dtype)
    y = convolve(
        x.astype(dtype, copy=False),
        w.astype(dtype, copy=False),
        group,
        strides,
        dilations,
        pads,
        auto_pad,
    )
    return _add_bias(y, b).astype(x.dtype, copy=False)


def _conv_numpy(f: NumpyCall) -> str:
    """Conv's NumPy form: :func:`onnxflow.ops.numpy_forms.onnx_conv` (im2col)."""
    names = ("auto_pad", "dilations", "group", "pads", "strides")
    args = [*f.ins[:3], *(f"{a}={f.src[a]}" for a in names if a in f.src)]
    return f"onnx_conv({', '.join(args)})"


#: Conv's compiled form runs depthwise, small-channel and long 1-D float32 convolutions by a
#: direct loop (:mod:`onnxflow.ops.conv_direct`), the rest by this NumPy form.
op(
    "Conv",
    1,
    11,
    22,
    traits=Traits(
        fresh=True,
        rounds_once=True,
        native=native_form(compiled_conv(conv), stateful=prepared_conv(compiled_conv(conv))),
        numpy=_conv_numpy,
    ),
)(conv)


def _conv_transpose_numpy(f: NumpyCall) -> str:
    """ConvTranspose's NumPy form: :func:`onnxflow.ops.numpy_forms.onnx_conv_transpose`."""
    names = ("auto_pad", "dilations", "group", "output_padding", "output_shape", "pads")
    args = [*f.ins[:3], *(f"{a}={f.src[a]}" for a in (*names, "strides") if a in f.src)]
    return f"onnx_conv_transpose({', '.join(args)})"


@op("ConvTranspose", 1, 11, 22, traits=Traits(numpy=_conv_transpose_numpy))
def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Return the transposed convolution of X with W ``(C, M/group, *kernel)``, plus bias B."""
    check_kernel_shape(kernel_shape, w)
    n, c, *spatial = x.shape
    wc, mg, *kernel = w.shape
    if wc != c or c % group or len(kernel) != len(spatial):
        raise ValueError(
            f"X has shape {x.shape} and W {w.shape} with group={group}: expected W.shape[0] == C "
            "divisible by group and equal spatial ranks"
        )
    cg = c // group
    begin, size = _transpose_geometry(
        spatial, kernel, strides, dilations, pads, auto_pad, output_padding, output_shape
    )
    dtype = float_compute_dtype(x.dtype)
    # Sizes spelt out, not -1: NumPy cannot infer one of an empty batch or channel axis.
    wt = w.astype(dtype, copy=False).reshape(group, cg, mg * math.prod(kernel)).transpose(0, 2, 1)
    xg = x.astype(dtype, copy=False).reshape(n, group, cg, math.prod(spatial))
    cols = np.matmul(wt, xg).reshape(n, group * mg, math.prod(kernel), *spatial)
    y = _fold(cols, kernel, strides, dilations, begin, size)
    return _add_bias(y, b).astype(x.dtype, copy=False)


def _transpose_geometry(
    spatial, kernel, strides, dilations, pads, auto_pad, output_padding, output_shape
) -> tuple[list[int], list[int]]:
    """Return ``(begin pads, output sizes)`` of a ConvTranspose."""
    n = len(spatial)
    strides = per_axis(strides, n, "strides")
    dilations = per_axis(dilations, n, "dilations")
    extra = per_axis(output_padding, n, "output_padding", fill=0)
    full = [
        s * (i - 1) + a + (k - 1) * d + 1
        for s, i, a, k, d in zip(strides, spatial, extra, kernel, dilations)
    ]
    if output_shape is not None or auto_pad in SAME:
        if output_shape is None:
            size = [i * s for i, s in zip(spatial, strides)]
        else:
            size = list(output_shape[-n:])
        total = [f - o for f, o in zip(full, size)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        return begin, size
    if auto_pad == "VALID":
        return [0] * n, full
    if auto_pad not in ("NOTSET", ""):
        raise ValueError(
            f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}"
        )
    pads = per_axis(pads, 2 * n, "pads", fill=0)
    return list(pads[:n]), [f - b - e for f, b, e in zip(full, pads[:n], pads[n:])]


def _fold(
    cols: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    begin: Sequence[int],
    size: Sequence[int],
) -> np.ndarray:
    """Scatter-add columns ``(N, C, K, *grid)`` into an image ``(N, C, *size)``.

    Column ``(k, g)`` lands at ``g * stride + k * dilation - begin`` on each axis; what falls
    outside the image is dropped.
    """
    n, c, _, *grid = cols.shape
    rank = len(grid)
    strides = per_axis(strides, rank, "strides")
    dilations = per_axis(dilations, rank, "dilations")
    shift = [max(0, -b) for b in begin]
    frame = [
        max(sh + (g - 1) * s + (k - 1) * d + 1, sh + b + o)
        for sh, g, s, k, d, b, o in zip(shift, grid, strides, kernel, dilations, begin, size)
    ]
    buf = np.zeros((n, c, *frame), dtype=cols.dtype)
    for tap, index in enumerate(np.ndindex(*kernel)):
        window = tuple(
            slice(sh + k * d, sh + k * d + (g - 1) * s + 1, s)
            for sh, k, d, g, s in zip(shift, index, dilations, grid, strides)
        )
        buf[(..., *window)] += cols[:, :, tap]
    crop = tuple(slice(sh + b, sh + b + o) for sh, b, o in zip(shift, begin, size))
    return buf[(..., *crop)]


@op("Col2Im", 18)
def col2im(
    x: np.ndarray,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    *,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Return the image ``(N, C, *image_shape)`` whose blocks (summed where they overlap) are X."""
    image = [int(v) for v in image_shape]
    kernel = [int(v) for v in block_shape]
    taps = math.prod(kernel)
    n, rows, length = x.shape
    grid, begin, _ = spatial_geometry(image, kernel, strides, dilations, pads, "NOTSET")
    if rows % taps or math.prod(grid) != length:
        raise ValueError(
            f"input has shape {x.shape}: expected (N, C * {taps}, {math.prod(grid)}) for image "
            f"{image} and blocks {kernel}"
        )
    cols = x.reshape(n, rows // taps, taps, *grid)
    return _fold(cols, kernel, strides, dilations, begin, image)


def _conv_integer_compiled(
    x: np.ndarray,
    w: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """ConvInteger's compiled form: the exact convolution on float32 BLAS
    (:func:`_exact_conv`), else the NumPy form."""
    check_kernel_shape(kernel_shape, w)
    geometry = _Geometry(group, strides, dilations, pads, auto_pad)
    exact = _exact_conv(x, x_zero_point, w, w_zero_point, geometry)
    if exact is None:
        return conv_integer(
            x, w, x_zero_point, w_zero_point, kernel_shape=kernel_shape, **geometry._asdict()
        )
    acc, out = exact
    return np.ascontiguousarray(acc[:, :, : math.prod(out)]).reshape(*acc.shape[:2], *out)


class _Geometry(NamedTuple):
    """A convolution's attributes besides its kernel shape (their defaults the spec's)."""

    group: int = 1
    strides: list[int] | None = None
    dilations: list[int] | None = None
    pads: list[int] | None = None
    auto_pad: str = "NOTSET"


def _exact_conv(
    x: np.ndarray,
    x_zero: np.ndarray | None,
    w: np.ndarray,
    w_zero: np.ndarray | None,
    geometry: _Geometry,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """The int32 convolution of ``x - x_zero`` (per tensor) with ``w - w_zero`` (per tensor
    or per output channel), 8-bit operands: on the int16 kernel (:func:`_int_conv`; ``rows``:
    W's rows for it, if made already), else in float32 where it is exact, input channels cut
    into slices short enough (one group only) and the slices added in int32. ``(sums (N, M,
    row stride), spatial output shape)``, the rows possibly padded past the positions; None
    for what this does not take, or sums that could pass int32's range."""
    if x.dtype not in ig.BYTES or w.dtype not in ig.BYTES or x.ndim < 3:
        return None
    if x_zero is not None and x_zero.size != 1:
        return None
    by_ints = _int_conv(x, x_zero, w, w_zero, geometry, rows)
    return by_ints if by_ints is not None else _float_conv(x, x_zero, w, w_zero, geometry)


def _float_conv(
    x: np.ndarray,
    x_zero: np.ndarray | None,
    w: np.ndarray,
    w_zero: np.ndarray | None,
    geometry: _Geometry,
) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """:func:`_exact_conv` in float32, exact in slices of the input channels."""
    w_side = ig.prepared(w, w_zero, 0)
    x_shifted = ig.shift(x, None if x_zero is None else x_zero.reshape(1), 1)
    if w_side is None or x_shifted is None:
        return None
    taps = math.prod(w.shape[2:])
    reach = ig.reach(x, x_zero)
    if w.shape[1] * taps * reach * w_side.reach >= 1 << 30:
        return None
    step = ig.k_step(w.shape[1] * taps, reach, w_side.reach)
    if step >= w.shape[1] * taps:
        return _rows3(_float_sums(x_shifted, w_side.shifted, geometry).astype(np.int32))
    if geometry.group != 1 or step < taps:
        return None
    acc, channels = None, step // taps
    for c0 in range(0, w.shape[1], channels):
        cut = slice(c0, c0 + channels)
        part = convolve(x_shifted[:, cut], w_side.shifted[:, cut], *geometry)
        acc = np.empty(part.shape, np.int32) if acc is None else acc
        ig.QUANT.accumulate(part.reshape(-1), acc.reshape(-1), c0 == 0)
    return None if acc is None else _rows3(acc)


def _float_sums(x: np.ndarray, w: np.ndarray, geometry: _Geometry) -> np.ndarray:
    """The float32 convolution of integer-valued X and W whose every partial sum is exact:
    by the compiled direct loop where it takes it (depthwise and small-channel convolutions,
    whatever its order of summing), else by :func:`convolve`."""
    y = direct(x, w, None, None, geometry._asdict())
    return convolve(x, w, *geometry) if y is None else y


def _rows3(acc: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """``(acc as (N, M, positions), its spatial shape)``."""
    return acc.reshape(*acc.shape[:2], -1), acc.shape[2:]


#: Bound on the int16 columns of one image that :func:`_int_conv` builds (else float32 BLAS).
INT_COLUMNS_BYTES = 1 << 25


def _int_conv(
    x: np.ndarray,
    x_zero: np.ndarray | None,
    w: np.ndarray,
    w_zero: np.ndarray | None,
    geometry: _Geometry,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """The exact int32 convolution of 8-bit X (one zero point) and W, one group, on the int16
    kernel (:func:`onnxflow.ops.integer_gemm.int_product`'s): per image, the columns of X
    less its zero point (the padding reads 0) packed, times W's rows less their zero points
    (:func:`_kept_rows`, unless given). As :func:`_exact_conv`, or None."""
    k = w[0].size
    if not ig.QUANT.PANEL or geometry.group != 1 or k * ig.reach(x, x_zero) * 255 >= 1 << 30:
        return None
    rows = _kept_rows(w, w_zero) if rows is None else rows
    if rows is None:
        return None
    shape = _geometry(
        x.shape,
        w.shape,
        1,
        _tuple(geometry.strides),
        _tuple(geometry.dilations),
        _tuple(geometry.pads),
        geometry.auto_pad,
    )
    out, begin, strides, dilations = shape[:4]
    positions = math.prod(out)
    if 2 * k * positions > INT_COLUMNS_BYTES:
        return None
    shifted = np.empty(x.shape, np.int16)
    zero = np.zeros(1, np.int16) if x_zero is None else x_zero.astype(np.int16).reshape(1)
    ig.QUANT.widen(ig.flat(x), shifted.reshape(-1), 1, x.size, zero)
    one_by_one = tuple(out) == x.shape[2:] and k == w.shape[1] and not any(begin)
    if positions == 1 and one_by_one:  # one pixel: one column, no panels
        acc = np.empty((x.shape[0], w.shape[0], 1), np.int32)
        for image in range(x.shape[0]):
            ig.QUANT.int_column(
                rows, shifted[image].reshape(-1), acc[image, :, 0], w.shape[0], k + k % 2
            )
        return acc, tuple(out)
    pairs, panels = (k + 1) // 2, -(-positions // ig.QUANT.PANEL)
    packed = np.empty(panels * pairs * 2 * ig.QUANT.PANEL, np.int16)
    acc = np.empty((x.shape[0], w.shape[0], panels * ig.QUANT.PANEL), np.int32)
    for image in range(x.shape[0]):
        cols = (
            shifted[image].reshape(k, positions)
            if one_by_one  # a 1x1 kernel at stride 1, unpadded: X's channels are the columns
            else im2col(shifted[image], w.shape[2:], out, strides, dilations, begin)
        )
        ig.QUANT.pack(ig.flat(cols), packed, k, positions)
        ig.QUANT.int_matmul(rows, packed, acc[image].reshape(-1), w.shape[0], panels, pairs)
    return acc, tuple(out)


def _kept_rows(w: np.ndarray, w_zero: np.ndarray | None) -> np.ndarray | None:
    """:func:`_weight_rows`, made once per constant W and zero point."""
    return ig.kept(w, ("rows", ig.by_value(w_zero)), lambda: _weight_rows(w, w_zero))


def _weight_rows(w: np.ndarray, w_zero: np.ndarray | None) -> np.ndarray | None:
    """W's rows less their zero points as int16, each padded to an even length."""
    zero = np.zeros(1, np.int16) if w_zero is None else w_zero.astype(np.int16).reshape(-1)
    if (w_zero is not None and w_zero.dtype != w.dtype) or zero.size not in (1, w.shape[0]):
        return None
    width = w[0].size + w[0].size % 2
    rows = np.empty(w.shape[0] * width, np.int16)
    ig.QUANT.widen(ig.flat(w), rows, w.shape[0], width, zero)
    return rows


@op("ConvInteger", 10, traits=Traits(native=native_form(ig.QUANT and _conv_integer_compiled)))
def conv_integer(
    x: np.ndarray,
    w: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Return the int32 convolution of ``x - x_zero_point`` with ``w - w_zero_point``."""
    check_kernel_shape(kernel_shape, w)
    y = _integer_conv(x, x_zero_point, w, w_zero_point, group, strides, dilations, pads, auto_pad)
    return y.astype(np.int32)


def _integer_conv(x, x_zero, w, w_zero, group, strides, dilations, pads, auto_pad) -> np.ndarray:
    """Return the exact integer convolution of zero-point-shifted 8-bit tensors, as float64."""
    xf = x.astype(np.float64)
    if x_zero is not None:
        if np.size(x_zero) != 1:
            raise ValueError(f"x_zero_point must be a scalar, got shape {np.shape(x_zero)}")
        xf -= float(np.asarray(x_zero).reshape(()))
    wf = w.astype(np.float64)
    if w_zero is not None:
        wf -= _per_channel(w_zero, w.shape[0], "w_zero_point").reshape(-1, *[1] * (w.ndim - 1))
    return convolve(xf, wf, group, strides, dilations, pads, auto_pad)


def _per_channel(value: np.ndarray, m: int, name: str) -> np.ndarray:
    """Return a scalar or per-output-channel quantization parameter as a float64 vector."""
    value = np.asarray(value, dtype=np.float64).reshape(-1)
    if value.size not in (1, m):
        raise ValueError(f"{name} has {value.size} values, expected 1 or {m} (output channels)")
    return value


class _QConvTail(NamedTuple):
    """QLinearConv's requantizing tail, read from its parameters: the int32 bias and the
    float32 scale per output channel (``x_scale * w_scale / y_scale``), Y's zero point, type."""

    bias: np.ndarray
    scale: np.ndarray
    zero: float
    dtype: np.dtype

    def __call__(self, exact: tuple[np.ndarray, tuple[int, ...]]) -> np.ndarray:
        """Y from the exact sums (:func:`_exact_conv`): bias, scale, rounding in one pass."""
        acc, out = exact
        y = np.empty((acc.shape[0], self.bias.shape[0], *out), self.dtype)
        loop = ig.QUANT.requantize_u8 if self.dtype == np.uint8 else ig.QUANT.requantize_i8
        n, positions = acc.shape[0], math.prod(out)
        loop(
            acc.reshape(-1),
            y.reshape(-1),
            self.bias,
            self.scale,
            self.zero,
            n,
            positions,
            acc.shape[2],
        )
        return y


def _qconv_tail(
    x_scale: np.ndarray,
    w_scale: np.ndarray,
    y_scale: np.ndarray,
    y_zero: np.ndarray,
    b: np.ndarray | None,
    m: int,
) -> _QConvTail | None:
    """The tail of a QLinearConv with ``m`` output channels, or None where the compiled loop
    does not take it (Y not 8-bit of one zero point, B not int32 per channel, or so large
    that float32 would round the biased sums)."""
    if y_zero.dtype not in ig.BYTES or y_zero.size != 1:
        return None
    if b is not None and (b.dtype != np.int32 or b.shape != (m,)):
        return None
    if b is not None and int(np.abs(b.astype(np.int64)).max(initial=0)) >= 1 << 30:
        return None
    scale = np.float32(x_scale) * _per_channel(w_scale, m, "w_scale").astype(np.float32)
    scale = np.ascontiguousarray(np.broadcast_to(scale / np.float32(y_scale), (m,)))
    bias = np.zeros(m, np.int32) if b is None else np.ascontiguousarray(b)
    return _QConvTail(bias, scale, float(y_zero.reshape(())), y_zero.dtype)


#: The most taps a depthwise kernel of :func:`_qdepthwise` has (its int32 sums stay exact).
DEPTHWISE_MAX_TAPS = 4096


def _depthwise_taps(w: np.ndarray, w_zero: np.ndarray | None) -> np.ndarray | None:
    """W's taps less their zero points (one, or one per output channel) as int32, for
    :func:`_qdepthwise` (one input channel per group); None for another W."""
    zero = np.zeros(1, np.int32) if w_zero is None else w_zero.astype(np.int32).reshape(-1)
    if w.ndim not in (3, 4) or w.shape[1] != 1 or w[0].size > DEPTHWISE_MAX_TAPS:
        return None
    if w.dtype not in ig.BYTES or zero.size not in (1, w.shape[0]):
        return None
    if w_zero is not None and w_zero.dtype != w.dtype:
        return None
    return (w.reshape(w.shape[0], -1).astype(np.int32) - zero.reshape(-1, 1)).reshape(-1)


@functools.lru_cache(maxsize=256)
def _depthwise_grid(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], geometry: tuple[Any, ...]
) -> np.ndarray | None:
    """The geometry :func:`_qdepthwise`'s loop reads (``_quant.h``), a 1-D convolution as a
    2-D one of height 1; None where an axis is empty."""
    group, strides, dilations, pads, auto_pad = geometry
    shape = _geometry(x_shape, w_shape, group, strides, dilations, pads, auto_pad)
    if 0 in (*x_shape, *w_shape, *shape.out):
        return None
    lift = 4 - len(x_shape)  # a 1-D convolution: height 1, stride and dilation 1, no pad

    def pair(values: Sequence[int], first: int = 1) -> list[int]:
        return [first] * lift + list(values)

    grid = [x_shape[1], w_shape[0] // x_shape[1], *pair(x_shape[2:]), *pair(w_shape[2:])]
    grid += [*pair(shape.out), *pair(shape.strides), *pair(shape.dilations)]
    return np.array([*grid, *pair(shape.begin, 0)], np.intp)


def _qdepthwise(
    x: np.ndarray,
    x_zero: np.ndarray,
    w: np.ndarray,
    taps: np.ndarray | None,
    tail: _QConvTail,
    geometry: _Geometry,
) -> np.ndarray | None:
    """A QLinearConv of one input channel per group (depthwise, channel multiplier allowed),
    1-D or 2-D, X and Y of one 8-bit type, by one compiled loop: exact int32 sums of X less
    its zero point (``taps``: :func:`_depthwise_taps`), requantized by ``tail``'s operations
    row by row. None where it does not take the node."""
    if taps is None or x.dtype != tail.dtype or x.ndim != w.ndim or x_zero.size != 1:
        return None
    if geometry.group != x.shape[1] or ig.reach(x, x_zero) > 255:
        return None
    key = tuple(None if v is None else tuple(v) if isinstance(v, list) else v for v in geometry)
    grid = _depthwise_grid(x.shape, w.shape, key)
    if grid is None:
        return None
    y = np.empty((x.shape[0], w.shape[0], *grid[6:8][4 - x.ndim :]), tail.dtype)
    zx = int(x_zero.reshape(()))
    ig.QUANT.qlinear_depthwise(
        ig.flat(x), y.reshape(-1), taps, tail.bias, tail.scale, tail.zero, zx, grid, x.shape[0]
    )
    return y


def qlinear_conv_compiled(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """QLinearConv's compiled form: the exact convolution (:func:`_exact_conv`), then bias,
    scale and rounding in one pass (:class:`_QConvTail`); else the NumPy form."""
    check_kernel_shape(kernel_shape, w)
    geometry = _Geometry(group, strides, dilations, pads, auto_pad)
    tail = _qconv_tail(x_scale, w_scale, y_scale, y_zero_point, b, w.shape[0])
    if tail is not None and w.shape[1] == 1:
        taps = ig.kept(
            w, ("taps", ig.by_value(w_zero_point)), lambda: _depthwise_taps(w, w_zero_point)
        )
        y = _qdepthwise(x, x_zero_point, w, taps, tail, geometry)
        if y is not None:
            return y
    exact = None if tail is None else _exact_conv(x, x_zero_point, w, w_zero_point, geometry)
    if tail is None or exact is None:
        inputs = (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b)
        return qlinear_conv(*inputs, kernel_shape=kernel_shape, **geometry._asdict())
    return tail(exact)


def _pixel_form(
    x_zero: np.ndarray,
    w: np.ndarray,
    rows: np.ndarray | None,
    tail: _QConvTail,
    geometry: _Geometry,
) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """For a QLinearConv of a 1x1 kernel, unpadded, one group (W's int16 ``rows`` made), a
    function that computes it in one compiled call where X is one pixel (a squeeze-excite
    block's convolutions): the exact int32 column product, then the tail's operations; it
    returns None for another X. None for another node."""
    if rows is None or w[0].size != w.shape[1] or any(geometry.pads or ()):
        return None
    if x_zero.dtype not in ig.BYTES or w.shape[1] * 255 * 255 >= 1 << 30:
        return None
    zx, width, loop = int(x_zero.reshape(())), rows.size // w.shape[0], ig.QUANT.qlinear_pixel

    def pixel(x: np.ndarray) -> np.ndarray | None:
        if x.dtype != tail.dtype or x.ndim != w.ndim or math.prod(x.shape[2:]) != 1:
            return None
        if x.shape[1] != w.shape[1]:
            return None
        y = np.empty((x.shape[0], w.shape[0], *x.shape[2:]), tail.dtype)
        loop(
            ig.flat(x), y.reshape(-1), rows, tail.bias, tail.scale, tail.zero, zx, x.shape[0], width
        )
        return y

    return pixel


def qlinear_conv_prepare(
    constants: tuple[np.ndarray | None, ...],
    kernel_shape: list[int] | None = None,
    **geometry: Any,
) -> Callable[..., np.ndarray] | None:
    """QLinearConv's compiled form made for a node whose inputs other than X are constants:
    the requantizing tail and W's rows for the int16 kernel read once, at compile time; None
    where an input besides X is fed or the tail does not take them."""
    if len(constants) < 8 or any(c is None for c in constants[1:]):
        return None
    x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, *b = constants[1:]
    try:
        check_kernel_shape(kernel_shape, w)
        tail = _qconv_tail(x_scale, w_scale, y_scale, y_zero, b[0] if b else None, w.shape[0])
    except ValueError:  # the form the node runs raises it, naming the node
        return None
    if tail is None or x_zero.size != 1 or w.dtype not in ig.BYTES:
        return None
    shape = _Geometry(**geometry)
    rows = _kept_rows(w, w_zero) if shape.group == 1 else None
    taps = _depthwise_taps(w, w_zero)
    pixel = _pixel_form(x_zero, w, rows, tail, shape)

    def prepared(x: np.ndarray, *others: np.ndarray | None) -> np.ndarray:
        if taps is not None:
            y = _qdepthwise(x, x_zero, w, taps, tail, shape)
        else:
            y = None if pixel is None else pixel(x)
        if y is not None:
            return y
        exact = _exact_conv(x, x_zero, w, w_zero, shape, rows)
        if exact is None:
            return qlinear_conv_compiled(x, *others, kernel_shape=kernel_shape, **shape._asdict())
        return tail(exact)

    prepared.__name__ = prepared.__qualname__ = "qlinear_conv_prepared"
    return prepared


@op(
    "QLinearConv",
    10,
    traits=Traits(
        native=native_form(ig.QUANT and qlinear_conv_compiled, prepare=qlinear_conv_prepare)
    ),
)
def qlinear_conv(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Return the quantized convolution, requantized to y_scale / y_zero_point (x's type)."""
    check_kernel_shape(kernel_shape, w)
    acc = _integer_conv(x, x_zero_point, w, w_zero_point, group, strides, dilations, pads, auto_pad)
    acc = _add_bias(acc, b)
    m = w.shape[0]
    scale = np.float32(x_scale) * _per_channel(w_scale, m, "w_scale").astype(np.float32)
    scale = (scale / np.float32(y_scale)).reshape(-1, *[1] * (acc.ndim - 2))
    from onnxflow.ops.quantization import store_quantized  # the quantization family's rounding

    return store_quantized(acc.astype(np.float32) * scale, y_zero_point, y_zero_point.dtype, True)


@op("DeformConv", 19, 22)
def deform_conv(
    x: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    b: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    *,
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    offset_group: int = 1,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Return the N-d deformable convolution: each tap samples X (multilinearly, zero outside)
    at its grid position plus its learned offset, scaled by the mask, before the GEMM."""
    check_kernel_shape(kernel_shape, w)
    n, c, *spatial = x.shape
    m, cg, *kernel = w.shape
    rank, taps = len(spatial), math.prod(kernel)
    if cg * group != c or m % group or c % offset_group:
        raise ValueError(
            f"X has {c} channels and W shape {w.shape}: expected W.shape[1] * group ({group}) == C "
            f"and C divisible by offset_group ({offset_group})"
        )
    out, begin, _ = spatial_geometry(spatial, kernel, strides, dilations, pads, "NOTSET")
    dtype = float_compute_dtype(x.dtype)
    off = offset.astype(dtype, copy=False).reshape(n, offset_group, taps, rank, *out)
    scale = None if mask is None else mask.astype(dtype).reshape(n, offset_group, taps, 1, *out)
    xg = x.astype(dtype, copy=False).reshape(n, offset_group, c // offset_group, math.prod(spatial))
    steps = per_axis(strides, rank, "strides")
    starts = [np.arange(o) * s - p for o, s, p in zip(out, steps, begin)]
    grid = np.meshgrid(*starts, indexing="ij")
    cols = _deformed_columns(xg, spatial, kernel, grid, dilations, off, scale)
    wm = w.astype(dtype, copy=False).reshape(group, m // group, -1)
    y = np.empty((n, m, math.prod(out)), dtype)  # sizes spelt out: N or C may be 0
    for i in range(n):
        y[i] = grouped_gemm(wm, cols[i].reshape(c * taps, math.prod(out)))
    return _add_bias(y.reshape(n, m, *out), b).astype(x.dtype, copy=False)


def _deformed_columns(
    xg: np.ndarray,
    spatial: Sequence[int],
    kernel: Sequence[int],
    grid: list[np.ndarray],
    dilations: Sequence[int] | None,
    off: np.ndarray,
    scale: np.ndarray | None,
) -> np.ndarray:
    """Return the columns ``(N, G, C/G, K, *out)`` of a deformable convolution: tap ``k`` samples
    ``xg`` at ``grid + k * dilation + offset[k]``, times ``scale[k]`` when a mask is given."""
    n, offset_group, cg, _ = xg.shape
    rank = len(spatial)
    dilations = per_axis(dilations, rank, "dilations")
    cols = np.empty((n, offset_group, cg, math.prod(kernel), *grid[0].shape), dtype=xg.dtype)
    for tap, index in enumerate(np.ndindex(*kernel)):
        pos = [off[:, :, tap, i] + (grid[i] + index[i] * dilations[i]) for i in range(rank)]
        sampled = _sample(xg, spatial, pos)
        cols[:, :, :, tap] = sampled if scale is None else sampled * scale[:, :, tap]
    return cols


def _sample(xg: np.ndarray, spatial: Sequence[int], pos: list[np.ndarray]) -> np.ndarray:
    """Return ``xg`` ``(N, G, C, prod(spatial))`` interpolated multilinearly at positions
    ``pos[i]`` ``(N, G, *out)`` per axis, as ``(N, G, C, *out)``; outside samples are zero."""
    n, g, c, _ = xg.shape
    out = pos[0].shape[2:]
    positions = math.prod(out)  # not -1: NumPy cannot infer it for an empty batch
    low = [np.floor(p) for p in pos]
    total = np.zeros((n, g, c, positions), dtype=xg.dtype)
    for corner in np.ndindex(*[2] * len(spatial)):
        weight = np.ones(pos[0].shape, dtype=xg.dtype)
        flat = np.zeros(pos[0].shape, dtype=np.int64)
        for bit, p, lo, size in zip(corner, pos, low, spatial):
            idx = lo + bit
            weight *= (p - lo if bit else 1 - (p - lo)) * ((idx >= 0) & (idx < size))
            flat = flat * size + np.clip(idx, 0, size - 1).astype(np.int64)
        values = np.take_along_axis(xg, flat.reshape(n, g, 1, positions), axis=3)
        total += values * weight.reshape(n, g, 1, positions)
    return total.reshape(n, g, c, *out)


@op("CausalConvWithState", 27)
def causal_conv_with_state(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    past_state: np.ndarray | None = None,
    *,
    activation: str = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """Return the causal depthwise 1-d convolution of ``past_state ++ x`` (optionally SiLU'd)
    and the new state: the last ``k - 1`` positions of that concatenation."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"activation must be 'none', 'silu' or 'swish', got {activation!r}")
    batch, channels, length = x.shape
    k = weight.shape[-1]
    if weight.shape != (channels, 1, k):
        raise ValueError(f"weight has shape {weight.shape}, expected ({channels}, 1, k)")
    dtype = float_compute_dtype(x.dtype)
    if past_state is None:
        past = np.zeros((batch, channels, k - 1), dtype=dtype)
    else:
        past = past_state.astype(dtype, copy=False)
    seq = np.concatenate([past, x.astype(dtype, copy=False)], axis=2)
    taps = weight.astype(dtype, copy=False)[:, 0]
    y = np.zeros((batch, channels, length), dtype=dtype)
    for j in range(k):
        y += taps[:, j, None] * seq[:, :, j : j + length]
    y = _add_bias(y, bias)
    if activation != "none":
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype, copy=False), seq[:, :, seq.shape[2] - (k - 1) :].astype(x.dtype)
