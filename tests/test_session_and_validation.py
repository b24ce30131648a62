"""The public API and the IR rules checked at session creation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, parser

import onnxflow

F = TensorProto.FLOAT

ADD_MODEL = """
<ir_version: 10, opset_import: ["" : 21]>
add (float[N, 3] X, float[N, 3] Y) => (float[N, 3] Z, float[N, 3] W) {
    Z = Add(X, Y)
    W = Relu(Z)
}
"""


def test_model_from_path_bytes_and_proto(tmp_path: Path) -> None:
    model = parser.parse_model(ADD_MODEL)
    path = tmp_path / "add.onnx"
    onnx.save(model, path)
    x = np.array([[1, -2, 3]], np.float32)
    y = np.array([[1, 1, -5]], np.float32)
    for source in (str(path), path, model.SerializeToString(), model):
        z, w = onnxflow.InferenceSession(source).run(None, {"X": x, "Y": y})
        np.testing.assert_array_equal(z, x + y)
        np.testing.assert_array_equal(w, np.maximum(x + y, 0))


def test_node_args_mirror_onnxruntime() -> None:
    sess = onnxflow.InferenceSession(parser.parse_model(ADD_MODEL))
    x, _ = sess.get_inputs()
    assert (x.name, x.type, x.shape) == ("X", "tensor(float)", ["N", 3])
    assert [o.name for o in sess.get_outputs()] == ["Z", "W"]


def test_run_selected_outputs_and_one_off_run() -> None:
    model = parser.parse_model(ADD_MODEL)
    feeds = {"X": np.ones((2, 3), np.float32), "Y": -np.ones((2, 3), np.float32) * 2}
    (w,) = onnxflow.InferenceSession(model).run(["W"], feeds)
    np.testing.assert_array_equal(w, np.zeros((2, 3), np.float32))
    z, _ = onnxflow.run(model, feeds)
    np.testing.assert_array_equal(z, -np.ones((2, 3), np.float32))


def test_one_session_many_runs_fresh_frames() -> None:
    sess = onnxflow.InferenceSession(parser.parse_model(ADD_MODEL))
    for k in range(3):
        x = np.full((1, 3), k, np.float32)
        (z, _) = sess.run(None, {"X": x, "Y": x})
        np.testing.assert_array_equal(z, 2 * x)


def test_initializer_that_is_an_input_can_be_overridden() -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "B"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", F, [2]), helper.make_tensor_value_info("B", F, [2])],
        [helper.make_tensor_value_info("Y", F, [2])],
        [numpy_helper.from_array(np.array([10, 20], np.float32), "B")],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    assert [a.name for a in sess.get_inputs()] == ["X"]
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], [11, 22])
    np.testing.assert_array_equal(sess.run(None, {"X": x, "B": x})[0], [2, 4])


def _graph(nodes, inputs=("X",), outputs=("Y",), inits=()):
    return helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info(n, F, [2]) for n in inputs],
            [helper.make_tensor_value_info(n, F, [2]) for n in outputs],
            list(inits),
        )
    )


def test_unsorted_nodes_name_the_offending_node() -> None:
    model = _graph(
        [
            helper.make_node("Relu", ["T"], ["Y"], name="second"),
            helper.make_node("Relu", ["X"], ["T"], name="first"),
        ]
    )
    with pytest.raises(onnxflow.ValidationError, match="not topologically sorted.*'second'"):
        onnxflow.InferenceSession(model, check=False)


def test_name_assigned_twice() -> None:
    model = _graph(
        [
            helper.make_node("Relu", ["X"], ["Y"], name="a"),
            helper.make_node("Relu", ["X"], ["Y"], name="b"),
        ]
    )
    with pytest.raises(onnxflow.ValidationError, match="'Y', which is already defined"):
        onnxflow.InferenceSession(model, check=False)


def test_undefined_name() -> None:
    model = _graph([helper.make_node("Add", ["X", "nowhere"], ["Y"], name="adder")])
    with pytest.raises(
        onnxflow.ValidationError, match="'adder'.*'nowhere', which is never defined"
    ):
        onnxflow.InferenceSession(model, check=False)


def test_subgraph_may_not_redefine_an_outer_name() -> None:
    then = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["X"])],
        "then",
        [],
        [helper.make_tensor_value_info("X", F, [2])],
    )
    model = _graph(
        [helper.make_node("If", ["C"], ["Y"], then_branch=then, else_branch=then)],
        inputs=("X", "C"),
    )
    with pytest.raises(onnxflow.ValidationError, match="redefines 'X' from an enclosing scope"):
        onnxflow.InferenceSession(model, check=False)


def test_all_unsupported_ops_reported_together() -> None:
    model = _graph(
        [
            helper.make_node("NoSuchOp", ["X"], ["T"], domain="custom.a"),
            helper.make_node("Relu", ["T"], ["U"]),
            helper.make_node("AnotherOne", ["U"], ["Y"], domain="custom.b"),
        ]
    )
    model.opset_import.extend(
        [helper.make_opsetid("custom.a", 1), helper.make_opsetid("custom.b", 2)]
    )
    with pytest.raises(onnxflow.UnsupportedOperatorError) as info:
        onnxflow.InferenceSession(model, check=False)
    assert info.value.missing == [("custom.a", "NoSuchOp", 1), ("custom.b", "AnotherOne", 2)]
    assert "NoSuchOp" in str(info.value) and "AnotherOne" in str(info.value)


def test_domain_not_imported() -> None:
    model = _graph([helper.make_node("Foo", ["X"], ["Y"], domain="nowhere.com")])
    with pytest.raises(onnxflow.ValidationError, match="'nowhere.com' is not imported"):
        onnxflow.InferenceSession(model, check=False)


def test_omitted_optional_input_and_output() -> None:
    model = parser.parse_model("""
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[4] X) => (float[4] Y) {
        max_v = Constant<value_float = 1.5>()
        Y = Clip(X, , max_v)
    }
    """)
    (y,) = onnxflow.InferenceSession(model).run(None, {"X": np.array([-3, 0, 1, 2], np.float32)})
    np.testing.assert_array_equal(y, [-3, 0, 1, 1.5])


def test_model_local_function_with_attribute_reference_and_nested_call() -> None:
    model = parser.parse_model("""
    <ir_version: 10, opset_import: ["" : 18, "local" : 1]>
    g (float[3] X) => (float[3] Y) {
        Y = local.Outer<alpha = 2.0>(X)
    }
    <domain: "local", opset_import: ["" : 18, "local" : 1]>
    Inner <alpha> (x) => (y) {
        y = LeakyRelu<alpha: float = @alpha>(x)
    }
    <domain: "local", opset_import: ["" : 18, "local" : 1]>
    Outer <alpha> (x) => (y) {
        t = Neg(x)
        y = local.Inner<alpha: float = @alpha>(t)
    }
    """)
    (y,) = onnxflow.InferenceSession(model).run(None, {"X": np.array([1, -1, 0], np.float32)})
    np.testing.assert_array_equal(y, [-2, 1, 0])


def test_interpreted_plans_give_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphs over MAX_GENERATED_STEPS run on the interpreter: same outputs, same errors."""
    from onnxflow.runtime import lower

    model = parser.parse_model(ADD_MODEL)
    feeds = {"X": np.array([[1, -2, 3]], np.float32), "Y": np.array([[1, 1, -5]], np.float32)}
    generated = onnxflow.InferenceSession(model).run(None, feeds)
    monkeypatch.setattr(lower, "MAX_GENERATED_STEPS", 0)
    sess = onnxflow.InferenceSession(model)
    for got, want in zip(sess.run(None, feeds), generated):
        np.testing.assert_array_equal(got, want)
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"], name="adder")],
        "g",
        [helper.make_tensor_value_info(n, F, None) for n in "AB"],
        [helper.make_tensor_value_info("C", F, None)],
    )
    with pytest.raises(onnxflow.RuntimeFailure, match="Add 'adder'"):
        onnxflow.InferenceSession(helper.make_model(graph)).run(
            None, {"A": np.ones(2, np.float32), "B": np.ones(3, np.float32)}
        )


def test_runs_that_keep_overridable_initializers_use_them_as_constants() -> None:
    graph = helper.make_graph(
        [helper.make_node("Neg", ["B"], ["nb"]), helper.make_node("Add", ["X", "nb"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", F, [2]), helper.make_tensor_value_info("B", F, [2])],
        [helper.make_tensor_value_info("Y", F, [2])],
        [numpy_helper.from_array(np.array([10, 20], np.float32), "B")],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    assert [i.op_type for i in sess._default_plan.infos] == ["Add"]  # Neg(B) folded
    assert [i.op_type for i in sess.plan.infos] == ["Neg", "Add"]
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], [-9, -18])
    np.testing.assert_array_equal(sess.run(None, {"X": x, "B": x})[0], [0, 0])
