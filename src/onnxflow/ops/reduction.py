"""Reductions and losses.

- ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceMax, ReduceMean, ReduceMin,
  ReduceProd, ReduceSum, ReduceSumSquare: ``axes`` is an attribute in the early versions and an
  input (with ``noop_with_empty_axes``) from ReduceSum 13 and the others 18. Reducing an empty
  set gives the identity element (-inf for ReduceMax and ReduceLogSumExp, 1 for ReduceProd...).
- NegativeLogLikelihoodLoss 12, 13, 22 and SoftmaxCrossEntropyLoss 12, 13.

float16 and bfloat16 accumulate in float32; every result keeps the input's dtype.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import PerDtype, accumulation_dtype
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits, native_form

_MATH = compiled.module("_math")

Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]

#: The dtype transcendental reductions compute in: float64 for integers and booleans.
_FLOAT_MATH = PerDtype(
    lambda dt: np.dtype(np.float64) if dt.kind in "iub" else accumulation_dtype(dt)
)


def _work(x: np.ndarray, *, float_math: bool = False) -> np.ndarray:
    """Return x in the dtype to compute in (x itself for float32 and float64): float32 for small
    floats and, when the math is transcendental (``float_math``), float64 for integers."""
    return x.astype(_FLOAT_MATH[x.dtype] if float_math else accumulation_dtype(x.dtype), copy=False)


def normalize_axes(axes: Sequence[int] | np.ndarray, rank: int) -> tuple[int, ...]:
    """Return axes as sorted non-negative ints; raise on out-of-range or repeated axes."""
    if isinstance(axes, (list, tuple)) and all(a.__class__ is int for a in axes):
        return _normalized(tuple(axes), rank)
    return _normalized(tuple(int(a) for a in np.asarray(axes).reshape(-1)), rank)


@functools.lru_cache(maxsize=1024)
def _normalized(found: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """:func:`normalize_axes` of Python ints, remembered: a model reduces over the same few
    axes again and again."""
    if rank == 0 and all(a in (0, -1) for a in found):
        return ()
    out = []
    for a in found:
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is out of range for a tensor of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(found)} repeat an axis")
    return tuple(sorted(out))


def _reduce(
    fn: Reducer,
    x: np.ndarray,
    axes: Sequence[int] | np.ndarray | None,
    keepdims: int,
    noop: int,
) -> np.ndarray:
    """Apply ``fn`` over the given axes; no or empty axes mean all axes, or none with ``noop``."""
    y = fn(x, _picked(x, axes, noop), bool(keepdims))
    if y.__class__ is np.ndarray and y.dtype == x.dtype:
        return y
    return np.asarray(y).astype(x.dtype, copy=False)


def _picked(x: np.ndarray, axes: Sequence[int] | np.ndarray | None, noop: int) -> tuple[int, ...]:
    """The axes a reduction of ``x`` runs over, sorted and non-negative (raising for bad ones)."""
    if axes is None or len(axes) == 0:
        return () if noop else _ALL_AXES[x.ndim]
    given = axes.tolist() if axes.__class__ is np.ndarray else axes
    return _normalized(tuple(given) if isinstance(given, (list, tuple)) else (given,), x.ndim)


#: rank -> (0, 1, ..., rank - 1), for every rank NumPy allows.
_ALL_AXES = tuple(tuple(range(rank)) for rank in range(65))


def _l1(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.add.reduce(np.abs(_work(x)), axis=axes, keepdims=keep)


def _l2(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    w = _work(x, float_math=True)
    return np.sqrt(np.add.reduce(w * w, axis=axes, keepdims=keep))


def _log_sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.log(np.add.reduce(_work(x, float_math=True), axis=axes, keepdims=keep))


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    w = _work(x, float_math=True)
    top = np.maximum.reduce(w, axis=axes, keepdims=True, initial=-np.inf)
    top = np.where(np.isfinite(top), top, 0)
    total = np.add.reduce(np.exp(w - top), axis=axes, keepdims=True)
    out = np.log(total) + top
    return out if keep else np.squeeze(out, axis=axes)


def _identity(dtype: np.dtype, bound: str) -> Any:
    """Return the ``bound`` ("min" or "max") value of ``dtype``: where a max (min) starts."""
    if dtype == np.bool_:
        return dtype.type(bound == "max")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(info.min if bound == "min" else info.max)
    return dtype.type(-np.inf if bound == "min" else np.inf)


def _extreme(ufunc: np.ufunc, bound: str) -> Reducer:
    initials = PerDtype(lambda dt: _identity(dt, bound))

    def reducer(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return ufunc.reduce(x, axis=axes, keepdims=keep, initial=initials[x.dtype])

    return reducer


def _mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    w = _work(x, float_math=True)
    total = np.add.reduce(w, axis=axes, keepdims=keep)
    count = math.prod([w.shape[a] for a in axes])
    return np.true_divide(total, np.float64(count)).astype(w.dtype, copy=False)


#: Whether :func:`_mean` divides a float32 sum by its float64 count in double (NumPy 2's
#: promotion) or in float32 (NumPy 1's, which casts the scalar down): its compiled form
#: divides as it does.
_WIDE_MEAN = np.true_divide(np.ones(1, np.float32), np.float64(3)).dtype == np.float64


def _row_means(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray | None:
    """:func:`_mean` of a C-ordered float32 ``x`` over its last axis alone (rows not empty)
    in one compiled pass (``_math``: NumPy's pairwise sum, then its division), or None."""
    if x.dtype != np.float32 or axes != (x.ndim - 1,) or not x.flags.c_contiguous:
        return None
    if not x.shape[-1]:
        return None
    out = np.empty((*x.shape[:-1], 1) if keep else x.shape[:-1], np.float32)
    _MATH.row_means_f32(x.reshape(-1), out.reshape(-1), _WIDE_MEAN)  # type: ignore[union-attr]
    return out


def _mean_attribute_compiled(
    data: np.ndarray, *, axes: list[int] | None = None, keepdims: int = 1
) -> np.ndarray:
    """ReduceMean's compiled form (axes an attribute): the last axis alone in one compiled call
    (``_math.last_axis_means``), else :func:`_row_means`, else the NumPy form."""
    y = _MATH.last_axis_means(data, axes, bool(keepdims), _WIDE_MEAN)  # type: ignore[union-attr]
    if y is not None:
        return y
    y = _row_means(data, _picked(data, axes, 0), bool(keepdims))
    return _reduce(_mean, data, axes, keepdims, 0) if y is None else y


def _mean_input_compiled(
    data: np.ndarray,
    axes: np.ndarray | None = None,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
) -> np.ndarray:
    """ReduceMean's compiled form (axes an input): :func:`_row_means`, else the NumPy form."""
    y = _row_means(data, _picked(data, axes, noop_with_empty_axes), bool(keepdims))
    return _reduce(_mean, data, axes, keepdims, noop_with_empty_axes) if y is None else y


#: ReduceMean's compiled forms (None: ``_math`` not built), by where its axes are given.
_COMPILED_MEAN = {
    "attribute": compiled.when(_MATH, _mean_attribute_compiled),
    "input": compiled.when(_MATH, _mean_input_compiled),
}


def _prod(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    w = _work(x)
    return np.multiply.reduce(w, axis=axes, dtype=w.dtype, keepdims=keep)


def _sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    w = _work(x)
    return np.add.reduce(w, axis=axes, dtype=w.dtype, keepdims=keep)


def _sum_square(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if x.dtype in _DOT_DTYPES and x.size:
        if len(axes) == x.ndim:
            flat = x if x.ndim == 1 else x.reshape(-1)  # a full reduction is a dot product:
            total = np.asarray(np.dot(flat, flat))  # one BLAS call, no temporary
            return total.reshape((1,) * x.ndim) if keep else total
        if axes == (x.ndim - 1,):  # rows of squared distances
            rows = _row_sum_squares(x)
            return rows[..., None] if keep else rows
    w = _work(x)
    return np.add.reduce(w * w, axis=axes, dtype=w.dtype, keepdims=keep)


_DOT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: Up to this many elements, row sums of squares go through a temporary and one BLAS product.
_GEMV_LIMIT = 1 << 22


def _row_sum_squares(x: np.ndarray) -> np.ndarray:
    """Sum of squares along the last axis: squares times a ones vector (BLAS gemv), or einsum.

    For knn's (500, 20) distance rows, 2.2 us against einsum's 3.9 us; einsum, which needs no
    temporary, takes over for large inputs.
    """
    n = x.shape[-1]
    if x.size > _GEMV_LIMIT:
        return np.einsum("...i,...i->...", x, x)
    squares = np.square(x).reshape(-1, n)
    return np.dot(squares, _ones(n, x.dtype)).reshape(x.shape[:-1])


@functools.lru_cache(maxsize=256)
def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(n, dtype)
    ones.flags.writeable = False
    return ones


def _register(
    name: str, attr_versions: tuple[int, ...], input_versions: tuple[int, ...], fn: Reducer
) -> None:
    """Register ``name`` with ``axes`` as an attribute and, in later versions, as an input."""

    def with_axes_attribute(
        data: np.ndarray, *, axes: list[int] | None = None, keepdims: int = 1
    ) -> np.ndarray:
        return _reduce(fn, data, axes, keepdims, 0)

    def with_axes_input(
        data: np.ndarray,
        axes: np.ndarray | None = None,
        *,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> np.ndarray:
        return _reduce(fn, data, axes, keepdims, noop_with_empty_axes)

    # the result's shape follows from data's, and from the axes' values when they are an input
    how = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min"}.get(
        name
    )
    for kernel, versions, traits in (
        (with_axes_attribute, attr_versions, Traits(static_shape=True)),
        (with_axes_input, input_versions, Traits(static_shape=(1,))),
    ):
        if how is not None:
            traits = traits.replace(numpy=_reduce_numpy(how, versions is input_versions))
        if name == "ReduceMean":
            where = "input" if versions is input_versions else "attribute"
            traits = traits.replace(native=native_form(_COMPILED_MEAN[where]))
        kernel.__doc__ = f"{name}: reduce ``data`` over ``axes`` ({fn.__name__.strip('_')})."
        kernel.__qualname__ = f"{name}.{kernel.__name__}"
        op(name, *versions, traits=traits)(kernel)


def _reduce_numpy(how: str, axes_input: bool) -> Callable[[NumpyCall], str]:
    """ReduceSum's or ReduceMean's NumPy form (``how``: "sum" or "mean")."""

    def form(f: NumpyCall) -> str:
        axes = (f.ins[1] if len(f.ins) > 1 else "None") if axes_input else f.arg("axes", None)
        keep, noop = f.arg("keepdims", 1), f.arg("noop_with_empty_axes", 0)
        return f'onnx_reduce({f.ins[0]}, "{how}", {axes}, {keep}, {noop})'

    return form


_register("ReduceL1", (1, 11, 13), (18,), _l1)
_register("ReduceL2", (1, 11, 13), (18,), _l2)
_register("ReduceLogSum", (1, 11, 13), (18, 28), _log_sum)
_register("ReduceLogSumExp", (1, 11, 13), (18, 28), _log_sum_exp)
_register("ReduceMax", (1, 11, 12, 13), (18, 20), _extreme(np.maximum, "min"))
_register("ReduceMean", (1, 11, 13), (18,), _mean)
_register("ReduceMin", (1, 11, 12, 13), (18, 20), _extreme(np.minimum, "max"))
_register("ReduceProd", (1, 11, 13), (18,), _prod)
_register("ReduceSum", (1, 11), (13,), _sum)
_register("ReduceSumSquare", (1, 11, 13), (18,), _sum_square)


def reduce_sum_square(x: np.ndarray, axes: Sequence[int], keepdims: int = 1) -> np.ndarray:
    """ReduceSumSquare of ``x`` over ``axes`` (not empty), as the operator's kernel computes it."""
    return _reduce(_sum_square, x, axes, keepdims, 0)


# -- losses ------------------------------------------------------------------------------------


def _nll(
    log_prob: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """Return the (weighted) negative log likelihood of ``target`` classes, reduced."""
    if log_prob.ndim < 2 or target.shape != (log_prob.shape[0], *log_prob.shape[2:]):
        raise ValueError(
            f"expected input (N, C, d1..dk) and target (N, d1..dk), found input "
            f"{log_prob.shape} and target {target.shape}"
        )
    labels = target.astype(np.int64)
    valid = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    n_classes = log_prob.shape[1]
    if np.any(valid & ((labels < 0) | (labels >= n_classes))):
        raise ValueError(
            f"target holds a class outside [0, {n_classes}) (ignore_index {ignore_index})"
        )
    safe = np.where(valid, labels, 0)
    work = _work(log_prob)
    picked = np.take_along_axis(work, np.expand_dims(safe, 1), axis=1).squeeze(1)
    w = np.ones(labels.shape, work.dtype) if weight is None else _work(weight)[safe]
    w = np.where(valid, w, 0).astype(work.dtype)
    loss = -picked * w
    if reduction == "none":
        out = loss
    elif reduction == "sum":
        out = np.sum(loss)
    elif reduction == "mean":
        out = np.sum(loss) / np.sum(w)
    else:
        raise ValueError(f"reduction must be 'none', 'sum' or 'mean', found {reduction!r}")
    return np.asarray(out).astype(log_prob.dtype, copy=False)


@op("NegativeLogLikelihoodLoss", 12, 13, 22)
def negative_log_likelihood_loss(
    input: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> np.ndarray:
    """Return the negative log likelihood loss of log-probabilities ``input`` (N, C, ...)."""
    return _nll(input, target, weight, ignore_index, reduction)


@op("SoftmaxCrossEntropyLoss", 12, 13)
def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[np.ndarray, np.ndarray]:
    """Return (loss, log_prob): the NLL loss of log-softmax over the class axis 1."""
    work = _work(scores)
    shifted = work - np.max(work, axis=1, keepdims=True)
    log_prob = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss.astype(scores.dtype, copy=False), log_prob.astype(scores.dtype, copy=False)
