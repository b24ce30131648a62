"""A run computes what the spec defines without NumPy warnings: log(0) = -inf, x/0 = inf,
0/0 and sqrt(-1) = NaN, exp overflowing to inf, ... on every path a run can take (plain,
with RunOptions, observed, inside a loop body). Cases the spec leaves undefined and onnxflow
refuses (integer division by zero) still raise."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxflow
from onnxflow.observers import Profiler, Verbose


@pytest.fixture(autouse=True)
def warnings_are_errors() -> Iterator[None]:
    """Any warning fails the test, whatever the test configuration says."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _unary(
    op: str, dtype: int = TensorProto.FLOAT, out: int | None = None, **attrs
) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", dtype, None)],
        [helper.make_tensor_value_info("y", dtype if out is None else out, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _div(dtype: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Div", ["a", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info(n, dtype, None) for n in "ab"],
        [helper.make_tensor_value_info("y", dtype, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


SPEC_DEFINED = [
    ("log_of_zero", _unary("Log"), [0.0, -1.0], [-np.inf, np.nan]),
    ("sqrt_of_negative", _unary("Sqrt"), [-1.0], [np.nan]),
    ("exp_overflows_to_inf", _unary("Exp"), [1000.0], [np.inf]),
    ("reciprocal_of_zero", _unary("Reciprocal"), [0.0, -0.0], [np.inf, -np.inf]),
    ("acosh_below_one", _unary("Acosh"), [0.5], [np.nan]),
    ("cast_to_float16_overflows", _unary("Cast", out=TensorProto.FLOAT16, to=10), [1e6], [np.inf]),
]


def _run_every_way(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The first output of a plain, a RunOptions, a Verbose-observed and a profiled run."""
    sess = onnxflow.InferenceSession(model)
    verbose = Verbose(stream=open(os.devnull, "w"))  # noqa: SIM115
    try:
        return [
            sess.run(None, feeds)[0],
            sess.run(None, feeds, onnxflow.RunOptions())[0],
            sess.run(None, feeds, observers=[verbose])[0],
            sess.run(None, feeds, observers=[Profiler()])[0],
        ]
    finally:
        verbose.stream.close()


@pytest.mark.parametrize(
    ("model", "x", "want"), [c[1:] for c in SPEC_DEFINED], ids=[c[0] for c in SPEC_DEFINED]
)
def test_spec_defined_results_come_without_warnings(
    model: onnx.ModelProto, x: list[float], want: list[float]
) -> None:
    for got in _run_every_way(model, {"x": np.array(x, np.float32)}):
        np.testing.assert_array_equal(got, np.array(want, got.dtype))


def test_float_division_by_zero_is_inf_and_nan() -> None:
    a, b = np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32)
    for got in _run_every_way(_div(TensorProto.FLOAT), {"a": a, "b": b}):
        np.testing.assert_array_equal(got, [np.inf, -np.inf, np.nan])


def test_integer_division_by_zero_still_raises() -> None:
    sess = onnxflow.InferenceSession(_div(TensorProto.INT32))
    feeds = {"a": np.array([1], np.int32), "b": np.array([0], np.int32)}
    with pytest.raises(onnxflow.RuntimeFailure, match="integer Div by zero"):
        sess.run(None, feeds)


def test_a_loop_body_computes_without_warnings() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Log", ["v_in"], ["v_out"]),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None),
        ],
    )
    loop = helper.make_node("Loop", ["n", "", "v"], ["v_final"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
        ],
        [helper.make_tensor_value_info("v_final", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {"n": np.array(3, np.int64), "v": np.array([0.0, 1.0], np.float32)}
    with warnings.catch_warnings():  # the warning this loop is meant to give, not a NumPy one
        warnings.filterwarnings("ignore", "Loop", onnxflow.OnnxflowWarning)
        runs = _run_every_way(model, feeds)
    for got in runs:  # log(log(log(0))) = log(nan); log(log(log(1))) = log(-inf) = nan
        assert np.isnan(got).all()


def test_a_run_leaves_the_callers_error_state_alone() -> None:
    before = np.geterr()
    with np.errstate(divide="raise"):
        got = onnxflow.InferenceSession(_unary("Log")).run(None, {"x": np.zeros(1, np.float32)})
        assert np.geterr()["divide"] == "raise"
    assert np.geterr() == before
    assert got[0][0] == -np.inf


def test_a_run_that_fails_gives_the_callers_error_state_back() -> None:
    """The run's silent error state ends with the run, also when a kernel raises."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [None]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    session = onnxflow.InferenceSession(model.SerializeToString())
    x = np.zeros(6, np.float32)
    with np.errstate(divide="raise", invalid="warn"):
        before = np.geterr()
        for _ in range(3):  # the first runs and the quick path after them
            with pytest.raises(Exception, match="Reshape"):
                session.run(None, {"x": x, "shape": np.array([4, 2], np.int64)})
            assert np.geterr() == before
        assert session.run(None, {"x": x, "shape": np.array([3, 2], np.int64)})[0].shape == (3, 2)
        assert np.geterr() == before


def test_runs_in_threads_keep_their_callers_error_states() -> None:
    """Each thread's error state is its own (a context variable), before, during and after."""
    import threading

    session = onnxflow.InferenceSession(_unary("Log"))
    seen = []

    def caller(mode: str) -> None:
        with np.errstate(divide=mode):
            for _ in range(200):
                session.run(None, {"x": np.zeros(1, np.float32)})
            seen.append((mode, np.geterr()["divide"]))

    threads = [threading.Thread(target=caller, args=(m,)) for m in ("raise", "warn", "ignore")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == [("ignore", "ignore"), ("raise", "raise"), ("warn", "warn")]
