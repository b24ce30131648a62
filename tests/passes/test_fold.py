"""Constant folding (compile/passes/fold.py): what reads only constants is computed once, at
load; random draws, subgraphs, oversized results and failures are left to run time."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.compile.passes import fold
from onnxflow.traits import NONE, RANDOM

F = TensorProto.FLOAT


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [info.op_type for info in onnxflow.InferenceSession(model).plan.infos]


def _constant_chain(shape: list[int]) -> onnx.ModelProto:
    """y = x + Reshape(ConstantOfShape([4]) * 2, shape): everything but the Add is constant."""
    graph = helper.make_graph(
        [
            helper.make_node(
                "ConstantOfShape",
                ["dims"],
                ["ones"],
                value=numpy_helper.from_array(np.array([1.0], np.float32)),
            ),
            helper.make_node("Mul", ["ones", "two"], ["twos"]),
            helper.make_node("Reshape", ["twos", "shape"], ["w"], name="constant_reshape"),
            helper.make_node("Add", ["x", "w"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("y", F, [4])],
        [
            numpy_helper.from_array(np.array([4], np.int64), "dims"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(shape, np.int64), "shape"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_constant_nodes_are_computed_once_at_load() -> None:
    sess = onnxflow.InferenceSession(_constant_chain([4]))
    assert [info.op_type for info in sess.plan.infos] == ["Add"]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + 2)
    plain = onnxflow.InferenceSession(_constant_chain([4]), onnxflow.SessionOptions(optimize=False))
    assert len(plain.plan.infos) == 4
    np.testing.assert_array_equal(plain.run(None, {"x": x})[0], x + 2)


def test_a_failing_constant_node_fails_at_run_time_naming_it() -> None:
    sess = onnxflow.InferenceSession(_constant_chain([3]))  # 4 values cannot become [3]
    with pytest.raises(onnxflow.RuntimeFailure, match="constant_reshape"):
        sess.run(None, {"x": np.zeros(4, np.float32)})


def test_an_initializer_a_feed_may_override_is_not_a_constant() -> None:
    model = _constant_chain([4])
    model.graph.input.append(helper.make_tensor_value_info("two", F, []))
    assert _op_types(model) == ["Mul", "Reshape", "Add"]  # ConstantOfShape reads dims only
    x = np.zeros(4, np.float32)
    (y,) = onnxflow.run(model, {"x": x, "two": np.array(3, np.float32)})
    np.testing.assert_array_equal(y, x + 3)


def test_a_random_draw_is_never_folded() -> None:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 21]>
        g (float[2] x) => (float[2] y) {
            noise = RandomNormal <shape = [2]> ()
            y = Add (x, noise)
        }
    """)
    assert _op_types(model) == ["RandomNormal", "Add"]
    sess = onnxflow.InferenceSession(model)
    x = np.zeros(2, np.float32)
    first, second = sess.run(None, {"x": x})[0], sess.run(None, {"x": x})[0]
    assert not np.array_equal(first, second)  # a new draw each run


def test_an_oversized_result_is_left_to_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold, "FOLD_LIMIT_BYTES", 8)  # 4 float32 values are 16 bytes
    assert _op_types(_constant_chain([4])) == ["ConstantOfShape", "Mul", "Reshape", "Add"]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(onnxflow.run(_constant_chain([4]), {"x": x})[0], x + 2)


def test_folded_constants_are_read_only() -> None:
    sess = onnxflow.InferenceSession(_constant_chain([4]))
    folded = [v for v in sess.plan.template if isinstance(v, np.ndarray)]
    assert folded
    assert not any(v.flags.writeable for v in folded)


def test_what_may_fold() -> None:
    node = helper.make_node("Neg", ["c"], ["n"])
    assert fold.may_fold(NONE, node, inputs_constant=True)
    assert not fold.may_fold(NONE, node, inputs_constant=False)
    assert not fold.may_fold(RANDOM, node, inputs_constant=True)
    branch = helper.make_graph([], "b", [], [helper.make_tensor_value_info("c", F, [])])
    holder = helper.make_node("If", ["c"], ["n"], then_branch=branch, else_branch=branch)
    assert not fold.may_fold(NONE, holder, inputs_constant=True)


def test_a_failing_step_gives_nothing_to_fold() -> None:
    def fails(x: np.ndarray) -> np.ndarray:
        raise ValueError("no")

    assert fold.fold(fails, [np.ones(2)], 1, multi=False) is None
    assert fold.fold(np.negative, [np.ones(2)], 1, multi=False)[0].tolist() == [-1, -1]
    values = fold.fold(lambda x: (x, x + 1), [np.ones(1)], 3, multi=True)
    assert [v if v is None else v.tolist() for v in values] == [[1], [2], None]


def _passing_x(name: str, out: str) -> onnx.GraphProto:
    """A branch that gives the outer x back as ``out``."""
    return helper.make_graph(
        [helper.make_node("Identity", ["x"], [out])],
        name,
        [],
        [helper.make_tensor_value_info(out, F, [4])],
    )


def _if_reading_an_outer_constant(overridable: bool, nested: bool) -> onnx.ModelProto:
    """y = If(c, then: x + Neg(w), else: x), w an initializer of the main graph (also an input
    the caller may feed when ``overridable``); ``nested``: the then branch is itself an If
    whose then branch reads w, two scopes down."""
    then = helper.make_graph(
        [
            helper.make_node("Neg", ["w"], ["nw"], name="neg"),
            helper.make_node("Add", ["x", "nw"], ["t"], name="add"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [4])],
    )
    other = _passing_x("else", "e")
    if nested:
        then = helper.make_graph(
            [helper.make_node("If", ["c"], ["inner"], then_branch=then, else_branch=other)],
            "outer_then",
            [],
            [helper.make_tensor_value_info("inner", F, [4])],
        )
        other = _passing_x("outer_else", "e2")
    inputs = [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("x", F, [4]),
    ]
    if overridable:
        inputs.append(helper.make_tensor_value_info("w", F, [4]))
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", F, [4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _branch_ops(plan, depth: int) -> list[str]:
    """The op types of the first subgraph ``depth`` scopes down (the then branches)."""
    for _ in range(depth):
        plan = plan.children[0][1]
    return [info.op_type for info in plan.infos]


@pytest.mark.parametrize("nested", [False, True])
def test_a_subgraph_folds_what_reads_only_its_enclosing_scopes_constants(nested: bool) -> None:
    """The branch's Neg reads only an outer initializer: it is computed at load (once, not at
    every run), and the branch reads the result as a constant, not as a capture."""
    model = _if_reading_an_outer_constant(overridable=False, nested=nested)
    depth = 2 if nested else 1
    folded = onnxflow.InferenceSession(model)
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    assert _branch_ops(folded.plan, depth) == ["Add"]
    assert _branch_ops(plain.plan, depth) == ["Neg", "Add"]
    x = np.ones(4, np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        np.testing.assert_array_equal(folded.run(None, feeds)[0], plain.run(None, feeds)[0])
    np.testing.assert_array_equal(
        folded.run(None, {"c": np.array(True), "x": x})[0], x - [0, 1, 2, 3]
    )


def test_an_outer_initializer_the_caller_may_feed_stays_a_capture() -> None:
    sess = onnxflow.InferenceSession(_if_reading_an_outer_constant(overridable=True, nested=True))
    assert _branch_ops(sess.plan, 2) == ["Neg", "Add"]
    feeds = {"c": np.array(True), "x": np.zeros(4, np.float32)}
    np.testing.assert_array_equal(sess.run(None, feeds)[0], -np.arange(4, dtype=np.float32))
    w = np.full(4, 5, np.float32)
    np.testing.assert_array_equal(sess.run(None, {**feeds, "w": w})[0], -w)
