"""Training-preview optimizers (domain ``ai.onnx.preview.training``): Adagrad, Adam, Momentum.

Each takes the learning rate R and update count T (scalars), then its optimized tensors as groups
of n: X_1..X_n, G_1..G_n, then each state of the optimizer for the n tensors. It returns the
updated X group followed by the updated state groups, each tensor in its input's dtype.
Gradient is not served: it needs automatic differentiation of the graph.
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops.registry import op

TRAINING_DOMAIN = "ai.onnx.preview.training"
_MOMENTUM_MODES = ("standard", "nesterov")


def _scalar(value: np.ndarray, name: str) -> float:
    if np.size(value) != 1:
        raise ValueError(f"{name} must be a scalar, found shape {np.shape(value)}")
    return float(np.asarray(value).reshape(()))


def _groups(tensors: tuple[np.ndarray, ...], k: int, what: str) -> list[tuple[np.ndarray, ...]]:
    """Split the variadic inputs into ``k`` groups of n and zip them per optimized tensor."""
    if not tensors or len(tensors) % k:
        raise ValueError(
            f"{what} expects {k} groups of n tensors after R and T, found {len(tensors)} tensors"
        )
    n = len(tensors) // k
    return list(zip(*(tensors[i * n : (i + 1) * n] for i in range(k))))


def _outputs(
    groups: list[tuple[np.ndarray, ...]], updates: list[tuple[np.ndarray, ...]], slots: list[int]
) -> tuple[np.ndarray, ...]:
    """Return the updates grouped by output kind; ``slots`` names the input each one replaces."""
    return tuple(
        np.asarray(update[j]).astype(group[slot].dtype, copy=False)
        for j, slot in enumerate(slots)
        for group, update in zip(groups, updates, strict=True)
    )


@op("Adagrad", 1, domain=TRAINING_DOMAIN)
def adagrad(
    r: np.ndarray,
    t: np.ndarray,
    *tensors: np.ndarray,
    decay_factor: float = 0.0,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """One ADAGRAD step over (X, G, H) groups; returns the new Xs, then the new Hs."""
    rate = _scalar(r, "R") / (1 + _scalar(t, "T") * decay_factor)
    groups = _groups(tensors, 3, "Adagrad")
    updates = []
    for x, g, h in groups:
        g_reg = norm_coefficient * x + g
        h_new = h + g_reg * g_reg
        updates.append((x - rate * g_reg / (np.sqrt(h_new) + epsilon), h_new))
    return _outputs(groups, updates, [0, 2])


@op("Adam", 1, domain=TRAINING_DOMAIN)
def adam(
    r: np.ndarray,
    t: np.ndarray,
    *tensors: np.ndarray,
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """One Adam step over (X, G, V, H) groups; returns the new Xs, then the new Vs and Hs."""
    rate, step = _scalar(r, "R"), _scalar(t, "T")
    if step > 0:
        rate *= np.sqrt(1 - beta**step) / (1 - alpha**step)
    groups = _groups(tensors, 4, "Adam")
    updates = []
    for x, g, v, h in groups:
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * g_reg * g_reg
        x_new = x - float(rate) * v_new / (np.sqrt(h_new) + epsilon)
        updates.append(((1 - norm_coefficient_post) * x_new, v_new, h_new))
    return _outputs(groups, updates, [0, 2, 3])


@op("Momentum", 1, domain=TRAINING_DOMAIN)
def momentum(
    r: np.ndarray,
    t: np.ndarray,
    *tensors: np.ndarray,
    alpha: float,
    beta: float,
    mode: str,
    norm_coefficient: float,
) -> tuple[np.ndarray, ...]:
    """One SGD-with-momentum step (standard or Nesterov) over (X, G, V) groups.

    Returns the new Xs, then the new Vs. In the first iteration (T == 0) beta counts as 1.
    """
    if mode not in _MOMENTUM_MODES:
        raise ValueError(f"Momentum mode must be one of {list(_MOMENTUM_MODES)}, found {mode!r}")
    rate = _scalar(r, "R")
    beta_adjusted = beta if _scalar(t, "T") > 0 else 1.0
    groups = _groups(tensors, 3, "Momentum")
    updates = []
    for x, g, v in groups:
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + beta_adjusted * g_reg
        direction = g_reg + alpha * v_new if mode == "nesterov" else v_new
        updates.append((x - rate * direction, v_new))
    return _outputs(groups, updates, [0, 2])
