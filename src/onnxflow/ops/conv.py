"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, CausalConvWithState,
Col2Im.

All work on channels-first tensors ``(N, C, D1, ..., Dn)`` of any spatial rank. A convolution is
an im2col (one strided copy per kernel element, from the unpadded input, into a ``(C, K, *out)``
column buffer zeroed only where windows reach into the padding, built per image in chunks of
output rows) followed by one GEMM per group (a plain GEMM for 1x1 kernels);
ConvTranspose and Col2Im are the reverse: a GEMM, then a scatter-add of the columns into the
image ("fold"). float16 and bfloat16 are computed in float32
and rounded back once; integer convolutions accumulate in float64, which is exact for 8-bit
operands (every partial sum stays far below 2**53).

The window geometry helpers (:func:`spatial_geometry`, :func:`kernel_views`, :func:`pad_spatial`)
are shared with :mod:`onnxflow.ops.pool`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.registry import op
from onnxflow.traits import Traits

_SAME = ("SAME_UPPER", "SAME_LOWER")


# -- geometry shared with pooling ---------------------------------------------------------------
def spatial_geometry(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: int = 0,
) -> tuple[list[int], list[int], list[int]]:
    """Return ``(output sizes, begin pads, end pads)`` of a sliding window over ``spatial``."""
    n = len(spatial)
    strides = _per_axis(strides, n, "strides")
    dilations = _per_axis(dilations, n, "dilations")
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in _SAME:
        return _same_geometry(spatial, extent, strides, auto_pad)
    if auto_pad == "VALID":
        out = [(size - e) // s + 1 for size, e, s in zip(spatial, extent, strides)]
        return out, [0] * n, [0] * n
    if auto_pad not in ("NOTSET", ""):
        raise ValueError(
            f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}"
        )
    pads = _per_axis(pads, 2 * n, "pads", fill=0)
    begin, end = list(pads[:n]), list(pads[n:])
    out = [_explicit_size(*axis, ceil_mode) for axis in zip(spatial, extent, strides, begin, end)]
    return out, begin, end


def _same_geometry(
    spatial: Sequence[int], extent: list[int], strides: list[int], auto_pad: str
) -> tuple[list[int], list[int], list[int]]:
    """Output sizes and pads for SAME_UPPER / SAME_LOWER: the output is ceil(size / stride)."""
    out = [-(-size // s) for size, s in zip(spatial, strides)]
    total = [max(0, (o - 1) * s + e - size) for o, s, e, size in zip(out, strides, extent, spatial)]
    begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
    return out, begin, [t - b for t, b in zip(total, begin)]


def _explicit_size(size: int, e: int, s: int, b: int, a: int, ceil_mode: int) -> int:
    """The output size of one axis of ``size`` with explicit pads ``b`` and ``a``, window extent
    ``e`` and stride ``s``."""
    span = size + b + a - e
    if span < 0:
        raise ValueError(f"kernel extent {e} exceeds the padded input size {size + b + a}")
    o = -(-span // s) + 1 if ceil_mode else span // s + 1
    if ceil_mode and (o - 1) * s >= size + b:
        o -= 1  # a window may not start in the end padding
    return o


def _per_axis(values: Sequence[int] | None, n: int, name: str, fill: int = 1) -> list[int]:
    if values is None:
        return [fill] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} values, expected {n}")
    return list(values)


def pad_spatial(
    x: np.ndarray, begin: Sequence[int], end: Sequence[int], value: float = 0
) -> np.ndarray:
    """Return ``x`` padded with ``value`` on its spatial axes (axes 2...), or ``x`` itself."""
    if not any(begin) and not any(end):
        return x
    if min(*begin, *end) < 0:
        raise ValueError(f"pads must be non-negative, got {list(begin) + list(end)}")
    # np.pad would do the same at 1.5-2x the cost: fill only the border, copy the interior once
    lead = x.shape[:2]
    y = np.empty((*lead, *(n + b + e for n, b, e in zip(x.shape[2:], begin, end))), x.dtype)
    for axis, (b, e) in enumerate(zip(begin, end)):
        before = (slice(None),) * (axis + 2)
        if b:
            y[(*before, slice(0, b))] = value
        if e:
            y[(*before, slice(y.shape[axis + 2] - e, None))] = value
    y[(..., *(slice(b, b + n) for n, b in zip(x.shape[2:], begin)))] = x
    return y


def kernel_views(
    xp: np.ndarray,
    kernel: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """Yield ``(kernel index, view (N, C, *out))`` for each kernel element over padded ``xp``."""
    n = len(kernel)
    strides = _per_axis(strides, n, "strides")
    dilations = _per_axis(dilations, n, "dilations")
    for index in np.ndindex(*kernel):
        window = tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, o, s in zip(index, dilations, out, strides)
        )
        yield index, xp[(..., *window)]


# -- shared convolution core --------------------------------------------------------------------
class _Geometry(NamedTuple):
    """How one convolution runs, decided once per shapes and attributes (:func:`_geometry`)."""

    out: tuple[int, ...]
    begin: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    path: str  # pointwise, depthwise, taps or columns


@functools.lru_cache(maxsize=2048)
def _geometry(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    group: int,
    strides: tuple[int, ...] | None,
    dilations: tuple[int, ...] | None,
    pads: tuple[int, ...] | None,
    auto_pad: str,
) -> _Geometry:
    """The output geometry and the path of a convolution of X ``x_shape`` by W ``w_shape``:
    a model runs the same few convolutions again and again, so this is remembered (errors are
    raised every time)."""
    _, c, *spatial = x_shape
    m, _, *kernel = w_shape
    _check_conv_shapes(x_shape, w_shape, group)
    out, begin, end = spatial_geometry(spatial, kernel, strides, dilations, pads, auto_pad)
    strides_ = _per_axis(strides, len(kernel), "strides")
    dilations_ = _per_axis(dilations, len(kernel), "dilations")
    shared = (tuple(out), tuple(begin), tuple(strides_), tuple(dilations_))  # shared: immutable
    if math.prod(kernel) == 1 and not any(begin + end) and all(s == 1 for s in strides_):
        return _Geometry(*shared, "pointwise")
    if min(*begin, *end) < 0:
        raise ValueError(f"pads must be non-negative, got {list(begin) + list(end)}")
    if group == c == m:  # depthwise: no columns, no product
        path = "depthwise"
    elif _by_taps(c, m, group, kernel, out, strides_):
        path = "taps"
    else:
        path = "columns"
    return _Geometry(*shared, path)


def _tuple(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _conv(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
) -> np.ndarray:
    """Return the convolution of ``x`` with ``w`` (no bias), in x's dtype."""
    out, begin, strides, dilations, path = _geometry(
        x.shape, w.shape, group, _tuple(strides), _tuple(dilations), _tuple(pads), auto_pad
    )
    m = w.shape[0]
    if path == "pointwise":
        return _pointwise_conv(x, w.reshape(group, m // group, -1), m, out)
    if path == "depthwise":
        return _depthwise(x, w, out, strides, dilations, begin)
    if path == "taps":
        return _tap_products(x, w, out, dilations, begin)
    return _by_columns(x, w, group, out, strides, dilations, begin)


def _by_columns(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
) -> np.ndarray:
    """The convolution as GEMMs over im2col columns, per image in chunks of output rows."""
    n, c = x.shape[:2]
    m, kernel = w.shape[0], w.shape[2:]
    wm = w.reshape(group, m // group, -1)
    row_bytes = c * math.prod(kernel) * math.prod(out[1:]) * x.itemsize
    step = max(1, _CHUNK_BYTES // row_bytes)
    if n == 1 and step >= out[0]:  # one image in one chunk: the product is the output
        cols = _im2col(x[0], kernel, out, strides, dilations, begin)
        return _grouped_gemm(wm, cols).reshape(1, m, *out)
    y = np.empty((n, m, *out), dtype=x.dtype)
    for b in range(n):
        for r0 in range(0, out[0], step):
            r1 = min(out[0], r0 + step)
            cols = _im2col(x[b], kernel, [r1 - r0, *out[1:]], strides, dilations, begin, r0)
            y[b, :, r0:r1] = _grouped_gemm(wm, cols).reshape(m, r1 - r0, *out[1:])
    return y


#: A 2-D stride-1 convolution of at least this many output positions sums one product per
#: kernel tap when its columns would cost more to copy than the sums cost to add.
TAP_PRODUCTS_MIN_POSITIONS = 1024


def _by_taps(
    c: int, m: int, group: int, kernel: Sequence[int], out: Sequence[int], strides: Sequence[int]
) -> bool:
    """Whether :func:`_tap_products` serves this convolution: one group, two spatial axes,
    stride 1, several taps, many positions, and C * K column copies outweighing M * (K - 1)
    added outputs."""
    taps = math.prod(kernel)
    return (
        group == 1
        and len(kernel) == 2
        and all(s == 1 for s in strides)
        and taps > 1
        and math.prod(out) >= TAP_PRODUCTS_MIN_POSITIONS
        and c * taps > m * (taps - 1)
    )


def _tap_products(
    x: np.ndarray,
    w: np.ndarray,
    out: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
) -> np.ndarray:
    """A 2-D stride-1 convolution as a sum over the kernel taps of ``W[:, :, i, j] @ X``
    shifted: on the padded image flattened row by row, each tap's window of ``Ho`` rows is one
    strided view that BLAS reads in place (its rows carry ``Wp - Wo`` columns past the output,
    dropped at the end), so no column matrix is copied."""
    n, c, height, width = x.shape
    m, _, kh, kw = w.shape
    (ho, wo), (dh, dw) = out, dilations
    hp, wp = ho + (kh - 1) * dh, wo + (kw - 1) * dw
    padded = np.zeros((n, c, hp + 1, wp), x.dtype)  # a spare row for the last tap's window
    rows, cols = min(height, hp - begin[0]), min(width, wp - begin[1])
    padded[:, :, begin[0] : begin[0] + rows, begin[1] : begin[1] + cols] = x[:, :, :rows, :cols]
    flat = padded.reshape(n, c, -1)
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1))
    span = ho * wp
    y = np.empty((n, m, ho, wo), x.dtype)
    acc, term = np.empty((m, span), x.dtype), np.empty((m, span), x.dtype)
    for b in range(n):
        for k, (i, j) in enumerate(np.ndindex(kh, kw)):
            start = i * dh * wp + j * dw
            np.matmul(taps[i, j], flat[b, :, start : start + span], out=term if k else acc)
            if k:
                acc += term
        y[b] = acc.reshape(m, ho, wp)[:, :, :wo]
    return y


#: Bound on the columns of one block of channels in :func:`_depthwise` (cache-sized: the block is
#: copied once and read once by its product).
_DEPTHWISE_CHUNK_BYTES = 1 << 20


def _depthwise(
    x: np.ndarray,
    w: np.ndarray,
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
) -> np.ndarray:
    """A depthwise convolution (one filter per channel): each block of channels copies its
    windows ``(C, K, P)`` out of one strided view of the padded input, then one batched
    product ``(C, 1, K) @ (C, K, P)`` weighs them. Two passes over the columns instead of two
    NumPy calls per kernel tap over the output (about half the time on MobileNet-style
    layers)."""
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    xp = pad_spatial(x, begin, _reach(x.shape[2:], kernel, out, strides, dilations, begin))
    taps, positions = math.prod(kernel), math.prod(out)
    weights = w.reshape(c, 1, taps)
    y = np.empty((n, c, 1, positions), x.dtype)
    step = max(1, _DEPTHWISE_CHUNK_BYTES // (taps * positions * x.itemsize))
    block = np.empty((min(step, c), *kernel, *out), x.dtype)
    for b in range(n):
        view = _windows_view(xp[b], kernel, out, strides, dilations)
        for c0 in range(0, c, step):
            c1 = min(c, c0 + step)
            cols = block[: c1 - c0]
            np.copyto(cols, view[c0:c1])
            np.matmul(weights[c0:c1], cols.reshape(c1 - c0, taps, positions), out=y[b, c0:c1])
    return y.reshape(n, c, *out)


def _reach(
    spatial: Sequence[int],
    kernel: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    origin: Sequence[int] | None = None,
) -> list[int]:
    """How far past the end of each spatial axis the windows of the output positions
    ``origin .. origin + out`` reach (0 where they stay inside): the end padding they need."""
    origin = origin or [0] * len(out)
    return [
        max(0, (o0 + o - 1) * s + (k - 1) * d + 1 - b - size)
        for o0, o, s, k, d, b, size in zip(origin, out, strides, kernel, dilations, begin, spatial)
    ]


def _windows_view(
    xp: np.ndarray,
    kernel: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> np.ndarray:
    """The read-only view ``(C, *kernel, *out)`` of a padded image ``xp`` ``(C, *spatial)``
    whose element ``[c, *k, *o]`` is ``xp[c, *(o * s + k * d)]``."""
    step = xp.strides[1:]
    return np.lib.stride_tricks.as_strided(
        xp,
        shape=(xp.shape[0], *kernel, *out),
        strides=(
            xp.strides[0],
            *(st * d for st, d in zip(step, dilations)),
            *(st * s for st, s in zip(step, strides)),
        ),
        writeable=False,
    )


def _check_conv_shapes(x: tuple[int, ...], w: tuple[int, ...], group: int) -> None:
    """X is (N, C, *spatial) and W (M, C / group, *kernel), with M divisible by ``group``."""
    if len(x) != len(w) or len(x) < 3:
        raise ValueError(f"X has shape {x} and W {w}: expected equal spatial ranks >= 1")
    if w[1] * group != x[1] or w[0] % group:
        raise ValueError(
            f"X has {x[1]} channels and W shape {w} with group={group}: expected "
            f"W.shape[1] * group == C and W.shape[0] divisible by group"
        )


def _pointwise_conv(x: np.ndarray, wm: np.ndarray, m: int, out: list[int]) -> np.ndarray:
    """A 1x1 convolution with stride 1 and no padding: one GEMM per image."""
    n, c = x.shape[:2]
    if n == 1:  # the product is the output: no copy into a preallocated one
        return _grouped_gemm(wm, x[0].reshape(c, -1)).reshape(1, m, *out)
    y = np.empty((n, m, *out), dtype=x.dtype)
    for b in range(n):
        y[b] = _grouped_gemm(wm, x[b].reshape(c, -1)).reshape(m, *out)
    return y


#: Bound on one im2col buffer. Below glibc's largest mmap threshold (32 MiB) the buffer is reused
#: from the heap instead of being page-faulted in afresh on every call (that alone costs as much as
#: the GEMM for a VGG-sized layer); yet big enough that a layer takes few GEMM calls, since each
#: multithreaded BLAS call stalls when the CPU is oversubscribed.
_CHUNK_BYTES = 1 << 24


def _im2col(
    x: np.ndarray,
    kernel: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    row0: int = 0,
) -> np.ndarray:
    """Return the columns ``(C * K, P)`` of one image ``x`` ``(C, *spatial)`` for the output
    rows ``row0 ..`` (axis 0) of sizes ``out``: zero where a window reaches into the padding
    (``begin`` before each axis, as much as needed after it), which is never built."""
    taps = math.prod(kernel)
    if not row0 and x.shape[0] * taps * math.prod(out) <= GATHER_COLUMNS:
        geometry = tuple(tuple(v) for v in (kernel, out, strides, dilations, begin))
        return _gathered_columns(x, geometry)
    if taps > _FEW_TAPS:
        return _strided_columns(x, kernel, out, strides, dilations, begin, row0)
    cols = np.empty((x.shape[0], taps, *out), dtype=x.dtype)
    origin = [row0] + [0] * (len(out) - 1)
    for tap, index in enumerate(np.ndindex(*kernel)):
        _window(cols[:, tap], x, index, out, strides, dilations, begin, origin)
    return cols.reshape(x.shape[0] * taps, -1)


#: Column matrices of at most this many elements are gathered with one remembered index
#: (:func:`_gathered_columns`): for small convolutions, a tap-by-tap fill is mostly Python.
GATHER_COLUMNS = 16384


def _gathered_columns(x: np.ndarray, geometry: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """:func:`_im2col` of one image ``x`` ``(C, *spatial)`` (``geometry``: its kernel, out,
    strides, dilations and begin) as one gather from x, flattened with a zero after it (what
    windows read of the padding)."""
    index = _column_index(x.shape, *geometry)
    flat = np.empty(x.size + 1, x.dtype)
    flat[:-1] = x.reshape(-1)
    flat[-1] = 0
    return flat.take(index)


@functools.lru_cache(maxsize=256)
def _column_index(
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    out: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    begin: tuple[int, ...],
) -> np.ndarray:
    """The ``(C * K, P)`` flat positions in an image of ``shape`` (then one zero) that its
    im2col columns read: the zero's position where a window reaches into the padding."""
    c, *spatial = shape
    grids = np.meshgrid(
        *(np.arange(k) for k in kernel), *(np.arange(o) for o in out), indexing="ij"
    )
    n = len(kernel)
    flat = np.zeros(grids[0].shape, np.intp)
    inside = np.ones(grids[0].shape, bool)
    for axis in range(n):
        at = grids[n + axis] * strides[axis] + grids[axis] * dilations[axis] - begin[axis]
        inside &= (at >= 0) & (at < spatial[axis])
        flat = flat * spatial[axis] + at
    size = math.prod(spatial)
    per_channel = np.where(inside, flat, -1).reshape(1, -1)
    channels = np.arange(c).reshape(-1, 1) * size
    index = np.where(per_channel >= 0, channels + per_channel, c * size)
    index = index.reshape(c * math.prod(kernel), math.prod(out))
    index.flags.writeable = False
    return index


#: Up to this many kernel taps, columns are filled one tap at a time (no padded copy of the
#: input); beyond it (long 1-D kernels such as an STFT's 256 taps), one strided view of the
#: padded input is copied at once instead of looping in Python over the taps.
_FEW_TAPS = 27


def _strided_columns(
    x: np.ndarray,
    kernel: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    row0: int,
) -> np.ndarray:
    """:func:`_im2col` as one copy of a strided view ``(C, *kernel, *out)`` of ``x`` padded
    with zeros as far as the windows reach."""
    origin = [row0] + [0] * (len(out) - 1)
    reach = _reach(x.shape[1:], kernel, out, strides, dilations, begin, origin)
    xp = pad_spatial(x[None], begin, reach)[0]
    start = xp[(slice(None), *(slice(o0 * s, None) for o0, s in zip(origin, strides)))]
    view = _windows_view(start, kernel, out, strides, dilations)
    return view.reshape(x.shape[0] * math.prod(kernel), -1)


def _window(
    dst: np.ndarray,
    x: np.ndarray,
    index: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    origin: Sequence[int],
) -> None:
    """Fill ``dst`` ``(C, *out)`` with what kernel element ``index`` sees of ``x`` ``(C,
    *spatial)`` at each output position (``origin`` + position), 0 outside ``x``."""
    src, inside = [], []
    for k, o, s, d, b, size, o0 in zip(index, out, strides, dilations, begin, x.shape[1:], origin):
        first = o0 * s + k * d - b  # the input index output position 0 reads on this axis
        lo, hi = max(0, -(first // s)), min(o, (size - 1 - first) // s + 1)
        if hi <= lo:  # the tap sees only padding
            dst[...] = 0
            return
        src.append(slice(first + lo * s, first + (hi - 1) * s + 1, s))
        inside.append(slice(lo, hi))
    dst[(slice(None), *inside)] = x[(slice(None), *src)]
    for axis, (part, o) in enumerate(zip(inside, out)):  # the border, one axis at a time
        before = (slice(None), *inside[:axis])
        if part.start:
            dst[(*before, slice(0, part.start))] = 0
        if part.stop < o:
            dst[(*before, slice(part.stop, None))] = 0


def _grouped_gemm(wm: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Return ``(M, P)`` from weights ``(G, M/G, C/G*K)`` and one image's columns ``(C*K, P)``."""
    group = wm.shape[0]
    if group == 1:
        return wm[0] @ cols
    cols = cols.reshape(group, -1, cols.shape[-1])
    if wm.shape[1] == 1:  # depthwise: a weighted sum of each group's rows
        return np.einsum("gk,gkp->gp", wm[:, 0], cols)
    return np.matmul(wm, cols).reshape(-1, cols.shape[-1])


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is not None:
        if b.shape != (y.shape[1],):
            raise ValueError(f"B has shape {b.shape}, expected ({y.shape[1]},)")
        y += b.astype(y.dtype, copy=False).reshape(-1, *[1] * (y.ndim - 2))
    return y


# -- kernels ------------------------------------------------------------------------------------
@op("Conv", 1, 11, 22, traits=Traits(fresh=True, rounds_once=True))
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
    _check_kernel_shape(kernel_shape, w)
    dtype = float_compute_dtype(x.dtype)
    y = _conv(
        x.astype(dtype, copy=False),
        w.astype(dtype, copy=False),
        group,
        strides,
        dilations,
        pads,
        auto_pad,
    )
    return _add_bias(y, b).astype(x.dtype, copy=False)


def _check_kernel_shape(kernel_shape: list[int] | None, w: np.ndarray) -> None:
    if kernel_shape is not None and list(kernel_shape) != list(w.shape[2:]):
        raise ValueError(f"kernel_shape {kernel_shape} does not match W's shape {w.shape}")


@op("ConvTranspose", 1, 11, 22)
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
    _check_kernel_shape(kernel_shape, w)
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
    wt = w.astype(dtype, copy=False).reshape(group, cg, -1).transpose(0, 2, 1)
    xg = x.astype(dtype, copy=False).reshape(n, group, cg, -1)
    cols = np.matmul(wt, xg).reshape(n, group * mg, math.prod(kernel), *spatial)
    y = _fold(cols, kernel, strides, dilations, begin, size)
    return _add_bias(y, b).astype(x.dtype, copy=False)


def _transpose_geometry(
    spatial, kernel, strides, dilations, pads, auto_pad, output_padding, output_shape
) -> tuple[list[int], list[int]]:
    """Return ``(begin pads, output sizes)`` of a ConvTranspose."""
    n = len(spatial)
    strides = _per_axis(strides, n, "strides")
    dilations = _per_axis(dilations, n, "dilations")
    extra = _per_axis(output_padding, n, "output_padding", fill=0)
    full = [
        s * (i - 1) + a + (k - 1) * d + 1
        for s, i, a, k, d in zip(strides, spatial, extra, kernel, dilations)
    ]
    if output_shape is not None or auto_pad in _SAME:
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
    pads = _per_axis(pads, 2 * n, "pads", fill=0)
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
    strides = _per_axis(strides, rank, "strides")
    dilations = _per_axis(dilations, rank, "dilations")
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


@op("ConvInteger", 10)
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
    _check_kernel_shape(kernel_shape, w)
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
    return _conv(xf, wf, group, strides, dilations, pads, auto_pad)


def _per_channel(value: np.ndarray, m: int, name: str) -> np.ndarray:
    """Return a scalar or per-output-channel quantization parameter as a float64 vector."""
    value = np.asarray(value, dtype=np.float64).reshape(-1)
    if value.size not in (1, m):
        raise ValueError(f"{name} has {value.size} values, expected 1 or {m} (output channels)")
    return value


@op("QLinearConv", 10)
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
    _check_kernel_shape(kernel_shape, w)
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
    _check_kernel_shape(kernel_shape, w)
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
    xg = x.astype(dtype, copy=False).reshape(n, offset_group, c // offset_group, -1)
    steps = _per_axis(strides, rank, "strides")
    starts = [np.arange(o) * s - p for o, s, p in zip(out, steps, begin)]
    grid = np.meshgrid(*starts, indexing="ij")
    cols = _deformed_columns(xg, spatial, kernel, grid, dilations, off, scale)
    wm = w.astype(dtype, copy=False).reshape(group, m // group, -1)
    y = np.stack([_grouped_gemm(wm, cols[i].reshape(c * taps, -1)) for i in range(n)])
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
    dilations = _per_axis(dilations, rank, "dilations")
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
    low = [np.floor(p) for p in pos]
    total = np.zeros((n, g, c, math.prod(out)), dtype=xg.dtype)
    for corner in np.ndindex(*[2] * len(spatial)):
        weight = np.ones(pos[0].shape, dtype=xg.dtype)
        flat = np.zeros(pos[0].shape, dtype=np.int64)
        for bit, p, lo, size in zip(corner, pos, low, spatial):
            idx = lo + bit
            weight *= (p - lo if bit else 1 - (p - lo)) * ((idx >= 0) & (idx < size))
            flat = flat * size + np.clip(idx, 0, size - 1).astype(np.int64)
        values = np.take_along_axis(xg, flat.reshape(n, g, 1, -1), axis=3)
        total += values * weight.reshape(n, g, 1, -1)
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
