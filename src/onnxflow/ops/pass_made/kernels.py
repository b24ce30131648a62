"""Kernels of the nodes the compile passes make (names and domain: :mod:`onnxflow.ops.pass_made`).

The registry imports this module, like every family, the first time a plan looks one of them
up (:mod:`onnxflow.ops.kernel_index` lists them): a model no pass rewrites never imports it,
nor the quantization and cast kernels it builds on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import compiled
from onnxflow.ops import integer_gemm as ig
from onnxflow.ops._common import clamp
from onnxflow.ops.cast import convert
from onnxflow.ops.linalg import matmul
from onnxflow.ops.memo import Memo
from onnxflow.ops.pass_made import (
    FAKE_QUANTIZE,
    FOLD_BATCH_NORM,
    FUSED_DOMAIN,
    HALF_ROUND,
    MATMUL_BIAS,
    POINTWISE,
    PRIMITIVE_LAYER_NORM,
    PRIMITIVE_RMS_NORM,
    QDQ_CONV,
    QDQ_ROLES,
    ROW_SQUARED_DISTANCES,
    SHAPE_MEMO,
)
from onnxflow.ops.quantization import (
    BYTE_RANGE,
    dequantize_linear,
    expand_param,
    fast_fake_quantize,
    quantize_linear,
)
from onnxflow.ops.reduction import reduce_sum_square
from onnxflow.ops.registry import op
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.observe import run_in_scope
from onnxflow.traits import WIDEN_LIMIT, Built, Traits, native_form

_FAST = (np.dtype(np.float32), np.dtype(np.float64))


@op(ROW_SQUARED_DISTANCES, 1, domain=FUSED_DOMAIN, build=True, traits=Traits(static_shape=True))
def row_squared_distances(node: Any, *, axis: int = -1, keepdims: int = 1) -> Built:
    """``ReduceSumSquare(A - b, axes=[axis])`` for a matrix A and a vector b, A kept transposed
    while it stays the same object (see :mod:`~onnxflow.compile.passes.fuse_distances`) by the
    stateful form each generated function makes; other inputs, and the plan's stateless form,
    run the two nodes as written."""

    def unfused(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _unfused(a, b, axis, keepdims)

    return Built(unfused, node.traits.replace(stateful=lambda: _transposing(axis, keepdims)))


def _transposing(axis: int, keepdims: int) -> Callable[..., np.ndarray]:
    """The kernel with its memo: A seen last, its transpose once seen twice in a row, and ones,
    in one tuple swapped whole, so concurrent runs each read a consistent one."""
    memo: Memo[tuple[np.ndarray, Any, Any]] = Memo()

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        kept = memo.kept
        fast = (
            a.ndim == 2
            and b.ndim == 1
            and a.dtype in _FAST
            and b.dtype is a.dtype
            and a.shape[1] == b.shape[0]
            and a.size
        )
        if not fast or kept is None or kept[0] is not a:
            memo.kept = (a, None, None) if fast else None
            return _unfused(a, b, axis, keepdims)
        if kept[1] is None:
            kept = memo.kept = (a, np.ascontiguousarray(a.T), np.ones(a.shape[1], a.dtype))
        d = np.subtract(kept[1], b[:, None])
        np.square(d, out=d)
        rows = np.dot(kept[2], d)
        return rows[:, None] if keepdims else rows

    return run


def _unfused(a: np.ndarray, b: np.ndarray, axis: int, keepdims: int) -> np.ndarray:
    """The two nodes as written: Sub, then ReduceSumSquare over ``axis``."""
    return reduce_sum_square(np.subtract(a, b), [axis], keepdims)


def _fake_quantize_compiled(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, *, axis: int = 1
) -> np.ndarray:
    """FakeQuantize's compiled form: the float32 case in one pass, clipped as the NumPy form's
    clip does (per tensor against scalars, per axis against arrays); else the NumPy form."""
    layout = ig.channels(x.shape, scale, axis)
    if not fast_fake_quantize(x, scale, zero_point) or layout is None:
        return fake_quantize(x, scale, zero_point, axis=axis)
    if zero_point.shape != scale.shape:
        return fake_quantize(x, scale, zero_point, axis=axis)
    lo, hi = BYTE_RANGE[zero_point.dtype]
    y = np.empty(x.shape, np.float32)
    if scale.size == 1 and scale.ndim <= 1:
        z = float(zero_point.reshape(()))
        ig.QUANT.fake_quantize(ig.flat(x), y.reshape(-1), float(scale.reshape(())), lo - z, hi - z)
        return y
    z = ig.vector(zero_point, zero_point)
    s = ig.vector(scale, scale)
    ig.QUANT.fake_quantize_axis(ig.flat(x), y.reshape(-1), s, lo - z, hi - z, *layout)
    return y


@op(
    FAKE_QUANTIZE,
    1,
    domain=FUSED_DOMAIN,
    traits=Traits(fresh=True, native=native_form(ig.QUANT and _fake_quantize_compiled)),
)
def fake_quantize(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, *, axis: int = 1
) -> np.ndarray:
    """``DequantizeLinear(QuantizeLinear(x, scale, zero_point))`` in one float32 buffer when
    x and the scale are float32 and the zero point 8-bit; else the two kernels as written.

    Equal to the pair for every number; a NaN stays NaN (the pair's 8-bit cast of NaN is
    undefined)."""
    if not fast_fake_quantize(x, scale, zero_point):
        q = quantize_linear(x, scale, zero_point, axis=axis)
        return dequantize_linear(q, scale, zero_point, axis=axis)
    # clamp(rint(x / s) + z, lo, hi) - z is rint(x / s) clamped to [lo - z, hi - z], exactly
    lo, hi = BYTE_RANGE[zero_point.dtype]
    if zero_point.size == 1 and zero_point.ndim <= 1:  # small integers: exact as Python floats
        z: Any = float(zero_point.reshape(()))
    else:
        z = expand_param(zero_point, x.shape, axis, 0, "zero point").astype(np.float32)
    s = expand_param(scale, x.shape, axis, 0, "scale")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = np.divide(x, s)
    np.rint(y, out=y)
    clamp(y, lo - z, hi - z, out=y)
    y *= s
    return y


@op(FOLD_BATCH_NORM, 1, domain=FUSED_DOMAIN, traits=Traits(fresh=True))
def fold_batch_norm(
    w: np.ndarray,
    b: np.ndarray | None,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray]:
    """A Conv's weight ``W`` and bias ``B`` (None: zeros) with an inference BatchNormalization
    after it folded in, in W's dtype: per output channel ``a = scale / sqrt(var + epsilon)``,
    ``W * a`` and ``B * a + (bias - mean * a)``."""
    dt = w.dtype
    s, m, v, c = (p.astype(dt, copy=False) for p in (scale, mean, var, bias))
    a = s / np.sqrt(v + dt.type(epsilon))
    shift = c - m * a
    if b is not None:
        shift = b.astype(dt, copy=False) * a + shift
    return w * a.reshape(-1, *[1] * (w.ndim - 1)), shift


#: A ShapeMemo keeps its values only while they hold at most this many bytes in all.
MEMO_LIMIT = 64 << 20


@op(SHAPE_MEMO, 1, domain=FUSED_DOMAIN, build=True)
def shape_memo(node: Any, *, body: GraphProto) -> Built:
    """Run ``body`` (shape arithmetic, see :mod:`~onnxflow.compile.passes.memo_shapes`) on the
    node's inputs. The plan's stateless form runs it every time; the stateful form each
    generated function makes keeps the inputs and outputs of its last run and returns those
    outputs, read-only, while the inputs are equal."""
    run = _body_call(node, body)
    n_inputs = len(body.input)
    return Built(run, node.traits.replace(stateful=lambda: _remembering(run, n_inputs)))


def _body_call(node: Any, body: GraphProto) -> Callable[..., Any]:
    """What runs ``body``, a pass-made node's subgraph, on the node's inputs (and captures),
    as the scope ``body`` of the node that observers see: its one output, or a tuple."""
    sub = node.subgraph(body)
    n_inputs = len(body.input)
    key = node.key
    single = len(body.output) == 1

    def outputs(args: tuple[Any, ...]) -> list[Any]:
        return current_runner(sub.plan)([*args[:n_inputs], *sub.bind(args[n_inputs:])])

    def run(*args: Any) -> Any:
        values = run_in_scope(key, "body", 1, outputs, args)
        return values[0] if single else tuple(values)

    return run


def _remembering(run: Callable[..., Any], n_inputs: int) -> Callable[..., Any]:
    """``run`` with a memo of its last inputs and result, in one tuple swapped whole."""
    memo: Memo[tuple[tuple[Any, ...], Any]] = Memo()

    def remembered(*args: Any) -> Any:
        kept = memo.kept
        if kept is not None and _same(kept[0], args[:n_inputs]):
            return kept[1]
        result = run(*args)
        values = result if isinstance(result, tuple) else (result,)
        if all(v.__class__ is np.ndarray for v in values) and (
            sum(v.nbytes for v in values) <= MEMO_LIMIT
        ):
            for v in values:
                v.flags.writeable = False
            memo.kept = (args[:n_inputs], result)
        return result

    return remembered


def _same(kept: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """Whether the inputs ``now`` are those ``kept``: the same arrays, or arrays of the same
    shape, dtype and bytes (bitwise: 0.0 and -0.0 differ, as they may in results)."""
    for a, b in zip(kept, now):
        if a is b:
            continue
        if a.__class__ is not np.ndarray or b.__class__ is not np.ndarray:
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            return False
    return True


_F32 = np.dtype(np.float32)
_HALF = compiled.module("_half")


def _half_round_over_x(x: np.ndarray) -> np.ndarray:
    """:func:`half_round` written over ``x`` (which dies here) when it is float32."""
    return half_round(x, over=True)


def _half_round_compiled(x: np.ndarray) -> np.ndarray:
    """:func:`half_round` in one compiled pass (``native/_half``) for float32 ``x``: the same
    bits, NaN kept as it is too (bound only when the module was built)."""
    if x.dtype != _F32:
        return half_round(x)
    out = np.empty(x.shape, _F32)
    _HALF.round_f32(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


def _half_round_compiled_over_x(x: np.ndarray) -> np.ndarray:
    """:func:`_half_round_compiled` written over ``x`` (which dies here) when it can be."""
    if x.dtype != _F32 or not (x.flags.c_contiguous and x.flags.writeable):
        return _half_round_compiled(x)
    flat = x.reshape(-1)
    _HALF.round_f32(flat, flat)
    return x


@op(
    HALF_ROUND,
    1,
    domain=FUSED_DOMAIN,
    traits=Traits(
        fresh=True,
        static_shape=True,
        in_place=_half_round_over_x,
        native=native_form(_half_round_compiled if _HALF else None, _half_round_compiled_over_x),
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


# -- pointwise regions ---------------------------------------------------------------------------
_POINTWISE = compiled.module("_pointwise")
#: Broadcast layouts by input shapes (:func:`_layout`), kept for the shapes seen last.
_LAYOUTS: dict[tuple[tuple[int, ...], ...], Any] = {}
_LAYOUTS_KEPT = 256


def _pointwise_compiled(
    node: Any, *, body: GraphProto, opcodes: list[str], operands: list[int]
) -> Callable[..., np.ndarray]:
    """The compiled form of :func:`pointwise`: the region's instructions in one pass over
    chunks of the output (:mod:`onnxflow.native._pointwise`); inputs that are not float32
    arrays, or broadcast in a way one pass does not read, run the nodes as written."""
    as_written = _body_call(node, body)
    codes = [_POINTWISE.OPCODES.index(code) for code in opcodes]  # type: ignore[union-attr]
    program = np.array(
        [[c, *operands[3 * j : 3 * j + 3]] for j, c in enumerate(codes)], dtype=np.int32
    )
    run_program = _POINTWISE.run  # type: ignore[union-attr]

    def region(*args: Any) -> Any:
        if not all(a.__class__ is np.ndarray and a.dtype == _F32 for a in args):
            return as_written(*args)
        shapes = tuple(a.shape for a in args)
        layout = _LAYOUTS.get(shapes) or _layout(shapes)
        if layout is None:
            return as_written(*args)
        shape, inner, period = layout
        out = np.empty(shape, _F32)
        if out.size:
            flat = tuple(np.ascontiguousarray(a).reshape(-1) for a in args)
            run_program(program, flat, inner, period, out.reshape(-1))
        return out

    region.__name__ = region.__qualname__ = "pointwise_compiled"
    return region


def _layout(shapes: tuple[tuple[int, ...], ...]) -> Any:
    """The output shape of inputs of ``shapes`` broadcast together and, per input, the
    ``inner`` and ``period`` by which element i of the output reads element (i // inner) %
    period of it; None when an input's dims that are not 1 do not form one run of the output's
    dims (one pass reads it as a chunked gather only then). Kept in :data:`_LAYOUTS`."""
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return None
    inner, period = [], []
    for shape in shapes:
        dims = (1,) * (len(out) - len(shape)) + tuple(shape)
        spread = [d for d, size in enumerate(dims) if size != 1]
        if not spread:
            inner.append(max(1, math.prod(out)))
            period.append(1)
            continue
        lo, hi = spread[0], spread[-1]
        if dims[lo : hi + 1] != out[lo : hi + 1]:
            return None
        inner.append(math.prod(out[hi + 1 :]))
        period.append(math.prod(out[lo : hi + 1]))
    layout = (out, np.array(inner, np.int64), np.array(period, np.int64))
    if len(_LAYOUTS) >= _LAYOUTS_KEPT:
        _LAYOUTS.clear()
    _LAYOUTS[shapes] = layout
    return layout


@op(
    POINTWISE,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(
        static_shape=True,
        fresh=True,
        native=native_form(_pointwise_compiled if _POINTWISE is not None else None),
    ),
)
def pointwise(
    node: Any, *, body: GraphProto, opcodes: list[str], operands: list[int]
) -> Callable[..., Any]:
    """A group of float32 elementwise nodes (see :mod:`~onnxflow.compile.passes.pointwise`):
    this NumPy form runs them as written (``body``); ``opcodes`` and ``operands`` are the
    program its compiled form runs."""
    return _body_call(node, body)


# -- LayerNorm and RMSNorm written as primitives -----------------------------------------------
_MATH = compiled.module("_math")
_NONE = np.zeros(0, np.float32)


def norm_rows(
    x: np.ndarray,
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    epsilon: float,
    centered: bool,
) -> np.ndarray | None:
    """LayerNorm (``centered``) or RMSNorm of float32 ``x`` over its last axis, times ``gamma``
    and plus ``beta`` (None: none), computed in double and rounded once
    (``onnxflow.native._math.norm_f32``, LayerNormalization's and RMSNormalization's own
    compiled loop, with gamma 1 when there is none); None when the inputs are not float32 arrays
    whose gamma and beta give one value per column or one in all (the caller then runs the
    nodes as written). The one entry point of the fused norms' compiled forms."""
    if x.__class__ is not np.ndarray or x.dtype != _F32 or x.ndim == 0 or x.size == 0:
        return None
    cols = x.shape[-1]
    params = [_columns(p, cols) for p in (gamma, beta)]
    if any(p is None for p in params):
        return None
    out = np.empty(x.shape, _F32)
    rows = np.ascontiguousarray(x).reshape(-1, cols)
    gamma_row = params[0] if params[0].size else np.ones(cols, _F32)
    beta_row = params[1] if params[1].size else None
    _MATH.norm_f32(  # type: ignore[union-attr]
        rows.reshape(-1),
        None,
        None,
        gamma_row,
        beta_row,
        out.reshape(-1),
        None,
        None,
        None,
        epsilon,
        not centered,
    )
    return out


def _columns(p: np.ndarray | None, cols: int) -> np.ndarray | None:
    """``p`` as one contiguous float32 value per column (empty for None), or None when it is
    not a float32 array of at most one dim holding one value or ``cols``."""
    if p is None:
        return _NONE
    if p.__class__ is not np.ndarray or p.dtype != _F32 or p.ndim > 1 or p.size not in (1, cols):
        return None
    if p.ndim == 1 and p.size == cols and p.flags.c_contiguous:
        return p
    return np.ascontiguousarray(np.broadcast_to(p.reshape(-1), (cols,)))


def _norm_compiled(centered: bool) -> Callable[..., Callable[..., Any]]:
    """The compiled form of a fused norm: :func:`norm_rows`, else the nodes as written."""

    def build(
        node: Any, *, body: GraphProto, epsilon: float, scaled: int = 0, shifted: int = 0
    ) -> Callable[..., Any]:
        as_written = _body_call(node, body)

        def norm(*args: Any) -> Any:
            gamma = args[1] if scaled else None
            beta = args[1 + scaled] if shifted else None
            out = norm_rows(args[0], gamma, beta, epsilon, centered)
            return as_written(*args) if out is None else out

        norm.__name__ = norm.__qualname__ = "norm_compiled"
        return norm

    return build


def _norm_traits(centered: bool) -> Traits:
    compiled_form = _norm_compiled(centered) if _MATH is not None else None
    return Traits(static_shape=True, fresh=True, native=native_form(compiled_form))


@op(PRIMITIVE_LAYER_NORM, 1, domain=FUSED_DOMAIN, build=True, traits=_norm_traits(True))
def primitive_layer_norm(
    node: Any, *, body: GraphProto, epsilon: float, scaled: int = 0, shifted: int = 0
) -> Callable[..., Any]:
    """LayerNorm over the last axis written as primitives (see
    :mod:`~onnxflow.compile.passes.fuse_norms`): this NumPy form runs the nodes as written
    (``body``); inputs: x, gamma when ``scaled``, beta when ``shifted``, then the chain's other
    constants."""
    return _body_call(node, body)


@op(PRIMITIVE_RMS_NORM, 1, domain=FUSED_DOMAIN, build=True, traits=_norm_traits(False))
def primitive_rms_norm(
    node: Any, *, body: GraphProto, epsilon: float, scaled: int = 0, shifted: int = 0
) -> Callable[..., Any]:
    """RMSNorm over the last axis written as primitives (see
    :mod:`~onnxflow.compile.passes.fuse_norms`): this NumPy form runs the nodes as written
    (``body``); inputs: x, the weight when ``scaled``, then the chain's other constants."""
    return _body_call(node, body)


# -- MatMul and its bias -----------------------------------------------------------------------
@op(
    MATMUL_BIAS,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(fresh=True, static_shape=True),
)
def build_matmul_bias(node: Any) -> Built:
    """``Add(MatMul(a, b), bias)`` (see :mod:`~onnxflow.compile.passes.fuse_matmul_bias`):
    :func:`matmul_bias`; the stateful form each generated function makes keeps a small bias
    widened to the product's shape, as the Add it replaces does (:func:`_widened_bias`)."""
    return Built(matmul_bias, node.traits.replace(stateful=_widened_bias))


def _adds_in_place(y: np.ndarray, bias: np.ndarray) -> bool:
    """Whether float32 ``bias`` (at most one dim) adds into float32 product ``y`` without
    widening it."""
    return (
        y.dtype == _F32
        and bias.dtype == _F32
        and y.ndim >= 1
        and bias.ndim <= 1
        and bias.size in (1, y.shape[-1])
        and y.flags.writeable
    )


def matmul_bias(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The bias added into the product's own fresh array when :func:`_adds_in_place` (the same
    values: ``np.add`` with ``out`` computes what it does without); else the two kernels as
    written."""
    y = matmul(a, b)
    if not _adds_in_place(y, bias):
        return np.asarray(np.add(y, bias))
    np.add(y, bias, out=y)
    return y


def _widened_bias() -> Callable[..., np.ndarray]:
    """:func:`matmul_bias` keeping the bias it saw last broadcast to the product's shape while
    that holds at most WIDEN_LIMIT elements: NumPy adds equal shapes faster than it broadcasts
    (the bias is a constant: the same object holds the same values)."""
    memo: Memo[tuple[np.ndarray, tuple[int, ...], np.ndarray]] = Memo()

    def run(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
        y = matmul(a, b)
        kept = memo.kept
        if kept is not None and kept[0] is bias and kept[1] == y.shape and y.dtype is _F32:
            np.add(y, kept[2], out=y)  # the checks below held when kept (fresh, writeable y)
            return y
        if not _adds_in_place(y, bias):
            return np.asarray(np.add(y, bias))
        if kept is None or kept[0] is not bias or kept[1] != y.shape:
            if y.size > WIDEN_LIMIT:
                np.add(y, bias, out=y)
                return y
            kept = memo.kept = (bias, y.shape, np.ascontiguousarray(np.broadcast_to(bias, y.shape)))
        np.add(y, kept[2], out=y)
        return y

    return run


# -- quantized convolutions in QDQ form ----------------------------------------------------------
#: The unit roundoff of float32.
_U = 2.0**-24
#: Roundings besides the sum's K: x's and w's dequantization, the bias add, the division by
#: y's scale (the float graph's); the integer path's float32 scale and tail (5) -- see
#: :mod:`~onnxflow.compile.passes.fuse_qdq_conv`.
_EXTRA_ROUNDINGS = 4 + 5


def qdq_conv_bound(
    x: np.ndarray,
    sx: np.ndarray,
    zx: np.ndarray,
    w: np.ndarray,
    sw: np.ndarray,
    zw: np.ndarray,
    b: np.ndarray | None,
    sb: np.ndarray | None,
    sy: np.ndarray,
) -> np.ndarray:
    """Per output channel, ``E_c``: how far (in steps of ``sy``) the float graph's value before
    rounding may lie from the integer path's (:mod:`~onnxflow.compile.passes.fuse_qdq_conv`)."""
    m = w.shape[0]
    n = w[0].size + _EXTRA_ROUNDINGS
    gamma = n * _U / (1 - n * _U)
    scale_x = abs(float(sx.reshape(())))
    scale_w = np.abs(np.broadcast_to(sw.astype(np.float64).reshape(-1), (m,)))
    shifted = w.reshape(m, -1).astype(np.float64) - zw.astype(np.float64).reshape(-1, 1)
    terms = ig.reach(x, zx) * scale_x * scale_w * np.abs(shifted).sum(axis=1)
    if b is not None and sb is not None:
        bias = np.abs(b.astype(np.float64))
        b_scale = np.broadcast_to(sb.astype(np.float64).reshape(-1), (m,))
        terms = terms + bias * np.maximum(np.abs(b_scale), scale_x * scale_w)
        mismatch = bias * np.abs(b_scale - scale_x * scale_w)
    else:
        mismatch = np.zeros(m)
    return (gamma * terms + mismatch) / abs(float(sy.reshape(())))


def _qdq_conv_fits(roles: dict[str, Any], weight_axis: int) -> bool:
    """Whether the integer path takes these values: 8-bit X and W with their zero points'
    types, per-tensor X and Y parameters, W's per tensor or per output channel, an int32 bias
    of zero point 0 with its scale per tensor or per channel."""
    x, w, b = roles["x"], roles["w"], roles["b"]
    m = w.shape[0] if w.ndim else 0
    if not _qdq_types_fit(roles) or w.ndim != x.ndim:
        return False
    if any(roles[k].size != 1 for k in ("sx", "zx", "sy", "zy")):
        return False
    if roles["sw"].size != 1 and (weight_axis not in (0, -w.ndim) or roles["sw"].shape != (m,)):
        return False
    if (
        roles["zw"].shape != roles["sw"].shape
        or roles["sx"].dtype != _F32
        or roles["sy"].dtype != _F32
    ):
        return False
    return b is None or _qdq_bias_fits(b, roles["sb"], roles["zb"], m)


def _qdq_types_fit(roles: dict[str, Any]) -> bool:
    """Whether X, W and Y are 8-bit, X and W of their zero points' types."""
    x, w, zx, zw, zy = (roles[k] for k in ("x", "w", "zx", "zw", "zy"))
    if x.dtype not in ig.BYTES or w.dtype not in ig.BYTES or zy.dtype not in ig.BYTES:
        return False
    return zx.dtype == x.dtype and zw.dtype == w.dtype


def _qdq_bias_fits(b: np.ndarray, sb: np.ndarray, zb: np.ndarray | None, m: int) -> bool:
    if b.dtype != np.int32 or b.shape != (m,) or sb.size not in (1, m):
        return False
    return zb is None or not np.any(zb)


def _qdq_conv_compiled(
    node: Any,
    *,
    body: GraphProto,
    slots: list[int],
    weight_axis: int = 1,
    **conv: Any,
) -> Callable[..., np.ndarray]:
    """QDQConv's compiled form: QLinearConv's integer convolution where the values fit and the
    bound :func:`qdq_conv_bound` is below one step for every channel (at most one step from
    the float graph then, at its ties); else the nodes as written."""
    from onnxflow.ops.conv import qlinear_conv_compiled

    as_written = _body_call(node, body)
    within = _QdqBound()

    def integer(*args: Any) -> Any:
        roles = {r: (args[k] if k >= 0 else None) for r, k in zip(QDQ_ROLES, slots)}
        if not all(a is None or a.__class__ is np.ndarray for a in roles.values()):
            return as_written(*args)
        if not _qdq_conv_fits(roles, weight_axis) or not within(roles):
            return as_written(*args)
        x, sx, zx, w, sw, zw, b, _, _, sy, zy = roles.values()
        return qlinear_conv_compiled(x, sx, zx, w, sw, zw, sy, zy, b, **conv)

    integer.__name__ = integer.__qualname__ = "qdq_conv_compiled"
    return integer


class _QdqBound:
    """Whether :func:`qdq_conv_bound` is below 1 for every channel: one node's answer, kept
    for its constant W and the parameters' values (computed again when they change)."""

    _NAMES = ("sx", "zx", "sw", "zw", "b", "sb", "sy")

    def __init__(self) -> None:
        self.kept: tuple[np.ndarray, tuple[Any, ...], bool] | None = None

    def __call__(self, roles: dict[str, Any]) -> bool:
        w = roles["w"]
        key = (roles["x"].dtype.char, *(ig.by_value(roles[k]) for k in self._NAMES))
        kept = self.kept
        if kept is not None and kept[0] is w and kept[1] == key and not w.flags.writeable:
            return kept[2]
        args = (roles[k] for k in ("x", "sx", "zx", "w", "sw", "zw", "b", "sb", "sy"))
        answer = bool(np.all(qdq_conv_bound(*args) < 1.0))
        self.kept = (w, key, answer)
        return answer


@op(
    QDQ_CONV,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(fresh=True, native=native_form(ig.QUANT and _qdq_conv_compiled)),
)
def qdq_conv(
    node: Any, *, body: GraphProto, slots: list[int], weight_axis: int = 1, **conv: Any
) -> Callable[..., Any]:
    """A quantized convolution in QDQ form (see :mod:`~onnxflow.compile.passes.fuse_qdq_conv`):
    this NumPy form runs its nodes as written (``body``); ``slots`` say which input is which
    (:data:`QDQ_ROLES`), ``weight_axis`` is W's DequantizeLinear axis, the rest the Conv's
    attributes, for the compiled form."""
    return _body_call(node, body)
