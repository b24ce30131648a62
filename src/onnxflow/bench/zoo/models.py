"""Zoo models built in code: small stand-ins of the real models' shapes that need no network,
for the tests (and a first row of the tier on a machine with nothing else)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
HIDDEN, TAPS, CHANNELS, STRIDE = 32, 64, 16, 8


def streaming_standin() -> onnx.ModelProto:
    """A voice-activity-detector-like model: an If on the sample rate, a strided Conv1d with a
    long kernel, an LSTM over its frames, and the LSTM state carried in and out."""
    graph = helper.make_graph(
        _nodes(),
        "streaming_standin",
        [
            helper.make_tensor_value_info("input", F, [1, "samples"]),
            helper.make_tensor_value_info("state", F, [2, 1, HIDDEN]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("output", F, [1, 1]),
            helper.make_tensor_value_info("stateN", F, [2, 1, HIDDEN]),
        ],
        _initializers(),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _nodes() -> list[onnx.NodeProto]:
    """The stand-in's nodes: If on the rate, Conv1d, LSTM, the state out, a sigmoid score."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["input"], ["t_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", F, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Mul", ["input", "half"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", F, None)],
    )
    nodes = [
        helper.make_node(
            "Constant", [], ["rate"], value=numpy_helper.from_array(np.array(16000, np.int64))
        ),
        helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["x"], then_branch=then, else_branch=other),
        helper.make_node("Unsqueeze", ["x", "one"], ["x3"]),
        helper.make_node("Conv", ["x3", "conv_w", "conv_b"], ["frames"], strides=[STRIDE]),
        helper.make_node("Relu", ["frames"], ["act"]),
        helper.make_node("Transpose", ["act"], ["seq"], perm=[2, 0, 1]),
        helper.make_node("Split", ["state"], ["h0", "c0"], axis=0, num_outputs=2),
        helper.make_node(
            "LSTM",
            ["seq", "lstm_w", "lstm_r", "lstm_b", "", "h0", "c0"],
            ["", "h", "c"],
            hidden_size=HIDDEN,
        ),
        helper.make_node("Concat", ["h", "c"], ["stateN"], axis=0),
        helper.make_node("Squeeze", ["h", "zero"], ["h2"]),
        helper.make_node("MatMul", ["h2", "out_w"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
    ]
    return nodes


def _initializers() -> list[TensorProto]:
    """The stand-in's weights, random but fixed."""
    rng = np.random.default_rng(1)

    def init(name: str, shape: tuple[int, ...], scale: float = 0.1) -> TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    return [
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        init("conv_w", (CHANNELS, 1, TAPS)),
        init("conv_b", (CHANNELS,)),
        init("lstm_w", (1, 4 * HIDDEN, CHANNELS)),
        init("lstm_r", (1, 4 * HIDDEN, HIDDEN)),
        init("lstm_b", (1, 8 * HIDDEN)),
        init("out_w", (HIDDEN, 1)),
    ]


def streaming_standin_feeds() -> dict[str, np.ndarray]:
    """512 samples at 16 kHz and a zero state."""
    rng = np.random.default_rng(0)
    return {
        "input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
        "state": np.zeros((2, 1, HIDDEN), np.float32),
        "sr": np.array(16000, np.int64),
    }
