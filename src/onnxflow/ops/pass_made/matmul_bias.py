"""Kernels of the nodes the compile passes make: MatMul and the Add of its constant bias, as one
node
(:mod:`onnxflow.compile.passes.fuse_matmul_bias`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops.linalg import LINALG, matmul
from onnxflow.ops.memo import Memo
from onnxflow.ops.pass_made import (
    FUSED_DOMAIN,
    MATMUL_BIAS,
)
from onnxflow.ops.registry import op
from onnxflow.traits import WIDEN_LIMIT, Built, Traits, native_form

_F32 = np.dtype(np.float32)


# -- MatMul and its bias -----------------------------------------------------------------------
def _compiled(node: Any) -> Callable[..., np.ndarray]:
    """The compiled form: the product and the float32 bias added into it in C
    (:class:`onnxflow.native._linalg.MatMulBias`), other inputs to :func:`matmul_bias`."""
    return LINALG.MatMulBias(matmul_bias)  # type: ignore[union-attr]


def _adds_in_place(y: np.ndarray, bias: np.ndarray) -> bool:
    """Whether float32 ``bias`` (at most one dim) adds into float32 product ``y`` without
    widening it."""
    return (
        y.dtype == _F32
        and bias.dtype == _F32
        and y.ndim >= 1
        and bias.ndim <= 1
        and bias.size in (1, y.shape[-1])
        and y.flags.writeable
    )


def matmul_bias(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The bias added into the product's own fresh array when :func:`_adds_in_place` (the same
    values: ``np.add`` with ``out`` computes what it does without); else the two kernels as
    written."""
    y = matmul(a, b)
    if not _adds_in_place(y, bias):
        return np.asarray(np.add(y, bias))
    np.add(y, bias, out=y)
    return y


@op(
    MATMUL_BIAS,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(
        fresh=True, static_shape=True, native=native_form(compiled.when(LINALG, _compiled))
    ),
)
def build_matmul_bias(node: Any) -> Built:
    """``Add(MatMul(a, b), bias)`` (see :mod:`~onnxflow.compile.passes.fuse_matmul_bias`):
    :func:`matmul_bias`; the stateful form each generated function makes keeps a small bias
    widened to the product's shape, as the Add it replaces does (:func:`_widened_bias`)."""
    return Built(matmul_bias, node.traits.replace(stateful=_widened_bias))


def _widened_bias() -> Callable[..., np.ndarray]:
    """:func:`matmul_bias` keeping the bias it saw last broadcast to the product's shape while
    that holds at most WIDEN_LIMIT elements: NumPy adds equal shapes faster than it broadcasts
    (the bias is a constant: the same object holds the same values)."""
    memo: Memo[tuple[np.ndarray, tuple[int, ...], np.ndarray]] = Memo()

    def run(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
        y = matmul(a, b)
        kept = memo.kept
        if kept is not None and kept[0] is bias and kept[1] == y.shape and y.dtype is _F32:
            np.add(y, kept[2], out=y)  # the checks below held when kept (fresh, writeable y)
            return y
        if not _adds_in_place(y, bias):
            return np.asarray(np.add(y, bias))
        if kept is None or kept[0] is not bias or kept[1] != y.shape:
            if y.size > WIDEN_LIMIT:
                np.add(y, bias, out=y)
                return y
            kept = memo.kept = (bias, y.shape, np.ascontiguousarray(np.broadcast_to(bias, y.shape)))
        np.add(y, kept[2], out=y)
        return y

    return run
