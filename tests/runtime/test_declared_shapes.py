"""An output whose actual shape contradicts the static shape its graph output declares: a
warning in onnxruntime's words, once per session and output (onnxruntime logs it on every
run), on every run path; nothing when the shape fits, and nothing from a quiet session."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import onnxflow
from onnxflow.observers import Profiler

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _reshape(declared: list) -> onnx.ModelProto:
    """y = Reshape(x, shape) with y declared ``declared``, and z = x + 1 declared [2, 3]."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("Add", ["x", "one"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [None]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, declared),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor(name="one", data_type=TensorProto.FLOAT, dims=[], vals=[1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _said(sess: onnxflow.InferenceSession, shapes: list[list[int]], **run: object) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for shape in shapes:
            sess.run(None, {"x": X, "shape": np.array(shape)}, **run)
    return [str(w.message) for w in caught if issubclass(w.category, onnxflow.OnnxflowWarning)]


def test_a_contradicted_static_shape_warns_once_per_session_and_output() -> None:
    model = _reshape([2, 3])
    sess = onnxflow.InferenceSession(model)
    said = _said(sess, [[2, 3], [3, 2], [3, 2], [6, 1], [3, 2], [3, 2]])
    theirs = "Expected shape from model of {2,3} does not match actual shape of {3,2} for output y"
    assert said == [f"{theirs} (said once per session and output)"]
    (ours,), (expected,) = sess.run(["y"], {"x": X, "shape": np.array([3, 2])}), [X.reshape(3, 2)]
    np.testing.assert_array_equal(ours, expected)  # the run's result is unchanged
    reference = onnxruntime.InferenceSession(model.SerializeToString())
    assert reference.run(["y"], {"x": X, "shape": np.array([3, 2])})[0].shape == (3, 2)
    assert len(_said(onnxflow.InferenceSession(model), [[3, 2]])) == 1  # a new session says it


@pytest.mark.parametrize(
    ("run", "label"),
    [
        ({}, "plain"),
        ({"observers": [Profiler()]}, "observed"),
        ({"run_options": onnxflow.RunOptions()}, "with run options"),
    ],
)
def test_every_run_path_checks(run: dict, label: str) -> None:
    sess = onnxflow.InferenceSession(_reshape([2, 3]))
    assert len(_said(sess, [[2, 3], [2, 3], [2, 3], [1, 6]], **run)) == 1, label


def test_unknown_dimensions_fit_any_size_and_the_rank_counts() -> None:
    sess = onnxflow.InferenceSession(_reshape(["N", 3]))
    assert _said(sess, [[2, 3], [2, 3], [2, 3]]) == []
    (said,) = _said(sess, [[1, 6]])
    assert "Expected shape from model of {-1,3} does not match actual shape of {1,6}" in said
    (said,) = _said(onnxflow.InferenceSession(_reshape(["N", 3])), [[1, 2, 3]])
    assert "actual shape of {1,2,3} for output y" in said
    assert _said(onnxflow.InferenceSession(_reshape(["N", None])), [[6, 1]]) == []


def test_a_negative_declared_size_fits_any_size() -> None:
    """Exporters (paddle2onnx) write an unknown size as dim_value -1: it fixes nothing, as in
    onnxruntime, which does not warn either."""
    model = _reshape([-1, -1])
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_value == -1
    assert _said(onnxflow.InferenceSession(model), [[2, 3], [6, 1]]) == []


def test_a_quiet_session_does_not_warn() -> None:
    options = onnxflow.SessionOptions()
    options.log_severity_level = 3
    sess = onnxflow.InferenceSession(_reshape([2, 3]), options)
    assert _said(sess, [[3, 2]]) == []
