"""The transformer optimizer's layer normalizations against onnxruntime
(ops/microsoft/normalization.py): SkipLayerNormalization, SkipSimplifiedLayerNormalization,
EmbedLayerNormalization, QEmbedLayerNormalization, and the default-domain LayerNormalization and
SimplifiedLayerNormalization that onnxruntime registers at since-version 1."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from ort_compare import assert_matches, ms_model, run_both

import onnxflow
from onnxflow.ops.registry import REGISTRY

RNG = np.random.default_rng(1818)
B, S, H = 2, 3, 16

#: float16 results: onnxruntime rounds once, LayerNormalization-17's kernel twice (1 ulp).
TOLERANCE = {np.float32: (1e-5, 1e-5), np.float16: (2e-3, 4e-3), np.float64: (1e-5, 1e-5)}


def _normal(*shape: int, dtype: type = np.float32, mean: float = 0.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * 2 + mean).astype(dtype)


def _matches(model: Any, feeds: dict[str, Any], dtype: type) -> list[Any]:
    rtol, atol = TOLERANCE[dtype]
    return assert_matches(model, feeds, rtol=rtol, atol=atol)


# -- SkipLayerNormalization, SkipSimplifiedLayerNormalization ----------------------------------

SKIP_SHAPES = {
    "same": (B, S, H),
    "batch_broadcast": (1, S, H),
    "two_d": (S, H),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("skip", SKIP_SHAPES, ids=list(SKIP_SHAPES))
@pytest.mark.parametrize("beta, bias", [(0, 0), (1, 0), (0, 1), (1, 1)], ids=str)
def test_skip_layer_norm_all_outputs(skip: str, beta: int, bias: int, dtype: type) -> None:
    x = _normal(B, S, H, dtype=dtype, mean=3)
    params = [_normal(H, dtype=dtype) if given else None for given in (1, beta, bias)]
    inputs = [x, _normal(*SKIP_SHAPES[skip], dtype=dtype), *params]
    y, mean, inv_std, total = _matches(
        *ms_model("SkipLayerNormalization", inputs, n_out=4, epsilon=1e-5), dtype
    )
    assert y.dtype == total.dtype == dtype and mean.dtype == inv_std.dtype == np.float32
    assert mean.shape == inv_std.shape == (B, S, 1)


@pytest.mark.parametrize("n_out", [1, 2, 3])
def test_skip_layer_norm_fewer_outputs(n_out: int) -> None:
    inputs = [_normal(B, S, H), _normal(B, S, H), _normal(H), _normal(H)]
    outs = assert_matches(*ms_model("SkipLayerNormalization", inputs, n_out=n_out))
    assert len(outs) == n_out


def test_skip_layer_norm_default_epsilon_on_2d_input() -> None:
    assert_matches(*ms_model("SkipLayerNormalization", [_normal(S, H), _normal(S, H), _normal(H)]))


def test_skip_layer_norm_only_the_sum_output() -> None:
    model, feeds = ms_model(
        "SkipLayerNormalization", [_normal(B, S, H), _normal(S, H), _normal(H)], n_out=4
    )
    del model.graph.output[1:3]
    model.graph.node[0].output[1] = model.graph.node[0].output[2] = ""
    _, total = assert_matches(model, feeds)
    np.testing.assert_array_equal(total, feeds["in0"] + feeds["in1"])


@pytest.mark.parametrize("skip_shape", [(B, 1, H), (H,), (3, S, H)])
def test_skip_layer_norm_rejects_a_skip_that_does_not_fit(skip_shape: tuple[int, ...]) -> None:
    model, feeds = ms_model(
        "SkipLayerNormalization", [_normal(B, S, H), _normal(*skip_shape), _normal(H)]
    )
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(onnxflow.OnnxflowError, match="skip must have shape"):
        onnxflow.InferenceSession(model).run(None, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("skip", SKIP_SHAPES, ids=list(SKIP_SHAPES))
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_skip_simplified_layer_norm_all_outputs(skip: str, bias: bool, dtype: type) -> None:
    inputs = [
        _normal(B, S, H, dtype=dtype, mean=1),
        _normal(*SKIP_SHAPES[skip], dtype=dtype),
        _normal(H, dtype=dtype),
        _normal(H, dtype=dtype) if bias else None,
    ]
    y, mean, inv_rms, total = _matches(
        *ms_model("SkipSimplifiedLayerNormalization", inputs, n_out=4, epsilon=1e-6), dtype
    )
    assert y.dtype == total.dtype == dtype and inv_rms.shape == (B, S, 1)
    assert not mean.any()  # root mean square normalization has no mean: zeros, as onnxruntime


def test_skip_simplified_layer_norm_one_output_2d() -> None:
    inputs = [_normal(S, H), _normal(S, H), _normal(H)]
    assert_matches(*ms_model("SkipSimplifiedLayerNormalization", inputs))


# -- LayerNormalization and SimplifiedLayerNormalization in the default domain ----------------


def test_layer_norm_resolves_to_onnxruntime_since_1_below_17() -> None:
    for opset, since in [(14, 1), (16, 1), (17, 17), (21, 17)]:
        assert REGISTRY.lookup("", "LayerNormalization", opset).since == since
    for opset in (14, 17, 21):
        assert REGISTRY.lookup("", "SimplifiedLayerNormalization", opset).since == 1


@pytest.mark.parametrize("opset", [14, 16, 17])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_layer_norm(opset: int, dtype: type, axis: int, with_bias: bool) -> None:
    x = _normal(B, S, H, dtype=dtype, mean=2)
    scale_shape = (S, H) if axis == 1 else (H,)
    bias = _normal(*scale_shape, dtype=dtype) if with_bias else None
    inputs = [x, _normal(*scale_shape, dtype=dtype), bias]
    model = ms_model("LayerNormalization", inputs, 3, "", opset, axis=axis, epsilon=1e-5)
    _, mean, inv_std = _matches(*model, dtype)
    assert mean.shape == inv_std.shape == ((B, 1, 1) if axis == 1 else (B, S, 1))


def test_layer_norm_2d_one_output_default_epsilon() -> None:
    assert_matches(*ms_model("LayerNormalization", [_normal(S, H), _normal(H)], 1, "", 14))


@pytest.mark.parametrize("opset", [14, 17, 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm(opset: int, dtype: type, axis: int) -> None:
    scale_shape = (S, H) if axis == 1 else (H,)
    inputs = [_normal(B, S, H, dtype=dtype, mean=1), _normal(*scale_shape, dtype=dtype)]
    model = ms_model("SimplifiedLayerNormalization", inputs, 2, "", opset, axis=axis)
    y, inv_rms = _matches(*model, dtype)
    assert y.dtype == dtype and inv_rms.dtype == np.float32


def test_simplified_layer_norm_2d_one_output() -> None:
    inputs = [_normal(S, H), _normal(H)]
    assert_matches(*ms_model("SimplifiedLayerNormalization", inputs, 1, "", 15, epsilon=1e-6))


def _typed_ln_model(opset: int) -> onnx.ModelProto:
    """LayerNormalization -> SimplifiedLayerNormalization -> Add under ``opset``, every value
    typed and shaped, as onnxruntime's tools save them."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], epsilon=1e-5),
        helper.make_node("SimplifiedLayerNormalization", ["ln", "g"], ["rms"]),
        helper.make_node("Add", ["rms", "x"], ["y"]),
    ]
    params = [helper.make_tensor(n, f, [H], _normal(H).tolist()) for n in ("g", "b")]
    graph = helper.make_graph(
        nodes,
        "ln",
        [helper.make_tensor_value_info("x", f, [B, S, H])],
        [helper.make_tensor_value_info("y", f, [B, S, H])],
        params,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("opset", [14, 15, 16])
def test_a_checked_model_with_layer_norm_below_opset_17_loads(opset: int) -> None:
    model = _typed_ln_model(opset)
    with pytest.raises(onnx.checker.ValidationError, match="No Op registered"):
        onnx.checker.check_model(model)  # the complaint the validator takes as benign
    ours, theirs = run_both(model, {"x": _normal(B, S, H)})
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


def _bfloat16_model(
    op: str, inputs: list[Any], n_out: int, domain: str, rounded: set[int]
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A model feeding ``op`` the float32 ``inputs`` cast to bfloat16 (onnxruntime takes no
    bfloat16 arrays) and casting its outputs listed in ``rounded`` back to float32."""
    names = ["" if v is None else f"in{i}" for i, v in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_out)]
    bf = TensorProto.BFLOAT16
    nodes = [helper.make_node("Cast", [n], [f"{n}_bf"], to=bf) for n in names if n]
    inner = [f"{o}_bf" if i in rounded else o for i, o in enumerate(outs)]
    nodes.append(helper.make_node(op, [n and f"{n}_bf" for n in names], inner, domain=domain))
    back = [(o, w) for o, w in zip(outs, inner, strict=True) if o != w]
    nodes += [helper.make_node("Cast", [w], [o], to=TensorProto.FLOAT) for o, w in back]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "bf16",
        [helper.make_tensor_value_info(n, f, v.shape) for n, v in zip(names, inputs) if n],
        [helper.make_tensor_value_info(o, f, None) for o in outs],
    )
    opsets = [helper.make_opsetid("", 14)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    return model, {n: v for n, v in zip(names, inputs) if n}


BFLOAT16_CASES = {
    "SkipLayerNormalization": ("com.microsoft", 5, 4, {0, 3}),
    "SkipSimplifiedLayerNormalization": ("com.microsoft", 4, 4, {0, 3}),
    "LayerNormalization": ("", 3, 3, {0}),
    "SimplifiedLayerNormalization": ("", 2, 2, {0}),
}


@pytest.mark.parametrize("op", BFLOAT16_CASES)
def test_bfloat16_in_float32_rounded_once(op: str) -> None:
    domain, n_in, n_out, rounded = BFLOAT16_CASES[op]
    inputs = [_normal(B, S, H, mean=2), _normal(B, S, H), _normal(H), _normal(H), _normal(H)]
    if domain == "":
        inputs = [inputs[0], *inputs[2:]]
    model, feeds = _bfloat16_model(op, inputs[:n_in], n_out, domain, rounded)
    assert_matches(model, feeds, rtol=1e-2, atol=2e-2)  # LayerNormalization-17 rounds twice


# -- EmbedLayerNormalization ------------------------------------------------------------------

VOCAB, MAX_POS, SEGMENTS = 20, 8, 2


def _ids(high: int, shape: tuple[int, ...] = (B, S)) -> np.ndarray:
    return RNG.integers(0, high, shape).astype(np.int32)


MASKS = {
    "none": None,
    "padded": np.array([[1, 1, 0], [1, 1, 1]], np.int32),
    "holes_and_other_values": np.array([[0, 1, 1], [1, 2, 1]], np.int32),
}


def _embed_inputs(segment: bool, mask: np.ndarray | None, position_ids: Any = None) -> list:
    return [
        _ids(VOCAB),
        _ids(SEGMENTS) if segment else None,
        _normal(VOCAB, H),
        _normal(MAX_POS, H),
        _normal(SEGMENTS, H) if segment else None,
        _normal(H),
        _normal(H),
        mask,
        position_ids,
    ]


@pytest.mark.parametrize("mask", MASKS, ids=list(MASKS))
@pytest.mark.parametrize("segment", [True, False], ids=["segment", "no_segment"])
def test_embed_layer_norm_all_outputs(segment: bool, mask: str) -> None:
    inputs = _embed_inputs(segment, MASKS[mask])
    y, mask_index, total = assert_matches(*ms_model("EmbedLayerNormalization", inputs, n_out=3))
    assert y.shape == total.shape == (B, S, H) and mask_index.dtype == np.int32


@pytest.mark.parametrize("shape", [(B, S), (1, S)], ids=["per_batch", "shared"])
def test_embed_layer_norm_position_ids(shape: tuple[int, ...]) -> None:
    inputs = _embed_inputs(True, MASKS["padded"], _ids(MAX_POS, shape))
    assert_matches(*ms_model("EmbedLayerNormalization", inputs, n_out=3, epsilon=1e-5))


@pytest.mark.parametrize("n_out, mask_index_type", [(1, 0), (2, 0), (2, 1)])
def test_embed_layer_norm_fewer_outputs(n_out: int, mask_index_type: int) -> None:
    inputs = _embed_inputs(True, MASKS["padded"])
    model = ms_model("EmbedLayerNormalization", inputs, n_out, mask_index_type=mask_index_type)
    assert len(assert_matches(*model)) == n_out


@pytest.mark.parametrize("where, value", [("in0", VOCAB), ("in0", -1), ("in1", SEGMENTS)], ids=str)
def test_embed_layer_norm_rejects_ids_out_of_range(where: str, value: int) -> None:
    model, feeds = ms_model("EmbedLayerNormalization", _embed_inputs(True, None), n_out=2)
    for out in model.graph.output:
        out.type.tensor_type.elem_type = TensorProto.FLOAT
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT32
    feeds[where][0, 1] = value
    with pytest.raises(onnxflow.OnnxflowError, match=f"{value} is out of range"):
        onnxflow.InferenceSession(model).run(None, feeds)


# -- QEmbedLayerNormalization -----------------------------------------------------------------


def _quantized(a: np.ndarray, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a as dtype values with a scalar scale and zero point covering its range."""
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    scale = np.float32((a.max() - a.min()) / (hi - lo))
    zero_point = np.clip(np.round(lo - a.min() / scale), lo, hi)
    q = np.clip(np.round(a / scale) + zero_point, lo, hi).astype(dtype)
    return q, np.array(scale, np.float32), np.array(zero_point, dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("mask", ["none", "padded"])
@pytest.mark.parametrize("segment", [True, False], ids=["segment", "no_segment"])
def test_q_embed_layer_norm(dtype: type, segment: bool, mask: str) -> None:
    ids, segment_ids, *tables, _, _ = _embed_inputs(segment, MASKS[mask])
    quantized = [None if t is None else _quantized(t, dtype) for t in tables]
    q, scales, zero_points = ([None if t is None else t[k] for t in quantized] for k in range(3))
    inputs = [ids, segment_ids, *q[:3], *q[3:], MASKS[mask], *scales, *zero_points]
    y, mask_index = assert_matches(*ms_model("QEmbedLayerNormalization", inputs, n_out=2))
    assert y.dtype == np.float32 and mask_index.dtype == np.int32
