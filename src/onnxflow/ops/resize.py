"""Spatial resampling: Resize, Upsample, GridSample, AffineGrid.

Resize works one axis at a time: for each resized axis it precomputes, per output position, the
input indices and weights of the interpolation taps, then gathers and sums them in one step.
GridSample samples every spatial axis at once with per-axis taps combined as a product.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits

_RADIUS = {"linear": 1, "cubic": 2}


# -- interpolation kernels --------------------------------------------------------------------
def _linear_kernel(s: np.ndarray) -> np.ndarray:
    return np.clip(1.0 - np.abs(s), 0.0, 1.0)


def _cubic_kernel(s: np.ndarray, a: float) -> np.ndarray:
    s = np.abs(s)
    near = ((a + 2) * s - (a + 3)) * s * s + 1
    far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    return np.where(s <= 1, near, np.where(s < 2, far, 0.0))


def _cast_back(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast interpolated values back to the input type, rounding and saturating for integers."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return y.astype(dtype, copy=False)


# -- Resize ------------------------------------------------------------------------------------
def _source_coords(
    n_out: int, n_in: int, scale: float, mode: str, roi: tuple[float, float]
) -> np.ndarray:
    """Map output positions of one axis to (fractional) input positions."""
    x = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":  # offset = center * (1 - n_out / (n_in * scale))
        return (n_in / 2 - n_out / (2 * scale)) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(x)
    if mode == "align_corners":  # the resized length is the output's: the corners meet
        return x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if n_out > 1:
            return start * (n_in - 1) + x * (end - start) * (n_in - 1) / (n_out - 1)
        return np.full_like(x, 0.5 * (start + end) * (n_in - 1))
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    raise ValueError(
        "nearest_mode must be round_prefer_floor, round_prefer_ceil, floor or ceil, "
        f"found {nearest_mode!r}"
    )


def _taps(
    x: np.ndarray, n_in: int, scale: float, mode: str, *, a: float, exclude: bool, antialias: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Return input indices and weights, both (n_out, taps), interpolating at positions x."""
    support = min(scale, 1.0) if antialias else 1.0
    radius = _RADIUS[mode]
    first = int(np.floor(-radius / support)) + 1
    offsets = np.arange(first, 2 - first)
    base = np.floor(x)
    idx = base[:, None] + offsets[None, :]
    s = (idx - x[:, None]) * support
    w = _linear_kernel(s) if mode == "linear" else _cubic_kernel(s, a)
    if exclude:
        w = np.where((idx >= 0) & (idx < n_in), w, 0.0)
    total = w.sum(axis=1, keepdims=True)
    w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1).astype(np.intp), w


@dataclass(frozen=True)
class _Filter:
    """How Resize interpolates along each axis."""

    mode: str
    nearest_mode: str | None  # None: Resize-10/Upsample rounding (up when shrinking, else down)
    cubic_coeff_a: float
    exclude_outside: bool
    antialias: bool
    coordinates: str = "half_pixel"  # coordinate_transformation_mode


def _resize_axis(y: np.ndarray, axis: int, x: np.ndarray, scale: float, f: _Filter) -> np.ndarray:
    """Resample ``y`` along ``axis`` at the input positions ``x``."""
    n_in = y.shape[axis]
    if f.mode == "nearest":
        rounding = f.nearest_mode or ("ceil" if scale < 1 else "floor")
        idx = np.clip(_nearest_index(x, rounding), 0, n_in - 1)
        return np.take(y, idx.astype(np.intp), axis=axis)
    if f.mode not in _RADIUS:
        raise ValueError(f"mode must be nearest, linear or cubic, found {f.mode!r}")
    idx, w = _taps(
        x,
        n_in,
        scale,
        f.mode,
        a=f.cubic_coeff_a,
        exclude=bool(f.exclude_outside),
        antialias=bool(f.antialias),
    )
    gathered = np.take(y, idx, axis=axis)
    w = w.astype(y.dtype).reshape(w.shape + (1,) * (y.ndim - axis - 1))
    return (gathered * w).sum(axis=axis + 1)


def _plan_sizes(
    shape: Sequence[int],
    axes: list[int],
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    policy: str,
) -> tuple[list[int], list[float]]:
    """Return the output extent and scale of each listed axis.

    With ``scales`` the extent is floor(input * scale); like onnxruntime and the onnx reference
    the roi of tf_crop_and_resize does not shrink it (pass ``sizes`` to set it exactly).
    """
    in_sizes = [shape[a] for a in axes]
    given = sizes is not None and sizes.size
    if given and scales is not None and scales.size:
        raise ValueError("Resize takes scales or sizes, not both")
    if given:
        return _from_sizes(in_sizes, [int(v) for v in sizes.reshape(-1)], axes, policy)
    if scales is None or not scales.size:
        raise ValueError("Resize needs one of scales or sizes, found neither")
    return _from_scales(in_sizes, [float(v) for v in scales.reshape(-1)], axes)


def _from_scales(
    in_sizes: list[int], factors: list[float], axes: list[int]
) -> tuple[list[int], list[float]]:
    """Extents floor(input * scale) and the scales themselves, which must be positive."""
    _check_count("scales", factors, axes)
    if any(f <= 0 for f in factors):
        raise ValueError(f"scales must be positive, found {factors}")
    return [int(np.floor(n * f)) for n, f in zip(in_sizes, factors)], factors


#: keep_aspect_ratio_policy -> how one common scale is chosen from the per-axis ratios.
_COMMON_SCALE = {"not_larger": min, "not_smaller": max}


def _from_sizes(
    in_sizes: list[int], want: list[int], axes: list[int], policy: str
) -> tuple[list[int], list[float]]:
    """Extents and scales for the requested ``sizes`` under ``keep_aspect_ratio_policy``."""
    _check_count("sizes", want, axes)
    ratios = [w / n for w, n in zip(want, in_sizes)]
    if policy == "stretch":
        return want, ratios
    pick = _COMMON_SCALE.get(policy)
    if pick is None:
        raise ValueError(
            f"keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, found {policy!r}"
        )
    common = pick(ratios)
    return [int(np.floor(common * n + 0.5)) for n in in_sizes], [common] * len(axes)


def _check_count(what: str, values: Sequence[object], axes: list[int]) -> None:
    if len(values) != len(axes):
        raise ValueError(f"{what} has {len(values)} elements, expected {len(axes)} (one per axis)")


#: The attributes Resize's NumPy form takes (nearest mode).
_NEAREST_ATTRS = ("axes", "coordinate_transformation_mode", "keep_aspect_ratio_policy")


def _resize_numpy(f: NumpyCall) -> str | None:
    """Resize's NumPy form in nearest mode (not tf_crop_and_resize); None in the others."""
    mode = f.attrs.get("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "nearest" or "tf_crop_and_resize" in f.src.get("coordinate_transformation_mode", ""):
        return None
    args = [*f.ins, *(f"{a}={f.src[a]}" for a in (*_NEAREST_ATTRS, "nearest_mode") if a in f.src)]
    return f"onnx_resize_nearest({', '.join(args)})"


@op("Resize", 11, 13, 18, 19, traits=Traits(numpy=_resize_numpy))
def resize(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str | None = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
    axes: list[int] | None = None,
    keep_aspect_ratio_policy: str = "stretch",
) -> np.ndarray:
    """Resize ``x`` to ``sizes`` or by ``scales``, one axis at a time.

    Attributes of later versions default to off, so one kernel serves versions 11 to 19; a
    ``nearest_mode`` of None (not expressible in a model) selects Resize-10/Upsample rounding.
    """
    axes = [a + x.ndim if a < 0 else a for a in (range(x.ndim) if axes is None else axes)]
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    rois = _crop_boxes(roi, axes) if crop else None
    outs, factors = _plan_sizes(x.shape, axes, scales, sizes, keep_aspect_ratio_policy)
    if mode == "nearest" or x.dtype == object:
        y = x
    else:
        y = x.astype(float_compute_dtype(x.dtype), copy=False)
    filt = _Filter(
        mode, nearest_mode, cubic_coeff_a, bool(exclude_outside), bool(antialias),
        coordinate_transformation_mode,
    )  # fmt: skip
    y, outside = _resample(y, x.shape, axes, outs, factors, filt, rois)
    if outside is not None:
        y = np.where(outside, np.asarray(extrapolation_value, dtype=y.dtype), y)
    return _cast_back(y, x.dtype) if y.dtype != x.dtype else y


def _resample(
    y: np.ndarray,
    shape: Sequence[int],
    axes: list[int],
    outs: list[int],
    factors: list[float],
    filt: _Filter,
    rois: list[tuple[float, float]] | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Resize ``y`` (of input shape ``shape``) one axis at a time; also return, for
    tf_crop_and_resize, where the output samples fall outside the input (else None)."""
    crop = filt.coordinates == "tf_crop_and_resize"
    outside = np.zeros((1,) * len(shape), dtype=bool)
    for i, axis in enumerate(axes):
        n_in, n_out, scale = shape[axis], outs[i], factors[i]
        if n_out == n_in and scale == 1 and not crop:
            continue
        box = rois[i] if rois else (0.0, 1.0)
        coords = _source_coords(n_out, n_in, scale, filt.coordinates, box)
        y = _resize_axis(y, axis, coords, scale, filt)
        if crop:
            at = [1] * len(shape)
            at[axis] = n_out
            outside = outside | ((coords < 0) | (coords > n_in - 1)).reshape(at)
    return y, outside if crop else None


def _crop_boxes(roi: np.ndarray | None, axes: list[int]) -> list[tuple[float, float]] | None:
    """Return the (start, end) of tf_crop_and_resize's roi on each resized axis, if given."""
    if roi is None or not roi.size:
        return None
    flat = [float(v) for v in roi.reshape(-1)]
    _check_count("roi", flat[: len(flat) // 2], axes)
    return list(zip(flat[: len(axes)], flat[len(axes) :]))


def _upsample(
    x: np.ndarray, scales: Sequence[float], mode: str, *, at_least_one: bool
) -> np.ndarray:
    """Upsample/Resize-10 semantics: asymmetric coordinates; nearest rounds down when growing
    an axis and up when shrinking it (as onnxruntime does; the spec leaves it open)."""
    if at_least_one and any(s < 1 for s in scales):
        raise ValueError(f"Upsample scales must all be >= 1, found {list(scales)}")
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise ValueError(f"mode must be nearest or linear, found {mode!r}")
    return resize(
        x,
        None,
        np.asarray(scales, dtype=np.float32),
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode=None,
    )


@op("Resize", 10)
def resize_10(x: np.ndarray, scales: np.ndarray, *, mode: str = "nearest") -> np.ndarray:
    """Resize by ``scales`` with asymmetric coordinates (output = floor(input * scale))."""
    return _upsample(x, scales.reshape(-1).tolist(), mode, at_least_one=False)


@op("Upsample", 9)
def upsample_9(x: np.ndarray, scales: np.ndarray, *, mode: str = "nearest") -> np.ndarray:
    """Upsample by the ``scales`` input (each >= 1), nearest or N-linear."""
    return _upsample(x, scales.reshape(-1).tolist(), mode, at_least_one=True)


@op("Upsample", 7)
def upsample_7(x: np.ndarray, *, scales: list[float], mode: str = "nearest") -> np.ndarray:
    """Upsample by the ``scales`` attribute (each >= 1), nearest or N-linear."""
    return _upsample(x, scales, mode, at_least_one=True)


@op("Upsample", 1)
def upsample_1(
    x: np.ndarray, *, height_scale: float, width_scale: float, mode: str = "nearest"
) -> np.ndarray:
    """Upsample a 4-D NCHW tensor by height and width scales, nearest or bilinear."""
    if x.ndim != 4:
        raise ValueError(f"Upsample-1 expects a 4-D NCHW input, found rank {x.ndim}")
    return _upsample(x, [1.0, 1.0, height_scale, width_scale], mode, at_least_one=True)


# -- GridSample --------------------------------------------------------------------------------
def _unnormalize(g: np.ndarray, size: int, align_corners: int) -> np.ndarray:
    if align_corners:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


def _reflect(idx: np.ndarray, low: float, high: float) -> np.ndarray:
    """Reflect positions into [low, high] repeatedly, as a mirror at each border."""
    span = high - low
    if span <= 0:
        return np.zeros_like(idx)
    d = np.abs(idx - low)
    flips = np.floor(d / span)
    extra = d - flips * span
    return np.where(flips % 2 == 0, low + extra, high - extra)


def _grid_taps(
    coord: np.ndarray, size: int, mode: str, a: float
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Integer tap positions and weights sampling one axis at ``coord``."""
    if mode == "nearest":
        return [(np.rint(coord), np.ones_like(coord))]
    base = np.floor(coord)
    t = coord - base
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    return [(base + k, _cubic_kernel(t - k, a)) for k in (-1, 0, 1, 2)]


def _pad_index(
    idx: np.ndarray, size: int, padding_mode: str, align_corners: int
) -> tuple[np.ndarray, np.ndarray]:
    """Return in-range indices and a mask of taps that read real data (False reads zero)."""
    if padding_mode == "zeros":
        valid = (idx >= 0) & (idx < size)
        return np.clip(idx, 0, size - 1).astype(np.intp), valid
    if padding_mode == "reflection":
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        idx = np.rint(_reflect(idx, low, high))
    elif padding_mode != "border":
        raise ValueError(
            f"padding_mode must be zeros, border or reflection, found {padding_mode!r}"
        )
    return np.clip(idx, 0, size - 1).astype(np.intp), np.ones(idx.shape, dtype=bool)


def _grid_sample(
    x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: int
) -> np.ndarray:
    r = x.ndim - 2
    if grid.ndim != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise ValueError(
            f"grid must have shape (N, *out, {r}) for an input of shape {x.shape}, "
            f"found {grid.shape}"
        )
    work = float_compute_dtype(x.dtype)
    g = grid.astype(np.float64)
    per_axis = []
    for axis in range(r):
        size = x.shape[2 + axis]
        coord = _unnormalize(g[..., r - 1 - axis], size, align_corners)
        taps = []
        for pos, w in _grid_taps(coord, size, mode, -0.75):
            idx, valid = _pad_index(pos, size, padding_mode, align_corners)
            taps.append((idx, np.where(valid, w, 0.0)))
        per_axis.append(taps)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * r)
    xt = np.moveaxis(x, 1, -1).astype(work, copy=False)  # (N, *spatial, C)
    out = np.zeros((*grid.shape[:-1], x.shape[1]), dtype=work)
    for combo in itertools.product(*per_axis):
        weight = np.prod([w for _, w in combo], axis=0).astype(work)
        out += xt[(batch, *[i for i, _ in combo])] * weight[..., None]
    return _cast_back(np.moveaxis(out, -1, 1), x.dtype)


@op("GridSample", 16)
def grid_sample_16(
    x: np.ndarray,
    grid: np.ndarray,
    *,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: int = 0,
) -> np.ndarray:
    """Sample a 4-D input at normalized grid positions (bilinear, nearest or bicubic)."""
    names = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
    if mode not in names:
        raise ValueError(f"mode must be bilinear, nearest or bicubic, found {mode!r}")
    if x.ndim != 4:
        raise ValueError(f"GridSample-16 expects a 4-D input, found rank {x.ndim}")
    return _grid_sample(x, grid, names[mode], padding_mode, align_corners)


@op("GridSample", 20, 22)
def grid_sample(
    x: np.ndarray,
    grid: np.ndarray,
    *,
    mode: str = "linear",
    padding_mode: str = "zeros",
    align_corners: int = 0,
) -> np.ndarray:
    """Sample an N-d input at normalized grid positions (linear, nearest or cubic)."""
    if mode not in ("linear", "nearest", "cubic"):
        raise ValueError(f"mode must be linear, nearest or cubic, found {mode!r}")
    return _grid_sample(x, grid, mode, padding_mode, align_corners)


@op("AffineGrid", 20)
def affine_grid(theta: np.ndarray, size: np.ndarray, *, align_corners: int = 0) -> np.ndarray:
    """Return the sampling grid (N, *spatial, r) of affine matrices over a normalized grid."""
    dims = [int(d) for d in size.reshape(-1)]
    r = len(dims) - 2
    if r not in (2, 3) or theta.shape[1:] != (r, r + 1):
        raise ValueError(
            f"AffineGrid expects size of length 4 or 5 and theta (N, r, r+1), found size {dims} "
            f"and theta {theta.shape}"
        )
    spatial = dims[2:]
    lines = []
    for n in reversed(spatial):  # x runs along the last axis, then y, then z
        steps = np.arange(n, dtype=np.float64)
        if align_corners:
            lines.append(steps * 2 / (n - 1) - 1 if n > 1 else np.zeros(1))
        else:
            lines.append((2 * steps + 1) / n - 1)
    mesh = np.meshgrid(*reversed(lines), indexing="ij")  # each of shape spatial
    points = np.stack([*reversed(mesh), np.ones(spatial)], axis=-1)  # (*spatial, r+1)
    grid = np.einsum("...k,njk->n...j", points, theta.astype(np.float64))
    return grid.astype(theta.dtype)
