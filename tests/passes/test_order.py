"""The loop-body passes run in their declared order (compile/passes/__init__.py): hoisting, then
the fusions over what remains of the body."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser

import onnxflow
from onnxflow.compile.passes import PIPELINE, Stage, fuse_distances, hoist, loop_body_forms
from onnxflow.compile.passes.body_forms import BodyFacts
from onnxflow.observers import Trace
from onnxflow.ops import load_all
from onnxflow.ops.pass_made import FUSED_DOMAIN
from onnxflow.ops.registry import REGISTRY

#: Scan over vectors b_t: the distances of A's rows to b_t, less Neg(bias). Neg(bias) is
#: invariant (hoisted); Sub + ReduceSumSquare is the row-distance pattern (fused).
KNN = """
<ir_version: 8, opset_import: ["" : 13]>
g (float[4, 3] A0, float[T, 3] B) => (float[4, 3] A_final, float[T, 4] dists)
<float[4] bias = {1, 2, 3, 4}> {
    A_final, dists = Scan <num_scan_inputs = 1, body = body (float[4, 3] A, float[3] b_t)
        => (float[4, 3] A_out, float[4] out) {
        d = Sub (A, b_t)
        dist = ReduceSumSquare <axes = [1], keepdims = 0> (d)
        nb = Neg (bias)
        out = Add (dist, nb)
        A_out = Identity (A)
    }> (A0, B)
}
"""


def _knn_body() -> onnx.GraphProto:
    (scan,) = onnx.parser.parse_model(KNN).graph.node
    return next(a.g for a in scan.attribute if a.name == "body")


def test_hoisting_is_declared_before_the_fusions() -> None:
    body_passes = tuple(p.run for p in PIPELINE if p.stage is Stage.LOOP_BODY)
    assert (hoist.hoist, fuse_distances.fuse) == body_passes


def test_a_body_gets_both_hoisting_and_fusion() -> None:
    load_all()
    ranks = {"A": 2, "b_t": 1, "bias": 1}
    forms = loop_body_forms(_knn_body(), BodyFacts(("b_t",), ranks.get, 13, REGISTRY), True)
    assert forms is not None
    assert [n.op_type for n in forms.pre.node] == ["Neg"]
    assert forms.invariants == ("nb",)
    assert [n.op_type for n in forms.body.node] == ["RowSquaredDistances", "Add", "Identity"]
    assert forms.opsets == {FUSED_DOMAIN: 1}


def test_a_body_no_pass_changes_is_left_as_written() -> None:
    load_all()
    body = _knn_body()
    facts = BodyFacts(("b_t",), lambda name: None, 13, REGISTRY)
    assert loop_body_forms(body, facts, True) is not None  # Neg still moves
    del body.node[2:4]  # no Neg, no Add
    body.output[1].name = "dist"
    assert loop_body_forms(body, facts, True) is None  # ranks unknown


def test_the_rewritten_body_computes_the_body_as_written() -> None:
    rng = np.random.default_rng(0)
    feeds = {  # small integers: every sum is exact whatever its order
        "A0": rng.integers(-3, 4, (4, 3)).astype(np.float32),
        "B": rng.integers(-3, 4, (5, 3)).astype(np.float32),
    }
    want = ((feeds["A0"] - feeds["B"][:, None, :]) ** 2).sum(-1) - np.arange(1, 5)
    model = onnx.parser.parse_model(KNN)
    sess = onnxflow.InferenceSession(model)
    plain = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    for got in (sess.run(None, feeds), sess.run(None, feeds, observers=[Trace()])):
        np.testing.assert_array_equal(got[1], want)
    np.testing.assert_array_equal(plain.run(None, feeds)[1], want)
