"""com.microsoft attention operators, the ones onnxruntime's transformer optimizer and the
onnxruntime-genai model builder emit.

===================  =====  ==================================================================
operator             since  meaning
===================  =====  ==================================================================
Attention            1      self-attention from one packed Q/K/V projection (BERT, GPT-2)
MultiHeadAttention   1      attention on separate, packed or BNSH Q/K/V, with a kv cache
GroupQueryAttention  1      grouped-query attention on a per-batch (int8/int4) kv cache
RotaryEmbedding      1      rotary position embedding with a position offset or ids
QAttention           1      Attention on a uint8 input and 8-bit weights
===================  =====  ==================================================================

Padding masks are additive, as onnxruntime's are: a padded key's score gets
``mask_filter_value`` added, so a row whose keys are all padding still has a softmax. Future
keys (``unidirectional``, ``causal``) and, in GroupQueryAttention, keys outside the cache or the
local window are dropped outright.

The scores, softmax and weighted sums are computed in float32 for float16 inputs (the onnx
Attention kernel's rule), and rounded back once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onnxflow.ops._common import accumulation_dtype
from onnxflow.ops.attention import heads_first, rotary_embedding
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.microsoft.attention_window import windowed_attention
from onnxflow.ops.microsoft.group_query import GroupQuery, whole_cache_attention
from onnxflow.ops.microsoft.kv_cache import CacheCodec, CacheSteps, MhaCache
from onnxflow.ops.microsoft.scaled_dot_product import add_biases, attend, merge_heads
from onnxflow.ops.registry import op
from onnxflow.traits import Traits

_FILTER = -10000.0

MultiOutputFn = Callable[..., tuple[np.ndarray, ...]]


def _registered(op_type: str) -> Callable[[MultiOutputFn], MultiOutputFn]:
    """Register a kernel returning every output of com.microsoft ``op_type`` (since 1)."""
    return op(op_type, 1, domain=MS_DOMAIN, traits=Traits(several=True))


# -- masks of Attention and MultiHeadAttention -------------------------------------------------


def _mask_allowed(mask: np.ndarray, b: int, s: int, total: int, past: int) -> np.ndarray:
    """Return the keys a ``mask_index`` / ``key_padding_mask`` allows, as (B, S|1, T) bools.

    The forms: (B) key lengths (right padding); (2B) exclusive ends then inclusive starts
    (left padding); (B, T) and (B, S, T) raw masks, 0 masked; (B, 1, M, M) a Megatron mask,
    of which the rows of this call's queries and the first T keys are read.
    """
    key = np.arange(total)
    if mask.ndim == 1 and mask.shape[0] in (b, 2 * b):
        ends = mask[:b].astype(np.int64).reshape(b, 1, 1)
        starts = mask[b:].astype(np.int64).reshape(b, 1, 1) if mask.shape[0] == 2 * b else 0
        return (key < ends) & (key >= starts)
    if mask.ndim == 2 and mask.shape == (b, total):
        return mask[:, np.newaxis, :] > 0
    if mask.ndim == 3 and mask.shape == (b, s, total):
        return mask > 0
    if mask.ndim == 4 and mask.shape[:2] == (b, 1) and mask.shape[2] >= past + s:
        return mask[:, 0, past : past + s, :total] > 0
    raise ValueError(
        f"mask of shape {mask.shape} is none of (B), (2B), (B, T), (B, S, T) or (B, 1, M, M) "
        f"for B={b}, S={s}, T={total}"
    )


def _additive_mask(
    mask: np.ndarray | None,
    shape: tuple[int, int, int, int],
    filter_value: float,
    causal: int,
) -> np.ndarray | None:
    """Return the additive (B|1, 1, S, T) mask of padding and causality, or None for none.

    ``shape`` is (B, S, T, past length). Padding adds ``filter_value``; a future key (when
    ``causal``) is dropped outright, so a query whose past is all padding attends to it."""
    b, s, total, past = shape
    bias = None
    if mask is not None:
        allowed = _mask_allowed(mask, b, s, total, past)
        bias = np.where(allowed, np.float32(0), np.float32(filter_value))[:, np.newaxis]
    if causal:
        future = np.arange(total) > past + np.arange(s)[:, np.newaxis]
        step = np.where(future, np.float32(-np.inf), np.float32(0))
        bias = step[np.newaxis, np.newaxis] if bias is None else bias + step
    return bias


# -- Attention ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SelfAttention:
    """The attributes of an Attention or QAttention node."""

    num_heads: int
    sizes: tuple[int, ...] | None
    unidirectional: int
    scale: float
    mask_filter_value: float

    def run(
        self,
        qkv: np.ndarray,
        mask_index: np.ndarray | None,
        past: np.ndarray | None,
        attention_bias: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Attend with the projected (B, S, Dq + Dk + Dv) ``qkv``; return (output, present),
        present None when K and V differ in hidden size (the schema allows no present then)."""
        width = qkv.shape[2]
        sizes = self.sizes or (width // 3,) * 3
        if len(sizes) != 3 or sum(sizes) != width or any(d % self.num_heads for d in sizes):
            raise ValueError(
                f"qkv_hidden_sizes {list(sizes)} must be three multiples of num_heads "
                f"{self.num_heads} adding up to the weights' second dimension {width}"
            )
        q, k, v = np.split(qkv, np.cumsum(sizes[:2]), axis=2)
        q4, k4, v4 = (heads_first(x, self.num_heads, n) for x, n in ((q, "Q"), (k, "K"), (v, "V")))
        past_len = 0
        if past is not None:
            past_len = past.shape[3]
            k4, v4 = np.concatenate([past[0], k4], axis=2), np.concatenate([past[1], v4], axis=2)
        b, s, total = q.shape[0], q.shape[1], k4.shape[2]
        mask = _additive_mask(
            mask_index, (b, s, total, past_len), self.mask_filter_value, self.unidirectional
        )
        y = attend(q4, k4, v4, add_biases(mask, attention_bias), self.scale)[0]
        present = np.stack([k4, v4]).astype(qkv.dtype) if k4.shape == v4.shape else None
        return merge_heads(y).astype(qkv.dtype), present


def _refuse(what: str, value: object) -> None:
    """Raise, naming ``what``, for an option given (``value`` true) that onnxflow does not run."""
    if value:
        raise NotImplementedError(f"onnxflow does not run {what}")


@_registered("Attention")
def attention(
    x: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray | None = None,
    mask_index: np.ndarray | None = None,
    past: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    past_sequence_length: np.ndarray | None = None,
    *,
    num_heads: int,
    qkv_hidden_sizes: list[int] | None = None,
    unidirectional: int = 0,
    scale: float = 0.0,
    mask_filter_value: float = _FILTER,
    do_rotary: int = 0,
    past_present_share_buffer: int = 0,
    rotary_embedding_dim: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Self-attention of (B, S, D) ``x`` through the packed (D, Dq + Dk + Dv) projection;
    return (output (B, S, Dv), present (2, B, N, past + S, H)), the past stacked before."""
    _refuse("Attention do_rotary (nor does onnxruntime's CPU kernel)", do_rotary)
    share = past_present_share_buffer or past_sequence_length is not None
    _refuse("Attention past_present_share_buffer (nor does onnxruntime's CPU kernel)", share)
    work = accumulation_dtype(x.dtype)
    qkv = np.matmul(x.astype(work), weights.astype(work))
    if bias is not None:
        qkv += bias.astype(work)
    spec = _SelfAttention(
        num_heads, tuple(qkv_hidden_sizes or ()), unidirectional, scale, mask_filter_value
    )
    return spec.run(qkv.astype(x.dtype), mask_index, past, attention_bias)


# -- MultiHeadAttention ------------------------------------------------------------------------


def _mha_inputs(
    query: np.ndarray,
    key: np.ndarray | None,
    value: np.ndarray | None,
    bias: np.ndarray | None,
    num_heads: int,
) -> list[np.ndarray]:
    """Return Q, K, V as (B, N, S, H) from the forms MultiHeadAttention takes (see
    :func:`_mha_heads`), with ``bias`` (Dq + Dk + Dv) added to each but K and V given already
    as (B, N, L, H), which are projected already (onnxruntime ignores their bias)."""
    parts = _mha_heads(query, key, value, num_heads)
    if bias is not None:
        widths = [x.shape[1] * x.shape[3] for x in parts]
        pieces = np.split(bias, np.cumsum(widths[:2]))
        biased = 1 if key is not None and key.ndim == 4 else 3
        for i in range(biased):
            parts[i] = parts[i] + pieces[i].reshape(num_heads, 1, -1)
    return parts


def _mha_heads(
    query: np.ndarray, key: np.ndarray | None, value: np.ndarray | None, num_heads: int
) -> list[np.ndarray]:
    """Return Q, K, V as (B, N, S, H) from separate (B, S, D) tensors, packed QKV
    (B, S, N, 3, H) in ``query``, packed KV (B, L, N, 2, H) in ``key``, or K and V already
    (B, N, L, H)."""
    if key is None and query.ndim == 5:
        return [query[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3)]
    if key is not None and key.ndim == 5:
        kv = key.transpose(0, 2, 1, 3, 4)  # (B, N, L, 2, H)
        return [heads_first(query, num_heads, "query"), kv[..., 0, :], kv[..., 1, :]]
    if key is not None and value is not None:
        return [
            heads_first(x, num_heads, n)
            for x, n in ((query, "query"), (key, "key"), (value, "value"))
        ]
    raise ValueError(
        f"MultiHeadAttention needs key and value, packed KV in key, or packed QKV in "
        f"query; found query {query.shape}, key {None if key is None else key.shape}"
    )


@_registered("MultiHeadAttention")
def multi_head_attention(
    query: np.ndarray,
    key: np.ndarray | None = None,
    value: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    key_padding_mask: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    past_sequence_length: np.ndarray | None = None,
    cache_indirection: np.ndarray | None = None,
    *,
    num_heads: int,
    unidirectional: int = 0,
    scale: float = 0.0,
    mask_filter_value: float = _FILTER,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Self or cross attention; return (output (B, S, Dv), present_key, present_value, qk),
    the presents (B, N, past + L, H) with the past before the new keys and values (or the
    shared buffer written into, see :class:`MhaCache`), qk the (B, N, S, T) scores before
    the softmax (scaled, masked, biased)."""
    q4, k4, v4 = _mha_inputs(query, key, value, bias, num_heads)
    past_len = 0
    present_key, present_value = k4, v4
    if past_key is not None and past_value is not None:
        cache = MhaCache(past_key, past_value, past_sequence_length, cache_indirection)
        past_len = cache.length
        present_key, present_value = cache.present(k4), cache.present(v4, value=True)
        k4, v4 = cache.keys(k4), cache.keys(v4, value=True)
    b, s, total = q4.shape[0], q4.shape[2], k4.shape[2]
    mask = _additive_mask(
        key_padding_mask, (b, s, total, past_len), mask_filter_value, unidirectional
    )
    y, scores, _ = attend(q4, k4, v4, add_biases(mask, attention_bias), scale)
    merged = merge_heads(y).astype(query.dtype)
    return merged, present_key, present_value, scores.astype(query.dtype)


# -- RotaryEmbedding ---------------------------------------------------------------------------


def _positions(position_ids: np.ndarray, b: int, s: int) -> np.ndarray:
    """Return (B, S) positions from ``position_ids``: (B, S) itself, or one start position
    (shape (1) or a scalar) followed by consecutive ones."""
    if position_ids.size == 1:
        start = int(position_ids.reshape(-1)[0])
        return np.broadcast_to(np.arange(start, start + s), (b, s))
    return position_ids


@op("RotaryEmbedding", 1, domain=MS_DOMAIN)
def rotary_embedding_ms(
    x: np.ndarray,
    position_ids: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    *,
    interleaved: int = 0,
    is_packed_batching: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
    scale: float = 1.0,
) -> np.ndarray:
    """Rotate (B, S, N*H) or (B, N, S, H) ``x`` by the angles of its positions: the onnx
    RotaryEmbedding with the caches indexed by ``position_ids`` (an offset, or (B, S)). Without
    ``num_heads`` the head size is the whole rotary width, twice the caches' last dimension.
    ``scale`` changes nothing, as in onnxruntime's CPU kernel."""
    _refuse("RotaryEmbedding is_packed_batching", is_packed_batching)
    if rotary_embedding_dim and not num_heads:
        raise ValueError("RotaryEmbedding rotary_embedding_dim needs num_heads")
    if x.ndim == 4:  # (B, N, S, H)
        heads, (b, s) = x.shape[1], (x.shape[0], x.shape[2])
    else:
        heads, (b, s) = num_heads or x.shape[2] // (2 * cos_cache.shape[-1]), x.shape[:2]
    pos = _positions(position_ids, b, s)
    return rotary_embedding(
        x, cos_cache, sin_cache, pos, interleaved=interleaved, num_heads=heads,
        rotary_embedding_dim=rotary_embedding_dim,
    )  # fmt: skip


# -- GroupQueryAttention -----------------------------------------------------------------------


def _refuse_gqa_extras(inputs: tuple[np.ndarray | None, ...], window_cache: int, qk: int) -> None:
    """Refuse the GroupQueryAttention options onnxflow does not run: q/k RMS norm weights
    (CUDA and WebGPU only in onnxruntime), query_seqlens, qk_output from a windowed cache."""
    names = ("q_norm_weight", "k_norm_weight", "query_seqlens")
    for name, x in zip(names, inputs, strict=False):
        _refuse(f"GroupQueryAttention's {name} input", x is not None)
    _refuse("GroupQueryAttention qk_output with sliding_window_cache", window_cache and qk)


@_registered("GroupQueryAttention")
def group_query_attention(
    query: np.ndarray,
    key: np.ndarray | None = None,
    value: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    seqlens_k: np.ndarray | None = None,
    total_sequence_length: np.ndarray | None = None,
    cos_cache: np.ndarray | None = None,
    sin_cache: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    head_sink: np.ndarray | None = None,
    k_scale: np.ndarray | None = None,
    v_scale: np.ndarray | None = None,
    *unsupported: np.ndarray | None,
    num_heads: int,
    kv_num_heads: int,
    scale: float = 0.0,
    softcap: float = 0.0,
    local_window_size: int = -1,
    causal: int = 1,
    do_rotary: int = 0,
    rotary_interleaved: int = 0,
    smooth_softmax: int = -1,
    qk_output: int = 0,
    k_quant_type: str = "NONE",
    v_quant_type: str = "NONE",
    kv_cache_bit_width: int | None = None,
    sliding_window_cache: int = 0,
    qk_norm_epsilon: float = 1e-6,
    q_norm_epsilon: float | None = None,
    k_norm_epsilon: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Grouped-query attention over a per-batch kv cache; return (output (B, S, N*H),
    present_key, present_value, output_qk), the presents (B, Nk, max(cache, T), H).

    Batch b holds ``seqlens_k[b] + 1`` keys after this step. In a first prompt (S = T, the
    ``total_sequence_length``) its queries start at position 0 and keys past that count are
    right padding; otherwise they follow its cached keys. A quantized cache (``k_quant_type``,
    ``v_quant_type``; ``k_scale``, ``v_scale``) stores the new rows quantized, is read back
    dequantized. A window cache (``sliding_window_cache``) keeps each batch's latest rows.
    """
    _refuse_gqa_extras(unsupported, sliding_window_cache, qk_output)
    codecs = CacheCodec.pair((k_quant_type, v_quant_type), kv_cache_bit_width, (k_scale, v_scale))
    spec = GroupQuery(
        num_heads, kv_num_heads, scale, softcap, local_window_size, causal, rotary_interleaved,
        smooth_softmax, qk_output,
    )  # fmt: skip
    q4, k4, v4 = spec.split(query, key, value)
    steps = CacheSteps.of(q4.shape[2], past_key, seqlens_k, total_sequence_length,
                          sliding_window_cache)  # fmt: skip
    if do_rotary:
        q4, k4 = spec.rotate(q4, k4, steps.positions(position_ids), cos_cache, sin_cache)
    caches = (past_key, k4), (past_value, v4)
    run = windowed_attention if sliding_window_cache else whole_cache_attention
    y, present_key, present_value, qk = run(
        spec, q4, caches, steps, codecs, (attention_bias, head_sink)
    )
    return merge_heads(y).astype(query.dtype), present_key, present_value, qk


# -- QAttention --------------------------------------------------------------------------------


def _shifted(q: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """8-bit values less their zero point (scalar or one per column), as int32."""
    shifted = q.astype(np.int32)
    return shifted if zero_point is None else shifted - zero_point.astype(np.int32).reshape(-1)


@_registered("QAttention")
def q_attention(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    input_scale: np.ndarray,
    weight_scale: np.ndarray,
    mask_index: np.ndarray | None = None,
    input_zero_point: np.ndarray | None = None,
    weight_zero_point: np.ndarray | None = None,
    past: np.ndarray | None = None,
    *,
    num_heads: int,
    unidirectional: int = 0,
    scale: float = 0.0,
    mask_filter_value: float = _FILTER,
    do_rotary: int = 0,
    past_present_share_buffer: int = 0,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Attention whose projection is the integer product of the uint8 input and the 8-bit
    weights (each less its zero point; the weights' per tensor or per column), scaled by
    ``input_scale * weight_scale`` and biased in float."""
    _refuse("QAttention do_rotary", do_rotary)
    _refuse("QAttention past_present_share_buffer", past_present_share_buffer)
    product = np.matmul(_shifted(x, input_zero_point), _shifted(weight, weight_zero_point))
    factor = input_scale.astype(np.float32).reshape(-1) * weight_scale.astype(np.float32).reshape(
        -1
    )
    qkv = product.astype(np.float32) * factor + bias.astype(np.float32)
    spec = _SelfAttention(num_heads, None, unidirectional, scale, mask_filter_value)
    return spec.run(qkv.astype(bias.dtype), mask_index, past, None)
