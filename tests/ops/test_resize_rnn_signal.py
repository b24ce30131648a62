"""Resampling, recurrent, signal and detection kernels: what the node suite does not pin down.

Inputs are never written, float16 stays float16, legacy Resize-10/Upsample rounding, integer
Resize saturation, layout 1 of the recurrent ops, sequence_lens masking, activation parameters,
DFT axis conventions of versions 17 and 20, window types, and clear errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from op_testing import f32, one_node_model, runner

import onnxflow
from onnxflow.errors import OnnxflowError

F32 = np.float32
RNG = np.random.default_rng(7)


run = runner(opset=22)


def i64(*values):
    return np.array(values, dtype=np.int64)


# -- Resize / Upsample --------------------------------------------------------------------------


def test_resize_does_not_write_its_inputs_and_keeps_float16():
    x = RNG.standard_normal((1, 1, 4, 5)).astype(np.float16)
    scales = f32(1, 1, 1.5, 0.6)
    before = x.copy(), scales.copy()
    for mode in ("nearest", "linear", "cubic"):
        y = run("Resize", [x, None, scales], 19, mode=mode)
        assert y.dtype == np.float16 and y.shape == (1, 1, 6, 3)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(scales, before[1])


def test_resize_linear_on_integers_rounds_and_saturates():
    x = np.array([[0, 255]], dtype=np.uint8)
    y = run("Resize", [x, None, f32(1, 2)], 19, mode="linear")
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, [[0, 64, 191, 255]])
    cubic = run("Resize", [x, None, f32(1, 4)], 19, mode="cubic")
    assert cubic.min() >= 0 and cubic.max() <= 255


def test_resize_10_nearest_rounds_down_when_growing_and_up_when_shrinking():
    x = np.arange(7, dtype=F32).reshape(1, 7)
    grown = run("Resize", [x, f32(1, 1.7)], 10)
    np.testing.assert_array_equal(grown[0], [0, 0, 1, 1, 2, 2, 3, 4, 4, 5, 5])
    shrunk = run("Resize", [x, f32(1, 0.7)], 10)
    np.testing.assert_array_equal(shrunk[0], [0, 2, 3, 5])


def test_upsample_versions_agree_and_reject_shrinking():
    x = np.arange(4, dtype=F32).reshape(1, 1, 2, 2)
    expected = x.repeat(2, axis=2).repeat(3, axis=3)
    np.testing.assert_array_equal(run("Upsample", [x], 7, scales=[1.0, 1.0, 2.0, 3.0]), expected)
    np.testing.assert_array_equal(run("Upsample", [x, f32(1, 1, 2, 3)], 9), expected)
    y1 = run("Upsample", [x], 1, height_scale=2.0, width_scale=3.0)
    np.testing.assert_array_equal(y1, expected)
    with pytest.raises(OnnxflowError, match=">= 1"):
        run("Upsample", [x, f32(1, 1, 0.5, 1)], 9)


def test_resize_axes_with_keep_aspect_ratio_policy():
    x = RNG.standard_normal((1, 2, 4, 8)).astype(F32)
    sizes = i64(6, 6)
    small = run(
        "Resize", [x, None, None, sizes], 19, axes=[2, 3], keep_aspect_ratio_policy="not_larger"
    )
    large = run(
        "Resize", [x, None, None, sizes], 19, axes=[-2, -1], keep_aspect_ratio_policy="not_smaller"
    )
    assert small.shape == (1, 2, 3, 6) and large.shape == (1, 2, 6, 12)


def test_tf_crop_and_resize_with_scales_keeps_the_full_extent_and_extrapolates():
    x = np.arange(16, dtype=F32).reshape(1, 1, 4, 4)
    roi = f32(0, 0, -0.5, 0, 1, 1, 1.0, 1)
    y = run(
        "Resize",
        [x, roi, f32(1, 1, 1, 1)],
        19,
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-1.0,
    )
    assert y.shape == (1, 1, 4, 4)
    np.testing.assert_array_equal(y[0, 0, 0], [-1, -1, -1, -1])
    np.testing.assert_array_equal(y[0, 0, 3], x[0, 0, 3])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_align_corners_downsampling_meets_the_corners(mode: str) -> None:
    # the resized length is the output's (2 from 4 * 0.6), not the fractional 2.4
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 4)
    scales = np.array([1, 1, 0.6, 0.6], np.float32)
    y = run("Resize", [x, None, scales], mode=mode, coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(y, [[[[1, 4]]]], rtol=1e-6)


def test_resize_rejects_both_scales_and_sizes_and_unknown_modes():
    x = np.zeros((1, 1, 2, 2), F32)
    with pytest.raises(OnnxflowError, match="not both"):
        run("Resize", [x, None, f32(1, 1, 2, 2), i64(1, 1, 4, 4)], 13)
    with pytest.raises(OnnxflowError, match="mode must be"):
        run("Resize", [x, None, f32(1, 1, 2, 2)], 13, mode="bilinear")


# -- GridSample / AffineGrid --------------------------------------------------------------------


def test_affine_identity_grid_samples_the_input_back():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(F32)
    theta = np.tile(f32(1, 0, 0, 0, 1, 0).reshape(1, 2, 3), (2, 1, 1))
    grid = run("AffineGrid", [theta, i64(2, 3, 4, 5)], 20)
    assert grid.shape == (2, 4, 5, 2)
    for mode in ("linear", "nearest", "cubic"):
        np.testing.assert_allclose(run("GridSample", [x, grid], 22, mode=mode), x, atol=1e-5)


def test_gridsample_nearest_halfway_rounds_to_even_and_keeps_float16():
    x = np.arange(4, dtype=np.float16).reshape(1, 1, 1, 4)
    grid = np.array([[[[-0.5, 0], [0.5, 0]]]], dtype=F32)  # pixel positions 0.5 and 2.5
    y = run("GridSample", [x.astype(F32), grid], 20, mode="nearest")
    np.testing.assert_array_equal(y[0, 0, 0], [0, 2])
    y16 = run("GridSample", [x, grid.astype(np.float16)], 20, mode="linear")
    assert y16.dtype == np.float16


# -- RNN / LSTM / GRU ---------------------------------------------------------------------------

T, B, I, H = 4, 3, 2, 5


def weights(gates, dirs=1):
    return (
        RNG.standard_normal((dirs, gates * H, I)).astype(F32),
        RNG.standard_normal((dirs, gates * H, H)).astype(F32),
        RNG.standard_normal((dirs, 2 * gates * H)).astype(F32),
    )


@pytest.mark.parametrize(("op", "gates", "n_out"), [("RNN", 1, 2), ("GRU", 3, 2), ("LSTM", 4, 3)])
def test_layout_1_is_layout_0_transposed(op, gates, n_out):
    w, r, b = weights(gates, 2)
    x = RNG.standard_normal((T, B, I)).astype(F32)
    lens = np.array([4, 1, 3], np.int32)
    common = dict(hidden_size=H, direction="bidirectional")
    ref = run(op, [x, w, r, b, lens], 22, n_out, **common)
    got = run(op, [x.transpose(1, 0, 2), w, r, b, lens], 22, n_out, layout=1, **common)
    np.testing.assert_allclose(got[0], ref[0].transpose(2, 0, 1, 3), rtol=1e-6)
    for g, e in zip(got[1:], ref[1:]):
        np.testing.assert_allclose(g, e.transpose(1, 0, 2), rtol=1e-6)


def test_sequence_lens_zero_outputs_and_freeze_the_state():
    w, r, b = weights(1)
    x = RNG.standard_normal((T, B, I)).astype(F32)
    lens = np.array([4, 2, 0], np.int32)
    h0 = RNG.standard_normal((1, B, H)).astype(F32)
    before = x.copy()
    y, y_h = run("RNN", [x, w, r, b, lens, h0], 14, 2, hidden_size=H)
    np.testing.assert_array_equal(x, before)
    assert np.all(y[2:, 0, 1] == 0) and np.all(y[:, 0, 2] == 0)
    np.testing.assert_array_equal(y_h[0, 1], y[1, 0, 1])
    np.testing.assert_array_equal(y_h[0, 2], h0[0, 2])
    rev, rev_h = run("RNN", [x, w, r, b, lens, h0], 14, 2, hidden_size=H, direction="reverse")
    np.testing.assert_array_equal(rev_h[0, 1], rev[0, 0, 1])  # reverse ends at step 0


def test_activation_parameters_are_consumed_in_order():
    w, r, b = weights(1)
    x = RNG.standard_normal((T, B, I)).astype(F32)
    leaky = run(
        "RNN", [x, w, r, b], 14, 2, hidden_size=H, activations=["LeakyRelu"], activation_alpha=[0.3]
    )[0]
    affine = run(
        "RNN",
        [x, w, r, b],
        14,
        2,
        hidden_size=H,
        activations=["Affine"],
        activation_alpha=[0.3],
        activation_beta=[0.0],
    )[0]
    relu = run("RNN", [x, w, r, b], 14, 2, hidden_size=H, activations=["Relu"])[0]
    assert not np.allclose(leaky, relu)
    assert leaky[0].min() < 0 and affine.shape == leaky.shape
    with pytest.raises(OnnxflowError, match="unknown activation"):
        run("RNN", [x, w, r, b], 14, 2, hidden_size=H, activations=["Swish"])


#: RNN activation -> (activation_alpha, activation_beta) it takes, as the RNN schema's table
#: maps them to the attributes of the operator of that name.
RNN_ACTIVATIONS = {
    "Relu": {},
    "Tanh": {},
    "Sigmoid": {},
    "Affine": {"alpha": 0.7, "beta": -0.2},
    "LeakyRelu": {"alpha": 0.3},
    "ThresholdedRelu": {"alpha": 0.4},
    "ScaledTanh": {"alpha": 1.5, "beta": 0.6},
    "HardSigmoid": {"alpha": 0.3, "beta": 0.45},
    "Elu": {"alpha": 0.8},
    "Softsign": {},
    "Softplus": {},
}


@pytest.mark.parametrize("name", RNN_ACTIVATIONS)
@pytest.mark.parametrize("given", [True, False])
def test_rnn_activations_are_the_registered_kernels(name: str, given: bool) -> None:
    """Each activation of RNN is the operator of its name, alpha and beta its attributes
    (left out: the operator's defaults), step by step bit for bit."""
    from onnxflow.ops.registry import REGISTRY

    kernel = REGISTRY.lookup("", name, 22).fn
    attributes = RNN_ACTIVATIONS[name] if given else {}
    w, r, b = weights(1)
    x = RNG.standard_normal((T, B, I)).astype(F32)
    params = {f"activation_{k}": [v] for k, v in attributes.items()}
    model, feeds = one_node_model(
        "RNN", [x, w, r, b], 14, 2, hidden_size=H, activations=[name], **params
    )
    numpy_form = onnxflow.SessionOptions(kernels="numpy")  # the reference, bit for bit
    y = onnxflow.InferenceSession(model, numpy_form).run(None, feeds)[0]
    xw = x @ w[0].T + (b[0, :H] + b[0, H:])
    rt, h = np.ascontiguousarray(r[0].T), np.zeros((B, H), F32)
    for t in range(T):
        h = kernel(xw[t] + np.dot(h, rt), **attributes)
        np.testing.assert_array_equal(y[t, 0], h)


def test_lstm_keeps_float16():
    w, r, b = weights(4)
    x = RNG.standard_normal((T, B, I)).astype(np.float16)
    outs = run(
        "LSTM",
        [x, w.astype(np.float16), r.astype(np.float16), b.astype(np.float16)],
        7,
        3,
        hidden_size=H,
    )
    assert [o.dtype for o in outs] == [np.float16] * 3


# -- NonMaxSuppression --------------------------------------------------------------------------


def test_nms_empty_without_max_output_and_score_threshold_keeps_equal_scores():
    boxes = f32(0, 0, 1, 1, 2, 2, 3, 3).reshape(1, 2, 4)
    scores = f32(0.5, 0.4).reshape(1, 1, 2)
    empty = run("NonMaxSuppression", [boxes, scores], 11)
    assert empty.dtype == np.int64 and empty.shape == (0, 3)
    kept = run("NonMaxSuppression", [boxes, scores, i64(5), f32(0.5), f32(0.4)], 10)
    np.testing.assert_array_equal(kept, [[0, 0, 0], [0, 0, 1]])


# -- signal -------------------------------------------------------------------------------------


def test_dft_17_axis_attribute_and_20_axis_input_agree():
    x = RNG.standard_normal((2, 6, 5, 1)).astype(F32)
    a = run("DFT", [x], 17, axis=2, onesided=1)
    b = run("DFT", [x, None, i64(-2)], 20, onesided=1)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    expected = np.fft.rfft(x[..., 0].astype(np.float64), axis=2)
    np.testing.assert_allclose(a[..., 0] + 1j * a[..., 1], expected, rtol=1e-4, atol=1e-5)
    back = run("DFT", [b, None, i64(2)], 20, onesided=1, inverse=1)
    assert back.shape == (2, 6, 4, 1)  # default irfft length 2 * (3 bins - 1)
    with pytest.raises(OnnxflowError, match="axis"):
        run("DFT", [x, None, i64(-1)], 20)


def test_windows_follow_output_datatype_and_symmetric_length_one():
    w = run("HannWindow", [i64(8)], 17, output_datatype=TensorProto.DOUBLE)
    assert w.dtype == np.float64
    np.testing.assert_allclose(w, 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(8) / 8))
    np.testing.assert_array_equal(run("HammingWindow", [i64(1)], 17, periodic=0), [1])
    symmetric = run("BlackmanWindow", [i64(7)], 17, periodic=0)
    np.testing.assert_allclose(symmetric, np.blackman(7), atol=1e-6)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_lens", [False, True])
def test_the_plain_lstm_cell_is_the_general_one_bit_for_bit(
    direction: str, with_lens: bool
) -> None:
    """Default activations, no peepholes, clip or coupling take a cell that computes the three
    sigmoid gates in one call; its results equal the general cell's exactly."""
    import functools

    from onnxflow.ops import rnn as rnn_module

    rng = np.random.default_rng(3)
    dirs, hidden, seq, batch = (2 if direction == "bidirectional" else 1), 5, 7, 3
    x = rng.standard_normal((seq, batch, 4)).astype(np.float32)
    w = rng.standard_normal((dirs, 4 * hidden, 4)).astype(np.float32)
    r = rng.standard_normal((dirs, 4 * hidden, hidden)).astype(np.float32)
    b = rng.standard_normal((dirs, 8 * hidden)).astype(np.float32)
    lens = np.array([7, 3, 5], np.int32) if with_lens else None
    spec = rnn_module._Recurrence(direction, hidden, 0, None, None, None)
    inputs = (x, w, r, b, lens, None, None)
    general = functools.partial(rnn_module._lstm_cell, lambda v: v, 0)
    want = rnn_module._run(general, rnn_module._LSTM, inputs, spec)
    got = rnn_module.lstm(x, w, r, b, lens, hidden_size=hidden, direction=direction)
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("weights", ["constant", "fed"])
@pytest.mark.parametrize("kernels", ["numpy", "native"])
def test_recurrent_weights_are_prepared_once_and_again_when_they_change(
    op_type: str, weights: str, kernels: str, monkeypatch
) -> None:
    """A session's recurrent node keeps the weights it prepared (transposed, biases summed)
    while they are the same arrays: constant weights are prepared once, fed ones as they come.
    Every run equals the kernel called afresh: bit for bit in the NumPy form, within the
    compiled loop's bound (tests/native/test_native_rnn.py) in the compiled one."""
    from onnx import helper, numpy_helper

    from onnxflow.ops import rnn as rnn_module

    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op_type]
    hidden, size, seq = 6, 5, 4
    rng = np.random.default_rng(11)

    def draw() -> dict[str, np.ndarray]:
        return {
            "W": rng.standard_normal((1, gates * hidden, size)).astype(F32),
            "R": rng.standard_normal((1, gates * hidden, hidden)).astype(F32),
            "B": rng.standard_normal((1, 2 * gates * hidden)).astype(F32),
        }

    first = draw()
    weight_inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in first.items()
    ]
    graph = helper.make_graph(
        [helper.make_node(op_type, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden)],
        "recurrent",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, 2, size])]
        + (weight_inputs if weights == "fed" else []),
        [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in first.items()] if weights == "constant" else [],
    )
    sess = onnxflow.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]),
        onnxflow.SessionOptions(kernels=kernels),
    )
    kernel = {"RNN": rnn_module.rnn, "GRU": rnn_module.gru, "LSTM": rnn_module.lstm}[op_type]
    prepared = []
    static = rnn_module._static
    monkeypatch.setattr(rnn_module, "_static", lambda *a: prepared.append(1) or static(*a))
    second = draw()
    series = [first, first, first] if weights == "constant" else [first, second, second, first]
    for w in series:
        x = rng.standard_normal((seq, 2, size)).astype(F32)
        feeds = {"X": x, **(w if weights == "fed" else {})}
        want = kernel(x, w["W"], w["R"], w["B"], hidden_size=hidden)[1]
        got = sess.run(None, feeds)[0]
        if kernels == "numpy":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # constants are prepared once; fed weights reach the kernel as new views each run, so they
    # are prepared every run (a memo keyed on identity never serves stale weights)
    assert len(prepared) == len(series) + (1 if weights == "constant" else len(series))
