"""Shape memo (compile/passes/memo_shapes.py), the steps it takes in: a Shape node whose value
one memo alone reads runs inside that memo, which compares its tensor by shape; a memo whose
one value is the target of a Reshape becomes one ShapedReshape node with it. Results equal
the nodes as written whatever shapes come in what order."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

F = TensorProto.FLOAT


def _ints(name: str, values: list[int]) -> object:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _head_split(
    shape_of: str = "x", extra_output: str | None = None, transpose: bool = False
) -> object:
    """``Reshape(x, [B, S, 4, -1])`` with B and S read from ``shape_of``'s shape, as torch.onnx
    writes a head split (then a Transpose of heads before tokens when ``transpose``);
    ``extra_output`` a value also made a graph output."""
    nodes = [
        helper.make_node("Shape", [shape_of], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "axes"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "heads", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r" if transpose else "y"]),
    ]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]))
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        _ints("axes", [0]),
        _ints("heads", [4]),
        _ints("minus1", [-1]),
    ]
    inputs = [helper.make_tensor_value_info("x", F, ["B", "S", "D"])]
    if shape_of != "x":
        inputs.append(helper.make_tensor_value_info(shape_of, F, ["B", "S", "E"]))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, TensorProto.UNDEFINED, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _ops(sess: onnxflow.InferenceSession) -> list[str]:
    return [info.op_type for info in sess.plan.infos]


def _x(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


SHAPES = [(2, 3, 8), (2, 3, 8), (1, 5, 16), (2, 3, 8), (1, 5, 16), (1, 5, 16)]


def _both(model: object) -> tuple[onnxflow.InferenceSession, onnxflow.InferenceSession]:
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    return onnxflow.InferenceSession(model), plain


def test_shape_memo_and_reshape_are_one_step() -> None:
    sess, plain = _both(_head_split())
    assert _ops(sess) == ["ShapedReshape"]
    for shape in SHAPES:
        x = _x(*shape)
        got, want = sess.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
        assert got.shape == want.shape == (*shape[:2], 4, shape[2] // 4)
        np.testing.assert_array_equal(got, want)


def test_head_split_and_its_transpose_are_one_step() -> None:
    sess, plain = _both(_head_split(transpose=True))
    assert _ops(sess) == ["ShapedReshape"]
    for shape in SHAPES:
        x = _x(*shape)
        got, want = sess.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
        assert got.shape == want.shape == (shape[0], 4, shape[1], shape[2] // 4)
        np.testing.assert_array_equal(got, want)


def test_transpose_of_a_reshape_read_elsewhere_stays() -> None:
    sess, plain = _both(_head_split(transpose=True, extra_output="r"))
    assert _ops(sess) == ["ShapedReshape", "Transpose"]
    for shape in SHAPES[:3]:
        x = _x(*shape)
        for got, want in zip(sess.run(None, {"x": x}), plain.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)


def test_reshaped_tensor_compared_by_its_own_shape() -> None:
    """The target comes from z's shape, but x's shape fixes the inferred dim: a run where
    only x's last dim changes must not reuse the last output shape."""
    sess, plain = _both(_head_split(shape_of="z"))
    assert _ops(sess) == ["ShapedReshape"]
    z = _x(2, 3, 5)
    for depth in (8, 8, 16, 8, 4):
        x = _x(2, 3, depth)
        got = sess.run(None, {"x": x, "z": z})[0]
        want = plain.run(None, {"x": x, "z": z})[0]
        assert got.shape == want.shape == (2, 3, 4, depth // 4)
        np.testing.assert_array_equal(got, want)


def test_a_bad_shape_still_fails_after_good_runs() -> None:
    sess, _ = _both(_head_split())
    sess.run(None, {"x": _x(2, 3, 8)})
    with pytest.raises(Exception, match="reshape|Reshape"):
        sess.run(None, {"x": _x(2, 3, 6)})  # 6 is not a multiple of 4 heads
    assert sess.run(None, {"x": _x(2, 3, 8)})[0].shape == (2, 3, 4, 2)


@pytest.mark.parametrize("extra", ["shape", "target"])
def test_values_read_elsewhere_stay_as_written(extra: str) -> None:
    """A Shape value that is also a graph output stays a Shape node (the ShapedReshape reads
    it by value, x by shape); a target also read elsewhere stays a memo value the Reshape
    reads."""
    sess, plain = _both(_head_split(extra_output=extra))
    want_ops = ["Shape", "ShapedReshape"] if extra == "shape" else ["ShapeMemo", "Reshape"]
    assert _ops(sess) == want_ops
    for shape in SHAPES[:3]:
        x = _x(*shape)
        for got, want in zip(sess.run(None, {"x": x}), plain.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)


def test_a_memo_reads_two_shapes_of_one_tensor_once() -> None:
    """Shape(x, end=1) and Shape(x, start=1), read by one memo: it reads x once, by shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["head"], end=1),
        helper.make_node("Shape", ["x"], ["tail"], start=1),
        helper.make_node("ReduceProd", ["tail"], ["rest"], keepdims=1),
        helper.make_node("Concat", ["head", "rest"], ["target"], axis=0),
        helper.make_node("Add", ["target", "zero"], ["t2"]),
        helper.make_node("Reshape", ["x", "t2"], ["y"]),
        helper.make_node("Cast", ["t2"], ["dims"], to=F),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("y", "dims")],
        [_ints("zero", [0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, plain = _both(model)
    assert _ops(sess) == ["ShapeMemo", "Reshape", "Cast"]
    memo = next(n for n in sess.plan.infos if n.op_type == "ShapeMemo")
    assert list(memo.inputs) == ["x"]
    for shape in [(2, 3, 4), (2, 3, 4), (5, 2), (2, 3, 4)]:
        x = _x(*shape)
        for got, want in zip(sess.run(None, {"x": x}), plain.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)


def test_a_small_group_read_by_another_op_stays_as_written() -> None:
    """``Expand(x, Concat(Shape(x, end=1), [3]))``: one node of arithmetic, read by an Expand,
    is cheaper as written than as a memo."""
    nodes = [
        helper.make_node("Shape", ["x"], ["batch"], end=1),
        helper.make_node("Concat", ["batch", "three"], ["target"], axis=0),
        helper.make_node("Expand", ["x", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["B", 1])],
        [helper.make_tensor_value_info("y", F, None)],
        [_ints("three", [3])],
    )
    sess, plain = _both(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert _ops(sess) == ["Shape", "Concat", "Expand"]
    x = _x(2, 1)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])
