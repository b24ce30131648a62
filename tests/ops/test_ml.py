"""ai.onnx.ml kernels: what the node suite does not check.

Tree ensembles are checked against a per-row reference written here from the spec, on random
forests using every node mode, missing-value rule and aggregate; scikit-learn models converted
with skl2onnx are checked against scikit-learn's own predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxflow

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def make_model(
    node: onnx.NodeProto,
    inputs: list[tuple[str, int, list[Any] | None]],
    outputs: list[onnx.ValueInfoProto] | list[tuple[str, int, list[Any] | None]],
    ml_opset: int = 3,
) -> onnx.ModelProto:
    """Return a one-node model; inputs and outputs as (name, elem_type, shape)."""
    ins = [helper.make_tensor_value_info(*i) for i in inputs]
    outs = [o if isinstance(o, onnx.ValueInfoProto) else helper.make_tensor_value_info(*o)
            for o in outputs]  # fmt: skip
    graph = helper.make_graph([node], "g", ins, outs)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def run(model: onnx.ModelProto, **feeds: Any) -> list[Any]:
    return onnxflow.InferenceSession(model).run(None, feeds)


def run_node(op_type: str, x: np.ndarray, ml_opset: int = 3, n_out: int = 1, **attrs: Any) -> Any:
    """Run one ai.onnx.ml node on one tensor input; outputs are left untyped."""
    node = helper.make_node(op_type, ["X"], [f"Y{i}" for i in range(n_out)], domain=ML, **attrs)
    elem = TensorProto.STRING if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    outs = [helper.make_empty_tensor_value_info(f"Y{i}") for i in range(n_out)]
    result = run(make_model(node, [("X", elem, None)], outs, ml_opset), X=x)
    return result[0] if n_out == 1 else result


# -- a per-row reference for tree ensembles --------------------------------------------------


@dataclass
class Node:
    mode: str
    feature: int = 0
    value: float = 0.0
    true: int = 0
    false: int = 0
    tracks_true: int = 0
    votes: list[tuple[int, float]] = field(default_factory=list)


def random_tree(
    rng: np.random.Generator, depth: int, n_features: int, n_targets: int, modes: list[str]
) -> list[Node]:
    """Return a random tree as a node list (node ids are positions, the root is node 0)."""
    nodes: list[Node] = []

    def grow(level: int) -> int:
        nid = len(nodes)
        if level == depth or (level > 1 and rng.random() < 0.15):
            votes = [(int(rng.integers(n_targets)), float(rng.normal())) for _ in range(2)]
            nodes.append(Node("LEAF", votes=votes))
            return nid
        value = float(np.float32(rng.choice([-1.0, 0.0, 0.5, 1.0]) + rng.normal() * 0.5))
        nodes.append(Node(str(rng.choice(modes)), int(rng.integers(n_features)), value))
        nodes[nid].tracks_true = int(rng.integers(2))
        nodes[nid].true = grow(level + 1)
        nodes[nid].false = grow(level + 1)
        return nid

    grow(0)
    return nodes


def branch(node: Node, x: float) -> bool:
    """Return whether the row takes the true branch, straight from the spec's mode list."""
    if np.isnan(x) and node.tracks_true:
        return True
    t = node.value
    return {
        "BRANCH_LEQ": x <= t, "BRANCH_LT": x < t, "BRANCH_GTE": x >= t, "BRANCH_GT": x > t,
        "BRANCH_EQ": x == t, "BRANCH_NEQ": x != t,
    }[node.mode]  # fmt: skip


def reference(
    trees: list[list[Node]], x: np.ndarray, n_targets: int, how: str, base: list[float]
) -> np.ndarray:
    """Evaluate the trees row by row, aggregating votes as TreeEnsembleRegressor says."""
    out = np.zeros((len(x), n_targets))
    for r, row in enumerate(x.astype(np.float64)):
        per_target: list[list[float]] = [[] for _ in range(n_targets)]
        for tree in trees:
            node = tree[0]
            while node.mode != "LEAF":
                node = tree[node.true if branch(node, row[node.feature]) else node.false]
            for target, weight in node.votes:
                per_target[target].append(weight)
        for t, ws in enumerate(per_target):
            if how == "SUM":
                out[r, t] = sum(ws)
            elif how == "AVERAGE":
                out[r, t] = sum(ws) / len(trees)
            elif ws:
                out[r, t] = min(ws) if how == "MIN" else max(ws)
    return out + np.asarray(base or [0.0])


def legacy_attrs(trees: list[list[Node]], prefix: str) -> dict[str, Any]:
    """Encode trees as TreeEnsembleRegressor/Classifier nodes_* and <prefix>_* attributes."""
    a: dict[str, list[Any]] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_featureids", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        f"{prefix}_treeids", f"{prefix}_nodeids", f"{prefix}_ids", f"{prefix}_weights",
    )}  # fmt: skip
    for t, tree in enumerate(trees):
        for i, n in enumerate(tree):
            for key, v in zip(
                ("treeids", "nodeids", "modes", "featureids", "values", "truenodeids",
                 "falsenodeids", "missing_value_tracks_true"),
                (t, i, n.mode, n.feature, n.value, n.true, n.false, n.tracks_true),
            ):  # fmt: skip
                a[f"nodes_{key}"].append(v)
            for target, weight in n.votes:
                for key, v in zip(("treeids", "nodeids", "ids", "weights"), (t, i, target, weight)):
                    a[f"{prefix}_{key}"].append(v)
    return a


def te5_attrs(trees: list[list[Node]]) -> dict[str, Any]:
    """Encode single-vote trees as TreeEnsemble-5 attributes (leaves in their own arrays)."""
    a: dict[str, list[Any]] = {k: [] for k in (
        "nodes_featureids", "nodes_splits", "nodes_truenodeids", "nodes_trueleafs",
        "nodes_falsenodeids", "nodes_falseleafs", "nodes_modes", "nodes_missing_value_tracks_true",
        "leaf_targetids", "leaf_weights", "tree_roots",
    )}  # fmt: skip
    for tree in trees:
        interior = [i for i, n in enumerate(tree) if n.mode != "LEAF"]
        leaves = [i for i, n in enumerate(tree) if n.mode == "LEAF"]
        first_node, first_leaf = len(a["nodes_modes"]), len(a["leaf_weights"])
        where = {i: first_node + k for k, i in enumerate(interior)}
        where |= {i: first_leaf + k for k, i in enumerate(leaves)}
        a["tree_roots"].append(first_node)
        for i in interior:
            n = tree[i]
            a["nodes_featureids"].append(n.feature)
            a["nodes_splits"].append(n.value)
            a["nodes_modes"].append(MODES.index(n.mode))
            a["nodes_missing_value_tracks_true"].append(n.tracks_true)
            for side, child in (("true", n.true), ("false", n.false)):
                a[f"nodes_{side}nodeids"].append(where[child])
                a[f"nodes_{side}leafs"].append(int(tree[child].mode == "LEAF"))
        for i in leaves:
            (target, weight), *_ = tree[i].votes
            a["leaf_targetids"].append(target)
            a["leaf_weights"].append(weight)
    a["nodes_modes"] = helper.make_tensor("m", TensorProto.UINT8, [len(a["nodes_modes"])],
                                          a["nodes_modes"])  # fmt: skip
    for key in ("nodes_splits", "leaf_weights"):
        a[key] = helper.make_tensor(key, TensorProto.DOUBLE, [len(a[key])], a[key])
    return a


def random_inputs(rng: np.random.Generator, n: int, n_features: int) -> np.ndarray:
    """Random rows with exact threshold hits and NaNs, so every branch rule is exercised."""
    x = rng.choice([-1.0, 0.0, 0.5, 1.0], size=(n, n_features)) + rng.normal(size=(n, n_features))
    x[rng.random(x.shape) < 0.1] = np.nan
    return x.astype(np.float32)


def forest(seed: int, n_trees: int = 7, depth: int = 5, n_targets: int = 3) -> list[list[Node]]:
    rng = np.random.default_rng(seed)
    return [random_tree(rng, depth, 4, n_targets, MODES) for _ in range(n_trees)]


@pytest.mark.parametrize("how", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_regressor_matches_per_row_reference(how: str) -> None:
    trees = forest(1)
    x = random_inputs(np.random.default_rng(2), 200, 4)
    # Thresholds hit exactly by some inputs, so == and != branches are taken.
    for tree in trees:
        for n in tree:
            if n.mode != "LEAF" and n.feature == 0:
                n.value = float(x[3, 0]) if not np.isnan(x[3, 0]) else n.value
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=3, aggregate_function=how,
        base_values=[0.5, -1.0, 2.0], **legacy_attrs(trees, "target"),
    )  # fmt: skip
    model = make_model(
        node, [("X", TensorProto.FLOAT, [None, 4])], [("Y", TensorProto.FLOAT, None)]
    )
    expected = reference(trees, x, 3, how, [0.5, -1.0, 2.0])
    np.testing.assert_allclose(run(model, X=x)[0], expected, rtol=1e-5, atol=1e-5)


def test_tree_ensemble_5_matches_per_row_reference_in_double() -> None:
    trees = forest(3, n_trees=5, depth=6, n_targets=2)
    x = random_inputs(np.random.default_rng(4), 100, 4).astype(np.float64)
    for tree in trees:
        for n in tree:
            n.votes = n.votes[:1]
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=2, **te5_attrs(trees)
    )
    model = make_model(
        node, [("X", TensorProto.DOUBLE, [None, 4])], [("Y", TensorProto.DOUBLE, None)], 5
    )
    y = run(model, X=x)[0]
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, reference(trees, x, 2, "SUM", []), rtol=1e-12, atol=1e-12)


def test_tree_ensemble_100_trees_depth_10_on_10000_rows() -> None:
    rng = np.random.default_rng(5)
    trees = [random_tree(rng, 10, 8, 1, ["BRANCH_LEQ"]) for _ in range(100)]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1,
        **legacy_attrs(trees, "target"),
    )  # fmt: skip
    model = make_model(
        node, [("X", TensorProto.FLOAT, [None, 8])], [("Y", TensorProto.FLOAT, None)]
    )
    session = onnxflow.InferenceSession(model)
    x = random_inputs(rng, 10_000, 8)
    y = session.run(None, {"X": x})[0]  # its time is measured by `python -m onnxflow.bench`
    np.testing.assert_allclose(y[:50], reference(trees, x[:50], 1, "SUM", []), rtol=1e-5, atol=1e-5)


def test_tree_votes_are_summed_in_tree_order() -> None:
    # Four one-leaf trees voting 1e16, 1, -1e16, 1: in tree order the sum is 1 (1e16 + 1 rounds
    # to 1e16); a pairwise sum would give 0. The kernel keeps the order of the trees.
    votes = [1e16, 1.0, -1e16, 1.0]
    attrs = {
        "nodes_treeids": [0, 1, 2, 3], "nodes_nodeids": [0, 0, 0, 0],
        "nodes_featureids": [0] * 4, "nodes_values": [0.0] * 4, "nodes_modes": ["LEAF"] * 4,
        "nodes_truenodeids": [0] * 4, "nodes_falsenodeids": [0] * 4,
        "target_treeids": [0, 1, 2, 3], "target_nodeids": [0] * 4, "target_ids": [0] * 4,
        "target_weights": votes,
    }  # fmt: skip
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1, **attrs)
    model = make_model(
        node, [("X", TensorProto.DOUBLE, [None, 1])], [("Y", TensorProto.DOUBLE, None)]
    )
    y = onnxflow.InferenceSession(model).run(None, {"X": np.zeros((3, 1))})[0]
    np.testing.assert_array_equal(y, np.ones((3, 1)))


def test_tree_classifier_binary_single_score_column_expands_to_two() -> None:
    trees = forest(6, n_trees=4, depth=4, n_targets=1)
    node = helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["L", "P"], domain=ML, classlabels_strings=["no", "yes"],
        post_transform="LOGISTIC", base_values=[0.25], **legacy_attrs(trees, "class"),
    )  # fmt: skip
    outs = [("L", TensorProto.STRING, None), ("P", TensorProto.FLOAT, None)]
    model = make_model(node, [("X", TensorProto.FLOAT, [None, 4])], outs)
    x = random_inputs(np.random.default_rng(7), 60, 4)
    labels, probs = run(model, X=x)
    score = reference(trees, x, 1, "SUM", [0.25])[:, 0]
    positive = 1 / (1 + np.exp(-score))
    np.testing.assert_allclose(probs, np.stack([1 - positive, positive], 1), rtol=1e-5)
    assert labels.dtype == object
    assert labels.tolist() == np.where(score > 0, "yes", "no").tolist()


def test_as_tensor_attributes_need_ml_opset_3() -> None:
    tree = [Node("BRANCH_LEQ", 0, 0.5, 1, 2), Node("LEAF", votes=[(0, 1.0)]),
            Node("LEAF", votes=[(0, 2.0)])]  # fmt: skip
    attrs = legacy_attrs([tree], "target")
    attrs["nodes_values_as_tensor"] = helper.make_tensor("v", TensorProto.DOUBLE, [3], [0.5] * 3)
    del attrs["nodes_values"]
    x = np.array([[0.5], [0.7]], np.float64)
    y = run_node("TreeEnsembleRegressor", x, 3, n_targets=1, **attrs)
    np.testing.assert_array_equal(y, np.array([[1.0], [2.0]], np.float32))
    with pytest.raises(onnxflow.OnnxflowError, match="opset 3"):
        run_node("TreeEnsembleRegressor", x, 1, n_targets=1, **attrs)


def test_sklearn_random_forest_classifier_and_gradient_boosting_regressor() -> None:
    sklearn = pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_iris, make_regression
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier

    del sklearn
    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    clf = RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0).fit(x, y)
    onx = skl2onnx.to_onnx(clf, x[:1], options={"zipmap": False}, target_opset={"": 17, ML: 3})
    labels, probs = onnxflow.InferenceSession(onx).run(None, {"X": x})
    np.testing.assert_array_equal(labels, clf.predict(x))
    np.testing.assert_allclose(probs, clf.predict_proba(x), atol=1e-5)

    xr, yr = make_regression(300, 5, random_state=0)
    xr = xr.astype(np.float32)
    reg = GradientBoostingRegressor(n_estimators=30, random_state=0).fit(xr, yr)
    onx = skl2onnx.to_onnx(reg, xr[:1], target_opset={"": 17, ML: 3})
    (pred,) = onnxflow.InferenceSession(onx).run(None, {"X": xr})
    np.testing.assert_allclose(pred[:, 0], reg.predict(xr), rtol=1e-4, atol=1e-3)


def test_tree_ensemble_5_set_membership_and_missing_values() -> None:
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=1, tree_roots=[0],
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [2], [6, 0]),
        nodes_featureids=[0, 1],
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [2], [0.0, 1.0]),
        nodes_truenodeids=[0, 1], nodes_trueleafs=[1, 1],
        nodes_falsenodeids=[1, 2], nodes_falseleafs=[0, 1],
        nodes_missing_value_tracks_true=[0, 1],
        membership_values=helper.make_tensor("v", TensorProto.FLOAT, [3], [2, 5, np.nan]),
        leaf_targetids=[0, 0, 0],
        leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [3], [10, 20, 30]),
    )  # fmt: skip
    model = make_model(
        node, [("X", TensorProto.FLOAT, [None, 2])], [("Y", TensorProto.FLOAT, None)], 5
    )
    x = np.array([[5, 9], [7, 9], [3, 0], [3, np.nan], [np.nan, 2]], np.float32)
    np.testing.assert_array_equal(run(model, X=x)[0][:, 0], [10, 30, 20, 20, 30])


# -- the other ai.onnx.ml kernels --------------------------------------------------------------


def test_inputs_are_not_mutated() -> None:
    x = np.array([[1.0, np.nan, 3.0]], np.float32)
    keep = x.copy()
    run_node("Imputer", x, imputed_value_floats=[0.0], replaced_value_float=float("nan"))
    run_node("Normalizer", np.nan_to_num(x), norm="L2")
    run_node("Scaler", x, offset=[1.0], scale=[2.0])
    np.testing.assert_array_equal(x, keep)


def test_label_encoder_versions() -> None:
    s = np.array(["b", "x", "a"], object)
    assert run_node("LabelEncoder", s, 1, classes_strings=["a", "b"]).tolist() == [1, -1, 0]
    i = np.array([1, 7], np.int64)
    out = run_node("LabelEncoder", i, 1, classes_strings=["a", "b"], default_string="?")
    assert out.tolist() == ["b", "?"]
    f = np.array([1.5, np.nan, 2.0], np.float32)
    out = run_node("LabelEncoder", f, 2, keys_floats=[1.5, np.nan], values_int64s=[1, 2])
    assert out.tolist() == [1, 2, -1]
    keys = helper.make_tensor("k", TensorProto.INT32, [3], [3, 4, 3])
    values = helper.make_tensor("v", TensorProto.DOUBLE, [3], [0.5, 1.5, 2.5])
    out = run_node("LabelEncoder", np.array([3, 5], np.int32), 4, keys_tensor=keys,
                   values_tensor=values)  # fmt: skip
    assert out.dtype == np.float64
    assert out.tolist()[0] == 2.5  # the last repeated key wins
    assert np.signbit(out[1]) and out[1] == 0  # default -0.0


def test_linear_classifier_binary_and_multiclass() -> None:
    x = np.array([[1.0, 2.0], [-3.0, 0.5]], np.float32)
    labels, scores = run_node(
        "LinearClassifier", x, n_out=2, coefficients=[1.0, -1.0], intercepts=[0.5],
        classlabels_ints=[4, 9],
    )  # fmt: skip
    np.testing.assert_allclose(scores, [[0.5, -0.5], [3.0, -3.0]])
    assert labels.tolist() == [4, 4]
    labels, scores = run_node(
        "LinearClassifier", x, n_out=2, coefficients=[1, 0, 0, 1, -1, 0],
        classlabels_strings=["a", "b", "c"], post_transform="SOFTMAX",
    )  # fmt: skip
    assert labels.tolist() == ["b", "c"]
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-6)


def test_zip_map_returns_a_list_of_dicts() -> None:
    node = helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, classlabels_strings=["a", "b"])
    out = helper.make_value_info(
        "Z",
        helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(1, None))
        ),
    )
    model = make_model(node, [("X", TensorProto.FLOAT, [None, 2])], [out])
    (z,) = run(model, X=np.array([[0.25, 0.75], [1.0, 0.0]], np.float32))
    assert z == [{"a": 0.25, "b": 0.75}, {"a": 1.0, "b": 0.0}]


def test_zip_map_labels_are_checked_when_the_session_is_made() -> None:
    """ZipMap's labels are read once, at compile time: a node giving both lists fails then,
    not at its first run."""
    node = helper.make_node(
        "ZipMap", ["X"], ["Z"], domain=ML, classlabels_strings=["a"], classlabels_int64s=[1]
    )
    out = helper.make_value_info(
        "Z",
        helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(1, None))
        ),
    )
    model = make_model(node, [("X", TensorProto.FLOAT, [None, 1])], [out])
    with pytest.raises(onnxflow.OnnxflowError, match="exactly one of .* ZipMap labels"):
        onnxflow.InferenceSession(model.SerializeToString())


def test_scaler_float32_and_other_inputs() -> None:
    """(x - offset) * scale in float32 for float32, float64 and int64 inputs."""
    x = np.array([[1.5, -2.0, 3.25], [0.1, 7.0, -1.0]], np.float32)
    offset, scale = [0.5, 1.0, -1.0], [2.0, 0.1, 3.0]
    want = (x - np.float32(offset)) * np.float32(scale)
    for dtype in (np.float32, np.float64, np.int64):
        y = run_node("Scaler", x.astype(dtype), offset=offset, scale=scale)
        assert y.dtype == np.float32
        np.testing.assert_array_equal(
            y, (x.astype(dtype).astype(np.float32) - np.float32(offset)) * np.float32(scale)
        )
    np.testing.assert_array_equal(run_node("Scaler", x, offset=offset, scale=scale), want)


def test_scaler_offset_and_scale_of_different_widths_fail_when_the_session_is_made() -> None:
    node = helper.make_node("Scaler", ["X"], ["Y"], domain=ML, offset=[0.0] * 3, scale=[1.0] * 4)
    model = make_model(
        node, [("X", TensorProto.FLOAT, [None, 3])], [("Y", TensorProto.FLOAT, None)]
    )
    with pytest.raises(onnxflow.OnnxflowError, match="offset has 3 entries and scale 4"):
        onnxflow.InferenceSession(model.SerializeToString())
    with pytest.raises(onnxflow.OnnxflowError, match="scale has 4 entries, expected 1 or 3"):
        run_node("Scaler", np.zeros((2, 3), np.float32), offset=[0.5], scale=[1.0] * 4)


def test_one_hot_encoder_unknown_category() -> None:
    x = np.array([[1, 5]], np.int64)
    y = run_node("OneHotEncoder", x, cats_int64s=[1, 2])
    np.testing.assert_array_equal(y, [[[1, 0], [0, 0]]])
    with pytest.raises(onnxflow.OnnxflowError, match="not a category"):
        run_node("OneHotEncoder", x, cats_int64s=[1, 2], zeros=0)


def _extract(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    node = helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain=ML)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    model = make_model(
        node, [("X", elem, None), ("I", TensorProto.INT64, None)], [("Y", elem, None)]
    )
    return run(model, X=x, I=indices)[0]


@pytest.mark.parametrize(
    ("shape", "indices"),
    [
        ((3, 4), [-1, 0]),  # a neighbour list padded with -1 (RadiusNeighborsRegressor)
        ((3, 4), [[1, -4]]),  # the most negative index names the first column
        ((2, 2, 5), [-2, 4, -5, 0]),
        ((5,), [-1, -1, 2]),  # a vector: one row out, as onnxruntime shapes it
        ((3, 4), [[0, -1], [2, -3]]),  # a 2-D index list is flattened
    ],
    ids=["padded_with_minus_one", "minus_width", "rank_3", "vector", "index_matrix"],
)
def test_array_feature_extractor_negative_indices_count_from_the_end(
    shape: tuple[int, ...], indices: list[Any]
) -> None:
    from onnx.reference import ReferenceEvaluator

    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    i = np.array(indices, np.int64)
    got = _extract(x, i)
    node = helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain=ML)
    model = make_model(
        node, [("X", TensorProto.FLOAT, None), ("I", TensorProto.INT64, None)],
        [("Y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    (expected,) = ReferenceEvaluator(model).run(None, {"X": x, "I": i})
    np.testing.assert_array_equal(got, expected)
    assert got.shape[-1] == i.size


@pytest.mark.parametrize("index", [4, -5, 100, -100])
def test_array_feature_extractor_index_out_of_range_is_an_error(index: int) -> None:
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(onnxflow.OnnxflowError, match=rf"\[-4, 4\).*found {index}"):
        _extract(x, np.array([0, index], np.int64))
