"""The scaled-dot-product attention core written as primitives
(compile/passes/fuse_attention.py) runs as one node, bitwise equal to the nodes as written;
what does not match stays as written."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

F = TensorProto.FLOAT
FUSED = "for ScaledDotProductAttention"


def _const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(
    scale="Div",
    scale_first=False,
    mask=True,
    mask_first=False,
    split_scale=False,
    nan_guard=False,
    axis=None,
    opset=17,
    outputs=("y",),
    dtype=np.float32,
    transposed=False,
):
    """``Softmax(Q K^T (scaled) + mask) V`` as exporters write it, with the variants named;
    ``transposed``: Q, K^T and V made by Transposes of the inputs (heads on axis 2), and the
    context transposed back, as head splits and merges write them."""
    nodes, inits = [], [_const("c", 0.25, dtype), _const("half", 0.5, dtype)]
    q, k = "q", "kt"
    if transposed:
        nodes += [
            helper.make_node("Transpose", ["q_in"], ["q"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", ["k_in"], ["kt"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", ["v_in"], ["v"], perm=[0, 2, 1, 3]),
        ]
    if split_scale:  # TorchScript's scaled_dot_product_attention: sqrt(scale) on each side
        nodes += [
            helper.make_node("Mul", ["q", "half"], ["qs"]),
            helper.make_node("Mul", ["half", "kt"], ["ks"]),
        ]
        q, k = "qs", "ks"
    nodes.append(helper.make_node("MatMul", [q, k], ["s"]))
    last = "s"
    if scale:
        ins = ["c", last] if scale_first else [last, "c"]
        nodes.append(helper.make_node(scale, ins, ["scaled"]))
        last = "scaled"
    if mask:
        ins = ["mask", last] if mask_first else [last, "mask"]
        nodes.append(helper.make_node("Add", ins, ["masked"]))
        last = "masked"
    attrs = {} if axis is None else {"axis": axis}
    nodes.append(helper.make_node("Softmax", [last], ["p"], **attrs))
    last = "p"
    if nan_guard:
        inits.append(_const("zero", 0.0, dtype))
        nodes += [
            helper.make_node("IsNaN", ["p"], ["nan"]),
            helper.make_node("Where", ["nan", "zero", "p"], ["guarded"]),
        ]
        last = "guarded"
    nodes.append(helper.make_node("MatMul", [last, "v"], ["ctx" if transposed else "y"]))
    if transposed:
        nodes.append(helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3]))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = ("q_in", "k_in", "v_in", "mask") if transposed else ("q", "kt", "v", "mask")
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info(n, elem, None) for n in names],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(heads=4, tokens=3, total=7, depth=8, mask_shape=None, dtype=np.float32):
    rng = np.random.default_rng(1)
    mask = np.where(rng.random(mask_shape or (1, 1, tokens, total)) < 0.3, -np.inf, 0.0)
    return {
        "q": rng.standard_normal((1, heads, tokens, depth)).astype(dtype),
        "kt": rng.standard_normal((1, heads, depth, total)).astype(dtype),
        "v": rng.standard_normal((1, heads, total, depth)).astype(dtype),
        "mask": mask.astype(dtype),
    }


def _runs(model, feeds, kernels="native"):
    data = model.SerializeToString()
    out = []
    for optimize in (True, False):
        opts = onnxflow.SessionOptions(kernels=kernels, optimize=optimize)
        session = onnxflow.InferenceSession(data, opts)
        out.append((session.source(), session.run(None, feeds)))
    return out


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


VARIANTS = [
    {},
    {"scale": "Mul"},
    {"scale": "Mul", "scale_first": True},
    {"scale": None},
    {"mask": False},
    {"mask_first": True},
    {"scale": None, "split_scale": True, "nan_guard": True},
    {"axis": -1},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(map(str, v.items())) or "-")
@pytest.mark.parametrize("kernels", ["native", "numpy"])
def test_attention_is_one_node_bitwise(variant, kernels):
    (code, fused), (plain, written) = _runs(_model(**variant), _feeds(), kernels)
    assert code.count(FUSED) == 1 and FUSED not in plain
    assert "Softmax(" not in code.split("\n# graph", 1)[0]  # the main graph's own steps
    _same(fused[0], written[0])


def test_fully_masked_row_guarded_bitwise():
    feeds = _feeds()
    feeds["mask"][..., 1, :] = -np.inf  # a row of NaN probabilities, zeroed by the guard
    (code, fused), (_, written) = _runs(_model(scale=None, split_scale=True, nan_guard=True), feeds)
    assert FUSED in code
    assert not np.isnan(fused[0]).any()
    _same(fused[0], written[0])


@pytest.mark.parametrize("mask_shape", [(1, 4, 3, 7), (2, 4, 3, 7), (7,)])
def test_mask_shapes_bitwise(mask_shape):
    """A mask as large as the scores, one that broadcasts them to a larger batch, a row."""
    (code, fused), (_, written) = _runs(_model(), _feeds(mask_shape=mask_shape))
    assert FUSED in code
    _same(fused[0], written[0])


def test_large_scores_bitwise():
    """Scores past the size scaled and masked in their own array."""
    (code, fused), (_, written) = _runs(_model(), _feeds(heads=2, tokens=128, total=128))
    assert FUSED in code
    _same(fused[0], written[0])


def test_float64_stays():
    """Scales of another type than float32 are left as written."""
    feeds = _feeds(dtype=np.float64)
    (code, fused), (_, written) = _runs(_model(dtype=np.float64), feeds)
    assert FUSED not in code
    _same(fused[0], written[0])


def _transposed(feeds):
    """``feeds`` as the transposed model's inputs (heads on axis 2)."""
    return {
        "q_in": np.ascontiguousarray(feeds["q"].transpose(0, 2, 1, 3)),
        "k_in": np.ascontiguousarray(feeds["kt"].transpose(0, 3, 1, 2)),
        "v_in": np.ascontiguousarray(feeds["v"].transpose(0, 2, 1, 3)),
        "mask": feeds["mask"],
    }


@pytest.mark.parametrize("kernels", ["native", "numpy"])
@pytest.mark.parametrize("split_scale", [False, True])
def test_head_transposes_join_bitwise(kernels, split_scale):
    """The Transposes making Q, K^T and V and the one of the context run in the node."""
    model = _model(transposed=True, split_scale=split_scale, scale=None if split_scale else "Div")
    (code, fused), (_, written) = _runs(model, _transposed(_feeds()), kernels)
    assert FUSED in code and "Transpose(" not in code.split("\n# graph", 1)[0]
    _same(fused[0], written[0])


def test_transposed_query_read_elsewhere_stays_outside():
    model = _model(transposed=True, outputs=("y", "q"))
    (code, fused), (_, written) = _runs(model, _transposed(_feeds()))
    main = code.split("\n# graph", 1)[0]
    assert FUSED in code and main.count("Transpose(") == 1
    for a, b in zip(fused, written):
        _same(a, b)


@pytest.mark.parametrize(
    "variant",
    [
        {"axis": 1},  # not the last axis
        {"opset": 12},  # Softmax coerced to 2-D
        {"outputs": ("y", "p")},  # the probabilities read elsewhere
        {"outputs": ("y", "s")},  # the scores read elsewhere
    ],
    ids=str,
)
def test_near_misses_stay(variant):
    (code, fused), (_, written) = _runs(_model(**variant), _feeds())
    assert FUSED not in code
    for a, b in zip(fused, written):
        _same(a, b)


def test_scale_fed_at_run_time_stays():
    model = _model()
    model.graph.input.append(helper.make_tensor_value_info("c", F, None))
    feeds = {**_feeds(), "c": np.array(0.25, np.float32)}
    (code, _), _ = _runs(model, feeds)
    assert FUSED not in code


def test_guard_with_other_reader_stays():
    model = _model(scale=None, split_scale=True, nan_guard=True, outputs=("y", "nan"))
    (code, _), _ = _runs(model, _feeds())
    assert FUSED not in code


def test_inputs_of_another_type_run_the_nodes_as_written():
    """The node's own path takes float32 arrays; float64 ones (a graph declaring them so,
    with the float32 scale the pass reads) run its body, the nodes as written."""
    model = _model()
    for vi in model.graph.input:
        vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    (code, fused), (_, written) = _runs(model, _feeds(dtype=np.float64))
    assert FUSED in code
    _same(fused[0], written[0])
