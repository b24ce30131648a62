"""Small rules several kernel families share: axis normalization and the dtype arithmetic runs in.

No operator is registered here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class PerDtype(dict):
    """A decision per dtype, made by ``decide`` the first time a dtype is asked for.

    Looking a decision up is one dict access, so kernels need no dtype inspection per call.
    """

    def __init__(self, decide: Callable[[np.dtype], Any]) -> None:
        super().__init__()
        self._decide = decide

    def __missing__(self, dtype: np.dtype) -> Any:
        value = self[dtype] = self._decide(dtype)
        return value


_ACCUMULATE = PerDtype(
    lambda dt: np.dtype(np.float32) if dt.name in ("float16", "bfloat16") else dt
)
_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


def accumulation_dtype(dtype: np.dtype) -> np.dtype:
    """Return the dtype to accumulate ``dtype`` values in: float32 for float16 and bfloat16,
    ``dtype`` itself otherwise."""
    return _ACCUMULATE[dtype]


def float_compute_dtype(dtype: np.dtype) -> np.dtype:
    """Return float64 for float64 and float32 for every other type (float math on any input)."""
    return _FLOAT64 if dtype == _FLOAT64 else _FLOAT32


def normalize_axis(axis: int, rank: int) -> int:
    """Return ``axis`` made non-negative for a tensor of ``rank``; raise if out of range."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for an input of rank {rank}")
    return axis % rank


def _find_clip_ufunc() -> np.ufunc | None:
    """NumPy's clip ufunc (what ``np.clip`` calls after its Python layer), if it has one."""
    import importlib

    for path in ("numpy._core.umath", "numpy.core.umath"):
        try:
            found = getattr(importlib.import_module(path), "clip", None)
        except ImportError:
            continue
        if isinstance(found, np.ufunc):
            return found
    return None


_CLIP = _find_clip_ufunc()
_NO_BOUND = PerDtype(
    lambda dt: (
        (dt.type(-np.inf), dt.type(np.inf))
        if dt.kind == "f"
        else (np.iinfo(dt).min, np.iinfo(dt).max)
    )
)


def clamp(
    x: np.ndarray, lo: Any = None, hi: Any = None, out: np.ndarray | None = None
) -> np.ndarray:
    """``min(max(x, lo), hi)`` elementwise in x's dtype, as ``np.clip`` (NaN propagates; lo >
    hi gives hi); a None bound does not clip, and at least one is given. Bounds are scalars or
    arrays of x's dtype. NumPy's clip ufunc, called directly: ``np.maximum`` / ``np.minimum``
    with a scalar operand take a loop about 4x slower on float32, and ``np.clip``'s Python
    layer costs more than its work on small arrays."""
    if _CLIP is None or x.dtype.kind not in "fiu":  # no ufunc, or ml_dtypes' bfloat16...
        return np.clip(x, lo, hi, out=out)
    if lo is None or hi is None:
        low, high = _NO_BOUND[x.dtype]
        lo = low if lo is None else lo
        hi = high if hi is None else hi
    return _CLIP(x, lo, hi, out=out)


def factor_and_shift(
    scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: np.generic
) -> tuple[np.ndarray, np.ndarray]:
    """Inference BatchNormalization's per-channel ``a = scale / sqrt(var + epsilon)`` and
    ``bias - mean * a``: Y is ``X * a`` plus it."""
    a = scale / np.sqrt(var + epsilon)
    return a, bias - mean * a
