"""How far apart two values are: absolute, relative and ulp errors, and whether they are within
tolerance.

Relative error is ``|ours - theirs| / max(|theirs|, atol)``: where the reference (the other
side) is 0, or smaller than ``atol``, the error is measured against ``atol`` instead of dividing
by a tiny number (with ``atol`` 0, the elements whose reference is 0 are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

#: How the reports define relative error (the text they print and write in JSON).
RELATIVE_ERROR = (
    "relative error = |ours - theirs| / max(|theirs|, atol): where the reference is 0 or below "
    "atol it is bounded by atol (with atol 0, elements whose reference is 0 are skipped)"
)

_INT_VIEWS = {2: np.int16, 4: np.int32, 8: np.int64}


@dataclass(frozen=True)
class Difference:
    """Two values compared: ``reason`` is '' when they agree within tolerance; ``exact`` when
    they are the same bit for bit (NaN equal to NaN); ``max_ulp`` is the largest distance in
    units in the last place (float16/32/64; the absolute error for integers; None otherwise);
    ``beyond`` counts the elements outside tolerance, of ``size``."""

    reason: str = ""
    exact: bool = True
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: float | None = None
    beyond: int = 0
    size: int = 0

    @property
    def within(self) -> bool:
        """Whether the values agree within tolerance."""
        return not self.reason


def _apart(reason: str) -> Difference:
    """Values that cannot be compared element by element (type, shape, length differ)."""
    inf = float("inf")
    return Difference(reason, False, inf, inf, None, 1, 1)


def measure(a: Any, b: Any, rtol: float, atol: float) -> Difference:
    """How ``a`` (onnxflow's) differs from ``b`` (the reference)."""
    if isinstance(a, list) and isinstance(b, list):
        return _sequences(a, b, rtol, atol)
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        return _apart(f"dtype {a.dtype} vs {b.dtype}")
    if a.shape != b.shape:
        return _apart(f"shape {list(a.shape)} vs {list(b.shape)}")
    if a.dtype.kind not in "biufc":
        same = bool(np.array_equal(a, b))
        return Difference("", True, size=a.size) if same else _apart("values differ")
    return _numeric(a, b, rtol, atol)


def _sequences(a: list[Any], b: list[Any], rtol: float, atol: float) -> Difference:
    if len(a) != len(b):
        return _apart(f"sequence length {len(a)} vs {len(b)}")
    parts = [measure(x, y, rtol, atol) for x, y in zip(a, b, strict=True)]
    first = next((f"element {i}: {p.reason}" for i, p in enumerate(parts) if p.reason), "")
    return replace(combined(parts), reason=first) if parts else Difference()


def combined(parts: list[Difference]) -> Difference:
    """One difference for several values: the largest errors, the first reason."""
    ulps = [p.max_ulp for p in parts if p.max_ulp is not None]
    return Difference(
        next((p.reason for p in parts if p.reason), ""),
        all(p.exact for p in parts),
        max(p.max_abs_err for p in parts),
        max(p.max_rel_err for p in parts),
        max(ulps) if ulps else None,
        sum(p.beyond for p in parts),
        sum(p.size for p in parts),
    )


def _numeric(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> Difference:
    if a.size == 0:
        return Difference(max_ulp=0.0 if a.dtype.kind in "biuf" else None)
    x, y = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(x) & np.isnan(y)
    with np.errstate(all="ignore"):  # inf - inf, huge / tiny: handled below
        diff = np.where(both_nan | (x == y), 0.0, np.abs(x - y))
        diff = np.where(np.isnan(diff), np.inf, diff)
        scale = np.maximum(np.abs(np.where(np.isnan(y), 0.0, y)), atol)
        rel = np.where((diff == 0) | (scale == 0), 0.0, diff / np.where(scale == 0, 1, scale))
    close = diff <= atol + rtol * np.abs(np.where(np.isnan(y), 0.0, y))
    beyond = int((~close).sum())
    reason = f"{beyond} of {a.size} elements beyond tolerance" if beyond else ""
    exact = bool((diff == 0).all())  # equal values: 0 and -0 count as one
    return Difference(
        reason, exact, float(diff.max()), float(rel.max()), _max_ulp(a, b, diff), beyond, a.size
    )


def _max_ulp(a: np.ndarray, b: np.ndarray, diff: np.ndarray) -> float | None:
    """The largest distance in units in the last place: the number of representable values
    between the two (0 and -0 are one value); the absolute error for integers."""
    if a.dtype.kind in "biu":
        return float(diff.max())
    view = _INT_VIEWS.get(a.dtype.itemsize)
    if a.dtype.kind != "f" or view is None:
        return None
    ours, theirs = _ordered(a, view), _ordered(b, view)
    nan = np.isnan(a) | np.isnan(b)
    apart = np.abs(ours - theirs)
    apart = np.where(nan, np.where(np.isnan(a) & np.isnan(b), 0.0, np.inf), apart)
    return float(apart.max())


def _ordered(a: np.ndarray, view: type) -> np.ndarray:
    """Float bits as numbers that count representable values from 0 (negative below it)."""
    bits = a.view(view).astype(np.int64)
    magnitude = bits & np.int64(np.iinfo(view).max)
    return np.where(bits < 0, -magnitude, magnitude).astype(np.float64)


def argmax_agreement(a: Any, b: Any) -> tuple[int, int] | None:
    """For logits-shaped values (floating, 2-d or more, last axis of 2 or more), how many rows'
    argmax along the last axis agree, of how many rows; None for other values."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return None
    if a.dtype.kind != "f" or a.shape != b.shape or a.ndim < 2 or a.shape[-1] < 2:
        return None
    if a.size == 0:
        return (0, 0)
    same = np.argmax(a, axis=-1) == np.argmax(b, axis=-1)
    return int(same.sum()), int(same.size)
