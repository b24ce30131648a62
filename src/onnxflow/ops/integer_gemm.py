"""Exact products of 8-bit integer tensors, and the compiled loops of linear quantization laid
out per channel: the glue of the quantization kernels' compiled forms.

NumPy has no 8-bit GEMM, so the NumPy forms multiply the zero-point-shifted operands in
float64. The compiled forms get the same integers two ways:

- on AVX-512, an int16 kernel (``QUANT.int_matmul``): the shifted operands are 9-bit, so
  vpmaddwd / vpdpwssd sum products exactly in int32, B packed once per constant;
- elsewhere, float32 BLAS: exact while every partial sum is an integer of magnitude at most
  2^24, in whatever order BLAS adds, which holds when ``K * max|a - za| * max|b - zb| <=
  2^24``; longer sums are cut into slices of K that short and the slices added in int32.

Both wrap as the NumPy form's cast to int32 does. A constant operand (read-only, as a plan's
initializers are) is shifted or packed once: :func:`kept` keeps the result while the array
lives.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import normalize_axis

#: The compiled loops (None when the module was not built: no compiled forms then).
QUANT = compiled.deferred("_quant")
#: Integers up to this magnitude are exact in float32, and so are sums that stay within it.
EXACT = 1 << 24
_F32 = np.dtype(np.float32)
_BYTE_REACH = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
BYTES = tuple(_BYTE_REACH)


class Channels(NamedTuple):
    """A tensor seen as ``(outer, channels, inner)`` with one parameter per channel."""

    outer: int
    inner: int


def channels(shape: tuple[int, ...], param: np.ndarray, axis: int) -> Channels | None:
    """The layout of a tensor of ``shape`` whose ``param`` is per tensor (one value) or per
    ``axis`` (a vector of its length); None for any other shape of ``param``."""
    if param.size == 1 and param.ndim <= 1:
        return Channels(1, math.prod(shape))
    if param.ndim != 1 or not shape:
        return None
    axis = normalize_axis(axis, len(shape))
    if param.shape[0] != shape[axis]:
        return None
    return Channels(math.prod(shape[:axis]), math.prod(shape[axis + 1 :]))


def vector(param: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    """A scale or zero point as a contiguous float32 vector (0 where omitted, ``like``'s
    size)."""
    if param is None:
        return np.zeros(like.size, _F32)
    return np.ascontiguousarray(param.reshape(-1), dtype=_F32)


def flat(x: np.ndarray) -> np.ndarray:
    """``x`` as a contiguous 1-D array (a view when it is contiguous already)."""
    return np.ascontiguousarray(x).reshape(-1)


def scalar(param: np.ndarray | None) -> float | None:
    """A per-tensor scale or zero point as a float (0.0 when omitted), else None."""
    if param is None:
        return 0.0
    return float(param.reshape(())) if param.size == 1 and param.ndim <= 1 else None


def shift(q: np.ndarray, zero: np.ndarray | None, axis: int) -> np.ndarray | None:
    """``float32(q - zero)`` for 8-bit ``q``, one pass, the zero point per tensor or along
    ``axis``; None for a layout the loop does not take."""
    if zero is not None and zero.dtype != q.dtype:
        return None
    out = np.empty(q.shape, _F32)
    z_value = scalar(zero)
    if z_value is not None:
        QUANT.center_tensor(flat(q), out.reshape(-1), z_value)
        return out
    layout = channels(q.shape, zero, axis)
    if layout is None:
        return None
    loop = QUANT.center_u8_axis if q.dtype == np.uint8 else QUANT.center_i8_axis
    loop(flat(q), out.reshape(-1), vector(zero, zero), layout.outer, layout.inner)
    return out


def reach(q: np.ndarray, zero: np.ndarray | None) -> int:
    """The largest ``|q - zero|`` q's type allows."""
    lo, hi = _BYTE_REACH[q.dtype]
    if zero is None or not zero.size:
        return max(-lo, hi)
    z = scalar(zero)
    if z is not None:
        return max(hi - int(z), int(z) - lo)
    return max(hi - int(zero.min()), int(zero.max()) - lo)


class Operand(NamedTuple):
    """A shifted operand and the largest magnitude it holds (or may hold)."""

    shifted: np.ndarray
    reach: int


def _immutable(x: np.ndarray | None) -> bool:
    """Whether ``x`` and every array it views are read-only (a plan's constant)."""
    while isinstance(x, np.ndarray):
        if x.flags.writeable:
            return False
        x = x.base
    return True


#: Per kept array: a reference to it, the key of what was made from it, what was made.
_KEPT: dict[int, tuple[Callable[[], Any], tuple[Any, ...], Any]] = {}


def by_value(param: np.ndarray | None) -> tuple[Any, ...] | None:
    """A small parameter (a zero point) as a key that compares its values."""
    return None if param is None else (param.dtype.char, param.shape, param.tobytes())


def kept(q: np.ndarray, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """``make()``, made once for a read-only ``q`` (the same object, while it lives) and the
    same ``key`` (what else ``make`` reads, by value)."""
    if not _immutable(q):
        return make()
    hit = _KEPT.get(id(q))
    if hit is not None and hit[0]() is q and hit[1] == key:
        return hit[2]
    value = make()
    if hit is None or hit[0]() is not q:
        weakref.finalize(q, _KEPT.pop, id(q), None)
    _KEPT[id(q)] = (weakref.ref(q), key, value)
    return value


def prepared(q: np.ndarray, zero: np.ndarray | None, axis: int) -> Operand | None:
    """The shifted operand and its exact reach, made once for a constant ``q``."""

    def make() -> Operand | None:
        shifted = shift(q, zero, axis)
        if shifted is None:
            return None
        return Operand(shifted, int(np.abs(shifted).max(initial=0)))

    return kept(q, (axis, by_value(zero)), make)


def k_step(k: int, reach_a: int, reach_b: int) -> int:
    """How many terms of a sum of products within these reaches float32 adds exactly."""
    bound = reach_a * reach_b
    return max(1, EXACT // bound) if bound else max(k, 1)


def exact_matmul(a: np.ndarray, b: np.ndarray, step: int) -> np.ndarray:
    """``a @ b`` (float32 holding integers, b 2-D or batched alike) as int32, K cut in slices
    of ``step``: each slice's product is exact, the slices add in int32."""
    k = a.shape[-1]
    if b.ndim == 2 and a.ndim > 2:
        return exact_matmul(a.reshape(-1, k), b, step).reshape(*a.shape[:-1], b.shape[1])
    if step >= k:
        return np.matmul(a, b).astype(np.int32)
    acc = None
    for start in range(0, k, step):
        part = np.matmul(a[..., start : start + step], b[..., start : start + step, :])
        if acc is None:
            acc = np.empty(part.shape, np.int32)
        QUANT.accumulate(part.reshape(-1), acc.reshape(-1), start == 0)
    return acc


def _packed(b: np.ndarray, zero: np.ndarray | None, trans_b: bool) -> np.ndarray | None:
    """``b - zero`` as int16 (zero per tensor or per column of the product), packed for
    ``QUANT.int_matmul``: panels of ``QUANT.PANEL`` columns, per pair of K rows each panel's
    columns as pairs; K and the columns padded with zeros. None for another zero point."""
    axis = 0 if trans_b else 1
    if zero is not None and (zero.dtype != b.dtype or channels(b.shape, zero, axis) is None):
        return None
    shifted = b.astype(np.int16)
    if zero is not None:
        z = zero.astype(np.int16).reshape(-1)
        shifted -= z[:, None] if trans_b and z.size > 1 else z
    shifted = shifted.T if trans_b else shifted
    k, n = shifted.shape
    panel = QUANT.PANEL
    pairs, width = -(-k // 2), -(-n // panel) * panel
    padded = np.zeros((2 * pairs, width), np.int16)
    padded[:k, :n] = shifted
    return np.ascontiguousarray(
        padded.reshape(pairs, 2, width // panel, panel).transpose(2, 0, 3, 1)
    )


def _row_zeros(a: np.ndarray, zero: np.ndarray | None) -> np.ndarray | None:
    """A's zero point as int16, one value or one per row of ``a.reshape(-1, K)``."""
    if zero is None:
        return np.zeros(1, np.int16)
    if zero.dtype != a.dtype or channels(a.shape, zero, -2) is None:
        return None
    z = zero.astype(np.int16).reshape(-1)
    return z if z.size == 1 else np.tile(z, math.prod(a.shape[:-2]))


def int_product(
    a: np.ndarray,
    a_zero: np.ndarray | None,
    b: np.ndarray,
    b_zero: np.ndarray | None,
    trans_b: bool = False,
) -> np.ndarray | None:
    """:func:`product` on the int16 kernel (AVX-512), B packed once when constant; None where
    the kernel is not built for this CPU or B is not a matrix."""
    if not QUANT.PANEL or b.ndim != 2 or a.shape[-1] != b.shape[1 if trans_b else 0]:
        return None
    panels = kept(b, ("packed", trans_b, by_value(b_zero)), lambda: _packed(b, b_zero, trans_b))
    zeros = _row_zeros(a, a_zero)
    if panels is None or zeros is None:
        return None
    n = b.shape[0 if trans_b else 1]
    rows, pairs = math.prod(a.shape[:-1]), panels.shape[1]
    left = np.empty(rows * 2 * pairs, np.int16)
    QUANT.widen(flat(a), left, rows, 2 * pairs, zeros)
    out = np.empty((rows, panels.shape[0] * QUANT.PANEL), np.int32)
    QUANT.int_matmul(left, panels.reshape(-1), out.reshape(-1), rows, panels.shape[0], pairs)
    out = out if out.shape[1] == n else np.ascontiguousarray(out[:, :n])
    return out.reshape(*a.shape[:-1], n)


def product(
    a: np.ndarray,
    a_zero: np.ndarray | None,
    b: np.ndarray,
    b_zero: np.ndarray | None,
    trans_b: bool = False,
) -> np.ndarray | None:
    """``(a - a_zero) @ (b - b_zero)`` as int32 for 8-bit matrices (or stacks of them), A's
    zero point per tensor or per row, B's per tensor or per column of the product (B given
    transposed, as ``(N, K)``, with ``trans_b``); None for other layouts."""
    if a.dtype not in BYTES or b.dtype not in BYTES or a.ndim < 2 or b.ndim < 2:
        return None
    if trans_b and b.ndim != 2:
        return None
    exact = int_product(a, a_zero, b, b_zero, trans_b)
    if exact is not None:
        return exact
    b_side = prepared(b, b_zero, 0 if trans_b else -1)
    a_shifted = shift(a, a_zero, -2)
    if b_side is None or a_shifted is None:
        return None
    step = k_step(a.shape[-1], reach(a, a_zero), b_side.reach)
    return exact_matmul(a_shifted, b_side.shifted.T if trans_b else b_side.shifted, step)
