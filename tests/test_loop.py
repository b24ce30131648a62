"""Loop: the five (M, cond) modes of the spec's table against the oracle, plus named scenarios."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from oracles import loop_oracle

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
LOOP_VERSIONS = [1, 11, 13, 16, 19, 21, 23, 24, 25]


def _counter_body() -> helper.GraphProto:
    """cond_out = i < limit (limit read from the outer scope); x' = x + 1; scans: x', i."""
    one = numpy_helper.from_array(np.ones(3, np.float32), "one")  # Add-1 does not broadcast
    return helper.make_graph(
        [
            helper.make_node("Less", ["i", "limit"], ["cond_out"]),
            helper.make_node("Add", ["x", "one"], ["x_out"]),
            helper.make_node("Identity", ["x_out"], ["y"]),
            helper.make_node("Identity", ["i"], ["i_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", B, []),
            helper.make_tensor_value_info("x", F, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", B, []),
            helper.make_tensor_value_info("x_out", F, [3]),
            helper.make_tensor_value_info("y", F, [3]),
            helper.make_tensor_value_info("i_out", I64, []),
        ],
        [one],
    )


def _python_counter_body(limit: int):
    def body(i, cond_in, x):
        x_out = x + np.float32(1)
        return [np.bool_(i < limit), x_out, x_out, np.int64(i)]

    return body


def _loop_model(trip: int | None, cond: bool | None, limit: int, opset: int):
    node = helper.make_node(
        "Loop",
        ["M" if trip is not None else "", "cond" if cond is not None else "", "x0"],
        ["x_final", "ys", "is"],
        body=_counter_body(),
    )
    inits = [numpy_helper.from_array(np.array(limit, np.int64), "limit")]
    if trip is not None:
        inits.append(numpy_helper.from_array(np.array(trip, np.int64), "M"))
    if cond is not None:
        inits.append(numpy_helper.from_array(np.array(cond), "cond"))
    graph = helper.make_graph(
        [node],
        "loop",
        [helper.make_tensor_value_info("x0", F, [3])],
        [
            helper.make_tensor_value_info("x_final", F, [3]),
            helper.make_tensor_value_info("ys", F, [None, 3]),
            helper.make_tensor_value_info("is", I64, [None]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


MODES = {
    "cond_omitted_runs_trip_count": (5, None, 2),
    "trip_count_omitted_is_a_while_loop": (None, True, 3),
    "both_stop_on_cond_first": (10, True, 3),
    "both_stop_on_trip_count_first": (4, True, 100),
    "zero_trip_count": (0, None, 2),
    "zero_trip_count_with_cond": (0, True, 2),
    "initial_cond_false_is_zero_iterations": (5, False, 2),
    "while_loop_initial_cond_false": (None, False, 2),
}


@pytest.mark.parametrize("opset", LOOP_VERSIONS)
@pytest.mark.parametrize("mode", list(MODES))
def test_loop_modes_match_oracle(mode: str, opset: int) -> None:
    trip, cond, limit = MODES[mode]
    x0 = np.array([0.5, -1.0, 2.0], np.float32)
    sess = onnxflow.InferenceSession(_loop_model(trip, cond, limit, opset))
    x_final, ys, iters = sess.run(None, {"x0": x0})
    (want_x,), scans = loop_oracle(_python_counter_body(limit), trip, cond, [x0])
    np.testing.assert_array_equal(x_final, want_x)
    if scans:
        np.testing.assert_array_equal(ys, np.stack(scans[0]))
        np.testing.assert_array_equal(iters, np.stack(scans[1]))
    else:
        assert ys.shape == (0, 3) and ys.dtype == np.float32
        assert iters.shape == (0,) and iters.dtype == np.int64


def test_scalar_scan_output_stacks_to_one_dimension() -> None:
    sess = onnxflow.InferenceSession(_loop_model(6, None, 0, 16))
    _, ys, iters = sess.run(None, {"x0": np.zeros(3, np.float32)})
    assert iters.shape == (6,)
    np.testing.assert_array_equal(iters, np.arange(6))
    assert ys.shape == (6, 3)


def test_body_outputs_its_input_and_an_outer_value_directly() -> None:
    body = helper.make_graph(
        [],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x", F, [2]),
        ],
        [
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x", F, [2]),
            helper.make_tensor_value_info("outer", F, [2]),
        ],
    )
    node = helper.make_node("Loop", ["M", "", "x0"], ["x_final", "stack"], body=body)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x0"], ["outer"]), node],
        "g",
        [helper.make_tensor_value_info("x0", F, [2])],
        [
            helper.make_tensor_value_info("x_final", F, [2]),
            helper.make_tensor_value_info("stack", F, [None, 2]),
        ],
        [numpy_helper.from_array(np.array(3, np.int64), "M")],
    )
    x0 = np.array([1.0, 2.0], np.float32)
    x_final, stack = onnxflow.InferenceSession(helper.make_model(graph)).run(None, {"x0": x0})
    np.testing.assert_array_equal(x_final, x0)
    np.testing.assert_array_equal(stack, np.stack([x0] * 3))
    x_final[0] = 99.0
    assert x0[0] == 1.0, "an output must never alias a caller's feed"


def test_scan_output_changing_shape_is_a_clear_error() -> None:
    body = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["x_out"], axis=0)],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x", F, [None]),
        ],
        [
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x_out", F, [None]),
            helper.make_tensor_value_info("x_out", F, [None]),
        ],
    )
    node = helper.make_node("Loop", ["M", "", "x0"], ["x_final", "ys"], body=body, name="grow")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x0", F, [None])],
        [
            helper.make_tensor_value_info("x_final", F, None),
            helper.make_tensor_value_info("ys", F, None),
        ],
        [numpy_helper.from_array(np.array(3, np.int64), "M")],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph), check=False)
    with pytest.raises(onnxflow.RuntimeFailure, match=r"'grow'.*changes across iterations"):
        sess.run(None, {"x0": np.ones(2, np.float32)})


def test_loop_carried_sequence() -> None:
    body = helper.make_graph(
        [helper.make_node("SequenceInsert", ["seq", "x"], ["seq_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_sequence_value_info("seq", F, None),
        ],
        [
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_sequence_value_info("seq_out", F, None),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
            helper.make_node("Loop", ["M", "", "empty"], ["seq_final"], body=body),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_sequence_value_info("seq_final", F, None)],
        [numpy_helper.from_array(np.array(4, np.int64), "M")],
    )
    x = np.array([1.0, 2.0], np.float32)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (seq,) = onnxflow.InferenceSession(model, check=False).run(None, {"x": x})
    assert isinstance(seq, list) and len(seq) == 4
    for item in seq:
        np.testing.assert_array_equal(item, x)


def test_body_arity_mismatch_names_expected_and_found() -> None:
    body = _counter_body()  # 3 inputs: i, cond, one loop-carried value
    node = helper.make_node("Loop", ["M", "", "a", "b"], ["a2", "b2"], body=body, name="L")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, F, [3]) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, F, [3]) for n in ("a2", "b2")],
        [
            numpy_helper.from_array(np.array(2, np.int64), "M"),
            numpy_helper.from_array(np.array(2, np.int64), "limit"),
        ],
    )
    with pytest.raises(onnxflow.ValidationError, match=r"'L'.*body has 3 inputs, expected .* = 4"):
        onnxflow.InferenceSession(helper.make_model(graph), check=False)


def test_nested_loops_read_names_two_scopes_up() -> None:
    inner_body = helper.make_graph(
        [helper.make_node("Add", ["acc2", "step"], ["acc2_out"])],
        "inner",
        [
            helper.make_tensor_value_info("j", I64, []),
            helper.make_tensor_value_info("c2", B, []),
            helper.make_tensor_value_info("acc2", F, []),
        ],
        [
            helper.make_tensor_value_info("c2", B, []),
            helper.make_tensor_value_info("acc2_out", F, []),
        ],
    )
    outer_body = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "acc"], ["acc_out"], body=inner_body)],
        "outer",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("acc", F, []),
        ],
        [
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("acc_out", F, []),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "zero"], ["total"], body=outer_body)],
        "g",
        [helper.make_tensor_value_info("step", F, [])],
        [helper.make_tensor_value_info("total", F, [])],
        [
            numpy_helper.from_array(np.array(3, np.int64), "M"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        ],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    (total,) = sess.run(None, {"step": np.array(0.5, np.float32)})
    assert total == pytest.approx(9 * 0.5)


def test_cond_omitted_body_condition_honoured_in_always_mode() -> None:
    model = _loop_model(10, None, 3, 21)
    with pytest.warns(onnxflow.OnnxflowWarning, match="is ignored"):
        spec = onnxflow.InferenceSession(model)
    always = onnxflow.InferenceSession(model, onnxflow.SessionOptions(loop_condition="always"))
    x0 = np.zeros(3, np.float32)
    assert spec.run(None, {"x0": x0})[2].shape == (10,)
    # As the while mode with an initial true condition: stop after the body says i < 3 is false.
    (want_x,), scans = loop_oracle(_python_counter_body(3), 10, True, [x0])
    x_final, _, iters = always.run(None, {"x0": x0})
    np.testing.assert_array_equal(x_final, want_x)
    np.testing.assert_array_equal(iters, np.stack(scans[1]))


def test_bad_loop_condition_option_is_an_input_error() -> None:
    with pytest.raises(onnxflow.InputError, match="loop_condition"):
        onnxflow.SessionOptions(loop_condition="sometimes")


def test_failure_inside_the_body_names_the_loop_iteration_and_node() -> None:
    body = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["v"], name="pick")],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
        ],
        [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("v", F, [])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", ""], ["vs"], body=body, name="L")],
        "g",
        [helper.make_tensor_value_info("table", F, [2])],
        [helper.make_tensor_value_info("vs", F, [None])],
        [numpy_helper.from_array(np.array(5, np.int64), "M")],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    with pytest.raises(onnxflow.RuntimeFailure, match=r"Loop 'L'.* at iteration 2: Gather 'pick'"):
        sess.run(None, {"table": np.array([1.0, 2.0], np.float32)})
