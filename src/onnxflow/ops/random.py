"""Random generators: RandomNormal, RandomNormalLike, RandomUniform, RandomUniformLike, Bernoulli,
Multinomial.

Draws come from NumPy's ``Generator``. A node with a ``seed`` attribute draws from a generator
seeded with it on every run, so it returns the same values each time; without a seed each run
draws from fresh OS entropy. Values are drawn in float64 and cast to the output dtype, so no
implementation can be matched draw for draw (the spec does not ask for it).
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops.registry import op
from onnxflow.traits import RANDOM
from onnxflow.values import np_dtype

_FLOAT_KINDS = ("float16", "bfloat16", "float32", "float64")


def _rng(seed: float | None) -> np.random.Generator:
    """Return a generator seeded from the (float) ``seed`` attribute, or from fresh entropy."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(int(np.float64(seed).view(np.uint64)))


def _float_dtype(elem_type: int | None, like: np.ndarray | None, what: str) -> np.dtype:
    """Return the output dtype: ``elem_type`` if given, else ``like``'s; it must be a float."""
    dtype = np_dtype(elem_type) if elem_type is not None else like.dtype
    if dtype.name not in _FLOAT_KINDS:
        raise TypeError(f"{what} outputs float16, bfloat16, float or double, found dtype {dtype}")
    return dtype


@op("RandomNormal", 1, 22, traits=RANDOM)
def random_normal(
    *,
    shape: list[int],
    dtype: int = 1,
    mean: float = 0.0,
    scale: float = 1.0,
    seed: float | None = None,
) -> np.ndarray:
    """Return normal draws N(mean, scale**2) of the given shape and dtype."""
    out = _float_dtype(dtype, None, "RandomNormal")
    return _rng(seed).normal(mean, scale, size=tuple(shape)).astype(out)


@op("RandomNormalLike", 1, 22, traits=RANDOM)
def random_normal_like(
    x: np.ndarray,
    *,
    dtype: int | None = None,
    mean: float = 0.0,
    scale: float = 1.0,
    seed: float | None = None,
) -> np.ndarray:
    """Return normal draws shaped like ``x``, in ``dtype`` or else ``x``'s dtype."""
    out = _float_dtype(dtype, x, "RandomNormalLike")
    return _rng(seed).normal(mean, scale, size=x.shape).astype(out)


@op("RandomUniform", 1, 22, traits=RANDOM)
def random_uniform(
    *,
    shape: list[int],
    dtype: int = 1,
    high: float = 1.0,
    low: float = 0.0,
    seed: float | None = None,
) -> np.ndarray:
    """Return uniform draws in [low, high) of the given shape and dtype."""
    out = _float_dtype(dtype, None, "RandomUniform")
    return _rng(seed).uniform(low, high, size=tuple(shape)).astype(out)


@op("RandomUniformLike", 1, 22, traits=RANDOM)
def random_uniform_like(
    x: np.ndarray,
    *,
    dtype: int | None = None,
    high: float = 1.0,
    low: float = 0.0,
    seed: float | None = None,
) -> np.ndarray:
    """Return uniform draws in [low, high) shaped like ``x``, in ``dtype`` or else ``x``'s."""
    out = _float_dtype(dtype, x, "RandomUniformLike")
    return _rng(seed).uniform(low, high, size=x.shape).astype(out)


@op("Bernoulli", 15, 22, traits=RANDOM)
def bernoulli(p: np.ndarray, *, dtype: int | None = None, seed: float | None = None) -> np.ndarray:
    """Return 1 with probability ``p`` and 0 otherwise, elementwise, in ``dtype`` or ``p``'s."""
    out = np_dtype(dtype) if dtype is not None else p.dtype
    return (_rng(seed).random(p.shape) < p.astype(np.float64)).astype(out)


@op("Multinomial", 7, 22, traits=RANDOM)
def multinomial(
    logits: np.ndarray, *, dtype: int = 6, sample_size: int = 1, seed: float | None = None
) -> np.ndarray:
    """Draw ``sample_size`` class indices per row of [batch, classes] unnormalized log-probs.

    Uses the Gumbel-max trick: the argmax of logits plus Gumbel noise is a draw from their softmax.
    """
    out = np_dtype(dtype)
    if out not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"Multinomial outputs int32 or int64, found dtype {out}")
    if logits.ndim != 2:
        raise ValueError(
            f"Multinomial expects [batch_size, class_size], found {list(logits.shape)}"
        )
    batch, classes = logits.shape
    noise = _rng(seed).gumbel(size=(batch, sample_size, classes))
    return np.argmax(logits.astype(np.float64)[:, None, :] + noise, axis=-1).astype(out)
