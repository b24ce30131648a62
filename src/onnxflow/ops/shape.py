"""Shape manipulation: tensors rearranged, joined, cut or generated from a shape.

Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Split, Slice, Transpose, Expand, Tile,
Range, Pad, CenterCropPad, DepthToSpace, SpaceToDepth, ReverseSequence.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops._common import normalize_axis
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits, native_form


def _ints(values: np.ndarray | Sequence[int] | None) -> list[int]:
    """Return a 1-D integer tensor (or list) as Python ints; None as an empty list."""
    if values is None:
        return []
    if values.__class__ is np.ndarray and values.ndim == 1 and values.dtype.kind in "iu":
        return values.tolist()  # the common case first: half the time of the general path
    array = np.asarray(values)
    if array.dtype.kind in "iu":  # tolist gives Python ints, 20x faster than int() of each
        return array.reshape(-1).tolist()
    return [int(v) for v in array.reshape(-1)]


_ARRAYS = compiled.module("_arrays")


def _shape_numpy(f: NumpyCall) -> str:
    cut = f"[{f.arg('start', 0)}:{f.arg('end', None)}]" if f.attrs else ""
    return f"np.array({f.ins[0]}.shape{cut}, dtype=np.int64)"


#: Shape's compiled form: the dims written into an int64 array in C (``_arrays.Shape``), other
#: inputs to the NumPy form (defined below).
_SHAPE_COMPILED = (
    None
    if _ARRAYS is None
    else _ARRAYS.Shape(lambda data, *, start=0, end=None: shape(data, start=start, end=end))
)


@op(
    "Shape",
    *(1, 13, 15, 19, 21, 23, 24, 25),
    traits=Traits(
        static_shape=True,
        from_shape=True,
        numpy=_shape_numpy,
        native=native_form(_SHAPE_COMPILED),
    ),
)
def shape(data: np.ndarray, *, start: int = 0, end: int | None = None) -> np.ndarray:
    """Return dims ``start:end`` (clamped, negatives from the back) of data's shape as int64."""
    return np.array(data.shape[start:end], dtype=np.int64)


@op("Size", 1, 13, 19, 21, 23, 24, 25, traits=Traits(from_shape=True))
def size(data: np.ndarray) -> np.ndarray:
    """Return the number of elements of data as an int64 scalar."""
    return np.array(data.size, dtype=np.int64)


def _reshape(data: np.ndarray, shape: Sequence[int], allowzero: int) -> np.ndarray:
    dims = list(shape)
    if dims and min(dims) < -1:  # NumPy would read any negative dim as "infer"
        i, d = next((i, d) for i, d in enumerate(dims) if d < -1)
        raise ValueError(
            f"shape {dims} has dim {d} at index {i}: a dim is -1 (inferred, once at most), "
            "0 (copied unless allowzero=1) or positive"
        )
    if 0 in dims:  # most targets have none: one containment test instead of a loop
        if allowzero and -1 in dims:
            raise ValueError(f"shape {dims} has both 0 and -1 while allowzero=1")
        for i, d in enumerate(dims if not allowzero else ()):
            if d == 0:
                if i >= data.ndim:
                    raise ValueError(f"shape {dims} copies dim {i} of a rank-{data.ndim} input")
                dims[i] = data.shape[i]
    if dims.count(-1) > 1:
        raise ValueError(f"shape {dims} has more than one -1")
    return data.reshape(dims)


def _reshape_numpy(f: NumpyCall) -> str:
    shape = f.ins[1] if f.since >= 5 else f.arg("shape", None)
    return f"onnx_reshape({f.ins[0]}, {shape}, {f.arg('allowzero', 0)})"


@op("Reshape", 1, traits=Traits(selects=True, numpy=_reshape_numpy))
def reshape_v1(
    data: np.ndarray, *, shape: list[int] | None = None, consumed_inputs: list[int] | None = None
) -> np.ndarray:
    """Return data reshaped to the ``shape`` attribute (0 copies the input dim)."""
    if shape is None:
        raise ValueError("Reshape-1 needs the 'shape' attribute")
    return _reshape(data, shape, 0)


#: Reshape's compiled form: positive dims and at most one -1 reshaped in C, others to
#: :func:`reshape` (:class:`onnxflow.native._arrays.Reshape`); None when not built.
_RESHAPE_COMPILED = (
    None
    if _ARRAYS is None
    else _ARRAYS.Reshape(
        lambda data, shape, *, allowzero=0: reshape(data, shape, allowzero=allowzero)
    )
)


@op(
    "Reshape",
    *(5, 13, 14, 19, 21, 23, 24, 25),
    traits=Traits(selects=True, numpy=_reshape_numpy, native=native_form(_RESHAPE_COMPILED)),
)
def reshape(data: np.ndarray, shape: np.ndarray, *, allowzero: int = 0) -> np.ndarray:
    """Return data reshaped; 0 copies the input dim unless allowzero=1, one -1 is inferred."""
    return _reshape(data, _ints(shape), allowzero)


@op(
    "Flatten",
    *(1, 9, 11, 13, 21, 23, 24, 25),
    traits=Traits(selects=True, numpy=lambda f: f"onnx_flatten({f.ins[0]}, {f.arg('axis', 1)})"),
)
def flatten(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Return x as a matrix: dims before ``axis`` make the rows, the rest the columns."""
    if not -x.ndim <= axis <= x.ndim:
        raise ValueError(f"axis {axis} is out of range [-{x.ndim}, {x.ndim}]")
    if axis < 0:
        axis += x.ndim
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _squeeze(data: np.ndarray, axes: Sequence[int] | None) -> np.ndarray:
    if axes is None:
        return np.squeeze(data)
    return data.reshape(_squeezed(data.shape, tuple(axes)))


@functools.lru_cache(maxsize=1024)
def _squeezed(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape left when ``axes`` (each of size 1) are dropped from ``shape``: a model
    squeezes the same few shapes again and again (errors are raised every time)."""
    norm = {normalize_axis(a, len(shape)) for a in axes}
    if len(norm) != len(axes):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    bad = [a for a in sorted(norm) if shape[a] != 1]
    if bad:
        raise ValueError(f"cannot squeeze axes {bad} of shape {shape}: size is not 1")
    return tuple(d for i, d in enumerate(shape) if i not in norm)


def _axes_numpy(name: str) -> Callable[[NumpyCall], str]:
    """The NumPy form of Squeeze or Unsqueeze (``onnx_<name>``): axes an attribute before
    opset 13, an input from 13."""

    def form(f: NumpyCall) -> str:
        axes = (f.ins[1] if len(f.ins) > 1 else "None") if f.since >= 13 else f.arg("axes", None)
        return f"onnx_{name}({f.ins[0]}, {axes})"

    return form


@op("Squeeze", 1, 11, traits=Traits(selects=True, numpy=_axes_numpy("squeeze")))
def squeeze_v1(data: np.ndarray, *, axes: list[int] | None = None) -> np.ndarray:
    """Return data without the size-1 dims listed in ``axes`` (all size-1 dims if absent)."""
    return _squeeze(data, axes)


#: Squeeze's and Unsqueeze's compiled forms (from opset 13): the dims dropped or inserted in C
#: (``_arrays.Axes``), other inputs to the NumPy forms (defined below).
_SQUEEZE_COMPILED = (
    None if _ARRAYS is None else _ARRAYS.Axes(lambda data, axes=None: squeeze(data, axes), False)
)
_UNSQUEEZE_COMPILED = (
    None if _ARRAYS is None else _ARRAYS.Axes(lambda data, axes: unsqueeze(data, axes), True)
)


@op(
    "Squeeze",
    *(13, 21, 23, 24, 25),
    traits=Traits(
        selects=True,
        numpy=_axes_numpy("squeeze"),
        native=native_form(_SQUEEZE_COMPILED),
    ),
)
def squeeze(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    """Return data without the size-1 dims listed in ``axes`` (all size-1 dims if absent)."""
    return _squeeze(data, None if axes is None else _ints(axes))


def _unsqueeze(data: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    return data.reshape(_unsqueezed(data.shape, tuple(axes)))


@functools.lru_cache(maxsize=1024)
def _unsqueezed(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with a 1 inserted at each of ``axes`` (of the result), remembered."""
    rank = len(shape) + len(axes)
    norm = sorted(normalize_axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    dims = list(shape)
    for a in norm:
        dims.insert(a, 1)
    return tuple(dims)


@op("Unsqueeze", 1, 11, traits=Traits(selects=True, numpy=_axes_numpy("unsqueeze")))
def unsqueeze_v1(data: np.ndarray, *, axes: list[int]) -> np.ndarray:
    """Return data with size-1 dims inserted at ``axes`` (positions in the output)."""
    return _unsqueeze(data, axes)


@op(
    "Unsqueeze",
    *(13, 21, 23, 24, 25),
    traits=Traits(
        selects=True,
        numpy=_axes_numpy("unsqueeze"),
        native=native_form(_UNSQUEEZE_COMPILED),
    ),
)
def unsqueeze(data: np.ndarray, axes: np.ndarray) -> np.ndarray:
    """Return data with size-1 dims inserted at ``axes`` (positions in the output)."""
    return _unsqueeze(data, _ints(axes))


def _concat_numpy(f: NumpyCall) -> str:
    return f"np.concatenate([{', '.join(f.ins)}], axis={f.arg('axis', 1)})"


@op("Concat", 1, traits=Traits(static_shape=True, selects=True, numpy=_concat_numpy))
def concat_v1(*inputs: np.ndarray, axis: int = 1) -> np.ndarray:
    """Return the inputs joined along ``axis`` (default 1 in this version)."""
    return concat(*inputs, axis=axis)


#: Concat's compiled form (from opset 4): np.concatenate called in C (``_arrays.Concat``),
#: other inputs and errors to the NumPy form (defined below).
_CONCAT_COMPILED = (
    None if _ARRAYS is None else _ARRAYS.Concat(lambda *inputs, axis: concat(*inputs, axis=axis))
)


@op(
    "Concat",
    *(4, 11, 13),
    traits=Traits(
        static_shape=True,
        selects=True,
        numpy=_concat_numpy,
        native=native_form(_CONCAT_COMPILED),
    ),
)
def concat(*inputs: np.ndarray, axis: int) -> np.ndarray:
    """Return the inputs joined along ``axis`` (strings and empty tensors included)."""
    if not inputs:
        raise ValueError("Concat needs at least one input")
    rank = inputs[0].ndim
    ranks = {x.ndim for x in inputs}
    if len(ranks) != 1:
        raise ValueError(f"Concat inputs must share one rank, found ranks {sorted(ranks)}")
    return np.concatenate(inputs, axis=normalize_axis(axis, rank))


def _split(x: np.ndarray, axis: int, sizes: list[int] | None, n: int, uneven: bool) -> tuple:
    given = None if sizes is None else tuple(sizes)
    return tuple(map(x.__getitem__, _split_index(x.shape, axis, given, n, uneven)))


@functools.lru_cache(maxsize=1024)
def _split_index(
    shape: tuple[int, ...], axis: int, sizes: tuple[int, ...] | None, n: int, uneven: bool
) -> tuple[tuple[slice, ...], ...]:
    """The basic index of each part of a Split of a tensor of ``shape``, remembered (errors
    are raised every time): the views np.split makes, without its Python per call."""
    axis = normalize_axis(axis, len(shape))
    dim = shape[axis]
    if sizes is None:
        if uneven:
            chunk = -(-dim // n)
            sizes = tuple(min(chunk, dim - i * chunk) for i in range(n))
        elif dim % n:
            raise ValueError(f"cannot split dim {dim} into {n} equal parts")
        else:
            sizes = (dim // n,) * n
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ValueError(f"split sizes {list(sizes)} do not add up to dim {dim}")
    lead, ends = (slice(None),) * axis, itertools.accumulate(sizes)
    return tuple((*lead, slice(end - size, end)) for size, end in zip(sizes, ends))


def _split_numpy(f: NumpyCall) -> str:
    """Split's NumPy form: sizes from the input (version 1, and 13 on) or the attribute."""
    sizes = f.ins[1] if len(f.ins) > 1 and f.ins[1] != "None" else f.arg("split", None)
    uneven = ", uneven=True" if f.since >= 18 else ""
    call = f"onnx_split({f.ins[0]}, {f.outputs}, {f.arg('axis', 0)}, {sizes}{uneven})"
    return call if f.outputs > 1 else f"{call}[0]"  # one output: the part, not a 1-tuple


def _split_compiled(node: NodeContext, **attrs: Any) -> Callable[..., tuple]:
    """Split's compiled form: with no sizes input, the parts made in C (``_arrays.Split``: the
    NumPy form's views of the indexes :func:`_split_index` gives, looked up when X's shape
    changes); other inputs to the NumPy form, :func:`split`."""
    numpy_form = split(node, **attrs)
    given = attrs.get("split")
    index_of = functools.partial(
        _split_index,
        axis=attrs.get("axis", 0),
        sizes=None if given is None else tuple(given),
        n=node.n_outputs,
        uneven=node.opset >= 18,
    )
    return _ARRAYS.Split(numpy_form, index_of)  # type: ignore[union-attr]


@op(
    "Split",
    *(1, 2, 11, 13, 18),
    build=True,
    traits=Traits(
        numpy=_split_numpy,
        native=native_form(_split_compiled if _ARRAYS is not None else None),
    ),
)
def split(
    node: NodeContext,
    *,
    axis: int = 0,
    split: list[int] | None = None,
    num_outputs: int | None = None,
) -> Callable[..., tuple]:
    """Split along ``axis`` into the given sizes, or into as many equal parts as outputs.

    From version 18 ``num_outputs`` parts are as equal as possible (the last one smaller).
    """
    if num_outputs is not None and num_outputs != node.n_outputs:
        raise node.error(f"num_outputs={num_outputs} but the node has {node.n_outputs} outputs")
    n, uneven = node.n_outputs, node.opset >= 18

    def run(x: np.ndarray, sizes: np.ndarray | None = None) -> tuple:
        given = split if sizes is None or sizes.size == 0 else _ints(sizes)
        return _split(x, axis, given, n, uneven)

    return run


def _slice(
    data: np.ndarray,
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
) -> np.ndarray:
    return data[
        _slice_index(
            data.shape,
            tuple(starts),
            tuple(ends),
            None if axes is None else tuple(axes),
            None if steps is None else tuple(steps),
        )
    ]


@functools.lru_cache(maxsize=1024)
def _slice_index(
    shape: tuple[int, ...],
    starts: tuple[int, ...],
    ends: tuple[int, ...],
    axes: tuple[int, ...] | None,
    steps: tuple[int, ...] | None,
) -> tuple[slice, ...]:
    """The basic index of a Slice of a tensor of ``shape``, remembered: a model slices the
    same few shapes again and again (errors are raised every time)."""
    axes = _slice_axes(len(shape), len(starts), axes)
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(
            f"starts, ends, axes and steps must have one length, found "
            f"{len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}"
        )
    index = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise ValueError("slice step cannot be 0")
        dim = shape[axis]
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            index[axis] = slice(start, end, step)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            index[axis] = slice(start, end if end >= 0 else None, step)
    return tuple(index)


def _slice_axes(rank: int, count: int, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """The axes a Slice of ``count`` starts cuts in a rank-``rank`` input, non-negative: its
    first ``count`` when ``axes`` is absent. Each must be in range and named once (the spec
    leaves a repeated axis undefined; onnxruntime refuses it)."""
    if axes is None:
        if count > rank:
            raise ValueError(
                f"{count} starts with no axes cut the first {count} axes of an input of rank {rank}"
            )
        return tuple(range(count))
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        raise ValueError(
            f"axes {list(axes)}: axis {bad[0]} is out of range [-{rank}, {rank}) for an input "
            f"of rank {rank}"
        )
    norm = tuple(a % rank for a in axes)
    if len(set(norm)) != len(norm):
        twice = sorted({a for a in norm if norm.count(a) > 1})
        raise ValueError(f"axes {list(axes)} name axis {twice[0]} more than once")
    return norm


def _slice_numpy(f: NumpyCall) -> str:
    if f.since >= 10:
        return f"onnx_slice({', '.join(f.ins)})"
    axes = f.arg("axes", None)
    return f"onnx_slice({f.ins[0]}, {f.arg('starts', [])}, {f.arg('ends', [])}, {axes})"


@op("Slice", 1, traits=Traits(selects=True, numpy=_slice_numpy))
def slice_v1(
    data: np.ndarray, *, starts: list[int], ends: list[int], axes: list[int] | None = None
) -> np.ndarray:
    """Return the sub-tensor data[starts:ends] along ``axes`` (attributes in this version)."""
    return _slice(data, starts, ends, axes, None)


#: Slice's compiled form (from opset 10): the index clamped in C (``_arrays.Slice``), other
#: inputs to the NumPy form (defined below).
_SLICE_COMPILED = (
    None
    if _ARRAYS is None
    else _ARRAYS.Slice(
        lambda data, starts, ends, axes=None, steps=None: slice_(data, starts, ends, axes, steps)
    )
)


@op(
    "Slice",
    *(10, 11, 13),
    traits=Traits(selects=True, numpy=_slice_numpy, native=native_form(_SLICE_COMPILED)),
)
def slice_(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    """Return the sub-tensor data[starts:ends:steps] along ``axes``, with ONNX clamping."""
    return _slice(
        data,
        _ints(starts),
        _ints(ends),
        None if axes is None else _ints(axes),
        None if steps is None else _ints(steps),
    )


def _transpose_numpy(f: NumpyCall) -> str:
    perm = f", {f.src['perm']}" if "perm" in f.src else ""
    return f"np.transpose({f.ins[0]}{perm})"


#: Transpose's compiled form: the view made in C (``_arrays.Transpose``), other inputs and
#: errors to the NumPy form (defined below).
_TRANSPOSE_COMPILED = (
    None
    if _ARRAYS is None
    else _ARRAYS.Transpose(lambda data, *, perm=None: transpose(data, perm=perm))
)


@op(
    "Transpose",
    *(1, 13, 21, 23, 24, 25),
    traits=Traits(
        static_shape=True,
        selects=True,
        numpy=_transpose_numpy,
        native=native_form(_TRANSPOSE_COMPILED),
    ),
)
def transpose(data: np.ndarray, *, perm: list[int] | None = None) -> np.ndarray:
    """Return data with its axes permuted by ``perm`` (reversed by default)."""
    return np.transpose(data, perm)


@op("Expand", 8, 13, traits=Traits(selects=True, numpy="onnx_expand({0}, {1})"))
def expand(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Return x broadcast (bidirectionally) with ``shape``."""
    target = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
    return np.broadcast_to(x, target).copy()


@op("Tile", 1)
def tile_v1(x: np.ndarray, tiles: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Return x repeated ``tiles`` times along the single ``axis``."""
    reps = [1] * x.ndim
    reps[normalize_axis(_ints(axis)[0], x.ndim)] = _ints(tiles)[0]
    return np.tile(x, reps)


@op("Tile", 6, 13)
def tile(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """Return x repeated ``repeats[i]`` times along each axis i."""
    reps = _ints(repeats)
    if len(reps) != x.ndim:
        raise ValueError(f"repeats has {len(reps)} entries, expected one per axis ({x.ndim})")
    return np.tile(x, reps)


@op(
    "Range",
    *(11, 27),
    traits=Traits(numpy=lambda f: f"onnx_range({', '.join(f.ins)}, {f.arg('stash_type', 1)})"),
)
def range_(
    start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *, stash_type: int = 1
) -> np.ndarray:
    """Return start, start+delta, ... up to ``limit`` (exclusive), in the inputs' dtype.

    float16/bfloat16 inputs are computed in float32 when ``stash_type`` is 1 (version 27).
    """
    s, l, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    if d == 0:
        raise ValueError("Range delta cannot be 0")
    dtype = s.dtype
    if dtype.kind in "iu":
        return np.arange(int(s), int(l), int(d), dtype=np.int64).astype(dtype)
    work = np.float32 if dtype.itemsize == 2 and stash_type == 1 else dtype
    s, l, d = (np.asarray(v, dtype=work) for v in (s, l, d))
    count = max(math.ceil(float((l - s) / d)), 0)
    return (s + np.arange(count).astype(work) * d).astype(dtype)


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad(
    data: np.ndarray, pads: list[int], mode: str, value: object, axes: list[int] | None = None
) -> np.ndarray:
    if mode not in _PAD_MODES:
        raise ValueError(f"unknown pad mode {mode!r}, expected one of {sorted(_PAD_MODES)}")
    if mode != "constant":
        return _pad_by_copies(data, tuple(pads), None if axes is None else tuple(axes), mode)
    data, widths = _cropped_and_widths(data, pads, axes)
    return _pad_constant(data, widths, value)


def _cropped_and_widths(
    data: np.ndarray, pads: list[int], axes: list[int] | None
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``data`` cropped by the negative pads, and the (before, after) widths still to add on
    each axis."""
    crop, widths = _crop_and_widths(data.shape, tuple(pads), None if axes is None else tuple(axes))
    return data[crop], list(widths)


@functools.lru_cache(maxsize=1024)
def _crop_and_widths(
    shape: tuple[int, ...], pads: tuple[int, ...], axes: tuple[int, ...] | None
) -> tuple[tuple[slice, ...], tuple[tuple[int, int], ...]]:
    """:func:`_cropped_and_widths`' index and widths for a tensor of ``shape``, remembered: a
    model pads the same few shapes again and again (errors are raised every time)."""
    rank = len(shape)
    axes = tuple(range(rank)) if axes is None else tuple(normalize_axis(a, rank) for a in axes)
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads has {len(pads)} entries, expected 2 * {len(axes)}")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    crop = tuple(slice(-min(b, 0), max(0, n + min(e, 0))) for n, b, e in zip(shape, begin, end))
    lengths = [max(0, n + b + e) for n, b, e in zip(shape, begin, end)]
    cropped = [len(range(n)[c]) for n, c in zip(shape, crop)]
    # A crop past the far end eats into the other side's padding: the output stays n + b + e.
    widths = tuple(
        (w := min(max(b, 0), n_out), n_out - n - w) for n, b, n_out in zip(cropped, begin, lengths)
    )
    return crop, widths


def _pad_constant(data: np.ndarray, widths: list[tuple[int, int]], value: object) -> np.ndarray:
    """``data`` with ``widths`` of ``value`` (None: zero, or "" for strings) around it."""
    if value is None:
        value = "" if data.dtype == object else 0
    fill = np.asarray(value).astype(data.dtype)
    if data.dtype == object:
        return np.pad(data, widths, mode="constant", constant_values=fill)
    out = np.empty([n + b + e for n, (b, e) in zip(data.shape, widths)], data.dtype)
    np.copyto(out, fill)  # np.pad's own Python layer costs 5x this for a small tensor
    out[tuple(slice(b, b + n) for n, (b, _) in zip(data.shape, widths))] = data
    return out


def _pad_by_copies(
    data: np.ndarray, pads: tuple[int, ...], axes: tuple[int, ...] | None, mode: str
) -> np.ndarray:
    """``data`` cropped by the negative pads, then ``np.pad(data, widths, mode)`` for reflect,
    edge and wrap (a new array): one gather per padded axis while the pads take at most one
    reflection or wrap of it, else np.pad."""
    crop, takes, widths = _copies(data.shape, pads, axes, mode)
    data = data[crop]
    if takes is None:
        return np.pad(data, widths, mode=mode)  # type: ignore[call-overload]
    for axis, index in takes:
        data = data.take(index, axis=axis)
    return data if takes else data.copy()


@functools.lru_cache(maxsize=256)
def _copies(
    shape: tuple[int, ...], pads: tuple[int, ...], axes: tuple[int, ...] | None, mode: str
) -> tuple[
    tuple[slice, ...], tuple[tuple[int, np.ndarray], ...] | None, tuple[tuple[int, int], ...]
]:
    """:func:`_pad_by_copies`' crop, its (axis, positions) gathers (None: np.pad does it) and
    the widths, for a tensor of ``shape``, remembered: a stream pads one shape each call (the
    per-axis checks, the index look-ups and the crop's arithmetic are made once)."""
    crop, widths = _crop_and_widths(shape, pads, axes)
    cropped = [len(range(n)[c]) for n, c in zip(shape, crop)]
    for n, (b, e) in zip(cropped, widths):
        limit = {"reflect": n - 1, "wrap": n, "edge": n and max(b, e)}[mode]
        if max(b, e) > limit:
            return crop, None, widths
    takes = tuple(
        (axis, _pad_index(cropped[axis], b, e, mode))
        for axis, (b, e) in enumerate(widths)
        if b or e
    )
    return crop, takes, widths


@functools.lru_cache(maxsize=256)
def _pad_index(n: int, b: int, e: int, mode: str) -> np.ndarray:
    """The positions along an axis of ``n`` that its reflect, edge or wrap padding by ``b``
    before and ``e`` after reads (read-only), remembered: a stream pads one length each call."""
    index = np.arange(-b, n + e)
    if mode == "reflect":
        index = np.abs(index)
        index = np.where(index >= n, 2 * (n - 1) - index, index)
    elif mode == "edge":
        index = np.clip(index, 0, n - 1)
    else:
        index %= n
    index.flags.writeable = False
    return index


@op("Pad", 1)
def pad_v1(
    data: np.ndarray, *, paddings: list[int], mode: str = "constant", value: float = 0.0
) -> np.ndarray:
    """Return data padded by ``paddings`` ([begins..., ends...]) in ``mode``."""
    return _pad(data, paddings, mode, value)


@op("Pad", 2)
def pad_v2(
    data: np.ndarray, *, pads: list[int], mode: str = "constant", value: float = 0.0
) -> np.ndarray:
    """Return data padded (or cropped, where negative) by ``pads`` in ``mode``."""
    return _pad(data, pads, mode, value)


def _pad_plan(
    shape: tuple[int, ...], pads: tuple[int, ...], mode: str
) -> tuple[tuple[slice, ...], tuple[tuple[int, np.ndarray], ...]] | None:
    """What Pad's compiled form applies for ``mode`` to a tensor of ``shape``: the crop (``()``
    for none) and the gathers of :func:`_pad_by_copies`; None where it does not copy so (the
    constant mode, np.pad's wide reflections, an unknown mode: the NumPy form's)."""
    if mode not in _PAD_MODES[1:]:
        return None
    crop, takes, _ = _copies(shape, pads, None, mode)
    if takes is None:
        return None
    whole = all(c == slice(0, n) for c, n in zip(crop, shape))
    return (() if whole else crop), takes  # () indexes all of it: a view


#: Pad's compiled form (from opset 11): reflect, edge and wrap by the NumPy form's crop and
#: gathers, made once per shape and pads and applied in C (``_arrays.Pad``); the rest to it.
_PAD_COMPILED = (
    None
    if _ARRAYS is None
    else _ARRAYS.Pad(
        lambda data, pads, constant_value=None, axes=None, *, mode="constant": pad(
            data, pads, constant_value, axes, mode=mode
        ),
        _pad_plan,
    )
)


@op("Pad", 11, 13, 18, 19, 21, 23, 24, 25, traits=Traits(native=native_form(_PAD_COMPILED)))
def pad(
    data: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str = "constant",
) -> np.ndarray:
    """Return data padded (or cropped, where negative) by ``pads`` over ``axes`` in ``mode``."""
    value = None if constant_value is None or constant_value.size == 0 else constant_value
    return _pad(data, _ints(pads), mode, value, None if axes is None else _ints(axes))


@op("CenterCropPad", 18)
def center_crop_pad(
    data: np.ndarray, shape: np.ndarray, *, axes: list[int] | None = None
) -> np.ndarray:
    """Return data centre-cropped or zero-padded to ``shape`` over ``axes``.

    Odd crops start half a pixel left of centre; odd padding puts the extra pixel on the right.
    """
    target = _ints(shape)
    axes = list(range(data.ndim)) if axes is None else [normalize_axis(a, data.ndim) for a in axes]
    if len(target) != len(axes):
        raise ValueError(f"shape has {len(target)} entries, expected one per axis ({len(axes)})")
    begin, end = [0] * data.ndim, [0] * data.ndim
    for a, t in zip(axes, target):
        diff = t - data.shape[a]
        begin[a] = diff // 2 if diff >= 0 else -((-diff) // 2)
        end[a] = diff - begin[a]
    return _pad(data, begin + end, "constant", None)


def _space_to_depth_check(x: np.ndarray, blocksize: int, mode: str) -> None:
    if x.ndim != 4:
        raise ValueError(f"expected a 4-D input (N, C, H, W), found shape {x.shape}")
    if mode not in ("DCR", "CRD"):
        raise ValueError(f"mode must be 'DCR' or 'CRD', found {mode!r}")
    if blocksize <= 0:
        raise ValueError(f"blocksize must be positive, found {blocksize}")


@op("DepthToSpace", 1, 11, 13, 28)
def depth_to_space(x: np.ndarray, *, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """Return x with depth moved into blocksize x blocksize spatial blocks."""
    _space_to_depth_check(x, blocksize, mode)
    b, c, h, w = x.shape
    bs = blocksize
    if c % (bs * bs):
        raise ValueError(f"channels {c} are not a multiple of blocksize^2 = {bs * bs}")
    if mode == "DCR":
        tmp = x.reshape(b, bs, bs, c // bs**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        tmp = x.reshape(b, c // bs**2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return tmp.reshape(b, c // bs**2, h * bs, w * bs)


@op("SpaceToDepth", 1, 13, 28)
def space_to_depth(x: np.ndarray, *, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """Return x with blocksize x blocksize spatial blocks moved into depth."""
    _space_to_depth_check(x, blocksize, mode)
    b, c, h, w = x.shape
    bs = blocksize
    if h % bs or w % bs:
        raise ValueError(f"spatial dims {(h, w)} are not multiples of blocksize {bs}")
    tmp = x.reshape(b, c, h // bs, bs, w // bs, bs)
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return tmp.transpose(perm).reshape(b, c * bs * bs, h // bs, w // bs)


@op("ReverseSequence", 10, 28)
def reverse_sequence(
    x: np.ndarray, sequence_lens: np.ndarray, *, batch_axis: int = 1, time_axis: int = 0
) -> np.ndarray:
    """Return x with the first ``sequence_lens[i]`` time steps of each batch entry reversed."""
    if {batch_axis, time_axis} != {0, 1}:
        raise ValueError(
            f"batch_axis and time_axis must be 0 and 1, found {batch_axis}, {time_axis}"
        )
    lens = _ints(sequence_lens)
    if len(lens) != x.shape[batch_axis]:
        raise ValueError(
            f"sequence_lens has {len(lens)} entries, batch size is {x.shape[batch_axis]}"
        )
    out = x.copy()
    view, src = np.moveaxis(out, batch_axis, 0), np.moveaxis(x, batch_axis, 0)
    for i, n in enumerate(lens):
        if not 0 <= n <= x.shape[time_axis]:
            raise ValueError(f"sequence_lens[{i}] = {n} is outside [0, {x.shape[time_axis]}]")
        view[i, :n] = src[i, :n][::-1]
    return out
