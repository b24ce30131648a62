"""The generated loop driver (runtime/loopgen.py) against the per-iteration path.

Observed runs take the per-iteration path, plain runs the generated driver: both must give the
same values for bodies that swap loop-carried values, pass an outer value or a constant straight
out as a state, read the iteration number only sometimes, and scan values that alias a state.
"""

from __future__ import annotations

import dis
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.observers import Trace
from onnxflow.runtime.codegen import Block, Emitter

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _vi(name: str, elem: int, shape: list | None) -> helper.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _swap_loop(trips: int) -> helper.ModelProto:
    """(a, b) -> (b, a + i), plus an outer value and a constant carried straight out."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Add", ["a", "fi"], ["a_plus"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "swap",
        [
            _vi("i", I64, []),
            _vi("cond_in", B, []),
            _vi("a", F, [2]),
            _vi("b", F, [2]),
            _vi("c", F, [2]),
            _vi("k", F, []),
        ],
        [
            _vi("cond_out", B, []),
            _vi("b", F, [2]),
            _vi("a_plus", F, [2]),
            _vi("outer", F, [2]),
            _vi("seven", F, []),
            _vi("a", F, [2]),
            _vi("b", F, [2]),
        ],
        [numpy_helper.from_array(np.array(7, np.float32), "seven")],
    )
    loop = helper.make_node(
        "Loop", ["M", "", "a0", "b0", "c0", "k0"], ["a", "b", "c", "k", "as", "bs"], body=body
    )
    graph = helper.make_graph(
        [loop],
        "g",
        [
            _vi("a0", F, [2]),
            _vi("b0", F, [2]),
            _vi("c0", F, [2]),
            _vi("k0", F, []),
            _vi("outer", F, [2]),
        ],
        [_vi(n, F, None) for n in ("a", "b", "c", "k", "as", "bs")],
        [numpy_helper.from_array(np.array(trips, np.int64), "M")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _swap_oracle(trips: int, a, b, c, k, outer):
    a_s, b_s = [], []
    for i in range(trips):
        a_s.append(a)  # the scan outputs are the body's inputs a and b, as they came in
        b_s.append(b)
        a, b, c, k = b, a + np.float32(i), outer, np.float32(7)
    stack = lambda xs: np.stack(xs) if xs else np.zeros((0, 2), np.float32)  # noqa: E731
    return [a, b, c, np.asarray(k), stack(a_s), stack(b_s)]


@pytest.mark.parametrize("trips", [0, 1, 2, 5])
@pytest.mark.parametrize("observed", [False, True])
def test_swapped_and_passed_through_states(trips: int, observed: bool) -> None:
    feeds = {
        "a0": np.array([1, 2], np.float32),
        "b0": np.array([10, 20], np.float32),
        "c0": np.array([-1, -1], np.float32),
        "k0": np.array(0, np.float32),
        "outer": np.array([5, 6], np.float32),
    }
    sess = onnxflow.InferenceSession(_swap_loop(trips))
    got = sess.run(None, feeds, observers=[Trace()] if observed else [])
    want = _swap_oracle(trips, *feeds.values())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert not np.shares_memory(got[4], got[5])


def test_outputs_never_alias_feeds_or_each_other() -> None:
    feeds = {n: np.ones(2, np.float32) for n in ("a0", "b0", "c0", "outer")}
    feeds["k0"] = np.array(0, np.float32)
    got = onnxflow.InferenceSession(_swap_loop(1)).run(None, feeds)
    for i, g in enumerate(got):
        assert g.flags.writeable
        assert not any(np.shares_memory(g, f) for f in feeds.values())
        assert not any(np.shares_memory(g, h) for h in got[i + 1 :])


def _scan_model(reverse: int) -> helper.ModelProto:
    """A Scan whose element is read only by a hoistable node, and whose state is scanned."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x_t", "two"], ["x2"]),
            helper.make_node("Add", ["s", "x2"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["seen"]),
        ],
        "acc",
        [_vi("s", F, [3]), _vi("x_t", F, [3])],
        [_vi("s_out", F, [3]), _vi("seen", F, [3])],
        [numpy_helper.from_array(np.array(2, np.float32), "two")],
    )
    scan = helper.make_node(
        "Scan",
        ["s0", "xs"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[reverse],
    )
    graph = helper.make_graph(
        [scan],
        "g",
        [_vi("s0", F, [3]), _vi("xs", F, ["T", 3])],
        [_vi("s", F, None), _vi("ys", F, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("length", [0, 1, 4])
def test_scan_driver_matches_a_python_loop(reverse: int, length: int) -> None:
    xs = np.arange(length * 3, dtype=np.float32).reshape(length, 3)
    s = np.zeros(3, np.float32)
    seen = []
    for x in xs[::-1] if reverse else xs:
        s = s + x * np.float32(2)
        seen.append(s)
    sess = onnxflow.InferenceSession(_scan_model(reverse))
    for observers in ([], [Trace()]):
        final, ys = sess.run(None, {"s0": np.zeros(3, np.float32), "xs": xs}, observers=observers)
        np.testing.assert_array_equal(final, s)
        np.testing.assert_array_equal(ys, np.stack(seen) if seen else np.zeros((0, 3)))


def test_failure_in_the_generated_loop_names_node_and_iteration() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Gather", ["table", "i"], ["row"], name="pick"),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, [])],
        [_vi("cond_out", B, []), _vi("row", F, [])],
    )
    loop = helper.make_node("Loop", ["M", ""], ["rows"], body=body, name="L")
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi("table", F, [3])],
        [_vi("rows", F, None)],
        [numpy_helper.from_array(np.array(5, np.int64), "M")],
    )
    sess = onnxflow.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    )
    with pytest.raises(onnxflow.RuntimeFailure, match=r"Loop 'L' .*at iteration 3: Gather 'pick'"):
        sess.run(None, {"table": np.zeros(3, np.float32)})


def test_stacker_with_an_upper_bound() -> None:
    from onnxflow.runtime import stacking as common
    from onnxflow.runtime.stacking import Stacker

    early = Stacker("s", 100, at_most=True)  # a Loop with M = 100 whose condition stops it at 3
    for v in range(3):
        early.add(np.array(v, np.int64))
    out = early.result(helper.make_tensor_value_info("s", I64, []))
    np.testing.assert_array_equal(out, [0, 1, 2])
    assert out.base is None  # a copy: the 100-slot buffer is not kept alive by the result

    big = Stacker("s", 2, at_most=True)
    row = np.zeros(common.BOUND_BYTES // 8 + 1, np.int64)  # 2 of these exceed the bound
    big.add(row)
    assert big.buffer is None and big.count is None  # kept as a list instead
    big.add(row)
    assert big.result(helper.make_tensor_value_info("s", I64, [None])).shape == (2, row.size)


@pytest.mark.skipif(
    sys.version_info < (3, 11), reason="CPython specializes bytecode from 3.11 on: nothing to warm"
)
def test_a_loop_run_once_runs_specialized_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython 3.11 specializes a function after its eighth call: the driver is warmed when it is
    made, else a loop driven once would run every iteration unspecialized."""
    made = []
    build = Emitter.build

    def spy(self: Emitter, source: Block, name: str) -> object:
        fn, line_to_step = build(self, source, name)
        if name == "drive":
            made.append(fn)
        return fn, line_to_step

    monkeypatch.setattr(Emitter, "build", spy)
    sess = onnxflow.InferenceSession(_swap_loop(3))
    feeds = {n: np.ones(2, np.float32) for n in ("a0", "b0", "c0", "outer")}
    sess.run(None, {**feeds, "k0": np.array(1, np.float32)})
    assert len(made) == 1
    plain = [i.opname for i in dis.get_instructions(made[0])]
    adaptive = [i.opname for i in dis.get_instructions(made[0], adaptive=True)]
    assert plain != adaptive


@pytest.mark.parametrize("shape", [[1], [2]])
def test_a_body_condition_of_shape_1_stops_the_loop_and_of_two_elements_is_refused(shape):
    """The generated loop tests a 0-d condition inline; any other goes through as_bool."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Expand", ["fi", "shape"], ["fis"]),
            helper.make_node("Less", ["fis", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["i"], ["i_out"]),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, [])],
        [_vi("cond_out", B, shape), _vi("i_out", I64, [])],
        [
            numpy_helper.from_array(np.array(shape, np.int64), "shape"),
            numpy_helper.from_array(np.array(2.5, np.float32), "limit"),
        ],
    )
    loop = helper.make_node("Loop", ["M", "cond"], ["is"], body=body, name="L")
    graph = helper.make_graph(
        [loop],
        "g",
        [],
        [_vi("is", I64, None)],
        [
            numpy_helper.from_array(np.array(10, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    sess = onnxflow.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    )
    for observers in ([], [Trace()]):
        if shape == [1]:
            (iters,) = sess.run(None, {}, observers=observers)
            np.testing.assert_array_equal(iters, [0, 1, 2, 3])  # i = 3 runs, then says stop
        else:
            with pytest.raises(onnxflow.RuntimeFailure, match=r"exactly one element.*\[2\]"):
                sess.run(None, {}, observers=observers)
