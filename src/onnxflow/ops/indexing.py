"""Indexing: gathering, scattering, selecting, ordering and counting by position.

Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND, TensorScatter, OneHot,
Compress, NonZero, Unique, CumSum, CumProd, TopK, ArgMax, ArgMin, Trilu.

Index outputs are int64; negative indices count from the back; scatters start from a copy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops._common import normalize_axis
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits, native_form

_ARRAYS = compiled.module("_arrays")


def _check_bounds(indices: np.ndarray, dim: int, what: str) -> np.ndarray:
    """Return indices as int64 with negatives wrapped; raise if any is outside [-dim, dim-1],
    saying in words which index, where, and the valid range (``what`` names the input and axis,
    e.g. "Gather's indices (input 2) along data's axis 1")."""
    idx = np.asarray(indices).astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        bad = (idx < -dim) | (idx >= dim)
        first = np.argwhere(bad)[0]
        valid = f"from {-dim} to {dim - 1}" if dim else "none: the axis is empty"
        raise IndexError(
            f"{what}: index {idx[tuple(first)]} at position {first.tolist()} is out of range "
            f"({int(bad.sum())} of {idx.size} are; found {idx.min()}..{idx.max()}); the axis "
            f"has size {dim}, so valid indices are {valid} (negative ones count from the end)"
        )
    return np.where(idx < 0, idx + dim, idx)


def _element_index(data: np.ndarray, indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Return the fancy index addressing data[..., indices[i...], ...] along ``axis``."""
    if indices.ndim != data.ndim:
        raise ValueError(f"indices rank {indices.ndim} differs from data rank {data.ndim}")
    axis = normalize_axis(axis, data.ndim)
    grids = list(np.indices(indices.shape, sparse=True))
    what = f"indices (input 2) along data's axis {axis}"
    grids[axis] = _check_bounds(indices, data.shape[axis], what)
    return tuple(grids)


def _gather_numpy(f: NumpyCall) -> str:
    return f"np.take({f.ins[0]}, {f.ins[1]}, axis={f.arg('axis', 0)})"


#: Gather's compiled form: ndarray.take called in C (``_arrays.Gather``), other inputs and
#: errors to the NumPy form (defined below).
_GATHER_COMPILED = (
    None
    if _ARRAYS is None
    else _ARRAYS.Gather(lambda data, indices, *, axis=0: gather(data, indices, axis=axis))
)


@op(
    "Gather",
    *(1, 11, 13),
    traits=Traits(
        static_shape=True,
        selects=True,
        numpy=_gather_numpy,
        native=native_form(_GATHER_COMPILED),
    ),
)
def gather(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """Return the slices of data at ``indices`` along ``axis``: rank q + r - 1."""
    axis = normalize_axis(axis, data.ndim)
    try:  # take counts negative indices from the end and raises past either end
        # ndarray.take is what np.take calls, without its Python wrapper (a shape's Gather)
        y = (
            data.take(indices, axis=axis)
            if data.__class__ is np.ndarray
            else np.take(data, indices, axis=axis)
        )
        return y if y.__class__ is np.ndarray else np.asarray(y)
    except IndexError:
        what = f"Gather's indices (input 2) along data's axis {axis}"
        _check_bounds(indices, data.shape[axis], what)  # raises, naming the range in words
        raise


def _gather_elements_numpy(f: NumpyCall) -> str:
    return f"np.take_along_axis({f.ins[0]}, {f.ins[1]}, axis={f.arg('axis', 0)})"


@op("GatherElements", 11, 13, traits=Traits(numpy=_gather_elements_numpy))
def gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """Return out[i] = data[i with i[axis] replaced by indices[i]], shaped like indices."""
    return data[_element_index(data, indices, axis)]


def _nd_index(data: np.ndarray, indices: np.ndarray, batch_dims: int) -> tuple[np.ndarray, ...]:
    """Return the fancy index for GatherND/ScatterND over (batch..., index tuples)."""
    k = indices.shape[-1]
    if k > data.ndim - batch_dims:
        raise ValueError(f"index tuples of length {k} exceed rank {data.ndim} - {batch_dims}")
    if data.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise ValueError(f"batch dims differ: {data.shape[:batch_dims]} vs {indices.shape}")
    lead = indices.shape[:-1]
    batch = [
        np.arange(n).reshape((-1,) + (1,) * (len(lead) - i - 1))
        for i, n in enumerate(lead[:batch_dims])
    ]
    coords = [
        _check_bounds(
            indices[..., j],
            data.shape[batch_dims + j],
            f"indices (input 2) along data's axis {batch_dims + j}",
        )
        for j in range(k)
    ]
    return (*batch, *coords)


def _gather_nd_numpy(f: NumpyCall) -> str:
    return f"onnx_gather_nd({f.ins[0]}, {f.ins[1]}, {f.arg('batch_dims', 0)})"


@op("GatherND", 11, 12, 13, traits=Traits(numpy=_gather_nd_numpy))
def gather_nd(data: np.ndarray, indices: np.ndarray, *, batch_dims: int = 0) -> np.ndarray:
    """Return the slices of data addressed by the index tuples in the last axis of indices."""
    return data[_nd_index(data, indices, batch_dims)]


_REDUCERS: dict[str, Callable[..., None]] = {
    "add": np.add.at,
    "mul": np.multiply.at,
    "max": np.maximum.at,
    "min": np.minimum.at,
}


def _scatter(
    data: np.ndarray, index: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str
) -> np.ndarray:
    """Return a copy of data with updates written (or reduced) at ``index``."""
    out = data.copy()
    if reduction == "none":
        out[index] = updates
    elif reduction in _REDUCERS:
        _REDUCERS[reduction](out, index, updates)
    else:
        raise ValueError(f"unknown reduction {reduction!r}, expected none, {', '.join(_REDUCERS)}")
    return out


@op("Scatter", 9, 11)
@op("ScatterElements", 11, 13, 16, 18)
def scatter_elements(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    *,
    axis: int = 0,
    reduction: str = "none",
) -> np.ndarray:
    """Return a copy of data with updates[i] put at i with i[axis] replaced by indices[i]."""
    if updates.shape != indices.shape:
        raise ValueError(f"updates shape {updates.shape} differs from indices {indices.shape}")
    return _scatter(data, _element_index(data, indices, axis), updates, reduction)


@op("ScatterND", 11, 13, 16, 18)
def scatter_nd(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str = "none"
) -> np.ndarray:
    """Return a copy of data with the slices addressed by indices' tuples set to updates."""
    expected = indices.shape[:-1] + data.shape[indices.shape[-1] :]
    if updates.shape != expected:
        raise ValueError(f"updates shape {updates.shape}, expected {expected}")
    return _scatter(data, _nd_index(data, indices, 0), updates, reduction)


@op("TensorScatter", 24)
def tensor_scatter(
    past_cache: np.ndarray,
    update: np.ndarray,
    write_indices: np.ndarray | None = None,
    *,
    axis: int = -2,
    mode: str = "linear",
) -> np.ndarray:
    """Return past_cache with each batch entry's update written from its write index on.

    In ``circular`` mode positions wrap modulo the cache's sequence length.
    """
    axis = normalize_axis(axis, past_cache.ndim)
    if axis == 0 or mode not in ("linear", "circular"):
        raise ValueError(f"axis must not be 0 and mode linear or circular: {axis}, {mode!r}")
    max_len, seq_len = past_cache.shape[axis], update.shape[axis]
    batch = past_cache.shape[0]
    starts = np.zeros(batch, np.int64) if write_indices is None else write_indices.astype(np.int64)
    out = past_cache.copy()
    view, src = np.moveaxis(out, axis, 1), np.moveaxis(update, axis, 1)
    for b in range(batch):
        pos = starts[b] + np.arange(seq_len)
        if mode == "circular":
            pos %= max_len
        elif seq_len and pos[-1] >= max_len:
            raise ValueError(f"write index {starts[b]} + {seq_len} exceeds length {max_len}")
        view[b, pos] = src[b]
    return out


def _one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, axis: int, wrap: bool):
    n = int(np.asarray(depth).reshape(-1)[0])
    if n <= 0:
        raise ValueError(f"depth must be positive, found {n}")
    idx = np.asarray(indices).astype(np.int64)
    if wrap:
        idx = np.where(idx < 0, idx + n, idx)
    hot = np.arange(n) == idx[..., None]
    hot = np.moveaxis(hot, -1, normalize_axis(axis, idx.ndim + 1))
    off, on = values.reshape(-1)[:2]
    return np.where(hot, on, off).astype(values.dtype)


@op("OneHot", 9)
def one_hot_v9(
    indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int = -1
) -> np.ndarray:
    """Return on_value where the new ``axis`` equals indices (in [0, depth)), else off_value."""
    return _one_hot(indices, depth, values, axis, wrap=False)


@op("OneHot", 11, 28)
def one_hot(
    indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int = -1
) -> np.ndarray:
    """Return on_value where the new ``axis`` equals indices (negatives wrap), else off_value."""
    return _one_hot(indices, depth, values, axis, wrap=True)


@op("Compress", 9, 11, 28)
def compress(x: np.ndarray, condition: np.ndarray, *, axis: int | None = None) -> np.ndarray:
    """Return the slices along ``axis`` (of flattened x if absent) where condition is true."""
    cond = np.asarray(condition).astype(bool).reshape(-1)
    if axis is None:
        return np.compress(cond, x.reshape(-1))
    return np.compress(cond, x, axis=normalize_axis(axis, x.ndim))


@op("NonZero", 9, 13)
def non_zero(x: np.ndarray) -> np.ndarray:
    """Return the int64 coordinates of the non-zero elements, one row per axis."""
    coords = np.nonzero(np.atleast_1d(x) != 0)
    return np.array(coords, dtype=np.int64).reshape(len(coords), -1)


@op("Unique", 11, 28)
def unique(
    x: np.ndarray, *, axis: int | None = None, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (Y, first indices, inverse indices, counts) of the unique elements or slices.

    Y is ascending when ``sorted`` is 1, else in order of first occurrence.
    """
    flat = x.reshape(-1) if axis is None else x
    ax = None if axis is None else normalize_axis(axis, x.ndim)
    y, first, inverse, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, axis=ax
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if ax is None else ax)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return y, *(a.astype(np.int64) for a in (first, inverse, counts))


def _cumulative(x: np.ndarray, axis: np.ndarray, exclusive: int, reverse: int, ufunc) -> np.ndarray:
    ax = normalize_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)
    data = np.flip(x, ax) if reverse else x
    out = ufunc.accumulate(data, axis=ax, dtype=x.dtype)
    if exclusive:
        first = np.full_like(np.take(out, [0], axis=ax), ufunc.identity)
        out = np.concatenate([first, np.take(out, np.arange(x.shape[ax] - 1), axis=ax)], axis=ax)
    return np.flip(out, ax) if reverse else out


@op("CumSum", 11, 14)
def cum_sum(x: np.ndarray, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    """Return the running sums of x along ``axis`` (optionally exclusive and/or reversed)."""
    return _cumulative(x, axis, exclusive, reverse, np.add)


@op("CumProd", 26)
def cum_prod(
    x: np.ndarray, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0
) -> np.ndarray:
    """Return the running products of x along ``axis`` (optionally exclusive and/or reversed)."""
    return _cumulative(x, axis, exclusive, reverse, np.multiply)


def _top_k(x: np.ndarray, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    ax = normalize_axis(axis, x.ndim)
    n = x.shape[ax]
    if not 0 <= k <= n:
        raise ValueError(f"k = {k} is outside [0, {n}] for axis {ax} of shape {x.shape}")
    xm = np.moveaxis(x, ax, -1)
    has_nan = x.dtype.kind == "f" and bool(np.isnan(x).any())
    if 0 < 4 * k < n and x.dtype.kind in "iuf" and not has_nan:
        idx = _top_k_partitioned(xm, k, largest)
    else:
        idx = _sorted_order(xm, largest)[..., :k]
    idx = np.moveaxis(idx.astype(np.int64), -1, ax)
    return np.take_along_axis(x, idx, axis=ax), idx


def _sorted_order(x: np.ndarray, largest: int) -> np.ndarray:
    """Order along the last axis, descending if ``largest``; equal values keep the lower index."""
    if not largest:
        return np.argsort(x, axis=-1, kind="stable")
    # descending with ties by lower index: stable ascending sort of the reversed axis, reversed
    return x.shape[-1] - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]


def _top_k_partitioned(x: np.ndarray, k: int, largest: int) -> np.ndarray:
    """The top-k order along the last axis without sorting it all: O(n) selection, then a sort
    of the k chosen. Of the values equal to the k-th, the lowest indices are chosen."""
    n = x.shape[-1]
    pos = n - k if largest else k - 1
    part = np.argpartition(x, pos, axis=-1)
    kth = np.take_along_axis(x, part[..., pos : pos + 1], axis=-1)
    if (np.count_nonzero(x == kth, axis=-1) == 1).all():
        # the k-th value is alone in every row: the k selected are the only possible choice
        candidates = np.sort(part[..., pos:] if largest else part[..., :k], axis=-1)
    else:
        strict = x > kth if largest else x < kth
        equal = x == kth
        need = k - strict.sum(axis=-1, keepdims=True)
        chosen = strict | (equal & (np.cumsum(equal, axis=-1) <= need))
        candidates = np.nonzero(chosen)[-1].reshape(*x.shape[:-1], k)  # ascending index per row
    order = _sorted_order(np.take_along_axis(x, candidates, axis=-1), largest)
    return np.take_along_axis(candidates, order, axis=-1)


@op("TopK", 1)
def top_k_v1(x: np.ndarray, *, k: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``k`` largest values along ``axis`` and their int64 indices (ties: low first)."""
    return _top_k(x, k, axis, largest=1)


@op("TopK", 10, 11, 24)
def top_k(
    x: np.ndarray, k: np.ndarray, *, axis: int = -1, largest: int = 1, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``k`` largest (or smallest) values along ``axis`` and their int64 indices.

    Results are always sorted; equal values keep the lower index first.
    """
    return _top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, largest)


def _arg_extreme(x, axis: int, keepdims: int, select_last_index: int, fn) -> np.ndarray:
    ax = normalize_axis(axis, x.ndim)
    if select_last_index:
        idx = x.shape[ax] - 1 - fn(np.flip(x, ax), axis=ax, keepdims=True)
    else:
        idx = fn(x, axis=ax, keepdims=True)
    idx = idx.astype(np.int64)
    return idx if keepdims else np.squeeze(idx, axis=ax)


@op("ArgMax", 1, 11, 12, 13)
def arg_max(
    x: np.ndarray, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0
) -> np.ndarray:
    """Return the int64 index of the largest value along ``axis`` (first, or last if asked)."""
    return _arg_extreme(x, axis, keepdims, select_last_index, np.argmax)


@op("ArgMin", 1, 11, 12, 13)
def arg_min(
    x: np.ndarray, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0
) -> np.ndarray:
    """Return the int64 index of the smallest value along ``axis`` (first, or last if asked)."""
    return _arg_extreme(x, axis, keepdims, select_last_index, np.argmin)


@op("Trilu", 14)
def trilu(x: np.ndarray, k: np.ndarray | None = None, *, upper: int = 1) -> np.ndarray:
    """Return the upper (or lower) triangle of the last two axes from diagonal k; 0 elsewhere."""
    if x.ndim < 2:
        raise ValueError(f"Trilu expects rank >= 2, found shape {x.shape}")
    diag = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    rows, cols = np.indices(x.shape[-2:], sparse=True)
    keep = cols - rows >= diag if upper else cols - rows <= diag
    return np.where(keep, x, np.zeros((), dtype=x.dtype))
