"""What a GroupQueryAttention node computes, decided from its attributes (:class:`GroupQuery`),
and its attention over whole caches; :mod:`~onnxflow.ops.microsoft.attention_window` holds
its attention over sliding-window caches."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from onnxflow.ops._common import accumulation_dtype
from onnxflow.ops.attention import heads_first, rotary_embedding
from onnxflow.ops.microsoft.kv_cache import CacheCodec, CacheSteps
from onnxflow.ops.microsoft.scaled_dot_product import add_biases, attend


@dataclass(frozen=True)
class GroupQuery:
    """The attributes of a GroupQueryAttention node that change what it computes."""

    num_heads: int
    kv_num_heads: int
    scale: float
    softcap: float
    local_window_size: int
    causal: int
    rotary_interleaved: int
    smooth_softmax: int
    qk_output: int

    def split(
        self, query: np.ndarray, key: np.ndarray | None, value: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Q (B, N, S, H) and the new K, V (B, Nk, S, H), from separate or packed inputs."""
        if key is None or value is None:
            head = query.shape[2] // (self.num_heads + 2 * self.kv_num_heads)
            q_width, kv_width = self.num_heads * head, self.kv_num_heads * head
            query, key, value = np.split(query, [q_width, q_width + kv_width], axis=2)
        return (
            heads_first(query, self.num_heads, "query"),
            heads_first(key, self.kv_num_heads, "key"),
            heads_first(value, self.kv_num_heads, "value"),
        )

    def allowed(self, steps: CacheSteps) -> np.ndarray:
        """The (B, 1, S, T) keys each query sees: in the cache, not in its future when
        causal, within ``local_window_size`` behind it."""
        pos = steps.positions(None)[:, np.newaxis, :, np.newaxis]
        key = np.arange(steps.longest)
        allowed = key < steps.total.reshape(-1, 1, 1, 1)
        if self.causal:
            allowed = allowed & (key <= pos)
        if self.local_window_size >= 0:
            allowed = allowed & (key > pos - self.local_window_size)
        return allowed

    def rotate(
        self, q4: np.ndarray, k4: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Q and the new K rotated at positions ``pos`` (B, S)."""
        rotate = functools.partial(
            rotary_embedding, cos_cache=cos, sin_cache=sin, position_ids=pos,
            interleaved=self.rotary_interleaved, rotary_embedding_dim=2 * cos.shape[-1],
        )  # fmt: skip
        return rotate(q4), rotate(k4)

    def attend(
        self,
        q4: np.ndarray,
        presents: tuple[np.ndarray, np.ndarray],
        steps: CacheSteps,
        attention_bias: np.ndarray | None,
        head_sink: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The (B, N, S, H) attention of the queries over the first T cached keys, and the
        (B, N, S, T) scores ``qk_output`` asks for (zeros if none): before the softmax (1) or
        after (2), zero at the keys excluded."""
        work = accumulation_dtype(q4.dtype)
        keys, values = (x[:, :, : steps.longest] for x in presents)
        allowed = self.allowed(steps)
        bias = np.where(allowed, work.type(0), work.type(-np.inf))
        y, scores, probs = attend(
            q4, keys, values, add_biases(bias, attention_bias), self.scale, self.softcap,
            self.sink(head_sink, work),
        )  # fmt: skip
        qk = {1: scores, 2: probs}.get(self.qk_output, np.zeros_like(scores))
        return y, np.where(allowed, qk, work.type(0))

    def sink(self, head_sink: np.ndarray | None, work: np.dtype) -> np.ndarray | None:
        """The extra softmax logit of each head: ``head_sink``, or 0 with smooth_softmax."""
        if head_sink is not None:
            return head_sink.astype(work).reshape(1, -1, 1, 1)
        return np.zeros((1, 1, 1, 1), work) if self.smooth_softmax == 1 else None


def whole_cache_attention(
    spec: GroupQuery,
    q4: np.ndarray,
    caches: tuple[tuple[np.ndarray | None, np.ndarray], ...],
    steps: CacheSteps,
    codecs: tuple[CacheCodec, CacheCodec],
    biases: tuple[np.ndarray | None, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Attention over whole caches (``caches``: the past and new keys, then values); return
    the (B, N, S, H) attention, the present caches and the scores qk_output asks for."""
    (present_key, keys), (present_value, values) = (
        codec.store(steps, past, new) for codec, (past, new) in zip(codecs, caches, strict=True)
    )
    y, qk = spec.attend(q4, (keys, values), steps, *biases)
    return y, present_key, present_value, qk.astype(q4.dtype)
