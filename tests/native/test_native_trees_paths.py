"""The tree walks chosen by the forest's shape and the input's size, against the NumPy forms bit
for bit: oblivious forests (one test per level, as catboost's) walked by their levels, and the
sums of many rows over several threads."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from native_forms import node_forms
from test_native_trees import LEGACY_MODES, N_FEATURES, _inputs, _thresholds, assert_same

from onnxflow.ops.ml import packed_forest

ML = "ai.onnx.ml"
FORMS_TESTED = [
    ("ai.onnx.ml", "TreeEnsemble"),
    ("ai.onnx.ml", "TreeEnsembleRegressor"),
    ("ai.onnx.ml", "TreeEnsembleClassifier"),
]
ROWS = [1, 5, 8, 33, 300]


def _level(rng: np.random.Generator, modes: list[str], thresholds: np.ndarray) -> dict[str, Any]:
    """One level's test: its mode, feature, threshold (now and then NaN) and NaN track."""
    value = float(rng.choice(thresholds)) if rng.random() > 0.05 else float("nan")
    return {"mode": str(rng.choice(modes)), "feature": int(rng.integers(N_FEATURES)),
            "value": value, "track": int(rng.integers(2))}  # fmt: skip


def oblivious_tree(
    rng: np.random.Generator, depth: int, modes: list[str], thresholds: np.ndarray, shallow: float
) -> list[dict[str, Any]]:
    """One oblivious tree as nodes with ids: every interior node of a level tests the level's
    test; a node above the last level is a leaf with probability ``shallow``."""
    levels = [_level(rng, modes, thresholds) for _ in range(depth)]
    nodes: list[dict[str, Any]] = []
    ids = itertools.count()

    def grow(level: int) -> int:
        me = next(ids)
        if level == depth or (level and rng.random() < shallow):
            nodes.append({"id": me, "mode": "LEAF"})
            return me
        true, false = grow(level + 1), grow(level + 1)
        nodes.append({**levels[level], "id": me, "true": true, "false": false})
        return me

    grow(0)
    return nodes


def oblivious_forest(
    rng: np.random.Generator, n_trees: int, depth: int, prefix: str, n_targets: int,
    thresholds: np.ndarray, modes: list[str] = LEGACY_MODES, shallow: float = 0.0,
) -> dict[str, Any]:  # fmt: skip
    """The nodes_* and <prefix>_* attributes of a random oblivious forest."""
    names = ["treeids", "nodeids", "modes", "featureids", "values", "truenodeids",
             "falsenodeids", "missing_value_tracks_true"]  # fmt: skip
    a: dict[str, list[Any]] = {f"nodes_{k}": [] for k in names}
    a.update({f"{prefix}_{k}": [] for k in ("ids", "treeids", "nodeids", "weights")})
    for t in range(n_trees):
        for spec in oblivious_tree(rng, depth, modes, thresholds, shallow):
            leaf = spec["mode"] == "LEAF"
            row = [t, spec["id"], spec["mode"], spec.get("feature", 0), spec.get("value", 0.0),
                   spec.get("true", 0), spec.get("false", 0), spec.get("track", 0)]  # fmt: skip
            for k, v in zip(names, row, strict=True):
                a[f"nodes_{k}"].append(v)
            for target in range(n_targets) if leaf else ():
                for k, v in zip(("ids", "treeids", "nodeids"), (target, t, spec["id"])):
                    a[f"{prefix}_{k}"].append(v)
                a[f"{prefix}_weights"].append(float(rng.standard_normal() * 10))
    return a


@pytest.fixture
def levels_found(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each forest packed while the test runs was found oblivious."""
    found: list[bool] = []
    levels = packed_forest.oblivious_levels
    monkeypatch.setattr(
        packed_forest,
        "oblivious_levels",
        lambda *a: found.append(levels(*a) is not None) or levels(*a),
    )
    return found


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opset", [1, 3, 5])
def test_oblivious_regressor(aggregate, dtype, opset, levels_found):
    rng = np.random.default_rng(opset * 5 + len(aggregate))
    thresholds = _thresholds(rng)
    attrs = oblivious_forest(rng, 12, 5, "target", 2, thresholds, shallow=0.2)
    for n in ROWS:
        x = _inputs(rng, n, thresholds, dtype)
        compiled, numpy_form = node_forms(
            "TreeEnsembleRegressor", [x], opset, domain=ML, n_targets=2,
            aggregate_function=aggregate, base_values=[0.5, -1.5], **attrs,
        )  # fmt: skip
        assert_same(compiled, numpy_form)
    assert levels_found and all(levels_found)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("opset", [1, 3, 5])
def test_oblivious_classifier(n_classes, transform, opset, levels_found):
    rng = np.random.default_rng(n_classes * 10 + opset)
    thresholds = _thresholds(rng)
    attrs = oblivious_forest(rng, 20, 6, "class", n_classes, thresholds)
    for n in ROWS:
        x = _inputs(rng, n, thresholds, np.float64 if n % 2 else np.float32)
        compiled, numpy_form = node_forms(
            "TreeEnsembleClassifier", [x], opset, n_out=2, domain=ML,
            classlabels_int64s=list(range(n_classes)), post_transform=transform,
            base_values=[0.1] * n_classes, **attrs,
        )  # fmt: skip
        assert_same(compiled, numpy_form)
    assert levels_found and all(levels_found)


def as_v5(attrs: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """A legacy regressor's attributes (one vote per leaf) as TreeEnsemble-5's."""
    from onnx import numpy_helper

    modes = {m: i for i, m in enumerate(LEGACY_MODES)}
    n = len(attrs["nodes_treeids"])
    key = list(zip(attrs["nodes_treeids"], attrs["nodes_nodeids"], strict=True))
    leaf = [m == "LEAF" for m in attrs["nodes_modes"]]
    leaves_before = np.cumsum([0, *leaf])
    index = {
        k: int(leaves_before[i] if leaf[i] else i - leaves_before[i]) for i, k in enumerate(key)
    }
    vote = dict(zip(zip(attrs["target_treeids"], attrs["target_nodeids"]), attrs["target_weights"]))
    inner = [i for i in range(n) if not leaf[i]]
    v5: dict[str, Any] = {"tree_roots": [], "leaf_targetids": [], "leaf_weights": []}
    for side in ("true", "false"):
        ids = [(attrs["nodes_treeids"][i], attrs[f"nodes_{side}nodeids"][i]) for i in inner]
        v5[f"nodes_{side}nodeids"] = [index[k] for k in ids]
        v5[f"nodes_{side}leafs"] = [int(leaf[key.index(k)]) for k in ids]
    for i in range(n):
        if leaf[i]:
            v5["leaf_targetids"].append(0)
            v5["leaf_weights"].append(vote.get(key[i], 0.0))
        elif key[i][1] == 0:  # a tree's root
            v5["tree_roots"].append(index[key[i]])
    v5["nodes_featureids"] = [attrs["nodes_featureids"][i] for i in inner]
    v5["nodes_missing_value_tracks_true"] = [
        attrs["nodes_missing_value_tracks_true"][i] for i in inner
    ]
    tensors = {
        "nodes_modes": np.array([modes[attrs["nodes_modes"][i]] for i in inner], np.uint8),
        "nodes_splits": np.array([attrs["nodes_values"][i] for i in inner], dtype),
        "leaf_weights": np.array(v5.pop("leaf_weights"), dtype) * 1e6,
    }
    return {**v5, **{k: numpy_helper.from_array(v, k) for k, v in tensors.items()}}


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("transform", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_oblivious_tree_ensemble_5(aggregate, transform, dtype, levels_found):
    """TreeEnsemble-5 of an oblivious forest: float64 in, float64 out (the sums' order shows)."""
    rng = np.random.default_rng(aggregate * 4 + transform)
    thresholds = _thresholds(rng)
    attrs = as_v5(oblivious_forest(rng, 10, 4, "target", 1, thresholds), dtype)
    for n in ROWS:
        x = _inputs(rng, n, thresholds, dtype)
        compiled, numpy_form = node_forms(
            "TreeEnsemble", [x], 5, domain=ML, n_targets=1, aggregate_function=aggregate,
            post_transform=transform, **attrs,
        )  # fmt: skip
        assert_same(compiled, numpy_form)
    assert levels_found and all(levels_found)


def test_a_forest_with_two_tests_on_a_level_is_not_oblivious(levels_found):
    """One node of a level testing another threshold: the node walk, the same results."""
    rng = np.random.default_rng(3)
    thresholds = _thresholds(rng)
    attrs = oblivious_forest(rng, 4, 3, "target", 1, thresholds)
    interior = [i for i, m in enumerate(attrs["nodes_modes"]) if m != "LEAF"]
    attrs["nodes_values"][interior[0]] += 0.5  # the first level-2 node of the first tree
    x = _inputs(rng, 40, thresholds, np.float32)
    compiled, numpy_form = node_forms("TreeEnsembleRegressor", [x], 3, domain=ML, **attrs)
    assert_same(compiled, numpy_form)
    assert levels_found == [False]


def _packed(attrs: dict[str, Any], threads: int) -> tuple[Any, Any]:
    """The forest of a TreeEnsembleRegressor's attributes, and its packs for ``threads``."""
    from onnxflow.ops.ml import trees

    captured: list[Any] = []
    monkey = pytest.MonkeyPatch()
    pack = packed_forest.pack
    monkey.setattr(packed_forest, "pack", lambda mod, f, *a: captured.append(f) or pack(mod, f, *a))
    x = np.zeros((1, N_FEATURES), np.float32)
    node_forms("TreeEnsembleRegressor", [x], 3, domain=ML, n_targets=3, **attrs)
    monkey.undo()
    forest = captured[0]
    return forest, packed_forest.pack(trees._TREES, forest, trees._CHUNK, threads)


@pytest.mark.parametrize("kind", ["nodes", "oblivious", "perfect"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threaded_sums_are_the_sums_of_one_thread(kind, dtype):
    """Rows split over 2 and 3 threads (48 rows a unit, taken in any order): each row's sums
    are the bits of one thread's and of the NumPy aggregate, at every row count around the
    units' edges, for every walk (the node walk, the oblivious one, the perfect layout's)."""
    from onnxflow.native import _trees

    rng = np.random.default_rng(7)
    thresholds = _thresholds(rng)
    make = {"nodes": _node_forest, "oblivious": oblivious_forest, "perfect": _perfect_forest}
    forest, packs = _packed(make[kind](rng, 40, 5, "target", 3, thresholds), 3)
    assert (packs[dtype].perfect_depth >= 0) == (kind == "perfect") or kind == "oblivious"
    walker = packs[dtype]
    assert walker.threads == 3
    walker.min_work = 0
    for n in (1, 47, 48, 49, 97, 1000):
        # every other count without NaN: the perfect layout's walks (bit vectors) on each thread
        x = (_comparable_inputs if n % 2 else _inputs)(rng, n, thresholds, dtype)
        outs = []
        for threads in (1, 2, 3):
            walker.threads = threads
            out = np.empty((n, 3))
            walker.sums(x, out)
            outs.append(out)
        expected = forest.aggregate(forest.leaves(x), "SUM")
        for out in outs:
            assert_same([out], [expected])
    assert isinstance(walker, _trees.PackedForest)


def _perfect_forest(
    rng: np.random.Generator, n_trees: int, depth: int, prefix: str, n_targets: int,
    thresholds: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    from test_native_trees import legacy_forest

    return legacy_forest(rng, n_trees, depth, PERFECT_MODES[4], prefix, n_targets, thresholds)


def _node_forest(
    rng: np.random.Generator, n_trees: int, depth: int, prefix: str, n_targets: int,
    thresholds: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    from test_native_trees import legacy_forest

    return legacy_forest(rng, n_trees, depth, LEGACY_MODES, prefix, n_targets, thresholds)


@pytest.mark.parametrize("asked", [0, 1, 3])
def test_the_session_thread_budget_bounds_the_walk(asked, monkeypatch):
    """intra_op_num_threads is the most threads the walk takes (0: the CPUs the process may
    use, fewer while the load keeps some busy); a session with threads gives the NumPy form's
    results on many rows."""
    from onnxflow.compile.context import usable_cpus

    budgets: list[int] = []
    captured_pack_args: list[tuple[Any, ...]] = []
    pack = packed_forest.pack

    def spy(mod: Any, forest: Any, chunk: int, threads: int = 1) -> Any:
        budgets.append(threads)
        captured_pack_args.append((mod, forest, chunk, threads))
        return pack(mod, forest, chunk, threads)

    monkeypatch.setattr(packed_forest, "pack", spy)
    rng = np.random.default_rng(8)
    thresholds = _thresholds(rng)
    attrs = _node_forest(rng, 60, 5, "target", 1, thresholds)
    x = _inputs(rng, 2000, thresholds, np.float32)
    compiled, numpy_form = node_forms(
        "TreeEnsembleRegressor", [x], 3, domain=ML, **attrs
    ) if asked == 0 else _forms_with_threads(attrs, x, asked)  # fmt: skip
    assert_same(compiled, numpy_form)
    assert budgets == [asked]
    walkers = pack(*captured_pack_args[0])
    assert walkers[np.float32].threads == (asked or usable_cpus())
    assert walkers[np.float32].follow_load == (asked == 0)


def _forms_with_threads(attrs: dict[str, Any], x: np.ndarray, threads: int) -> Any:
    """The outputs of a TreeEnsembleRegressor node, compiled then NumPy, in sessions of
    ``threads`` intra-op threads."""
    from native_forms import node_model

    import onnxflow

    model, feeds = node_model("TreeEnsembleRegressor", [x], 3, domain=ML, **attrs)
    runs = []
    for kernels in ("native", "numpy"):
        options = onnxflow.SessionOptions(kernels=kernels)
        options.intra_op_num_threads = threads
        session = onnxflow.InferenceSession(model.SerializeToString(), options)
        runs.append(session.run(None, feeds))
    return runs


def _comparable_inputs(
    rng: np.random.Generator, n: int, thresholds: np.ndarray, dtype: Any
) -> np.ndarray:
    """Rows without NaN: normal values, ties with the thresholds, infinities and signed zeros."""
    x = rng.standard_normal((n, N_FEATURES))
    special = rng.random(x.shape)
    x[special < 0.3] = rng.choice(thresholds[np.isfinite(thresholds)], (special < 0.3).sum())
    x[(special > 0.9) & (special < 0.95)] = rng.choice([np.inf, -np.inf, 0.0, -0.0])
    return x.astype(dtype)


PERFECT_MODES = [["BRANCH_LT"], ["BRANCH_LEQ"], ["BRANCH_GT"], ["BRANCH_GTE"], LEGACY_MODES[:4]]


@pytest.mark.parametrize("modes", PERFECT_MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("depth", [6, 8])
def test_the_perfect_layout_walks_as_the_nodes(modes, dtype, depth):
    """Forests of <, <=, >, >= tests (thresholds with infinities, NaN and signed zeros; trees of
    unequal depths, some one leaf) are laid out perfect and walk rows without NaN to the NumPy
    form's bits at every row count around the lanes' edges, by bit vectors (float32, at most 6
    levels, where the CPU has AVX-512) and without; rows with NaN walk the nodes."""
    from onnxflow.native import _trees

    rng = np.random.default_rng(len(modes) * 3 + len(modes[0]) + depth)
    thresholds = np.concatenate([_thresholds(rng), [np.inf, -np.inf, np.nan, 0.0, -0.0]])
    attrs = legacy_forest_of(rng, 31, depth, modes, thresholds)  # odd: a last tree alone
    forest, packs = _packed(attrs, 1)
    walker = packs[dtype]
    assert walker.perfect_depth == depth
    can = dtype == np.float32 and depth <= 6 and _trees.bitvector_ok()
    assert walker.bitvector == can
    for bitvector in (False, True):
        walker.bitvector = bitvector
        assert walker.bitvector == (bitvector and can)
        _walks_as_numpy(
            walker, forest, rng, thresholds, dtype, (1, 5, 11, 12, 13, 15, 16, 17, 33, 300)
        )
    _session_as_numpy(attrs, rng, thresholds, dtype)


def _walks_as_numpy(
    walker: Any, forest: Any, rng: np.random.Generator, thresholds: np.ndarray, dtype: Any,
    counts: tuple[int, ...],
) -> None:  # fmt: skip
    """The walker's sums of rows without NaN (but one row of 33, a fifth of 300: walked again
    by their nodes) are the NumPy aggregate's bits, at each row count."""
    for n in counts:
        x = _comparable_inputs(rng, n, thresholds, dtype)
        if n in (33, 300):
            x[np.arange(17, n, 5) if n == 300 else 17, 2] = np.nan
        out = np.empty((n, 3))
        walker.sums(x, out)
        assert_same([out], [forest.aggregate(forest.leaves(x), "SUM")])


def _session_as_numpy(
    attrs: dict[str, Any], rng: np.random.Generator, thresholds: np.ndarray, dtype: Any
) -> None:
    """A TreeEnsembleRegressor node of ``attrs`` gives the NumPy form's bits on 40 rows."""
    x = _comparable_inputs(rng, 40, thresholds, dtype)
    compiled, numpy_form = node_forms(
        "TreeEnsembleRegressor", [x], 3, domain=ML, n_targets=3, **attrs
    )
    assert_same(compiled, numpy_form)


def legacy_forest_of(
    rng: np.random.Generator, n_trees: int, depth: int, modes: list[str], thresholds: np.ndarray
) -> dict[str, Any]:
    """A random regressor forest of 3 targets whose trees are of unequal depths."""
    from test_native_trees import legacy_forest

    return legacy_forest(rng, n_trees, depth, modes, "target", 3, thresholds, shallow=0.3)


@pytest.mark.parametrize(
    "modes, depth",
    [(LEGACY_MODES, 5), (["BRANCH_EQ"], 4), (["BRANCH_LT"], 13), (PERFECT_MODES[4], 14)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forests_without_a_perfect_layout_walk_their_nodes(modes, depth, dtype):
    """== and != tests have no ``v < t`` form, and a forest deeper than 12 levels would take
    too much memory: both walk their nodes, the second (no == or !=) in their ``v < t`` form
    for rows without NaN, to the NumPy form's bits with that form on and off."""
    rng = np.random.default_rng(depth)
    thresholds = np.concatenate([_thresholds(rng), [np.inf, -np.inf, np.nan, 0.0, -0.0]])
    attrs = legacy_forest_of(rng, 6 if depth > 12 else 20, depth, modes, thresholds)
    forest, packs = _packed(attrs, 1)
    walker = packs[dtype]
    assert walker.perfect_depth == -1
    can = depth > 12
    assert walker.canonical == can
    for canonical in (False, True):
        walker.canonical = canonical
        assert walker.canonical == (canonical and can)
        _walks_as_numpy(walker, forest, rng, thresholds, dtype, (1, 5, 8, 20, 33, 300))
    _session_as_numpy(attrs, rng, thresholds, dtype)
