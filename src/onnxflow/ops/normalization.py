"""Normalization and dropout.

- BatchNormalization 1, 6 (``is_test``, ``spatial``, ``consumed_inputs``), 7 (``spatial``), 9,
  14, 15 (``training_mode`` with running statistics)
- InstanceNormalization 1, 6, 22; LayerNormalization 17; GroupNormalization 18 (scale and bias
  per group), 21 (per channel, ``stash_type``); RMSNormalization 23
- LRN 1, 13; LpNormalization 1, 22; MeanVarianceNormalization 9, 13
- Dropout 1, 6, 7, 10 (inference: identity), 12, 13, 22 (``training_mode`` input, ``seed``)

Statistics of float16 and bfloat16 inputs are computed in float32; outputs keep their spec dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops._common import accumulation_dtype, factor_and_shift
from onnxflow.ops.reduction import normalize_axes
from onnxflow.ops.registry import op
from onnxflow.traits import NONE, RANDOM, Built, NumpyCall, Traits, native_form
from onnxflow.values import np_dtype


def _stat_dtype(x: np.ndarray) -> np.dtype:
    """Return the dtype statistics of x are computed in (float32 for small floats)."""
    return accumulation_dtype(x.dtype)


def _work(x: np.ndarray) -> np.ndarray:
    """Return x in its statistics dtype."""
    return x.astype(_stat_dtype(x), copy=False)


def _mean(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``np.mean(x, axes, keepdims=True)`` without its Python layer: the same sum, divided
    by the same count (x is float32 or float64)."""
    total = np.add.reduce(x, axis=axes, keepdims=True)
    count = math.prod(x.shape[a] for a in axes)
    return np.true_divide(total, count, out=total) if count else total / count


def _centered_moments(
    x: np.ndarray, axes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``x - mean`` (a new array), the mean and the population variance of x over
    ``axes``, dimensions kept."""
    mean = _mean(x, axes)
    centered = x - mean
    return centered, mean, _mean(centered * centered, axes)


def _moments(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Return the mean and population variance of x over ``axes``, dimensions kept."""
    _, mean, var = _centered_moments(x, axes)
    return mean, var


def _standardize(
    x: np.ndarray, axes: tuple[int, ...], epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (normalized x, a new array; mean; 1 / sqrt(var + epsilon)) with statistics over
    ``axes``."""
    centered, mean, var = _centered_moments(x, axes)
    inv_std = 1 / np.sqrt(var + x.dtype.type(epsilon))
    return np.multiply(centered, inv_std, out=centered), mean, inv_std


def _per_channel(p: np.ndarray, rank: int) -> np.ndarray:
    """Shape a (C,) parameter to broadcast over (N, C, D1, ...); others are taken as given."""
    return p.reshape(p.shape + (1,) * (rank - 2)) if p.ndim == 1 and rank > 2 else p


# -- BatchNormalization ------------------------------------------------------------------------


def _batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float,
    momentum: float,
    training: bool,
    spatial: int = 1,
    in_place: bool = False,
) -> tuple[np.ndarray, ...]:
    """Return (Y,) in inference, else (Y, running mean, running var, batch mean, batch var).

    ``in_place``: Y may be written over X (inference only, when X is in its statistics dtype).
    """
    w = _work(x)
    rank = x.ndim
    s, b = (_per_channel(_work(p), rank) for p in (scale, bias))
    if not training:
        m, v = (_per_channel(_work(p), rank) for p in (mean, var))
        # per channel, y = x * a + c: two passes over x instead of four
        a, c = factor_and_shift(s, b, m, v, w.dtype.type(epsilon))
        y = np.multiply(w, a, out=w if in_place and w is x else None)
        np.add(y, c, out=y)
        return (y.astype(x.dtype, copy=False),)
    axes = (0, *range(2, rank)) if spatial else (0,)
    cur_mean, cur_var = _moments(w, axes)
    y = (w - cur_mean) / np.sqrt(cur_var + w.dtype.type(epsilon)) * s + b
    y = y.astype(x.dtype, copy=False)
    cur_mean, cur_var = cur_mean.reshape(mean.shape), cur_var.reshape(var.shape)
    run_mean = _work(mean) * momentum + cur_mean * (1 - momentum)
    run_var = _work(var) * momentum + cur_var * (1 - momentum)
    stats = (run_mean, run_var, cur_mean, cur_var)
    return (y, *(a.astype(mean.dtype, copy=False) for a in stats))


def _batch_norm_kernel(
    node: NodeContext, epsilon: float, momentum: float, training: bool, spatial: int
) -> Built:
    """The kernel of every BatchNormalization version. In inference mode its one output is a
    new array, which it may compute over X's when X dies there (``fresh``, ``in_place``); with
    constant parameters, their per-channel factor and shift are made once (:func:`_affine`)."""

    def run(*args: np.ndarray) -> tuple[np.ndarray, ...]:
        return _batch_norm(*args, epsilon, momentum, training, spatial)

    def over_x(*args: np.ndarray) -> np.ndarray:
        return _batch_norm(*args, epsilon, momentum, training, spatial, in_place=True)[0]

    if training:
        return Built(run, NONE)
    params = [node.constant(i) for i in range(1, 5)]
    if node.n_inputs != 5 or any(p is None for p in params):
        return Built(run, Traits(fresh=True, in_place=over_x))
    return _affine(params, epsilon, run, over_x)


def _affine(
    params: list[np.ndarray],
    epsilon: float,
    run: Callable[..., tuple[np.ndarray, ...]],
    over_x: Callable[..., np.ndarray],
) -> Built:
    """Inference BatchNormalization of float32 X with constant scale, bias, mean and var: the
    per-channel factor and shift (:func:`factor_and_shift`) made once, here, where
    :func:`_batch_norm` makes them on every call (the same float32 operations, so the same
    bits), then ``X * a + shift`` in two passes; other X as ``run`` and ``over_x``."""
    scale, bias, mean, var = params
    if not all(p.dtype == np.float32 and p.ndim == 1 for p in params):
        return Built(run, Traits(fresh=True, in_place=over_x))
    a, shift = factor_and_shift(scale, bias, mean, var, np.float32(epsilon))

    def fixed(x: np.ndarray, *_: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if x.dtype != np.float32 or x.ndim < 2 or x.shape[1] != a.shape[0]:
            return run(x, *_)[0] if out is None else over_x(x, *_)
        tail = (1,) * (x.ndim - 2)
        y = np.multiply(x, a.reshape(-1, *tail), out=out)
        return np.add(y, shift.reshape(-1, *tail), out=y)

    def fixed_over_x(x: np.ndarray, *params: np.ndarray) -> np.ndarray:
        return fixed(x, *params, out=x if x.dtype == np.float32 else None)

    return Built(lambda *args: (fixed(*args),), Traits(fresh=True, in_place=fixed_over_x))


def _batch_norm_numpy(f: NumpyCall) -> str | None:
    """BatchNormalization's NumPy form in inference mode (the node lists one output, and is
    not in training mode nor per activation, ``spatial`` 0), else None."""
    if f.outputs > 1 or f.attrs.get("training_mode", 0) or not f.attrs.get("spatial", 1):
        return None
    return f"onnx_batch_norm({', '.join(f.ins)}, {f.arg('epsilon', 1e-5)})"


_BN = Traits(rounds_once=True, numpy=_batch_norm_numpy)


@op("BatchNormalization", 1, 6, build=True, traits=_BN)
def batch_normalization_1(
    node: NodeContext,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    is_test: int = 0,
    spatial: int = 1,
    consumed_inputs: list[int] | None = None,
) -> Built:
    """Batch statistics when the node lists the training outputs and is_test is 0."""
    return _batch_norm_kernel(node, epsilon, momentum, not is_test and node.n_outputs > 1, spatial)


@op("BatchNormalization", 7, build=True, traits=_BN)
def batch_normalization_7(
    node: NodeContext, *, epsilon: float = 1e-5, momentum: float = 0.9, spatial: int = 1
) -> Built:
    """Batch statistics when the node lists the training outputs."""
    return _batch_norm_kernel(node, epsilon, momentum, node.n_outputs > 1, spatial)


@op("BatchNormalization", 9, build=True, traits=_BN)
def batch_normalization_9(
    node: NodeContext, *, epsilon: float = 1e-5, momentum: float = 0.9
) -> Built:
    """Batch statistics (per channel) when the node lists the training outputs."""
    return _batch_norm_kernel(node, epsilon, momentum, node.n_outputs > 1, 1)


@op("BatchNormalization", 14, 15, build=True, traits=_BN)
def batch_normalization(
    node: NodeContext, *, epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0
) -> Built:
    """Y, plus (running_mean, running_var) in training mode."""
    return _batch_norm_kernel(node, epsilon, momentum, bool(training_mode), 1)


# -- Instance, layer, group and RMS normalization ----------------------------------------------


@op("InstanceNormalization", 1, 6, 22)
def instance_normalization(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    *,
    epsilon: float = 1e-5,
    consumed_inputs: list[int] | None = None,
) -> np.ndarray:
    """Normalize each (instance, channel) over its spatial axes, then scale and shift."""
    normalized = _standardize(_work(x), tuple(range(2, x.ndim)), epsilon)[0]
    s, b = (_per_channel(_work(p), x.ndim) for p in (scale, bias))
    return (normalized * s + b).astype(x.dtype, copy=False)


#: The compiled row loops (float32 statistics in double, rounded once): ``_math``, or None.
_MATH = compiled.module("_math")


def _layer_norm_compiled(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LayerNormalization's compiled form: float32 rows in one pass, statistics in double, the
    checks and allocations in C too (``_math.norm_rows``: float32 x, stash float32, each
    parameter shaped as the axes [axis, rank)); other inputs in NumPy."""
    done = _MATH.norm_rows(x, scale, bias, axis, epsilon, False) if stash_type == 1 else None
    if done is None:
        return layer_normalization(
            x, scale, bias, axis=axis, epsilon=epsilon, stash_type=stash_type
        )
    return done


#: LayerNormalization's compiled form (None when ``_math`` is not built).
LAYER_NORM_COMPILED = native_form(compiled.when(_MATH, _layer_norm_compiled))


def _layer_norm_numpy(f: NumpyCall) -> str | None:
    """LayerNormalization's NumPy form (Y alone), statistics in float32 or float64."""
    stash = f.attrs.get("stash_type", 1)
    if stash not in (1, 11) or f.outputs > 1:
        return None
    args = [*f.ins, *(f"{a}={f.src[a]}" for a in ("axis", "epsilon") if a in f.src)]
    return f"onnx_layer_norm({', '.join(args)}{', wide=True' if stash == 11 else ''})"


@op(
    "LayerNormalization",
    17,
    traits=Traits(native=LAYER_NORM_COMPILED, numpy=_layer_norm_numpy),
)
def layer_normalization(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (Y, Mean, InvStdDev), statistics over axes [axis, rank) in ``stash_type``."""
    first = normalize_axes([axis], x.ndim)[0]
    stash = np_dtype(stash_type)
    axes = tuple(range(first, x.ndim))
    normalized, mean, inv_std = _standardize(x.astype(stash, copy=False), axes, epsilon)
    y = normalized.astype(x.dtype, copy=False)  # a new array either way: written over below
    for ufunc, p in ((np.multiply, scale), (np.add, bias)):
        if p is None:
            continue
        if p.dtype == y.dtype and p.shape == y.shape[y.ndim - p.ndim :]:  # fits y: over y
            ufunc(y, p, out=y)
        else:
            y = ufunc(y, p)
    return y.astype(x.dtype, copy=False), mean, inv_std


def _group_norm(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int, epsilon: float, stash: Any
) -> np.ndarray:
    n, c = x.shape[:2]
    if groups <= 0 or c % groups:
        raise ValueError(f"num_groups {groups} does not divide the {c} channels")
    grouped = x.astype(stash).reshape(n, groups, -1)
    normalized = _standardize(grouped, (2,), epsilon)[0].reshape(x.shape).astype(x.dtype)
    s, b = (_per_channel(p, x.ndim) for p in (scale, bias))
    return (normalized * s + b).astype(x.dtype, copy=False)


@op("GroupNormalization", 18)
def group_normalization_18(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, *, num_groups: int, epsilon: float = 1e-5
) -> np.ndarray:
    """Normalize per (instance, group); ``scale`` and ``bias`` hold one value per group."""
    per_channel = x.shape[1] // num_groups if num_groups > 0 else 0
    scale, bias = (np.repeat(p, per_channel) for p in (scale, bias))
    return _group_norm(x, scale, bias, num_groups, epsilon, _stat_dtype(x))


@op("GroupNormalization", 21)
def group_normalization(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    *,
    num_groups: int,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> np.ndarray:
    """Normalize per (instance, group) in ``stash_type``; ``scale``, ``bias`` per channel."""
    return _group_norm(x, scale, bias, num_groups, epsilon, np_dtype(stash_type))


def _rms_norm_compiled(
    x: np.ndarray, scale: np.ndarray, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> np.ndarray:
    """RMSNormalization's compiled form: float32 rows in one pass, rounded once (the checks
    and allocations in C, ``_math.norm_rows``)."""
    done = _MATH.norm_rows(x, scale, None, axis, epsilon, True) if stash_type == 1 else None
    if done is None:
        return rms_normalization(x, scale, axis=axis, epsilon=epsilon, stash_type=stash_type)
    return done[0]


@op(
    "RMSNormalization",
    23,
    traits=Traits(native=native_form(compiled.when(_MATH, _rms_norm_compiled))),
)
def rms_normalization(
    x: np.ndarray, scale: np.ndarray, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> np.ndarray:
    """Return x / sqrt(mean(x^2) + epsilon) * scale over axes [axis, rank), in scale's dtype."""
    first = normalize_axes([axis], x.ndim)[0]
    w = x.astype(np_dtype(stash_type))
    mean_square = np.mean(w * w, axis=tuple(range(first, x.ndim)), keepdims=True)
    normalized = (w / np.sqrt(mean_square + w.dtype.type(epsilon))).astype(x.dtype)
    return (normalized * scale).astype(scale.dtype, copy=False)


# -- LRN, Lp and mean-variance normalization ---------------------------------------------------


@op("LRN", 1, 13)
def lrn(
    x: np.ndarray, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0
) -> np.ndarray:
    """Divide each element by (bias + alpha / size * sum of squares of nearby channels)^beta."""
    w = _work(x)
    before, after = (size - 1) // 2, size // 2
    pad = [(0, 0)] * x.ndim
    pad[1] = (before + 1, after)
    cumulative = np.cumsum(np.pad(w * w, pad), axis=1)
    channels = x.shape[1]
    square_sum = cumulative[:, size : size + channels] - cumulative[:, :channels]
    y = w / (w.dtype.type(bias) + w.dtype.type(alpha / size) * square_sum) ** w.dtype.type(beta)
    return y.astype(x.dtype, copy=False)


@op("LpNormalization", 1, 22)
def lp_normalization(x: np.ndarray, *, axis: int = -1, p: int = 2) -> np.ndarray:
    """Divide x by its L1 or L2 norm along ``axis``; a zero norm gives zeros."""
    w = _work(x)
    if p == 1:
        norm = np.sum(np.abs(w), axis=axis, keepdims=True)
    elif p == 2:
        norm = np.sqrt(np.sum(w * w, axis=axis, keepdims=True))
    else:
        raise ValueError(f"LpNormalization supports p = 1 or 2, found p = {p}")
    y = np.divide(w, norm, out=np.zeros_like(w), where=norm != 0)
    return y.astype(x.dtype, copy=False)


@op("MeanVarianceNormalization", 9, 13)
def mean_variance_normalization(x: np.ndarray, *, axes: list[int] | None = None) -> np.ndarray:
    """Return (x - mean) / (std + 1e-9) with statistics over ``axes`` (default [0, 2, 3])."""
    w = _work(x)
    picked = normalize_axes([0, 2, 3] if axes is None else axes, x.ndim)
    mean = np.mean(w, axis=picked, keepdims=True)
    var = np.mean(w * w, axis=picked, keepdims=True) - mean * mean
    y = (w - mean) / (np.sqrt(var) + w.dtype.type(1e-9))
    return y.astype(x.dtype, copy=False)


# -- Dropout -----------------------------------------------------------------------------------


def _identity_dropout(n_outputs: int, bool_mask: bool) -> Callable[..., Any]:
    if n_outputs < 2:
        return lambda data, *_: data
    if bool_mask:
        return lambda data, *_: (data, np.ones(data.shape, np.bool_))
    return lambda data, *_: (data, np.ones(data.shape, data.dtype))


@op("Dropout", 1, 6, build=True, traits=RANDOM)
def dropout_1(
    node: NodeContext,
    *,
    ratio: float = 0.5,
    is_test: int = 0,
    consumed_inputs: list[int] | None = None,
) -> Callable[..., Any]:
    """Inference: output = data, mask (of data's type) all ones."""
    return _identity_dropout(node.n_outputs, False)


@op("Dropout", 7, build=True, traits=RANDOM)
def dropout_7(node: NodeContext, *, ratio: float = 0.5) -> Callable[..., Any]:
    """Inference: output = data, mask (of data's type) all ones."""
    return _identity_dropout(node.n_outputs, False)


@op("Dropout", 10, build=True, traits=RANDOM)
def dropout_10(node: NodeContext, *, ratio: float = 0.5) -> Callable[..., Any]:
    """Inference: output = data, boolean mask all true."""
    return _identity_dropout(node.n_outputs, True)


@op("Dropout", 12, 13, 22, build=True, traits=RANDOM)
def dropout(node: NodeContext, *, seed: int | None = None) -> Callable[..., Any]:
    """Identity unless ``training_mode`` is true; then zero a ``ratio`` of the elements and scale
    the rest by 1 / (1 - ratio). With ``seed`` the mask is that of NumPy's legacy generator
    seeded with it (``RandomState(seed).uniform(size=shape) >= ratio``)."""
    want_mask = node.n_outputs > 1

    def run(
        data: np.ndarray, ratio: np.ndarray | None = None, training_mode: np.ndarray | None = None
    ) -> Any:
        rate = 0.5 if ratio is None else float(ratio)
        if training_mode is None or not bool(training_mode) or rate == 0:
            return (data, np.ones(data.shape, np.bool_)) if want_mask else data
        if not 0 <= rate <= 1:
            raise ValueError(f"Dropout ratio must be in [0, 1], found {rate}")
        rng = np.random.RandomState(seed) if seed is not None else np.random.RandomState()
        mask = rng.uniform(0.0, 1.0, data.shape) >= rate
        scale = 0.0 if rate == 1 else 1.0 / (1.0 - rate)
        out = np.where(mask, data.astype(np.float64) * scale, 0).astype(data.dtype)
        return (out, mask) if want_mask else out

    return run
