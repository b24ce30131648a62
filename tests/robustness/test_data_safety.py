"""A run never writes a caller's feeds, and its outputs share no memory with feeds, constants,
each other, or anything a later run reuses: mutate every output, run again, compare."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
import pytest
from model_builders import I64, B, F, const, counter_body, model, node_suite_cases, vi
from onnx import helper

import onnxflow
from onnxflow.runtime.observe import Observer

X = np.arange(6, dtype=np.float32).reshape(2, 3)
W = np.full((3, 2), 7.0, np.float32)


def identity_of_an_input():
    return model(
        [helper.make_node("Identity", ["X"], ["Y"])], [vi("X", F, [2, 3])], [vi("Y", F, [2, 3])]
    )


def reshape_of_an_initializer():
    nodes = [helper.make_node("Reshape", ["W", "shape"], ["Y"])]
    inits = [const("W", W), const("shape", np.array([2, 3], np.int64))]
    return model(nodes, [vi("X", F, [2, 3])], [vi("Y", F, [2, 3])], inits)


def initializer_as_a_graph_output():
    return model([], [], [vi("W", F, [3, 2])], [const("W", W)])


def overridable_initializer_as_a_graph_output():
    return model([], [vi("W", F, [3, 2])], [vi("W", F, [3, 2])], [const("W", W)])


def constant_node():
    value = onnx.numpy_helper.from_array(W, "v")
    return model([helper.make_node("Constant", [], ["Y"], value=value)], [], [vi("Y", F, [3, 2])])


def views_of_an_input():
    nodes = [
        helper.make_node("Transpose", ["X"], ["T"]),
        helper.make_node("Flatten", ["X"], ["Fl"], axis=0),
        helper.make_node("Split", ["X"], ["S0", "S1"], axis=0, num_outputs=2),
        helper.make_node("Unsqueeze", ["X", "ax"], ["U"]),
        helper.make_node("Squeeze", ["U", "ax"], ["Q"]),
        helper.make_node("Expand", ["X", "shape"], ["E"]),
        helper.make_node("Cast", ["X"], ["C"], to=onnx.TensorProto.FLOAT),
    ]
    outs = ["T", "Fl", "S0", "S1", "U", "Q", "E", "C"]
    inits = [const("ax", np.array([0], np.int64)), const("shape", np.array([2, 3], np.int64))]
    return model(nodes, [vi("X", F, [2, 3])], [vi(o, F, None) for o in outs], inits)


def the_same_value_twice():
    nodes = [helper.make_node("Relu", ["X"], ["Y"]), helper.make_node("Identity", ["Y"], ["Z"])]
    return model(nodes, [vi("X", F, [2, 3])], [vi("Y", F, [2, 3]), vi("Z", F, [2, 3])])


def _loop(body, trips: int, outputs=("xf",)):
    node = helper.make_node("Loop", ["M", "", "x0"], list(outputs), body=body)
    return model(
        [helper.make_node("Slice", ["X", "start", "stop", "start"], ["x0"]), node],
        [vi("X", F, [2, 3])],
        [vi(o, F, None) for o in outputs],
        [
            const("M", np.int64(trips)),
            const("start", np.array([0], np.int64)),
            const("stop", np.array([1], np.int64)),
            const("Wl", np.full((1, 3), 3.0, np.float32)),
        ],
    )


def _state_body(source: str, inits=()):
    """Loop body ``(i, c, x) -> (c, Identity(source), Identity(source))``."""
    return helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Identity", [source], ["x_out"]),
            helper.make_node("Identity", [source], ["scan"]),
        ],
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("x", F, [1, 3])],
        [vi("c_out", B, []), vi("x_out", F, [1, 3]), vi("scan", F, [1, 3])],
        list(inits),
    )


def loop_zero_trips_passes_the_input_through():
    return _loop(counter_body(), 0)


def loop_passes_its_state_through():
    return _loop(_state_body("x"), 3, ("xf", "scan"))


def loop_state_from_an_outer_initializer():
    return _loop(_state_body("Wl"), 2, ("xf", "scan"))


def loop_state_from_a_body_initializer():
    """The body's constant is stored in float_data, so it decodes to a writeable array."""
    wb = helper.make_tensor("Wb", F, [1, 3], [5.0, 5.0, 5.0])
    return _loop(_state_body("Wb", [wb]), 2)


def _scan(body_source: str, inputs=("X",)):
    body = helper.make_graph(
        [
            helper.make_node("Identity", [body_source], ["s_out"]),
            helper.make_node("Identity", ["x"], ["y"]),
        ],
        "body",
        [vi("s", F, [3]), vi("x", F, [3])],
        [vi("s_out", F, [3]), vi("y", F, [3])],
    )
    node = helper.make_node("Scan", ["s0", "X"], ["sf", "Y"], body=body, num_scan_inputs=1)
    return model(
        [node],
        [vi("s0", F, [3]), vi("X", F, [None, 3])],
        [vi("sf", F, [3]), vi("Y", F, [None, 3])],
    )


def scan_passes_its_state_through():
    return _scan("s")


def if_returns_an_outer_value():
    then = helper.make_graph([], "then", [], [vi("X", F, [2, 3])])
    other = helper.make_graph([], "else", [], [vi("W", F, [3, 2])])
    node = helper.make_node("If", ["C"], ["Y"], then_branch=then, else_branch=other)
    return model([node], [vi("C", B, []), vi("X", F, [2, 3])], [vi("Y", F, None)], [const("W", W)])


def sequence_of_an_input_and_an_initializer():
    nodes = [
        helper.make_node("SequenceConstruct", ["X", "W"], ["S"]),
        helper.make_node("SequenceAt", ["S", "zero"], ["first"]),
        helper.make_node("Optional", ["W"], ["O"]),
    ]
    outputs = [
        helper.make_tensor_sequence_value_info("S", F, None),
        vi("first", F, None),
        helper.make_value_info(
            "O", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, None))
        ),
    ]
    return model(nodes, [vi("X", F, [2, 3])], outputs, [const("W", W), const("zero", np.int64(0))])


MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, Any]]] = {
    f.__name__: (f, feeds)
    for f, feeds in [
        (identity_of_an_input, {"X": X}),
        (reshape_of_an_initializer, {"X": X}),
        (initializer_as_a_graph_output, {}),
        (overridable_initializer_as_a_graph_output, {}),
        (constant_node, {}),
        (views_of_an_input, {"X": X}),
        (the_same_value_twice, {"X": X}),
        (loop_zero_trips_passes_the_input_through, {"X": X}),
        (loop_passes_its_state_through, {"X": X}),
        (loop_state_from_an_outer_initializer, {"X": X}),
        (scan_passes_its_state_through, {"s0": X[0], "X": X}),
        (scan_passes_its_state_through, {"s0": X[0], "X": X[:0]}),
        (if_returns_an_outer_value, {"C": np.array(True), "X": X}),
        (if_returns_an_outer_value, {"C": np.array(False), "X": X}),
        (sequence_of_an_input_and_an_initializer, {"X": X}),
    ]
}


def _arrays(value: Any) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays(v)]
    return []


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value.copy() if isinstance(value, np.ndarray) else value


def _assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def assert_runs_are_independent(sess: onnxflow.InferenceSession, feeds: dict[str, Any]) -> None:
    """Feeds unchanged; every output writeable and unshared; a second run is unaffected."""
    before = {k: _copy(v) for k, v in feeds.items()}
    first = sess.run(None, feeds)
    expected = [_copy(v) for v in first]
    feed_arrays = _arrays(list(feeds.values()))
    outs = _arrays(first)
    for k, out in enumerate(outs):
        assert out.flags.writeable, f"output array {k} is read-only"
        for other in feed_arrays + outs[k + 1 :]:
            assert not np.shares_memory(out, other), f"output array {k} shares memory"
    for out in outs:
        if out.dtype.kind in "fiu":
            out[...] = 99
        elif out.dtype.kind == "b":
            out[...] = ~out
    for k in feeds:
        _assert_same(feeds[k], before[k])
    second = sess.run(None, feeds)
    for a, b in zip(second, expected):
        _assert_same(a, b)


@pytest.mark.parametrize("case", [*MODELS, "scan_length_0"])
def test_outputs_never_alias_and_feeds_are_never_written(case: str) -> None:
    if case == "scan_length_0":
        build, feeds = scan_passes_its_state_through, {"s0": X[0], "X": X[:0]}
    else:
        build, feeds = MODELS[case]
    assert_runs_are_independent(onnxflow.InferenceSession(build()), dict(feeds))


def test_loop_state_from_a_body_initializer_is_not_shared() -> None:
    sess = onnxflow.InferenceSession(loop_state_from_a_body_initializer())
    assert_runs_are_independent(sess, {"X": X})


def test_feeds_reach_kernels_read_only() -> None:
    """A kernel that tried to write its input would fail instead of changing the caller's data."""
    x = X.copy()
    sess = onnxflow.InferenceSession(identity_of_an_input())
    (y,) = sess.run(None, {"X": x})
    assert x.flags.writeable and y.flags.writeable and not np.shares_memory(x, y)


class _Inputs(Observer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def node_start(self, scope, info, inputs) -> None:  # type: ignore[no-untyped-def]
        self.seen.extend(inputs)


@pytest.mark.parametrize("wrap", [dict, MappingProxyType], ids=["dict", "other_mapping"])
def test_the_kernel_reads_a_read_only_view_of_the_feed(wrap: Callable[..., Any]) -> None:
    """A dict of arrays takes the session's quick binding, another mapping the general one."""
    x = X.copy()
    sess = onnxflow.InferenceSession(the_same_value_twice())
    watch = _Inputs()
    sess.run(None, wrap({"X": x}), observers=[watch])
    fed = watch.seen[0]  # what Relu, the first node, reads
    assert np.shares_memory(fed, x) and not fed.flags.writeable and x.flags.writeable


def test_fed_lists_and_scalars_are_not_written() -> None:
    sess = onnxflow.InferenceSession(sequence_of_an_input_and_an_initializer())
    x = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert_runs_are_independent(sess, {"X": x})
    assert x == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def _node_suite_cases() -> list[Any]:
    ops = {
        "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Slice", "Split",
        "Expand", "Loop", "Scan", "If", "SequenceInsert", "SequenceConstruct", "Optional",
        "OptionalGetElement", "Dropout", "Cast", "CastLike", "Concat", "Gather", "Pad", "Tile",
        "Max", "Min", "Sum", "Mean", "Clip", "Shape", "Size", "Constant", "Where",
    }  # fmt: skip
    cases = []
    for case in node_suite_cases():
        if "_expanded" in case.name:
            continue
        if {n.op_type for n in case.model.graph.node} & ops:
            cases.append(case)
    return cases


def test_node_suite_models_are_safe_too() -> None:
    """Pass-through-prone cases of the node suite: feeds unchanged, outputs independent."""
    checked = 0
    for case in _node_suite_cases():
        try:
            sess = onnxflow.InferenceSession(case.model)
            inputs, _ = case.data_sets[0]
        except onnxflow.OnnxflowError:
            continue  # a case the conformance suite lists as failing
        names = [a.name for a in sess.get_inputs()]
        feeds = dict(zip(names, inputs))
        try:
            assert_runs_are_independent(sess, feeds)
        except onnxflow.OnnxflowError:
            continue
        except AssertionError as exc:
            raise AssertionError(f"{case.name}: {exc}") from exc
        checked += 1
    assert checked > 100
