"""The layer normalizations onnxruntime's transformer optimizer fuses, and the default-domain
LayerNormalization and SimplifiedLayerNormalization its tools emit under opsets 14-16.

================================  ======  ==========  ==============================================
operator                          domain  since       meaning
================================  ======  ==========  ==============================================
SkipLayerNormalization            ms      1           layer norm of input + skip (+ bias) over the
                                                      last axis; mean, inv_std_var, the sum
SkipSimplifiedLayerNormalization  ms      1           the same with RMS norm (its mean output is 0)
EmbedLayerNormalization           ms      1           word + position (+ segment) embeddings, layer
                                                      norm; mask_index = ones per mask row; the sum
QEmbedLayerNormalization          ms      1           the same on (u)int8 tables, gamma and beta
LayerNormalization                ai.onnx 1           onnx LayerNormalization-17's kernel
SimplifiedLayerNormalization      ai.onnx 1           RMS norm over axes [axis, rank); inv_std_var
================================  ======  ==========  ==============================================

(ms: com.microsoft.) Statistics are computed in float32 (float64 for float64 inputs of the
default-domain pair) and the result rounded once to the output type, as onnxruntime's CPU
kernels do; mean and inverse standard deviation outputs are float32, the type onnxruntime's CPU
provider registers for them.
The default-domain pair has no onnx schema below opset 17 (SimplifiedLayerNormalization none at
all): the registry serves them from their since-1 registrations, and the ONNX checker's "No Op
registered" complaint about them is one the validator already treats as benign.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import accumulation_dtype, float_compute_dtype
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.normalization import (
    LAYER_NORM_COMPILED,
    _standardize,
    layer_normalization,
)
from onnxflow.ops.reduction import normalize_axes
from onnxflow.ops.registry import op
from onnxflow.traits import Native, Traits, native_form

Kernel = Callable[..., tuple[np.ndarray, ...]]

#: The compiled row loops (float32 statistics in double, rounded once): ``_math``, or None.
_MATH = compiled.module("_math")


def _registered(
    op_type: str, domain: str = MS_DOMAIN, native: Native | None = None
) -> Callable[[Kernel], Kernel]:
    """Register a kernel returning every output of ``op_type`` (since 1), with its compiled
    form ``native``."""
    traits = Traits(static_shape=True, several=True, native=native)
    return op(op_type, 1, domain=domain, traits=traits)


def _compiled(form: Kernel) -> Native | None:
    """``form`` as a compiled form, None when ``_math`` is not built."""
    return native_form(compiled.when(_MATH, form))


#: onnx LayerNormalization-17's semantics are onnxruntime's since-1 registration's (the same
#: attributes, inputs and outputs), so its kernel serves both.
_registered("LayerNormalization", "", LAYER_NORM_COMPILED)(layer_normalization)


def _work(x: np.ndarray) -> np.ndarray:
    """x in the dtype its statistics are computed in (float32 for float16 and bfloat16)."""
    return x.astype(accumulation_dtype(x.dtype), copy=False)


def _root_mean_square(w: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    """1 / sqrt(mean(w * w) + epsilon) over ``axes``, dimensions kept."""
    mean_square = np.mean(w * w, axis=axes, keepdims=True)
    return 1 / np.sqrt(mean_square + w.dtype.type(epsilon))


def _scaled(normalized: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None) -> np.ndarray:
    """normalized * gamma (+ beta) in normalized's dtype, over normalized (a new array)."""
    np.multiply(normalized, _work(gamma), out=normalized)
    if beta is not None:
        np.add(normalized, _work(beta), out=normalized)
    return normalized


def _check_hidden(hidden: int, **params: np.ndarray | None) -> None:
    """Each given parameter is a vector of ``hidden`` values."""
    for name, p in params.items():
        if p is not None and p.shape != (hidden,):
            raise ValueError(f"{name} must have shape ({hidden},), found {p.shape}")


# -- SkipLayerNormalization, SkipSimplifiedLayerNormalization ----------------------------------


def _skip_sum(x: np.ndarray, skip: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """input + skip (+ bias) in the statistics dtype (shapes as :func:`_check_skip`)."""
    _check_skip(x, skip)
    total = _work(x) + _work(skip)
    if bias is not None:
        np.add(total, _work(bias), out=total)
    return total


def _check_skip(x: np.ndarray, skip: np.ndarray) -> None:
    """skip is (B, S, H), (1, S, H) or (S, H) for an input (B, S, H), or (S, H) for an input
    (S, H)."""
    if x.ndim not in (2, 3):
        raise ValueError(f"input must be (batch, sequence, hidden) or 2-D, found shape {x.shape}")
    fits = skip.ndim in (2, 3) and skip.ndim <= x.ndim and skip.shape[-2:] == x.shape[-2:]
    if not fits or (skip.ndim == 3 and skip.shape[0] not in (1, x.shape[0])):
        raise ValueError(
            f"skip must have shape {x.shape}, (1, {x.shape[-2]}, {x.shape[-1]}) or "
            f"{x.shape[-2:]} for an input of shape {x.shape}, found {skip.shape}"
        )


def _skip_compiled(
    x: np.ndarray,
    skip: np.ndarray,
    params: tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None],
    epsilon: float,
    rms: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The four outputs of the skip layer norm (RMS norm if ``rms``) of float32 inputs with
    float32 (H,) ``params`` (gamma, beta, bias) by the compiled loop in one pass over the rows;
    None for other inputs."""
    _check_hidden(x.shape[-1], **dict(zip(("gamma", "beta", "bias"), params, strict=True)))
    _check_skip(x, skip)
    if x.dtype != np.float32 or skip.dtype != np.float32 or x.size == 0:
        return None
    if not all(compiled.row_vector(x, p) for p in params):
        return None
    gamma, beta, bias = (compiled.flat32(p) for p in params)
    y, total = np.empty_like(x), np.empty_like(x)
    mean, inv = (np.zeros((*x.shape[:-1], 1), np.float32) for _ in range(2))
    _MATH.norm_f32(
        compiled.flat32(x), compiled.flat32(skip), bias, gamma, beta, y.reshape(-1),
        mean.reshape(-1), inv.reshape(-1), total.reshape(-1), float(np.float32(epsilon)), rms,
    )  # fmt: skip
    return y, mean, inv, total


def _skip_layer_norm_compiled(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """SkipLayerNormalization's compiled form: float32 in one pass, statistics in double."""
    out = _skip_compiled(x, skip, (gamma, beta, bias), epsilon, False)
    if out is None:
        return skip_layer_normalization(x, skip, gamma, beta, bias, epsilon=epsilon)
    return out


def _skip_simplified_compiled(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """SkipSimplifiedLayerNormalization's compiled form, as :func:`_skip_layer_norm_compiled`."""
    out = _skip_compiled(x, skip, (gamma, None, bias), epsilon, True)
    if out is None:
        return skip_simplified_layer_normalization(x, skip, gamma, bias, epsilon=epsilon)
    return out


@_registered("SkipLayerNormalization", native=_compiled(_skip_layer_norm_compiled))
def skip_layer_normalization(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (layer norm of s = input + skip + bias over the last axis, times gamma plus beta;
    the mean of s; 1 / sqrt(var(s) + epsilon); s), the statistics float32 of shape (..., 1)."""
    _check_hidden(x.shape[-1], gamma=gamma, beta=beta, bias=bias)
    total = _skip_sum(x, skip, bias)
    normalized, mean, inv_std = _standardize(total, (-1,), epsilon)
    y = _scaled(normalized, gamma, beta)
    return y.astype(x.dtype), mean, inv_std, total.astype(x.dtype, copy=False)


@_registered("SkipSimplifiedLayerNormalization", native=_compiled(_skip_simplified_compiled))
def skip_simplified_layer_normalization(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (s / rms(s) * gamma for s = input + skip + bias, over the last axis; zeros in
    place of a mean; 1 / sqrt(mean(s * s) + epsilon); s), the statistics float32 (..., 1)."""
    _check_hidden(x.shape[-1], gamma=gamma, bias=bias)
    total = _skip_sum(x, skip, bias)
    inv_rms = _root_mean_square(total, (-1,), epsilon)
    y = _scaled(total * inv_rms, gamma, None)
    zeros = np.zeros_like(inv_rms)
    return y.astype(x.dtype), zeros, inv_rms, total.astype(x.dtype, copy=False)


# -- SimplifiedLayerNormalization (default domain) ---------------------------------------------


def _simplified_compiled(
    x: np.ndarray,
    scale: np.ndarray,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """SimplifiedLayerNormalization's compiled form: float32 rows in one pass, the checks and
    allocations in C (``_math.norm_rows``)."""
    done = _MATH.norm_rows(x, scale, None, axis, epsilon, True)  # type: ignore[union-attr]
    if done is None:
        return simplified_layer_normalization(
            x, scale, axis=axis, epsilon=epsilon, stash_type=stash_type
        )
    return done[0], done[2]


@_registered("SimplifiedLayerNormalization", "", _compiled(_simplified_compiled))
def simplified_layer_normalization(
    x: np.ndarray,
    scale: np.ndarray,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (x / sqrt(mean(x * x) + epsilon) * scale over axes [axis, rank), in scale's
    type; the float32 inverse root mean square, shaped as x with those axes 1)."""
    first = normalize_axes([axis], x.ndim)[0]
    w = x.astype(float_compute_dtype(x.dtype), copy=False)
    inv_rms = _root_mean_square(w, tuple(range(first, x.ndim)), epsilon)
    y = w * inv_rms
    np.multiply(y, scale.astype(y.dtype, copy=False), out=y)
    return y.astype(scale.dtype, copy=False), inv_rms.astype(np.float32, copy=False)


# -- EmbedLayerNormalization, QEmbedLayerNormalization -----------------------------------------


def _rows(table: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
    """table[ids], every id checked to lie in [0, len(table))."""
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        bad = ids[(ids < 0) | (ids >= table.shape[0])].flat[0]
        raise ValueError(f"{what} {bad} is out of range for a table of {table.shape[0]} rows")
    return table[ids]


def _positions(input_ids: np.ndarray, position_ids: np.ndarray | None) -> np.ndarray:
    """position_ids ((batch, sequence) or (1, sequence)), else 0, 1, ... per sequence."""
    if position_ids is None:
        return np.arange(input_ids.shape[1])
    if position_ids.ndim != 2 or position_ids.shape[1] != input_ids.shape[1]:
        raise ValueError(
            f"position_ids must have shape {input_ids.shape} or (1, {input_ids.shape[1]}), "
            f"found {position_ids.shape}"
        )
    return position_ids


def _check_ids(input_ids: np.ndarray, **same_shape: np.ndarray | None) -> None:
    """input_ids is (batch, sequence) and the other id tensors given have its shape."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be (batch, sequence), found shape {input_ids.shape}")
    for name, ids in same_shape.items():
        if ids is not None and ids.shape != input_ids.shape:
            raise ValueError(
                f"{name} must have input_ids' shape {input_ids.shape}, found {ids.shape}"
            )


def _mask_index(mask: np.ndarray | None, input_ids: np.ndarray) -> np.ndarray:
    """The number of ones in each row of the mask (zeros without a mask), int32."""
    if mask is None:
        return np.zeros(input_ids.shape[0], np.int32)
    return np.count_nonzero(mask == 1, axis=1).astype(np.int32)


def _embed_normalized(
    parts: list[np.ndarray], gamma: np.ndarray, beta: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """(layer norm of the sum of the embedding ``parts`` (new arrays, the first summed over)
    times gamma plus beta, the sum), both in the statistics dtype."""
    total = _work(parts[0])
    for part in parts[1:]:
        np.add(total, part, out=total)
    _check_hidden(total.shape[-1], gamma=gamma, beta=beta)
    normalized = _standardize(total, (-1,), epsilon)[0]
    return _scaled(normalized, gamma, beta), total


@_registered("EmbedLayerNormalization")
def embed_layer_normalization(
    input_ids: np.ndarray,
    segment_ids: np.ndarray | None,
    word_embedding: np.ndarray,
    position_embedding: np.ndarray,
    segment_embedding: np.ndarray | None,
    gamma: np.ndarray,
    beta: np.ndarray,
    mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
    mask_index_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (layer norm of word_embedding[input_ids] + position_embedding[position_ids or
    0, 1, ...] (+ segment_embedding[segment_ids]) times gamma plus beta; the number of ones in
    each mask row (``mask_index_type`` only types it); the embedding sum)."""
    _check_ids(input_ids, segment_ids=segment_ids, mask=mask)
    parts = [
        _rows(word_embedding, input_ids, "input id"),
        _rows(position_embedding, _positions(input_ids, position_ids), "position"),
    ]
    if (segment_ids is None) != (segment_embedding is None):
        raise ValueError("segment_ids and segment_embedding must be given together")
    if segment_ids is not None and segment_embedding is not None:
        parts.append(_rows(segment_embedding, segment_ids, "segment id"))
    y, total = _embed_normalized(parts, gamma, beta, epsilon)
    dtype = word_embedding.dtype
    return y.astype(dtype), _mask_index(mask, input_ids), total.astype(dtype, copy=False)


def _dequantized(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """(q - zero_point) * scale in float32, for a scalar scale and zero point."""
    shifted = q.astype(np.float32) - np.float32(zero_point.reshape(-1)[0])
    return np.multiply(shifted, np.float32(scale.reshape(-1)[0]), out=shifted)


@_registered("QEmbedLayerNormalization")
def q_embed_layer_normalization(
    input_ids: np.ndarray,
    segment_ids: np.ndarray | None,
    word_embedding: np.ndarray,
    position_embedding: np.ndarray,
    segment_embedding: np.ndarray | None,
    gamma: np.ndarray,
    beta: np.ndarray,
    mask: np.ndarray | None,
    *scales_and_zero_points: np.ndarray | None,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray]:
    """EmbedLayerNormalization on (u)int8 tables, gamma and beta, each dequantized with its
    scalar scale (inputs 8-12) and zero point (inputs 13-17): (output, mask_index)."""
    if len(scales_and_zero_points) != 10:
        raise ValueError(f"expected 18 inputs, found {8 + len(scales_and_zero_points)}")
    scales, zero_points = scales_and_zero_points[:5], scales_and_zero_points[5:]
    segment = (segment_ids, segment_embedding, scales[2], zero_points[2])
    if any(v is None for v in segment) and any(v is not None for v in segment):
        raise ValueError(
            "segment_ids, segment_embedding and its scale and zero point must all be given "
            "or all be omitted"
        )
    _check_ids(input_ids, segment_ids=segment_ids, mask=mask)
    lookups = [
        (word_embedding, input_ids, "input id"),
        (position_embedding, _positions(input_ids, None), "position"),
        (segment_embedding, segment_ids, "segment id"),
    ]
    parts = [
        _dequantized(_rows(table, ids, what), scale, zero_point)
        for (table, ids, what), scale, zero_point in zip(lookups, scales[:3], zero_points[:3])
        if table is not None and ids is not None and scale is not None and zero_point is not None
    ]
    gamma_f, beta_f = (
        _dequantized(p, s, z) for p, s, z in zip((gamma, beta), scales[3:], zero_points[3:])
    )
    y = _embed_normalized(parts, gamma_f, beta_f, epsilon)[0]
    return y, _mask_index(mask, input_ids)
