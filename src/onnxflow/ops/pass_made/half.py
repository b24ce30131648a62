"""Kernels of the nodes the float16 passes make (:mod:`onnxflow.compile.passes.half`,
:mod:`onnxflow.compile.passes.half_tables`): ``HalfRound``, a float32 value rounded to the
nearest float16 as float32, and ``HalfTable``, a group of elementwise nodes on one float16
value looked up in a table of its results. In a module of their own, so that a float32
model's pass-made nodes import none of the float16 machinery (nor the cast kernels).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import compiled
from onnxflow.ops.cast import convert
from onnxflow.ops.pass_made import FUSED_DOMAIN, HALF_ROUND, HALF_TABLE
from onnxflow.ops.pass_made.body import body_call
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

_F32 = np.dtype(np.float32)
_HALF = compiled.deferred("_half")


def _half_round_over_x(x: np.ndarray) -> np.ndarray:
    """:func:`half_round` written over ``x`` (which dies here) when it is float32."""
    return half_round(x, over=True)


def _half_round_compiled(x: np.ndarray) -> np.ndarray:
    """:func:`half_round` in one compiled pass (``native/_half``) for float32 ``x``: the same
    bits, NaN kept as it is too (bound only when the module was built)."""
    if x.dtype != _F32:
        return half_round(x)
    out = np.empty(x.shape, _F32)
    if not _HALF.round_into(x, out):  # one call for contiguous x; else through a copy
        _HALF.round_f32(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


def _half_round_compiled_over_x(x: np.ndarray) -> np.ndarray:
    """:func:`_half_round_compiled` written over ``x`` (which dies here) when it can be: a
    C-contiguous, writeable float32 array, checked and rounded in one call."""
    return x if _HALF.round_over(x) else _half_round_compiled(x)


def _half_table_compiled(node: Any, *, body: GraphProto) -> Callable[..., Any]:
    """The compiled form of :func:`half_table`: ``body`` run once here on all 65536 float16
    values, then each element of the input looked up among the results (``native/_half``), the
    body's own bits; an input that is not float32, or holds an element that is not a float16
    value, runs the body as written. Without a table (the body fails on the values, or does
    not give one float32 value each) the node runs the body."""
    as_written = body_call(node, body)
    made = _table(as_written)
    if made is None:
        return as_written
    table, rank = made
    lookup = _HALF.lookup_f32 if table.dtype == _F32 else _HALF.lookup_f16

    def table_lookup(x: Any) -> Any:
        if x.__class__ is not np.ndarray or x.dtype != _F32:
            return as_written(x)
        shape = x.shape if x.ndim >= rank else (1,) * (rank - x.ndim) + x.shape
        out = np.empty(shape, _F32)
        if out.size and not lookup(np.ascontiguousarray(x).reshape(-1), table, out.reshape(-1)):
            return as_written(x)
        return out

    return table_lookup


def _table(as_written: Callable[..., Any]) -> tuple[np.ndarray, int] | None:
    """The results of ``as_written`` for all 65536 float16 values in the order of their bits,
    and the rank it gives a vector (more when a scalar constant has more dims), or None."""
    values = _ALL_HALVES.astype(np.float32)
    try:
        with np.errstate(all="ignore"):
            y = as_written(values)
    except Exception:  # any failure of the body here: the node runs it as written
        return None
    if y.__class__ is not np.ndarray or y.dtype != _F32 or y.size != values.size:
        return None
    return _shared(_narrowed(np.ascontiguousarray(y).reshape(-1))), y.ndim


def _narrowed(table: np.ndarray) -> np.ndarray:
    """``table`` as float16 bits (half the memory, so more of it stays in cache) when each of
    its values is a float16 value (what a HalfRound gives) and none a signalling NaN, with one
    more entry the compiled lookup may read but never uses; else ``table``."""
    with np.errstate(all="ignore"):
        narrow = table.astype(np.float16)
        exact = narrow.astype(np.float32).view(np.uint32) == table.view(np.uint32)
    bits = narrow.view(np.uint16)
    signalling = ((bits & 0x7C00) == 0x7C00) & ((bits & 0x3FF) != 0) & ((bits & 0x200) == 0)
    if not exact.all() or signalling.any():
        return table
    return np.concatenate([bits, np.zeros(1, np.uint16)])


#: The tables in use, by a digest of their bytes: nodes computing the same function (a model's
#: every hardswish) look up one table, which then stays in cache from one node to the next.
_TABLES: weakref.WeakValueDictionary[bytes, np.ndarray] = weakref.WeakValueDictionary()


def _shared(table: np.ndarray) -> np.ndarray:
    """The table in use with ``table``'s dtype and bytes (read-only), else ``table`` itself,
    kept."""
    key = table.dtype.char.encode() + hashlib.blake2b(table.tobytes(), digest_size=16).digest()
    kept = _TABLES.get(key)
    if kept is not None and kept.dtype == table.dtype and kept.tobytes() == table.tobytes():
        return kept
    table.flags.writeable = False
    _TABLES[key] = table
    return table


@op(
    HALF_ROUND,
    1,
    domain=FUSED_DOMAIN,
    traits=Traits(
        fresh=True,
        static_shape=True,
        elementwise=True,
        in_place=_half_round_over_x,
        native=native_form(_half_round_compiled if _HALF else None, _half_round_compiled_over_x),
        pointwise="half",
    ),
)
def half_round(x: np.ndarray, over: bool = False) -> np.ndarray:
    """``x`` rounded to the nearest float16 (ties to even, beyond 65504 to infinity, NaN kept),
    as float32: a float32 input by Veltkamp's split, three float32 passes (over its own memory
    when ``over``), and its values below float16's normal range by one addition and
    subtraction of 0.75; any other input as a cast to float16 would convert it."""
    if x.dtype != _F32:
        return np.asarray(convert(x, np.dtype(np.float16)), dtype=np.float32)
    shape, x = x.shape, x.reshape(-1)
    large, small = _half_extremes_found(x.view(np.uint32))
    if large:  # overflow, inf or NaN: the integer path
        return _half_round_bits(x).reshape(shape)
    if small:
        sub, tiny = _below_normal(x)
    # In float32 (24 bits), t = 8193 x and t - (t - x) is x rounded to its 11 leading bits, to
    # nearest with ties to even: float16's rounding for every magnitude in its normal range.
    t = np.multiply(x, _SPLIT)
    y = np.subtract(t, x, out=x if over and x.flags.writeable else None)
    np.subtract(t, y, out=y)
    if small:
        np.copyto(y, sub, where=tiny)
    return y.reshape(shape)


def _below_normal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float16 rounding of float32 ``x`` where it lies below float16's normal range
    (2**-14), and that mask. There float16 steps by 2**-24, the spacing of float32 around 0.75:
    |x| + 0.75 rounds there (ties to even), subtracting 0.75 back is exact, and x's sign bit
    goes back on (np.copysign would take 10x as long)."""
    sub = np.abs(x)
    tiny = np.less(sub, _HALF_NORMAL)
    sub += _MAGIC
    sub -= _MAGIC
    sign = x.view(np.uint32) & np.uint32(0x80000000)
    np.bitwise_or(sub.view(np.uint32), sign, out=sub.view(np.uint32))
    return sub, tiny


#: 0.75, whose float32 neighbours are 2**-24 apart: float16's step below its normal range.
_MAGIC = np.float32(0.75)
#: The smallest normal float16, 2**-14.
_HALF_NORMAL = np.float32(2.0**-14)


#: Veltkamp's splitting constant for 13 dropped bits: 2**13 + 1.
_SPLIT = np.float32(2**13 + 1)


def _half_round_bits(x: np.ndarray) -> np.ndarray:
    """:func:`half_round` of a flat float32 ``x`` by integer operations on its bits, then the
    values outside float16's normal range (subnormals, overflow, inf, NaN) set apart."""
    bits = x.view(np.uint32)
    odd = bits >> np.uint32(13)  # ties to even: add 0xFFF, or 0x1000 when the kept part is odd
    odd &= np.uint32(1)
    odd += np.uint32(0x0FFF)
    np.add(bits, odd, out=odd)
    odd &= np.uint32(0xFFFFE000)
    y = odd.view(np.float32)
    _half_extremes(x, y)
    return y


def _half_extremes_found(bits: np.ndarray) -> tuple[bool, bool]:
    """Whether some value rounds past float16's largest (65504) or is inf or NaN, and whether
    some value is nonzero below its normal range (2**-14): two reductions over the magnitudes,
    doubled."""
    if not bits.size:
        return False, False
    doubled = bits << np.uint32(1)  # the sign bit dropped
    large = bool(doubled.max() >= np.uint32(2 * 0x477FF000))
    doubled -= np.uint32(1)  # zero wraps to the top: only nonzero values count as small
    return large, bool(doubled.min() < np.uint32(2 * 0x38800000 - 1))


def _half_extremes(x: np.ndarray, y: np.ndarray) -> None:
    """Set in ``y`` the float16 roundings of the values of ``x`` outside float16's normal range:
    below 2**-14 it steps by 2**-24; beyond 65504 it overflows to infinity; NaN stays NaN."""
    with np.errstate(invalid="ignore"):  # signalling NaNs pass through the additions
        sub, tiny = _below_normal(x)
    np.copyto(y, sub, where=tiny)
    large = (x.view(np.uint32) & np.uint32(0x7FFFFFFF)) >= np.uint32(0x477FF000)
    if large.any():
        v = x[large]
        y[large] = np.where(np.isnan(v), v, np.copysign(np.float32(np.inf), v))


# -- float16 tables ------------------------------------------------------------------------------
#: Every float16 value, by its bits, as float32 (NumPy's exact cast): what a table is made of.
_ALL_HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


@op(
    HALF_TABLE,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(
        static_shape=True,
        fresh=True,
        native=native_form(_half_table_compiled if _HALF else None),
    ),
)
def half_table(node: Any, *, body: GraphProto) -> Callable[..., Any]:
    """Elementwise nodes computing on one float16 value held in float32 (see
    :mod:`~onnxflow.compile.passes.half_tables`): this NumPy form runs them as written
    (``body``)."""
    return body_call(node, body)
