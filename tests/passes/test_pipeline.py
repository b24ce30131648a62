"""The one pass pipeline (compile/passes/__init__.py): declared once, run by the compiler on every
scope with the compiler's registry; the work around it done once per session."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.parser
import onnx.shape_inference
import pytest
from test_order import KNN  # a Scan body with an invariant node and the row-distance pattern

import onnxflow
from onnxflow.compile import compiler as compiler_module
from onnxflow.compile.compiler import Compiler
from onnxflow.compile.passes import PIPELINE, Stage
from onnxflow.compile.plan import Plan
from onnxflow.ir.schemas import op_schema
from onnxflow.ir.validate import opset_map
from onnxflow.observers import Trace
from onnxflow.ops import load_all
from onnxflow.ops.registry import REGISTRY, Registry
from onnxflow.traits import RANDOM

#: A Loop whose body holds a QuantizeLinear -> DequantizeLinear pair (a graph pass's pattern).
QDQ_LOOP = """
<ir_version: 8, opset_import: ["" : 13]>
g (int64 n, float[3] x0) => (float[3] x)
<float sc = {0.5}, uint8 zp = {3}> {
    x = Loop (n, "", x0) <body = body (int64 i, bool c, float[3] v) => (bool c_out, float[3] w) {
        c_out = Identity (c)
        u = Add (v, v)
        q = QuantizeLinear (u, sc, zp)
        w = DequantizeLinear (q, sc, zp)
    }>
}
"""


def _plans(plan: Plan) -> list[Plan]:
    """``plan`` and every plan compiled for its steps, nested too."""
    return [plan, *(p for _, child in plan.children for p in _plans(child))]


def _compile(text: str, registry: Registry = REGISTRY) -> Plan:
    model = onnx.parser.parse_model(text)
    inferred = onnx.shape_inference.infer_shapes(model)
    return Compiler(registry=registry).compile_main(inferred.graph, opset_map(model.opset_import))


def test_every_pass_is_declared_once_with_its_stage() -> None:
    names = [p.name for p in PIPELINE]
    assert len(set(names)) == len(names)
    stages = [p.stage for p in PIPELINE]
    assert stages[0] is Stage.MODEL  # float16 widening sees the model as written
    assert [p.name for p in PIPELINE if p.always] == ["expand functions"]


def test_the_passes_read_the_compilers_registry_not_the_global_one() -> None:
    load_all()
    assert [p.graph_name for p in _plans(_compile(KNN))] == ["g", "body.pre", "body"]
    neg = REGISTRY.lookup("", "Neg", 13)
    assert neg is not None and neg.traits.pure
    impure = Registry()  # the same kernels, but Neg promises nothing: it may not move
    for kernel in REGISTRY.all():
        if kernel is neg:
            kernel = dataclasses.replace(kernel, traits=RANDOM)
        impure.add(kernel)
    plans = _plans(_compile(KNN, impure))
    assert [p.graph_name for p in plans] == ["g", "body"]
    assert [i.op_type for i in plans[1].infos] == ["RowSquaredDistances", "Neg", "Add", "Identity"]


def test_a_graph_pass_runs_in_a_loop_body_too() -> None:
    load_all()
    (_, body) = _plans(_compile(QDQ_LOOP))
    assert [i.op_type for i in body.infos] == ["Identity", "Add", "FakeQuantize"]
    feeds = {"n": np.array(3, np.int64), "x0": np.array([0.3, -1.2, 40.0], np.float32)}
    model = onnx.parser.parse_model(QDQ_LOOP)
    want = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=False))
    got = onnxflow.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(got[0], want.run(None, feeds)[0])


def test_the_body_as_written_compiles_at_the_first_watched_run_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    build = compiler_module._GraphBuilder.build

    def counting(self: Any, opsets: dict[str, int]) -> Plan:
        built.append(self.graph.name)
        return build(self, opsets)

    monkeypatch.setattr(compiler_module._GraphBuilder, "build", counting)
    sess = onnxflow.InferenceSession(onnx.parser.parse_model(KNN))
    assert Counter(built) == {"g": 1, "body.pre": 1, "body": 1}
    feeds = {"A0": np.ones((4, 3), np.float32), "B": np.zeros((5, 3), np.float32)}
    plain = sess.run(None, feeds)
    assert Counter(built) == {"g": 1, "body.pre": 1, "body": 1}
    for _ in range(2):
        trace = Trace()
        watched = sess.run(None, feeds, observers=[trace])
        np.testing.assert_array_equal(watched[1], plain[1])
    assert Counter(built) == {"g": 1, "body.pre": 1, "body": 2}  # the body as written, once


def test_an_iteration_observer_does_not_compile_the_body_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An observer of scopes only (node_events False) keeps the passes' body: the iterations'
    inputs are named from it, and the body as written is never compiled."""
    built: list[str] = []
    build = compiler_module._GraphBuilder.build

    def counting(self: Any, opsets: dict[str, int]) -> Plan:
        built.append(self.graph.name)
        return build(self, opsets)

    class Iterations(onnxflow.observers.Observer):
        node_events = False

        def __init__(self) -> None:
            self.seen: list[tuple[Any, tuple[str, ...]]] = []

        def scope_inputs(self, scope: Any, names: Any, values: Any) -> None:
            self.seen.append((scope[-1][1], tuple(names)))

    monkeypatch.setattr(compiler_module._GraphBuilder, "build", counting)
    sess = onnxflow.InferenceSession(onnx.parser.parse_model(KNN))
    feeds = {"A0": np.ones((4, 3), np.float32), "B": np.zeros((5, 3), np.float32)}
    watcher = Iterations()
    sess.run(None, feeds, observers=[watcher])
    assert Counter(built) == {"g": 1, "body.pre": 1, "body": 1}
    assert watcher.seen == [(i, ("A", "b_t")) for i in range(5)]  # the body's inputs


def _with_overridable_weight(elem: int) -> onnx.ModelProto:
    """y = x * w with w an initializer listed as an input (so the session compiles two plans)."""
    x = onnx.helper.make_tensor_value_info("x", elem, [2])
    w = onnx.helper.make_tensor_value_info("w", elem, [2])
    y = onnx.helper.make_tensor_value_info("y", elem, [2])
    weight = onnx.numpy_helper.from_array(
        np.ones(2, onnx.helper.tensor_dtype_to_np_dtype(elem)), "w"
    )
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["x", "w"], ["y"])], "g", [x, w], [y], [weight]
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("elem", "runs"),
    [(onnx.TensorProto.FLOAT, 1), (onnx.TensorProto.FLOAT16, 2)],  # float16: + its strict check
)
def test_shape_inference_runs_once_per_session(
    monkeypatch: pytest.MonkeyPatch, elem: int, runs: int
) -> None:
    calls: list[bool] = []
    infer = onnx.shape_inference.infer_shapes

    def counting(model: onnx.ModelProto, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        calls.append(kwargs.get("strict_mode", False))
        return infer(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting)
    sess = onnxflow.InferenceSession(_with_overridable_weight(elem))
    assert sess._default_plan is not None  # both plans were compiled
    assert calls == [False, True][:runs]


def test_a_schema_is_looked_up_once_per_operator_version(monkeypatch: pytest.MonkeyPatch) -> None:
    load_all()
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] z) {
            y = Add (x, x)
            u = Add (y, x)
            z = Mul (u, y)
        }
    """)
    asked: list[str] = []
    get_schema = onnx.defs.get_schema

    def counting(op_type: str, *args: Any) -> Any:
        asked.append(op_type)
        return get_schema(op_type, *args)

    op_schema.cache_clear()
    monkeypatch.setattr(onnx.defs, "get_schema", counting)
    Compiler().compile_main(model.graph, opset_map(model.opset_import))
    assert sorted(asked) == ["Add", "Mul"]


def test_a_views_reads_are_counted_once_and_a_rewritten_view_counts_its_own() -> None:
    """The graph passes that leave the graph as it is share one count of its reads."""
    from onnxflow.compile.passes.graph_view import GraphView

    graph = onnx.parser.parse_graph("g (float[2] x) => (float[2] y) { r = Relu(x) y = Neg(r) }")
    view = GraphView(graph, list(graph.node), {"": 17}, REGISTRY, main=True)
    first = view.reads()
    assert view.reads() is first and first == Counter({"x": 1, "r": 1, "y": 1})
    rewritten = dataclasses.replace(view, nodes=[onnx.helper.make_node("Neg", ["x"], ["y"])])
    assert rewritten.reads() == Counter({"x": 1, "y": 1})
