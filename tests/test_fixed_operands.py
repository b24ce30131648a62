"""Generated code that leans on what stays fixed or on static types (runtime/codegen.py).

- In a generated loop, a broadcasting binary node with one operand fixed for the whole loop (an
  outer value, a hoisted invariant, a body constant) keeps that operand widened to the result's
  shape. The values must be NumPy's broadcast results whatever the other operand does: keep its
  shape, change it every iteration, broadcast itself, or make a result too big to widen.
- MatMul calls np.dot directly when static types say both inputs are matrices; a type that is
  wrong about the rank must still give MatMul's result.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.observers import Trace
from onnxflow.runtime import codegen

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _vi(name: str, elem: int, shape: list | None) -> helper.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=()) -> helper.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _broadcast_loop(trips: int, width: int) -> helper.ModelProto:
    """Per iteration, with fixed operands bias (W,) from outside and k (1, W) a body constant:
    h = (h + bias) * 0.5          fixed on the right, same shape as h after the first step
    d = bias - h                  fixed on the left (order matters)
    g = Concat(g, [i]) + one      a state growing every iteration, plus a fixed (1,)
    c = col + bias                (3, 1) + (W,): both operands broadcast
    e = h + k                     k is a constant of the body
    """
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["h", "bias"], ["hb"]),
            helper.make_node("Mul", ["hb", "half"], ["h_out"]),
            helper.make_node("Sub", ["bias", "h_out"], ["d"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Unsqueeze", ["fi", "zero"], ["fi1"]),
            helper.make_node("Concat", ["g", "fi1"], ["gi"], axis=0),
            helper.make_node("Add", ["gi", "one"], ["g_out"]),
            helper.make_node("Add", ["col", "bias"], ["c"]),
            helper.make_node("Add", ["h_out", "k"], ["e"]),
        ],
        "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("h", F, [2, width]), _vi("g", F, [None])],
        [
            _vi("cond_out", B, []),
            _vi("h_out", F, [2, width]),
            _vi("g_out", F, [None]),
            _vi("d", F, [2, width]),
            _vi("c", F, [3, width]),
            _vi("e", F, [2, width]),
        ],
        [
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
            numpy_helper.from_array(np.ones((1, width), np.float32), "k"),
        ],
    )
    loop = helper.make_node(
        "Loop", ["M", "", "h0", "g0"], ["h", "g", "ds", "cs", "es"], body=body, name="L"
    )
    return _model(
        [loop],
        [_vi("h0", F, [2, width]), _vi("g0", F, [None]), _vi("bias", F, [width])],
        [_vi(n, F, None) for n in ("h", "g", "ds", "cs", "es")],
        [
            numpy_helper.from_array(np.array(trips, np.int64), "M"),
            numpy_helper.from_array(np.array([1], np.float32), "one"),
            numpy_helper.from_array(np.arange(3, dtype=np.float32).reshape(3, 1), "col"),
        ],
    )


def _broadcast_oracle(trips: int, h, g, bias):
    half, one, k = np.float32(0.5), np.float32(1), np.ones((1, h.shape[1]), np.float32)
    col = np.arange(3, dtype=np.float32).reshape(3, 1)
    ds, cs, es = [], [], []
    for i in range(trips):
        h = (h + bias) * half
        ds.append(bias - h)
        g = np.concatenate([g, [np.float32(i)]]) + one
        cs.append(col + bias)
        es.append(h + k)
    return [h, g, np.stack(ds), np.stack(cs), np.stack(es)]


@pytest.mark.parametrize("width", [4, codegen.WIDEN_LIMIT // 2 + 1])  # the second is too big
@pytest.mark.parametrize("trips", [1, 2, 5])
def test_fixed_operands_give_broadcast_results(width: int, trips: int) -> None:
    rng = np.random.default_rng(0)
    feeds = {
        "h0": rng.standard_normal((2, width)).astype(np.float32),
        "g0": np.zeros(1, np.float32),
        "bias": rng.standard_normal(width).astype(np.float32),
    }
    sess = onnxflow.InferenceSession(_broadcast_loop(trips, width))
    want = _broadcast_oracle(trips, *feeds.values())
    for observers in ([], [Trace()]):  # the generated loop, then the per-iteration path
        got = sess.run(None, feeds, observers=observers)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_widen_keeps_the_fixed_operand_only_when_shapes_repeat() -> None:
    bias = np.arange(3, dtype=np.float32)
    x = np.ones((2, 3), np.float32)
    y, wide, shape = codegen.widen(np.subtract, bias, x, 0, None)
    np.testing.assert_array_equal(y, bias - x)
    assert wide is None and shape == ((2, 3),)  # first sighting: no copy yet
    y, wide, shape = codegen.widen(np.subtract, bias, x, 0, shape)
    assert shape == (2, 3) and wide.shape == (2, 3) and not wide.flags.writeable
    np.testing.assert_array_equal(np.subtract(wide, x), bias - x)
    col = np.ones((4, 1), np.float32)  # the moving operand broadcasts too: nothing kept
    assert codegen.widen(np.add, col, bias, 1, None)[1:] == (None, None)


def test_fixed_feeds_are_read_afresh_in_every_run() -> None:
    """A fed bias is a new read-only view in each run: a widening kept from an earlier run must
    not be used for it."""
    sess = onnxflow.InferenceSession(_broadcast_loop(3, 4))
    rng = np.random.default_rng(1)
    for _ in range(3):
        feeds = {
            "h0": rng.standard_normal((2, 4)).astype(np.float32),
            "g0": np.zeros(1, np.float32),
            "bias": rng.standard_normal(4).astype(np.float32),
        }
        for g, w in zip(sess.run(None, feeds), _broadcast_oracle(3, *feeds.values())):
            np.testing.assert_array_equal(g, w)


def test_a_constant_is_widened_once_for_all_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counting(*args):
        calls.append(args[0])
        return codegen.widen.__wrapped__(*args)

    counting.__wrapped__ = codegen.widen
    monkeypatch.setattr(codegen, "widen", counting)
    k = np.arange(3, dtype=np.float32).reshape(1, 3)
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Add", ["h", "k"], ["h2"]),
        ],
        "body",
        [_vi("i", I64, []), _vi("c", B, []), _vi("h", F, [2, 3])],
        [_vi("c_out", B, []), _vi("h2", F, [2, 3])],
        [numpy_helper.from_array(k, "k")],
    )
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h"], body=body)
    sess = onnxflow.InferenceSession(
        _model(
            [loop],
            [_vi("h0", F, [2, 3])],
            [_vi("h", F, None)],
            [numpy_helper.from_array(np.array(4, np.int64), "M")],
        )
    )
    h0 = np.ones((2, 3), np.float32)
    for run in range(3):
        np.testing.assert_array_equal(sess.run(None, {"h0": h0 + run})[0], h0 + run + 4 * k)
        assert len(calls) == 2  # the first run: once to see the shapes, once to widen


def _matmul_model(declared: list) -> helper.ModelProto:
    """Y = MatMul(Identity(X), W): the intermediate's declared type may be wrong about its rank."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    return _model(
        [helper.make_node("Identity", ["X"], ["t"]), helper.make_node("MatMul", ["t", "W"], ["Y"])],
        [_vi("X", F, None)],
        [_vi("Y", F, None)],
        [numpy_helper.from_array(w, "W")],
    ), w


@pytest.mark.parametrize("x_shape", [(2, 3), (3,), (5, 2, 3)])
def test_matmul_with_a_rank_that_types_got_wrong(x_shape) -> None:
    model, w = _matmul_model([2, 3])
    model.graph.value_info.append(_vi("t", F, [2, 3]))  # says 2-D whatever is fed
    x = np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape)
    (y,) = onnxflow.InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(y, np.matmul(x, w))
    assert y.dtype == np.float32


def test_matmul_of_a_scalar_is_still_an_error() -> None:
    model, _ = _matmul_model([2, 3])
    model.graph.value_info.append(_vi("t", F, [2, 3]))
    with pytest.raises(onnxflow.RuntimeFailure, match="MatMul"):
        onnxflow.InferenceSession(model).run(None, {"X": np.array(2, np.float32)})
