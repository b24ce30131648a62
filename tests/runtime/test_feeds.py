"""Feed binding (runtime/feeds.py): one check per input, made once per session, that passes a
well-formed array quickly and otherwise says what is wrong, with the IR's dimension variables."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxflow
from onnxflow.cli import generate_input
from onnxflow.ir.dims import static_shape
from onnxflow.ops.registry import op
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


#: Static shapes a builder kernel saw at compile time, by node name.
_SEEN: dict[str, object] = {}


@op("SeeShape", 1, domain="test.dims", build=True)
def _see_shape(node):  # type: ignore[no-untyped-def]
    _SEEN[node.name] = node.input_shape(0)
    return lambda x: x


@pytest.mark.parametrize(
    ("declared", "static"),
    [
        (["?", 3, "?", "?"], (None, 3, None, None)),
        (["-1", "N/2", "batch size", ""], (None, None, None, None)),
        (["N", 3, "seq_len"], ("N", 3, "seq_len")),
    ],
    ids=["question_marks", "not_identifiers", "identifiers"],
)
def test_kernels_see_only_identifiers_as_dimension_variables(declared: list, static: tuple) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, declared)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("SeeShape", ["x"], ["y"], name="see", domain="test.dims")
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("test.dims", 1)]
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets)
    onnxflow.InferenceSession(model, check=False)
    assert _SEEN["see"] == static
    assert static_shape(x.type) == static


def test_two_question_marks_in_two_inputs_broadcast_as_any_sizes() -> None:
    dims = ["?", 3, "?", "?"]
    x, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in "xb")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "b"], ["y"])]
    sess = onnxflow.InferenceSession(helper.make_model(helper.make_graph(nodes, "g", [x, b], [y])))
    feed = np.full((1, 3, 48, 192), -1.0, np.float32)
    bias = np.arange(3, dtype=np.float32).reshape(1, 3, 1, 1)
    for first, second in ((feed, bias), (bias, feed)):
        (out,) = sess.run(None, {"x": first, "b": second})
        np.testing.assert_array_equal(out, np.maximum(first, 0) + second)


def test_generated_inputs_give_dim_values_to_variables_only() -> None:
    arg = _arg("x", ["N", "?", 4])
    generated = generate_input(arg, {"N": 2, "?": 7}, np.random.default_rng(0))
    assert generated.shape == (2, 1, 4)


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
