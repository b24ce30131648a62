"""Conv + BatchNormalization folding (compile/passes/fold_batch_norm.py): an inference
BatchNormalization after a Conv with constant weights runs as one Conv whose weight and bias
were folded when the session was created; the result agrees with the two nodes as written up to
rounding. Pairs that must not fold are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(
    *,
    dtype: type = np.float32,
    spatial: int = 2,
    group: int = 1,
    conv_bias: bool = True,
    as_constants: bool = False,
    overridable: bool = False,
    opset: int = 15,
    bn_attrs: dict | None = None,
    extra_output: str | None = None,
    param_channels: int | None = None,
    act: str = "Relu",
):
    rng = np.random.default_rng(spatial * 10 + group)
    c, m = 4, 4 if group > 1 else 6
    w = rng.standard_normal((m, c // group, *[3] * spatial)).astype(dtype)
    k = param_channels or m
    params = {
        "W": w,
        "scale": (rng.random(k) + 0.5).astype(dtype),
        "offset": rng.standard_normal(k).astype(dtype),
        "mean": rng.standard_normal(k).astype(dtype),
        "var": (rng.random(k) + 0.1).astype(dtype),
    }
    if conv_bias:
        params["cb"] = rng.standard_normal(m).astype(dtype)
    conv_in = ["x", "W", "cb"] if conv_bias else ["x", "W"]
    nodes = []
    inits = []
    for name, value in params.items():
        if as_constants:
            nodes.append(
                helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))
            )
        else:
            inits.append(numpy_helper.from_array(value, name))
    nodes += [
        helper.make_node("Conv", conv_in, ["c"], pads=[1] * (2 * spatial), group=group),
        helper.make_node(
            "BatchNormalization",
            ["c", "scale", "offset", "mean", "var"],
            ["bn"],
            **(bn_attrs if bn_attrs is not None else {"epsilon": 1e-3}),
        ),
        helper.make_node(act, ["bn"], ["y"]),
    ]
    t = NP_TO_ONNX[dtype]
    inputs = [helper.make_tensor_value_info("x", t, [2, c, *[5] * spatial])]
    if overridable:
        inputs.append(helper.make_tensor_value_info("W", t, list(w.shape)))
    outputs = [helper.make_tensor_value_info("y", t, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, t, None))
    graph = helper.make_graph(nodes, "conv_bn", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, c, spatial, dtype


def _ops(sess: onnxflow.InferenceSession) -> list[str]:
    return [info.op_type for info in sess.plan.infos]


def _both(built):
    model, c, spatial, dtype = built
    folded = onnxflow.InferenceSession(model)
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    x = np.random.default_rng(7).standard_normal((2, c, *[5] * spatial)).astype(dtype)
    return folded, plain, x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spatial", [1, 2])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("conv_bias", [True, False])
@pytest.mark.parametrize("as_constants", [False, True])
def test_a_conv_and_its_batch_norm_run_as_one_conv(
    dtype: type, spatial: int, group: int, conv_bias: bool, as_constants: bool
) -> None:
    folded, plain, x = _both(
        _model(
            dtype=dtype,
            spatial=spatial,
            group=group,
            conv_bias=conv_bias,
            as_constants=as_constants,
            act="Sigmoid",  # a Relu would join the Conv (fuse_conv_activation), hiding "bn"
        )
    )
    assert _ops(folded) == ["Conv", "Sigmoid"]  # the fold itself ran when the session was made
    assert "BatchNormalization" in _ops(plain)
    got, want = folded.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
    assert got.dtype == want.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    # the BatchNormalization's output keeps its name for a run that asks for every value
    seen = folded.run(None, {"x": x}, intermediate=True)
    assert "bn" in seen and "c" not in seen
    want_bn = plain.run(None, {"x": x}, intermediate=True)["bn"]
    np.testing.assert_allclose(seen["bn"], want_bn, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "change",
    [
        {"extra_output": "c"},  # the Conv's output is also a graph output
        {"bn_attrs": {"training_mode": 1}},  # batch statistics
        {"opset": 6, "bn_attrs": {"is_test": 1}},  # the old form
        {"opset": 7, "bn_attrs": {"spatial": 0}},  # per-element statistics
        {"param_channels": 1},  # parameters that do not match the channels
    ],
    ids=["read-twice", "training", "opset6", "spatial0", "shape-mismatch"],
)
def test_pairs_that_must_not_fold_are_left_alone(change: dict) -> None:
    model = _model(**change)[0]
    assert "BatchNormalization" in _ops(onnxflow.InferenceSession(model))


def test_a_weight_the_caller_may_override_is_not_folded() -> None:
    """An overridable weight is no constant: the pair runs as written, with the fed weight."""
    folded, plain, x = _both(_model(overridable=True))
    assert _ops(folded) == ["Conv", "BatchNormalization", "Relu"]
    w = np.random.default_rng(3).standard_normal((6, 4, 3, 3)).astype(np.float32)
    for feeds in ({"x": x}, {"x": x, "W": w}):
        np.testing.assert_allclose(
            folded.run(None, feeds)[0], plain.run(None, feeds)[0], rtol=1e-5, atol=1e-5
        )
