"""Feed binding (runtime/feeds.py): one check per input, made once per session, that passes a
well-formed array quickly and otherwise says what is wrong, with the IR's dimension variables."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxflow
from onnxflow.runtime.feeds import FeedBinder, InputCheck, dimension_variable
from onnxflow.values import NodeArg


def _arg(name: str, dims: list[int | str] | None) -> NodeArg:
    return NodeArg.from_value_info(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))


@pytest.mark.parametrize(
    ("dim", "variable"),
    [
        ("N", True),
        ("batch_size", True),
        ("_t0", True),
        ("?", False),
        ("batch size", False),
        ("1N", False),
        ("N-1", False),
        ("é", False),
        ("", False),
    ],
)
def test_only_a_c_identifier_names_a_dimension_variable(dim: str, variable: bool) -> None:
    assert (dimension_variable(dim) == dim) is variable


def test_question_marks_relate_to_nothing() -> None:
    # a Paddle export declares [?, 3, ?, ?]: each '?' matches any size, independently
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    feed = np.ones((1, 3, 48, 192), np.float32)
    (out,) = sess.run(None, {"x": feed})
    assert out.shape == (1, 3, 48, 192)


@pytest.mark.parametrize("dims", [["N", 3], [2, 3], [2, "?"], None])
def test_the_fast_test_and_the_general_check_agree(dims: list[int | str] | None) -> None:
    check = InputCheck(_arg("x", dims))  # dims None: no declared shape, any array passes
    for shape in [(2, 3), (3, 3), (2, 4), (2,), (2, 3, 1)]:
        v = np.zeros(shape, np.float32)
        fast_dims: dict = {}
        general_dims: dict = {}
        assert check.fast is not None
        passed = check.fast(v, fast_dims)
        try:
            check.check(v, general_dims)
            general = True
        except onnxflow.InputError:
            general = False
        assert passed is general, shape
        if passed:
            assert fast_dims == general_dims


def test_feeds_of_one_run_agree_on_a_variable() -> None:
    binder = FeedBinder([_arg("a", ["N"]), _arg("b", ["N"])], [], {})
    binder.bind({"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)})
    with pytest.raises(onnxflow.InputError, match=r"'N'=3, but input 'a' bound 'N'=2"):
        binder.bind({"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_an_ndarray_subclass_is_bound_as_a_plain_array() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    graph = helper.make_graph([node], "g", [x], [y])
    sess = onnxflow.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    )
    (out,) = sess.run(None, {"x": np.matrix([[2.0, 3.0]], np.float32)})
    assert out.__class__ is np.ndarray and out.shape == () and out == 5.0


def test_binding_never_writes_or_keeps_the_feed_writable() -> None:
    binder = FeedBinder([_arg("a", [2])], [], {})
    feed = np.zeros(2, np.float32)
    (bound,) = binder.bind({"a": feed})
    assert not bound.flags.writeable and feed.flags.writeable
    assert np.shares_memory(bound, feed)
