"""ai.onnx.ml linear models: LinearClassifier-1, LinearRegressor-1."""

from __future__ import annotations

import numpy as np

from onnxflow.ops.ml.common import (
    ML_DOMAIN,
    as_2d,
    binary_scores,
    check_post_transform,
    class_labels,
    transform_scores,
)
from onnxflow.ops.registry import op


def _linear_scores(
    x: np.ndarray, coefficients: list[float], intercepts: list[float] | None
) -> np.ndarray:
    """Return X @ W.T + b as float64 [N, T], W holding T contiguous rows of F coefficients."""
    m = as_2d(x).astype(np.float64)
    n_features = m.shape[1]
    if n_features == 0 or len(coefficients) % n_features:
        raise ValueError(
            f"{len(coefficients)} coefficients are not a whole number of rows of "
            f"{n_features} features"
        )
    w = np.asarray(coefficients, np.float64).reshape(-1, n_features)
    scores = m @ w.T
    if intercepts:
        if len(intercepts) != w.shape[0]:
            raise ValueError(f"{len(intercepts)} intercepts for {w.shape[0]} targets")
        scores += np.asarray(intercepts, np.float64)
    return scores


@op("LinearClassifier", 1, domain=ML_DOMAIN)
def linear_classifier(
    x: np.ndarray,
    *,
    coefficients: list[float],
    intercepts: list[float] | None = None,
    classlabels_ints: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
    multi_class: int = 0,
    post_transform: str = "NONE",
) -> tuple[np.ndarray, np.ndarray]:
    """Return (top label, scores) of a linear model; one score column means two classes."""
    transform = check_post_transform(post_transform)
    labels = class_labels(classlabels_ints, classlabels_strings, "LinearClassifier")
    scores = _linear_scores(x, coefficients, intercepts)
    if scores.shape[1] == 1:
        score = scores[:, 0]
        positive = score > 0
        if len(labels) == 2:
            top = labels[positive.astype(np.intp)]
            z = binary_scores(score, transform, probability_like=False)
        else:
            top = positive.astype(np.int64)
            z = transform_scores(scores, transform)
    else:
        if len(labels) != scores.shape[1]:
            raise ValueError(f"{len(labels)} class labels for {scores.shape[1]} score columns")
        top = labels[np.argmax(scores, axis=1)]
        z = transform_scores(scores, transform)
    return top.astype(labels.dtype, copy=False), z.astype(np.float32)


@op("LinearRegressor", 1, domain=ML_DOMAIN)
def linear_regressor(
    x: np.ndarray,
    *,
    coefficients: list[float] | None = None,
    intercepts: list[float] | None = None,
    targets: int = 1,
    post_transform: str = "NONE",
) -> np.ndarray:
    """Return X @ W.T + intercepts for ``targets`` outputs, post-transformed, as float32."""
    transform = check_post_transform(post_transform)
    scores = _linear_scores(x, coefficients or [], intercepts)
    if scores.shape[1] != targets:
        raise ValueError(f"coefficients give {scores.shape[1]} targets, attribute says {targets}")
    return transform_scores(scores, transform).astype(np.float32)
