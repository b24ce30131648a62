"""im2col: one image's convolution columns ``(C * K, P)`` (a row per channel and kernel element,
a column per output position), zero where a window reaches into the padding, which is never
built. Three ways, chosen by size: one remembered gather for small column matrices, one copy of
a strided view for kernels of many taps, else one strided copy per kernel tap."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from onnxflow.ops.window_geometry import pad_spatial, reach, windows_view


def im2col(
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
    """:func:`im2col` of one image ``x`` ``(C, *spatial)`` (``geometry``: its kernel, out,
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
    """:func:`im2col` as one copy of a strided view ``(C, *kernel, *out)`` of ``x`` padded
    with zeros as far as the windows reach."""
    origin = [row0] + [0] * (len(out) - 1)
    end = reach(x.shape[1:], kernel, out, strides, dilations, begin, origin)
    xp = pad_spatial(x[None], begin, end)[0]
    start = xp[(slice(None), *(slice(o0 * s, None) for o0, s in zip(origin, strides)))]
    view = windows_view(start, kernel, out, strides, dilations)
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
