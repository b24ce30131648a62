"""The compiled time loops of RNN, LSTM and GRU against their NumPy forms."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from native_forms import node_forms
from onnx import helper, numpy_helper

import onnxflow

FORMS_TESTED = [("", "LSTM"), ("", "GRU"), ("", "RNN"), ("com.microsoft", "DynamicQuantizeLSTM")]

#: How far the compiled loop may be from the NumPy form. The compiled loop sums the recurrent
#: product in float32 in its own order (not BLAS's), computes the gates in double and rounds
#: each new state once to float32; the NumPy form rounds every sum and activation to float32
#: (its sigmoid a few ulp off). Each step therefore differs by a few float32 ulp, and a
#: contracting recurrence (these weights) keeps that from growing over 500 steps.
RTOL, ATOL = 1e-5, 1e-6

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _inputs(
    op: str, seq: int, batch: int, hidden: int, direction: str, rng: np.random.Generator
) -> list[np.ndarray | None]:
    """X, W, R, B with weights small enough for a contracting recurrence."""
    dirs, gates, size = N_DIRS[direction], GATES[op], 5
    scale = 1.0 / np.sqrt(hidden)
    return [
        rng.standard_normal((seq, batch, size)).astype(np.float32),
        (rng.standard_normal((dirs, gates * hidden, size)) * 0.5).astype(np.float32),
        (rng.standard_normal((dirs, gates * hidden, hidden)) * scale).astype(np.float32),
        (rng.standard_normal((dirs, 2 * gates * hidden)) * 0.5).astype(np.float32),
    ]


def _states(
    op: str, batch: int, hidden: int, direction: str, rng: np.random.Generator
) -> list[np.ndarray]:
    """initial_h (and initial_c)."""
    n = 2 if op == "LSTM" else 1
    shape = (N_DIRS[direction], batch, hidden)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _check(op: str, inputs: list[np.ndarray | None], **attrs: object) -> None:
    n_out = 3 if op == "LSTM" else 2
    compiled, numpy_form = node_forms(op, inputs, 14, n_out, **attrs)
    for c, n in zip(compiled, numpy_form, strict=True):
        assert c.dtype == n.dtype and c.shape == n.shape
        np.testing.assert_allclose(c, n, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("batch", [1, 5, 16, 70])
@pytest.mark.parametrize("hidden", [8, 64])
def test_directions_lengths_and_initial_states(op, direction, batch, hidden):
    rng = np.random.default_rng(batch * 100 + hidden)
    seq = 40
    inputs = _inputs(op, seq, batch, hidden, direction, rng)
    lens = rng.integers(0, seq + 1, batch).astype(np.int32)
    lens[0] = seq
    states = _states(op, batch, hidden, direction, rng)
    _check(op, [*inputs, lens, *states], direction=direction, hidden_size=hidden)
    _check(op, inputs, direction=direction)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_long_sequence(op):
    rng = np.random.default_rng(7)
    _check(op, _inputs(op, 500, 1, 32, "bidirectional", rng), direction="bidirectional")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1(op):
    rng = np.random.default_rng(3)
    x, w, r, b = _inputs(op, 12, 3, 16, "forward", rng)
    states = [s.transpose(1, 0, 2).copy() for s in _states(op, 3, 16, "forward", rng)]
    lens = np.array([12, 5, 1], np.int32)
    _check(op, [x.transpose(1, 0, 2).copy(), w, r, b, lens, *states], layout=1)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset(linear_before_reset):
    rng = np.random.default_rng(4)
    inputs = _inputs("GRU", 30, 2, 16, "bidirectional", rng)
    _check("GRU", inputs, direction="bidirectional", linear_before_reset=linear_before_reset)


def test_lstm_peepholes_clip_and_coupled_gates():
    rng = np.random.default_rng(5)
    inputs = _inputs("LSTM", 30, 3, 16, "bidirectional", rng)
    lens = np.array([30, 17, 2], np.int32)
    states = _states("LSTM", 3, 16, "bidirectional", rng)
    peepholes = (rng.standard_normal((2, 48)) * 0.5).astype(np.float32)
    full = [*inputs, lens, *states, peepholes]
    _check("LSTM", full, direction="bidirectional")
    _check("LSTM", full, direction="bidirectional", clip=0.7)
    _check("LSTM", full, direction="bidirectional", input_forget=1)


ACTIVATIONS = [
    (["Relu"], [], []),
    (["Affine"], [0.7], [0.1]),
    (["LeakyRelu"], [0.2], []),
    (["ThresholdedRelu"], [0.3], []),
    (["ScaledTanh"], [1.2], [0.8]),
    (["HardSigmoid"], [], []),
    (["Elu"], [0.9], []),
    (["Softsign"], [], []),
    (["Softplus"], [], []),
]


@pytest.mark.parametrize(("names", "alphas", "betas"), ACTIVATIONS)
def test_rnn_activations(names, alphas, betas):
    rng = np.random.default_rng(6)
    inputs = _inputs("RNN", 25, 2, 8, "forward", rng)
    attrs = {"activation_alpha": alphas} if alphas else {}
    attrs |= {"activation_beta": betas} if betas else {}
    _check("RNN", inputs, activations=names, **attrs)


def test_lstm_and_gru_other_activations():
    rng = np.random.default_rng(8)
    lstm = ["HardSigmoid", "Softsign", "ScaledTanh"]
    _check(
        "LSTM",
        _inputs("LSTM", 25, 2, 8, "forward", rng),
        activations=lstm,
        activation_alpha=[0.3, 1.1],
        activation_beta=[0.4, 0.9],
    )
    gru = ["Sigmoid", "Elu"]
    _check("GRU", _inputs("GRU", 25, 2, 8, "forward", rng), activations=gru)


def test_float64_runs_the_numpy_form():
    rng = np.random.default_rng(9)
    inputs = [a.astype(np.float64) for a in _inputs("LSTM", 10, 2, 8, "forward", rng)]
    compiled, numpy_form = node_forms("LSTM", inputs, 14, 3)
    for c, n in zip(compiled, numpy_form, strict=True):
        assert c.dtype == np.float64 and np.array_equal(c, n)


def _quantized_lstm_inputs(
    seq: int, batch: int, hidden: int, direction: str, codes: type, per_column: bool, seed: int
) -> list[np.ndarray | None]:
    """DynamicQuantizeLSTM's inputs: X, 8-bit W (D, I, 4H) and R (D, H, 4H) with their scales
    and zero points (per direction, or per direction and column), B, lengths and states."""
    rng = np.random.default_rng(seed)
    dirs, size = N_DIRS[direction], 6
    info = np.iinfo(codes)
    params = (dirs, 4 * hidden) if per_column else (dirs,)

    def weights(rows: int) -> np.ndarray:
        return rng.integers(info.min, info.max + 1, (dirs, rows, 4 * hidden)).astype(codes)

    def scales(top: float) -> np.ndarray:
        return (rng.random(params) * top + top / 4).astype(np.float32)

    zero = np.full(params, (int(info.min) + int(info.max) + 1) // 2, codes)
    lens = rng.integers(1, seq + 1, batch).astype(np.int32)
    states = [
        (rng.standard_normal((dirs, batch, hidden)) * 0.5).astype(np.float32) for _ in range(2)
    ]
    return [
        rng.standard_normal((seq, batch, size)).astype(np.float32),
        weights(size),
        weights(hidden),
        (rng.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32),
        lens,
        *states,
        None,
        scales(0.004),
        zero,
        scales(0.2 / hidden / 128),
        zero.copy(),
    ]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("batch", "hidden"), [(1, 8), (1, 64), (16, 32)])
@pytest.mark.parametrize("codes", [np.int8, np.uint8])
def test_dynamic_quantize_lstm(direction, batch, hidden, codes):
    inputs = _quantized_lstm_inputs(40, batch, hidden, direction, codes, hidden == 64, 1)
    compiled, numpy_form = node_forms(
        "DynamicQuantizeLSTM", inputs, 1, 3, "com.microsoft", direction=direction
    )
    for c, n in zip(compiled, numpy_form, strict=True):
        np.testing.assert_allclose(c, n, rtol=RTOL, atol=ATOL)


def test_dynamic_quantize_lstm_peepholes_clip_and_activations():
    inputs = _quantized_lstm_inputs(30, 3, 8, "forward", np.int8, False, 2)
    inputs[7] = (np.random.default_rng(3).standard_normal((1, 24)) * 0.3).astype(np.float32)
    attrs = dict(clip=0.8, input_forget=1, activations=["HardSigmoid", "Tanh", "Softsign"])
    compiled, numpy_form = node_forms("DynamicQuantizeLSTM", inputs, 1, 3, "com.microsoft", **attrs)
    for c, n in zip(compiled, numpy_form, strict=True):
        np.testing.assert_allclose(c, n, rtol=RTOL, atol=ATOL)


def _weights_model(op: str, direction: str, given_states: bool) -> onnx.ModelProto:
    """One ``op`` node with W, R, B as initializers (the arrays every run reads) and X (and
    the initial states when ``given_states``) as inputs."""
    rng = np.random.default_rng(11)
    _, w, r, b = _inputs(op, 1, 1, 16, direction, rng)
    states = ["h0", "c0"][: 2 if op == "LSTM" else 1] if given_states else []
    names = ["x", "w", "r", "b", "", *states]
    outs = ["y", "yh", "yc"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, direction=direction, hidden_size=16)
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["T", "B", 5])]
    inputs += [
        helper.make_tensor_value_info(s, onnx.TensorProto.FLOAT, [1, "B", 16]) for s in states
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (r, "r"), (b, "b"))]
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph([node], op, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("given_states", [False, True])
def test_later_runs_match_the_first(op, direction, given_states):
    """A session's later runs (the loop called straight, its weights prepared by the first)
    give bit for bit what a fresh session's first run gives, and stay near the NumPy form."""
    data = _weights_model(op, direction, given_states).SerializeToString()
    kept = onnxflow.InferenceSession(data)
    rng = np.random.default_rng(5)
    for seq, batch in ((3, 1), (1, 1), (4, 2), (1, 2)):
        feeds = {"x": rng.standard_normal((seq, batch, 5)).astype(np.float32)}
        if given_states:
            for s in ("h0", "c0")[: 2 if op == "LSTM" else 1]:
                feeds[s] = rng.standard_normal((1, batch, 16)).astype(np.float32)
        later = kept.run(None, feeds)
        first = onnxflow.InferenceSession(data).run(None, feeds)
        numpy_opts = onnxflow.SessionOptions(kernels="numpy")
        numpy_form = onnxflow.InferenceSession(data, numpy_opts).run(None, feeds)
        for a, b, n in zip(later, first, numpy_form, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, n, rtol=RTOL, atol=ATOL)
        assert not np.shares_memory(later[0], later[1])


def test_later_single_steps_call_the_loop_without_python_glue():
    """A streaming LSTM (one step, batch 1, states fed back): a later run checks the inputs and
    calls the prepared loop with no generator, no np.full and outputs that need no detaching
    (Y a fresh array, not a view the session must copy), bit for bit the first run's result."""
    import sys

    rng = np.random.default_rng(9)
    hidden, size = 16, 5
    w = rng.standard_normal((1, 4 * hidden, size)).astype(np.float32)
    r = (rng.standard_normal((1, 4 * hidden, hidden)) * 0.2).astype(np.float32)
    b = rng.standard_normal((1, 8 * hidden)).astype(np.float32)
    node = helper.make_node(
        "LSTM", ["x", "w", "r", "b", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=hidden
    )
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, size])]
    inputs += [
        helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 1, hidden])
        for n in ("h0", "c0")
    ]
    outs = [
        helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in ["y", "yh", "yc"]
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (r, "r"), (b, "b"))]
    graph = helper.make_graph([node], "lstm", inputs, outs, inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]).SerializeToString()
    sess = onnxflow.InferenceSession(data)
    h = c = np.zeros((1, 1, hidden), np.float32)
    calls: list[str] = []
    for _ in range(3):
        feeds = {"x": rng.standard_normal((1, 1, size)).astype(np.float32), "h0": h, "c0": c}
        first = onnxflow.InferenceSession(data).run(None, feeds)
        calls.clear()
        sys.setprofile(lambda frame, event, arg: calls.append(_where(frame.f_code)))
        try:
            y, h, c = sess.run(None, feeds)
        finally:
            sys.setprofile(None)
        for got, want in zip((y, h, c), first, strict=True):
            assert got.tobytes() == want.tobytes() and got.shape == want.shape
        assert y.base is None and not np.shares_memory(y, h)
    glue = {"<genexpr>", "full", "_detach"} & set(calls)
    assert not glue, calls


def _where(code) -> str:
    """A profiled call's function name, or "BLAS bound" for the session's thread bound: a run
    that took 1 ms or more on a loaded machine reads the load once a second
    (ort_api/threads.py), which is no part of the LSTM's glue."""
    return "BLAS bound" if code.co_filename.endswith("threads.py") else code.co_name


def _feeds(op: str, seq: int, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Feeds of :func:`_weights_model` with the initial states given."""
    feeds = {"x": rng.standard_normal((seq, batch, 5)).astype(np.float32)}
    for s in ("h0", "c0")[: 2 if op == "LSTM" else 1]:
        feeds[s] = rng.standard_normal((1, batch, 16)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_later_runs_run_no_python_of_the_kernel(op, direction):
    """A later run on the weights the first prepared goes from the node's stateful form
    (onnxflow.native._rnn.Stateful) into the compiled call (Direct: the input projection, the
    loop and the outputs made in C), with no Python function of ops/rnn.py, bit for bit what a
    fresh session's first run gives."""
    import sys

    data = _weights_model(op, direction, True).SerializeToString()
    sess = onnxflow.InferenceSession(data)
    rng = np.random.default_rng(12)
    sess.run(None, _feeds(op, 3, 1, rng))
    calls: list[str] = []

    def note(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("rnn.py"):
            calls.append(frame.f_code.co_name)

    for seq, batch in ((6, 1), (1, 1), (2, 3)):
        feeds = _feeds(op, seq, batch, rng)
        first = onnxflow.InferenceSession(data).run(None, feeds)
        calls.clear()
        sys.setprofile(note)
        try:
            later = sess.run(None, feeds)
        finally:
            sys.setprofile(None)
        for got, want in zip(later, first, strict=True):
            assert got.tobytes() == want.tobytes() and got.shape == want.shape
        assert calls == [], calls


def test_the_direct_call_leaves_what_it_does_not_take_to_the_kernel():
    """The prepared LSTM's direct call returns None (the kernel then runs) for float64 X,
    sequence lengths, other weight arrays, a state of another shape or batch 64 and up."""
    from onnxflow.ops import rnn

    rng = np.random.default_rng(13)
    x, w, r, b = _inputs("LSTM", 4, 2, 16, "forward", rng)
    h, c = _states("LSTM", 2, 16, "forward", rng)
    form = rnn._prepared(rnn.lstm, "LSTM")()
    want = form(x, w, r, b, None, h, c)
    direct = form.direct
    assert isinstance(direct, rnn._NATIVE.Direct)
    got = direct((x, w, r, b, None, h, c))
    assert all(g.tobytes() == o.tobytes() for g, o in zip(got, want, strict=True))
    big = np.zeros((4, 64, 5), np.float32)
    for inputs in [
        (x.astype(np.float64), w, r, b, None, h, c),
        (x, w, r, b, np.full(2, 4, np.int32), h, c),
        (x, w.copy(), r, b, None, h, c),
        (x, w, r, b, None, h[:, :1], c),
        (x, w, r, b, None, h, c.astype(np.float64)),
        (big, w, r, b),
    ]:
        assert direct(inputs) is None


@pytest.mark.parametrize("hidden", [1, 5, 16, 32, 128])
@pytest.mark.parametrize("backwards", [False, True])
def test_the_default_lstm_sequence_loop_is_the_step_by_step_loop(hidden, backwards):
    """The default LSTM's whole-sequence loop (each entry's steps in one call, the next
    product made as soon as the states are) gives bit for bit what the step-by-step calls
    (lstm_default_step: the pre-activations, the product, the gates) give, over batches with
    sequences cut short, in both directions."""
    from onnxflow.ops import rnn

    native = rnn._NATIVE
    rng = np.random.default_rng(hidden)
    seq, batch, width = 23, 3, 4 * hidden
    xw = (rng.standard_normal((seq, batch, width)) * 2).astype(np.float32)
    wb = rng.standard_normal(width).astype(np.float32)
    rt = (rng.standard_normal((hidden, width)) / np.sqrt(hidden)).astype(np.float32)
    h0, c0 = (rng.standard_normal((batch, hidden)).astype(np.float32) for _ in range(2))
    lens = np.array([seq, 9, 0], np.int64)
    gates = rnn._made_loop(rnn._LSTM, 1, None, None, None, None, 0).gates[0]
    weights = native.Weights(wb, rt, np.zeros(width, np.float32), np.zeros(0, np.float32))
    h, c, y = h0.copy(), c0.copy(), np.full((seq, batch, hidden), np.nan, np.float32)
    native.recur(gates, weights, xw, h, c, lens, y, backwards)
    for b in range(batch):
        hb, cb = h0[b].copy(), c0[b].copy()
        steps = range(lens[b])
        for t in reversed(steps) if backwards else steps:
            native.lstm_default_step(xw[t, b], wb, rt, hb, cb)
            assert y[t, b].tobytes() == hb.tobytes()
        assert not y[lens[b] :, b].any()
        assert h[b].tobytes() == hb.tobytes() and c[b].tobytes() == cb.tobytes()
