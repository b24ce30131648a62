"""Attention and its companions.

- Attention 23, 24 (``nonpad_kv_seqlen`` input), 25 (``left/right_window_size``): scaled dot
  product attention on 3D or 4D inputs, with GQA, masks, causal masking, kv cache, softcap,
  ``softmax_precision`` and the ``qk_matmul_output`` debug output.
- RotaryEmbedding 23, LinearAttention 27 and ai.onnx.preview FlexAttention 1.

float16 and bfloat16 inputs are computed in float32 and cast back to their dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from onnxflow.compile.context import NodeContext
from onnxflow.ops._common import accumulation_dtype, float_compute_dtype
from onnxflow.ops.registry import op
from onnxflow.runtime.executor import current_runner
from onnxflow.values import np_dtype


def heads_first(x: np.ndarray, heads: int | None, what: str) -> np.ndarray:
    """Return a (B, S, H*D) tensor as (B, H, S, D); a 4D tensor is returned unchanged."""
    if x.ndim == 4:
        return x
    if x.ndim != 3 or not heads or x.shape[2] % heads:
        raise ValueError(
            f"{what} must be 4D, or 3D with a last dimension divisible by its num_heads "
            f"attribute; found shape {x.shape} with num_heads {heads}"
        )
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row with no finite score (fully masked) gives zeros."""
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    e = np.exp(scores - top)
    total = np.sum(e, axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


# -- Attention ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AttentionSpec:
    """The attributes of one Attention node."""

    is_causal: int
    q_num_heads: int | None
    kv_num_heads: int | None
    mode: int
    scale: float | None
    softcap: float
    softmax_precision: int | None
    left_window: int = -1
    right_window: int = -1

    def __post_init__(self) -> None:
        if self.mode not in (0, 1, 2, 3):
            raise ValueError(f"qk_matmul_output_mode must be 0, 1, 2 or 3, found {self.mode}")


def _allowed_keys(
    spec: _AttentionSpec, q_len: int, total: int, past: int, nonpad: np.ndarray | None
) -> np.ndarray | None:
    """Return the (B|1, 1, Sq, total) keys allowed by causality, windows and padding."""
    limited = spec.is_causal or spec.left_window >= 0 or spec.right_window >= 0
    if not limited and nonpad is None:
        return None
    if nonpad is not None and not past:
        offset = (nonpad.astype(np.int64) - q_len).reshape(-1, 1, 1, 1)
    else:
        offset = np.full((1, 1, 1, 1), past, np.int64)
    pos = offset + np.arange(q_len).reshape(1, 1, -1, 1)
    key = np.arange(total).reshape(1, 1, 1, -1)
    allowed = np.ones(np.broadcast_shapes(pos.shape, key.shape), bool)
    if spec.is_causal:
        allowed &= key <= pos
    if spec.left_window >= 0:
        allowed &= key >= pos - spec.left_window
    if spec.right_window >= 0:
        allowed &= key <= pos + spec.right_window
    if nonpad is not None:
        allowed &= key < nonpad.astype(np.int64).reshape(-1, 1, 1, 1)
    return allowed


def _mask_bias(mask: np.ndarray, total: int, dtype: np.dtype) -> np.ndarray:
    """Return attn_mask as an additive bias, its key axis padded with -inf up to ``total``."""
    bias = np.where(mask, 0, -np.inf).astype(dtype) if mask.dtype == bool else mask.astype(dtype)
    short = total - bias.shape[-1]
    if short > 0:
        pad = [(0, 0)] * (bias.ndim - 1) + [(0, short)]
        bias = np.pad(bias, pad, constant_values=-np.inf)
    return bias


def _with_past(
    k4: np.ndarray, v4: np.ndarray, past_key: np.ndarray | None, past_value: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Return (present key, present value, past length): the cache concatenated before K, V."""
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    if past_key is None:
        return k4, v4, 0
    keys, values = np.concatenate([past_key, k4], axis=2), np.concatenate([past_value, v4], axis=2)
    return keys, values, past_key.shape[2]


def share_heads(x: np.ndarray, q_heads: int) -> np.ndarray:
    """Repeat each kv head for its group of query heads (GQA/MQA)."""
    kv_heads = x.shape[1]
    if q_heads % kv_heads:
        raise ValueError(f"q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}")
    return x if q_heads == kv_heads else np.repeat(x, q_heads // kv_heads, axis=1)


def _attention(
    spec: _AttentionSpec,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None,
    past_key: np.ndarray | None,
    past_value: np.ndarray | None,
    nonpad: np.ndarray | None,
) -> tuple[np.ndarray, ...]:
    """Return (Y, present_key, present_value, qk_matmul_output) of one Attention call."""
    q4 = heads_first(q, spec.q_num_heads, "Q")
    present_key, present_value, past = _with_past(
        heads_first(k, spec.kv_num_heads, "K"), heads_first(v, spec.kv_num_heads, "V"),
        past_key, past_value,
    )  # fmt: skip
    work = accumulation_dtype(q.dtype)
    stages = _score_stages(spec, q4, present_key, attn_mask, past, nonpad, work)
    values = share_heads(present_value.astype(work), q4.shape[1])
    y = np.matmul(stages[-1], values).astype(q.dtype)
    if q.ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present_key, present_value, stages[spec.mode].astype(q.dtype)


def _score_stages(
    spec: _AttentionSpec,
    q4: np.ndarray,
    keys: np.ndarray,
    attn_mask: np.ndarray | None,
    past: int,
    nonpad: np.ndarray | None,
    work: np.dtype,
) -> list[np.ndarray]:
    """Return the attention weights at each qk_matmul_output_mode stage: Q K^T scaled, then
    softcapped, then masked, then softmaxed (the last are the probabilities)."""
    scale = 1 / np.sqrt(q4.shape[3]) if spec.scale is None else spec.scale
    root = work.type(np.sqrt(scale))
    keys = share_heads(keys.astype(work) * root, q4.shape[1])
    scores = np.matmul(q4.astype(work) * root, keys.swapaxes(-1, -2))
    stages = [scores]
    if spec.softcap > 0:
        cap = work.type(spec.softcap)
        scores = cap * np.tanh(scores / cap)
    stages.append(scores)
    total = scores.shape[-1]
    if attn_mask is not None:
        scores = scores + _mask_bias(attn_mask, total, work)
    allowed = _allowed_keys(spec, q4.shape[2], total, past, nonpad)
    if allowed is not None:
        scores = np.where(allowed, scores, work.type(-np.inf))
    stages.append(scores)
    soft = work if spec.softmax_precision is None else np_dtype(spec.softmax_precision)
    stages.append(softmax_rows(scores.astype(soft)).astype(work))
    return stages


@op("Attention", 23)
def attention_23(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Return (Y, present_key, present_value, qk_matmul_output)."""
    spec = _AttentionSpec(
        is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
        softmax_precision,
    )  # fmt: skip
    return _attention(spec, q, k, v, attn_mask, past_key, past_value, None)


@op("Attention", 24)
def attention_24(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
) -> tuple[np.ndarray, ...]:
    """As version 23, with keys at or past ``nonpad_kv_seqlen[b]`` masked out."""
    spec = _AttentionSpec(
        is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
        softmax_precision,
    )  # fmt: skip
    return _attention(spec, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen)


@op("Attention", 25)
def attention_25(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
    left_window_size: int = -1,
    right_window_size: int = -1,
) -> tuple[np.ndarray, ...]:
    """As version 24, with keys restricted to a window around each query's position."""
    spec = _AttentionSpec(
        is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale, softcap,
        softmax_precision, left_window_size, right_window_size,
    )  # fmt: skip
    return _attention(spec, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen)


# -- RotaryEmbedding ---------------------------------------------------------------------------


@op("RotaryEmbedding", 23)
def rotary_embedding(
    x: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
    *,
    interleaved: int = 0,
    num_heads: int | None = None,
    rotary_embedding_dim: int = 0,
) -> np.ndarray:
    """Rotate the first ``rotary_embedding_dim`` features of each head by position angles."""
    x4 = heads_first(x, num_heads, "X")  # (B, H, S, D)
    dim = rotary_embedding_dim or x4.shape[3]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
        raise ValueError(
            f"cos/sin caches must end in rotary_embedding_dim / 2 = {dim // 2}, found "
            f"{cos_cache.shape} and {sin_cache.shape}"
        )
    work = accumulation_dtype(x.dtype)
    cos, sin = (c.astype(work)[:, np.newaxis] for c in (cos_cache, sin_cache))  # (B, 1, S, R/2)
    rot = x4[..., :dim].astype(work)
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else np.split(rot, 2, axis=-1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rot = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rot.astype(x.dtype), x4[..., dim:]], axis=-1)
    return y if x.ndim == 4 else y.transpose(0, 2, 1, 3).reshape(x.shape)


# -- LinearAttention ---------------------------------------------------------------------------


def _per_head(
    x: np.ndarray | None, b: int, t: int, heads: int, size: int, what: str
) -> np.ndarray | None:
    """Unpack a (B, T, H*size | H | 1) gate to (B, T, H, size | 1)."""
    if x is None:
        return None
    last = x.shape[-1]
    if last == heads * size and size != 1:
        return x.reshape(b, t, heads, size)
    if last in (heads, 1):
        return np.broadcast_to(x.reshape(b, t, last, 1), (b, t, heads, 1))
    raise ValueError(f"{what} must be (B, T, {heads * size}), (B, T, {heads}) or (B, T, 1)")


@op("LinearAttention", 27)
def linear_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    past_state: np.ndarray | None = None,
    decay: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    q_num_heads: int,
    kv_num_heads: int,
    update_rule: str = "gated_delta",
    scale: float = 0.0,
    chunk_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the recurrent state update token by token; return (output, present_state)."""
    if update_rule not in _UPDATE_RULES:
        raise ValueError(f"unknown update_rule {update_rule!r}")
    gated, delta = _UPDATE_RULES[update_rule]
    if (gated and decay is None) or (delta and beta is None):
        raise ValueError(f"update_rule {update_rule!r} needs the decay and/or beta inputs")
    work = accumulation_dtype(query.dtype)
    b, t, _ = query.shape
    dk = query.shape[2] // q_num_heads
    dv = value.shape[2] // kv_num_heads
    q = query.astype(work).reshape(b, t, q_num_heads, dk)
    k = key.astype(work).reshape(b, t, kv_num_heads, dk)
    v = value.astype(work).reshape(b, t, kv_num_heads, dv)
    g = _per_head(decay, b, t, kv_num_heads, dk, "decay") if gated else None
    rate = _per_head(beta, b, t, kv_num_heads, 1, "beta") if delta else None
    state_dtype = query.dtype if past_state is None else past_state.dtype
    state = np.zeros((b, kv_num_heads, dk, dv), work) if past_state is None else past_state
    factor = work.type(scale or 1 / np.sqrt(dk))
    out, state = _recur(q, k, v, g, rate, state.astype(work), factor)
    return out.reshape(b, t, q_num_heads * dv).astype(query.dtype), state.astype(state_dtype)


#: update_rule -> (gated: decay the state, delta: write only what the state mispredicts)
_UPDATE_RULES = {
    "linear": (False, False),
    "gated": (True, False),
    "delta": (False, True),
    "gated_delta": (True, True),
}


def _recur(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray | None,
    rate: np.ndarray | None,
    state: np.ndarray,
    factor: np.generic,
) -> tuple[np.ndarray, np.ndarray]:
    """Step the (B, H, dk, dv) state through time; return (B, T, Hq, dv) outputs and the state.

    Each kv head serves a group of consecutive query heads.
    """
    b, t, q_heads, _ = q.shape
    group = q_heads // k.shape[2]
    out = np.empty((b, t, q_heads, v.shape[3]), state.dtype)
    for step in range(t):
        kt, vt = k[:, step], v[:, step]  # (B, H, dk), (B, H, dv)
        if g is not None:
            state = np.exp(g[:, step].astype(state.dtype))[..., np.newaxis] * state
        if rate is not None:
            recalled = np.einsum("bhkv,bhk->bhv", state, kt)
            vt = rate[:, step].astype(state.dtype) * (vt - recalled)
        state = state + kt[..., :, np.newaxis] * vt[..., np.newaxis, :]
        shared = np.repeat(state, group, axis=1)
        out[:, step] = factor * np.einsum("bhk,bhkv->bhv", q[:, step], shared)
    return out, state


# -- FlexAttention -----------------------------------------------------------------------------


@op("FlexAttention", 1, domain="ai.onnx.preview", build=True)
def flex_attention(
    node: NodeContext,
    *,
    prob_mod: onnx.GraphProto | None = None,
    score_mod: onnx.GraphProto | None = None,
    scale: float | None = None,
    softmax_precision: int | None = None,
) -> Callable[..., np.ndarray]:
    """Softmax(score_mod(Q @ K^T * scale)) -> prob_mod -> @ V, on rank-4 (B, H, S, D) inputs."""
    mods = [node.subgraph(g) if g is not None else None for g in (score_mod, prob_mod)]

    def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, *captured: Any) -> np.ndarray:
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise ValueError(f"Q, K, V must be rank 4, found {q.shape}, {k.shape}, {v.shape}")
        if softmax_precision is not None:
            work = np_dtype(softmax_precision)
        else:
            work = float_compute_dtype(q.dtype)
        group = q.shape[1] // k.shape[1]
        keys = np.repeat(k.astype(work), group, axis=1)
        values = np.repeat(v.astype(work), group, axis=1)
        factor = 1 / np.sqrt(q.shape[3]) if scale is None else scale
        scores = np.matmul(q.astype(work), keys.swapaxes(-1, -2)) * work.type(factor)
        score_fn, prob_fn = mods
        if score_fn is not None:
            scores = current_runner(score_fn.plan)([scores, *score_fn.bind(captured)])[0]
        probs = softmax_rows(scores)
        if prob_fn is not None:
            probs = current_runner(prob_fn.plan)([probs, *prob_fn.bind(captured)])[0]
        return np.matmul(probs, values).astype(q.dtype)

    return run
