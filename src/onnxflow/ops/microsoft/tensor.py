"""com.microsoft tensor and linear-algebra operators, most the contrib twins of onnx ones.

======================  ====  ==========================================================
operator                since  meaning
======================  ====  ==========================================================
CDist                   1     pairwise distances of rows (skl2onnx's ``optim="cdist"``)
ExpandDims              1     a new axis of length 1 at ``axis`` (an input)
GatherND                1     onnx GatherND without ``batch_dims``
Inverse                 1     inverses of the trailing square matrices
MatMulInteger16         1     int16 matmul accumulated in int32
NGramRepeatBlock        1     scores of tokens that would repeat an n-gram set to -inf
Pad                     1     onnx Pad-11 (pads and value as inputs)
Range                   1     onnx Range with ``delta`` optional (1)
ScaledSiLU              1     ``z * sigmoid(z)`` with ``z = scale * x``, rounded to T each step
Trilu                   1     onnx Trilu
Unique                  1     unique values in order of occurrence, indices and counts
UnfoldTensor            1     every window of ``size`` along ``dim``, ``step`` apart
DynamicTimeWarping      1     the cheapest monotone path through a cost matrix
======================  ====  ==========================================================
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops._common import normalize_axis
from onnxflow.ops.activations import _sigmoid
from onnxflow.ops.indexing import gather_nd, trilu
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.registry import op
from onnxflow.ops.shape import pad, range_

_METRICS = ("sqeuclidean", "euclidean")


@op("CDist", 1, domain=MS_DOMAIN)
def cdist(a: np.ndarray, b: np.ndarray, *, metric: str = "sqeuclidean") -> np.ndarray:
    """Distances between the rows of A (N, K) and of B (M, K), shape (N, M): squared
    Euclidean, or Euclidean for ``metric="euclidean"``."""
    if metric not in _METRICS:
        raise ValueError(f"CDist metric must be one of {_METRICS}, found {metric!r}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"CDist expects (N, K) and (M, K) inputs, found {a.shape} and {b.shape}")
    diff = a[:, None, :] - b[None, :, :]
    out = np.einsum("nmk,nmk->nm", diff, diff)
    return np.sqrt(out) if metric == "euclidean" else out


@op("ExpandDims", 1, domain=MS_DOMAIN)
def expand_dims(x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """``x`` with a new axis of length 1 at ``axis`` (negative counts from the end of the
    result)."""
    where = int(np.asarray(axis).reshape(-1)[0])
    return np.expand_dims(x, normalize_axis(where, x.ndim + 1))


@op("GatherND", 1, domain=MS_DOMAIN)
def gather_nd_ms(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """onnx GatherND (version 11) on int32 or int64 indices: the slices of ``data`` at the
    index tuples in the last axis of ``indices``."""
    return gather_nd(data, indices.astype(np.int64, copy=False))


@op("Inverse", 1, domain=MS_DOMAIN)
def inverse(x: np.ndarray) -> np.ndarray:
    """The inverses of the trailing square matrices of ``x`` (float16 computed in float32)."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"Inverse expects square trailing matrices, found shape {x.shape}")
    work = np.float32 if x.dtype == np.float16 else x.dtype
    return np.linalg.inv(x.astype(work, copy=False)).astype(x.dtype, copy=False)


@op("MatMulInteger16", 1, domain=MS_DOMAIN)
def matmul_integer16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``numpy.matmul`` of int16 (or uint16) matrices, accumulated and returned in int32
    (uint32 for two unsigned inputs)."""
    out = np.uint32 if a.dtype == b.dtype == np.uint16 else np.int32
    return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(out)


@op("NGramRepeatBlock", 1, domain=MS_DOMAIN)
def ngram_repeat_block(input_ids: np.ndarray, scores: np.ndarray, *, ngram_size: int) -> np.ndarray:
    """``scores`` (batch, vocab) with -inf for every token that, appended to ``input_ids``
    (batch, length), would repeat one of its n-grams of ``ngram_size`` tokens."""
    out = scores.copy()
    length = input_ids.shape[1]
    if ngram_size < 1 or length + 1 < ngram_size:
        return out
    for row, ids in enumerate(input_ids.tolist()):
        tail = ids[length - ngram_size + 1 :] if ngram_size > 1 else []
        for start in range(length - ngram_size + 1):
            if ids[start : start + ngram_size - 1] == tail:
                out[row, ids[start + ngram_size - 1]] = -np.inf
    return out


@op("Pad", 1, domain=MS_DOMAIN)
def pad_ms(
    data: np.ndarray,
    pads: np.ndarray,
    value: np.ndarray | None = None,
    *,
    mode: str = "constant",
) -> np.ndarray:
    """onnx Pad-11: ``data`` padded (or cropped, where negative) by ``pads`` (all begins then
    all ends, 1-D or shaped [1, 2 * rank]) in ``mode`` (constant, reflect, edge)."""
    return pad(data, pads.reshape(-1), value, mode=mode)


@op("Range", 1, domain=MS_DOMAIN)
def range_ms(start: np.ndarray, limit: np.ndarray, delta: np.ndarray | None = None) -> np.ndarray:
    """start, start + delta, ... up to ``limit`` (exclusive); ``delta`` defaults to 1."""
    step = np.ones((), start.dtype) if delta is None else delta
    return range_(start, limit, step, stash_type=0)


@op("ScaledSiLU", 1, domain=MS_DOMAIN)
def scaled_silu(
    x: np.ndarray, scale: np.ndarray | None = None, *, alpha: float = 1.0
) -> np.ndarray:
    """``z * sigmoid(z)`` with ``z = scale * x`` (``scale`` the input when given, else
    ``alpha``), each of the three results rounded to x's type."""
    factor = alpha if scale is None else np.asarray(scale, np.float32).reshape(-1)[0]
    work = np.float32 if x.dtype == np.float16 else x.dtype
    z = (x.astype(work) * np.asarray(factor, work)).astype(x.dtype)
    s = _sigmoid(z.astype(work)).astype(x.dtype)
    return (z.astype(work) * s.astype(work)).astype(x.dtype)


@op("Trilu", 1, domain=MS_DOMAIN)
def trilu_ms(x: np.ndarray, k: np.ndarray | None = None, *, upper: int = 1) -> np.ndarray:
    """onnx Trilu: the upper (or lower) triangle of the last two axes from diagonal k."""
    return trilu(x, k, upper=upper)


@op("Unique", 1, domain=MS_DOMAIN)
def unique_ms(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unique values of 1-D ``x`` in order of first occurrence, each element's index into
    them (int64) and each value's count (int64)."""
    values, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True
    )
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    idx = rank[inverse.reshape(-1)].astype(np.int64)
    return values[order], idx, counts[order].astype(np.int64)


@op("UnfoldTensor", 1, domain=MS_DOMAIN)
def unfold_tensor(x: np.ndarray, *, size: int, dim: int = -1, step: int = 1) -> np.ndarray:
    """Every window of ``size`` elements along ``dim``, ``step`` apart: ``dim`` becomes the
    window count, ``(length - size) // step + 1``, and a last axis of ``size`` is added."""
    axis = normalize_axis(dim, x.ndim)
    if size < 1 or step < 1 or size > x.shape[axis]:
        raise ValueError(
            f"UnfoldTensor: size {size} and step {step} must be >= 1 and size at most the "
            f"length {x.shape[axis]} of dim {dim}"
        )
    windows = np.lib.stride_tricks.sliding_window_view(x, size, axis=axis)
    return np.ascontiguousarray(np.take(windows, np.arange(0, windows.shape[axis], step), axis))


@op("DynamicTimeWarping", 1, domain=MS_DOMAIN)
def dynamic_time_warping(cost: np.ndarray) -> np.ndarray:
    """The cheapest monotone path through the (M, N) ``cost`` matrix (a leading axis of 1 is
    allowed) from (0, 0) to (M-1, N-1), stepping to (r+1, c), (r+1, c+1) or (r, c+1): shape
    (2, steps) int32, rows then columns. Ties prefer the diagonal, then the step down."""
    matrix = cost.reshape(cost.shape[-2:]).astype(np.float64)
    rows, cols = matrix.shape
    total = np.full((rows + 1, cols + 1), np.inf)
    total[0, 0] = 0.0
    came = np.zeros((rows + 1, cols + 1), np.int8)
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            options = (total[r - 1, c - 1], total[r - 1, c], total[r, c - 1])
            best = min(range(3), key=options.__getitem__)
            came[r, c] = best
            total[r, c] = matrix[r - 1, c - 1] + options[best]
    return _trace_back(came, rows, cols)


def _trace_back(came: np.ndarray, r: int, c: int) -> np.ndarray:
    """The path that :func:`dynamic_time_warping` recorded in ``came``, first point first."""
    path = []
    while r > 0 and c > 0:
        path.append((r - 1, c - 1))
        step = came[r, c]
        r, c = (r - 1, c - 1) if step == 0 else (r - 1, c) if step == 1 else (r, c - 1)
    return np.array(path[::-1], np.int32).T.copy()
