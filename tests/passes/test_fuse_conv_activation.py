"""Conv -> [bias Add] -> [Relu | HardSigmoid] as one ConvActivation node
(compile/passes/fuse_conv_activation.py): bit for bit the nodes as written, in both kernel
forms; chains that must not fuse are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

C, M = 4, 6


def _model(
    tail: list[str],
    *,
    dtype: type = np.float32,
    kernel: int = 3,
    conv_bias: bool = False,
    bias_shape: tuple[int, ...] = (1, M, 1, 1),
    reshaped_bias: bool = False,
    extra_output: str | None = None,
    hard_sigmoid: dict | None = None,
):
    """x -> Conv -> the ``tail`` ops ("Add": a constant bias Add, "Relu", "HardSigmoid") -> y."""
    rng = np.random.default_rng(len(tail) + kernel)
    w = rng.standard_normal((M, C, kernel, kernel)).astype(dtype)
    w[0] = 0  # a filter of zeros: -0.0 sums over negative inputs
    inits = [numpy_helper.from_array(w, "W")]
    conv_in = ["x", "W"]
    if conv_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(M).astype(dtype), "cb"))
        conv_in.append("cb")
    pad = kernel // 2
    nodes = [helper.make_node("Conv", conv_in, ["v0"], pads=[pad] * 4)]
    for k, op in enumerate(tail):
        src, dst = f"v{k}", f"v{k + 1}" if k + 1 < len(tail) else "y"
        if op == "Add":
            b = rng.standard_normal(bias_shape).astype(dtype)
            if reshaped_bias:
                inits.append(numpy_helper.from_array(b.reshape(-1), "b_flat"))
                inits.append(numpy_helper.from_array(np.array(bias_shape, np.int64), "b_shape"))
                nodes.append(helper.make_node("Reshape", ["b_flat", "b_shape"], ["b"]))
            else:
                inits.append(numpy_helper.from_array(b, "b"))
            nodes.append(helper.make_node("Add", [src, "b"], [dst]))
        else:
            nodes.append(helper.make_node(op, [src], [dst], **(hard_sigmoid or {})))
    if not tail:
        nodes[0].output[0] = "y"
    t = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}[dtype]
    outputs = [helper.make_tensor_value_info("y", t, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, t, None))
    graph = helper.make_graph(
        nodes, "conv_act", [helper.make_tensor_value_info("x", t, [1, C, 7, 9])], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, dtype


def _ops(sess: onnxflow.InferenceSession) -> list[str]:
    return [info.op_type for info in sess.plan.infos]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _check(built, fused: bool) -> None:
    model, dtype = built
    x = -np.abs(np.random.default_rng(1).standard_normal((1, C, 7, 9))).astype(dtype)
    x[0, 0, 3] = np.random.default_rng(2).standard_normal(9)  # some positive values too
    for kernels in ("native", "numpy"):
        opts = onnxflow.SessionOptions(kernels=kernels)
        sess = onnxflow.InferenceSession(model, opts)
        plain = onnxflow.InferenceSession(
            model, onnxflow.SessionOptions(kernels=kernels, optimize=False)
        )
        assert ("ConvActivation" in _ops(sess)) == fused
        if fused:
            assert _ops(sess) == ["ConvActivation"]
        got, want = sess.run(None, {"x": x}), plain.run(None, {"x": x})
        assert all(_same_bits(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize(
    "tail",
    [["Relu"], ["HardSigmoid"], ["Add"], ["Add", "Relu"], ["Add", "HardSigmoid"]],
    ids="-".join,
)
@pytest.mark.parametrize("kernel", [1, 3])
def test_a_conv_and_what_follows_it_run_as_one_node(tail: list[str], kernel: int) -> None:
    """1x1 (BLAS, then the bias pass) and 3x3 (the loop): the values of the nodes as written,
    zeros' signs included (a Relu of -0.0 is +0.0)."""
    _check(_model(tail, kernel=kernel), fused=True)


def test_a_bias_reshaped_from_a_constant_and_a_conv_with_bias() -> None:
    _check(_model(["Add", "Relu"], reshaped_bias=True), fused=True)
    _check(_model(["Relu"], conv_bias=True), fused=True)
    _check(_model(["HardSigmoid"], hard_sigmoid={"alpha": 0.3, "beta": 0.25}), fused=True)


@pytest.mark.parametrize(
    "change",
    [
        {"tail": ["Relu"], "extra_output": "v0"},  # the Conv's output is also a graph output
        {"tail": ["Add"], "conv_bias": True},  # a Conv with a bias of its own
        {"tail": ["Add"], "bias_shape": (1, M, 7, 9)},  # not one value per channel
        {"tail": ["Add"], "bias_shape": (9,)},  # broadcast along the last axis
        {"tail": ["Add"], "dtype": np.float16},  # float16 rounds once after the Conv's bias
        {"tail": ["HardSigmoid"], "hard_sigmoid": {"beta": -0.0}},
    ],
    ids=["read-twice", "own-bias", "full-addend", "last-axis", "float16", "beta-minus-zero"],
)
def test_chains_that_must_not_fuse_are_left_alone(change: dict) -> None:
    tail = change.pop("tail")
    _check(_model(tail, **change), fused=False)
