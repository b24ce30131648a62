"""The tree ensembles' compiled form: a :class:`~onnxflow.ops.ml.trees.Forest` packed once, at
compile time, into the node words :mod:`onnxflow.native._trees` walks.

Each node becomes ``W`` int32 words: its threshold (float32: one word, float64: two), then
``fm`` (the feature in bits 0-26, bit 27 for a set-membership node, bits 28-31: which of the
comparison codes 0..3 of the Forest's table take ``no``), ``yes`` and ``no``. A leaf leads to
itself and keeps its leaf slot in ``no``. Sums (SUM, AVERAGE) are taken in the compiled loop in
the NumPy form's order; MIN and MAX take the compiled walk's leaf slots to the NumPy aggregate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from onnxflow.compile.context import usable_cpus

#: A :class:`onnxflow.ops.ml.trees.Forest` (not imported: that module imports this one).
Forest = Any

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


def pack(
    mod: ModuleType, forest: Forest, chunk_values: int, threads: int = 1
) -> dict[type, Any] | None:
    """``forest`` packed for ``mod`` (:mod:`onnxflow.native._trees`), one form per float type
    of the input; None when it does not fit the words (2**27 features, 2**28 nodes) or has no
    trees. ``chunk_values``: the NumPy aggregate's gathered values per chunk (its rows per
    chunk decide the order it sums in); ``threads``: the most threads its sums take (0: the
    CPUs the process may use, fewer while the machine's load keeps some busy). An oblivious
    forest (:func:`oblivious_levels`) is walked by its levels."""
    n = len(forest.feature)
    n_trees = len(forest.roots)
    if not n_trees or n >= 1 << 28 or (n and forest.feature.max() >= _MAX_FEATURES):
        return None
    table = forest.next.reshape(n, 4)
    yes = table[:, 0]
    takes_no = table != yes[:, None]
    child = np.where(forest.interior, table[np.arange(n), np.argmax(takes_no, axis=1)], yes)
    no = np.where(forest.interior, child, forest.leaf_slot)
    shifts = np.arange(_CODE_SHIFT, _CODE_SHIFT + 4, dtype=np.uint64)
    member = np.zeros(n, bool) if forest.memberships is None else forest.memberships[0].slot >= 0
    # a NaN threshold leaves every comparison unordered: all codes take code 3's child
    unordered = np.isnan(forest.thresholds[0]) & ~member
    takes_no[unordered] = takes_no[unordered, 3:]
    fm = forest.feature.astype(np.uint64) | np.where(member, _MEMBER_BIT, 0).astype(np.uint64)
    fm |= (takes_no.astype(np.uint64) << shifts).sum(axis=1, dtype=np.uint64)
    words = [fm.astype(np.uint32).view(np.int32), yes.astype(np.int32), no.astype(np.int32)]
    roots = forest.roots.astype(np.int32)
    depth = _tree_depths(table, forest.interior, forest.roots, forest.depth)
    chunk = max(1, chunk_values // max(1, n_trees * forest.weights.shape[1]))
    weights = np.ascontiguousarray(forest.weights, np.float64)
    levels = oblivious_levels(forest, (yes, child), fm.astype(np.uint32), depth)
    packed = {}
    for dtype, thresholds, pad in ((np.float32, forest.thresholds[1], 0),
                                   (np.float64, forest.thresholds[0], 1)):  # fmt: skip
        members = _members(forest, n, dtype)
        packed[dtype] = mod.PackedForest(
            _words(thresholds, words, pad), _WIDTH[dtype], roots, depth, members.start,
            members.end, members.values.view(np.uint8), weights, chunk,
        )  # fmt: skip
        packed[dtype].threads = threads if threads > 0 else usable_cpus()
        packed[dtype].follow_load = threads <= 0
        if levels is not None:
            packed[dtype].walk_oblivious(*levels)
    return packed


#: The most levels of a tree the oblivious walk takes (its table holds 2**levels leaf slots).
OBLIVIOUS_LEVELS = 12


def oblivious_levels(
    forest: Forest, children: tuple[np.ndarray, np.ndarray], fm: np.ndarray, depth: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The levels and leaf tables of an oblivious forest, for ``PackedForest.walk_oblivious``:
    each interior node of a tree's level tests what the level's first does (the same ``fm``
    word, ``children``' (yes, no) taken on the same outcomes, and the same thresholds as
    float64 and float32); None when one does not, a node tests set membership, or a tree is
    deeper than :data:`OBLIVIOUS_LEVELS`."""
    top, trees = int(depth.max(initial=0)), len(forest.roots)
    if top > OBLIVIOUS_LEVELS or (fm & _MEMBER_BIT).any():
        return None
    yes, no = children
    same = (fm, forest.thresholds[0].view(np.int64), forest.thresholds[1].view(np.int32))
    first = np.zeros((trees, top), np.int64)
    tree, node = np.arange(trees), forest.roots
    for d in range(top):
        inner = forest.interior[node]
        tree, node = tree[inner], node[inner]
        first[tree[::-1], d] = node[::-1]  # the first interior node of each tree's level
        if any((a[node] != a[first[tree, d]]).any() for a in same):
            return None
        tree, node = np.concatenate([tree, tree]), np.concatenate([yes[node], no[node]])
    index = np.arange(1 << top)
    node = np.repeat(forest.roots[:, None], 1 << top, axis=1)
    for d in range(top):  # every outcome index walked: bit d (from the top) takes ``no``
        taken = np.where((index >> (top - 1 - d)) & 1, no[node], yes[node])
        node = np.where(forest.interior[node], taken, node)
    slots = forest.leaf_slot[node]
    table = [slots[t, :: 1 << (top - int(depth[t]))] for t in range(trees)]
    starts = [np.zeros(1, np.int64), np.cumsum(depth), np.cumsum(1 << depth.astype(np.int64))]
    level_node = first[np.arange(top) < depth[:, None]]
    return (
        level_node.astype(np.int32),
        np.concatenate(starts[:2]).astype(np.int32),
        np.concatenate(table).astype(np.int32),
        np.concatenate([starts[0], starts[2]]).astype(np.int32),
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


def _members(forest: Forest, n: int, dtype: type) -> _Members:
    """The membership sets of each node (empty where the node tests none), in ``dtype``."""
    if forest.memberships is None:
        none = np.zeros(n + 1, np.int32)
        return _Members(none, none, np.zeros(1, dtype))
    return _sets(forest.memberships[dtype == np.float32], dtype)


def _sets(membership: Any, dtype: type) -> _Members:
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


class CompiledScores:
    """The [N, F] -> [N, targets] float64 aggregate of a forest's votes, walked compiled: the
    same values as the NumPy form's ``forest.aggregate(forest.leaves(x), how)``. Its packed
    forests (``packed``, by input float type) also serve :func:`compiled_finish`'s one call."""

    def __init__(
        self, packed: dict[type, Any], forest: Forest, how: str,
        fallback: Callable[[np.ndarray], np.ndarray],
    ) -> None:  # fmt: skip
        self.packed, self.forest, self.how, self.fallback = packed, forest, how, fallback
        self.n_trees = len(forest.roots)
        self.top_feature = int(forest.feature.max(initial=0))
        self.targets = forest.weights.shape[1]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n, n_features = x.shape
        if not n:
            return self.fallback(x)
        if self.top_feature >= n_features:
            raise ValueError(f"a node tests feature {self.top_feature}, input has {n_features}")
        x = np.ascontiguousarray(x, np.float64 if x.dtype == np.float64 else np.float32)
        walker = self.packed[x.dtype.type]
        if self.how not in ("SUM", "AVERAGE"):
            slots = np.empty((n, self.n_trees), np.int32)
            walker.slots(x, slots)
            return self.forest.aggregate_slots(slots, self.how)
        out = np.empty((n, self.targets))
        walker.sums(x, out)
        return out / self.n_trees if self.how == "AVERAGE" else out


def compiled_scores(
    packed: dict[type, Any], forest: Forest, how: str, fallback: Callable[[np.ndarray], np.ndarray]
) -> Callable[[np.ndarray], np.ndarray]:
    """:class:`CompiledScores` of the packed forest."""
    return CompiledScores(packed, forest, how, fallback)


#: post_transform codes of :class:`onnxflow.native._trees.Post` (PROBIT has none).
_TRANSFORMS = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3}
_REGRESSION, _CLASSES, _ONE_SCORE = range(3)
_NONE = np.zeros(0, np.int64)


def compiled_finish(
    mod: ModuleType | None,
    spec: Any,
    score: Callable[[np.ndarray], np.ndarray],
    fallback: Callable[[np.ndarray], Any],
) -> Callable[[np.ndarray], Any]:
    """A tree ensemble's [N, F] -> result: its aggregate (``score``) finished as ``spec``
    (a :class:`onnxflow.ops.ml.trees.Finish`) says by ``mod``'s ``Post``
    (:mod:`onnxflow.native._trees`), in one call of the packed forest for a float32 or
    float64 input when ``score`` is :class:`CompiledScores` of a sum; ``fallback`` (the NumPy
    form) where a Post does not apply. Results: bit for bit, but for libm's exp against
    NumPy's (within one float32 ulp) under SOFTMAX, SOFTMAX_ZERO and LOGISTIC."""
    labels = spec.labels
    if mod is None or spec.transform not in _TRANSFORMS or len(spec.base) < 1:
        return fallback
    base = np.ascontiguousarray(spec.base, np.float64)
    mode = _REGRESSION if labels is None else _ONE_SCORE if spec.one_score else _CLASSES
    mask = np.zeros(0) if spec.never_voted is None else np.asarray(spec.never_voted, np.float64)
    ints = labels is not None and labels.dtype == np.int64
    post = mod.Post(
        base, _TRANSFORMS[spec.transform], mode, mask, labels if ints else _NONE,
        0.5 if spec.all_positive else 0.0, spec.all_positive,
    )  # fmt: skip
    cols = 2 if mode == _ONE_SCORE else len(base)
    finish = _Finish(post, cols, mode != _REGRESSION, None if ints else labels)
    if not isinstance(score, CompiledScores) or score.how not in ("SUM", "AVERAGE"):
        return lambda x: finish.aggregate(score(x))
    return _fused(mod, score, finish)


@dataclass(frozen=True)
class _Finish:
    """A Post and what its results look like: ``cols`` scores per row, labels for a
    classifier (``labels``: the labels to index; None: the Post writes int64 labels)."""

    post: Any
    cols: int
    classifier: bool
    labels: np.ndarray | None

    def outputs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Empty scores and labels for n rows (no labels for a regressor)."""
        return np.empty((n, self.cols), np.float32), np.empty(n if self.classifier else 0, np.int64)

    def result(self, out: np.ndarray, top: np.ndarray) -> Any:
        """The kernel's result: the scores, or (labels, scores)."""
        if not self.classifier:
            return out
        return (top if self.labels is None else self.labels[top]), out

    def aggregate(self, summed: np.ndarray) -> Any:
        """The result of an [N, targets] float64 aggregate."""
        summed = np.ascontiguousarray(summed, np.float64)
        out, top = self.outputs(len(summed))
        self.post(summed, out, top)
        return self.result(out, top)


def _fused(mod: ModuleType, score: CompiledScores, finish: _Finish) -> Callable[[np.ndarray], Any]:
    """[N, F] -> result in one call of ``mod.Predict`` (walk, sums, Post, new outputs) for a
    contiguous float32 or float64 input with the features the forest tests; else in two
    steps."""
    return mod.Predict(
        score.packed[np.float32], score.packed[np.float64], finish.post, score.how == "AVERAGE",
        finish.classifier, finish.labels, finish.cols, score.top_feature,
        lambda x: finish.aggregate(score(x)),
    )  # fmt: skip
