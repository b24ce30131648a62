"""Static types follow the IR's lexical scopes: a subgraph reads its own declarations, then its
enclosing scopes', never a sibling's (two branches of an If may give one name two types)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

from onnxflow.compile.compiler import Compiler
from onnxflow.ir.validate import opset_map
from onnxflow.ops import load_all
from onnxflow.ops.registry import REGISTRY, Kernel, Registry
from onnxflow.runtime.executor import execute
from onnxflow.traits import Built

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _probing_registry(seen: list[Any]) -> Registry:
    """The kernels, with Identity's builder noting the static type of its input."""
    load_all()
    registry = Registry()
    for kernel in REGISTRY.all():
        if kernel.op_type != "Identity":
            registry.add(kernel)

    def identity(node: Any) -> Built:
        tp = node.input_type(0)
        seen.append(None if tp is None else tp.tensor_type.elem_type)
        return Built(lambda x: x, node.traits)

    registry.add(Kernel("", "Identity", 21, identity, build=True))
    return registry


def _branch(name: str, elem: int, value: Any) -> Any:
    const = helper.make_node("Constant", [], ["t"], value=helper.make_tensor("c", elem, [1], value))
    ident = helper.make_node("Identity", ["t"], ["out"])
    return helper.make_graph(
        [const, ident],
        name,
        [],
        [helper.make_tensor_value_info("out", elem, [1])],
        value_info=[helper.make_tensor_value_info("t", elem, [1])],
    )


def test_sibling_branches_keep_their_own_types() -> None:
    then, other = _branch("then", F, [1.5]), _branch("else", I64, [7])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    seen: list[Any] = []
    compiler = Compiler(registry=_probing_registry(seen), optimize=False)
    plan = compiler.compile_main(graph, opset_map([helper.make_opsetid("", 21)]))
    assert seen == [F, I64]  # each branch's Identity saw its own branch's type for 't'
    (y,) = execute(plan, [np.array(False)])
    assert y.dtype == np.int64 and y.tolist() == [7]
