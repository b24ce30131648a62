"""The fusions onnxruntime writes into saved optimized models, against its CPU kernels:
com.microsoft FusedConv, FusedGemm, FusedMatMul, TransposeMatMul, NhwcMaxPool, and the
com.microsoft.nchwc operators run as onnxruntime's transformer chains them,
ReorderInput -> op -> ReorderOutput, with Conv weights blocked as the transformer saves them
(block 16, this machine's, against onnxruntime; block 8 against onnxflow's own NCHW Conv)."""

from __future__ import annotations

import numpy as np
import onnx.numpy_helper
import pytest
from onnx import ModelProto, TensorProto, helper
from ort_compare import assert_matches, ms_model

import onnxflow
from onnxflow.ops.conv import conv
from onnxflow.ops.microsoft.nchwc import (
    _layout,
    machine_block_size,
    model_block_size,
    unblock_filter,
)

NCHWC = "com.microsoft.nchwc"
RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


#: (activation, activation_params) as onnxruntime's MLAS takes them
MLAS_ACTIVATIONS = [
    ("Relu", None),
    ("Tanh", None),
    ("Sigmoid", None),
    ("LeakyRelu", [0.2]),
    ("Clip", [-0.5, 0.7]),
    ("HardSigmoid", [0.3, 0.4]),
    ("HardSwish", None),
]


def _activation_attrs(activation: str | None, params: list[float] | None) -> dict:
    attrs = {} if activation is None else {"activation": activation}
    if params is not None:
        attrs["activation_params"] = params
    return attrs


# -- FusedConv ----------------------------------------------------------------------------------
@pytest.mark.parametrize("activation, params", [(None, None), *MLAS_ACTIVATIONS])
@pytest.mark.parametrize("with_sum", [False, True], ids=["no_z", "z_added_before_activation"])
def test_fused_conv_activation_after_bias_and_z(activation, params, with_sum) -> None:
    x, w, b = rand(2, 4, 7, 7), rand(6, 4, 3, 3), rand(6)
    z = rand(2, 6, 7, 7) if with_sum else None
    model, feeds = ms_model(
        "FusedConv", [x, w, b, z], pads=[1, 1, 1, 1], **_activation_attrs(activation, params)
    )
    assert_matches(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "geometry",
    [
        {"strides": [2, 2], "pads": [0, 1, 1, 0]},
        {"dilations": [2, 1], "pads": [2, 1, 0, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"group": 2},
        {"group": 4, "kernel_shape": [3, 3]},
    ],
    ids=["strided_asymmetric_pads", "dilated", "same_upper", "grouped", "depthwise"],
)
def test_fused_conv_geometry_is_convs(geometry) -> None:
    group = geometry.get("group", 1)
    x, w = rand(1, 4, 8, 9), rand(8, 4 // group, 3, 3)
    model, feeds = ms_model("FusedConv", [x, w], activation="Relu", **geometry)
    assert_matches(model, feeds, rtol=1e-4, atol=1e-5)


def test_fused_conv_1d_without_bias() -> None:
    model, feeds = ms_model("FusedConv", [rand(2, 3, 11), rand(5, 3, 3)], activation="Tanh")
    assert_matches(model, feeds, rtol=1e-4, atol=1e-5)


def _typed(model: ModelProto) -> ModelProto:
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", TensorProto.FLOAT, None))
    return model


def test_fused_conv_refuses_an_activation_mlas_does_not_fuse() -> None:
    model, _ = ms_model("FusedConv", [rand(1, 2, 4, 4), rand(2, 2, 1, 1)], activation="Elu")
    model = _typed(model)
    with pytest.raises(onnxflow.OnnxflowError, match="Elu"):
        onnxflow.InferenceSession(model)


def test_fused_conv_missing_activation_params_is_an_error() -> None:
    model, _ = ms_model("FusedConv", [rand(1, 2, 4, 4), rand(2, 2, 1, 1)], activation="Clip")
    model = _typed(model)
    with pytest.raises(onnxflow.OnnxflowError, match="activation_params"):
        onnxflow.InferenceSession(model)


# -- FusedGemm ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "activation, attrs",
    [
        ("Relu", {}),
        ("Tanh", {}),
        ("Sigmoid", {}),
        ("LeakyRelu", {"activation_alpha": 0.3}),
        ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.6}),
        ("Elu", {"activation_alpha": 0.7}),
        ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}),
        ("Softplus", {}),
        ("Softsign", {}),
        ("ThresholdedRelu", {"activation_alpha": 0.4}),
        ("ScaledTanh", {"activation_alpha": 0.5, "activation_beta": 2.0}),
        ("ParametricSoftplus", {"activation_alpha": 0.5, "activation_beta": 2.0}),
        ("Relu", {"activation_alpha": 0.5}),
    ],
)
def test_fused_gemm_activation_takes_its_prefixed_attributes(activation, attrs) -> None:
    a, b, c = rand(5, 6), rand(6, 4), rand(4)
    model, feeds = ms_model("FusedGemm", [a, b, c], activation=activation, **attrs)
    assert_matches(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("with_c", [True, False], ids=["c", "c_omitted"])
def test_fused_gemm_is_gemm_then_activation(trans_a, trans_b, with_c) -> None:
    a = rand(6, 5) if trans_a else rand(5, 6)
    b = rand(4, 6) if trans_b else rand(6, 4)
    c = rand(5, 4) if with_c else None
    model, feeds = ms_model(
        "FusedGemm", [a, b, c], activation="LeakyRelu", activation_alpha=0.1,
        alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b,
    )  # fmt: skip
    assert_matches(model, feeds, rtol=1e-5, atol=1e-6)


# -- FusedMatMul, TransposeMatMul ----------------------------------------------------------------
def _matmul_operand(shape: tuple[int, ...], trans: int, trans_batch: int) -> np.ndarray:
    """An operand that reads as ``shape`` once transposed as the attributes say."""
    stored = list(shape)
    if trans:
        stored[-2], stored[-1] = stored[-1], stored[-2]
    if trans_batch and len(shape) > 2:
        stored = [stored[-2], *stored[:-2], stored[-1]]
    return rand(*stored)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("batch_a, batch_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("alpha", [1.0, 0.125])
def test_fused_matmul_transposes_then_scales(trans_a, trans_b, batch_a, batch_b, alpha) -> None:
    a = _matmul_operand((2, 3, 4, 5), trans_a, batch_a)
    b = _matmul_operand((2, 3, 5, 6), trans_b, batch_b)
    model, feeds = ms_model(
        "FusedMatMul", [a, b], alpha=alpha, transA=trans_a, transB=trans_b,
        transBatchA=batch_a, transBatchB=batch_b,
    )  # fmt: skip
    assert_matches(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((4, 5), (5, 3)), ((3, 4, 5), (5, 2)), ((5,), (2, 5, 3)), ((2, 1, 4, 5), (3, 5, 2))],
    ids=["matrices", "stack_by_matrix", "vector_by_stack", "broadcast_batches"],
)
def test_fused_matmul_broadcasts_like_matmul(a_shape, b_shape) -> None:
    model, feeds = ms_model("FusedMatMul", [rand(*a_shape), rand(*b_shape)], alpha=2.0)
    assert_matches(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_transpose_matmul_is_fused_matmul_without_batch_transposes(trans_a, trans_b) -> None:
    a = _matmul_operand((3, 4, 5), trans_a, 0)
    b = _matmul_operand((3, 5, 2), trans_b, 0)
    model, feeds = ms_model("TransposeMatMul", [a, b], alpha=0.5, transA=trans_a, transB=trans_b)
    assert_matches(model, feeds, rtol=1e-5, atol=1e-6)


# -- NhwcMaxPool --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 2], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
        {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
    ],
    ids=["plain", "strided_padded", "dilated_ceil", "same_upper"],
)
def test_nhwc_max_pool_is_max_pool_channels_last(dtype, attrs) -> None:
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (2, 7, 8, 5), endpoint=True).astype(dtype)
    model, feeds = ms_model("NhwcMaxPool", [x], **attrs)
    assert_matches(model, feeds)


# -- NCHWc: layout and pools --------------------------------------------------------------------
def nchwc_chain(
    op_nodes: list,
    x: np.ndarray,
    channels: int,
    *,
    last_in: int = 0,
    last_out: int = 0,
    reorder: bool = True,
    **extra,
) -> tuple[ModelProto, dict]:
    """x -> ReorderInput (unless not ``reorder``) -> ``op_nodes`` (reading "blocked",
    writing "result") -> ReorderOutput; ``extra`` are more graph inputs and their values."""
    reorders = [helper.make_node("ReorderInput", ["x"], ["blocked"], domain=NCHWC,
                                 channels_last=last_in)]  # fmt: skip
    nodes = [
        *(reorders if reorder else []),
        *op_nodes,
        helper.make_node(
            "ReorderOutput", ["result"], ["y"], domain=NCHWC, channels=channels,
            channels_last=last_out,
        ),
    ]  # fmt: skip
    feeds = {"x": x, **extra}
    graph = helper.make_graph(
        nodes,
        "nchwc",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(NCHWC, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8), feeds


@pytest.mark.parametrize("channels", [16, 20, 4])
@pytest.mark.parametrize("last_in, last_out", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_reorder_round_trip_keeps_the_tensor(channels, last_in, last_out) -> None:
    x = rand(2, 5, 6, channels) if last_in else rand(2, channels, 5, 6)
    identity = helper.make_node("Identity", ["blocked"], ["result"])
    model, feeds = nchwc_chain([identity], x, channels, last_in=last_in, last_out=last_out)
    (y,) = assert_matches(model, feeds)
    nchw = np.moveaxis(x, -1, 1) if last_in else x
    np.testing.assert_array_equal(y, np.moveaxis(nchw, 1, -1) if last_out else nchw)


POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 1], "auto_pad": "SAME_UPPER"}),
    ("GlobalMaxPool", {}),
    ("GlobalAveragePool", {}),
    ("Upsample", {"scales": [1, 1, 2, 3], "mode": "nearest"}),
    ("Upsample", {"scales": [1, 1, 2, 2], "mode": "linear"}),
    ("Upsample", {"scales": [1, 1, 3, 2], "mode": "linear",
                  "coordinate_transformation_mode": "align_corners"}),
    ("Upsample", {"scales": [1, 1, 2, 2], "mode": "linear",
                  "coordinate_transformation_mode": "half_pixel"}),
]  # fmt: skip


@pytest.mark.parametrize("op, attrs", POOLS, ids=[f"{op}{i}" for i, (op, _) in enumerate(POOLS)])
@pytest.mark.parametrize("channels", [16, 20])
def test_nchwc_pool_between_reorders_matches(op, attrs, channels) -> None:
    pool = helper.make_node(op, ["blocked"], ["result"], domain=NCHWC, **attrs)
    model, feeds = nchwc_chain([pool], rand(2, channels, 7, 6), channels)
    assert_matches(model, feeds, rtol=1e-5, atol=1e-6)


# -- NCHWc: Conv --------------------------------------------------------------------------------
def block_filter(w: np.ndarray, block: int, blocked_input: bool) -> np.ndarray:
    """OIHW weights as the NCHWc transformer saves them, element by element: channels padded
    to the block, laid out (O/b, I/b, kernel, b_in, b_out) for a blocked input, else
    (O/b, I, kernel, b_out); shaped (O padded, I (padded), kernel)."""
    c_out, c_in, *kernel = w.shape
    o_pad = -(-c_out // block) * block
    i_pad = -(-c_in // block) * block if blocked_input else c_in
    full = np.zeros((o_pad, i_pad, *kernel), np.float32)
    full[:c_out, :c_in] = w
    taps = int(np.prod(kernel))
    flat = np.zeros(full.size, np.float32)
    for o in range(o_pad):
        for i in range(i_pad):
            for t in range(taps):
                if blocked_input:
                    at = (((o // block) * (i_pad // block) + i // block) * taps + t) * block
                    at = (at + i % block) * block + o % block
                else:
                    at = (((o // block) * i_pad + i) * taps + t) * block + o % block
                flat[at] = full[o, i].reshape(-1)[t]
    return flat.reshape(full.shape)


def nchwc_conv_model(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, block: int, *, with_sum: bool = False,
    **attrs,
) -> tuple[ModelProto, dict]:  # fmt: skip
    """ReorderInput -> nchwc Conv (weights blocked by ``block``) -> ReorderOutput, Sum (when
    asked) a second blocked input."""
    group = attrs.get("group", 1)
    depthwise = group > 1
    blocked_input = not depthwise and x.shape[1] >= block
    weights = block_filter(w, block, blocked_input)
    if depthwise:  # one filter per channel: blocked over the output channels only
        weights = block_filter(w, block, False)
    extra = {"w": weights}
    inputs = ["blocked", "w"]
    if b is not None:
        extra["b"] = np.pad(b, (0, weights.shape[0] - b.shape[0]))
        inputs.append("b")
    nodes = []
    if with_sum:
        geometry = {k: v for k, v in attrs.items() if not k.startswith("activation")}
        extra["s"] = rand(*conv(x, w, **geometry).shape)
        nodes.append(helper.make_node("ReorderInput", ["s"], ["s_blocked"], domain=NCHWC))
        inputs += [""] * (3 - len(inputs)) + ["s_blocked"]
    nodes.append(helper.make_node("Conv", inputs, ["result"], domain=NCHWC, **attrs))
    if not blocked_input and not depthwise:  # onnxruntime feeds such a Conv NCHW directly
        nodes[-1].input[0] = "x"
    return nchwc_chain(nodes, x, w.shape[0], reorder=blocked_input or depthwise, **extra)


CONVS = {
    "blocked_input": ((2, 32, 7, 7), (16, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    "padded_channels": ((1, 20, 6, 6), (20, 20, 3, 3), {"strides": [2, 2]}),
    "nchw_input": ((2, 3, 9, 9), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "depthwise": ((1, 32, 8, 8), (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}),
    "pointwise_dilated": ((1, 16, 9, 9), (32, 16, 3, 3), {"dilations": [2, 2]}),
}


@pytest.mark.skipif(machine_block_size() != 16, reason="onnxruntime here blocks by 8, not 16")
@pytest.mark.parametrize("case", CONVS)
@pytest.mark.parametrize("activation, params", [(None, None), *MLAS_ACTIVATIONS[:6]])
def test_nchwc_conv_block_16_matches_onnxruntime(case, activation, params) -> None:
    x_shape, w_shape, attrs = CONVS[case]
    attrs = {**attrs, **_activation_attrs(activation, params)}
    model, feeds = nchwc_conv_model(rand(*x_shape), rand(*w_shape), rand(w_shape[0]), 16, **attrs)
    assert_matches(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(machine_block_size() != 16, reason="onnxruntime here blocks by 8, not 16")
@pytest.mark.parametrize("activation", ["Relu", None])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "bias_omitted"])
def test_nchwc_conv_sum_is_added_before_the_activation(activation, with_bias) -> None:
    x, w, b = rand(2, 16, 6, 6), rand(16, 16, 3, 3), rand(16) if with_bias else None
    attrs = _activation_attrs(activation, None)
    model, feeds = nchwc_conv_model(x, w, b, 16, with_sum=True, pads=[1] * 4, **attrs)
    assert_matches(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((2, 24, 6, 6), (24, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((1, 3, 7, 7), (24, 3, 3, 3), {"strides": [2, 2]}),
        ((1, 24, 5, 5), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1]}),
        ((1, 12, 5, 5), (40, 12, 1, 1), {}),
    ],
    ids=["blocked_input", "nchw_input", "depthwise", "padded_input_channels"],
)
def test_nchwc_conv_block_8_is_conv_of_the_unblocked_filter(x_shape, w_shape, attrs) -> None:
    """24 and 40 output channels: only block 8 divides them, whatever the machine."""
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    model, feeds = nchwc_conv_model(x, w, b, 8, with_sum=True, activation="Sigmoid", **attrs)
    (ours,) = onnxflow.InferenceSession(model).run(None, feeds)
    reference, ref_feeds = ms_model("FusedConv", [x, w, b, feeds["s"]], activation="Sigmoid",
                                    **attrs)  # fmt: skip
    (expected,) = onnxflow.InferenceSession(_typed(reference)).run(None, ref_feeds)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("blocked_input", [True, False])
def test_unblock_filter_inverts_the_saved_layout(block, blocked_input) -> None:
    w = rand(32, 16 if blocked_input else 5, 3, 2)
    np.testing.assert_array_equal(unblock_filter(block_filter(w, block, blocked_input), block,
                                                 blocked_input), w)  # fmt: skip


@pytest.mark.parametrize(
    "w_shape, group, block, expected",
    [
        ((24, 24, 3, 3), 1, 8, True),
        ((24, 24, 3, 3), 1, 16, None),
        ((32, 8, 1, 1), 1, 8, True),
        ((32, 8, 1, 1), 1, 16, False),
        ((32, 12, 1, 1), 1, 8, None),
        ((32, 12, 1, 1), 1, 16, False),
        ((24, 3, 3, 3), 1, 8, False),
        ((24, 1, 3, 3), 24, 8, False),
        ((32, 16, 3, 3), 2, 16, True),
        ((12, 12, 3, 3), 1, 8, None),
    ],
    ids=["blocked_by_8", "24_not_by_16", "8_inputs_blocked_by_8", "8_inputs_nchw_by_16",
         "12_inputs_not_by_8", "12_inputs_nchw_by_16", "nchw_3_inputs", "depthwise",
         "grouped_blocked", "12_outputs_by_neither"],
)  # fmt: skip
def test_weight_shapes_tell_what_a_block_size_made(w_shape, group, block, expected) -> None:
    assert _layout(w_shape, group, block) is expected


def _conv_graph(*weights: tuple[tuple[int, ...], int]) -> onnx.GraphProto:
    """A graph of NCHWc Convs with weights of the given (shape, group)s."""
    nodes, inits = [], []
    for i, (shape, group) in enumerate(weights):
        inits.append(onnx.numpy_helper.from_array(np.zeros(shape, np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", ["x", f"w{i}"], [f"y{i}"], domain=NCHWC,
                                      group=group))  # fmt: skip
    return helper.make_graph(nodes, "g", [], [], inits)


@pytest.mark.parametrize(
    "weights, expected",
    [
        ([((32, 32, 3, 3), 1), ((24, 32, 1, 1), 1)], 8),
        ([((16, 3, 3, 3), 1), ((32, 12, 1, 1), 1)], 16),
        ([((32, 32, 3, 3), 1), ((32, 1, 3, 3), 32)], "machine"),
        ([((12, 12, 3, 3), 1)], "machine"),
    ],
    ids=["one_24_tells_8", "12_nchw_inputs_tell_16", "ambiguous", "none_fits"],
)
def test_model_block_size_is_the_one_all_weights_allow(weights, expected) -> None:
    machine = machine_block_size()
    expected = machine if expected == "machine" else expected
    assert model_block_size(_conv_graph(*weights), machine) == expected


def test_an_ambiguous_conv_takes_the_block_size_another_conv_tells() -> None:
    """32 channels fit both block sizes; the second Conv's 24 outputs tell 8 for both."""
    x, w1, w2 = rand(1, 32, 6, 6), rand(32, 32, 3, 3), rand(24, 32, 1, 1)
    nodes = [
        helper.make_node("Conv", ["blocked", "w1"], ["mid"], domain=NCHWC, pads=[1] * 4,
                         activation="Relu"),
        helper.make_node("Conv", ["mid", "w2"], ["result"], domain=NCHWC),
    ]  # fmt: skip
    weights = {"w1": block_filter(w1, 8, True), "w2": block_filter(w2, 8, True)}
    model, feeds = nchwc_chain(nodes, x, 24)
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in weights.items())
    (ours,) = onnxflow.InferenceSession(model).run(None, feeds)
    mid = np.maximum(conv(x, w1, pads=[1] * 4), 0)
    np.testing.assert_allclose(ours, conv(mid, w2), rtol=1e-5, atol=1e-5)


def test_weights_no_block_size_fits_are_refused() -> None:
    x, w = rand(1, 12, 4, 4), rand(12, 12, 3, 3)
    conv_node = helper.make_node("Conv", ["blocked", "w"], ["result"], domain=NCHWC)
    model, feeds = nchwc_chain([conv_node], x, 12, w=w)
    with pytest.raises(onnxflow.OnnxflowError, match="was not blocked by"):
        onnxflow.InferenceSession(model).run(None, feeds)


def test_nchwc_conv_unblocks_constant_weights_once(monkeypatch) -> None:
    from onnxflow.ops.microsoft import nchwc

    calls = []
    monkeypatch.setattr(nchwc, "unblock_filter", lambda *a: calls.append(1) or unblock_filter(*a))
    x, w = rand(1, 16, 5, 5), rand(16, 16, 3, 3)
    model, feeds = nchwc_conv_model(x, w, None, machine_block_size(), pads=[1] * 4)
    weights = feeds.pop("w")
    model.graph.input.pop()  # W becomes a constant of the model
    model.graph.initializer.append(onnx.numpy_helper.from_array(weights, "w"))
    session = onnxflow.InferenceSession(model)
    first = session.run(None, feeds)[0]
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, feeds)[0], first)
    assert len(calls) == 1
