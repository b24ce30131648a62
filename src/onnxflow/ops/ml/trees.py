"""ai.onnx.ml tree ensembles, evaluated for all rows and all trees at once.

TreeEnsemble-5, TreeEnsembleClassifier-1/3/5, TreeEnsembleRegressor-1/3/5.

Every encoding is compiled into one :class:`Forest`: a flat table of nodes (leaves included)
where ``next[node, code]`` is the child taken for a comparison outcome ``code`` (0: x < t,
1: x == t, 2: x > t, 3: unordered, i.e. NaN), so a node's mode and its missing-value rule are
folded into the table. Evaluation advances a [rows, trees] array of node indices depth times;
leaves point to themselves.

Each kernel takes how it scores rows as its positional-only ``scores``: the NumPy form
(:func:`forest_scores`) or, as its compiled form declares, the forest packed once and walked by
:mod:`onnxflow.native._trees` (:func:`packed_scores`), which gives the same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops.ml import packed_forest
from onnxflow.ops.ml.common import (
    ML_DOMAIN,
    POST_TRANSFORMS,
    as_2d,
    binary_scores,
    check_post_transform,
    class_labels,
    transform_scores,
)
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
_MODE_NAMES = {
    "BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
    "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ, "LEAF": LEAF,
}  # fmt: skip
#: Whether the true branch is taken, by mode, for x < t, x == t, x > t (member: in set, -, out).
_TRUTH = np.array(
    [[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 0, 1], [0, 1, 0], [1, 0, 1], [1, 0, 0]], bool
)
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
_CHUNK = 1 << 22  # gathered leaf values per aggregation chunk


@dataclass(frozen=True)
class _Membership:
    """Sets of BRANCH_MEMBER nodes: (slot, value) pairs encoded as sorted integer keys."""

    slot: np.ndarray  # per node, its set's slot (or -1)
    values: np.ndarray  # sorted unique member values
    keys: np.ndarray  # sorted slot * len(values) + rank of value

    def contains(self, nodes: np.ndarray, x: np.ndarray) -> np.ndarray:
        rank = np.minimum(np.searchsorted(self.values, x), len(self.values) - 1)
        key = self.slot[nodes] * len(self.values) + rank
        pos = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        return (self.values[rank] == x) & (self.keys[pos] == key)


@dataclass(frozen=True)
class Forest:
    """A compiled tree ensemble: traversal tables and per-leaf target weights."""

    next: np.ndarray  # [nodes * 4] child index by comparison code
    feature: np.ndarray  # [nodes]
    thresholds: tuple[np.ndarray, np.ndarray]  # [nodes] as given (float64), and as float32
    roots: np.ndarray  # [trees]
    depth: int
    memberships: tuple[_Membership, _Membership] | None  # as given, and rounded to float32
    leaf_slot: np.ndarray  # [nodes] row of `weights` (the last row: no vote)
    weights: np.ndarray  # [slots + 1, targets] aggregated votes of each leaf
    voted: np.ndarray  # [slots + 1, targets] whether the leaf votes for the target
    interior: np.ndarray  # [nodes] whether the node is not a leaf

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """Return the [N, trees] leaf reached by every row of an [N, F] input in every tree.

        Thresholds are compared in double for a double input and in float otherwise. Each step
        advances the (row, tree) pairs still walking; once half of them has reached its
        leaf, those are set aside, so shallow leaves do not pay for the deepest one.
        """
        n, n_features = x.shape
        self.check_features(x)
        single = x.dtype != np.float64
        if single:
            x = x.astype(np.float32)
        flat = x.reshape(-1)  # float32 against float32 thresholds: the same comparisons
        reached = np.broadcast_to(self.roots, (n, len(self.roots))).reshape(-1).copy()
        pos = np.flatnonzero(self.interior.take(reached))  # the (row, tree) pairs still walking
        node = reached[pos]
        row = pos // max(1, len(self.roots)) * n_features
        for _ in range(self.depth):
            node = self._step(node, flat.take(row + self.feature.take(node)), single)
            # a sample of every 16th pair tells whether half arrived: set them aside then
            if np.count_nonzero(self.interior.take(node[::16])) * 2 < len(node[::16]):
                walking = self.interior.take(node)
                reached[pos] = node
                pos, node, row = pos[walking], node[walking], row[walking]
        reached[pos] = node
        return reached.reshape(n, len(self.roots))

    def check_features(self, x: np.ndarray) -> None:
        """Raise ValueError when a node tests a feature the [N, F] input ``x`` lacks."""
        n, n_features = x.shape
        if len(self.feature) and n and self.feature.max() >= n_features:
            raise ValueError(f"a node tests feature {self.feature.max()}, input has {n_features}")

    def _step(self, node: np.ndarray, xv: np.ndarray, single: bool) -> np.ndarray:
        """The children that ``node`` leads to for the values ``xv`` they test (a leaf stays)."""
        t = self.thresholds[single].take(node)
        less_equal, greater = xv <= t, xv > t
        # the code: 0 less, 1 equal, 2 greater, 3 NaN (neither <= nor >), summed from masks
        code = np.equal(xv, t).view(np.uint8)
        code += np.equal(greater, less_equal).view(np.uint8)
        code += np.logical_not(less_equal).view(np.uint8) << 1
        if self.memberships is not None:
            code = code.astype(np.intp)
            _member_codes(self.memberships[single], node, xv, code)
        at = node * 4
        at += code
        return self.next.take(at)

    def aggregate(self, leaves: np.ndarray, how: str) -> np.ndarray:
        """Return the [N, targets] aggregate (float64) of the leaves' votes over the trees."""
        return self.aggregate_slots(self.leaf_slot.take(leaves), how)

    def aggregate_slots(self, slots: np.ndarray, how: str) -> np.ndarray:
        """:meth:`aggregate` of the leaves' slots (rows of ``weights``), [N, trees]."""
        n, n_trees = slots.shape
        out = np.zeros((n, self.weights.shape[1]))
        step = max(1, _CHUNK // max(1, n_trees * self.weights.shape[1]))
        by_target = np.ascontiguousarray(self.weights.T)
        for start in range(0, n, step):
            chunk = slots[start : start + step]
            if how in ("SUM", "AVERAGE"):  # per target, trees summed in order over rows
                for j, column in enumerate(by_target):
                    out[start : start + step, j] = column.take(chunk.T).sum(axis=0)
                continue
            w = self.weights[chunk]
            best = w.min(axis=1) if how == "MIN" else w.max(axis=1)
            out[start : start + step] = np.where(self.voted[chunk].any(axis=1), best, 0.0)
        return out / n_trees if how == "AVERAGE" and n_trees else out


def _member_codes(
    membership: _Membership, idx: np.ndarray, xv: np.ndarray, code: np.ndarray
) -> None:
    """Set the comparison code of set-membership nodes: 0 inside the set, 2 outside, 3 NaN."""
    where = np.flatnonzero(membership.slot.take(idx) >= 0)
    if where.size:
        v = xv.reshape(-1)[where]
        inside = membership.contains(idx.reshape(-1)[where], v)
        code.reshape(-1)[where] = np.where(inside, 0, np.where(np.isnan(v), 3, 2))


#: How a tree ensemble's kernel scores its rows: ``scores(forest, aggregate)`` gives the
#: function from an [N, F] input to its [N, targets] float64 aggregate.
Scores = Callable[["Forest", str], Callable[[np.ndarray], np.ndarray]]
_TREES = compiled.module("_trees")


def forest_scores(forest: Forest, how: str) -> Callable[[np.ndarray], np.ndarray]:
    """The NumPy form: every row walked level by level, then aggregated."""

    def scores(x: np.ndarray) -> np.ndarray:
        return forest.aggregate(forest.leaves(x), how)

    return scores


def packed_scores(forest: Forest, how: str, threads: int = 1) -> Callable[[np.ndarray], np.ndarray]:
    """The compiled form (:mod:`onnxflow.native._trees`): the forest packed once, each row
    walked once per tree, many rows over up to ``threads`` threads; the NumPy form where the
    forest does not pack."""
    packed = None if _TREES is None else packed_forest.pack(_TREES, forest, _CHUNK, threads)
    if packed is None:
        return forest_scores(forest, how)
    return packed_forest.compiled_scores(packed, forest, how, forest_scores(forest, how))


@dataclass(frozen=True)
class Finish:
    """What a kernel does to its [N, targets] float64 aggregate: add ``base`` (one per
    target; -0.0 adds nothing to any value), pick each row's top class among ``labels``
    (None: a regressor; ``never_voted``: 0 or -inf per class, added before the argmax),
    apply ``transform`` and round to float32. A classifier with ``one_score`` expands the
    positive class's score into two columns."""

    transform: str
    base: np.ndarray
    labels: np.ndarray | None = None
    never_voted: np.ndarray | None = None
    one_score: bool = False
    all_positive: bool = False


#: How a kernel finishes its aggregate: ``finish(Finish(...), score)`` gives the function
#: from an [N, F] input to the float32 scores (a regressor) or (labels, scores) of its
#: aggregate ``score(x)``.
Finisher = Callable[[Finish, Callable[[np.ndarray], np.ndarray]], Callable[[np.ndarray], Any]]


def numpy_finish(spec: Finish, score: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """The NumPy form of :class:`Finish`: step by step on the whole aggregate ``score(x)``."""
    transform, base, labels = spec.transform, spec.base, spec.labels
    if labels is None:
        return lambda x: transform_scores(score(x) + base, transform).astype(np.float32)
    never_voted = spec.never_voted if spec.never_voted is not None else np.zeros(len(base))
    all_voted = bool((never_voted == 0).all())  # adding zeros changes no argmax
    threshold = 0.5 if spec.all_positive else 0.0

    def classes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        summed = score(x)
        if spec.one_score:
            positive = summed[:, 0] + base[0]
            top = labels[(positive > threshold).astype(np.intp)]
            return top, binary_scores(positive, transform, spec.all_positive).astype(np.float32)
        summed = summed + base
        top = labels[np.argmax(summed if all_voted else summed + never_voted, axis=1)]
        return top, transform_scores(summed, transform).astype(np.float32)

    return classes


def packed_finish(spec: Finish, score: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """The compiled form of :class:`Finish` (:mod:`onnxflow.native._trees`): each row
    finished in one pass, in the same call as the walk for :func:`packed_scores`; the NumPy
    form where it does not apply (PROBIT, no classes)."""
    return packed_forest.compiled_finish(_TREES, spec, score, numpy_finish(spec, score))


def _compiled(builder: Callable[[], Callable[..., Any]]) -> Traits:
    """The traits declaring the compiled form of the tree-ensemble ``builder()``: the builder
    with :func:`packed_scores` (none when the compiled module was not built)."""
    if _TREES is None:
        return Traits()

    def form(node: NodeContext, **attrs: Any) -> Any:
        scores = functools.partial(packed_scores, threads=node.threads)
        step = builder()(node, scores, packed_finish, **attrs)
        fn = getattr(step, "fn", step)  # a Built, or the step itself
        if hasattr(fn, "__qualname__"):  # named apart from the NumPy form's in `onnxflow code`
            fn.__name__ = "run_compiled"
            fn.__qualname__ = fn.__qualname__.rpartition(".")[0] + ".run_compiled"
        return step

    return Traits(native=native_form(form))


@dataclass(frozen=True)
class _Nodes:
    """The node columns of a tree ensemble (leaves are nodes of mode LEAF)."""

    modes: np.ndarray
    features: np.ndarray
    thresholds: np.ndarray
    true_child: np.ndarray
    false_child: np.ndarray
    tracks_true: np.ndarray


def _build_forest(
    nodes: _Nodes,
    roots: np.ndarray,
    votes: tuple[np.ndarray, np.ndarray, np.ndarray],
    n_targets: int,
    how: str,
    members: list[np.ndarray],
) -> Forest:
    """Compile node columns and leaf votes (target, node, weight) into a Forest."""
    table = _transitions(nodes)
    interior = nodes.modes != LEAF
    leaf_slot, weights, voted = _leaf_votes(votes, len(nodes.modes), n_targets, how)
    exact = np.where(interior, nodes.thresholds, 0.0).astype(np.float64)
    memberships = [_membership(nodes.modes, members, dt) for dt in (np.float64, np.float32)]
    return Forest(
        next=table.reshape(-1),
        feature=np.where(interior, nodes.features, 0).astype(np.intp),
        thresholds=(exact, exact.astype(np.float32)),
        roots=roots.astype(np.intp),
        depth=_depth(table, interior, roots),
        memberships=None if memberships[0] is None else tuple(memberships),
        leaf_slot=leaf_slot,
        weights=weights,
        voted=voted,
        interior=interior,
    )


def _transitions(nodes: _Nodes) -> np.ndarray:
    """Return the [nodes, 4] child taken by comparison code; leaves point to themselves."""
    modes = nodes.modes
    n = len(modes)
    interior = modes != LEAF
    for name, child in (("true", nodes.true_child), ("false", nodes.false_child)):
        bad = interior & ((child < 0) | (child >= n))
        if bad.any():
            raise ValueError(f"node {int(np.argmax(bad))} has a {name} child outside the tree")
    truth = _TRUTH[np.minimum(modes, MEMBER)]
    nan_true = nodes.tracks_true.astype(bool) | (modes == NEQ)
    table = np.empty((n, 4), np.intp)
    for code in range(3):
        table[:, code] = np.where(truth[:, code], nodes.true_child, nodes.false_child)
    table[:, 3] = np.where(nan_true, nodes.true_child, nodes.false_child)
    table[~interior] = np.arange(n)[~interior, None]
    return table


def _leaf_votes(
    votes: tuple[np.ndarray, np.ndarray, np.ndarray], n: int, n_targets: int, how: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (slot of each node, [slots + 1, targets] combined weights, which were voted).

    Nodes without votes share the last slot, which holds the aggregate's neutral value.
    """
    node_target, node_id, weight = votes
    if len(node_target) and (node_target.min() < 0 or node_target.max() >= n_targets):
        raise ValueError(f"a leaf votes for target {node_target.max()}, not in [0, {n_targets})")
    used, slot_of_vote = np.unique(node_id, return_inverse=True)
    leaf_slot = np.full(n, len(used), np.intp)
    leaf_slot[used] = np.arange(len(used))
    fill = {"MIN": np.inf, "MAX": -np.inf}.get(how, 0.0)
    weights = np.full((len(used) + 1, n_targets), fill)
    voted = np.zeros_like(weights, bool)
    combine = {"MIN": np.minimum, "MAX": np.maximum}.get(how, np.add)
    combine.at(weights, (slot_of_vote, node_target), weight)
    voted[slot_of_vote, node_target] = True
    return leaf_slot, weights, voted


def _depth(table: np.ndarray, interior: np.ndarray, roots: np.ndarray) -> int:
    """Return the number of steps from the roots to the deepest leaf (cycles are errors)."""
    frontier, depth = _distinct(roots[interior[roots]]), 0
    while frontier.size:
        depth += 1
        if depth > len(interior):
            raise ValueError("the trees contain a cycle")
        children = _distinct(table[frontier])
        frontier = children[interior[children]]
    return depth


def _distinct(ids: np.ndarray) -> np.ndarray:
    """The distinct integers of ``ids``, sorted (``np.unique(ids)``), by one sort: a plain
    ``np.unique`` call imports numpy.ma (45M instructions, at a process's first call) to ask
    whether its argument is masked, and a tree model's first session paid for it."""
    s = np.sort(ids, axis=None)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if s.size else s


def _membership(modes: np.ndarray, members: list[np.ndarray], dtype: np.dtype) -> Any:
    member_nodes = np.flatnonzero(modes == MEMBER)
    if not member_nodes.size:
        return None
    if len(members) != member_nodes.size:
        raise ValueError(
            f"{member_nodes.size} BRANCH_MEMBER nodes but {len(members)} sets in membership_values"
        )
    slot = np.full(len(modes), -1, np.intp)
    slot[member_nodes] = np.arange(member_nodes.size)
    pairs = [(s, v) for s, vals in enumerate(members) for v in vals.astype(dtype).tolist()]
    values = np.unique(np.array([v for _, v in pairs] or [0.0], np.float64))
    keys = np.unique(
        np.array([s * len(values) + np.searchsorted(values, v) for s, v in pairs] or [-1])
    )
    return _Membership(slot, values, keys)


def _split_members(membership_values: np.ndarray | None) -> list[np.ndarray]:
    """Split the NaN-delimited membership_values into one array per BRANCH_MEMBER node."""
    if membership_values is None:
        return []
    sets: list[list[float]] = [[]]
    for v in np.asarray(membership_values, np.float64).reshape(-1).tolist():
        if np.isnan(v):
            sets.append([])
        else:
            sets[-1].append(v)
    if not sets[-1]:
        sets.pop()
    return [np.array(s, np.float64) for s in sets]


# Over 40 lines only for its signature: one keyword per schema attribute (17 of them).
@op("TreeEnsemble", 5, domain=ML_DOMAIN, build=True, traits=_compiled(lambda: tree_ensemble))
def tree_ensemble(
    node: NodeContext,
    scores: Scores = forest_scores,
    finish: Finisher = numpy_finish,
    /,
    *,
    tree_roots: list[int],
    nodes_modes: np.ndarray,
    nodes_featureids: list[int],
    nodes_splits: np.ndarray,
    nodes_truenodeids: list[int],
    nodes_trueleafs: list[int],
    nodes_falsenodeids: list[int],
    nodes_falseleafs: list[int],
    leaf_targetids: list[int],
    leaf_weights: np.ndarray,
    n_targets: int | None = None,
    aggregate_function: int = 1,
    post_transform: int = 0,
    membership_values: np.ndarray | None = None,
    nodes_missing_value_tracks_true: list[int] | None = None,
    nodes_hitrates: np.ndarray | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """Return the [N, n_targets] aggregate of the leaf weights reached in every tree."""
    if not 0 <= aggregate_function < len(_AGGREGATES):
        raise node.error(f"aggregate_function must be in 0..3, found {aggregate_function}")
    if not 0 <= post_transform < len(POST_TRANSFORMS):
        raise node.error(f"post_transform must be in 0..4, found {post_transform}")
    how, transform = _AGGREGATES[aggregate_function], POST_TRANSFORMS[post_transform]
    n_leaves = len(leaf_targetids)
    try:
        nodes = _v5_nodes(
            nodes_modes, nodes_featureids, nodes_splits, (nodes_truenodeids, nodes_trueleafs),
            (nodes_falsenodeids, nodes_falseleafs), nodes_missing_value_tracks_true, n_leaves,
        )  # fmt: skip
        votes = _v5_votes(leaf_targetids, leaf_weights, len(nodes.modes) - n_leaves)
        targets = n_targets if n_targets is not None else max(leaf_targetids, default=0) + 1
        roots = np.asarray(tree_roots, np.int64)
        forest = _build_forest(nodes, roots, votes, targets, how, _split_members(membership_values))
    except ValueError as exc:
        raise node.error(str(exc)) from exc
    score = scores(forest, how)
    finished = finish(Finish(transform, np.full(targets, -0.0)), score)

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype == np.float32:
            return finished(as_2d(x))
        return transform_scores(score(as_2d(x)), transform).astype(x.dtype)

    return run


def _v5_nodes(
    modes: np.ndarray,
    features: list[int],
    splits: np.ndarray,
    true: tuple[list[int], list[int]],
    false: tuple[list[int], list[int]],
    tracks_true: list[int] | None,
    n_leaves: int,
) -> _Nodes:
    """Return TreeEnsemble-5's node columns with one LEAF row appended per leaf.

    A child is (id, is_leaf): leaf ``j`` becomes row ``n + j``.
    """
    modes = np.asarray(modes, np.int64).reshape(-1)
    n = len(modes)
    if any(np.size(a) != n for a in (features, splits, *true, *false)):
        raise ValueError("nodes_* attributes (and leaf_* attributes) must have equal lengths")
    if ((modes < 0) | (modes > MEMBER)).any():
        raise ValueError(f"nodes_modes must be in 0..6, found {sorted(set(modes.tolist()))}")
    pad = np.zeros(n_leaves, np.int64)

    def column(values: Any) -> np.ndarray:
        return np.concatenate([np.asarray(values).reshape(-1), pad])

    def child(ids: list[int], is_leaf: list[int]) -> np.ndarray:
        return column(np.asarray(ids) + n * np.asarray(is_leaf, bool))

    return _Nodes(
        modes=np.concatenate([modes, np.full(n_leaves, LEAF)]),
        features=column(features),
        thresholds=column(np.asarray(splits, np.float64)),
        true_child=child(*true),
        false_child=child(*false),
        tracks_true=column(tracks_true or np.zeros(n)),
    )


def _v5_votes(
    targets: list[int], weights: np.ndarray, first_leaf: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the votes (target, node row, weight) of TreeEnsemble-5's leaves, one each."""
    if np.size(weights) != len(targets):
        raise ValueError("nodes_* attributes (and leaf_* attributes) must have equal lengths")
    rows = first_leaf + np.arange(len(targets))
    return np.asarray(targets, np.int64), rows, np.asarray(weights, np.float64).reshape(-1)


def _legacy_forest(
    node: NodeContext, attrs: dict[str, Any], prefix: str, n_targets: int, how: str
) -> Forest:
    """Compile the nodes_* / <prefix>_* encoding of TreeEnsembleRegressor and -Classifier."""
    if node.opset < 3 and any(k.endswith("_as_tensor") and v is not None for k, v in attrs.items()):
        raise ValueError("*_as_tensor attributes need ai.onnx.ml opset 3")
    trees = np.asarray(attrs["nodes_treeids"] or [], np.int64)
    nodes, find = _legacy_nodes(attrs, trees)
    roots = _legacy_roots(trees, nodes)
    vote_trees = np.asarray(attrs[f"{prefix}_treeids"] or [], np.int64)
    vote_nodes = find(vote_trees, np.asarray(attrs[f"{prefix}_nodeids"] or [], np.int64))
    target = np.asarray(attrs[f"{prefix}_ids"] or [], np.int64)
    votes = (target, vote_nodes, _first(attrs, f"{prefix}_weights"))
    return _build_forest(nodes, roots, votes, n_targets, how, [])


def _legacy_nodes(
    attrs: dict[str, Any], trees: np.ndarray
) -> tuple[_Nodes, Callable[..., np.ndarray]]:
    """The nodes_* attributes as a node table, children as row indices (0 for leaves), and
    the function finding a (tree id, node id)'s row."""
    n = len(trees)
    modes = _legacy_modes(attrs["nodes_modes"] or [])
    values = _first(attrs, "nodes_values")
    fields = [attrs["nodes_nodeids"], modes, attrs["nodes_featureids"], values,
              attrs["nodes_truenodeids"], attrs["nodes_falsenodeids"]]  # fmt: skip
    if any(len(f if f is not None else []) != n for f in fields):
        raise ValueError("nodes_* attributes must all have the same length")
    find = _node_finder(trees, np.asarray(attrs["nodes_nodeids"] or [], np.int64))
    interior = modes != LEAF
    nodes = _Nodes(
        modes=modes,
        features=np.asarray(attrs["nodes_featureids"], np.int64),
        thresholds=np.asarray(values, np.float64),
        true_child=np.where(interior, find(trees, np.asarray(attrs["nodes_truenodeids"])), 0),
        false_child=np.where(interior, find(trees, np.asarray(attrs["nodes_falsenodeids"])), 0),
        tracks_true=np.asarray(attrs["nodes_missing_value_tracks_true"] or np.zeros(n)),
    )
    return nodes, find


def _legacy_modes(names: list[str]) -> np.ndarray:
    """Return the mode codes of the nodes_modes names."""
    unknown = sorted(set(names) - set(_MODE_NAMES))
    if unknown:
        raise ValueError(f"unknown nodes_modes {unknown}; expected {sorted(_MODE_NAMES)}")
    return np.array([_MODE_NAMES[m] for m in names], np.int64)


def _legacy_roots(trees: np.ndarray, nodes: _Nodes) -> np.ndarray:
    """Return each tree's root: its first node that no other node of the tree points to."""
    interior = nodes.modes != LEAF
    referenced = np.zeros(len(trees), bool)
    referenced[nodes.true_child[interior]] = referenced[nodes.false_child[interior]] = True
    tree_ids, first = np.unique(np.where(referenced, trees.max(initial=0) + 1, trees), True)
    roots = first[tree_ids <= trees.max(initial=0)]
    if len(roots) != len(_distinct(trees)):
        raise ValueError("every tree needs one root node that no other node points to")
    return roots


def _first(attrs: dict[str, Any], name: str) -> np.ndarray:
    """Return attribute ``name`` or its ``_as_tensor`` twin as float64 values."""
    tensor = attrs.get(f"{name}_as_tensor")
    value = tensor if tensor is not None else attrs.get(name)
    return np.asarray(value if value is not None else [], np.float64).reshape(-1)


def _node_finder(trees: np.ndarray, ids: np.ndarray) -> Callable[..., np.ndarray]:
    """Return a function mapping (tree id, node id) arrays to node positions."""
    width = int(ids.max(initial=0)) + 1
    keys = trees * width + ids
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]

    def find(tree: np.ndarray, node_id: np.ndarray) -> np.ndarray:
        key = tree * width + node_id
        pos = np.minimum(np.searchsorted(sorted_keys, key), max(len(keys) - 1, 0))
        if len(keys) == 0 or (sorted_keys[pos] != key).any() or (node_id >= width).any():
            bad = int(np.argmax(sorted_keys[pos] != key)) if len(keys) else 0
            raise ValueError(f"node id {int(node_id[bad])} of tree {int(tree[bad])} does not exist")
        return order[pos]

    return find


_LEGACY_NODE_ATTRS = (
    "nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_featureids", "nodes_values",
    "nodes_values_as_tensor", "nodes_truenodeids", "nodes_falsenodeids",
    "nodes_missing_value_tracks_true", "nodes_hitrates", "nodes_hitrates_as_tensor",
)  # fmt: skip


@op(
    "TreeEnsembleRegressor",
    1,
    3,
    5,
    domain=ML_DOMAIN,
    build=True,
    traits=_compiled(lambda: tree_ensemble_regressor),
)
def tree_ensemble_regressor(
    node: NodeContext,
    scores: Scores = forest_scores,
    finish: Finisher = numpy_finish,
    /,
    *,
    n_targets: int | None = None,
    aggregate_function: str = "SUM",
    post_transform: str = "NONE",
    base_values: list[float] | None = None,
    base_values_as_tensor: np.ndarray | None = None,
    target_ids: list[int] | None = None,
    target_treeids: list[int] | None = None,
    target_nodeids: list[int] | None = None,
    target_weights: list[float] | None = None,
    target_weights_as_tensor: np.ndarray | None = None,
    **nodes: Any,
) -> Callable[[np.ndarray], np.ndarray]:
    """Return the [N, n_targets] float32 aggregate of leaf votes plus base_values.

    ``nodes`` holds the nodes_* attributes (see _LEGACY_NODE_ATTRS), shared with the classifier.
    """
    _check_node_attrs(node, nodes)
    if aggregate_function not in _AGGREGATES:
        raise node.error(f"aggregate_function must be one of {_AGGREGATES}")
    transform = check_post_transform(post_transform)
    votes = {
        "target_ids": target_ids, "target_treeids": target_treeids,
        "target_nodeids": target_nodeids, "target_weights": target_weights,
        "target_weights_as_tensor": target_weights_as_tensor,
    }  # fmt: skip
    targets = n_targets if n_targets is not None else max(target_ids or [0]) + 1
    forest, base = _legacy_ensemble(
        node, {**nodes, **votes}, (base_values, base_values_as_tensor), "target", targets,
        aggregate_function,
    )  # fmt: skip
    finished = finish(Finish(transform, base), scores(forest, aggregate_function))

    def run(x: np.ndarray) -> np.ndarray:
        return finished(as_2d(x))

    return run


# Over 40 lines for its signature (one keyword per schema attribute) and its two-class rule.
@op(
    "TreeEnsembleClassifier",
    1,
    3,
    5,
    domain=ML_DOMAIN,
    build=True,
    traits=_compiled(lambda: tree_ensemble_classifier),
)
def tree_ensemble_classifier(
    node: NodeContext,
    scores: Scores = forest_scores,
    finish: Finisher = numpy_finish,
    /,
    *,
    classlabels_int64s: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
    post_transform: str = "NONE",
    base_values: list[float] | None = None,
    base_values_as_tensor: np.ndarray | None = None,
    class_ids: list[int] | None = None,
    class_treeids: list[int] | None = None,
    class_nodeids: list[int] | None = None,
    class_weights: list[float] | None = None,
    class_weights_as_tensor: np.ndarray | None = None,
    **nodes: Any,
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Return (top label, [N, classes] float32 scores) of summed leaf votes plus base_values."""
    _check_node_attrs(node, nodes)
    transform = check_post_transform(post_transform)
    labels = class_labels(classlabels_int64s, classlabels_strings, "TreeEnsembleClassifier")
    votes = {
        "class_ids": class_ids, "class_treeids": class_treeids, "class_nodeids": class_nodeids,
        "class_weights": class_weights, "class_weights_as_tensor": class_weights_as_tensor,
    }  # fmt: skip
    forest, base = _legacy_ensemble(
        node, {**nodes, **votes}, (base_values, base_values_as_tensor), "class", len(labels), "SUM"
    )
    weights = _first(votes, "class_weights")
    # Two classes voted for only through class 0: one score, of the positive class.
    one_score = len(labels) == 2 and 1 not in (class_ids or [])
    all_positive = bool((weights >= 0).all())
    # A class no leaf votes for never wins (its score is only its base value).
    never_voted = np.where(forest.voted.any(axis=0), 0.0, -np.inf)
    spec = Finish(transform, base, labels, never_voted, one_score, all_positive)
    finished = finish(spec, scores(forest, "SUM"))

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return finished(as_2d(x))

    return run


def _legacy_ensemble(
    node: NodeContext,
    given: dict[str, Any],
    base_values: tuple[list[float] | None, np.ndarray | None],
    prefix: str,
    n_targets: int,
    how: str,
) -> tuple[Forest, np.ndarray]:
    """Return the forest of the given nodes_* and <prefix>_* attributes, and its base values."""
    attrs = {**dict.fromkeys(_LEGACY_NODE_ATTRS), **given}
    attrs["base_values"], attrs["base_values_as_tensor"] = base_values
    try:
        forest = _legacy_forest(node, attrs, prefix, n_targets, how)
    except ValueError as exc:
        raise node.error(str(exc)) from exc
    return forest, _base(attrs, n_targets, node)


def _check_node_attrs(node: NodeContext, nodes: dict[str, Any]) -> None:
    unknown = sorted(set(nodes) - set(_LEGACY_NODE_ATTRS))
    if unknown:
        raise node.error(f"unexpected attribute(s) {unknown}")


def _base(attrs: dict[str, Any], n: int, node: NodeContext) -> np.ndarray:
    """Return base_values broadcast to n targets (zeros when absent)."""
    base = _first(attrs, "base_values")
    if base.size not in (0, 1, n):
        raise node.error(f"base_values has {base.size} entries for {n} targets")
    return np.broadcast_to(base if base.size else np.zeros(1), (n,)).copy()
