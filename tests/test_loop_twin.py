"""The guard-free twin of a generated loop (runtime/loopgen.py, runtime/codegen.Twin).

A generated loop runs its first iterations with every guard, then, once an iteration passed them
all and left its loop-carried values with their shapes and dtypes, the rest on a twin without
the guards that steady values make redundant. Each test compares the plain run (the driver)
with the observed run (the per-iteration path, no twin) and with the spec oracle in
``tests/oracles.py``: loops whose values settle only after some iterations, shapes that depend
on a varying value (their guards must stay), failures and conditions met inside the twin.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.observers import Trace
from onnxflow.runtime.codegen import Block, Emitter
from onnxflow.spec_models import rnn_scan
from oracles import loop_oracle, scan_oracle

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _vi(name: str, elem: int, shape: list | None) -> helper.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(graph: helper.GraphProto, opset: int = 21) -> helper.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _both(sess: onnxflow.InferenceSession, feeds: dict) -> list[np.ndarray]:
    """Run plain (generated driver) and observed (per-iteration path); they must agree (to
    rounding: the observed path runs the body as written, not its hoisted batched products)."""
    plain = sess.run(None, feeds)
    observed = sess.run(None, feeds, observers=[Trace()])
    for p, o in zip(plain, observed):
        assert p.shape == o.shape and p.dtype == o.dtype
        np.testing.assert_allclose(p, o, rtol=1e-6, atol=1e-7)
    return plain


def _drivers(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Collect the source lines of every loop driver generated from now on."""
    made: list[list[str]] = []
    build = Emitter.build

    def spy(self: Emitter, source: Block, name: str) -> object:
        if name == "drive":
            made.append(source.texts())
        return build(self, source, name)

    monkeypatch.setattr(Emitter, "build", spy)
    return made


def _twin(lines: list[str]) -> list[str]:
    """The twin's lines: those after the steady test."""
    at = next(n for n, line in enumerate(lines) if "steady:" in line)
    return lines[at + 1 :]


@pytest.mark.parametrize("batch", [1, 3])
def test_the_spec_rnn_runs_on_a_twin_without_guards(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _drivers(monkeypatch)
    model = rnn_scan(hidden=8, input_size=4, seed=1)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    sess = onnxflow.InferenceSession(model)
    rng = np.random.default_rng(0)
    feeds = {
        "H_0": rng.standard_normal((batch, 8)).astype(np.float32),
        "X": rng.standard_normal((12, batch, 4)).astype(np.float32),
    }

    def cell(h: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        t = np.matmul(x, weights["WiT"]) + np.matmul(h, weights["RiT"])
        h = np.tanh(t + weights["Wbi"] + weights["Rbi"])
        return [h, h]

    want_h, want_y = scan_oracle(cell, 1, [feeds["H_0"]], [feeds["X"]], [0], [0], [0], [0])
    for _ in range(2):  # the second run starts with the widened biases kept from the first
        y, y_h = _both(sess, feeds)
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y_h, want_h, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(y_h, y[-1])
        assert not np.shares_memory(y_h, y)  # the last row is computed in Y's buffer: copied

    (y_h,) = sess.run(["Y_h"], feeds)
    assert y_h.base is None  # the loop's last state is not a view pinning all of Y

    twin = _twin(made[0])
    assert not any("ndim" in line or "_sink" in line or "_widen" in line for line in twin)
    assert any("out=b0[i, ...]" in line for line in twin)  # Tanh writes its row of Y
    # the product and the three sums are written into buffers made by the first twin iteration
    scratch = [line.split("out=")[1] for line in twin if "out=t" in line]
    assert len(scratch) == 4 and len(set(scratch)) == 4


def _scan_model(nodes: list, s_shape: list, x_shape: list, outs: list[str]) -> helper.ModelProto:
    """A Scan over rows ``x`` with state ``s`` (body inputs s, x; outputs s_out, then ``outs``
    as scan outputs) and a constant ``two``."""
    body = helper.make_graph(
        nodes,
        "b",
        [_vi("s", F, s_shape), _vi("x", F, x_shape)],
        [_vi(n, F, None) for n in ["s_out", *outs]],
        [numpy_helper.from_array(np.array(2, np.float32), "two")],
    )
    scan = helper.make_node(
        "Scan", ["s0", "xs"], ["s", *(f"{n}s" for n in outs)], body=body, num_scan_inputs=1
    )
    graph = helper.make_graph(
        [scan],
        "g",
        [_vi("s0", F, s_shape), _vi("xs", F, ["T", *x_shape])],
        [_vi(n, F, None) for n in ["s", *(f"{n}s" for n in outs)]],
    )
    return _model(graph)


@pytest.mark.parametrize("keeper", ["Transpose", "Identity"])
def test_a_value_that_outlives_its_iteration_gets_no_scratch_buffer(
    keeper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a = 2s`` becomes the next state through a view (Transpose) or an alias (Identity).
    Were ``a`` computed into a scratch buffer, the next iteration's ``a`` would be written over
    its own state before ``b = s + a`` reads it (4s instead of 3s)."""
    made = _drivers(monkeypatch)
    nodes = [
        helper.make_node("Mul", ["s", "two"], ["a"]),
        helper.make_node("Add", ["s", "a"], ["b"]),
        helper.make_node(keeper, ["a"], ["s_out"]),
        helper.make_node("Add", ["b", "x"], ["y"]),
    ]
    sess = onnxflow.InferenceSession(_scan_model(nodes, [2, 2], [2, 2], ["y"]))
    s0 = np.array([[1, 2], [3, 4]], np.float32)
    xs = np.linspace(0, 1, 40, dtype=np.float32).reshape(10, 2, 2)

    def cell(s: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        a = s * np.float32(2)
        return [a.T if keeper == "Transpose" else a, s + a + x]

    want_s, want_y = scan_oracle(cell, 1, [s0], [xs], [0], [0], [0], [0])
    s, ys = _both(sess, {"s0": s0, "xs": xs})
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_array_equal(ys, want_y)
    twin = _twin(made[0])
    assert any("out=t" in line for line in twin)  # b and y still get scratch buffers


def test_a_loop_carried_value_gets_no_scratch_buffer() -> None:
    """``s_out = s + x`` is read as ``s`` by the next iteration after it makes the next
    ``s_out``: in one buffer, ``y = s * s_out`` would read the new value as the old."""
    nodes = [
        helper.make_node("Add", ["s", "x"], ["s_out"]),
        helper.make_node("Mul", ["s", "s_out"], ["y"]),
    ]
    sess = onnxflow.InferenceSession(_scan_model(nodes, [3], [3], ["y"]))
    s0 = np.array([1, 2, 3], np.float32)
    xs = np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3)
    want_s, want_y = scan_oracle(lambda s, x: [s + x, s * (s + x)], 1, [s0], [xs], *[[0]] * 4)
    s, ys = _both(sess, {"s0": s0, "xs": xs})
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_array_equal(ys, want_y)


def test_an_operand_a_kernel_remembers_gets_no_scratch_buffer() -> None:
    """``a`` (a row) is added to each scanned (2, 3) block: NumPy-style broadcasting whose
    kernel keeps its narrow operand widened while the same array object comes back. A scratch
    buffer would be the same object every iteration, with new values: the kernel would go on
    adding the first widened ``a``."""
    nodes = [
        helper.make_node("Mul", ["s", "two"], ["a"]),
        helper.make_node("Add", ["x", "a"], ["y"]),
        helper.make_node("Add", ["s", "two"], ["s_out"]),
    ]
    sess = onnxflow.InferenceSession(_scan_model(nodes, [3], [2, 3], ["y"]))
    s0 = np.array([1, 2, 3], np.float32)
    xs = np.arange(60, dtype=np.float32).reshape(10, 2, 3)

    def cell(s: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        return [s + np.float32(2), x + s * np.float32(2)]

    want_s, want_y = scan_oracle(cell, 1, [s0], [xs], [0], [0], [0], [0])
    for _ in range(2):
        s, ys = _both(sess, {"s0": s0, "xs": xs})
        np.testing.assert_array_equal(s, want_s)
        np.testing.assert_array_equal(ys, want_y)


def test_values_that_settle_after_some_iterations() -> None:
    """The state starts 1-D, becomes a row after one iteration (MatMul takes its general
    path once), and the scan output's buffer is made on the first iteration."""
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h", "W"], ["hw"]),
            helper.make_node("Add", ["hw", "zero_row"], ["h_out"]),
            helper.make_node("Tanh", ["h_out"], ["seen"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("h", F, None)],
        [_vi("cond_out", B, []), _vi("h_out", F, None), _vi("seen", F, None)],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.zeros((1, 4), np.float32), "zero_row"),
        ],
    )
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h", "seens"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi("h0", F, [4])],
        [_vi("h", F, None), _vi("seens", F, None)],
        [numpy_helper.from_array(np.array(7, np.int64), "M")],
    )
    sess = onnxflow.InferenceSession(_model(graph))
    h0 = np.array([1, -2, 3, -4], np.float32)

    def step(i, cond, h):
        h_out = np.matmul(h, w) + np.zeros((1, 4), np.float32)
        return [cond, h_out, np.tanh(h_out)]

    (want_h,), (seens,) = loop_oracle(step, 7, None, [h0])
    h, got_seens = _both(sess, {"h0": h0})
    np.testing.assert_allclose(h, want_h, rtol=1e-6)
    np.testing.assert_allclose(got_seens, np.stack(seens), rtol=1e-6)
    assert h.shape == (1, 4) and got_seens.shape == (7, 1, 4)


@pytest.mark.parametrize("op", ["ReduceSum", "Expand"])
def test_a_shape_that_depends_on_a_varying_value_keeps_its_guards(op: str) -> None:
    """ReduceSum's axes, or Expand's shape, come from the scanned rows: the result changes
    shape at row 4, long after the loop is steady, so the widened bias added to its square must
    still be tested, and the square gets no scratch buffer. (ReduceSum declares that its axes'
    values matter; Expand declares nothing.)"""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    if op == "ReduceSum":
        node = helper.make_node("ReduceSum", ["data", "row"], ["r"], keepdims=1)
        rows = np.array([[0], [0], [0], [0], [1], [1]], np.int64)
        want = data.sum(axis=1, keepdims=True)
    else:
        node = helper.make_node("Expand", ["one", "row"], ["r"])
        rows = np.array([[1, 3]] * 4 + [[2, 1]] * 2, np.int64)
        want = np.ones((2, 1), np.float32)
    body = helper.make_graph(
        [
            node,
            helper.make_node("Mul", ["r", "r"], ["rr"]),  # no scratch buffer: it changes shape
            helper.make_node("Add", ["rr", "bias"], ["s_out"]),
            helper.make_node("Identity", ["row"], ["row_seen"]),
        ],
        "b",
        [_vi("s", F, None), _vi("row", I64, [rows.shape[1]])],
        [_vi("s_out", F, None), _vi("row_seen", I64, [rows.shape[1]])],
        [
            numpy_helper.from_array(data, "data"),
            numpy_helper.from_array(np.ones(1, np.float32), "one"),
            numpy_helper.from_array(np.array([0.5], np.float32), "bias"),
        ],
    )
    scan = helper.make_node("Scan", ["s0", "rows"], ["s", "seen"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan],
        "g",
        [_vi("s0", F, None), _vi("rows", I64, ["T", rows.shape[1]])],
        [_vi("s", F, None), _vi("seen", I64, None)],
    )
    sess = onnxflow.InferenceSession(_model(graph))
    s, seen = _both(sess, {"s0": np.zeros((1, 3), np.float32), "rows": rows})
    np.testing.assert_array_equal(s, want * want + np.float32(0.5))
    assert s.shape == (2, 1)
    np.testing.assert_array_equal(seen, rows)


def _gather_loop(trips: int) -> helper.ModelProto:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["x", "one"], ["x_out"]),
            helper.make_node("Gather", ["table", "i"], ["row"], name="pick"),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("x", F, [2])],
        [_vi("cond_out", B, []), _vi("x_out", F, [2]), _vi("row", F, []), _vi("x_out", F, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "one")],
    )
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x", "rows", "xs"], body=body, name="L")
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi("table", F, [6]), _vi("x0", F, [2])],
        [_vi("x", F, None), _vi("rows", F, None), _vi("xs", F, None)],
        [numpy_helper.from_array(np.array(trips, np.int64), "M")],
    )
    return _model(graph)


def test_a_failure_inside_the_twin_names_node_and_iteration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _drivers(monkeypatch)
    feeds = {"table": np.arange(6, dtype=np.float32), "x0": np.zeros(2, np.float32)}
    x, rows, xs = onnxflow.InferenceSession(_gather_loop(6)).run(None, feeds)
    np.testing.assert_array_equal(rows, np.arange(6))
    np.testing.assert_array_equal(xs, np.repeat(np.arange(1, 7, dtype=np.float32), 2).reshape(6, 2))
    np.testing.assert_array_equal(x, [6, 6])
    assert any("row = Gather(table, v_i)" in line for line in _twin(made[0]))

    sess = onnxflow.InferenceSession(_gather_loop(9))  # row 6 is out of range: past steady
    with pytest.raises(onnxflow.RuntimeFailure, match=r"Loop 'L' .*at iteration 6: Gather 'pick'"):
        sess.run(None, feeds)


@pytest.mark.parametrize("limit", [0.5, 2.5, 40.5])
def test_a_condition_met_inside_the_twin_stops_the_loop(limit: float) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Less", ["fi", "limit"], ["cond_out"]),
            helper.make_node("Mul", ["fi", "fi"], ["sq"]),
            helper.make_node("Add", ["acc", "sq"], ["acc_out"]),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc", F, [])],
        [_vi("cond_out", B, []), _vi("acc_out", F, []), _vi("sq", F, [])],
        [numpy_helper.from_array(np.array(limit, np.float32), "limit")],
    )
    loop = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "sqs"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi("acc0", F, [])],
        [_vi("acc", F, None), _vi("sqs", F, None)],
        [
            numpy_helper.from_array(np.array(100, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    sess = onnxflow.InferenceSession(_model(graph))

    def step(i, cond, acc):
        fi = np.float32(i)
        return [fi < np.float32(limit), acc + fi * fi, fi * fi]

    acc0 = np.array(0, np.float32)
    (want,), (sqs,) = loop_oracle(step, 100, True, [acc0])
    acc, got = _both(sess, {"acc0": acc0})
    np.testing.assert_array_equal(acc, want)
    np.testing.assert_array_equal(got, np.stack(sqs))
    assert got.shape == (int(limit) + 2,)  # iterations 0..limit+1: the last one says stop


def test_the_checked_twin_still_tests_terminate(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _drivers(monkeypatch)
    sess = onnxflow.InferenceSession(_gather_loop(6))
    feeds = {"table": np.arange(6, dtype=np.float32), "x0": np.zeros(2, np.float32)}
    sess.run(None, feeds, run_options=onnxflow.RunOptions())
    (lines,) = made
    twin = _twin(lines)
    steps = sum(1 for line in twin if "_cancel(" in line)
    assert steps == 3 and any("_stopped()" in line for line in twin)


def test_a_shape_change_that_reaches_a_scan_output_late_is_still_refused() -> None:
    """Every iteration passes every guard, but a wider shape moves one loop-carried value per
    iteration down the chain u -> y3 -> y2 -> y1 -> x, and reaches the scan output at
    iteration 3: the twin may only start once the loop-carried values keep their shapes."""
    chain = [("x", "y1"), ("y1", "y2"), ("y2", "y3"), ("y3", "u")]
    names = ["x", "y1", "y2", "y3", "u"]
    body = helper.make_graph(
        [helper.make_node("Add", [a, b], [f"{a}_out"]) for a, b in chain]
        + [
            helper.make_node("Identity", ["u"], ["u_out"]),
            helper.make_node("Identity", ["x_out"], ["seen"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, [])] + [_vi(n, F, None) for n in names],
        [_vi("cond_out", B, [])]
        + [_vi(f"{n}_out", F, None) for n in names]
        + [_vi("seen", F, None)],
    )
    loop = helper.make_node(
        "Loop", ["M", "", *(f"{n}0" for n in names)], [*names, "seens"], body=body, name="L"
    )
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi(f"{n}0", F, None) for n in names],
        [_vi(n, F, None) for n in [*names, "seens"]],
        [numpy_helper.from_array(np.array(8, np.int64), "M")],
    )
    sess = onnxflow.InferenceSession(_model(graph))
    feeds = {f"{n}0": np.ones((1, 3), np.float32) for n in names}
    feeds["u0"] = np.ones((2, 3), np.float32)
    for observers in ([], [Trace()]):
        with pytest.raises(onnxflow.RuntimeFailure, match=r"changes across.*iteration 3 gave"):
            sess.run(None, feeds, observers=observers)
    feeds["u0"] = np.ones((1, 3), np.float32)  # no wider shape: 8 iterations, 4 of them steady
    *_, seens = _both(sess, feeds)
    assert seens.shape == (8, 1, 3)


def test_a_guard_that_never_passes_keeps_the_loop_off_the_twin() -> None:
    """The state broadcasts up to the constant's shape: the constant is never widened, so the
    step always takes its general path, and the loop must never reach the twin."""
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["x"], ["x_out"]),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        "b",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("x", F, [3])],
        [_vi("cond_out", B, []), _vi("x_out", F, [3]), _vi("y", F, [2, 3])],
        [numpy_helper.from_array(c, "c")],
    )
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x", "ys"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi("x0", F, [3])],
        [_vi("x", F, None), _vi("ys", F, None)],
        [numpy_helper.from_array(np.array(6, np.int64), "M")],
    )
    sess = onnxflow.InferenceSession(_model(graph))
    x0 = np.array([1, 2, 3], np.float32)
    for _ in range(2):
        x, ys = _both(sess, {"x0": x0})
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(ys, np.broadcast_to(x0 + c, (6, 2, 3)))
