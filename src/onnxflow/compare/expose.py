"""A copy of a model whose every node output can be read from outside by another runtime.

Main-graph node outputs become graph outputs. Inside the body of a main-graph Loop or Scan
(opset 9+), each node output becomes an extra scan output (its per-iteration values stacked),
and an extra output of the node and of the graph. Deeper bodies and If branches are not exposed:
their values are listed as not compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import helper, shape_inference

_LOOPS = {"Loop", "Scan"}


@dataclass
class Exposed:
    """The rewritten model and where each exposed body value comes out."""

    model: onnx.ModelProto
    #: (loop node key, body value name) -> graph output carrying its stacked values
    stacked: dict[tuple[str, str], str] = field(default_factory=dict)
    not_exposed: list[str] = field(default_factory=list)
    #: Loop output name -> (the Loop's key, rank of the body value it stacks), where known
    ranks: dict[str, tuple[str, int]] = field(default_factory=dict)


def _key(node: onnx.NodeProto) -> str:
    return node.name or next((o for o in node.output if o), "")


def _ranks(graph: onnx.GraphProto) -> dict[str, int]:
    infos = [*graph.input, *graph.output, *graph.value_info]
    tensors = [v for v in infos if v.type.tensor_type.HasField("shape")]
    return {v.name: len(v.type.tensor_type.shape.dim) for v in tensors}


def _types(graph: onnx.GraphProto) -> dict[str, int]:
    infos = [*graph.input, *graph.output, *graph.value_info]
    return {v.name: v.type.tensor_type.elem_type for v in infos if v.type.HasField("tensor_type")}


def expose(model: onnx.ModelProto) -> Exposed:
    """Rewrite a copy of ``model`` so that its node outputs are graph outputs."""
    try:
        copy = shape_inference.infer_shapes(model)
    except Exception:  # inference is a help here, not a requirement
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
    out = Exposed(copy)
    graph = copy.graph
    types = _types(graph)
    present = {o.name for o in graph.output}
    for node in list(graph.node):
        originals = list(node.output)
        if node.op_type in _LOOPS and node.domain in ("", "ai.onnx"):
            _expose_body(node, graph, out)
        for name in originals:
            if name and name not in present:
                if types.get(name):
                    graph.output.append(helper.make_tensor_value_info(name, types[name], None))
                    present.add(name)
                else:
                    out.not_exposed.append(name)
    return out


def _expose_body(node: onnx.NodeProto, graph: onnx.GraphProto, out: Exposed) -> None:
    body = next(a.g for a in node.attribute if a.name == "body")
    types, ranks = _types(body), _ranks(body)
    key, added = _key(node), 0
    if node.op_type == "Loop":
        states = len(node.input) - 2
        for output, value in zip(node.output[states:], body.output[1 + states :], strict=False):
            if value.name in ranks:
                out.ranks[output] = (key, ranks[value.name])
    for inner in list(body.node):
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in inner.attribute
        ):
            out.not_exposed.append(f"{key}/body/{_key(inner)} (nested body)")
        for name in inner.output:
            if not name:
                continue
            if not types.get(name):
                out.not_exposed.append(f"{key}/body/{name}")
                continue
            alias, stacked = f"{name}__expose", f"{key}__{name}__stacked"
            body.node.append(helper.make_node("Identity", [name], [alias]))
            body.output.append(helper.make_tensor_value_info(alias, types[name], None))
            node.output.append(stacked)
            graph.output.append(helper.make_tensor_value_info(stacked, types[name], None))
            out.stacked[(key, name)] = stacked
            if node.op_type == "Loop" and name in ranks:
                out.ranks[stacked] = (key, ranks[name])
            added += 1
    if node.op_type == "Scan":
        _extend_scan_attributes(node, added)


def _extend_scan_attributes(node: onnx.NodeProto, added: int) -> None:
    for attr in node.attribute:
        if attr.name in ("scan_output_axes", "scan_output_directions"):
            attr.ints.extend([0] * added)
