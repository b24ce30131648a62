"""Linear algebra: MatMul 1, 9, 13; Gemm 1, 6 (``broadcast``), 7, 9, 11, 13; Einsum 12, 28;
Det 11, 22; GroupedMatMul 29.

Results keep the inputs' dtype; float16 and bfloat16 accumulate in float32 where NumPy would
otherwise lose precision or refuse the type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops._common import accumulation_dtype
from onnxflow.ops.registry import op
from onnxflow.traits import Built, NumpyCall, Traits, native_form

#: Dtypes whose products go to BLAS through np.dot.
_BLAS = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def _rows(rank: int, others: tuple[int, ...]) -> int | None:
    """MatMul of a stack of rows of rank ``rank`` by a fixed matrix or vector: rows map to rows
    (a matrix keeps the rank, a vector drops the last axis); other weights broadcast."""
    if rank < 1 or others[0] not in (1, 2):
        return None
    return rank if others[0] == 2 else rank - 1


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


#: The compiled glue of MatMul and MatMulBias (:mod:`onnxflow.native._linalg`), or None.
LINALG = compiled.module("_linalg")
_MATMUL_COMPILED = None if LINALG is None else LINALG.MatMul(matmul)


def _build_matmul_compiled(node: NodeContext) -> Built:
    """MatMul's compiled form: :func:`matmul`'s stack-of-rows path tested and reshaped in C
    around the same np.dot (:class:`onnxflow.native._linalg.MatMul`), other inputs to
    :func:`matmul`; two matrices by static types call np.dot directly, as in
    :func:`build_matmul`."""
    return _matmul_built(node, _MATMUL_COMPILED)  # type: ignore[arg-type]


@op(
    "MatMul",
    *(1, 9, 13),
    build=True,
    traits=Traits(
        fresh=True,
        static_shape=True,
        rows=_rows,
        rounds_once=True,
        numpy="onnx_matmul({0}, {1})",
        native=native_form(compiled.when(LINALG, _build_matmul_compiled)),
    ),
)
def build_matmul(node: NodeContext) -> Built:
    """MatMul's kernel, :func:`matmul`; when static types say both inputs are matrices, generated
    code calls np.dot directly (0.2 us less a call) behind a rank test, since static types are a
    guess (a hoisted body sees a whole sequence where its type says one element): np.dot is
    MatMul only when B is a matrix and A is not a scalar."""
    return _matmul_built(node, matmul)


def _matmul_built(node: NodeContext, fn: Callable[..., np.ndarray]) -> Built:
    """``fn`` with the node's traits, refined to call np.dot behind a rank guard when static
    types say both inputs are matrices."""
    shapes = [node.input_shape(i) for i in range(2)]
    if all(s is not None and len(s) == 2 for s in shapes):
        return Built(fn, node.traits.replace(call=np.dot, guard="{1}.ndim == 2 == {0}.ndim"))
    return Built(fn, node.traits)


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
    y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)  # a new array: updated in place
    if alpha != 1.0:
        y = np.multiply(y, alpha, out=y if _same_kind(y, alpha) else None)
    if c is not None and beta != 0.0:
        if c.ndim > 2 or any(n not in (1, m) for n, m in zip(c.shape[::-1], y.shape[::-1])):
            raise ValueError(f"Gemm: C of shape {c.shape} does not broadcast to {y.shape}")
        term = c if beta == 1.0 else c * beta
        y = np.add(y, term, out=y if _same_kind(y, term) else None)
    return np.asarray(y).astype(a.dtype, copy=False)


def _same_kind(y: np.ndarray, operand: Any) -> bool:
    """Whether ``y op operand`` has y's dtype, so it may be written over y."""
    return np.result_type(y, operand) == y.dtype


@op("Gemm", 1, 6, traits=Traits(static_shape=True, rounds_once=True))
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


def _gemm_numpy(f: NumpyCall) -> str:
    c = f.ins[2] if len(f.ins) > 2 else "None"
    scalars = ", ".join(f.arg(a, d) for a, d in (("alpha", 1.0), ("beta", 1.0)))
    return (
        f"onnx_gemm({f.ins[0]}, {f.ins[1]}, {c}, {scalars}, "
        f"{f.arg('transA', 0)}, {f.arg('transB', 0)})"
    )


@op("Gemm", 7, 9, 11, 13, traits=Traits(static_shape=True, rounds_once=True, numpy=_gemm_numpy))
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


@op("GroupedMatMul", 29)
def grouped_matmul(
    x: np.ndarray,
    weights: np.ndarray,
    group_indices: np.ndarray,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """Return ``output[m, s] = x[m] @ weights[group_indices[m, s]] (+ bias[group])``, shape
    (M, S, N): one product per group used, over the rows that select it, without gathering a
    weight matrix per row."""
    if x.ndim != 2 or weights.ndim != 3 or group_indices.ndim != 2:
        raise ValueError(
            "GroupedMatMul expects input [M, K], weights [G, K, N] and group_indices [M, S], "
            f"found shapes {x.shape}, {weights.shape} and {group_indices.shape}"
        )
    (m, k), (g, k_w, n) = x.shape, weights.shape
    if k != k_w or group_indices.shape[0] != m:
        raise ValueError(
            f"GroupedMatMul: input {x.shape}, weights {weights.shape} and group_indices "
            f"{group_indices.shape} disagree on K or M"
        )
    if bias is not None and bias.shape != (g, n):
        raise ValueError(f"GroupedMatMul: bias must be [G, N] = [{g}, {n}], found {bias.shape}")
    flat = group_indices.reshape(-1).astype(np.int64, copy=False)
    if flat.size and (flat.min() < 0 or flat.max() >= g):
        bad = flat[(flat < 0) | (flat >= g)][0]
        raise ValueError(f"GroupedMatMul: group index {bad} is outside [0, {g})")
    work = accumulation_dtype(x.dtype)
    rows = np.repeat(x.astype(work, copy=False), group_indices.shape[1], axis=0)
    out = np.empty((flat.size, n), work)
    for group in np.unique(flat):
        chosen = flat == group
        out[chosen] = rows[chosen] @ weights[group].astype(work, copy=False)
        if bias is not None:
            out[chosen] += bias[group].astype(work, copy=False)
    return out.reshape(m, group_indices.shape[1], n).astype(x.dtype, copy=False)
