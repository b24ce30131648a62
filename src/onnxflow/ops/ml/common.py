"""Helpers shared by the ai.onnx.ml kernels: score post-transforms and class labels.

No operator is registered here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ML_DOMAIN = "ai.onnx.ml"

#: TreeEnsemble-5 spells post_transform as an int; the older ops as a string.
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def as_2d(x: np.ndarray) -> np.ndarray:
    """Return ``x`` as an [N, F] matrix: a vector is one row, more dims are flattened per row."""
    if x.ndim == 2:
        return x
    if x.ndim == 0:
        return x.reshape(1, 1)
    if x.ndim == 1:
        return x.reshape(1, -1)
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))  # not -1: an empty batch has N = 0


def check_post_transform(name: str) -> str:
    """Return a valid post_transform name or raise a clear error."""
    if name not in POST_TRANSFORMS:
        raise ValueError(f"post_transform must be one of {POST_TRANSFORMS}, found {name!r}")
    return name


def logistic(x: np.ndarray) -> np.ndarray:
    """Return 1 / (1 + exp(-x)) without overflow warnings."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    """Return the softmax of each row."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """Return the softmax of each row over its non-zero entries; zero entries stay zero."""
    nonzero = x != 0
    e = np.where(nonzero, np.exp(x - x.max(axis=-1, keepdims=True)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def erfinv(y: np.ndarray) -> np.ndarray:
    """Return the inverse error function of ``y`` (|y| <= 1), to about float32 precision."""
    y = np.asarray(y, dtype=np.float64)
    w = -np.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    p_small = np.polyval(
        [
            2.81022636e-08,
            3.43273939e-07,
            -3.5233877e-06,
            -4.39150654e-06,
            0.00021858087,
            -0.00125372503,
            -0.00417768164,
            0.246640727,
            1.50140941,
        ],
        ws,
    )
    wl = np.sqrt(np.maximum(w, 5.0)) - 3.0
    p_large = np.polyval(
        [
            -0.000200214257,
            0.000100950558,
            0.00134934322,
            -0.00367342844,
            0.00573950773,
            -0.0076224613,
            0.00943887047,
            1.00167406,
            2.83297682,
        ],
        wl,
    )
    return np.where(np.abs(y) == 1.0, y * np.inf, np.where(small, p_small, p_large) * y)


def probit(p: np.ndarray) -> np.ndarray:
    """Return the quantile function of the standard normal distribution at ``p``."""
    return np.sqrt(2.0) * erfinv(2.0 * p - 1.0)


def transform_scores(scores: np.ndarray, name: str) -> np.ndarray:
    """Apply a named post_transform to a [N, C] score matrix (float64 in, float64 out)."""
    if name == "SOFTMAX":
        return softmax(scores)
    if name == "LOGISTIC":
        return logistic(scores)
    if name == "SOFTMAX_ZERO":
        return softmax_zero(scores)
    if name == "PROBIT":
        return probit(scores)
    return scores


def class_labels(
    classlabels_ints: Sequence[int] | None, classlabels_strings: Sequence[str] | None, what: str
) -> np.ndarray:
    """Return the class labels as an int64 or object array; exactly one list must be given."""
    if classlabels_strings and classlabels_ints:
        raise ValueError(f"{what}: give either integer or string class labels, not both")
    if classlabels_strings:
        return np.array(list(classlabels_strings), dtype=object)
    return np.array(list(classlabels_ints or []), dtype=np.int64)


def binary_scores(score: np.ndarray, transform: str, probability_like: bool) -> np.ndarray:
    """Expand one score column of a two-class model to two columns [negative, positive].

    Probability-like scores p become [1 - p, p]; margins m become [-m, m], or
    [logistic(-m), logistic(m)] under LOGISTIC; PROBIT keeps the single transformed column
    in the positive slot.
    """
    if transform == "PROBIT":
        return np.stack([np.zeros_like(score), probit(score)], axis=1)
    if probability_like:
        return np.stack([1.0 - score, score], axis=1)
    if transform == "LOGISTIC":
        return np.stack([logistic(-score), logistic(score)], axis=1)
    return np.stack([-score, score], axis=1)
