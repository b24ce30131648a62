"""Elementwise math, logic, bitwise and comparison operators.

Unary math      Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf Exp Floor IsInf IsNaN
                Log Neg Reciprocal Round Sign Sin Sinh Sqrt Tan Tanh
Arithmetic      Add Sub Mul Div Mod Pow
Variadic        Sum Mean Max Min
Comparison      Equal Greater GreaterOrEqual Less LessOrEqual
Logic, bitwise  And Or Xor Not BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot
Selection       Clip Where

Binary operators broadcast NumPy-style from version 7 on; their versions 1 and 6 take the legacy
``broadcast``/``axis`` attributes (B broadcast onto A, aligned at ``axis`` or at the end).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import clamp
from onnxflow.ops.memo import Memo
from onnxflow.ops.pass_made import SMALL_POWERS
from onnxflow.ops.registry import op
from onnxflow.traits import WIDEN_LIMIT, Built, NumpyCall, Traits, native_form, ufunc_traits

Binary = Callable[[np.ndarray, np.ndarray], np.ndarray]


# -- registration helpers ---------------------------------------------------------------------
def _array_out_supported() -> bool:
    """Whether ufuncs take ``out=...`` (NumPy >= 2.3): an array result even for 0-d inputs."""
    try:
        return np.add(np.zeros(()), np.zeros(()), out=...).__class__ is np.ndarray
    except TypeError:
        return False


#: With it, a ufunc kernel returns arrays without a second call to np.asarray: 0-d arithmetic, as
#: in a Loop's counters, costs 0.30 instead of 0.47 us a node.
ARRAY_OUT = _array_out_supported()


def _unary(
    op_type: str,
    fn: Callable[[np.ndarray], np.ndarray],
    *versions: int,
    loops: dict[Any, compiled.Loop] | None = None,
    pointwise: str | None = None,
    numpy: str | None = None,
) -> None:
    """Register ``fn`` applied elementwise as ``op_type``; version 1 may carry consumed_inputs.
    ``loops``: the compiled loops of its compiled form, by dtype (:func:`compiled.unary`);
    ``pointwise``: its instruction in a compiled pointwise region; ``numpy``: its NumPy form
    when ``fn`` is no ufunc (:class:`Traits`)."""
    if ARRAY_OUT and isinstance(fn, np.ufunc):

        def kernel(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
            return fn(x, out=...)  # type: ignore[call-overload]

        traits = ufunc_traits(fn, pointwise=pointwise)
    else:

        def kernel(x: np.ndarray, *, consumed_inputs: list[int] | None = None) -> np.ndarray:
            return np.asarray(fn(x))

        traits = Traits(elementwise=True, static_shape=True, pointwise=pointwise, numpy=numpy)
    if loops:
        form = compiled.unary(kernel, loops, f"{op_type}_compiled")
        traits = traits.replace(native=native_form(form), fresh=True)
    kernel.__name__ = kernel.__qualname__ = op_type
    kernel.__doc__ = f"Return {getattr(fn, '__name__', op_type)}(x) elementwise, in x's dtype."
    op(op_type, *versions, traits=traits)(kernel)


def _binary(
    op_type: str,
    fn: Binary,
    legacy: tuple[int, ...],
    *versions: int,
    rounds_once: bool = False,
    pointwise: str | None = None,
    native: Callable[..., Any] | None = None,
) -> None:
    """Register ``fn`` as ``op_type``: legacy broadcasting in ``legacy``, NumPy-style after.
    ``rounds_once``: ``fn`` computes float16 in float32 and rounds once (a float ufunc);
    ``pointwise``: its instruction in a compiled pointwise region (:class:`Traits`);
    ``native``: the compiled form of the NumPy-style versions (not for ufuncs)."""

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(a, b))

    if ARRAY_OUT and isinstance(fn, np.ufunc):

        def build(node: Any) -> Built:
            if _broadcasts(node):  # generated code keeps the operand widened: see _widening
                widening = functools.partial(_widening, fn)
                return Built(_inline(fn), node.traits.replace(widens=True, stateful=widening))
            return Built(_inline(fn), node.traits)

        build.__name__ = build.__qualname__ = op_type
        build.__doc__ = f"Return {fn.__name__}(a, b) with NumPy-style broadcasting."
        op(op_type, *versions, build=True, traits=ufunc_traits(fn, pointwise=pointwise))(build)
        versions = ()

    def legacy_kernel(
        a: np.ndarray,
        b: np.ndarray,
        *,
        broadcast: int = 0,
        axis: int | None = None,
        consumed_inputs: list[int] | None = None,
    ) -> np.ndarray:
        return np.asarray(fn(a, _legacy_rhs(a, b, broadcast, axis)))

    name = getattr(fn, "__name__", op_type)
    for k, prefix in ((kernel, ""), (legacy_kernel, "legacy_")):
        k.__name__ = k.__qualname__ = f"{prefix}{op_type}"
    kernel.__doc__ = f"Return {name}(a, b) with NumPy-style broadcasting."
    legacy_kernel.__doc__ = f"Return {name}(a, b), B broadcast onto A by the legacy rules."
    if legacy:
        op(op_type, *legacy)(legacy_kernel)
    if versions:
        form = {divide: "onnx_div({0}, {1})", power: "onnx_pow({0}, {1})"}.get(fn)
        traits = Traits(
            elementwise=True,
            rounds_once=rounds_once,
            pointwise=pointwise,
            numpy=form,
            native=native_form(native),
        )
        op(op_type, *versions, traits=traits)(kernel)


def _widening(ufunc: np.ufunc) -> Binary:
    """A binary kernel for one node that remembers its broadcast operand, widened.

    NumPy's broadcasting costs about 0.5 us a call on top of the arithmetic: a bias of shape
    (128,) added to a (1, 128) state takes 0.82 us, against 0.32 us for equal shapes. When the
    same array object comes back as the narrower operand for the same other shape (a constant,
    or a value fixed across a loop's iterations) the kernel keeps it broadcast to the full shape
    and, from then on, combines equal shapes. Values are never written in place, so the same
    object holds the same data; small outputs only, so the kept copy stays small.
    """
    memo: Memo[tuple[Any, ...]] = Memo()  # (narrow side, its array, other's shape, widened)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not b.ndim or not a.ndim or a.shape == b.shape:  # NumPy is quick with 0-d operands
            return ufunc(a, b, out=...)  # type: ignore[call-overload]
        kept = memo.kept
        if kept is not None and kept[3] is not None:
            side, narrow, other, wide = kept
            if side and b is narrow and a.shape == other:
                return ufunc(a, wide, out=...)  # type: ignore[call-overload]
            if not side and a is narrow and b.shape == other:
                return ufunc(wide, b, out=...)  # type: ignore[call-overload]
        y = ufunc(a, b, out=...)  # type: ignore[call-overload]
        if y.size <= WIDEN_LIMIT:
            memo.kept = _remember(kept, a, b, y.shape)
        return y

    return kernel


def _inline(ufunc: np.ufunc) -> Binary:
    """``ufunc(a, b, out=...)``: generated code calls the ufunc itself (its traits say so)."""

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return ufunc(a, b, out=...)  # type: ignore[call-overload]

    return kernel


def _broadcasts(node: Any) -> bool:
    """Whether a node's operands may broadcast other than from 0-d, as far as types tell.

    Equal static shapes and 0-d operands take the unwidened ufunc kernel: the checks of
    _widening would cost them 0.1 us a call for nothing.
    """
    shapes = [node.input_shape(i) for i in range(node.n_inputs)]
    if any(sh is not None and len(sh) == 0 for sh in shapes):
        return False
    if None in shapes or len(shapes) != 2:
        return True
    a, b = shapes
    return len(a) != len(b) or any(x is None or x != y for x, y in zip(a, b))


def _remember(kept: Any, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> Any:
    """The next memo: widen on the second sighting of the same narrow operand, else note it."""
    if a.shape == shape:
        side, narrow, other = 1, b, a.shape
    elif b.shape == shape:
        side, narrow, other = 0, a, b.shape
    else:
        return None  # both operands broadcast: nothing to keep
    if kept is not None and kept[0] == side and kept[1] is narrow and kept[2] == other:
        wide = np.ascontiguousarray(np.broadcast_to(narrow, shape))
        wide.flags.writeable = False
        return (side, narrow, other, wide)
    return (side, narrow, other, None)


def _legacy_rhs(a: np.ndarray, b: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """Return B shaped to broadcast onto A under the opset < 7 ``broadcast``/``axis`` rules."""
    if not broadcast:
        if a.shape != b.shape:
            raise ValueError(
                f"inputs must have the same shape when broadcast=0, found {a.shape} and {b.shape}"
            )
        return b
    if b.size == 1:
        return b.reshape(())
    start = a.ndim - b.ndim if axis is None else axis + a.ndim if axis < 0 else axis
    run = a.shape[start : start + b.ndim]
    # Exporters of that era (PyTorch) also emit B with size-1 dims inside the aligned run.
    if start < 0 or len(run) != b.ndim or any(m not in (n, 1) for n, m in zip(run, b.shape)):
        raise ValueError(
            f"cannot broadcast B of shape {b.shape} onto A of shape {a.shape} "
            f"at axis {start} (B must match a contiguous run of A's dimensions)"
        )
    return b.reshape(b.shape + (1,) * (a.ndim - start - b.ndim))


# -- unary math -------------------------------------------------------------------------------
# erf(x) = 2/sqrt(pi) * sum((-1)**n * x**(2n+1) / (n! (2n+1))), as a polynomial in x*x
_ERF_SERIES = tuple(
    2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(12)
)
# exp(a*a) * erfc(a) for a >= 0.5 as a polynomial in t = 1 / (1 + a/2), fitted for onnxflow by
# Chebyshev least squares against math.erfc on 0.5 <= a <= 26 (relative error below 2e-13).
_ERFC_SCALED = (
    -9.155870506205588e-12, 0.28209479241193713, 0.2820947729733593, 0.24683323597506512,
    0.17630703715438206, 0.08374316395731574, -0.004121618448784697, -0.06031614946788817,
    -0.026599723870490213, -0.14554675883149637, 0.6015891234613138, -1.5580347671376398,
    3.5191249040822137, -5.760010919617342, 6.379352663664237, -4.716034685683433,
    2.254273108191401, -0.6355101022931144, 0.0807620695564119,
)  # fmt: skip


def _horner(t: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Return the polynomial with ``coefficients`` (lowest degree first) evaluated at t."""
    acc = np.full_like(t, coefficients[-1])
    for c in coefficients[-2::-1]:
        acc *= t
        acc += c
    return acc


def _erf_abs(a: np.ndarray, complement: bool) -> np.ndarray:
    """Return erf(a), or erfc(a) when ``complement``, for a >= 0 (NaN passes through).

    Both branches are evaluated on clamped copies and blended by multiplying with 0/1 masks,
    which is exact and much faster than boolean indexing or ``np.where`` on mixed signs.
    """
    s = clamp(a, None, a.dtype.type(0.5))
    series = s * _horner(s * s, _ERF_SERIES)
    b = clamp(a, a.dtype.type(0.5), None)
    tail = np.exp(-b * b) * _horner(1 / (1 + 0.5 * b), _ERFC_SCALED)
    if complement:
        series = 1 - series
    else:
        tail = 1 - tail
    small = a < 0.5
    return small * series + ~small * tail


# The same for float32 results on 0.5 <= a <= 4 (erf(a) rounds to 1 beyond): degree 8, relative
# error below 6e-9, fitted the same way.
_ERFC_SCALED_32 = (
    -0.00023623015172052897, 0.28626424829363295, 0.250047893954066, 0.3866694371756762,
    -0.20051893099489487, 0.7162885666914467, -0.6206562352578168, 0.20191756963066734,
    -0.01975884099223241,
)  # fmt: skip


def _erf_abs_32(a: np.ndarray) -> np.ndarray:
    """Return erf(a) for float32 a >= 0 with polynomials sized for float32 (within 3 ulp)."""
    s = clamp(a, None, np.float32(0.5))
    series = s * _horner(s * s, _ERF_SERIES[:7])
    b = clamp(a, np.float32(0.5), np.float32(4.0))
    tail = _horner(1 / (1 + np.float32(0.5) * b), _ERFC_SCALED_32)
    np.square(b, out=b)
    np.negative(b, out=b)
    tail *= np.exp(b, out=b)
    np.subtract(1, tail, out=tail)
    small = a < 0.5
    series *= small  # blending by 0/1 products is exact, and faster than np.where
    tail *= ~small
    tail += series
    return tail


_CHUNK = 65536


def _erf_dtype(x: np.ndarray) -> type:
    """Return the float type erf is evaluated in: float32 for up to 32-bit floats, else float64."""
    return np.float32 if x.dtype.kind in "fV" and x.dtype.itemsize <= 4 else np.float64


def erf(x: np.ndarray) -> np.ndarray:
    """Return the error function of x (relative error about 1 ulp of float32 or float64)."""
    w = x.astype(_erf_dtype(x), copy=False)
    if w.dtype != np.float32:
        return np.asarray(np.copysign(_erf_abs(np.abs(w), False), w).astype(x.dtype, copy=False))
    a = np.abs(w.reshape(-1))
    for start in range(0, a.size, _CHUNK):  # temporaries of a chunk stay in cache
        part = a[start : start + _CHUNK]
        part[...] = _erf_abs_32(part)
    a = a.reshape(w.shape)
    bits = a.view(np.uint32)  # erf is odd: give each result its argument's sign bit
    bits |= w.view(np.uint32) & np.uint32(0x80000000)
    return a.astype(x.dtype, copy=False)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Return the standard normal CDF of x (in float32 or float64), accurate in both tails."""
    z = x.astype(_erf_dtype(x)) * -math.sqrt(0.5)
    tail = _erf_abs(np.abs(z), True)
    right = z >= 0
    return np.asarray(0.5 * (right * tail + ~right * (2 - tail)))


_UNARY: tuple[tuple[str, Callable[[np.ndarray], np.ndarray], tuple[int, ...]], ...] = (
    ("Abs", np.abs, (1, 6, 13)),
    ("Acos", np.arccos, (7, 22)),
    ("Acosh", np.arccosh, (9, 22)),
    ("Asin", np.arcsin, (7, 22)),
    ("Asinh", np.arcsinh, (9, 22)),
    ("Atan", np.arctan, (7, 22)),
    ("Atanh", np.arctanh, (9, 22)),
    ("Ceil", np.ceil, (1, 6, 13)),
    ("Cos", np.cos, (7, 22)),
    ("Cosh", np.cosh, (9, 22)),
    ("Erf", erf, (9, 13)),
    ("Exp", np.exp, (1, 6, 13)),
    ("Floor", np.floor, (1, 6, 13)),
    ("IsNaN", np.isnan, (9, 13, 20)),
    ("Log", np.log, (1, 6, 13)),
    ("Neg", np.negative, (1, 6, 13)),
    ("Reciprocal", np.reciprocal, (1, 6, 13)),
    ("Round", np.rint, (11, 22)),
    ("Sign", np.sign, (9, 13)),
    ("Sin", np.sin, (7, 22)),
    ("Sinh", np.sinh, (9, 22)),
    ("Sqrt", np.sqrt, (1, 6, 13)),
    ("Tan", np.tan, (7, 22)),
    ("Tanh", np.tanh, (1, 6, 13)),
    ("Not", np.logical_not, (1,)),
    ("BitwiseNot", np.invert, (18,)),
)

_MATH = compiled.module("_math")
#: The unary operators with a compiled form: their loops by dtype.
_COMPILED_UNARY = {"Erf": compiled.loops(_MATH, float32="erf_f32", float64="erf_f64")}

#: The unary operators that are an instruction of a compiled pointwise region (Traits.pointwise).
_POINTWISE_UNARY = {
    "Neg": "neg", "Abs": "abs", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Erf": "erf",
    "Tanh": "tanh",
}  # fmt: skip

for _name, _fn, _versions in _UNARY:
    _unary(
        _name,
        _fn,
        *_versions,
        loops=_COMPILED_UNARY.get(_name),
        pointwise=_POINTWISE_UNARY.get(_name),
        numpy="onnx_erf({0})" if _fn is erf else None,
    )


@op("IsInf", 10, 20)
def is_inf(x: np.ndarray, *, detect_negative: int = 1, detect_positive: int = 1) -> np.ndarray:
    """Return where x is infinite, restricted to the signs the attributes ask for."""
    if detect_negative and detect_positive:
        return np.asarray(np.isinf(x))
    if detect_negative:
        return np.asarray(np.isneginf(x))
    if detect_positive:
        return np.asarray(np.isposinf(x))
    return np.zeros(x.shape, dtype=bool)


# -- binary arithmetic ------------------------------------------------------------------------
def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return a / b; integers divide truncating toward zero, as in C, and an integer divisor
    of 0, or the type's minimum divided by -1, is an error (see :func:`_integer_division`)."""
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    with _integer_division("Div", b):
        if a.dtype.kind == "u":
            return np.floor_divide(a, b)
        q = np.floor_divide(a, b)
        return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


@contextlib.contextmanager
def _integer_division(what: str, b: np.ndarray) -> Iterator[None]:
    """Integer division by 0, and of the type's minimum by -1, raise ZeroDivisionError /
    OverflowError naming ``what``. The spec leaves their results undefined; NumPy would return
    0 and the minimum with a warning, onnxruntime raises: a silent wrong number is the worst
    of the three. (Mod of the minimum by -1 is 0, exactly, and stays allowed.)"""
    with np.errstate(divide="raise", over="raise"):
        try:
            yield
        except FloatingPointError:
            if not np.all(b):
                raise ZeroDivisionError(f"integer {what} by zero (a divisor is 0)") from None
            raise OverflowError(
                f"integer {what} overflows: the type's minimum divided by -1"
            ) from None


def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return x ** y in x's dtype (the exponent may have another type)."""
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and np.any(y < 0):
        return np.power(x.astype(np.float64), y).astype(x.dtype)
    if y.size == 1 and x.dtype.itemsize <= 4 and x.dtype.kind in "fV":
        n = y.item()
        if n in SMALL_POWERS:
            return _small_power(x, int(n))
    return np.asarray(np.power(x, y)).astype(x.dtype, copy=False)


def _small_power(x: np.ndarray, n: int) -> np.ndarray:
    """Return x ** n for a small integer n by products in float64, rounded once to x's dtype.

    The result is the correctly rounded power but for rare double roundings (NumPy's float32
    ``power`` is 1 ulp off on about a tenth of all inputs, and takes glibc's scalar path, 40x
    slower, on negative ones: GPT-2's GELU cubes a (128, 512) tensor in 3 ms instead of 0.1).
    """
    wide = x.astype(np.float64)
    out = wide * wide
    if abs(n) == 3:
        out *= wide
    elif abs(n) == 4:
        out *= out
    with np.errstate(divide="ignore", over="ignore"):
        if n < 0:
            np.divide(1.0, out, out=out)
        return out.astype(x.dtype)


_BINARY: tuple[tuple[str, Binary, tuple[int, ...], tuple[int, ...]], ...] = (
    ("Add", np.add, (1, 6), (7, 13, 14)),
    ("Sub", np.subtract, (1, 6), (7, 13, 14)),
    ("Mul", np.multiply, (1, 6), (7, 13, 14)),
    ("Div", divide, (1, 6), (7, 13, 14)),
    ("Pow", power, (1,), (7, 12, 13, 15)),
    ("Equal", np.equal, (1,), (7, 11, 13, 19)),
    ("Greater", np.greater, (1,), (7, 9, 13)),
    ("Less", np.less, (1,), (7, 9, 13)),
    ("GreaterOrEqual", np.greater_equal, (), (12, 16)),
    ("LessOrEqual", np.less_equal, (), (12, 16)),
    ("And", np.logical_and, (1,), (7,)),
    ("Or", np.logical_or, (1,), (7,)),
    ("Xor", np.logical_xor, (1,), (7,)),
    ("BitwiseAnd", np.bitwise_and, (), (18,)),
    ("BitwiseOr", np.bitwise_or, (), (18,)),
    ("BitwiseXor", np.bitwise_xor, (), (18,)),
)

#: The binary operators that are an instruction of a compiled pointwise region (Traits.pointwise).
#: Pow is an instruction for its small constant exponents only (SMALL_POWERS: the pass checks).
_POINTWISE_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


def _power_compiled(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pow's compiled form: float32 x to a one-element power of -4, -3, -2, 3 or 4 in one C
    pass (``_math.small_power``: :func:`_small_power`'s products in double, rounded once, the
    same bits, without its two casts and its errstate); other inputs to :func:`power`."""
    out = _MATH.small_power(x, y)  # type: ignore[union-attr]
    return power(x, y) if out is None else out


#: The compiled forms of binary kernels that are not ufuncs (None: ``_math`` not built).
_COMPILED_BINARY = {"Pow": compiled.when(_MATH, _power_compiled)}

for _name, _fn, _legacy, _versions in _BINARY:
    _binary(
        _name,
        _fn,
        _legacy,
        *_versions,
        rounds_once=_fn is divide,
        pointwise=_POINTWISE_BINARY.get(_name),
        native=_COMPILED_BINARY.get(_name),
    )


@op("Mod", 10, 13, 28)
def mod(a: np.ndarray, b: np.ndarray, *, fmod: int = 0) -> np.ndarray:
    """Return a mod b: sign of b (floored) when fmod=0, sign of a (truncated, C fmod) when 1."""
    if fmod not in (0, 1):
        raise ValueError(f"Mod attribute fmod must be 0 or 1, found {fmod}")
    if a.dtype.kind not in "iu":
        return np.asarray(np.fmod(a, b) if fmod else np.mod(a, b))
    with _integer_division("Mod", b):
        return np.asarray(np.fmod(a, b) if fmod else np.mod(a, b))


@op("BitShift", 11, 28)
def bit_shift(x: np.ndarray, y: np.ndarray, *, direction: str = "") -> np.ndarray:
    """Return x shifted by y bits to the LEFT or RIGHT (arithmetic for signed types)."""
    if direction == "LEFT":
        return np.asarray(np.left_shift(x, y))
    if direction == "RIGHT":
        return np.asarray(np.right_shift(x, y))
    raise ValueError(f"BitShift attribute direction must be 'LEFT' or 'RIGHT', found {direction!r}")


# -- variadic ---------------------------------------------------------------------------------
def _variadic(
    op_type: str,
    ufunc: np.ufunc,
    versions: tuple[int, ...],
    selects: bool = False,
    pointwise: str | None = None,
) -> None:
    """Register ``op_type`` as ``ufunc`` folded over all inputs with NumPy broadcasting;
    ``pointwise``: its instruction, for two inputs, in a compiled pointwise region."""

    def kernel(*xs: np.ndarray, consumed_inputs: list[int] | None = None) -> np.ndarray:
        if not xs:
            raise ValueError(f"{op_type} needs at least one input, found none")
        if len(xs) == 1:
            return np.array(xs[0])  # a copy: the result is always a new array (``fresh``)
        return np.asarray(functools.reduce(ufunc, xs))

    def over_first(*xs: np.ndarray, consumed_inputs: list[int] | None = None) -> np.ndarray:
        """The same fold, written over xs[0] when the result has its shape and dtype."""
        first = xs[0] if xs else None
        if (
            len(xs) < 2
            or first.ndim == 0  # type: ignore[union-attr]
            or np.result_type(*xs) != first.dtype  # type: ignore[union-attr]
            or np.broadcast_shapes(*(x.shape for x in xs)) != first.shape  # type: ignore[union-attr]
        ):
            return kernel(*xs)
        for x in xs[1:]:
            ufunc(first, x, out=first)
        return first  # type: ignore[return-value]

    kernel.__name__ = kernel.__qualname__ = op_type
    kernel.__doc__ = f"Return {ufunc.__name__} of all inputs, broadcast together."
    traits = Traits(
        fresh=True,
        in_place=over_first,
        elementwise=True,
        selects=selects,
        pointwise=pointwise,
        numpy=functools.partial(_variadic_numpy, ufunc),
    )
    op(op_type, *versions, traits=traits)(kernel)


def _variadic_numpy(ufunc: np.ufunc, f: NumpyCall) -> str | None:
    """Sum, Max or Min of the inputs written as nested calls of ``ufunc``; one input copied."""
    if not f.ins or "None" in f.ins:
        return None
    expr = f.ins[0]
    for x in f.ins[1:]:
        expr = f"np.{ufunc.__name__}({expr}, {x})"
    return f"np.array({expr})" if len(f.ins) == 1 else f"np.asarray({expr})"


_variadic("Sum", np.add, (1, 6, 8, 13))
_variadic("Max", np.maximum, (1, 6, 8, 12, 13), selects=True, pointwise="max")
_variadic("Min", np.minimum, (1, 6, 8, 12, 13), selects=True, pointwise="min")


@op("Mean", 1, 6, 8, 13)
def mean(*xs: np.ndarray, consumed_inputs: list[int] | None = None) -> np.ndarray:
    """Return the elementwise mean of all inputs, broadcast together, in their dtype."""
    if not xs:
        raise ValueError("Mean needs at least one input, found none")
    total = np.asarray(functools.reduce(np.add, xs))
    return np.asarray(total / total.dtype.type(len(xs)))


# -- selection --------------------------------------------------------------------------------
@op(
    "Where",
    *(9, 16),
    traits=Traits(
        static_shape=True, elementwise=True, selects=True, numpy="np.where({0}, {1}, {2})"
    ),
)
def where(condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return x where condition holds, else y, all three broadcast together."""
    return np.where(condition, x, y)


def _clip(
    x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, over: bool = False
) -> np.ndarray:
    """Return max(x, lo) then min(., hi) in x's dtype (as ``np.clip``, which onnx.reference
    uses), a new array (or x itself, written over, when ``over``); a missing bound does not
    clip."""
    bounds = [b for b in (lo, hi) if b is not None]
    if not (x.ndim and all(b.dtype == x.dtype for b in bounds)):
        # 0-d, or bounds of another dtype: NumPy's own results
        out = x
        for ufunc, b in ((np.maximum, lo), (np.minimum, hi)):
            if b is not None:
                out = ufunc(out, b)
        return np.array(out, dtype=x.dtype)  # a new array: the result is fresh
    out = x if over else np.empty_like(x)
    if not bounds:
        np.copyto(out, x)
        return out
    return clamp(x, lo, hi, out=out)


def _clip_over_x(
    x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None
) -> np.ndarray:
    return _clip(x, lo, hi, over=True)


def _attr_bound(value: float | None, dtype: np.dtype) -> np.ndarray | None:
    """Return a float attribute bound converted to ``dtype`` (out of range becomes infinite)."""
    if value is None:
        return None
    with np.errstate(over="ignore"):
        return np.asarray(value).astype(dtype)


def _clip_numpy(f: NumpyCall) -> str:
    """Clip's NumPy form: bounds as inputs (11 on) or attributes (float32's range by default
    in 6, no bound in 1)."""
    if f.since >= 11:
        return f"onnx_clip({', '.join(f.ins)})"
    limit = 3.4028234663852886e38 if f.since == 6 else None
    lo, hi = f.arg("min", None if limit is None else -limit), f.arg("max", limit)
    return f"onnx_clip({f.ins[0]}, {lo}, {hi})"


@op("Clip", 1, traits=Traits(numpy=_clip_numpy))
def clip_1(
    x: np.ndarray,
    *,
    min: float | None = None,
    max: float | None = None,
    consumed_inputs: list[int] | None = None,
) -> np.ndarray:
    """Return x limited to [min, max] given as attributes (an absent one does not clip)."""
    return _clip(x, _attr_bound(min, x.dtype), _attr_bound(max, x.dtype))


@op("Clip", 6, traits=Traits(numpy=_clip_numpy))
def clip_6(
    x: np.ndarray,
    *,
    min: float = -3.4028234663852886e38,
    max: float = 3.4028234663852886e38,
) -> np.ndarray:
    """Return x limited to [min, max] given as attributes (defaults: float32 lowest/max)."""
    return _clip(x, _attr_bound(min, x.dtype), _attr_bound(max, x.dtype))


@op(
    "Clip",
    11,
    12,
    13,
    traits=Traits(
        selects=True,
        fresh=True,
        in_place=_clip_over_x,
        pointwise="clip",
        numpy=_clip_numpy,
    ),
)
def clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """Return x limited to [lo, hi] given as optional scalar inputs; lo > hi gives hi."""
    return _clip(x, lo, hi)
