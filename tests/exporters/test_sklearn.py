"""Models converted by skl2onnx give scikit-learn's own answers.

Each fitted estimator is converted with ``skl2onnx.to_onnx`` at several target opsets, run with
onnxflow, and compared with the estimator's ``predict`` / ``predict_proba`` / ``transform`` /
``score_samples`` / ``decision_function`` (never with another runtime). Converted models compute
in float32, so comparisons use float32 tolerances unless a comment says why they are looser.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxflow

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is a test dependency")
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx is a test dependency")

from sklearn.base import clone  # noqa: E402
from sklearn.cluster import KMeans  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.decomposition import KernelPCA  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    IsolationForest,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.feature_extraction import FeatureHasher  # noqa: E402
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer  # noqa: E402
from sklearn.gaussian_process import (  # noqa: E402
    GaussianProcessClassifier,
    GaussianProcessRegressor,
)
from sklearn.gaussian_process.kernels import RBF, ConstantKernel  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.mixture import GaussianMixture  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.svm import SVC, SVR  # noqa: E402
from sklearn.utils import murmurhash3_32  # noqa: E402

#: Target opsets; ai.onnx.ml 5 is where TreeEnsemble arrives, 3 where tree ensembles get tensors.
OPSETS = {
    "13-ml3": {"": 13, "ai.onnx.ml": 3},
    "18-ml3": {"": 18, "ai.onnx.ml": 3},
    "21-ml5": {"": 21, "ai.onnx.ml": 5},
}
#: float32 results of float64 computations: a few ulps of float32, times a small factor.
RTOL, ATOL = 1e-4, 1e-5

RNG = np.random.default_rng(7)
X_TRAIN = RNG.normal(size=(80, 4)).astype(np.float32)
X_TEST = RNG.normal(size=(15, 4)).astype(np.float32)
Y_CLASS = (X_TRAIN[:, 0] + X_TRAIN[:, 1] > 0).astype(np.int64) + (X_TRAIN[:, 2] > 0.8)
Y_REG = (X_TRAIN @ np.array([1.0, -2.0, 0.5, 3.0]) + np.sin(X_TRAIN[:, 0])).astype(np.float32)

TEXTS = np.array(
    [
        "the cat sat on the mat",
        "dogs chase the cat",
        "the dog ran fast",
        "cats and dogs play",
        "fast cats sat down",
        "the mat was red",
        "dogs sat on mats",
        "red cats ran",
    ]
)
TEXT_LABELS = np.array([0, 1, 1, 0, 0, 1, 1, 0])
TEXT_QUERIES = np.array(["the cat ran fast", "red dogs sat", "nothing known here", "mat mat cat"])


def convert(est: Any, sample: Any, opsets: dict[str, int], **kwargs: Any) -> onnx.ModelProto:
    """Convert ``est`` with skl2onnx, quietly (converters warn about opsets they cap)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return skl2onnx.to_onnx(est, sample, target_opset=opsets, **kwargs)


def run(model: onnx.ModelProto, x: np.ndarray) -> list[Any]:
    """Run a one-input model with onnxflow and return its outputs in the graph's order."""
    sess = onnxflow.InferenceSession(model)
    (name,) = [i.name for i in sess.get_inputs()]
    return sess.run(None, {name: x})


def close(found: Any, expected: Any, rtol: float = RTOL, atol: float = ATOL) -> None:
    np.testing.assert_allclose(
        np.asarray(found, dtype=np.float64).reshape(np.shape(expected)),
        expected,
        rtol=rtol,
        atol=atol,
    )


def same_labels(found: Any, expected: np.ndarray) -> None:
    np.testing.assert_array_equal(np.asarray(found).reshape(-1), expected)


def same_zipmap(found: list[dict[Any, float]], expected: np.ndarray, classes: np.ndarray) -> None:
    """A ZipMap output (one dict per row) equals predict_proba, row by row."""
    assert isinstance(found, list) and len(found) == len(expected)
    for row, probs in zip(found, expected, strict=True):
        assert sorted(row) == sorted(classes.tolist())
        close([row[c] for c in classes.tolist()], probs)


@functools.cache
def fitted(name: str) -> Any:
    """Fit each estimator once per test session (small data, few iterations)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLP convergence warnings on purpose-small runs
        return _ESTIMATORS[name]()


_ESTIMATORS = {
    "knn_classifier": lambda: KNeighborsClassifier(n_neighbors=5).fit(X_TRAIN, Y_CLASS),
    # skl2onnx 1.20 converts weights="distance" as if uniform (onnxruntime gives the same
    # uniform answer), so the regressor keeps the default weights.
    "knn_regressor": lambda: KNeighborsRegressor(n_neighbors=4).fit(X_TRAIN, Y_REG),
    "gaussian_process": lambda: GaussianProcessRegressor(
        ConstantKernel(2.0) * RBF(1.5), alpha=0.1, optimizer=None
    ).fit(X_TRAIN, Y_REG),
    "kernel_pca": lambda: KernelPCA(n_components=3, kernel="rbf", gamma=0.2).fit(X_TRAIN),
    "scaled_logistic": lambda: make_pipeline(StandardScaler(), LogisticRegression()).fit(
        X_TRAIN * 3 + 1, Y_CLASS
    ),
    "random_forest_classifier": lambda: RandomForestClassifier(
        n_estimators=8, max_depth=5, random_state=0
    ).fit(X_TRAIN, Y_CLASS),
    "random_forest_regressor": lambda: RandomForestRegressor(
        n_estimators=8, max_depth=5, random_state=0
    ).fit(X_TRAIN, Y_REG),
    "gradient_boosting_classifier": lambda: GradientBoostingClassifier(
        n_estimators=10, max_depth=3, random_state=0
    ).fit(X_TRAIN, Y_CLASS),
    "gradient_boosting_binary": lambda: GradientBoostingClassifier(
        n_estimators=10, max_depth=3, random_state=0
    ).fit(X_TRAIN, Y_CLASS.clip(0, 1)),
    "gradient_boosting_regressor": lambda: GradientBoostingRegressor(
        n_estimators=10, max_depth=3, random_state=0
    ).fit(X_TRAIN, Y_REG),
    "isolation_forest": lambda: IsolationForest(n_estimators=10, random_state=0).fit(X_TRAIN),
    "svc": lambda: SVC(probability=True, random_state=0).fit(X_TRAIN, Y_CLASS),
    "svr": lambda: SVR(C=3.0).fit(X_TRAIN, Y_REG),
    "mlp_classifier": lambda: MLPClassifier(
        hidden_layer_sizes=(16,), max_iter=200, random_state=0
    ).fit(X_TRAIN, Y_CLASS),
    "mlp_regressor": lambda: MLPRegressor(
        hidden_layer_sizes=(16, 8), max_iter=200, random_state=0
    ).fit(X_TRAIN, Y_REG),
    "kmeans": lambda: KMeans(n_clusters=3, n_init=2, random_state=0).fit(X_TRAIN),
    "gaussian_mixture": lambda: GaussianMixture(n_components=3, random_state=0).fit(X_TRAIN),
    "gaussian_process_classifier": lambda: GaussianProcessClassifier(RBF(1.0), optimizer=None).fit(
        X_TRAIN, Y_CLASS.clip(0, 1)
    ),
}

opsets = pytest.mark.parametrize("opsets", list(OPSETS.values()), ids=list(OPSETS))


# -- models whose converters compute with Scan ------------------------------------------------


def _scan_count(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Scan" for n in model.graph.node)


@opsets
def test_knn_classifier_labels_and_zipmap_probabilities(opsets: dict[str, int]) -> None:
    est = fitted("knn_classifier")
    model = convert(est, X_TRAIN[:1], opsets)
    assert _scan_count(model) >= 1
    out = run(model, X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    same_zipmap(out[1], est.predict_proba(X_TEST), est.classes_)


@opsets
def test_knn_regressor(opsets: dict[str, int]) -> None:
    est = fitted("knn_regressor")
    model = convert(est, X_TRAIN[:1], opsets)
    assert _scan_count(model) >= 1
    close(run(model, X_TEST)[0], est.predict(X_TEST))


@opsets
@pytest.mark.parametrize("name", ["knn_classifier", "knn_regressor"])
def test_knn_with_the_cdist_option_uses_com_microsoft_cdist(
    opsets: dict[str, int], name: str
) -> None:
    est = fitted(name)
    options = {"optim": "cdist"} | ({"zipmap": False} if name == "knn_classifier" else {})
    model = convert(est, X_TRAIN[:1], opsets, options=options)
    assert any(n.op_type == "CDist" and n.domain == "com.microsoft" for n in model.graph.node)
    out = run(model, X_TEST)
    if name == "knn_classifier":
        same_labels(out[0], est.predict(X_TEST))
        close(out[1], est.predict_proba(X_TEST))
    else:
        close(out[0], est.predict(X_TEST))


@opsets
def test_gaussian_process_mean_and_std(opsets: dict[str, int]) -> None:
    est = fitted("gaussian_process")
    options = {GaussianProcessRegressor: {"return_std": True}}
    model = convert(est, X_TRAIN[:1], opsets, options=options)
    assert _scan_count(model) >= 1
    mean, std = est.predict(X_TEST, return_std=True)
    out = run(model, X_TEST)
    # The mean sums 80 float32 products of magnitude ~10; the std is the square root of
    # k(x, x) - k*' K^-1 k*, a difference of two float32 numbers close to each other.
    close(out[0], mean, rtol=1e-3, atol=1e-3)
    close(out[1], std, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("name", ["gaussian_process", "knn_regressor", "mlp_regressor"])
def test_double_precision_regressors_agree_tightly(name: str) -> None:
    x_train, y_train, x = (a.astype(np.float64) for a in (X_TRAIN, Y_REG, X_TEST))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = clone(fitted(name)).fit(x_train, y_train)
    options = (
        {GaussianProcessRegressor: {"return_std": True}} if name == "gaussian_process" else None
    )
    out = run(convert(est, x[:1], OPSETS["18-ml3"], options=options), x)
    assert out[0].dtype == np.float64
    close(out[0], est.predict(x), rtol=1e-9, atol=1e-9)


@opsets
def test_kernel_pca_transform(opsets: dict[str, int]) -> None:
    est = fitted("kernel_pca")
    model = convert(est, X_TRAIN[:1], opsets)
    # Projections sum 80 float32 kernel values times eigenvector coefficients.
    close(run(model, X_TEST)[0], est.transform(X_TEST), atol=1e-4)


# -- pipelines ---------------------------------------------------------------------------------


@opsets
def test_scaler_logistic_pipeline_with_zipmap(opsets: dict[str, int]) -> None:
    est = fitted("scaled_logistic")
    x = X_TEST * 3 + 1
    out = run(convert(est, x[:1], opsets), x)
    same_labels(out[0], est.predict(x))
    same_zipmap(out[1], est.predict_proba(x), est.classes_)


@opsets
def test_scaler_logistic_pipeline_without_zipmap(opsets: dict[str, int]) -> None:
    est = fitted("scaled_logistic")
    x = X_TEST * 3 + 1
    out = run(convert(est, x[:1], opsets, options={"zipmap": False}), x)
    same_labels(out[0], est.predict(x))
    close(out[1], est.predict_proba(x))


def _mixed_columns(n: int, seed: int) -> np.ndarray:
    """Two numeric columns (the second with gaps) and one integer-coded categorical column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    x[rng.random(n) < 0.25, 1] = np.nan
    x[:, 2] = rng.integers(0, 4, size=n)
    return x


@opsets
def test_imputer_one_hot_column_transformer_with_trees(opsets: dict[str, int]) -> None:
    x_train, x_test = _mixed_columns(120, 1), _mixed_columns(30, 2)
    y = (np.nan_to_num(x_train[:, 1]) + (x_train[:, 2] == 2) > 0.3).astype(np.int64)
    prep = ColumnTransformer(
        [
            ("num", SimpleImputer(strategy="median"), [0, 1]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), [2]),
        ]
    )
    tree = RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0)
    est = make_pipeline(prep, tree).fit(x_train, y)
    out = run(convert(est, x_train[:1], opsets, options={"zipmap": False}), x_test)
    same_labels(out[0], est.predict(x_test))
    close(out[1], est.predict_proba(x_test))


# -- tree ensembles ----------------------------------------------------------------------------


@opsets
@pytest.mark.parametrize("name", ["random_forest_classifier", "gradient_boosting_classifier"])
def test_tree_classifiers(opsets: dict[str, int], name: str) -> None:
    est = fitted(name)
    out = run(convert(est, X_TRAIN[:1], opsets, options={"zipmap": False}), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    close(out[1], est.predict_proba(X_TEST))


@opsets
def test_gradient_boosting_binary_decision_function(opsets: dict[str, int]) -> None:
    est = fitted("gradient_boosting_binary")
    options = {"zipmap": False, "raw_scores": True}
    out = run(convert(est, X_TRAIN[:1], opsets, options=options), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    scores = np.asarray(out[1])
    close(scores[:, -1], est.decision_function(X_TEST))


@opsets
@pytest.mark.parametrize("name", ["random_forest_regressor", "gradient_boosting_regressor"])
def test_tree_regressors(opsets: dict[str, int], name: str) -> None:
    est = fitted(name)
    close(run(convert(est, X_TRAIN[:1], opsets), X_TEST)[0], est.predict(X_TEST))


#: skl2onnx 1.20 refuses ai.onnx.ml 4+ for IsolationForest ("version 4 of domain 'ai.onnx.ml'
#: not supported yet"), so the newest opsets pair ai.onnx 21 with ai.onnx.ml 3.
ISOLATION_OPSETS = {
    "13-ml3": {"": 13, "ai.onnx.ml": 3},
    "18-ml3": {"": 18, "ai.onnx.ml": 3},
    "21-ml3": {"": 21, "ai.onnx.ml": 3},
}


@pytest.mark.parametrize("opsets", list(ISOLATION_OPSETS.values()), ids=list(ISOLATION_OPSETS))
def test_isolation_forest_labels_and_scores(opsets: dict[str, int]) -> None:
    est = fitted("isolation_forest")
    options = {"score_samples": True}
    out = run(convert(est, X_TRAIN[:1], opsets, options=options), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    close(out[1], est.decision_function(X_TEST))
    close(out[2], est.score_samples(X_TEST))


def test_isolation_forest_refuses_ai_onnx_ml_5() -> None:
    with pytest.raises(RuntimeError, match=r"ai\.onnx\.ml"):
        convert(fitted("isolation_forest"), X_TRAIN[:1], OPSETS["21-ml5"])


# -- kernels, networks, clustering, mixtures ---------------------------------------------------


@opsets
def test_svc_with_probabilities(opsets: dict[str, int]) -> None:
    est = fitted("svc")
    out = run(convert(est, X_TRAIN[:1], opsets, options={"zipmap": False}), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    close(out[1], est.predict_proba(X_TEST))


@opsets
@pytest.mark.parametrize("shape", ["ovr", "ovo"])
def test_svc_decision_function(opsets: dict[str, int], shape: str) -> None:
    # With probability=True the converter outputs probabilities even when asked for raw scores,
    # so the decision function is checked on an SVC fitted without probabilities.
    est = SVC(decision_function_shape=shape).fit(X_TRAIN, Y_CLASS)
    out = run(convert(est, X_TRAIN[:1], opsets, options={"zipmap": False}), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    close(out[1], est.decision_function(X_TEST))


@opsets
def test_svr(opsets: dict[str, int]) -> None:
    est = fitted("svr")
    close(run(convert(est, X_TRAIN[:1], opsets), X_TEST)[0], est.predict(X_TEST))


@opsets
def test_mlp_classifier(opsets: dict[str, int]) -> None:
    est = fitted("mlp_classifier")
    out = run(convert(est, X_TRAIN[:1], opsets, options={"zipmap": False}), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    close(out[1], est.predict_proba(X_TEST))


@opsets
def test_mlp_regressor(opsets: dict[str, int]) -> None:
    est = fitted("mlp_regressor")
    close(run(convert(est, X_TRAIN[:1], opsets), X_TEST)[0], est.predict(X_TEST))


@opsets
def test_kmeans_labels_and_distances(opsets: dict[str, int]) -> None:
    est = fitted("kmeans")
    out = run(convert(est, X_TRAIN[:1], opsets), X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    # Distances come from |x|^2 - 2 x.c + |c|^2 in float32, then a square root.
    close(out[1], est.transform(X_TEST), atol=1e-4)


@opsets
def test_gaussian_mixture_labels_probabilities_and_log_likelihood(opsets: dict[str, int]) -> None:
    est = fitted("gaussian_mixture")
    model = convert(est, X_TRAIN[:1], opsets, options={"score_samples": True})
    out = run(model, X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    # Probabilities are exponentials of float32 log densities of magnitude ~10.
    close(out[1], est.predict_proba(X_TEST), atol=1e-4)
    close(out[2], est.score_samples(X_TEST), rtol=1e-4, atol=1e-4)


@opsets
def test_gaussian_process_classifier_uses_com_microsoft_solve(opsets: dict[str, int]) -> None:
    est = fitted("gaussian_process_classifier")
    model = convert(est, X_TRAIN[:1], opsets, options={"zipmap": False})
    assert any(n.op_type == "Solve" and n.domain == "com.microsoft" for n in model.graph.node)
    out = run(model, X_TEST)
    same_labels(out[0], est.predict(X_TEST))
    # The latent mean goes through a float32 Cholesky solve against 80 training points.
    close(out[1], est.predict_proba(X_TEST), atol=3e-4)


def test_gaussian_process_classifier_in_double_precision() -> None:
    est = fitted("gaussian_process_classifier")
    x = X_TEST.astype(np.float64)
    out = run(convert(est, x[:1], OPSETS["18-ml3"], options={"zipmap": False}), x)
    close(out[1], est.predict_proba(x), rtol=1e-9, atol=1e-9)


# -- text: StringNormalizer, com.microsoft Tokenizer, TfIdfVectorizer --------------------------


@opsets
def test_tfidf_logistic_pipeline_on_strings(opsets: dict[str, int]) -> None:
    est = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(TEXTS, TEXT_LABELS)
    queries = TEXT_QUERIES.reshape(-1, 1)
    model = convert(est, queries[:1], opsets, options={"zipmap": False})
    assert any(n.op_type == "Tokenizer" and n.domain == "com.microsoft" for n in model.graph.node)
    out = run(model, queries)
    same_labels(out[0], est.predict(TEXT_QUERIES))
    close(out[1], est.predict_proba(TEXT_QUERIES))


@opsets
def test_tfidf_transform(opsets: dict[str, int]) -> None:
    est = TfidfVectorizer().fit(TEXTS)
    queries = TEXT_QUERIES.reshape(-1, 1)
    found = run(convert(est, queries[:1], opsets), queries)[0]
    close(found, est.transform(TEXT_QUERIES).toarray())


@opsets
def test_count_vectorizer_with_bigrams(opsets: dict[str, int]) -> None:
    # The converter tokenizes with [a-zA-Z0-9_]+ where scikit-learn needs two characters; the
    # texts have no one-letter words, so the bigrams agree.
    est = CountVectorizer(ngram_range=(1, 2)).fit(TEXTS)
    queries = TEXT_QUERIES.reshape(-1, 1)
    found = run(convert(est, queries[:1], opsets), queries)[0]
    np.testing.assert_array_equal(found, est.transform(TEXT_QUERIES).toarray())


@opsets
def test_char_ngrams(opsets: dict[str, int]) -> None:
    est = TfidfVectorizer(analyzer="char", ngram_range=(1, 2)).fit(TEXTS)
    queries = TEXT_QUERIES.reshape(-1, 1)
    found = run(convert(est, queries[:1], opsets), queries)[0]
    close(found, est.transform(TEXT_QUERIES).toarray())


@opsets
def test_count_vectorizer_with_separators(opsets: dict[str, int]) -> None:
    est = CountVectorizer().fit(TEXTS)
    queries = np.array(["the cat, ran; fast", "dogs.sat"]).reshape(-1, 1)
    options = {CountVectorizer: {"separators": [" ", "[.]", ",", ";"]}}
    found = run(convert(est, queries[:1], opsets, options=options), queries)[0]
    np.testing.assert_array_equal(found, est.transform(queries.reshape(-1)).toarray())


@opsets
def test_feature_hasher_uses_com_microsoft_murmurhash3(opsets: dict[str, int]) -> None:
    docs = [["cat", "dog", "cat"], ["fish", "\u00e9t\u00e9", "dog"], ["a", "bb", "ccccc"]]
    est = FeatureHasher(n_features=16, input_type="string").fit(docs)
    initial_types = [("x", skl2onnx.common.data_types.StringTensorType([None, 3]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = skl2onnx.to_onnx(est, initial_types=initial_types, target_opset=opsets)
    found = run(model, np.array(docs, dtype=object))[0]
    np.testing.assert_array_equal(found, est.transform(docs).toarray())


# -- com.microsoft kernels, on cases written from their specs ----------------------------------


def _contrib_model(op_type: str, inputs: list[tuple[str, int]], out_type: int, **attrs: Any):
    node = helper.make_node(op_type, [n for n, _ in inputs], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node],
        op_type,
        [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    opset_imports = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opset_imports)


def tokenize(x: Any, mark: int = 0, mincharnum: int = 1, pad_value: str = "#", **attrs: Any):
    model = _contrib_model(
        "Tokenizer",
        [("x", TensorProto.STRING)],
        TensorProto.STRING,
        mark=mark,
        mincharnum=mincharnum,
        pad_value=pad_value,
        **attrs,
    )
    (y,) = onnxflow.InferenceSession(model).run(None, {"x": np.array(x, dtype=object)})
    return y


@pytest.mark.parametrize(
    ("x", "attrs", "expected"),
    [
        pytest.param(
            ["Hello World", "I love computer science !"],
            {"separators": [" "]},
            [["Hello", "World", "#", "#", "#"], ["I", "love", "computer", "science", "!"]],
            id="spec_example_separators",
        ),
        pytest.param(
            [["a, b;c  d", "e"]],
            {"separators": [" ", ",", ";"]},
            [[["a", "b", "c", "d"], ["e", "#", "#", "#"]]],
            id="runs_of_separators_and_2d_input",
        ),
        pytest.param(
            ["abcd"], {"separators": ["cd", "bc"]}, [["ab"]], id="earlier_separator_wins_overlap"
        ),
        pytest.param(["xaby"], {"separators": ["a|ab"]}, [["x", "y"]], id="longest_separator"),
        pytest.param(
            ["h\u00e9!", "ab"],
            {"separators": [""]},
            [["h", "\u00e9", "!"], ["a", "b", "#"]],
            id="character_mode",
        ),
        pytest.param(
            ["ab abc", "xyz"],
            {"tokenexp": "a|ab"},
            [["ab", "ab"], ["#", "#"]],
            id="leftmost_longest",
        ),
        pytest.param(["aabab"], {"tokenexp": "a*(ab)*"}, [["aabab"]], id="longest_not_first"),
        pytest.param(
            ["caf\u00e9 au lait"], {"tokenexp": "\\w+"}, [["caf", "au", "lait"]], id="ascii_word"
        ),
        pytest.param(["a\nb"], {"tokenexp": "."}, [["a", "\n", "b"]], id="dot_matches_newline"),
        pytest.param(["ab ab"], {"tokenexp": "^ab"}, [["ab"]], id="anchor_is_the_string_start"),
        pytest.param(["ab1 cd"], {"tokenexp": "[[:alpha:]]+"}, [["ab", "cd"]], id="posix_class"),
        pytest.param(["ab1 cd"], {"tokenexp": "[[:^alpha:]]+"}, [["1 "]], id="negated_posix"),
        pytest.param(
            ["a bb \u00e9 \u00e9\u00e9"],
            {"tokenexp": "[^ ]+", "mincharnum": 2},
            [["bb", "\u00e9\u00e9"]],
            id="mincharnum_counts_characters",
        ),
        pytest.param(
            ["c bb d"], {"separators": [" "], "mincharnum": 2}, [["bb"]], id="mincharnum_separators"
        ),
        pytest.param(
            [["Hello World", "x"]],
            {"separators": [" "], "mark": 1},
            [[["\x02", "Hello", "World", "\x03"], ["\x02", "x", "\x03", "#"]]],
            id="marks_inside_padding",
        ),
    ],
)
def test_tokenizer_spec_cases(x: Any, attrs: dict[str, Any], expected: list[Any]) -> None:
    found = tokenize(x, **attrs)
    assert found.dtype == object
    assert found.tolist() == expected


@pytest.mark.parametrize(
    ("x", "attrs", "shape"),
    [
        pytest.param(["   ", " "], {"separators": [" "]}, (2, 0), id="everything_removed"),
        pytest.param([["", "."]], {"tokenexp": "\\w", "mark": 1}, (1, 2, 0), id="no_token_marked"),
        pytest.param(np.zeros(0, dtype=object), {"separators": [" "]}, (0,), id="empty_c"),
        pytest.param(np.zeros((3, 0), dtype=object), {"separators": [" "]}, (3, 0), id="empty_nc"),
    ],
)
def test_tokenizer_empty_shapes(x: Any, attrs: dict[str, Any], shape: tuple[int, ...]) -> None:
    assert tokenize(x, **attrs).shape == shape


def test_tokenizer_does_not_modify_its_input() -> None:
    x = np.array(["a b", "c"], dtype=object)
    tokenize(x, separators=[" "])
    assert x.tolist() == ["a b", "c"]


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"separators": [" "], "tokenexp": "a"}, "exactly one"),
        ({}, "exactly one"),
        ({"separators": [" "], "mincharnum": 0}, "mincharnum"),
        ({"separators": [""], "mincharnum": 2}, "mincharnum"),
        ({"separators": ["", " "]}, "separators"),
        ({"tokenexp": "[[:nope:]]"}, "invalid character class range"),
        ({"tokenexp": "(unclosed"}, "cannot compile"),
    ],
)
def test_tokenizer_rejects_bad_attributes_at_load(attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(onnxflow.OnnxflowError, match=message):
        tokenize(["a"], **attrs)


def test_tokenizer_catastrophic_backtracking_pattern_answers_at_once() -> None:
    """``(a+)+c`` on 'a' * 34 takes a backtracking engine 2**34 steps; RE2 is linear."""
    out = tokenize(["a" * 34, "xaac"], tokenexp="(a+)+c")
    assert out.tolist() == [["#"], ["aac"]]


def test_tokenizer_rejects_three_dimensional_input() -> None:
    with pytest.raises(onnxflow.RuntimeFailure, match=r"\[C\] or \[N, C\]"):
        tokenize(np.array([[["a"]]], dtype=object), separators=[" "])


@pytest.mark.parametrize("positive", [0, 1])
@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_murmurhash3_strings_agree_with_scikit_learn(positive: int, seed: int) -> None:
    words = ["", "a", "ab", "abc", "abcd", "abcde", "h\u00e9llo w\u00f6rld \u20ac", "x" * 37]
    x = np.array(words, dtype=object).reshape(2, 4)
    out_type = TensorProto.UINT32 if positive else TensorProto.INT32
    model = _contrib_model(
        "MurmurHash3", [("x", TensorProto.STRING)], out_type, positive=positive, seed=seed
    )
    (found,) = onnxflow.InferenceSession(model).run(None, {"x": x})
    assert found.dtype == (np.uint32 if positive else np.int32)
    expected = [murmurhash3_32(w, seed=seed, positive=bool(positive)) for w in words]
    np.testing.assert_array_equal(found.reshape(-1), expected)


def test_murmurhash3_hashes_an_int32_by_its_four_bytes() -> None:
    x = np.array([0, 1, -5, 123456], dtype=np.int32)
    model = _contrib_model("MurmurHash3", [("x", TensorProto.INT32)], TensorProto.UINT32, seed=3)
    (found,) = onnxflow.InferenceSession(model).run(None, {"x": x})
    expected = [murmurhash3_32(v.tobytes(), seed=3, positive=True) for v in x]
    np.testing.assert_array_equal(found, expected)


@pytest.mark.parametrize("transposed", [0, 1])
def test_solve(transposed: int) -> None:
    rng = np.random.default_rng(0)
    a = (rng.normal(size=(4, 4)) + 4 * np.eye(4)).astype(np.float32)
    y = rng.normal(size=(4, 2)).astype(np.float32)
    inputs = [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT)]
    model = _contrib_model("Solve", inputs, TensorProto.FLOAT, transposed=transposed)
    (found,) = onnxflow.InferenceSession(model).run(None, {"a": a, "b": y})
    assert found.dtype == np.float32
    close((a.T if transposed else a).astype(np.float64) @ found, y)


# -- batches of one and of none ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "knn_regressor",
        "gaussian_process",
        "kernel_pca",
        "kmeans",
        "gaussian_mixture",
        "mlp_regressor",
        "random_forest_regressor",
        "svr",
        "scaled_logistic",
        "knn_classifier",
    ],
)
def test_empty_batch_gives_empty_outputs(name: str) -> None:
    est = fitted(name)
    options = (
        {GaussianProcessRegressor: {"return_std": True}} if name == "gaussian_process" else None
    )
    model = convert(est, X_TRAIN[:1], OPSETS["18-ml3"], options=options)
    one, none = run(model, X_TEST[:1]), run(model, X_TEST[:0])
    for single, empty in zip(one, none, strict=True):
        if isinstance(single, list):
            assert empty == []
        else:
            assert empty.shape == (0, *single.shape[1:]) and empty.dtype == single.dtype


# -- unsupported operators ---------------------------------------------------------------------


def test_every_missing_operator_is_reported_at_load() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Frobnicate", ["a"], ["b"], domain="org.example"),
        helper.make_node("Defrobnicate", ["b"], ["y"], domain="org.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    opset_imports = [helper.make_opsetid("", 18), helper.make_opsetid("org.example", 1)]
    model = helper.make_model(graph, opset_imports=opset_imports)
    with pytest.raises(onnxflow.UnsupportedOperatorError) as info:
        onnxflow.InferenceSession(model)
    assert sorted(info.value.missing) == [
        ("org.example", "Defrobnicate", 1),
        ("org.example", "Frobnicate", 1),
    ]
    assert "Frobnicate" in str(info.value) and "Defrobnicate" in str(info.value)
    assert "Relu" not in str(info.value)
