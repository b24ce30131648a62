"""Tensor sequences: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase,
SequenceLength, SplitToSequence, ConcatFromSequence.

A sequence is a Python ``list`` of arrays. Kernels build new lists and never modify the one they
are given, so a sequence value may be shared between nodes.
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops.registry import op


def _position(position: np.ndarray, n: int, high: int, what: str) -> int:
    """Return a scalar position as a non-negative index, checking it lies in ``[-n, high]``."""
    if position.size != 1:
        raise ValueError(f"{what} position must be a scalar, found shape {position.shape}")
    pos = int(position.reshape(()))
    if not -n <= pos <= high:
        raise ValueError(
            f"{what} position {pos} is out of range [{-n}, {high}] for a sequence of length {n}"
        )
    return pos + n if pos < 0 else pos


def _check_dtype(seq: list[np.ndarray], tensor: np.ndarray, what: str) -> None:
    if seq and seq[0].dtype != tensor.dtype:
        raise ValueError(
            f"{what}: the tensor's dtype {tensor.dtype} differs from the sequence's {seq[0].dtype}"
        )


@op("SequenceEmpty", 11)
def sequence_empty(*, dtype: int = 1) -> list[np.ndarray]:
    """Return an empty sequence (``dtype`` only types it, the value carries no element type)."""
    return []


@op("SequenceConstruct", 11)
def sequence_construct(*tensors: np.ndarray) -> list[np.ndarray]:
    """Return the sequence of the inputs, which must all have one dtype."""
    for t in tensors[1:]:
        _check_dtype(list(tensors[:1]), t, "SequenceConstruct")
    return list(tensors)


@op("SequenceInsert", 11)
def sequence_insert(
    seq: list[np.ndarray], tensor: np.ndarray, position: np.ndarray | None = None
) -> list[np.ndarray]:
    """Return a new sequence with ``tensor`` inserted at ``position`` (default: at the back)."""
    _check_dtype(seq, tensor, "SequenceInsert")
    n = len(seq)
    pos = n if position is None else _position(position, n, n, "SequenceInsert")
    return [*seq[:pos], tensor, *seq[pos:]]


@op("SequenceAt", 11)
def sequence_at(seq: list[np.ndarray], position: np.ndarray) -> np.ndarray:
    """Return the tensor at ``position`` (negative counts from the back)."""
    return seq[_position(position, len(seq), len(seq) - 1, "SequenceAt")]


@op("SequenceErase", 11)
def sequence_erase(seq: list[np.ndarray], position: np.ndarray | None = None) -> list[np.ndarray]:
    """Return a new sequence without the tensor at ``position`` (default: the last one)."""
    n = len(seq)
    if position is None:
        if not n:
            raise ValueError("SequenceErase: cannot erase from an empty sequence")
        pos = n - 1
    else:
        pos = _position(position, n, n - 1, "SequenceErase")
    return seq[:pos] + seq[pos + 1 :]


@op("SequenceLength", 11)
def sequence_length(seq: list[np.ndarray]) -> np.ndarray:
    """Return the number of tensors in the sequence as an int64 scalar."""
    return np.asarray(len(seq), dtype=np.int64)


@op("SplitToSequence", 11, 24)
def split_to_sequence(
    x: np.ndarray, split: np.ndarray | None = None, *, axis: int = 0, keepdims: int = 1
) -> list[np.ndarray]:
    """Split ``x`` along ``axis`` into chunks of ``split`` (scalar size or 1-D lengths).

    Without ``split`` the chunks have length 1 and ``keepdims=0`` drops the split axis.
    """
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"SplitToSequence axis {axis} is out of range for rank {x.ndim}")
    axis %= x.ndim
    length = x.shape[axis]
    if split is None:
        parts = np.split(x, range(1, length), axis=axis) if length else []
        return parts if keepdims else [np.squeeze(p, axis=axis) for p in parts]
    sizes = [int(s) for s in split.reshape(-1)]
    if any(s < 0 for s in sizes):
        raise ValueError(f"SplitToSequence split values must not be negative, found {sizes}")
    if split.ndim == 0:
        if sizes[0] == 0:
            raise ValueError("SplitToSequence scalar split must be positive, found 0")
        whole, rest = divmod(length, sizes[0])
        sizes = [sizes[0]] * whole + ([rest] if rest else [])
    elif sum(sizes) != length:
        raise ValueError(
            f"SplitToSequence split {sizes} sums to {sum(sizes)}, expected the axis length {length}"
        )
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis) if sizes else []


@op("ConcatFromSequence", 11)
def concat_from_sequence(seq: list[np.ndarray], *, axis: int, new_axis: int = 0) -> np.ndarray:
    """Concatenate the sequence's tensors along ``axis``, or stack them on a new axis."""
    if not seq:
        raise ValueError("ConcatFromSequence needs a non-empty sequence, found an empty one")
    rank = seq[0].ndim + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise ValueError(f"ConcatFromSequence axis {axis} is out of range for rank {rank}")
    return np.stack(seq, axis=axis) if new_axis else np.concatenate(seq, axis=axis)
