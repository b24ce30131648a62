"""Compiled tree-ensemble walks against the NumPy forms: bit for bit, every mode, aggregate,
post_transform, NaN track, row count and input dtype, and forests the converters write."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from native_forms import both_forms, node_forms

ML = "ai.onnx.ml"
FORMS_TESTED = [
    ("ai.onnx.ml", "TreeEnsemble"),
    ("ai.onnx.ml", "TreeEnsembleRegressor"),
    ("ai.onnx.ml", "TreeEnsembleClassifier"),
]

LEGACY_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
N_FEATURES = 5
ROWS = [1, 2, 3, 33, 300]


def _grow(
    rng: np.random.Generator, depth: int, thresholds: np.ndarray, shallow: float = 0.25
) -> list[dict[str, Any]]:
    """One random tree as preorder nodes: dicts of mode, feature, threshold, children, track;
    leaves have mode LEAF. A node above the last level is a leaf with probability ``shallow``."""
    nodes: list[dict[str, Any]] = []

    def node(level: int) -> int:
        me = len(nodes)
        nodes.append({})
        if level == 0 or (level < depth and rng.random() < shallow):
            nodes[me] = {"mode": "LEAF"}
            return me
        spec = {
            "mode": "interior",
            "feature": int(rng.integers(N_FEATURES)),
            "value": float(rng.choice(thresholds)),
            "track": int(rng.integers(2)),
        }
        spec["true"] = node(level - 1)
        spec["false"] = node(level - 1)
        nodes[me] = spec
        return me

    node(depth)
    return nodes


def _thresholds(rng: np.random.Generator) -> np.ndarray:
    """Thresholds exact in float32, some repeated in the inputs (x == t is taken)."""
    return rng.standard_normal(40).astype(np.float32).astype(np.float64)


def _inputs(rng: np.random.Generator, n: int, thresholds: np.ndarray, dtype: Any) -> np.ndarray:
    """Rows of normal values, about a fifth of them thresholds and a tenth NaN."""
    x = rng.standard_normal((n, N_FEATURES))
    ties = rng.random(x.shape) < 0.2
    x[ties] = rng.choice(thresholds, ties.sum())
    x[rng.random(x.shape) < 0.1] = np.nan
    return x.astype(dtype)


def legacy_forest(
    rng: np.random.Generator,
    n_trees: int,
    depth: int,
    modes: list[str],
    prefix: str,
    n_targets: int,
    thresholds: np.ndarray,
    shallow: float = 0.25,
) -> dict[str, Any]:
    """The nodes_* and <prefix>_* attributes of a random TreeEnsembleRegressor/-Classifier."""
    a: dict[str, list[Any]] = {
        k: []
        for k in [
            "nodes_treeids",
            "nodes_nodeids",
            "nodes_modes",
            "nodes_featureids",
            "nodes_values",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_missing_value_tracks_true",
        ]
    }
    votes: dict[str, list[Any]] = {
        f"{prefix}_{k}": [] for k in (["ids", "treeids", "nodeids", "weights"])
    }
    for t in range(n_trees):
        for i, spec in enumerate(_grow(rng, depth, thresholds, shallow)):
            leaf = spec["mode"] == "LEAF"
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(i)
            a["nodes_modes"].append("LEAF" if leaf else str(rng.choice(modes)))
            a["nodes_featureids"].append(0 if leaf else spec["feature"])
            a["nodes_values"].append(0.0 if leaf else spec["value"])
            a["nodes_truenodeids"].append(0 if leaf else spec["true"])
            a["nodes_falsenodeids"].append(0 if leaf else spec["false"])
            a["nodes_missing_value_tracks_true"].append(0 if leaf else spec["track"])
            for target in range(n_targets) if leaf else ():
                if rng.random() < 0.7:
                    votes[f"{prefix}_ids"].append(target)
                    votes[f"{prefix}_treeids"].append(t)
                    votes[f"{prefix}_nodeids"].append(i)
                    votes[f"{prefix}_weights"].append(float(rng.standard_normal() * 10))
    return {**a, **votes}


def assert_same(compiled: list[Any], numpy_form: list[Any]) -> None:
    """Every output equal bit for bit (NaN where NaN), same dtype and shape."""
    assert len(compiled) == len(numpy_form)
    for c, p in zip(compiled, numpy_form, strict=True):
        c, p = np.asarray(c), np.asarray(p)
        assert c.dtype == p.dtype and c.shape == p.shape
        if c.dtype.kind == "f":
            assert np.array_equal(c.view(f"u{c.itemsize}"), p.view(f"u{p.itemsize}"))
        else:
            assert np.array_equal(c, p)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("modes", [["BRANCH_LEQ"], ["BRANCH_LT"], LEGACY_MODES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regressor_modes_and_aggregates(aggregate, modes, dtype):
    rng = np.random.default_rng(len(modes) * 7 + len(aggregate))
    thresholds = _thresholds(rng)
    attrs = legacy_forest(rng, 12, 6, modes, "target", 2, thresholds)
    for n in ROWS:
        x = _inputs(rng, n, thresholds, dtype)
        compiled, numpy_form = node_forms(
            "TreeEnsembleRegressor", [x], 3, domain=ML, n_targets=2,
            aggregate_function=aggregate, base_values=[0.5, -1.5], **attrs,
        )  # fmt: skip
        assert_same(compiled, numpy_form)


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_regressor_post_transforms(transform):
    rng = np.random.default_rng(3)
    thresholds = _thresholds(rng)
    attrs = legacy_forest(rng, 20, 5, ["BRANCH_LEQ"], "target", 3, thresholds)
    x = _inputs(rng, 50, thresholds, np.float32)
    if transform == "PROBIT":  # a probability in, one target
        attrs = legacy_forest(rng, 20, 5, ["BRANCH_LEQ"], "target", 1, thresholds)
        attrs["target_weights"] = [abs(w) / 1000 for w in attrs["target_weights"]]
    compiled, numpy_form = node_forms(
        "TreeEnsembleRegressor", [x], 1, domain=ML, post_transform=transform, **attrs
    )
    assert_same(compiled, numpy_form)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("opset", [1, 3])
def test_classifier_labels_and_scores(n_classes, transform, opset):
    rng = np.random.default_rng(n_classes + opset)
    thresholds = _thresholds(rng)
    attrs = legacy_forest(rng, 15, 6, LEGACY_MODES, "class", n_classes, thresholds)
    for n in ROWS:
        x = _inputs(rng, n, thresholds, np.float64 if n % 2 else np.float32)
        compiled, numpy_form = node_forms(
            "TreeEnsembleClassifier", [x], opset, n_out=2, domain=ML,
            classlabels_int64s=list(range(n_classes)), post_transform=transform,
            base_values=[0.1] * n_classes, **attrs,
        )  # fmt: skip
        assert_same(compiled, numpy_form)


def test_classifier_one_score_string_labels():
    """Two classes voted for only through class 0: one score, expanded to two columns."""
    rng = np.random.default_rng(5)
    thresholds = _thresholds(rng)
    attrs = legacy_forest(rng, 10, 5, ["BRANCH_LEQ"], "class", 1, thresholds)
    x = _inputs(rng, 40, thresholds, np.float32)
    compiled, numpy_form = node_forms(
        "TreeEnsembleClassifier", [x], 3, n_out=2, domain=ML,
        classlabels_strings=["no", "yes"], post_transform="LOGISTIC", **attrs,
    )  # fmt: skip
    assert_same(compiled, numpy_form)


def v5_forest(rng: np.random.Generator, n_trees: int, depth: int, thresholds: np.ndarray):
    """TreeEnsemble-5 attributes of a random forest using every mode (BRANCH_MEMBER too)."""
    a: dict[str, list[Any]] = {
        k: []
        for k in [
            "nodes_modes",
            "nodes_featureids",
            "nodes_splits",
            "nodes_truenodeids",
            "nodes_trueleafs",
            "nodes_falsenodeids",
            "nodes_falseleafs",
            "nodes_missing_value_tracks_true",
            "leaf_targetids",
            "leaf_weights",
            "tree_roots",
        ]
    }
    members: list[float] = []

    def child(spec: dict[str, Any], offset: int, leaf_of: dict[int, int]) -> tuple[int, int]:
        return (leaf_of[spec], 1) if spec in leaf_of else (offset + spec, 0)

    for _ in range(n_trees):
        nodes = _grow(rng, depth, thresholds)
        interior = [i for i, s in enumerate(nodes) if s["mode"] != "LEAF"]
        if not interior:  # a tree of one leaf: TreeEnsemble-5 needs a root node
            continue
        position = {i: len(a["nodes_modes"]) + k for k, i in enumerate(interior)}
        leaves = {i: len(a["leaf_weights"]) + k for k, i in enumerate(
            i for i, s in enumerate(nodes) if s["mode"] == "LEAF")}  # fmt: skip
        a["tree_roots"].append(position[0])
        for i in interior:
            spec = nodes[i]
            mode = int(rng.integers(7))
            a["nodes_modes"].append(mode)
            a["nodes_featureids"].append(spec["feature"])
            a["nodes_splits"].append(spec["value"])
            a["nodes_missing_value_tracks_true"].append(spec["track"])
            for side in ("true", "false"):
                c = spec[side]
                a[f"nodes_{side}nodeids"].append(leaves[c] if c in leaves else position[c])
                a[f"nodes_{side}leafs"].append(int(c in leaves))
            if mode == 6:
                members.extend([*rng.choice(thresholds, 3).tolist(), np.nan])
        for _ in leaves:
            a["leaf_targetids"].append(int(rng.integers(2)))
            a["leaf_weights"].append(float(rng.standard_normal()))
    return a, members


def v5_attrs(
    rng: np.random.Generator, n_trees: int, depth: int, thresholds: np.ndarray, dtype: Any
) -> dict[str, Any]:
    """:func:`v5_forest` as node attributes, its tensors in ``dtype``; weights of about 1e6
    (summed in another order, they round differently)."""
    from onnx import numpy_helper

    a, members = v5_forest(rng, n_trees, depth, thresholds)
    tensors = {
        "nodes_modes": np.array(a.pop("nodes_modes"), np.uint8),
        "nodes_splits": np.array(a.pop("nodes_splits"), dtype),
        "leaf_weights": np.array(a.pop("leaf_weights"), dtype) * 1e6,
    }
    if members:
        tensors["membership_values"] = np.array(members, dtype)
    return {**a, **{k: numpy_helper.from_array(v, k) for k, v in tensors.items()}}


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("transform", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_5(aggregate, transform, dtype):
    """Every mode, BRANCH_MEMBER included; float64 in, float64 out: the sums' order shows."""
    rng = np.random.default_rng(aggregate * 4 + transform)
    thresholds = _thresholds(rng)
    attrs = v5_attrs(rng, 10, 6, thresholds, dtype)
    for n in ROWS:
        x = _inputs(rng, n, thresholds, dtype)
        compiled, numpy_form = node_forms(
            "TreeEnsemble", [x], 5, domain=ML, n_targets=2, aggregate_function=aggregate,
            post_transform=transform, **attrs,
        )  # fmt: skip
        assert_same(compiled, numpy_form)


@pytest.mark.parametrize("n_trees", [1, 7, 8, 9, 130, 300])
def test_one_row_sums_pairwise_as_numpy(n_trees):
    """A single row is summed by NumPy's pairwise sum (a [trees, 1] reduction); more rows
    one tree after the other: both orders reproduced, at 1 row and at more."""
    rng = np.random.default_rng(n_trees)
    thresholds = _thresholds(rng)
    attrs = v5_attrs(rng, n_trees, 3, thresholds, np.float64)
    for n in (1, 2, 1000):
        x = _inputs(rng, n, thresholds, np.float64)
        compiled, numpy_form = node_forms("TreeEnsemble", [x], 5, domain=ML, n_targets=2, **attrs)
        assert_same(compiled, numpy_form)


def test_a_last_chunk_of_one_row_sums_pairwise():
    """The NumPy form sums in chunks of 2**22 // (trees * targets) rows: a last chunk of one
    row is summed pairwise there, so the compiled sums do the same for that row."""
    rng = np.random.default_rng(11)
    thresholds = _thresholds(rng)
    attrs = v5_attrs(rng, 2000, 2, thresholds, np.float64)
    n_trees = len(attrs["tree_roots"])
    x = _inputs(rng, (1 << 22) // (n_trees * 2) + 1, thresholds, np.float64)
    compiled, numpy_form = node_forms("TreeEnsemble", [x], 5, domain=ML, n_targets=2, **attrs)
    assert_same(compiled, numpy_form)


def test_integer_and_float16_inputs_are_walked_in_float32():
    rng = np.random.default_rng(9)
    thresholds = np.arange(-3, 4, dtype=np.float64)
    attrs = legacy_forest(rng, 6, 4, LEGACY_MODES, "target", 1, thresholds)
    for dtype in (np.int64, np.int32, np.float16):
        x = rng.integers(-4, 5, (20, N_FEATURES)).astype(dtype)
        compiled, numpy_form = node_forms("TreeEnsembleRegressor", [x], 3, domain=ML, **attrs)
        assert_same(compiled, numpy_form)


def test_missing_feature_is_an_error_in_both_forms():
    rng = np.random.default_rng(2)
    attrs = legacy_forest(rng, 3, 3, ["BRANCH_LEQ"], "target", 1, _thresholds(rng))
    x = np.zeros((2, 1), np.float32)
    with pytest.raises(Exception, match="a node tests feature"):
        node_forms("TreeEnsembleRegressor", [x], 3, domain=ML, **attrs)


def _converted(kind: str, rows: int, n_classes: int = 3):
    """A model converted from a fitted estimator, and float32 inputs of ``rows`` rows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 8)).astype(np.float32)
    y = x[:, 0] * 2 + np.sin(x[:, 1] * 3)
    labels = np.digitize(y, np.quantile(y, np.linspace(0, 1, n_classes + 1)[1:-1]))
    model = _convert(kind, x, y, labels)
    feed = rng.standard_normal((rows, 8)).astype(np.float32)
    feed[rng.random(feed.shape) < 0.05] = np.nan
    return model, {model.graph.input[0].name: feed}


def _convert(kind: str, x: np.ndarray, y: np.ndarray, labels: np.ndarray):
    if kind in ("lightgbm", "xgboost"):
        return _convert_boosted(kind, x, labels)
    from skl2onnx import to_onnx
    from sklearn import ensemble

    estimators = {
        "rf_regressor": (ensemble.RandomForestRegressor(20, max_depth=8, random_state=0), y),
        "rf_classifier": (ensemble.RandomForestClassifier(20, max_depth=6, random_state=0), labels),
        "gb_classifier": (
            ensemble.GradientBoostingClassifier(n_estimators=20, random_state=0),
            labels,
        ),
        "gb_regressor": (ensemble.GradientBoostingRegressor(n_estimators=30, random_state=0), y),
    }
    estimator, target = estimators[kind]
    estimator.fit(x, target)
    options = {"zipmap": False} if "classifier" in kind else None
    opsets = {"": 17, "ai.onnx.ml": 3}
    return to_onnx(estimator, x[:1], target_opset=opsets, options=options)


def _convert_boosted(kind: str, x: np.ndarray, labels: np.ndarray):
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("x", FloatTensorType([None, x.shape[1]]))]
    if kind == "lightgbm":
        lightgbm = pytest.importorskip("lightgbm")
        model = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=15, verbose=-1)
        convert, options = onnxmltools.convert_lightgbm, {"zipmap": False}
    else:
        xgboost = pytest.importorskip("xgboost")
        model = xgboost.XGBClassifier(n_estimators=20, max_depth=4)
        convert, options = onnxmltools.convert_xgboost, {}
    model.fit(x, labels)
    return convert(model, initial_types=types, target_opset=15, **options)


@pytest.mark.parametrize(
    "kind",
    ["rf_regressor", "rf_classifier", "gb_classifier", "gb_regressor", "lightgbm", "xgboost"],
)
@pytest.mark.parametrize("rows", [1, 100, 2000])
def test_converted_models(kind, rows):
    model, feeds = _converted(kind, rows)
    compiled, numpy_form = both_forms(model, feeds)
    assert_same(compiled, numpy_form)


def test_the_compiled_walk_is_what_runs(monkeypatch):
    """The compiled form packs the forest (it does not quietly run the NumPy walk)."""
    from onnxflow.ops.ml import packed_forest

    packed = []
    pack = packed_forest.pack
    monkeypatch.setattr(packed_forest, "pack", lambda *a: packed.append(pack(*a)) or packed[-1])
    model, feeds = _converted("rf_regressor", 3)
    both_forms(model, feeds)
    assert len(packed) == 1 and packed[0] is not None


@pytest.mark.parametrize("rows", [1, 40])
def test_trees_of_one_leaf(rows):
    """A tree whose root is its leaf, beside deeper ones."""
    rng = np.random.default_rng(4)
    thresholds = _thresholds(rng)
    shallow = legacy_forest(rng, 3, 0, ["BRANCH_LEQ"], "target", 1, thresholds)
    deep = legacy_forest(rng, 2, 4, ["BRANCH_LEQ"], "target", 1, thresholds)
    attrs = {
        k: v + [t + 3 if k.endswith("treeids") else t for t in deep[k]] for k, v in shallow.items()
    }
    x = _inputs(rng, rows, thresholds, np.float64)
    compiled, numpy_form = node_forms("TreeEnsembleRegressor", [x], 3, domain=ML, **attrs)
    assert_same(compiled, numpy_form)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_balanced_trees_few_rows(dtype):
    """Trees all of one depth: fewer rows than lanes walk them in lock step across trees."""
    rng = np.random.default_rng(6)
    thresholds = _thresholds(rng)
    attrs = legacy_forest(rng, 70, 5, LEGACY_MODES, "target", 3, thresholds, shallow=0.0)
    for n in (1, 2, 5, 31, 32, 33):
        x = _inputs(rng, n, thresholds, dtype)
        compiled, numpy_form = node_forms(
            "TreeEnsembleRegressor", [x], 3, domain=ML, n_targets=3, **attrs
        )
        assert_same(compiled, numpy_form)


def _aggregates(rng: np.random.Generator, n: int, classes: int) -> np.ndarray:
    """[n, classes] float64 aggregates: normal values, some 0.0, -0.0, +-inf, NaN and huge."""
    summed = rng.standard_normal((n, classes)) * 4
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 800.0, -800.0])
    where = rng.random(summed.shape) < 0.15
    summed[where] = rng.choice(specials, int(where.sum()))
    return summed


def _finishes(classes: int, transform: str, labels: Any) -> list[Any]:
    """The Finish specs of a regressor, a classifier (one class never voted) and, with two
    classes, a one-score classifier whose scores are margins and one whose are probabilities."""
    from onnxflow.ops.ml.trees import Finish

    base = np.linspace(-0.5, 0.5, classes)
    never, voted = np.where(np.arange(classes) == classes - 1, -np.inf, 0.0), np.zeros(classes)
    specs = [Finish(transform, base), Finish(transform, np.full(classes, -0.0))]
    specs += [Finish(transform, base, labels, never), Finish(transform, base, labels, voted)]
    if classes == 2:
        specs += [Finish(transform, base, labels, voted, True, positive) for positive in (0, 1)]
    return specs


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("classes", [1, 2, 3, 7])
@pytest.mark.parametrize("labels", ["int64", "str"])
def test_compiled_finish_against_numpy(transform, classes, labels):
    """The compiled finish (base values, top class, post_transform, float32) against the NumPy
    form's steps: the same labels, and scores bit for bit but for exp (libm's against NumPy's,
    which differ in a double's last bit): within one float32 ulp."""
    from native_forms import ulp_distance

    from onnxflow.ops.ml import trees

    names = np.arange(10, 10 + classes) if labels == "int64" else np.array(
        [f"c{i}" for i in range(classes)], dtype=object)  # fmt: skip
    rng = np.random.default_rng(classes)
    for spec in _finishes(classes, transform, names):
        aggregate = np.asarray  # the finish of a given aggregate (x is the aggregate)
        compiled = trees.packed_finish(spec, aggregate)
        numpy_form = trees.numpy_finish(spec, aggregate)
        assert compiled.__module__ == "onnxflow.ops.ml.packed_forest"  # not the NumPy steps
        for n in (0, 1, 5, 300):
            summed = _aggregates(rng, n, classes)
            with np.errstate(all="ignore"):  # inf - inf, exp overflow in the NumPy steps
                got, want = compiled(summed.copy()), numpy_form(summed.copy())
            if spec.labels is not None:
                assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0]), spec
                got, want = got[1], want[1]
            assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
            bound = 0 if transform == "NONE" else 1
            assert ulp_distance(got, want).max(initial=0) <= bound, (spec, n)


def test_the_compiled_finish_is_what_runs(monkeypatch):
    """The compiled form finishes the aggregate in the compiled Post (not NumPy's steps), for
    a classifier and a regressor."""
    from onnxflow.native import _trees

    made = []

    class Counted(_trees.Post):
        def __init__(self, *args):
            made.append(args[2])  # the mode: 0 regression, 1 classes, 2 one score
            super().__init__(*args)

    from onnxflow.ops.ml import packed_forest

    fused = []
    fuse = packed_forest._fused
    monkeypatch.setattr(_trees, "Post", Counted)
    monkeypatch.setattr(packed_forest, "_fused", lambda *a: fused.append(a) or fuse(*a))
    for kind in ("rf_regressor", "rf_classifier"):
        model, feeds = _converted(kind, 3)
        compiled, numpy_form = both_forms(model, feeds)
        assert_same(compiled, numpy_form)
        # a column-major (not C-contiguous) input takes the two-step path: same results
        x = np.asfortranarray(next(iter(feeds.values())))
        compiled, numpy_form = both_forms(model, {next(iter(feeds)): x})
        assert_same(compiled, numpy_form)
    assert sorted(made) == [0, 0, 1, 1] and len(fused) == 4  # the walk, sums and Post in one call
