"""The benchmark's workloads: each builds its model and feeds, at full or quick (smoke) size.

- ``dispatch``: a chain of tiny elementwise nodes (cost per node);
- ``rnn_long``, ``rnn_short``: the spec's RNN written as a Scan (H=128, input 64);
- ``loop_elementwise``: a Loop with an elementwise state and a scanned squared norm (per iteration);
- ``loop_spec``: the spec's Loop example (a counter with a condition);
- ``loop_count_small``, ``_mid``, ``_large``: the spec's Loop at growing trip counts (linearity);
- ``knn``, ``gpr``: skl2onnx conversions (a Scan computing distances; a GP with its std);
- ``resnet50``, ``squeezenet``: the onnx package's ``light`` CNNs.

scikit-learn and skl2onnx are optional: their workloads raise :class:`SkipWorkload` without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxflow.spec_models import loop_trip_count, rnn_scan

OPSET = 21
SEED = 0
LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


class SkipWorkload(Exception):
    """A workload that cannot be built here (an optional package is missing)."""


@dataclass
class Workload:
    """A model, its feeds, and how to report it."""

    name: str
    size: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    units: int = 1
    unit: str = ""
    ref_runs: int | None = None
    note: str = ""
    tolerance: tuple[float, float] = (1e-3, 1e-4)
    #: Why onnx.reference's outputs are known to be wrong here, if they are.
    ref_wrong: str = ""


#: onnx.reference 1.x stacks each Loop scan output with an extra axis: [12, -6] comes out as
#: [[12], [-6]].
_REF_LOOP_STACKING = "onnx.reference stacks Loop scan outputs with an extra axis"


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxflow-bench"
    )
    model.ir_version = 10
    return model


def _vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def dispatch(quick: bool) -> Workload:
    """A chain of alternating Add(x, 1) and Mul(x, 0.5) on a float32[16] (values stay bounded)."""
    n = 50 if quick else 500
    nodes = [
        helper.make_node(
            "Add" if i % 2 == 0 else "Mul",
            [f"v{i}", "one" if i % 2 == 0 else "half"],
            [f"v{i + 1}" if i < n - 1 else "y"],
        )
        for i in range(n)
    ]
    consts = [
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [_vi("v0", TensorProto.FLOAT, [16])],
        [_vi("y", TensorProto.FLOAT, [16])],
        consts,
    )
    x = np.random.default_rng(SEED).standard_normal(16).astype(np.float32)
    return Workload(
        "dispatch", f"{n} Add/Mul nodes on f32[16]", _model(graph), {"v0": x}, units=n, unit="node"
    )


def _rnn(name: str, seq: int, batch: int) -> Workload:
    hidden, input_size = 128, 64
    rng = np.random.default_rng(SEED)
    feeds = {
        "H_0": np.zeros((batch, hidden), np.float32),
        "X": rng.standard_normal((seq, batch, input_size)).astype(np.float32),
    }
    return Workload(
        name,
        f"S={seq} B={batch} H={hidden} in={input_size}",
        rnn_scan(hidden, input_size, SEED),
        feeds,
        units=seq,
        unit="step",
        ref_runs=1 if seq >= 1000 else None,
    )


def rnn_long(quick: bool) -> Workload:
    """The RNN Scan on a long batched sequence."""
    return _rnn("rnn_long", 20 if quick else 1000, 8)


def rnn_short(quick: bool) -> Workload:
    """The RNN Scan on a short single sequence."""
    return _rnn("rnn_short", 10 if quick else 100, 1)


def loop_elementwise(quick: bool) -> Workload:
    """Loop M times: x = x * 0.5 + sin(x) on float32[256], scanning out sum(x**2); cond omitted."""
    m, d = (200, 256) if quick else (10_000, 256)
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mul", ["x_in", "half"], ["scaled"]),
            helper.make_node("Sin", ["x_in"], ["sined"]),
            helper.make_node("Add", ["scaled", "sined"], ["x_out"]),
            helper.make_node("ReduceSumSquare", ["x_out"], ["norm2"], keepdims=0),
        ],
        "elementwise-body",
        [
            _vi("i", TensorProto.INT64, []),
            _vi("cond_in", TensorProto.BOOL, []),
            _vi("x_in", f32, [d]),
        ],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("x_out", f32, [d]), _vi("norm2", f32, [])],
    )
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x_final", "norms"], body=body)
    graph = helper.make_graph(
        [loop],
        "elementwise-loop",
        [_vi("x0", f32, [d])],
        [_vi("x_final", f32, [d]), _vi("norms", f32, [m])],
        [
            numpy_helper.from_array(np.array(m, np.int64), "M"),
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        ],
    )
    x0 = np.random.default_rng(SEED).standard_normal(d).astype(np.float32)
    return Workload(
        "loop_elementwise", f"M={m} D={d}", _model(graph), {"x0": x0}, units=m, unit="iter"
    )


def loop_spec(quick: bool) -> Workload:
    """The spec's walkthrough: M = 10, b = 6 stops after two iterations."""
    return Workload(
        "loop_spec",
        "M=10 b=6 (2 iterations)",
        loop_trip_count(10),
        {"b": np.array(6, np.int32)},
        ref_wrong=_REF_LOOP_STACKING,
    )


def _loop_count(name: str, trips: int) -> Workload:
    """The spec's Loop with b = 1, whose condition stays true, so it runs all ``trips``."""
    return Workload(
        name,
        f"M={trips} b=1",
        loop_trip_count(trips),
        {"b": np.array(1, np.int32)},
        units=trips,
        unit="iter",
        ref_runs=1 if trips >= 100_000 else None,
        ref_wrong=_REF_LOOP_STACKING,
    )


def loop_count_small(quick: bool) -> Workload:
    """The counting Loop at 1k (quick: 10) iterations."""
    return _loop_count("loop_count_small", 10 if quick else 1_000)


def loop_count_mid(quick: bool) -> Workload:
    """The counting Loop at 10k (quick: 100) iterations."""
    return _loop_count("loop_count_mid", 100 if quick else 10_000)


def loop_count_large(quick: bool) -> Workload:
    """The counting Loop at 100k (quick: 1000) iterations."""
    return _loop_count("loop_count_large", 1_000 if quick else 100_000)


def _sklearn():
    try:
        import skl2onnx
        import sklearn  # noqa: F401
    except ImportError as exc:
        raise SkipWorkload(f"needs scikit-learn and skl2onnx ({exc.name} not installed)") from exc
    return skl2onnx


def knn(quick: bool) -> Workload:
    """skl2onnx KNeighborsRegressor (k=5): a Scan computes distances to the training rows."""
    skl2onnx = _sklearn()
    from sklearn.neighbors import KNeighborsRegressor

    n_train, n_query, d = (200, 50, 20) if quick else (2_000, 500, 20)
    rng = np.random.default_rng(SEED)
    x = rng.random((n_train, d)).astype(np.float32)
    est = KNeighborsRegressor().fit(x, x @ rng.standard_normal(d))
    onx = skl2onnx.to_onnx(est, x[:1])
    queries = rng.random((n_query, d)).astype(np.float32)
    return Workload(
        "knn", f"train {n_train}x{d}, {n_query} queries", onx, {onx.graph.input[0].name: queries}
    )


def gpr(quick: bool) -> Workload:
    """skl2onnx GaussianProcessRegressor (RBF kernel) with ``return_std``, in float64."""
    skl2onnx = _sklearn()
    from sklearn.gaussian_process import GaussianProcessRegressor

    n_train, n_query, d = (50, 20, 4) if quick else (1_000, 500, 8)
    rng = np.random.default_rng(SEED)
    x = rng.random((n_train, d))
    est = GaussianProcessRegressor(alpha=1e-2, optimizer=None).fit(x, np.sin(x @ np.ones(d)))
    onx = skl2onnx.to_onnx(est, x[:1], options={GaussianProcessRegressor: {"return_std": True}})
    queries = rng.random((n_query, d))
    return Workload(
        "gpr",
        f"train {n_train}x{d}, {n_query} queries, f64",
        onx,
        {onx.graph.input[0].name: queries},
        tolerance=(1e-4, 1e-6),
    )


def forest(quick: bool) -> Workload:
    """skl2onnx RandomForestRegressor, 100 trees of depth 10 (TreeEnsembleRegressor)."""
    skl2onnx = _sklearn()
    from sklearn.ensemble import RandomForestRegressor

    n_trees, n_rows, d = (10, 1_000, 8) if quick else (100, 10_000, 8)
    rng = np.random.default_rng(SEED)
    x = rng.random((2_000, d)).astype(np.float32)
    est = RandomForestRegressor(n_trees, max_depth=10, random_state=SEED).fit(
        x, np.sin(x @ np.ones(d))
    )
    onx = skl2onnx.to_onnx(est, x[:1], target_opset={"": 18, "ai.onnx.ml": 3})
    rows = rng.random((n_rows, d)).astype(np.float32)
    return Workload(
        "forest", f"{n_trees} trees depth 10, {n_rows} rows", onx, {onx.graph.input[0].name: rows}
    )


def light_model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A ``light`` model of the onnx package and a normal random input of its declared shape."""
    model = onnx.load(LIGHT_MODELS / f"light_{name}.onnx")
    initialized = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(SEED)
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in initialized:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return model, feeds


def _cnn(name: str) -> Workload:
    model, feeds = light_model(name)
    shape = "x".join(str(s) for s in next(iter(feeds.values())).shape)
    return Workload(
        name, f"light model, input {shape}", model, feeds, ref_runs=1, tolerance=(1e-3, 1e-5)
    )


def resnet50(quick: bool) -> Workload:
    """ResNet-50 from the onnx package's light models (opset 9)."""
    return _cnn("resnet50")


def squeezenet(quick: bool) -> Workload:
    """SqueezeNet from the onnx package's light models (opset 9)."""
    return _cnn("squeezenet")


TIMED: dict[str, Callable[[bool], Workload]] = {
    f.__name__: f
    for f in (
        dispatch,
        rnn_long,
        rnn_short,
        loop_elementwise,
        loop_spec,
        loop_count_small,
        loop_count_mid,
        loop_count_large,
        knn,
        gpr,
        forest,
        resnet50,
        squeezenet,
    )
}
