"""The geometry of a window sliding over the spatial axes of a channels-first tensor
``(N, C, D1, ..., Dn)``, shared by the convolutions (:mod:`onnxflow.ops.conv`) and the pools
(:mod:`onnxflow.ops.pool`): output sizes and pads from the ``auto_pad``, ``pads``, ``strides``
and ``dilations`` attributes, padding, and the strided views each kernel element sees."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

SAME = ("SAME_UPPER", "SAME_LOWER")


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
    strides = per_axis(strides, n, "strides")
    dilations = per_axis(dilations, n, "dilations")
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in SAME:
        return _same_geometry(spatial, extent, strides, auto_pad)
    if auto_pad == "VALID":
        out = [(size - e) // s + 1 for size, e, s in zip(spatial, extent, strides)]
        return out, [0] * n, [0] * n
    if auto_pad not in ("NOTSET", ""):
        raise ValueError(
            f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}"
        )
    pads = per_axis(pads, 2 * n, "pads", fill=0)
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


def per_axis(values: Sequence[int] | None, n: int, name: str, fill: int = 1) -> list[int]:
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
    strides = per_axis(strides, n, "strides")
    dilations = per_axis(dilations, n, "dilations")
    for index in np.ndindex(*kernel):
        window = tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, o, s in zip(index, dilations, out, strides)
        )
        yield index, xp[(..., *window)]


def reach(
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


def windows_view(
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
