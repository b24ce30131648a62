"""com.microsoft quantized operators: the QOperator format of ``onnxruntime.quantization``,
its contrib QuantizeLinear / DequantizeLinear (QDQ with ``use_qdq_contrib_ops``) and the
dynamic quantizer's fused MatMuls.

========================  =====  ======================================================
operator                  since  meaning
========================  =====  ======================================================
QuantizeLinear            1      onnx QuantizeLinear: 8, 16 and 4-bit integers, per axis
DequantizeLinear          1      onnx DequantizeLinear: 8, 16, 32 and 4-bit integers
QLinearAdd                1      ``A + B`` of 8-bit tensors, requantized to C's scale
QLinearMul                1      ``A * B`` of 8-bit tensors, requantized to C's scale
QLinearSigmoid            1      sigmoid through a table of the 256 codes
QLinearLeakyRelu          1      leaky relu through a table of the 256 codes
QLinearSoftmax            1      softmax of an 8-bit tensor to an 8-bit tensor
QLinearConcat             1      inputs requantized to Y's scale and joined
QLinearWhere              1      ``where(cond, X, Y)`` with both requantized to Z's scale
QLinearGlobalAveragePool  1      channel means, NCHW or channels last
QLinearAveragePool        1      onnx AveragePool between quantized tensors
QLinearConv               1      onnx QLinearConv, also channels last
QGemm                     1      8-bit Gemm with an int32 C, to float or requantized
DynamicQuantizeMatMul     1      A quantized on the fly to uint8, MatMulInteger, scaled
DynamicQuantizeLSTM       1      onnx LSTM on 8-bit W and R, X and H quantized on the fly
MatMulIntegerToFloat      1      MatMulInteger scaled to float, plus a bias
========================  =====  ======================================================

The float arithmetic is float32, as in onnxruntime's CPU kernels: a value is dequantized
exactly (an 8-bit difference times a float32 scale), the operator runs on it, and the result
is quantized with :func:`onnxflow.ops.quantization.store_quantized` (round half to even, then
saturate). Unary and requantizing operators go through a table of the 256 codes, so each code
gets the one answer the formula gives it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from onnxflow.ops import integer_gemm as ig
from onnxflow.ops._common import normalize_axis
from onnxflow.ops.activations import _sigmoid
from onnxflow.ops.conv import qlinear_conv, qlinear_conv_compiled
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.pool import average_pool
from onnxflow.ops.quantization import (
    dequantize,
    dequantize_linear,
    dequantize_linear_compiled,
    dynamic_quantize_linear,
    dynamic_quantize_linear_compiled,
    expand_param,
    quantize,
    quantize_linear,
    quantize_linear_compiled,
    store_quantized,
)
from onnxflow.ops.registry import op
from onnxflow.ops.rnn import (
    _DIRECTIONS,
    _LSTM,
    _NATIVE,
    Activation,
    _activations,
    _clipper,
    _Loop,
    _loop,
    _over_time,
    _Recurrence,
    lstm_gates,
    recurrent,
)
from onnxflow.ops.shape import concat
from onnxflow.traits import Traits, native_form

_F32 = np.float32


def _f32(value: np.ndarray | float) -> np.float32:
    """A per-tensor scale (a scalar or a 1-element tensor) or a float attribute as float32."""
    return np.float32(np.asarray(value).reshape(()))


def _zero(zero_point: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    """The zero point, or a 0 of ``like``'s type when it is omitted."""
    return np.zeros((), like.dtype) if zero_point is None else zero_point


def _real(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """``(q - zero_point) * scale`` in float32 (the difference exact, the product rounded once)."""
    return dequantize(q, scale, zero_point, 1, 0, np.dtype(_F32))


def _store(real: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``real`` (float32) quantized to ``scale`` and ``zero_point``, in the zero point's type."""
    return quantize(real, scale, zero_point, 1, 0, zero_point.dtype, True)


def _store_shifted(real: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``real`` (float32) quantized as ``round(real / scale + zero_point)``: the zero point is
    added in float32 before rounding (onnxruntime's pooling kernels), which differs from
    :func:`_store` only where ``real / scale`` lies within float32 rounding of a tie."""
    shifted = real / _f32(scale) + _f32(zero_point)
    return store_quantized(shifted, None, zero_point.dtype, True)


def _codes(dtype: np.dtype) -> np.ndarray:
    """The 256 values of an 8-bit type, ordered by their bytes (so ``x.view(uint8)`` indexes)."""
    return np.arange(256, dtype=np.uint8).view(dtype)


def _table_map(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None,
    fn: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Each code of ``x`` dequantized, mapped by ``fn`` (float32) and quantized to Y's scale."""
    _check_byte(x)
    codes = _codes(x.dtype)
    table = _store(fn(_real(codes, scale, zero_point)), y_scale, _zero(y_zero_point, x))
    return table[x.view(np.uint8)]


def _check_byte(x: np.ndarray) -> None:
    if x.dtype not in (np.uint8, np.int8):
        raise TypeError(f"expected a uint8 or int8 tensor, found {x.dtype}")


# -- QDQ in the contrib domain ------------------------------------------------------------------
def _ms_quantize_compiled(
    x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None, *, axis: int = 1
) -> np.ndarray:
    """The contrib QuantizeLinear's compiled form: onnx QuantizeLinear's."""
    return quantize_linear_compiled(x, y_scale, y_zero_point, axis=axis)


def _ms_dequantize_compiled(
    x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None, *, axis: int = 1
) -> np.ndarray:
    """The contrib DequantizeLinear's compiled form: onnx DequantizeLinear's."""
    return dequantize_linear_compiled(x, x_scale, x_zero_point, axis=axis)


@op(
    "QuantizeLinear",
    1,
    domain=MS_DOMAIN,
    traits=Traits(native=native_form(ig.QUANT and _ms_quantize_compiled)),
)
def ms_quantize_linear(
    x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None, *, axis: int = 1
) -> np.ndarray:
    """onnx QuantizeLinear (round half to even, saturate) into uint8, int8, uint16, int16,
    uint4 or int4 (the zero point's type; uint8 without one), per tensor or along ``axis``."""
    return quantize_linear(x, y_scale, y_zero_point, axis=axis)


@op(
    "DequantizeLinear",
    1,
    domain=MS_DOMAIN,
    traits=Traits(native=native_form(ig.QUANT and _ms_dequantize_compiled)),
)
def ms_dequantize_linear(
    x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None, *, axis: int = 1
) -> np.ndarray:
    """onnx DequantizeLinear of 8, 16, 32 or 4-bit integers, per tensor or along ``axis``."""
    return dequantize_linear(x, x_scale, x_zero_point, axis=axis)


# -- elementwise --------------------------------------------------------------------------------
def _binary_operands(
    a: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray, b_zero: np.ndarray | None
) -> tuple[np.ndarray, float, np.ndarray, float, int] | None:
    """``(a, a's zero, b, b's zero, inner)`` as the compiled QLinearAdd and QLinearMul take
    them: 8-bit tensors of one type, the larger first, the other one value or the shape of a
    run of a's axes (a bias on the last axes, or a per-channel factor), each of its values
    held for ``inner`` elements of a (the product of the axes after the run); else None."""
    za, zb = ig.scalar(a_zero), ig.scalar(b_zero)
    if a.dtype not in ig.BYTES or b.dtype != a.dtype or za is None or zb is None:
        return None
    layout = _binary_layout(a.shape, b.shape)
    if layout is None:
        return None
    swap, inner = layout
    return (b, zb, a, za, inner) if swap else (a, za, b, zb, inner)


@functools.lru_cache(maxsize=1024)
def _binary_layout(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[bool, int] | None:
    """For operands of these shapes: whether the compiled loop takes B as the larger one, and
    how many elements of the larger each value of the smaller covers (:func:`_held_for`); None
    where the larger is not the broadcast shape, or the smaller does not lie along it so."""
    swap = math.prod(b_shape) > math.prod(a_shape)
    big, small = (b_shape, a_shape) if swap else (a_shape, b_shape)
    try:
        if big != np.broadcast_shapes(big, small):
            return None
    except ValueError:  # the NumPy form raises it
        return None
    inner = _held_for(big, small) if math.prod(small) > 1 else 1
    return None if inner is None else (swap, inner)


def _held_for(big: tuple[int, ...], small: tuple[int, ...]) -> int | None:
    """How many elements of ``big`` each value of ``small`` (broadcast to it) covers in a row,
    when ``small``'s axes other than 1 are one run that ``big`` has too; else None."""
    padded = (1,) * (len(big) - len(small)) + tuple(small)
    kept = [i for i, d in enumerate(padded) if d != 1]
    first, last = kept[0], kept[-1]
    if padded[first : last + 1] != big[first : last + 1]:
        return None
    return math.prod(big[last + 1 :])


def _binary_compiled(multiply: bool) -> Callable[..., np.ndarray]:
    """The compiled form of QLinearAdd, or of QLinearMul with ``multiply``: one pass where both
    are 8-bit of one type and one operand is a single value or repeats along the other's
    last axes (a bias); else the NumPy form."""

    def form(
        a: np.ndarray,
        a_scale: np.ndarray,
        a_zero_point: np.ndarray | None,
        b: np.ndarray,
        b_scale: np.ndarray,
        b_zero_point: np.ndarray | None,
        c_scale: np.ndarray,
        c_zero_point: np.ndarray | None = None,
    ) -> np.ndarray:
        inputs = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point)
        fallback = qlinear_mul if multiply else qlinear_add
        operands = _binary_operands(a, a_zero_point, b, b_zero_point)
        zc = ig.scalar(c_zero_point)
        if operands is None or zc is None or a.dtype != operands[0].dtype:
            return fallback(*inputs)
        big, za, small, zb, inner = operands
        y = np.empty(big.shape, a.dtype)
        if multiply:
            ratio = _f32(a_scale) * _f32(b_scale) / _f32(c_scale)
            ig.QUANT.qlinear_mul(
                ig.flat(big), ig.flat(small), y.reshape(-1), za, zb, ratio, zc, inner
            )
            return y
        ra, rb = _f32(a_scale) / _f32(c_scale), _f32(b_scale) / _f32(c_scale)
        if big is not a:
            ra, rb = rb, ra
        ig.QUANT.qlinear_add(ig.flat(big), ig.flat(small), y.reshape(-1), za, zb, ra, rb, zc, inner)
        return y

    form.__name__ = form.__qualname__ = (
        "qlinear_mul_compiled" if multiply else "qlinear_add_compiled"
    )
    return form


def _binary_prepare(multiply: bool) -> Callable[..., Callable[..., np.ndarray] | None]:
    """The prepare step of QLinearAdd's compiled form (QLinearMul's with ``multiply``): with
    every scale and zero point a constant of one value and the zero points of one 8-bit type,
    the ratios and zero points are read once, at compile time (the same float32 operations as
    :func:`_binary_compiled`'s); at run time only the operands' layout is looked up."""
    form = _binary_compiled(multiply)

    def prepare(
        constants: tuple[np.ndarray | None, ...], **attrs: object
    ) -> Callable[..., np.ndarray] | None:
        params = _binary_params(constants, multiply)
        if params is None:
            return None
        dtype, straight, swapped = params
        loop = ig.QUANT.qlinear_mul if multiply else ig.QUANT.qlinear_add

        def prepared(a: np.ndarray, *others: np.ndarray | None) -> np.ndarray:
            b = others[2]
            layout = _binary_layout(a.shape, b.shape) if a.dtype == b.dtype == dtype else None
            if layout is None:
                return form(a, *others)
            big, small = (b, a) if layout[0] else (a, b)
            y = np.empty(big.shape, dtype)
            loop(
                ig.flat(big),
                ig.flat(small),
                y.reshape(-1),
                *(swapped if layout[0] else straight),
                layout[1],
            )
            return y

        prepared.__name__ = prepared.__qualname__ = form.__name__.replace("compiled", "prepared")
        return prepared

    return prepare


def _binary_params(
    constants: tuple[np.ndarray | None, ...], multiply: bool
) -> tuple[np.dtype, tuple[float, ...], tuple[float, ...]] | None:
    """``(the operands' type, the loop's parameters, the same with A and B swapped)`` from a
    QLinearAdd's or QLinearMul's constant scales and zero points, or None where one is fed,
    omitted, of more than one value, or the zero points' types differ or are not 8-bit."""
    if len(constants) != 8 or any(constants[i] is None for i in (1, 2, 4, 5, 6, 7)):
        return None
    a_scale, a_zero, _, b_scale, b_zero, c_scale, c_zero = constants[1:]
    if any(v.size != 1 for v in (a_scale, b_scale, c_scale)):
        return None
    za, zb, zc = ig.scalar(a_zero), ig.scalar(b_zero), ig.scalar(c_zero)
    dtype = a_zero.dtype
    if None in (za, zb, zc) or dtype not in ig.BYTES or not dtype == b_zero.dtype == c_zero.dtype:
        return None
    if multiply:
        ratio = _f32(a_scale) * _f32(b_scale) / _f32(c_scale)
        return dtype, (za, zb, ratio, zc), (zb, za, ratio, zc)
    ra, rb = _f32(a_scale) / _f32(c_scale), _f32(b_scale) / _f32(c_scale)
    return dtype, (za, zb, ra, rb, zc), (zb, za, rb, ra, zc)


@op(
    "QLinearAdd",
    1,
    domain=MS_DOMAIN,
    traits=Traits(
        native=native_form(ig.QUANT and _binary_compiled(False), prepare=_binary_prepare(False))
    ),
)
def qlinear_add(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray | None,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray | None,
    c_scale: np.ndarray,
    c_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """``A + B`` (broadcast) in real values, quantized to C's scale and zero point."""
    _check_byte(a)
    ratio_a = _f32(a_scale) / _f32(c_scale)
    ratio_b = _f32(b_scale) / _f32(c_scale)
    scaled = _centered(a, a_zero_point) * ratio_a + _centered(b, b_zero_point) * ratio_b
    return store_quantized(scaled, _zero(c_zero_point, a), a.dtype, True)


@op(
    "QLinearMul",
    1,
    domain=MS_DOMAIN,
    traits=Traits(
        native=native_form(ig.QUANT and _binary_compiled(True), prepare=_binary_prepare(True))
    ),
)
def qlinear_mul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray | None,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray | None,
    c_scale: np.ndarray,
    c_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """``A * B`` (broadcast) in real values, quantized to C's scale and zero point."""
    _check_byte(a)
    ratio = _f32(a_scale) * _f32(b_scale) / _f32(c_scale)
    scaled = _centered(a, a_zero_point) * _centered(b, b_zero_point) * ratio
    return store_quantized(scaled, _zero(c_zero_point, a), a.dtype, True)


def _centered(q: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """``q - zero_point`` as float32 (exact for 8-bit codes)."""
    centered = q.astype(_F32)
    return centered if zero_point is None else centered - _f32(zero_point)


@op("QLinearSigmoid", 1, domain=MS_DOMAIN)
def qlinear_sigmoid(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """The logistic function of ``x``'s real values, quantized to Y's scale."""
    return _table_map(x, x_scale, x_zero_point, y_scale, y_zero_point, _sigmoid)


@op("QLinearLeakyRelu", 1, domain=MS_DOMAIN)
def qlinear_leaky_relu(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    alpha: float = 0.01,
) -> np.ndarray:
    """``x`` where its real value is not negative, else ``alpha * x``, quantized to Y's scale."""
    slope = _f32(alpha)
    return _table_map(
        x, x_scale, x_zero_point, y_scale, y_zero_point, lambda v: np.where(v < 0, v * slope, v)
    )


@op("QLinearWhere", 1, domain=MS_DOMAIN)
def qlinear_where(
    condition: np.ndarray,
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    y: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    z_scale: np.ndarray,
    z_zero_point: np.ndarray,
) -> np.ndarray:
    """``where(condition, X, Y)`` (broadcast), each side requantized to Z's scale."""
    x_z = _requantize(x, x_scale, x_zero_point, z_scale, z_zero_point)
    y_z = _requantize(y, y_scale, y_zero_point, z_scale, z_zero_point)
    return np.where(condition, x_z, y_z)


def _requantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """``x`` quantized to Y's scale and zero point (itself when they are already its own)."""
    same_zero = np.array_equal(_zero(zero_point, x), y_zero_point)
    if x.dtype == y_zero_point.dtype and _f32(scale) == _f32(y_scale) and same_zero:
        return x
    return _table_map(x, scale, zero_point, y_scale, y_zero_point, lambda v: v)


@op("QLinearConcat", 1, domain=MS_DOMAIN)
def qlinear_concat(
    y_scale: np.ndarray, y_zero_point: np.ndarray, *inputs: np.ndarray, axis: int
) -> np.ndarray:
    """The (tensor, scale, zero point) triples requantized to Y's scale and joined on ``axis``."""
    if len(inputs) % 3:
        raise ValueError(
            f"QLinearConcat takes (tensor, scale, zero point) triples after Y's scale and zero "
            f"point, found {len(inputs)} inputs there"
        )
    parts = [
        _requantize(x, scale, zero_point, y_scale, y_zero_point)
        for x, scale, zero_point in zip(inputs[0::3], inputs[1::3], inputs[2::3], strict=True)
    ]
    return concat(*parts, axis=axis)


# -- softmax ------------------------------------------------------------------------------------
@op("QLinearSoftmax", 1, domain=MS_DOMAIN)
def qlinear_softmax(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    *,
    axis: int = -1,
    opset: int,
) -> np.ndarray:
    """Softmax of ``x``'s real values along ``axis`` (opset 13 on) or over the 2-D rows it
    starts (``opset`` below 13), in float32, quantized to Y's scale: the nearest code.

    With the output scale onnxruntime's quantizer gives a softmax (1/256, zero point 0 for
    uint8 or -128 for int8) the codes are onnxruntime's; with others its CPU kernel, which
    divides through a scaled table of exponentials, may give the code one below."""
    _check_byte(x)
    axis = normalize_axis(axis, x.ndim)
    shape = x.shape
    if opset < 13:
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    steps = x.astype(np.int32) - x.max(axis=axis, keepdims=True).astype(np.int32)
    exp = np.exp(steps.astype(_F32) * _f32(x_scale))
    total = exp.sum(axis=axis, keepdims=True, dtype=_F32)
    out = _store(exp / total, y_scale, y_zero_point)
    return out.reshape(shape)


# -- pooling and convolution --------------------------------------------------------------------
@op("QLinearGlobalAveragePool", 1, domain=MS_DOMAIN)
def qlinear_global_average_pool(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    *,
    channels_last: int = 0,
) -> np.ndarray:
    """The mean of each channel over the spatial axes (kept, of size 1), from and to 8 bits:
    the integer sum less the zero points, times ``x_scale / (y_scale * count)`` in float32."""
    _check_byte(x)
    spatial = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in spatial]))
    offset = int(np.asarray(x_zero_point).reshape(())) * count
    total = x.sum(axis=spatial, keepdims=True, dtype=np.int64) - offset
    ratio = _f32(x_scale) / (_f32(y_scale) * _f32(count))
    return store_quantized(total.astype(_F32) * ratio, y_zero_point, y_zero_point.dtype, True)


@op("QLinearAveragePool", 1, domain=MS_DOMAIN)
def qlinear_average_pool(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    channels_last: int = 0,
    count_include_pad: int = 0,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """onnx AveragePool of ``x``'s real values (float32), quantized to Y's scale; NCHW, or
    channels last with ``channels_last``."""
    _check_byte(x)
    real = _real(_channels_first(x, channels_last), x_scale, x_zero_point)
    mean = average_pool(
        real,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    return _channels_back(_store_shifted(mean, y_scale, _zero(y_zero_point, x)), channels_last)


def _channels_first(x: np.ndarray, channels_last: int) -> np.ndarray:
    """``x`` in NC... layout (from N...C when ``channels_last``)."""
    return np.moveaxis(x, -1, 1) if channels_last else x


def _channels_back(y: np.ndarray, channels_last: int) -> np.ndarray:
    """``y`` (NC...) back in the layout its input had."""
    return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if channels_last else y


def _ms_qlinear_conv_form(conv: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """The contrib QLinearConv on top of onnx QLinearConv's form ``conv``."""

    def ms_conv(
        x: np.ndarray,
        x_scale: np.ndarray,
        x_zero_point: np.ndarray,
        w: np.ndarray,
        w_scale: np.ndarray,
        w_zero_point: np.ndarray,
        y_scale: np.ndarray,
        y_zero_point: np.ndarray,
        b: np.ndarray | None = None,
        *,
        auto_pad: str = "NOTSET",
        channels_last: int = 0,
        dilations: list[int] | None = None,
        group: int = 1,
        kernel_shape: list[int] | None = None,
        pads: list[int] | None = None,
        strides: list[int] | None = None,
    ) -> np.ndarray:
        """onnx QLinearConv; with ``channels_last`` X and Y are N...C (W stays M, C/group,
        k...)."""
        y = conv(
            _channels_first(x, channels_last),
            x_scale,
            x_zero_point,
            w,
            w_scale,
            w_zero_point,
            y_scale,
            y_zero_point,
            b,
            auto_pad=auto_pad,
            dilations=dilations,
            group=group,
            kernel_shape=kernel_shape,
            pads=pads,
            strides=strides,
        )
        return _channels_back(y, channels_last)

    ms_conv.__name__ = ms_conv.__qualname__ = f"ms_{conv.__name__}"
    return ms_conv


ms_qlinear_conv = op(
    "QLinearConv",
    1,
    domain=MS_DOMAIN,
    traits=Traits(native=native_form(ig.QUANT and _ms_qlinear_conv_form(qlinear_conv_compiled))),
)(_ms_qlinear_conv_form(qlinear_conv))


# -- matrix products ----------------------------------------------------------------------------
def _integer_matmul(
    a: np.ndarray, a_zero_point: np.ndarray | None, b: np.ndarray, b_zero_point: np.ndarray | None
) -> np.ndarray:
    """``(a - a_zero_point) @ (b - b_zero_point)``, exact, as float64 (b's zero point per
    column or one)."""
    a_c = a.astype(np.float64) - (0 if a_zero_point is None else np.float64(a_zero_point))
    b_c = b.astype(np.float64)
    if b_zero_point is not None:
        b_c -= expand_param(b_zero_point, b.shape, -1, 0, "b_zero_point")
    return np.matmul(a_c, b_c)


def _column_scale(scale: np.ndarray, b: np.ndarray, what: str) -> np.ndarray:
    """A scalar or per-column (B's last axis) scale, as float32 ready to broadcast."""
    return expand_param(scale, b.shape[-1:], 0, 0, what).astype(_F32)


def _exact_or_none(
    a: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray, b_zero: np.ndarray | None, trans_b: int
) -> np.ndarray | None:
    """The exact int32 product of :func:`onnxflow.ops.integer_gemm.product` for a per-tensor
    A zero point, else None."""
    if a_zero is not None and a_zero.size != 1:
        return None
    return ig.product(a, a_zero, b, b_zero, bool(trans_b))


def _qgemm_compiled(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    c: np.ndarray | None = None,
    y_scale: np.ndarray | None = None,
    y_zero_point: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> np.ndarray:
    """QGemm's compiled form: the exact product on float32 BLAS, B shifted once when
    constant; else the NumPy form."""
    acc = _exact_or_none(a.T if transA else a, a_zero_point, b, b_zero_point, transB)
    if acc is None:
        return qgemm(
            a, a_scale, a_zero_point, b, b_scale, b_zero_point, c, y_scale, y_zero_point,
            alpha=alpha, transA=transA, transB=transB,
        )  # fmt: skip
    scales = (a_scale, b_scale, y_scale, y_zero_point)
    return _qgemm_tail(acc, c, b.T if transB else b, a, scales, alpha)


@op("QGemm", 1, domain=MS_DOMAIN, traits=Traits(native=native_form(ig.QUANT and _qgemm_compiled)))
def qgemm(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    c: np.ndarray | None = None,
    y_scale: np.ndarray | None = None,
    y_zero_point: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> np.ndarray:
    """``alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C)``: float32, or quantized to
    ``y_scale`` and ``y_zero_point`` when given. C is int32 at scale ``a_scale * b_scale``;
    B's scale and zero point may be per column of the product."""
    a = a.T if transA else a
    b = b.T if transB else b
    acc = _integer_matmul(a, a_zero_point, b, b_zero_point)
    return _qgemm_tail(acc, c, b, a, (a_scale, b_scale, y_scale, y_zero_point), alpha)


def _qgemm_tail(
    acc: np.ndarray,
    c: np.ndarray | None,
    b: np.ndarray,
    a: np.ndarray,
    scales: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None],
    alpha: float,
) -> np.ndarray:
    """QGemm after the product ``acc`` (exact integers, float64 or int32): C added exactly,
    then scaled to float32 and quantized when Y's scale is given."""
    a_scale, b_scale, y_scale, y_zero_point = scales
    if c is not None:
        acc = acc + (c if acc.dtype.kind == "f" else c.astype(np.int64))
    scale = _f32(alpha) * _f32(a_scale) * _column_scale(b_scale, b, "b_scale")
    if y_scale is None:
        return acc.astype(_F32) * scale
    zero = _zero(y_zero_point, a)
    return store_quantized(acc.astype(_F32) * (scale / _f32(y_scale)), zero, zero.dtype, True)


def _matmul_integer_to_float_compiled(
    a: np.ndarray,
    b: np.ndarray,
    a_scale: np.ndarray,
    b_scale: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """MatMulIntegerToFloat's compiled form: the exact product on float32 BLAS, B shifted
    once when constant; else the NumPy form."""
    acc = _exact_or_none(a, a_zero_point, b, b_zero_point, 0)
    if acc is None:
        return matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)
    return _scaled_to_float(acc, a_scale, b_scale, b, bias)


@op(
    "MatMulIntegerToFloat",
    1,
    domain=MS_DOMAIN,
    traits=Traits(native=native_form(ig.QUANT and _matmul_integer_to_float_compiled)),
)
def matmul_integer_to_float(
    a: np.ndarray,
    b: np.ndarray,
    a_scale: np.ndarray,
    b_scale: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """``(A - a_zp) @ (B - b_zp) * a_scale * b_scale + bias`` in float32; B's scale and zero
    point may be per column."""
    acc = _integer_matmul(a, a_zero_point, b, b_zero_point)
    return _scaled_to_float(acc, a_scale, b_scale, b, bias)


def _scaled_to_float(
    acc: np.ndarray,
    a_scale: np.ndarray,
    b_scale: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray | None,
) -> np.ndarray:
    """An exact integer product in float32, times ``a_scale * b_scale``, plus ``bias``."""
    y = acc.astype(_F32) * (_f32(a_scale) * _column_scale(b_scale, b, "b_scale"))
    return y if bias is None else y + bias


def _dynamic_quantize_matmul_compiled(
    a: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """DynamicQuantizeMatMul's compiled form: both steps' compiled forms."""
    a_q, a_scale, a_zero_point = dynamic_quantize_linear_compiled(a)
    return _matmul_integer_to_float_compiled(
        a_q, b, a_scale, b_scale, a_zero_point, b_zero_point, bias
    )


@op(
    "DynamicQuantizeMatMul",
    1,
    domain=MS_DOMAIN,
    traits=Traits(native=native_form(ig.QUANT and _dynamic_quantize_matmul_compiled)),
)
def dynamic_quantize_matmul(
    a: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """A quantized to uint8 over its own range (onnx DynamicQuantizeLinear), then
    :func:`matmul_integer_to_float` with B."""
    a_q, a_scale, a_zero_point = dynamic_quantize_linear(a)
    return matmul_integer_to_float(a_q, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)


# -- DynamicQuantizeLSTM ------------------------------------------------------------------------
class _QuantizedLstmDirection:
    """One direction of DynamicQuantizeLSTM: the input projection of every step, and the
    recurrent product with each step's hidden state quantized."""

    def __init__(
        self,
        xw: np.ndarray,
        r: tuple[np.ndarray, np.ndarray, np.ndarray],
        rb: np.ndarray,
        p: np.ndarray | None,
    ) -> None:
        codes, scale, zero = r
        self.xw = xw
        self.r_centered = codes.astype(np.int64) - zero.astype(np.int64)
        self.r_scale = scale.astype(_F32)
        self.rb = rb
        self.p = p

    def recurrent(self, h: np.ndarray) -> np.ndarray:
        """``h @ R + Rb`` with ``h`` quantized to uint8, the whole batch at once.

        onnxruntime quantizes the hidden states of each chunk of batch entries its threads
        share out, so its result depends on its thread count: this is what it gives on one
        thread (and on any number for a batch of one). Backwards, every entry starts at the
        end of its own sequence (:func:`_time_order`), so the entries quantized together are
        those at the same step from their ends."""
        codes, scale, zero = dynamic_quantize_linear(h)
        acc = (codes.astype(np.int64) - int(zero)) @ self.r_centered
        return acc.astype(_F32) * (scale * self.r_scale) + self.rb


def _quantized_lstm_cell(
    bound: Activation,
    input_forget: int,
    q: _QuantizedLstmDirection,
    t: int,
    s: list[np.ndarray],
    f: list[Activation],
) -> list[np.ndarray]:
    """onnx LSTM's gates i, o, f, c (peepholes, clip, coupled input and forget) on the
    quantized products."""
    h, c = s
    return lstm_gates(bound, input_forget, q.xw[t] + q.recurrent(h), c, q.p, f)


_LSTM_DEFAULTS = ["Sigmoid", "Tanh", "Tanh"]


def _lstm_layout(
    w: np.ndarray, r: np.ndarray, direction: str, hidden_size: int | None
) -> tuple[tuple[bool, ...], int]:
    """The directions (backwards or not) and the hidden size, checked against W and R."""
    directions = _DIRECTIONS.get(direction)
    if directions is None or w.shape[0] != len(directions):
        raise ValueError(f"W has {w.shape[0]} direction(s), direction is {direction!r}")
    hidden = r.shape[1]
    if (hidden_size or hidden) != hidden or w.shape[2] != 4 * hidden:
        raise ValueError(f"W {w.shape} and R {r.shape} do not hold 4 gates of {hidden} units")
    return directions, hidden


def _time_order(lens: np.ndarray, seq: int, backwards: bool) -> np.ndarray:
    """The time index (seq, batch) of each step of each batch entry: forward, or each entry's
    own sequence reversed within its length (the steps past it stay where they are). Both
    are their own inverse."""
    steps = np.arange(seq)[:, None]
    if not backwards:
        return np.broadcast_to(steps, (seq, lens.size))
    return np.where(steps < lens[None, :], lens[None, :] - 1 - steps, steps)


def _in_order(steps: np.ndarray, order: np.ndarray, backwards: bool) -> np.ndarray:
    """``steps`` (T, B, ...) taken in ``order`` (:func:`_time_order`): as they are forwards,
    where the order is the identity."""
    return np.take_along_axis(steps, order, axis=0) if backwards else steps


def _quantized_initial_states(
    initial_h: np.ndarray | None, initial_c: np.ndarray | None, d: int, shape: tuple[int, int]
) -> list[np.ndarray]:
    """Direction ``d``'s initial hidden and cell states in float32: zeros where not given."""
    zeros = np.zeros(shape, _F32)
    return [zeros if s is None else s[d].astype(_F32) for s in (initial_h, initial_c)]


def _serves(q: _QuantizedLstmDirection, states: list[np.ndarray], lens: np.ndarray) -> bool:
    """Whether the compiled loop takes this direction's weights, states and lengths."""
    _, batch, width = q.xw.shape
    hidden = states[0].shape[-1]
    return (
        q.xw.dtype == _F32
        and q.r_centered.shape == (hidden, width)
        and q.r_scale.size in (1, width)
        and q.rb.shape == (width,)
        and (q.p is None or q.p.shape == (3 * hidden,))
        and lens.shape == (batch,)
        and all(s.shape == (batch, hidden) for s in states)
    )


def _compiled_direction(
    loop: _Loop, d: int, q: _QuantizedLstmDirection, states: list[np.ndarray], lens: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Direction ``d`` through the compiled loop (:func:`onnxflow.native._rnn.quantized_lstm`):
    Y (T, B, H), in each entry's own step order, and the final states."""
    seq, batch, width = q.xw.shape
    h, c = (np.array(s, _F32) for s in states)  # fresh: the loop writes the states over
    y = np.empty((seq, batch, h.shape[-1]), _F32)
    codes, alphas, betas = loop.activations[d]
    _NATIVE.quantized_lstm(
        np.ascontiguousarray(q.xw),
        np.ascontiguousarray(q.r_centered, np.int32),  # |codes - zero point| <= 255
        np.ascontiguousarray(np.broadcast_to(q.r_scale.reshape(-1), (width,))),
        q.rb,
        np.zeros(0, _F32) if q.p is None else q.p,
        h,
        c,
        np.ascontiguousarray(lens, np.int64),
        y,
        codes,
        alphas,
        betas,
        loop.clip,
        loop.flag,
    )
    return y, [h, c]


@recurrent("DynamicQuantizeLSTM", 1, domain=MS_DOMAIN, memo=False)
def dynamic_quantize_lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None,
    sequence_lens: np.ndarray | None,
    initial_h: np.ndarray | None,
    initial_c: np.ndarray | None,
    p: np.ndarray | None,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    r_scale: np.ndarray,
    r_zero_point: np.ndarray,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    input_forget: int = 0,
    compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """onnx LSTM (layout 0) on 8-bit weights W (D, I, 4H) and R (D, H, 4H), each with a scale
    and zero point per direction or per direction and gate column. X is quantized to uint8
    once over the whole tensor and each step's hidden state over the whole batch (onnx
    DynamicQuantizeLinear's rule, see :meth:`_QuantizedLstmDirection.recurrent`); the
    products are exact integers scaled to float32."""
    directions, hidden = _lstm_layout(w, r, direction, hidden_size)
    seq, batch, _ = x.shape
    lens = np.full(batch, seq) if sequence_lens is None else sequence_lens.astype(np.int64)
    functions = _activations(
        activations, activation_alpha, activation_beta, _LSTM_DEFAULTS, len(directions)
    )
    x_codes = dynamic_quantize_linear(x.reshape(seq * batch, -1))
    width = 4 * hidden
    bias = np.zeros((len(directions), 2 * width), _F32) if b is None else b.astype(_F32)
    cell = functools.partial(_quantized_lstm_cell, _clipper(clip), input_forget)
    spec = _Recurrence(direction, hidden_size, 0, activations, activation_alpha, activation_beta)
    loop = _loop(_LSTM, spec, clip, input_forget) if compiled else None
    ys, finals = [], []
    for d, backwards in enumerate(directions):
        order = _time_order(lens, seq, backwards)[:, :, None]
        xw = matmul_integer_to_float(
            x_codes[0], w[d], x_codes[1], w_scale[d], x_codes[2], w_zero_point[d], bias[d, :width]
        )
        weights = _QuantizedLstmDirection(
            _in_order(xw.reshape(seq, batch, -1), order, backwards),
            (r[d], r_scale[d], r_zero_point[d]),
            bias[d, width:],
            None if p is None else p[d].astype(_F32),
        )
        states = _quantized_initial_states(initial_h, initial_c, d, (batch, hidden))
        if loop is not None and _serves(weights, states, lens):
            y, states = _compiled_direction(loop, d, weights, states, lens)
        else:
            y, states = _over_time(cell, weights, states, functions[d], lens, False)
        ys.append(_in_order(y, order, backwards))
        finals.append(states)
    return np.stack(ys, axis=1), *(np.stack([f[i] for f in finals]) for i in range(2))
