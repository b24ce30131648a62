"""The line of generated code (what ``onnxflow code`` prints) that computes each node's outputs,
found through the plan's value slots: a value in slot ``k`` is ``v<k>`` in the generated
function, so the line that assigns ``v<k>`` is the one that runs the node."""

from __future__ import annotations

import re
from typing import Any

import onnx

from onnxflow.compile.plan import Plan
from onnxflow.runtime.codegen import source_of
from onnxflow.runtime.lower import lowered
from onnxflow.runtime.observe import node_key as info_key
from onnxflow.view.graph import MAIN, body_id, node_key

_ASSIGNMENT = re.compile(r"^\s*(?:if .*?:\s*)?([\w\s,()]+?)\s*=[^=]")


def code_lines(plan: Plan, graph: onnx.GraphProto) -> dict[str, dict[str, str]]:
    """``{graph id: {node key: line}}`` for the plan's graph and its bodies; a node the
    compiler folded, fused or hoisted into another function has no line of its own."""
    found: dict[str, dict[str, str]] = {}
    _collect(plan, graph, MAIN, found)
    return found


def _collect(
    plan: Plan, graph: onnx.GraphProto, gid: str, found: dict[str, dict[str, str]]
) -> None:
    lines = _assignments(plan)
    slots: dict[str, list[int]] = {}
    for slot, name in enumerate(plan.slot_names):
        slots.setdefault(name, []).append(slot)
    mine = found.setdefault(gid, {})
    for node in graph.node:
        for out in (o for o in node.output if o):
            line = next((lines[s] for s in slots.get(out, []) if s in lines), None)
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


def _assignments(plan: Plan) -> dict[int, str]:
    """``{slot: line}``: the first line of the plan's generated function assigning each slot."""
    made = lowered(plan)
    if made.function is None:
        return {}
    text = source_of(made.function.fn) or ""
    found: dict[int, str] = {}
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if match is None:
            continue
        for slot in re.findall(r"\bv(\d+)\b", match.group(1)):
            found.setdefault(int(slot), line.strip())
    return found
