"""Linear algebra: MatMul 1, 9, 13; Gemm 1, 6 (``broadcast``), 7, 9, 11, 13; Einsum 12, 28;
Det 11, 22.

Results keep the inputs' dtype; float16 and bfloat16 accumulate in float32 where NumPy would
otherwise lose precision or refuse the type.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from onnxflow.compile.compiler import NodeContext
from onnxflow.ops._common import accumulation_dtype
from onnxflow.ops.registry import op

#: Dtypes whose products go to BLAS through np.dot.
_BLAS = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


@op("MatMul", 1, 9, 13, build=True)
def build_matmul(node: NodeContext) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """MatMul's kernel, :func:`matmul`; marked for generated code to call np.dot directly (0.2 us
    less a call) when both inputs are matrices, if static types say they will be."""
    shapes = [node.input_shape(i) for i in range(2)]
    if all(s is not None and len(s) == 2 for s in shapes):
        return _matrices
    return matmul


def _matrices(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`matmul`, for inputs that are expected to be matrices."""
    return matmul(a, b)


# Static types are a guess (a hoisted body sees a whole sequence where its type says one
# element): np.dot is MatMul only when B is a matrix and A is not a scalar, so generated code
# tests both ranks and falls back to the kernel.
_matrices.inline_call = np.dot  # type: ignore[attr-defined]
_matrices.inline_guard = "{1}.ndim == 2 == {0}.ndim"  # type: ignore[attr-defined]
_matrices.fresh = True  # type: ignore[attr-defined]  # a new array: see codegen.Emitter._reusable
_matrices.static_shape = True  # type: ignore[attr-defined]  # see codegen.steady_slots


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return np.matmul(a, b) in a's dtype.

    A stack of matrices times one matrix (activations by weights) is one BLAS product over the
    stacked rows: np.matmul would make one small product per matrix, 3.5x slower for the spec
    RNN's (1000, 8, 64) by (64, 128). Two matrices go through np.dot, which costs less per call.
    """
    if b.ndim == 2 and a.ndim >= 2 and a.dtype is b.dtype and a.dtype in _BLAS:
        if a.ndim == 2:
            return np.dot(a, b)
        if a.shape[-1] == b.shape[0]:
            rows = np.dot(a.reshape(math.prod(a.shape[:-1]), a.shape[-1]), b)
            return rows.reshape(*a.shape[:-1], b.shape[1])
    y = np.matmul(a, b)
    if y.ndim == 0 or y.dtype != a.dtype:
        return np.asarray(y, dtype=a.dtype)
    return y


matmul.fresh = True  # type: ignore[attr-defined]
matmul.static_shape = True  # type: ignore[attr-defined]  # see codegen.steady_slots


def _gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None,
    alpha: float,
    beta: float,
    trans_a: int,
    trans_b: int,
) -> np.ndarray:
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"Gemm expects 2-D A and B, found shapes {a.shape} and {b.shape}")
    y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        if np.broadcast_shapes(c.shape, y.shape) != y.shape:
            raise ValueError(f"Gemm: C of shape {c.shape} does not broadcast to {y.shape}")
        y = y + (c if beta == 1.0 else c * beta)
    return np.asarray(y).astype(a.dtype, copy=False)


@op("Gemm", 1, 6)
def gemm_legacy(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    broadcast: int = 0,
) -> np.ndarray:
    """Return alpha * A' @ B' + beta * C; C must be (M, N) unless ``broadcast`` is set."""
    rows = a.shape[1] if transA else a.shape[0]
    cols = b.shape[0] if transB else b.shape[1]
    if not broadcast and c.shape != (rows, cols):
        raise ValueError(
            f"Gemm with broadcast=0 expects C of shape {(rows, cols)}, found {c.shape}"
        )
    return _gemm(a, b, c, alpha, beta, transA, transB)


gemm_legacy.static_shape = True  # type: ignore[attr-defined]  # see codegen.steady_slots


@op("Gemm", 7, 9, 11, 13)
def gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> np.ndarray:
    """Return alpha * A' @ B' + beta * C, with C (optional from 11) broadcast to (M, N)."""
    return _gemm(a, b, c, alpha, beta, transA, transB)


gemm.static_shape = True  # type: ignore[attr-defined]  # see codegen.steady_slots


@op("Einsum", 12, 28)
def einsum(*inputs: np.ndarray, equation: str) -> np.ndarray:
    """Return the Einstein summation ``equation`` of the inputs, in their dtype."""
    dtype = inputs[0].dtype
    work = accumulation_dtype(dtype)
    if work != dtype:
        inputs = tuple(x.astype(work) for x in inputs)
    y = np.einsum(equation.replace(" ", ""), *inputs, optimize=len(inputs) > 2)
    return np.asarray(y).astype(dtype, copy=False)


@op("Det", 11, 22)
def det(x: np.ndarray) -> np.ndarray:
    """Return the determinants of the trailing square matrices of x, shape x.shape[:-2]."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"Det expects [*, M, M], found shape {x.shape}")
    work = x.astype(accumulation_dtype(x.dtype), copy=False)
    return np.asarray(np.linalg.det(work)).astype(x.dtype, copy=False)
