"""Type conversion: Cast, CastLike, BitCast.

=========  ======================================
Cast       1, 6, 9, 13, 19, 21, 23, 24, 25, 28
CastLike   15, 19, 21, 23, 24, 25
BitCast    26
=========  ======================================

:func:`convert` is the one conversion routine (saturation of the float 8 types, the rounding
modes of float8e8m0, strings); the quantization family uses it too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits, native_form
from onnxflow.values import np_dtype

STRING = np.dtype(object)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)

#: Float 8 types whose out-of-range values the ``saturate`` attribute governs.
SATURATING = frozenset(
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
)

#: Floating types NumPy itself does not know (they have dtype kind ``V``).
ML_FLOATS = SATURATING | {
    np.dtype(t)
    for t in (
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e8m0fnu,
        ml_dtypes.float4_e2m1fn,
        ml_dtypes.float6_e2m3fn,
        ml_dtypes.float6_e3m2fn,
    )
}

#: Element widths in bits of the types narrower than their one-byte storage.
_SUB_BYTE_BITS = {
    np.dtype(ml_dtypes.int4): 4,
    np.dtype(ml_dtypes.uint4): 4,
    np.dtype(ml_dtypes.float4_e2m1fn): 4,
    np.dtype(ml_dtypes.int2): 2,
    np.dtype(ml_dtypes.uint2): 2,
}

ROUND_MODES = ("up", "down", "nearest")


def is_float(dtype: np.dtype) -> bool:
    """Return whether ``dtype`` is a floating type, NumPy's or ml_dtypes'."""
    return dtype.kind == "f" or dtype in ML_FLOATS


def target_dtype(to: int | str) -> np.dtype:
    """Return the NumPy dtype of an ONNX element type given as enum value or (Cast-1) name."""
    if isinstance(to, str):
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise ValueError(f"'to' names no ONNX data type: {to!r}") from None
    if to == TensorProto.UNDEFINED:
        raise ValueError("'to' must be a defined ONNX data type, found UNDEFINED (0)")
    return np_dtype(to)


#: The targets every bool and integer (to 64 bits) converts to without overflow or an invalid
#: value: Cast from those types to them is a plain ``astype``.
_WIDE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def convert(
    x: np.ndarray, dtype: np.dtype, *, saturate: bool = True, round_mode: str = "up"
) -> np.ndarray:
    """Return ``x`` converted to ``dtype`` following the rules of ONNX Cast.

    Float 8 targets round to nearest even and, with ``saturate``, clamp out-of-range values and
    infinities to the largest finite value; without it they become inf or NaN as the type allows.
    float8e8m0 rounds as ``round_mode`` says. Strings parse and print numbers.
    """
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype in _WIDE_FLOATS and x.dtype.kind in "biu":
        return x.astype(dtype)  # no integer overflows them: no errstate needed (about 1 us)
    if dtype == STRING:
        return _to_strings(x)
    if x.dtype.kind in "OU":
        return _from_strings(x, dtype, saturate, round_mode)
    if dtype == np.bool_:
        return np.asarray(x != 0)
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype == E8M0:
            return _to_e8m0(x, saturate, round_mode)
        if dtype in ML_FLOATS:
            x = _exact_float(x)
            if dtype in SATURATING and saturate:
                limit = float(ml_dtypes.finfo(dtype).max)
                x = np.clip(x, -limit, limit)
        return x.astype(dtype)


def _exact_float(x: np.ndarray) -> np.ndarray:
    """Return ``x`` as float16 or float32 for ml_dtypes to round, without rounding twice.

    ml_dtypes narrows wider values through float32; narrowing float64 to float32 with
    round-to-odd first keeps the final round-to-nearest-even exact.
    """
    if x.dtype in (np.float32, np.float16):
        return x
    wide = x.astype(np.float64)
    narrow = wide.astype(np.float32)
    back = narrow.astype(np.float64)
    fix = (back != wide) & np.isfinite(back) & ((narrow.view(np.uint32) & 1) == 0)
    side = np.where(wide > back, np.float32(np.inf), np.float32(-np.inf))
    return np.where(fix, np.nextafter(narrow, side), narrow)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Round ``|x|`` to a power of two 2**(code - 127), code in [0, 254] (255 is NaN).

    With ``saturate``, zero, tiny and huge values clamp to the smallest or largest power;
    without it they become NaN. The sign is ignored (the spec leaves negatives unspecified).
    """
    v = np.abs(x.astype(np.float64) if x.dtype != np.float64 else x)
    finite = np.isfinite(v) & (v > 0)
    mantissa, exponent = np.frexp(np.where(finite, v, 1.0))
    code = exponent.astype(np.int64) + 126  # v = (2 * mantissa) * 2**(code - 127)
    if round_mode == "up":
        code += mantissa != 0.5
    elif round_mode == "nearest":
        code += mantissa >= 0.75
    if saturate:
        code = np.where(np.isinf(v), 254, np.clip(code, 0, 254))
        code = np.where(v == 0, 0, code)
    else:
        code = np.where((code < 0) | (code > 254) | ~finite, 255, code)
    code = np.where(np.isnan(v), 255, code)
    return code.astype(np.uint8).view(E8M0)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Format numbers as strings: shortest round-trip decimals, ``NaN``/``INF``/``-INF``, 1/0."""
    if x.dtype.kind == "U":
        return x.astype(object)
    if x.dtype == np.bool_:
        text = ["1" if v else "0" for v in x.flat]
    elif is_float(x.dtype):
        wide = x if x.dtype.kind == "f" else x.astype(np.float32)
        text = [_SPECIAL.get(t, t) for t in map(str, wide.flat)]
    else:
        text = [str(int(v)) for v in x.flat]
    return np.array(text, dtype=object).reshape(x.shape)


_SPECIAL = {"nan": "NaN", "inf": "INF", "-inf": "-INF"}


def _from_strings(x: np.ndarray, dtype: np.dtype, saturate: bool, round_mode: str) -> np.ndarray:
    """Parse strings as numbers ("1e-5", "NaN", "-INF" any case) and convert them to ``dtype``."""
    if dtype == np.bool_:
        return np.array([_parse_bool(s) for s in x.flat], dtype=bool).reshape(x.shape)
    if is_float(dtype):
        values = np.array([_parse_float(s) for s in x.flat], dtype=np.float64).reshape(x.shape)
        return convert(values, dtype, saturate=saturate, round_mode=round_mode)
    ints = np.array(
        [_parse_int(s) for s in x.flat], dtype=np.uint64 if dtype == np.uint64 else np.int64
    )
    return ints.reshape(x.shape).astype(dtype)


def _parse_float(s: object) -> float:
    try:
        return float(s)  # accepts "NaN", "inf", "+INF", "-Infinity" in any case
    except (TypeError, ValueError):
        raise ValueError(f"cannot cast string {s!r} to a number") from None


def _parse_int(s: object) -> int:
    try:
        return int(s)
    except (TypeError, ValueError):
        pass
    value = _parse_float(s)
    if not np.isfinite(value):
        raise ValueError(f"cannot cast string {s!r} to an integer")
    return int(value)


def _parse_bool(s: object) -> bool:
    lowered = str(s).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return _parse_float(s) != 0


def _check_round_mode(round_mode: str) -> None:
    if round_mode not in ROUND_MODES:
        raise ValueError(f"round_mode must be one of {ROUND_MODES}, found {round_mode!r}")


_HALF = compiled.deferred("_half")
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _to_half(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` as float16, one compiled pass (NumPy's bits, NaN payloads too)."""
    out = np.empty(x.shape, F16)
    _HALF.f32_to_f16(np.ascontiguousarray(x).reshape(-1), out.reshape(-1).view(np.uint16))
    return out


def _from_half(x: np.ndarray) -> np.ndarray:
    """float16 ``x`` as float32, one compiled pass (exact)."""
    out = np.empty(x.shape, F32)
    _HALF.f16_to_f32(np.ascontiguousarray(x).reshape(-1).view(np.uint16), out.reshape(-1))
    return out


#: The compiled casts by target type: the source type each reads, and the loop.
_HALF_CASTS = {F16: (F32, _to_half), F32: (F16, _from_half)}


def _cast_compiled(
    node: NodeContext, *, to: int | str, saturate: int = 1, round_mode: str = "up"
) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`cast`'s compiled form: float32 to float16 and float16 to float32 in one compiled
    pass each (``native/_half``, NumPy's bits), any other conversion as :func:`cast` makes it."""
    numpy_form = cast(node, to=to, saturate=saturate, round_mode=round_mode)
    dtype = target_dtype(to)
    if dtype not in _HALF_CASTS:
        return numpy_form
    source, loop = _HALF_CASTS[dtype]

    def step(x: np.ndarray) -> np.ndarray:
        if x.dtype == source:
            return loop(x)
        return x if x.dtype == dtype else numpy_form(x)  # a Cast to its own type: x, as convert

    step.__name__ = step.__qualname__ = f"Cast_to_{dtype}_compiled"
    return step


def _cast_numpy(f: NumpyCall) -> str | None:
    """Cast's NumPy form to a NumPy type (bool, integers, float16/32/64): ``astype``; None
    to a string, an ml_dtypes type (float8, bfloat16, int4...)."""
    try:
        dtype = target_dtype(f.attrs["to"])
    except (KeyError, ValueError):
        return None
    if dtype.kind not in "biuf" or getattr(np, dtype.name, None) is not dtype.type:
        return None
    return f"{f.ins[0]}.astype(np.{dtype.name})"


@op(
    "Cast",
    *(1, 6, 9, 13, 19, 21, 23, 24, 25, 28),
    build=True,
    traits=Traits(
        elementwise=True,
        static_shape=True,
        native=native_form(_cast_compiled if _HALF else None),
        numpy=_cast_numpy,
    ),
)
def cast(
    node: NodeContext, *, to: int | str, saturate: int = 1, round_mode: str = "up"
) -> Callable[[np.ndarray], np.ndarray]:
    """Return a kernel converting its input to the element type ``to`` (see :func:`convert`)."""
    try:
        dtype = target_dtype(to)
        _check_round_mode(round_mode)
    except ValueError as exc:
        raise node.error(str(exc)) from None
    return functools.partial(convert, dtype=dtype, saturate=bool(saturate), round_mode=round_mode)


@op("CastLike", 15, 19, 21, 23, 24, 25)
def cast_like(
    x: np.ndarray, target_type: np.ndarray, *, saturate: int = 1, round_mode: str = "up"
) -> np.ndarray:
    """Return ``x`` converted to the element type of ``target_type``."""
    _check_round_mode(round_mode)
    return convert(x, target_type.dtype, saturate=bool(saturate), round_mode=round_mode)


def _bits(dtype: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dtype, dtype.itemsize * 8)


@op("BitCast", 26)
def bit_cast(x: np.ndarray, *, to: int) -> np.ndarray:
    """Return ``x``'s bits, little endian, reinterpreted as the element type ``to``."""
    dtype = target_dtype(to)
    if dtype == STRING or x.dtype.kind in "OU":
        raise ValueError("BitCast does not support string tensors")
    if _bits(x.dtype) != _bits(dtype):
        raise ValueError(
            f"BitCast needs types of equal bit width: input {x.dtype} has {_bits(x.dtype)} bits, "
            f"'to' {dtype} has {_bits(dtype)}"
        )
    data = x if x.flags.c_contiguous else x.copy()
    if dtype == np.bool_:
        return data.view(np.uint8) != 0
    if dtype in _SUB_BYTE_BITS:
        data = data.view(np.uint8) & np.uint8((1 << _bits(dtype)) - 1)
    return data.view(dtype)
