"""The tree ensembles' compiled form: a :class:`~onnxflow.ops.ml.trees.Forest` packed once, at
compile time, into the node words :mod:`onnxflow.native._trees` walks.

Each node becomes ``W`` int32 words: its threshold (float32: one word, float64: two), then
``fm`` (the feature in bits 0-26, bit 27 for a set-membership node, bits 28-31: which of the
comparison codes 0..3 of the Forest's table take ``no``), ``yes`` and ``no``. A leaf leads to
itself and keeps its leaf slot in ``no``. Sums (SUM, AVERAGE) are taken in the compiled loop in
the NumPy form's order; MIN and MAX take the compiled walk's leaves to the NumPy aggregate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from onnxflow.ops.ml.trees import Forest, _Membership

#: Features a packed node can name (bits 0-26 of its ``fm`` word).
_MAX_FEATURES = 1 << 27
_MEMBER_BIT = 1 << 27
_CODE_SHIFT = 28
#: A packed node's words: threshold words, fm, yes, no (and a pad word after a float64).
_WIDTH = {np.float32: 4, np.float64: 6}


@dataclass(frozen=True)
class _Members:
    """Per node, its set [start, end) in ``values`` (sorted), in one float type."""

    start: np.ndarray
    end: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class PackedForest:
    """A Forest packed for the compiled walk, in float32 and float64."""

    forest: Forest
    nodes: dict[type, np.ndarray]  # by float type: [nodes * width] int32 words
    roots: np.ndarray  # int32 [trees]
    depth: np.ndarray  # int32 [trees]: steps from the root to the tree's deepest leaf
    members: dict[type, _Members]
    chunk: int  # rows per chunk of the NumPy form's aggregate

    def leaves(self, mod: ModuleType, x: np.ndarray) -> np.ndarray:
        """The [N, trees] node each row of ``x`` (float32 or float64, contiguous) reaches."""
        out = np.empty((x.shape[0], len(self.roots)), np.int32)
        mod.leaves(x, *self._walk_args(x.dtype.type), out)
        return out

    def sums(self, mod: ModuleType, x: np.ndarray) -> np.ndarray:
        """The [N, targets] float64 sum of the leaves' weights over the trees, row by row."""
        out = np.zeros((x.shape[0], self.forest.weights.shape[1]))
        mod.sums(x, *self._walk_args(x.dtype.type), self.forest.weights, self.chunk, out)
        return out

    def _walk_args(self, dtype: type) -> tuple[np.ndarray, ...]:
        members = self.members[dtype]
        return self.nodes[dtype], self.roots, self.depth, members.start, members.end, members.values


def pack(forest: Forest, chunk_values: int) -> PackedForest | None:
    """``forest`` packed for the compiled walk; None when it does not fit the words (over
    2**27 features or 2**28 nodes) or has no trees. ``chunk_values``: the NumPy aggregate's
    gathered values per chunk (its rows per chunk decide the order it sums in)."""
    n = len(forest.feature)
    n_trees = len(forest.roots)
    if not n_trees or n >= 1 << 28 or (n and forest.feature.max() >= _MAX_FEATURES):
        return None
    table = forest.next.reshape(n, 4)
    yes = table[:, 0]
    takes_no = table != yes[:, None]
    no = np.where(forest.interior, table[np.arange(n), np.argmax(takes_no, axis=1)], 0)
    no = np.where(forest.interior, no, forest.leaf_slot)
    fm = forest.feature.astype(np.uint64)
    fm |= (
        takes_no.astype(np.uint64) << np.arange(_CODE_SHIFT, _CODE_SHIFT + 4, dtype=np.uint64)
    ).sum(axis=1, dtype=np.uint64)
    members = _members(forest, n)
    if forest.memberships is not None:
        fm |= np.where(forest.memberships[0].slot >= 0, _MEMBER_BIT, 0).astype(np.uint64)
    words = [fm.astype(np.uint32).view(np.int32), yes.astype(np.int32), no.astype(np.int32)]
    nodes = {
        np.float32: _words(forest.thresholds[1], words, 0),
        np.float64: _words(forest.thresholds[0], words, 1),
    }
    return PackedForest(
        forest=forest,
        nodes=nodes,
        roots=forest.roots.astype(np.int32),
        depth=_tree_depths(table, forest.interior, forest.roots, forest.depth),
        members=members,
        chunk=max(1, chunk_values // max(1, n_trees * forest.weights.shape[1])),
    )


def _words(thresholds: np.ndarray, words: list[np.ndarray], pad: int) -> np.ndarray:
    """The flat int32 words of every node: threshold, fm, yes, no (and ``pad`` zero words)."""
    n = len(thresholds)
    threshold = np.ascontiguousarray(thresholds).view(np.int32).reshape(n, -1)
    columns = [threshold, *(w.reshape(n, 1) for w in words), np.zeros((n, pad), np.int32)]
    return np.ascontiguousarray(np.concatenate(columns, axis=1)).reshape(-1)


def _tree_depths(
    table: np.ndarray, interior: np.ndarray, roots: np.ndarray, depth: int
) -> np.ndarray:
    """Each tree's depth: the steps from its root to its deepest leaf."""
    height = np.zeros(len(interior), np.int64)
    for _ in range(depth):
        height = np.where(interior, 1 + height[table].max(axis=1), 0)
    return height[roots].astype(np.int32)


def _members(forest: Forest, n: int) -> dict[type, _Members]:
    """The membership sets of each node (empty where the node tests none), by float type."""
    if forest.memberships is None:
        none = np.zeros(n + 1, np.int32)
        return {dt: _Members(none, none, np.zeros(1, dt)) for dt in (np.float64, np.float32)}
    as_given, as_float = forest.memberships
    return {np.float64: _sets(as_given, np.float64), np.float32: _sets(as_float, np.float32)}


def _sets(membership: _Membership, dtype: type) -> _Members:
    """Each node's member values as sorted runs of one array in ``dtype``."""
    width = len(membership.values)
    keys = membership.keys[membership.keys >= 0]
    values = membership.values[keys % width].astype(dtype)
    slot = membership.slot
    start = np.searchsorted(keys, np.maximum(slot, 0) * width).astype(np.int32)
    end = np.searchsorted(keys, (np.maximum(slot, 0) + 1) * width).astype(np.int32)
    start, end = np.where(slot >= 0, start, 0), np.where(slot >= 0, end, 0)
    return _Members(
        start.astype(np.int32), end.astype(np.int32), np.append(values, 0).astype(dtype)
    )


def compiled_scores(
    mod: ModuleType, packed: PackedForest, how: str, fallback: Callable[[np.ndarray], np.ndarray]
) -> Callable[[np.ndarray], np.ndarray]:
    """The [N, F] -> [N, targets] float64 aggregate of the forest's votes, walked compiled:
    the same values as the NumPy form's ``forest.aggregate(forest.leaves(x), how)``."""
    forest = packed.forest
    n_trees = len(packed.roots)

    def scores(x: np.ndarray) -> np.ndarray:
        if not x.shape[0]:
            return fallback(x)
        forest.check_features(x)
        x = np.ascontiguousarray(x, np.float64 if x.dtype == np.float64 else np.float32)
        if how not in ("SUM", "AVERAGE"):
            return forest.aggregate(packed.leaves(mod, x), how)
        out = packed.sums(mod, x)
        return out / n_trees if how == "AVERAGE" else out

    return scores
