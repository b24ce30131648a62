"""Kernel of the node the row-distance loop-body pass makes
(:mod:`onnxflow.compile.passes.fuse_distances`): ``RowSquaredDistances``. In a module of its
own, so that a model with no such loop does not import the reduction kernels it builds on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxflow.ops.memo import Memo
from onnxflow.ops.pass_made import FUSED_DOMAIN, ROW_SQUARED_DISTANCES
from onnxflow.ops.reduction import reduce_sum_square
from onnxflow.ops.registry import op
from onnxflow.traits import Built, Traits

_FAST = (np.dtype(np.float32), np.dtype(np.float64))


@op(ROW_SQUARED_DISTANCES, 1, domain=FUSED_DOMAIN, build=True, traits=Traits(static_shape=True))
def row_squared_distances(node: Any, *, axis: int = -1, keepdims: int = 1) -> Built:
    """``ReduceSumSquare(A - b, axes=[axis])`` for a matrix A and a vector b, A kept transposed
    while it stays the same object (see :mod:`~onnxflow.compile.passes.fuse_distances`) by the
    stateful form each generated function makes; other inputs, and the plan's stateless form,
    run the two nodes as written."""

    def unfused(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _unfused(a, b, axis, keepdims)

    return Built(unfused, node.traits.replace(stateful=lambda: _transposing(axis, keepdims)))


def _transposing(axis: int, keepdims: int) -> Callable[..., np.ndarray]:
    """The kernel with its memo: A seen last, its transpose once seen twice in a row, and ones,
    in one tuple swapped whole, so concurrent runs each read a consistent one."""
    memo: Memo[tuple[np.ndarray, Any, Any]] = Memo()

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        kept = memo.kept
        fast = (
            a.ndim == 2
            and b.ndim == 1
            and a.dtype in _FAST
            and b.dtype is a.dtype
            and a.shape[1] == b.shape[0]
            and a.size
        )
        if not fast or kept is None or kept[0] is not a:
            memo.kept = (a, None, None) if fast else None
            return _unfused(a, b, axis, keepdims)
        if kept[1] is None:
            kept = memo.kept = (a, np.ascontiguousarray(a.T), np.ones(a.shape[1], a.dtype))
        d = np.subtract(kept[1], b[:, None])
        np.square(d, out=d)
        rows = np.dot(kept[2], d)
        return rows[:, None] if keepdims else rows

    return run


def _unfused(a: np.ndarray, b: np.ndarray, axis: int, keepdims: int) -> np.ndarray:
    """The two nodes as written: Sub, then ReduceSumSquare over ``axis``."""
    return reduce_sum_square(np.subtract(a, b), [axis], keepdims)
