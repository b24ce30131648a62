"""com.microsoft block-quantized weights: what ``onnxruntime.quantization``'s weight-only
quantizer (``matmul_nbits_quantizer``) emits for MatMul and Gather.

====================  =====  ============================================================
operator              since  meaning
====================  =====  ============================================================
MatMulNBits           1      ``A @ dequantize(B).T`` for B packed in 2 to 8-bit codes
GatherBlockQuantized  1      Gather of a block-quantized table, dequantized
MatMulBnb4            1      ``A @ W.T`` for W in bitsandbytes' FP4 or NF4 codes
====================  =====  ============================================================

A block is ``block_size`` consecutive elements along the quantized axis sharing one scale and
one zero point. Packed codes are a little-endian bit stream: code ``i`` of a row holds bits
``i * bits`` to ``(i + 1) * bits - 1`` (for 4 bits, the low nibble of a byte comes first).
"""

from __future__ import annotations

import functools

import numpy as np

from onnxflow.ops._common import normalize_axis
from onnxflow.ops.cast import is_float
from onnxflow.ops.memo import WeightMemo
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.quantization import dequantize
from onnxflow.ops.registry import op
from onnxflow.traits import Traits


def unpack_codes(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` ``bits``-wide codes of each row (last axis) of ``packed`` uint8, as
    uint8, read as a little-endian bit stream."""
    if bits == 8:
        return packed[..., :count]
    stream = np.unpackbits(packed, axis=-1, bitorder="little")
    usable = stream.shape[-1] // bits * bits
    fields = stream[..., :usable].reshape(*packed.shape[:-1], -1, bits)
    weights = (1 << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    return (fields * weights).sum(axis=-1, dtype=np.uint8)[..., :count]


# -- MatMulNBits --------------------------------------------------------------------------------
@op(
    "MatMulNBits",
    1,
    domain=MS_DOMAIN,
    traits=Traits(stateful=lambda: functools.partial(matmul_nbits, weights_memo=WeightMemo())),
)
def matmul_nbits(
    a: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None = None,
    g_idx: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    K: int,
    N: int,
    accuracy_level: int = 0,
    bits: int = 4,
    block_size: int,
    weight_prepacked: int = 0,
    weights_memo: WeightMemo[np.ndarray] | None = None,
) -> np.ndarray:
    """``A @ W.T (+ bias)`` with ``W[n, k] = (code - zero_point) * scale`` of k's block.

    B is ``(N, blocks, block_size * bits / 8)`` packed codes; ``scales`` ``N * blocks``
    values; ``zero_points`` either packed ``bits``-wide codes (``ceil(blocks * bits / 8)``
    bytes per row of B) or floats shaped like ``scales``; without them the zero point is
    ``2 ** (bits - 1)``. ``g_idx`` gives each k its block (act-order); otherwise k's block is
    ``k // block_size``. An empty B is an omitted projection: the result is the bias or zeros.

    The product is the float one onnxruntime's CPU kernel computes at ``accuracy_level`` 0
    (unset) and 1: W dequantized to A's type (float16 through float32), then a float matmul.
    ``accuracy_level`` 4 lets onnxruntime, where the CPU has int8 dot-product kernels for the
    shape, quantize A to int8 per block and accumulate integer dot products, which moves each
    output by up to A's quantization error (around 1% of a typical output). onnxflow reads
    the attribute and always gives the level 0 result; on a CPU where onnxruntime keeps float
    arithmetic at level 4 (as on the one these tests ran on) the results agree to float32
    rounding, elsewhere to that quantization error.

    ``weights_memo``: where the stateful form keeps W dequantized for the arrays given last
    (constant weights are dequantized once).
    """
    if weight_prepacked:
        raise ValueError(
            "MatMulNBits with weight_prepacked=1 holds a layout private to "
            "onnxruntime's kernels; expected the portable packing (0)"
        )
    if a.shape[-1] != K:
        raise ValueError(f"A has {a.shape[-1]} columns, expected K = {K}")
    work = np.float32 if a.dtype == np.float16 else a.dtype
    if b.size == 0:
        y = np.zeros((*a.shape[:-1], N), work)
    else:

        def make() -> np.ndarray:
            w = _dequantized_weight(b, scales, zero_points, g_idx, K, N, bits, block_size, work)
            return np.ascontiguousarray(w.T)

        key = (b, scales, zero_points, g_idx, work)
        w_t = make() if weights_memo is None else weights_memo.get(key, make)
        y = np.matmul(a.astype(work, copy=False), w_t)
    if bias is not None:
        y = y + bias.astype(work, copy=False)
    return y.astype(a.dtype, copy=False)


def _dequantized_weight(b, scales, zero_points, g_idx, k, n, bits, block_size, work):
    """W, ``(N, K)`` in ``work``, from MatMulNBits' packed codes, scales and zero points."""
    blocks = -(-k // block_size)
    codes = unpack_codes(b.reshape(n, -1), bits, blocks * block_size).astype(work)
    scale = scales.astype(work).reshape(n, blocks)
    if zero_points is None:
        zero = np.full((n, blocks), 2 ** (bits - 1), work)
    elif is_float(zero_points.dtype):
        zero = zero_points.astype(work).reshape(n, blocks)
    else:
        zero = unpack_codes(zero_points.reshape(n, -1), bits, blocks).astype(work)
    if g_idx is not None and not _is_sequential(g_idx, block_size, k):
        owner = g_idx.astype(np.int64)
        return (codes[:, :k] - zero[:, owner]) * scale[:, owner]
    codes = codes.reshape(n, blocks, block_size)
    w = (codes - zero[:, :, None]) * scale[:, :, None]
    return w.reshape(n, -1)[:, :k]


def _is_sequential(g_idx: np.ndarray, block_size: int, k: int) -> bool:
    """Whether ``g_idx`` assigns each k its plain block ``k // block_size``."""
    return g_idx.shape == (k,) and bool(np.all(g_idx == np.arange(k) // block_size))


# -- GatherBlockQuantized -----------------------------------------------------------------------


@op("GatherBlockQuantized", 1, domain=MS_DOMAIN)
def gather_block_quantized(
    data: np.ndarray,
    indices: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None = None,
    *,
    bits: int = 4,
    block_size: int = 128,
    gather_axis: int = 0,
    quantize_axis: int = 1,
) -> np.ndarray:
    """onnx Gather of ``data`` dequantized block-wise along ``quantize_axis``, in the scales'
    type: ``(code - zero_point) * scale``.

    ``data`` is int4 or uint4 (zero point 0 when omitted), uint8 holding ``bits``-wide codes
    packed along its last axis (zero point ``2 ** (bits - 1)`` when omitted; zero points packed
    the same way), or a float 8 / float 4 type (no zero point; ``block_size`` 0 means one block
    spanning the axis, and a scale axis of size 1 is shared along that axis of ``data``).
    """
    codes, zero = _logical(data, zero_points, bits)
    axis = normalize_axis(quantize_axis, codes.ndim)
    gather = normalize_axis(gather_axis, codes.ndim)
    if is_float(codes.dtype):
        scales, block_size = _float_layout(codes, scales, axis, block_size)
    rows = indices.astype(np.int64)
    picked = np.take(codes, rows, axis=gather)
    if gather == axis:  # each gathered element's block is its index's: one scale each
        rows, block_size = rows // block_size, 1
    scale = _gathered(scales, rows, gather)
    zero = None if zero is None else _gathered(zero, rows, gather)
    return dequantize(
        picked, scale, zero, _after_gather(axis, gather, indices), block_size, scales.dtype
    )


def _logical(
    data: np.ndarray, zero_points: np.ndarray | None, bits: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The codes of ``data`` and their zero points, unpacked from uint8 when packed."""
    if data.dtype != np.uint8:
        if zero_points is not None and is_float(data.dtype):
            raise ValueError(f"a {data.dtype} table takes no zero_points")
        return data, zero_points
    if bits not in (2, 4, 8):
        raise ValueError(f"uint8 data holds 2, 4 or 8-bit codes, found bits={bits}")
    per_byte = 8 // bits
    codes = unpack_codes(data, bits, data.shape[-1] * per_byte)
    if zero_points is None:
        return codes, np.full((), 2 ** (bits - 1), np.uint8)
    return codes, unpack_codes(zero_points, bits, zero_points.shape[-1] * per_byte)


def _float_layout(
    codes: np.ndarray, scales: np.ndarray, axis: int, block_size: int
) -> tuple[np.ndarray, int]:
    """Scales for float 8 / float 4 codes widened to the blocked layout: a size-1 scale axis
    other than ``axis`` broadcast, and ``block_size`` 0 made the whole axis."""
    block_size = block_size or codes.shape[axis]
    blocks = -(-codes.shape[axis] // block_size)
    shape = [blocks if i == axis else d for i, d in enumerate(codes.shape)]
    return np.broadcast_to(scales, shape), block_size


def _gathered(param: np.ndarray, indices: np.ndarray, gather: int) -> np.ndarray:
    """A scale or zero point with its ``gather`` axis taken at ``indices`` (a scalar stays)."""
    if param.ndim == 0:
        return param
    return np.take(param, indices.astype(np.int64), axis=gather)


def _after_gather(axis: int, gather: int, indices: np.ndarray) -> int:
    """Where ``axis`` of the table lands in the gathered result."""
    return axis + indices.ndim - 1 if axis > gather else axis


# -- MatMulBnb4 ---------------------------------------------------------------------------------
#: bitsandbytes' 4-bit codes: FP4 (sign, two exponent bits, one mantissa bit, scaled to 1) and
#: NF4 (the normal distribution's quantiles, normalized to [-1, 1]), by code.
_FP4 = np.array([0, 1 / 192, 2 / 3, 1, 1 / 3, 1 / 2, 1 / 6, 1 / 4], np.float32)
_BNB4 = {
    0: np.concatenate([_FP4, -_FP4]),
    1: np.array(
        [
            -1.0,
            -0.6961928009986877,
            -0.5250730514526367,
            -0.39491748809814453,
            -0.28444138169288635,
            -0.18477343022823334,
            -0.09105003625154495,
            0.0,
            0.07958029955625534,
            0.16093020141124725,
            0.24611230194568634,
            0.33791524171829224,
            0.44070982933044006,
            0.5626170039176941,
            0.7229568362236023,
            1.0,
        ],
        np.float32,
    ),
}


@op("MatMulBnb4", 1, domain=MS_DOMAIN)
def matmul_bnb4(
    a: np.ndarray,
    b: np.ndarray,
    absmax: np.ndarray,
    *,
    K: int,
    N: int,
    block_size: int,
    quant_type: int,
    training_mode: int = 0,
    transB: int = 1,
) -> np.ndarray:
    """``A @ W.T`` (``transB``, the default) or ``A @ W`` for the (N, K) weight W that B holds
    as 4-bit FP4 (``quant_type`` 0) or NF4 (1) codes, two a byte with the first in the high
    nibble, each block of ``block_size`` codes (in W's row-major order) scaled by its absmax."""
    if quant_type not in _BNB4:
        raise ValueError(f"quant_type must be 0 (FP4) or 1 (NF4), found {quant_type}")
    count = N * K
    codes = np.stack([b >> 4, b & 15], axis=-1).reshape(-1)[:count]
    scale = np.repeat(absmax.astype(np.float32), block_size)[:count]
    w = (_BNB4[quant_type][codes] * scale).reshape(N, K)
    work = np.float32 if a.dtype == np.float16 else a.dtype
    y = np.matmul(a.astype(work, copy=False), w.T if transB else w)
    return y.astype(a.dtype, copy=False)
