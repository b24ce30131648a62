"""The line of generated code (what ``onnxflow code`` prints) that computes each node's outputs,
found through the step each line of the generated function runs (what the lowering keeps to
name a failing node): the first line of a node's step is the one that runs it."""

from __future__ import annotations

from typing import Any

import onnx

from onnxflow.compile.plan import Plan
from onnxflow.runtime.codegen import source_of
from onnxflow.runtime.lower import lowered
from onnxflow.runtime.observe import node_key as info_key
from onnxflow.view.graph import MAIN, body_id, node_key


def code_lines(plan: Plan, graph: onnx.GraphProto) -> dict[str, dict[str, str]]:
    """``{graph id: {node key: line}}`` for the plan's graph and its bodies; a node the
    compiler folded, fused or hoisted into another function has no line of its own."""
    found: dict[str, dict[str, str]] = {}
    _collect(plan, graph, MAIN, found)
    return found


def _collect(
    plan: Plan, graph: onnx.GraphProto, gid: str, found: dict[str, dict[str, str]]
) -> None:
    lines = _step_lines(plan)
    steps = {out: step for step, info in enumerate(plan.infos) for out in info.outputs if out}
    mine = found.setdefault(gid, {})
    for node in graph.node:
        for out in (o for o in node.output if o):
            line = lines.get(steps.get(out, -1))
            if line is not None:
                mine.setdefault(node_key(node), line)
                break
    bodies = _bodies(graph, gid)
    for index, child in plan.children:
        owner = info_key(plan.infos[index])
        for (key, body_name), (bid, body) in bodies.items():
            if key == owner and child.graph_name.split(".")[0] == body_name.split(".")[0]:
                _collect(child, body, bid, found)


def _bodies(graph: onnx.GraphProto, gid: str) -> dict[tuple[str, str], tuple[str, Any]]:
    """``{(node key, body graph name): (body id, body)}`` of ``graph``'s control-flow nodes."""
    found = {}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found[(node_key(node), attr.g.name)] = (body_id(gid, node, attr.name), attr.g)
    return found


def _step_lines(plan: Plan) -> dict[int, str]:
    """``{step: line}``: the first line of the plan's generated function that runs each step
    (none for an interpreted plan)."""
    made = lowered(plan)
    if made.function is None:
        return {}
    text = (source_of(made.function.fn) or "").splitlines()
    found: dict[int, str] = {}
    for number, step in sorted(made.function.lines.items()):
        if 0 < number <= len(text):
            found.setdefault(step, text[number - 1].strip())
    return found
