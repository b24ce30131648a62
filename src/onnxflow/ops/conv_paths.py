"""The ways onnxflow computes a convolution of ``X (N, C, *spatial)`` by ``W (M, C / group,
*kernel)`` (no bias), and the choice among them, made once per shapes and attributes: one GEMM
per image for 1x1 kernels (pointwise), one batched product per block of channels (depthwise),
one product per kernel tap summed (tap products), else GEMMs over im2col columns built per image
in chunks of output rows. An empty X or W (no image, no input channel, no filter) gives zeros of
the output's shape: each output is a sum of no products (the spec's answer, onnxruntime's)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from onnxflow.ops.im2col import im2col
from onnxflow.ops.window_geometry import (
    pad_spatial,
    per_axis,
    reach,
    spatial_geometry,
    windows_view,
)


class _Geometry(NamedTuple):
    """How one convolution runs, decided once per shapes and attributes (:func:`_geometry`)."""

    out: tuple[int, ...]
    begin: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    path: str  # pointwise, depthwise, taps, columns or empty


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
    strides_ = per_axis(strides, len(kernel), "strides")
    dilations_ = per_axis(dilations, len(kernel), "dilations")
    shared = (tuple(out), tuple(begin), tuple(strides_), tuple(dilations_))  # shared: immutable
    if min(*begin, *end) < 0:
        raise ValueError(f"pads must be non-negative, got {list(begin) + list(end)}")
    if 0 in x_shape or 0 in w_shape:  # each output sums no product (or there is none)
        return _Geometry(*shared, "empty")
    if math.prod(kernel) == 1 and not any(begin + end) and all(s == 1 for s in strides_):
        return _Geometry(*shared, "pointwise")
    if group == c == m:  # depthwise: no columns, no product
        path = "depthwise"
    elif _by_taps(c, m, group, kernel, out, strides_):
        path = "taps"
    else:
        path = "columns"
    return _Geometry(*shared, path)


def _tuple(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def conv_geometry(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    group: int,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
) -> _Geometry:
    """The output sizes, begin pads, strides, dilations and path of a convolution of X
    ``x_shape`` by W ``w_shape`` (shapes and attributes checked)."""
    return _geometry(
        x_shape, w_shape, group, _tuple(strides), _tuple(dilations), _tuple(pads), auto_pad
    )


def check_kernel_shape(kernel_shape: Sequence[int] | None, w: np.ndarray) -> None:
    """Raise ValueError unless ``kernel_shape`` (when given) is W's spatial shape."""
    if kernel_shape is not None and list(kernel_shape) != list(w.shape[2:]):
        raise ValueError(f"kernel_shape {kernel_shape} does not match W's shape {w.shape}")


def convolve(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
) -> np.ndarray:
    """Return the convolution of ``x`` with ``w`` (no bias), in x's dtype."""
    out, begin, strides, dilations, path = conv_geometry(
        x.shape, w.shape, group, strides, dilations, pads, auto_pad
    )
    m = w.shape[0]
    if path == "pointwise":
        return _pointwise_conv(x, w.reshape(group, m // group, -1), m, out)
    if path == "depthwise":
        return _depthwise(x, w, out, strides, dilations, begin)
    if path == "taps":
        return _tap_products(x, w, out, dilations, begin)
    if path == "columns":
        return _by_columns(x, w, group, out, strides, dilations, begin)
    return np.zeros((x.shape[0], m, *out), x.dtype)  # empty: no image, channel or tap


#: Bound on one im2col buffer. Below glibc's largest mmap threshold (32 MiB) the buffer is reused
#: from the heap instead of being page-faulted in afresh on every call (that alone costs as much as
#: the GEMM for a VGG-sized layer); yet big enough that a layer takes few GEMM calls, since each
#: multithreaded BLAS call stalls when the CPU is oversubscribed.
_CHUNK_BYTES = 1 << 24


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
        cols = im2col(x[0], kernel, out, strides, dilations, begin)
        return grouped_gemm(wm, cols).reshape(1, m, *out)
    y = np.empty((n, m, *out), dtype=x.dtype)
    for b in range(n):
        for r0 in range(0, out[0], step):
            r1 = min(out[0], r0 + step)
            cols = im2col(x[b], kernel, [r1 - r0, *out[1:]], strides, dilations, begin, r0)
            y[b, :, r0:r1] = grouped_gemm(wm, cols).reshape(m, r1 - r0, *out[1:])
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
    xp = pad_spatial(x, begin, reach(x.shape[2:], kernel, out, strides, dilations, begin))
    taps, positions = math.prod(kernel), math.prod(out)
    weights = w.reshape(c, 1, taps)
    y = np.empty((n, c, 1, positions), x.dtype)
    step = max(1, _DEPTHWISE_CHUNK_BYTES // (taps * positions * x.itemsize))
    block = np.empty((min(step, c), *kernel, *out), x.dtype)
    for b in range(n):
        view = windows_view(xp[b], kernel, out, strides, dilations)
        for c0 in range(0, c, step):
            c1 = min(c, c0 + step)
            cols = block[: c1 - c0]
            np.copyto(cols, view[c0:c1])
            np.matmul(weights[c0:c1], cols.reshape(c1 - c0, taps, positions), out=y[b, c0:c1])
    return y.reshape(n, c, *out)


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
        return grouped_gemm(wm, x[0].reshape(c, -1)).reshape(1, m, *out)
    y = np.empty((n, m, *out), dtype=x.dtype)
    for b in range(n):
        y[b] = grouped_gemm(wm, x[b].reshape(c, -1)).reshape(m, *out)
    return y


def grouped_gemm(wm: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Return ``(M, P)`` from weights ``(G, M/G, C/G*K)`` and one image's columns ``(C*K, P)``."""
    group = wm.shape[0]
    if group == 1:
        return wm[0] @ cols
    cols = cols.reshape(group, -1, cols.shape[-1])
    if wm.shape[1] == 1:  # depthwise: a weighted sum of each group's rows
        return np.einsum("gk,gkp->gp", wm[:, 0], cols)
    return np.matmul(wm, cols).reshape(-1, cols.shape[-1])
