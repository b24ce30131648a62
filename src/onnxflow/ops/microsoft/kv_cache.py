"""The key/value caches of the com.microsoft attention operators: MultiHeadAttention's past
(whole, in a shared buffer, or read through a beam indirection), and GroupQueryAttention's
per-batch cache positions (:class:`CacheSteps`) and the codec of a quantized cache
(:class:`CacheCodec`: int8, or int4 pairs packed into uint8)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxflow.ops._common import accumulation_dtype


@dataclass(frozen=True)
class MhaCache:
    """MultiHeadAttention's past keys and values: the whole past, or with
    ``past_sequence_length`` the first rows of a shared buffer the new rows are written into;
    with ``cache_indirection`` (B, beams, max) each beam reads each cached position from the
    beam of its batch that the indirection names."""

    past_key: np.ndarray
    past_value: np.ndarray
    shared: np.ndarray | None
    indirection: np.ndarray | None

    @property
    def length(self) -> int:
        """The number of cached positions."""
        if self.shared is None:
            return self.past_key.shape[2]
        return int(np.asarray(self.shared).reshape(-1)[0])

    def keys(self, new: np.ndarray, value: bool = False) -> np.ndarray:
        """The past keys (values) the queries read, then the ``new`` ones."""
        past = (self.past_value if value else self.past_key)[:, :, : self.length]
        if self.indirection is not None:
            beams = self.indirection.shape[1]
            batch = np.arange(self.indirection.shape[0])[:, np.newaxis, np.newaxis] * beams
            source = (batch + self.indirection[:, :, : self.length]).reshape(-1, self.length)
            rows = past.transpose(0, 2, 1, 3)[source, np.arange(self.length)]
            past = rows.transpose(0, 2, 1, 3)
        return np.concatenate([past, new.astype(past.dtype)], axis=2)

    def present(self, new: np.ndarray, value: bool = False) -> np.ndarray:
        """The present keys (values): past and new, or the shared buffer written into."""
        past = self.past_value if value else self.past_key
        if self.shared is None:
            return np.concatenate([past, new.astype(past.dtype)], axis=2)
        present = past.copy()
        present[:, :, self.length : self.length + new.shape[2]] = new
        return present


@dataclass(frozen=True)
class CacheSteps:
    """Where one GroupQueryAttention call sits in each batch's sequence."""

    s: int  # new tokens
    past: np.ndarray  # (B) keys cached before them
    total: np.ndarray  # (B) keys after them
    longest: int  # total_sequence_length, T
    length: int  # of the present cache: the past buffer's, or T if longer

    @classmethod
    def of(
        cls,
        s: int,
        past_key: np.ndarray | None,
        seqlens_k: np.ndarray,
        longest: np.ndarray,
        windowed: int = 0,
    ) -> CacheSteps:
        """A first prompt (S = T, into an empty or a shared cache) starts each batch at
        position 0, its keys past ``seqlens_k[b] + 1`` right padding; later calls follow each
        batch's cached keys. A ``windowed`` cache may hold fewer keys than a batch has."""
        total = seqlens_k.astype(np.int64).reshape(-1) + 1
        cache_len = 0 if past_key is None else past_key.shape[2]
        t = int(np.asarray(longest).reshape(-1)[0])
        past = np.zeros_like(total) if s == t else total - s
        if np.any(past < 0) or (not windowed and np.any(total > max(cache_len, t))):
            raise ValueError(
                f"seqlens_k + 1 = {total.tolist()} must lie between the {s} new tokens and the "
                f"cache length {max(cache_len, t)} (total_sequence_length {t}, past {cache_len})"
            )
        return cls(s, past, total, t, max(cache_len, t))

    def positions(self, position_ids: np.ndarray | None) -> np.ndarray:
        """The (B, S) positions of the new tokens: ``position_ids`` or after each past."""
        if position_ids is not None:
            return position_ids
        return self.past[:, np.newaxis] + np.arange(self.s)

    def cached(self, past: np.ndarray | None, new: np.ndarray) -> np.ndarray:
        """The (B, Nk, length, H) present cache: each batch's past up to its past length,
        then its new rows; zeros beyond."""
        b, heads, s, size = new.shape
        present = np.zeros((b, heads, self.length, size), new.dtype if past is None else past.dtype)
        for i, start in enumerate(self.past):
            if past is not None:
                present[i, :, :start] = past[i, :, :start]
            present[i, :, start : start + s] = new[i]
        return present


_QUANT_TYPES = ("NONE", "PER_TENSOR", "PER_CHANNEL")


@dataclass(frozen=True)
class CacheCodec:
    """How a GroupQueryAttention cache holds its values: as they are, or as int8 (8 bits) or
    int4 pairs packed low nibble first into uint8 (4 bits, offset by 8), times a scale per
    tensor or per channel, rounded to nearest even."""

    scale: np.ndarray | None
    bits: int

    @classmethod
    def of(cls, quant_type: str, bits: int | None, scale: np.ndarray | None) -> CacheCodec:
        if quant_type not in _QUANT_TYPES:
            raise ValueError(f"quant type must be one of {_QUANT_TYPES}, found {quant_type!r}")
        if quant_type != "NONE" and scale is None:
            raise ValueError(f"a {quant_type} quantized cache needs its k_scale / v_scale input")
        if (bits or 8) not in (4, 8):
            raise ValueError(f"kv_cache_bit_width must be 4 or 8, found {bits}")
        return cls(None if quant_type == "NONE" else scale.astype(np.float32), bits or 8)

    @classmethod
    def pair(
        cls, types: tuple[str, str], bits: int | None, scales: tuple[np.ndarray | None, ...]
    ) -> tuple[CacheCodec, CacheCodec]:
        """The codecs of the key cache and of the value cache."""
        return cls.of(types[0], bits, scales[0]), cls.of(types[1], bits, scales[1])

    def encode(self, x: np.ndarray) -> np.ndarray:
        """New keys or values as the cache holds them."""
        if self.scale is None:
            return x
        top = (1 << (self.bits - 1)) - 1
        q = np.clip(np.rint(x.astype(np.float32) / self.scale), -top - 1, top)
        if self.bits == 8:
            return q.astype(np.int8)
        nibbles = (q + 8).astype(np.uint8)
        return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)

    def store(
        self, steps: CacheSteps, past: np.ndarray | None, new: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The present cache with the ``new`` (B, Nk, S, H) rows stored, and its values."""
        present = steps.cached(past, self.encode(new))
        return present, self.decode(present, accumulation_dtype(new.dtype))

    def decode(self, cache: np.ndarray, work: np.dtype) -> np.ndarray:
        """The cache's values, in ``work``."""
        if self.scale is None:
            return cache
        if self.bits == 4:
            pairs = np.stack([cache & 0xF, cache >> 4], axis=-1)
            cache = pairs.reshape(*cache.shape[:-1], -1).astype(np.int8) - 8
        return (cache.astype(np.float32) * self.scale).astype(work)
