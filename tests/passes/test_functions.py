"""Function expansion (compile/passes/functions.py): a call with no kernel of its own compiles as
the nodes of its function's body, a model-local function or the schema's."""

from __future__ import annotations

import numpy as np
import onnx.parser
from onnx import helper

import onnxflow
from onnxflow.compile.compiler import Compiler
from onnxflow.compile.passes.functions import function_for, function_opsets
from onnxflow.ir.validate import opset_map
from onnxflow.ops import load_all
from onnxflow.ops.registry import REGISTRY, Registry
from onnxflow.runtime.executor import execute

LOCAL = """
<ir_version: 8, opset_import: ["" : 18, "local" : 1]>
g (float[3] x) => (float[3] y) {
    y = local.AddScaled <alpha = 2.0> (x, x)
}
<domain: "local", opset_import: ["" : 18]>
AddScaled <alpha> (a, b) => (c) {
    s = Constant <value_float: float = @alpha> ()
    t = Mul (b, s)
    c = Add (a, t)
}
"""


def test_a_model_local_function_expands_with_its_attributes_bound() -> None:
    model = onnx.parser.parse_model(LOCAL)
    sess = onnxflow.InferenceSession(model)
    assert [info.op_type for info in sess.plan.infos] == ["Mul", "Add"]  # the Constant folded
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + 2 * x)


def test_a_schema_function_expands_when_no_kernel_serves_the_operator() -> None:
    load_all()
    without = Registry()
    for kernel in REGISTRY.all():
        if kernel.op_type != "HardSwish":
            without.add(kernel)
    model = onnx.parser.parse_model("""
        <ir_version: 10, opset_import: ["" : 22]>
        g (float[5] x) => (float[5] y) {
            y = HardSwish (x)
        }
    """)
    plan = Compiler(registry=without).compile_main(model.graph, opset_map(model.opset_import))
    assert [info.op_type for info in plan.infos] == ["HardSigmoid", "Mul"]
    x = np.array([-4, -1, 0, 1, 4], np.float32)
    (y,) = execute(plan, [x])
    np.testing.assert_allclose(y, x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6)


def test_a_model_local_function_comes_before_the_schemas() -> None:
    node = helper.make_node("HardSwish", ["x"], ["y"])
    mine = onnx.parser.parse_function("""
        <domain: "", opset_import: ["" : 22]>
        HardSwish (x) => (y) {
            y = Identity (x)
        }
    """)
    assert function_for(node, "", 22, {("", "HardSwish"): mine}, {}) is mine
    schema = function_for(node, "", 22, {}, {})
    assert schema is not None
    assert [n.op_type for n in schema.node] == ["HardSigmoid", "Mul"]
    assert function_for(helper.make_node("Abs", ["x"], ["y"]), "", 22, {}, {}) is None


def test_a_body_runs_under_its_own_opset_imports() -> None:
    fn = onnx.parser.parse_function("""
        <domain: "local", opset_import: ["" : 13, "ai.onnx.ml" : 3]>
        F (x) => (y) {
            y = Identity (x)
        }
    """)
    assert function_opsets(fn, {"": 18, "local": 1}) == {"": 13, "local": 1, "ai.onnx.ml": 3}
