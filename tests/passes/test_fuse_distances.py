"""The loop-body fusion of row distances (compile/passes/fuse_distances.py,
ops/pass_made/distances.py).

``ReduceSumSquare(Sub(A, b), axes=[-1])`` in a Scan body runs as one kernel that keeps A
transposed while A stays the same object. Values must match the body as written (observed runs)
and NumPy; pairs that do not have the pattern's shape are left alone.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.compile.passes import fuse_distances as fusion
from onnxflow.compile.passes.body_forms import BodyFacts, BodyForms
from onnxflow.compile.passes.fuse_distances import fuse_distances
from onnxflow.observers import Trace
from onnxflow.ops.pass_made import FUSED_DOMAIN
from onnxflow.ops.pass_made.distances import row_squared_distances
from onnxflow.ops.registry import Registry
from onnxflow.traits import Traits

F = TensorProto.FLOAT


def _vi(name: str, shape: list | None, elem: int = F) -> helper.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _knn_scan(opset: int, keepdims: int, axis: int, grow: bool) -> helper.ModelProto:
    """Scan over vectors b_t: distances of A's rows to b_t; A passed on (or A + 1 if ``grow``)."""
    reduce_inputs = ["d"]
    inits = [numpy_helper.from_array(np.array(1, np.float32), "one")]
    attrs: dict = {"keepdims": keepdims}
    if opset >= 18:
        reduce_inputs.append("axes")
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), "axes"))
    else:
        attrs["axes"] = [axis]
    body = helper.make_graph(
        [
            helper.make_node("Sub", ["A", "b_t"], ["d"], name="sub"),
            helper.make_node("ReduceSumSquare", reduce_inputs, ["dist"], name="rss", **attrs),
            helper.make_node(
                "Add" if grow else "Identity", ["A", "one"][: 2 if grow else 1], ["A_out"]
            ),
        ],
        "body",
        [_vi("A", [4, 3]), _vi("b_t", [3])],
        [_vi("A_out", [4, 3]), _vi("dist", None)],
        inits,
    )
    scan = helper.make_node("Scan", ["A0", "B"], ["A_final", "dists"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan],
        "g",
        [_vi("A0", [4, 3]), _vi("B", ["T", 3])],
        [_vi("A_final", None), _vi("dists", None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _oracle(a: np.ndarray, bs: np.ndarray, keepdims: int, grow: bool) -> np.ndarray:
    rows = []
    for b in bs:
        rows.append(((a - b) ** 2).sum(axis=-1, keepdims=bool(keepdims)))
        a = a + 1 if grow else a
    return np.stack(rows)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axis", [1, -1])
@pytest.mark.parametrize("grow", [False, True])
def test_fused_distances_match_the_body_as_written(opset, keepdims, axis, grow) -> None:
    rng = np.random.default_rng(0)
    feeds = {  # small integers: every sum is exact whatever its order
        "A0": rng.integers(-3, 4, (4, 3)).astype(np.float32),
        "B": rng.integers(-3, 4, (5, 3)).astype(np.float32),
    }
    sess = onnxflow.InferenceSession(_knn_scan(opset, keepdims, axis, grow))
    want = _oracle(feeds["A0"], feeds["B"], keepdims, grow)
    for observers in ([], [Trace()]):
        _, dists = sess.run(None, feeds, observers=observers)
        np.testing.assert_array_equal(dists, want)


def _rank(shapes: dict) -> object:
    return lambda name: shapes.get(name)


def test_only_the_pattern_is_fused() -> None:
    body = _knn_scan(13, 0, 1, False).graph.node[0].attribute[0].g
    fused = fuse_distances(body, _rank({"A": 2, "b_t": 1}))
    assert fused is not None
    assert [n.op_type for n in fused.node] == ["RowSquaredDistances", "Identity"]
    assert fuse_distances(body, _rank({"A": 2, "b_t": 2})) is None  # b must be a vector
    assert fuse_distances(body, _rank({"A": None, "b_t": 1})) is None  # rank unknown
    twice = _knn_scan(13, 0, 1, False).graph.node[0].attribute[0].g
    twice.output.append(_vi("d", None))  # the difference is also a body output
    assert fuse_distances(twice, _rank({"A": 2, "b_t": 1})) is None
    first = _knn_scan(13, 0, 0, False).graph.node[0].attribute[0].g  # axes=[0]
    assert fuse_distances(first, _rank({"A": 2, "b_t": 1})) is None


def test_the_fused_body_imports_the_fused_domain() -> None:
    body = _knn_scan(13, 0, 1, False).graph.node[0].attribute[0].g
    facts = BodyFacts(("b_t",), _rank({"A": 2, "b_t": 1}), 13, Registry())
    fused = fusion.fuse(BodyForms(body), facts)
    assert fused is not None
    assert fused.opsets == {FUSED_DOMAIN: 1}


def test_kernel_falls_back_for_inputs_the_types_did_not_promise() -> None:
    built = row_squared_distances(SimpleNamespace(traits=Traits()), axis=-1, keepdims=0)
    kernel = built.traits.stateful()  # the form generated code calls, with its memo
    a = np.arange(24, dtype=np.float32).reshape(2, 4, 3)  # rank 3, not a matrix
    b = np.array([1, 2, 3], np.float32)
    for _ in range(3):  # repeated calls with the same A would take the transposed path
        np.testing.assert_array_equal(kernel(a, b), ((a - b) ** 2).sum(axis=-1))
    ints = np.arange(6, dtype=np.int64).reshape(2, 3)
    for _ in range(3):
        np.testing.assert_array_equal(
            kernel(ints, b.astype(np.int64)), ((ints - [1, 2, 3]) ** 2).sum(-1)
        )
    with pytest.raises(ValueError):
        kernel(np.ones((2, 4), np.float32), b)  # does not broadcast, as Sub would say
