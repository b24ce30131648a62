"""BatchNormalization as its scale and shift (compile/passes/batch_norm_affine.py): an inference
BatchNormalization between elementwise nodes, with constant parameters, runs as a Mul and an Add
that a pointwise region takes, with the same bits as the node as written; a float16 model's
Conv -> HalfRound -> BatchNormalization -> HalfRound -> Relu leaves one region after the Conv.
BatchNormalizations the pass must not take stay as written."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

C, H, W = 8, 24, 32  # 6144 elements: a region's size


def _params(dtype: type, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "scale": (rng.random(C) + 0.5).astype(dtype),
        "offset": rng.standard_normal(C).astype(dtype),
        "mean": rng.standard_normal(C).astype(dtype),
        "var": (rng.random(C) + 0.1).astype(dtype),
    }


def _model(
    dtype: type = np.float32,
    *,
    before: str | None = "Relu",
    after: str | None = "Relu",
    as_constants: bool = False,
    overridable: bool = False,
    bn_attrs: dict | None = None,
) -> bytes:
    """x -> [before] -> BatchNormalization -> [after] -> y, parameters of ``dtype``."""
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    nodes, inits, inputs = [], [], [helper.make_tensor_value_info("x", elem, [1, C, H, W])]
    for name, value in _params(dtype).items():
        if as_constants:
            tensor = numpy_helper.from_array(value)
            nodes.append(helper.make_node("Constant", [], [name], value=tensor))
        else:
            inits.append(numpy_helper.from_array(value, name))
            if overridable:
                inputs.append(helper.make_tensor_value_info(name, elem, [C]))
    bn_in = "x"
    if before:
        nodes.append(helper.make_node(before, ["x"], ["pre"]))
        bn_in = "pre"
    bn_out = "bn" if after else "y"
    attrs = bn_attrs if bn_attrs is not None else {"epsilon": 1e-3}
    nodes.append(
        helper.make_node(
            "BatchNormalization", [bn_in, "scale", "offset", "mean", "var"], [bn_out], **attrs
        )
    )
    if after:
        nodes.append(helper.make_node(after, ["bn"], ["y"]))
    graph = helper.make_graph(
        nodes, "bn", inputs, [helper.make_tensor_value_info("y", elem, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    return model.SerializeToString()


def _x(dtype: type = np.float32) -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((1, C, H, W)) * 3).astype(dtype)


def _sessions(data: bytes, **options) -> list[onnxflow.InferenceSession]:
    """The session with the passes, without them, and with the NumPy forms."""
    return [
        onnxflow.InferenceSession(data, onnxflow.SessionOptions(**options)),
        onnxflow.InferenceSession(data, onnxflow.SessionOptions(optimize=False, **options)),
        onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy", **options)),
    ]


def _taken(session: onnxflow.InferenceSession) -> bool:
    """Whether the plan runs no BatchNormalization node (the pass took it)."""
    return "BatchNormalization" not in session.source()


def test_float16_each_op_chain_is_one_region_after_the_conv():
    """A float16 model rounded after each op: HalfRound -> BatchNormalization -> HalfRound ->
    Relu become one region, with the bits of the nodes as written and of a NumPy
    computation of the same roundings."""
    data = _model(np.float16, before="Neg")
    fused, written, numpy_forms = _sessions(data, float16_rounding="each_op")
    assert _taken(fused) and "Pointwise" in fused.source()
    assert not _taken(written)
    x = _x(np.float16)
    got = fused.run(None, {"x": x})[0]
    assert got.dtype == np.float16
    for other in (written, numpy_forms):
        assert got.tobytes() == other.run(None, {"x": x})[0].tobytes()
    p = {k: v.astype(np.float32).reshape(-1, 1, 1) for k, v in _params(np.float16).items()}
    a = p["scale"] / np.sqrt(p["var"] + np.float32(1e-3))
    shift = p["offset"] - p["mean"] * a
    pre = -x.astype(np.float32)
    want = np.maximum((pre * a + shift).astype(np.float16), 0)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("as_constants", [False, True])
@pytest.mark.parametrize("before, after", [("Relu", "Relu"), ("Relu", None), (None, "Neg")])
def test_float32_batch_norm_beside_elementwise_nodes(as_constants, before, after):
    """Constants as initializers or Constant nodes; an elementwise node before it, after it, or
    both: taken, and the same bits as the kernel's own scale and shift."""
    data = _model(before=before, after=after, as_constants=as_constants)
    fused, written, _ = _sessions(data)
    assert _taken(fused) and not _taken(written)
    x = _x()
    assert fused.run(None, {"x": x})[0].tobytes() == written.run(None, {"x": x})[0].tobytes()


@pytest.mark.parametrize(
    "case",
    [
        {"before": None, "after": None},  # no elementwise neighbour
        {"overridable": True},  # parameters the caller may feed
        {"before": "Relu", "after": "Relu", "bn_attrs": {"training_mode": 1}},
        {"before": "Softmax"},  # a neighbour no region takes, and none after
    ],
)
def test_batch_norms_left_as_written(case):
    if case.get("before") == "Softmax":
        case = {"before": "Softmax", "after": None}
    data = _model(**case)
    fused, written, _ = _sessions(data)
    assert not _taken(fused)
    x = _x()
    feeds = {"x": x}
    np.testing.assert_array_equal(fused.run(None, feeds)[0], written.run(None, feeds)[0])
