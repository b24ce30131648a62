"""ai.onnx.ml support vector machines: SVMClassifier-1, SVMRegressor-1."""

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

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
_MIN_PROB = 1e-7


def _kernel(
    x: np.ndarray, vectors: np.ndarray, kind: str, params: list[float] | None
) -> np.ndarray:
    """Return the [N, M] kernel matrix between the rows of x and the M vectors."""
    if kind not in _KERNELS:
        raise ValueError(f"kernel_type must be one of {_KERNELS}, found {kind!r}")
    gamma, coef0, degree = [*(params or []), 0.0, 0.0, 0.0][:3]
    if kind == "RBF":
        sq = (x * x).sum(1)[:, None] + (vectors * vectors).sum(1)[None, :] - 2.0 * x @ vectors.T
        return np.exp(-gamma * np.maximum(sq, 0.0))
    dot = x @ vectors.T
    if kind == "POLY":
        return (gamma * dot + coef0) ** degree
    if kind == "SIGMOID":
        return np.tanh(gamma * dot + coef0)
    return dot


def _features(x: np.ndarray, flat: list[float] | None, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Return X as float64 [N, F] and the flat attribute as rows of F values."""
    m = as_2d(x).astype(np.float64)
    values = np.asarray(flat or [], np.float64)
    if m.shape[1] == 0 or values.size % m.shape[1]:
        raise ValueError(f"{what} has {values.size} values, not rows of {m.shape[1]} features")
    return m, values.reshape(-1, m.shape[1])


@op("SVMRegressor", 1, domain=ML_DOMAIN)
def svm_regressor(
    x: np.ndarray,
    *,
    coefficients: list[float] | None = None,
    support_vectors: list[float] | None = None,
    n_supports: int = 0,
    rho: list[float] | None = None,
    kernel_type: str = "LINEAR",
    kernel_params: list[float] | None = None,
    one_class: int = 0,
    post_transform: str = "NONE",
) -> np.ndarray:
    """Return sum_i coef_i K(x, sv_i) + rho (or K(x, coefficients) + rho without supports)."""
    transform = check_post_transform(post_transform)
    bias = rho[0] if rho else 0.0
    if n_supports > 0:
        m, vectors = _features(x, support_vectors, "support_vectors")
        coefs = np.asarray(coefficients or [], np.float64)
        if len(vectors) != n_supports or coefs.size != n_supports:
            raise ValueError(
                f"n_supports={n_supports} but {len(vectors)} support vectors and "
                f"{coefs.size} coefficients"
            )
        score = _kernel(m, vectors, kernel_type, kernel_params) @ coefs + bias
    else:
        m, weights = _features(x, coefficients, "coefficients")
        score = _kernel(m, weights, kernel_type, kernel_params)[:, 0] + bias
    if one_class:
        score = np.where(score > 0, 1.0, -1.0)
    return transform_scores(score[:, None], transform).astype(np.float32)


@op("SVMClassifier", 1, domain=ML_DOMAIN)
def svm_classifier(
    x: np.ndarray,
    *,
    classlabels_ints: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
    coefficients: list[float] | None = None,
    support_vectors: list[float] | None = None,
    vectors_per_class: list[int] | None = None,
    rho: list[float] | None = None,
    prob_a: list[float] | None = None,
    prob_b: list[float] | None = None,
    kernel_type: str = "LINEAR",
    kernel_params: list[float] | None = None,
    post_transform: str = "NONE",
) -> tuple[np.ndarray, np.ndarray]:
    """Return (top label, scores): one-vs-one votes over support vectors, or a linear model."""
    transform = check_post_transform(post_transform)
    labels = class_labels(classlabels_ints, classlabels_strings, "SVMClassifier")
    if not vectors_per_class:
        m, weights = _features(x, coefficients, "coefficients")
        scores = _kernel(m, weights, kernel_type, kernel_params) + np.asarray(rho or 0.0)
        if scores.shape[1] == 1 and len(labels) == 2:
            top = labels[(scores[:, 0] > 0).astype(np.intp)]
            return top, binary_scores(scores[:, 0], transform, False).astype(np.float32)
        top = labels[np.argmax(scores, axis=1)]
        return top, transform_scores(scores, transform).astype(np.float32)
    m, vectors = _features(x, support_vectors, "support_vectors")
    decisions = _one_vs_one(
        _kernel(m, vectors, kernel_type, kernel_params), coefficients, vectors_per_class, rho
    )
    n_classes = len(vectors_per_class)
    if len(labels) != n_classes:
        raise ValueError(f"{len(labels)} class labels for {n_classes} vectors_per_class")
    top = labels[np.argmax(_votes(decisions, n_classes), axis=1)]
    if prob_a:
        probs = _pairwise_coupling(decisions, prob_a, prob_b or [0.0] * len(prob_a), n_classes)
        return top, probs.astype(np.float32)
    if n_classes == 2:
        return top, binary_scores(decisions[:, 0], transform, False).astype(np.float32)
    return top, transform_scores(decisions, transform).astype(np.float32)


def _pairs(n_classes: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]


def _one_vs_one(
    kernel: np.ndarray,
    coefficients: list[float] | None,
    vectors_per_class: list[int],
    rho: list[float] | None,
) -> np.ndarray:
    """Return the [N, C(C-1)/2] one-vs-one decision values, pairs (i, j) with i < j in order."""
    n_classes, total = len(vectors_per_class), kernel.shape[1]
    if sum(vectors_per_class) != total:
        raise ValueError(f"vectors_per_class sums to {sum(vectors_per_class)}, not {total}")
    coefs = np.asarray(coefficients or [], np.float64)
    pairs = _pairs(n_classes)
    if coefs.size != (n_classes - 1) * total or len(rho or []) != len(pairs):
        raise ValueError(
            f"expected {(n_classes - 1) * total} coefficients and {len(pairs)} rho, "
            f"found {coefs.size} and {len(rho or [])}"
        )
    coefs = coefs.reshape(n_classes - 1, total)
    starts = np.concatenate([[0], np.cumsum(vectors_per_class)])
    out = np.empty((kernel.shape[0], len(pairs)))
    for k, (i, j) in enumerate(pairs):
        si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
        out[:, k] = kernel[:, si] @ coefs[j - 1, si] + kernel[:, sj] @ coefs[i, sj] + rho[k]
    return out


def _votes(decisions: np.ndarray, n_classes: int) -> np.ndarray:
    votes = np.zeros((decisions.shape[0], n_classes), np.int64)
    rows = np.arange(decisions.shape[0])
    for k, (i, j) in enumerate(_pairs(n_classes)):
        np.add.at(votes, (rows, np.where(decisions[:, k] > 0, i, j)), 1)
    return votes


def _pairwise_coupling(
    decisions: np.ndarray, prob_a: list[float], prob_b: list[float], n_classes: int
) -> np.ndarray:
    """Return class probabilities from pairwise sigmoid probabilities (Wu, Lin and Weng)."""
    a, b = np.asarray(prob_a), np.asarray(prob_b)
    pair_p = 1.0 / (1.0 + np.exp(np.clip(decisions * a + b, -700, 700)))
    pair_p = np.clip(pair_p, _MIN_PROB, 1.0 - _MIN_PROB)
    n = decisions.shape[0]
    r = np.zeros((n, n_classes, n_classes))
    for k, (i, j) in enumerate(_pairs(n_classes)):
        r[:, i, j], r[:, j, i] = pair_p[:, k], 1.0 - pair_p[:, k]
    q = -r.transpose(0, 2, 1) * r
    diag = (r * r).sum(axis=1)
    q[:, np.arange(n_classes), np.arange(n_classes)] = diag
    p = np.full((n, n_classes), 1.0 / n_classes)
    for _ in range(max(100, n_classes)):
        qp = np.einsum("nij,nj->ni", q, p)
        pqp = (p * qp).sum(axis=1)
        active = np.abs(qp - pqp[:, None]).max(axis=1) >= 0.005 / n_classes
        if not active.any():
            break
        for t in range(n_classes):
            diff = np.where(active, (pqp - qp[:, t]) / diag[:, t], 0.0)
            p[:, t] += diff
            pqp = (pqp + diff * (diff * diag[:, t] + 2.0 * qp[:, t])) / (1.0 + diff) ** 2
            qp = (qp + diff[:, None] * q[:, t, :]) / (1.0 + diff[:, None])
            p /= (1.0 + diff)[:, None]
    return p
