"""QDQConv's two forms (compile/passes/fuse_qdq_conv.py): the NumPy form runs the quantized
convolution's nodes as written, bit for bit; the compiled form runs the exact integer
convolution, within one quantization step of it, and only at the float graph's rounding ties
(within the bound :func:`~onnxflow.ops.pass_made.qdq_conv.qdq_conv_bound` of one)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.ops.pass_made.qdq_conv import qdq_conv_bound

FORMS_TESTED = [("onnxflow.fused", "QDQConv")]

#: The compiled form's result is at most this many steps of y's scale from the float graph's.
MAX_STEPS = 1


def qdq_conv_params(m: int, c: int, seed: int, sy: float | None) -> dict[str, np.ndarray]:
    """The constants of a quantized 1x1 convolution as onnxruntime's quantizer writes them:
    u8 activations (scale 0.02, zero point 128), s8 weights per output channel (symmetric),
    an int32 bias of scale ``sx * sw``; y's scale covering about four deviations of y."""
    rng = np.random.default_rng(seed)
    sw = (rng.random(m) * 0.008 + 0.002).astype(np.float32)
    sx = np.array(0.02, np.float32)
    scale = 4 * np.sqrt(c) * 1.44 * 73 * float(sw.mean()) / 127 if sy is None else sy
    return {
        "sx": sx,
        "zx": np.array(128, np.uint8),
        "w": rng.integers(-127, 128, (m, c, 1, 1)).astype(np.int8),
        "sw": sw,
        "zw": np.zeros(m, np.int8),
        "b": rng.integers(-2000, 2001, m).astype(np.int32),
        "sb": (sx * sw).astype(np.float32),
        "zb": np.zeros(m, np.int32),
        "sy": np.array(scale, np.float32),
        "zy": np.array(128, np.uint8),
    }


def qdq_conv_model(
    m: int = 128, c: int = 128, *, seed: int = 0, sy: float | None = None, conv_out: bool = False
) -> ModelProto:
    """``x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Q -> DQ -> y`` (and the Conv's float output as
    a graph output too with ``conv_out``, which keeps the nodes apart)."""
    p = qdq_conv_params(m, c, seed, sy)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if conv_out:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 5, 7])],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _x(c: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2.6, 2.6, (2, c, 5, 7)).astype(np.float32)


def _run(model: ModelProto, x: np.ndarray, **options: object) -> list[np.ndarray]:
    sess = onnxflow.InferenceSession(model, onnxflow.SessionOptions(**options))  # type: ignore[arg-type]
    return sess.run(None, {"x": x})


def _ops(model: ModelProto, **options: object) -> list[str]:
    sess = onnxflow.InferenceSession(model, onnxflow.SessionOptions(**options))  # type: ignore[arg-type]
    return [info.op_type for info in sess.plan.infos]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_form_is_the_nodes_as_written(seed: int) -> None:
    model = qdq_conv_model(seed=seed)
    assert "QDQConv" in _ops(model, kernels="numpy")
    x = _x(128, seed)
    fused = _run(model, x, kernels="numpy")[0]
    np.testing.assert_array_equal(fused, _run(model, x, optimize=False)[0])


@pytest.mark.parametrize(("m", "c", "seed"), [(128, 128, 0), (160, 256, 1), (128, 512, 2)])
def test_compiled_form_within_one_step_and_only_at_ties(m: int, c: int, seed: int) -> None:
    model = qdq_conv_model(m, c, seed=seed)
    assert "QDQConv" in _ops(model)
    p = qdq_conv_params(m, c, seed, None)
    x = _x(c, seed)
    xq = np.zeros(1, np.uint8)
    bound = qdq_conv_bound(xq, p["sx"], p["zx"], p["w"], p["sw"], p["zw"], p["b"], p["sb"], p["sy"])
    assert bound.max() < 1  # else the compiled form runs the nodes as written
    step = float(p["sy"])
    compiled = _run(model, x)[0]
    written = _run(model, x, kernels="numpy")[0]
    steps = np.abs(compiled.astype(np.float64) - written) / step
    assert steps.max() <= MAX_STEPS + 1e-6
    # where they differ, the float graph's value before rounding is within the bound of a tie
    conv = _run(qdq_conv_model(m, c, seed=seed, conv_out=True), x, optimize=False)[1]
    v = (conv / p["sy"]).astype(np.float64)
    to_tie = np.abs(v - np.floor(v) - 0.5)
    differ = steps > 0.5
    per_channel = np.broadcast_to(bound.reshape(1, -1, 1, 1), v.shape)
    assert np.all(to_tie[differ] <= per_channel[differ])


def test_compiled_form_runs_the_nodes_as_written_past_the_bound() -> None:
    model = qdq_conv_model(sy=1e-7)  # a tiny output scale: the bound exceeds one step
    x = _x(128, 3)
    np.testing.assert_array_equal(_run(model, x)[0], _run(model, x, kernels="numpy")[0])


def _power_of_two_scales(model: ModelProto) -> ModelProto:
    """``model`` with sx = 2^-6, sw = 2^-7, sb = sx * sw (y's scale set by the caller)."""
    for init in model.graph.initializer:
        if init.name in ("sx", "sw", "sb"):
            value = {"sx": 2.0**-6, "sw": 2.0**-7, "sb": 2.0**-13}[init.name]
            array = np.full(numpy_helper.to_array(init).shape, value, np.float32)
            init.CopyFrom(numpy_helper.from_array(array, init.name))
    return model


def test_power_of_two_scales_agree_bit_for_bit_ties_included() -> None:
    # sx * sw and sy powers of two: the float graph's products and sums are exact, every odd
    # acc + b lands on a tie, and both forms round it half to even
    model = _power_of_two_scales(qdq_conv_model(seed=4, sy=2.0**-12))
    x = (np.random.default_rng(4).integers(-3, 4, (2, 128, 5, 7)) * 2.0**-6).astype(np.float32)
    compiled, written = _run(model, x)[0], _run(model, x, kernels="numpy")[0]
    conv_out = _power_of_two_scales(qdq_conv_model(seed=4, sy=2.0**-12, conv_out=True))
    codes = _run(conv_out, x, optimize=False)[1] / 2.0**-12
    assert np.count_nonzero(codes - np.floor(codes) == 0.5) > 100  # ties, many
    np.testing.assert_array_equal(compiled, written)
