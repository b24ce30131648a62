"""Shape memo (compile/passes/memo_shapes.py): the nodes that compute on Shape outputs and
constants run as ShapeMemo nodes, which run them again only when the shapes change; results
equal the nodes as written, whatever shapes come in what order."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.observers import Trace

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _const(name: str, values: list[int]) -> object:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64))
    )


def _model(*, random_node: bool = False, overridable: bool = False) -> object:
    """y = Reshape(x, [batch, -1]) + mask, where mask = Where(Range(0, n) < k, 0, -1) of x's
    last dimension n and a constant k; as torch.onnx writes such things."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("zero", [0]),
        _const("minus1", [-1]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["flat_shape"]),
        helper.make_node("Gather", ["flat_shape", "one"], ["n"], axis=0),
        helper.make_node("Squeeze", ["n"], ["n0"]),
        helper.make_node("Range", ["start", "n0", "step"], ["positions"]),
        helper.make_node("Less", ["positions", "k"], ["keep"]),
        helper.make_node("Where", ["keep", "fzero", "fminus"], ["mask"]),
        helper.make_node("Add", ["flat", "mask"], ["y"]),
    ]
    if random_node:  # a random draw of the shape may not be kept
        nodes[-1:] = [
            helper.make_node("RandomUniformLike", ["mask"], ["noise"]),
            helper.make_node("Add", ["flat", "noise"], ["y"]),
        ]
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "start"),
        numpy_helper.from_array(np.array(1, np.int64), "step"),
        numpy_helper.from_array(np.array(5, np.int64), "k"),
        numpy_helper.from_array(np.array(0.0, np.float32), "fzero"),
        numpy_helper.from_array(np.array(-1.0, np.float32), "fminus"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, ["B", "H", "W"])]
    if overridable:
        inputs.append(helper.make_tensor_value_info("k", I64, []))
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _ops(sess: onnxflow.InferenceSession) -> list[str]:
    return [info.op_type for info in sess.plan.infos]


def _x(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def test_shape_arithmetic_runs_as_memo_nodes() -> None:
    sess = onnxflow.InferenceSession(_model())
    # the first group (Gather, Concat) is small, but its one value is the Reshape's target:
    # with the Shape and the Reshape, one step; the second Shape, read by the memo alone,
    # runs inside it
    assert _ops(sess) == ["ShapedReshape", "ShapeMemo", "Add"]
    plain = onnxflow.InferenceSession(_model(), onnxflow.SessionOptions(optimize=False))
    assert "ShapeMemo" not in _ops(plain)


def test_results_equal_the_nodes_as_written_as_shapes_change() -> None:
    sess = onnxflow.InferenceSession(_model())
    plain = onnxflow.InferenceSession(_model(), onnxflow.SessionOptions(optimize=False))
    for shape in [(2, 2, 3), (2, 2, 3), (3, 1, 2), (2, 2, 3), (1, 4, 4), (1, 4, 4)]:
        x = _x(*shape)
        (got,) = sess.run(None, {"x": x})
        (want,) = plain.run(None, {"x": x})
        assert got.shape == want.shape == (shape[0], shape[1] * shape[2])
        np.testing.assert_array_equal(got, want)


def test_a_kept_value_handed_out_is_a_copy_the_caller_may_change() -> None:
    model = _model()
    model.graph.output.append(helper.make_tensor_value_info("mask", F, None))
    sess = onnxflow.InferenceSession(model)
    x = _x(2, 2, 3)
    first = sess.run(["mask"], {"x": x})[0]
    assert first.flags.writeable
    first[:] = 99.0
    again = sess.run(["mask"], {"x": x})[0]
    np.testing.assert_array_equal(again, np.where(np.arange(6) < 5, 0.0, -1.0))


def test_random_nodes_and_overridable_initializers_are_not_kept() -> None:
    sess = onnxflow.InferenceSession(_model(random_node=True))
    assert "RandomUniformLike" in _ops(sess)
    x = _x(2, 2, 3)
    a, b = sess.run(None, {"x": x})[0], sess.run(None, {"x": x})[0]
    assert not np.array_equal(a, b)  # the draw is made again each run
    fed = onnxflow.InferenceSession(_model(overridable=True))
    for k in (5, 2, 5):
        (y,) = fed.run(None, {"x": x, "k": np.array(k, np.int64)})
        mask = np.where(np.arange(6) < k, 0, -1).astype(np.float32)
        np.testing.assert_array_equal(y, x.reshape(2, 6) + mask)


@pytest.mark.parametrize("use", ["trace", "pickle"])
def test_observed_and_unpickled_sessions_give_the_same_values(use: str) -> None:
    sess = onnxflow.InferenceSession(_model())
    x = _x(2, 2, 3)
    (want,) = sess.run(None, {"x": x})
    if use == "pickle":
        other = pickle.loads(pickle.dumps(sess))
        for shape in [(2, 2, 3), (1, 1, 5), (2, 2, 3)]:
            np.testing.assert_array_equal(
                other.run(None, {"x": _x(*shape)})[0], sess.run(None, {"x": _x(*shape)})[0]
            )
        return
    trace = Trace()
    (got,) = sess.run(None, {"x": x}, observers=[trace])
    np.testing.assert_array_equal(got, want)


def test_an_observed_run_keeps_the_memo_as_an_unobserved_one_does() -> None:
    """Runs watched node by node (a Profiler, a Trace) call each step's stateful form, as the
    generated function does: a ShapeMemo hands back what it kept instead of computing again,
    so a profile times the work an unobserved run does."""
    from onnxflow.observers import Profiler
    from onnxflow.runtime.observe import Observer

    class Outputs(Observer):
        def __init__(self) -> None:
            self.seen: list[object] = []

        def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
            if info.op_type == "ShapeMemo":
                self.seen.append(outputs[0])

    sess = onnxflow.InferenceSession(_model())
    x = _x(2, 2, 3)
    outputs = Outputs()
    for _ in range(3):
        sess.run(None, {"x": x}, observers=[outputs, Profiler()])
    first, *others = outputs.seen
    assert len(others) == 2 and all(o is first for o in others)  # kept, not made again
    outputs.seen.clear()
    sess.run(None, {"x": _x(3, 1, 2)}, observers=[outputs])
    assert outputs.seen[0] is not first and outputs.seen[0].shape == (2,)


def test_a_memo_in_a_loop_body_follows_shapes_that_change_each_iteration() -> None:
    # The carried vector grows by one each iteration; the body reshapes it to (n, 1) with a
    # target computed from its shape, so the memo sees a new shape every iteration.
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
            helper.make_node("Cast", ["i1"], ["fi"], to=F),
            helper.make_node("Concat", ["v", "fi"], ["grown"], axis=0),
            helper.make_node("Shape", ["grown"], ["shape"]),
            helper.make_node("Gather", ["shape", "first"], ["n0"], axis=0),
            helper.make_node("Unsqueeze", ["n0", "zero"], ["n"]),
            helper.make_node("Concat", ["n", "one"], ["target"], axis=0),
            helper.make_node("Reshape", ["grown", "target"], ["column"]),
            helper.make_node("ReduceSum", ["column", "zero"], ["sums"], keepdims=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", F, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("grown", F, None),
            helper.make_tensor_value_info("sums", F, None),
        ],
        [
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            numpy_helper.from_array(np.array(0, np.int64), "first"),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "v0"], ["v", "sums"], body=body)],
        "g",
        [
            helper.make_tensor_value_info("M", I64, []),
            helper.make_tensor_value_info("v0", F, ["N"]),
        ],
        [
            helper.make_tensor_value_info("v", F, None),
            helper.make_tensor_value_info("sums", F, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"M": np.array(6, np.int64), "v0": np.array([0.5, 1.5], np.float32)}
    sess = onnxflow.InferenceSession(model)
    # the memo and the Reshape of its target run as one step
    assert "ShapedReshape" in [i.op_type for _, c in sess.plan.children for i in c.infos]
    got = sess.run(None, feeds)
    want = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False)).run(
        None, feeds
    )
    np.testing.assert_array_equal(got[0], np.array([0.5, 1.5, 0, 1, 2, 3, 4, 5], np.float32))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
