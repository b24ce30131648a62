"""GroupQueryAttention over sliding-window caches (``sliding_window_cache``): a cache of fixed
capacity keeps each batch's latest positions, evicting ``capacity - window + 1`` rows at once
when it is full."""

from __future__ import annotations

import numpy as np

from onnxflow.ops._common import accumulation_dtype
from onnxflow.ops.microsoft.group_query import GroupQuery
from onnxflow.ops.microsoft.kv_cache import CacheCodec, CacheSteps
from onnxflow.ops.microsoft.scaled_dot_product import attend


def resident(total: int, capacity: int, window: int) -> int:
    """How many of its latest ``total`` positions a window cache of ``capacity`` keeps: all
    while they fit, then the window and what is left of the last eviction, which frees
    ``capacity - window + 1`` rows at once."""
    if total <= capacity:
        return total
    freed = capacity - window + 1
    return total - freed * -(-(total - capacity) // freed)


def windowed_attention(
    spec: GroupQuery,
    q4: np.ndarray,
    caches: tuple[tuple[np.ndarray, np.ndarray], ...],
    steps: CacheSteps,
    codecs: tuple[CacheCodec, CacheCodec],
    biases: tuple[np.ndarray | None, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, None]:
    """Attention over window caches (``caches``: the past and new keys, then values), batch
    by batch; return the (B, N, S, H) attention and the present caches, whose rows hold each
    batch's resident positions in order from row 0 (zeros after them), and no qk."""
    if caches[0][0] is None or caches[1][0] is None:
        raise ValueError("sliding_window_cache needs past_key and past_value (its capacity)")
    window, capacity = spec.local_window_size, caches[0][0].shape[2]
    if not 0 < window <= capacity:
        raise ValueError(f"local_window_size {window} must be in 1..cache capacity {capacity}")
    presents = [np.zeros_like(past) for past, _ in caches]
    encoded = [codec.encode(new) for codec, (_, new) in zip(codecs, caches, strict=True)]
    work = accumulation_dtype(q4.dtype)
    y = np.zeros((*q4.shape[:3], caches[1][1].shape[3]), work)
    for b, (start, end) in enumerate(zip(steps.past.tolist(), steps.total.tolist(), strict=True)):
        kept, keep = resident(start, capacity, window), resident(end, capacity, window)
        rows = [
            np.concatenate([past[b, :, :kept], new[b, :, : end - start]], axis=1)
            for (past, _), new in zip(caches, encoded, strict=True)
        ]
        for present, row in zip(presents, rows, strict=True):
            present[b, :, :keep] = row[:, row.shape[1] - keep :]
        positions = np.arange(start - kept, end)
        query = (start + np.arange(steps.s))[:, np.newaxis]
        allowed = (positions <= query) & (positions > query - window)
        bias = np.where(allowed, work.type(0), work.type(-np.inf))
        if biases[0] is not None:
            bias = bias + biases[0][min(b, biases[0].shape[0] - 1)][..., positions]
        keys, values = (c.decode(r, work)[np.newaxis] for c, r in zip(codecs, rows, strict=True))
        sink = spec.sink(biases[1], work)
        y[b] = attend(q4[b : b + 1], keys, values, bias, spec.scale, spec.softcap, sink)[0][0]
    return y, presents[0], presents[1], None
