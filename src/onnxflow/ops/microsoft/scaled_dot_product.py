"""Scaled dot-product attention as the com.microsoft attention kernels compute it: softcapped
scores, additive biases, a softmax with an optional sink logit, computed in the accumulation
dtype (float32 for float16 inputs)."""

from __future__ import annotations

import numpy as np

from onnxflow.ops._common import accumulation_dtype
from onnxflow.ops.attention import share_heads, softmax_rows


def merge_heads(x4: np.ndarray) -> np.ndarray:
    """Return a (B, N, S, H) tensor as (B, S, N*H)."""
    b, n, s, h = x4.shape
    return x4.transpose(0, 2, 1, 3).reshape(b, s, n * h)


def softmax_with_sink(scores: np.ndarray, sink: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis with an extra logit ``sink`` (per head, broadcast to the
    rows) counted in the denominator only; :func:`softmax_rows` when ``sink`` is None."""
    if sink is None:
        return softmax_rows(scores)
    top = np.maximum(np.max(scores, axis=-1, keepdims=True), sink)
    e = np.exp(scores - top)
    return e / (np.sum(e, axis=-1, keepdims=True) + np.exp(sink - top))


def attend(
    q4: np.ndarray,
    k4: np.ndarray,
    v4: np.ndarray,
    bias: np.ndarray | None,
    scale: float,
    softcap: float = 0.0,
    sink: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return softmax(softcap(scale * Q K^T) + bias) V for (B, N, S, H) queries over
    (B, Nk, T, H) keys and values (each kv head serving N / Nk query heads), as (B, N, S, Hv)
    in the accumulation dtype; with the scores before the softmax and the probabilities."""
    work = accumulation_dtype(q4.dtype)
    factor = work.type(scale or 1 / np.sqrt(q4.shape[3]))
    keys = share_heads(k4.astype(work), q4.shape[1])
    scores = np.matmul(q4.astype(work), keys.swapaxes(-1, -2)) * factor
    if softcap > 0:
        cap = work.type(softcap)
        scores = cap * np.tanh(scores / cap)
    if bias is not None:
        scores = scores + bias.astype(work)
    probs = softmax_with_sink(scores, sink)
    return np.matmul(probs, share_heads(v4.astype(work), q4.shape[1])), scores, probs


def add_biases(bias: np.ndarray | None, attention_bias: np.ndarray | None) -> np.ndarray | None:
    """The sum of two optional additive biases."""
    if attention_bias is None:
        return bias
    return attention_bias if bias is None else bias + attention_bias
