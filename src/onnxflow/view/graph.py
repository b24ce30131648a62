"""The structure part of a view's document: every graph of a model (main graph, Loop, Scan and If
bodies, local function bodies), each node with its attributes, inputs and outputs, the kernel
version it resolves to and that kernel's traits, and every value's shape and dtype as far as
shape inference knows them. Initializers are folded into their consumers (``consts``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnxflow.ir import keys
from onnxflow.ops.registry import REGISTRY
from onnxflow.traits import NONE

#: Id of the main graph in the document; a body's id is ``parent/node.attribute``.
MAIN = "main"
#: Attribute values longer than this many characters are cut in the document.
ATTRIBUTE_TEXT = 200


def node_key(node: onnx.NodeProto) -> str:
    """How a node is addressed in scopes, traces and comparisons: its name, else its output."""
    return keys.node_key(node.name, node.output, node.op_type)


def body_id(parent: str, node: onnx.NodeProto, attribute: str) -> str:
    """The document id of the body held in ``attribute`` of ``node`` in graph ``parent``."""
    return f"{parent}/{node_key(node)}.{attribute}"


def function_id(domain: str, name: str) -> str:
    """The document id of a model-local function's body."""
    return f"fn:{domain}.{name}"


def describe(model: onnx.ModelProto) -> dict[str, Any]:
    """The ``model`` and ``graphs`` parts of the document (see :mod:`onnxflow.view`)."""
    inferred = _inferred(model)
    opsets = {o.domain or "": o.version for o in model.opset_import}
    functions = {(f.domain, f.name): f for f in model.functions}
    graphs: dict[str, Any] = {}
    kernels: dict[str, Any] = {}
    known = _value_types(inferred.graph, {})
    _graph(inferred.graph, MAIN, None, known, {}, _Context(opsets, functions, kernels), graphs)
    for f in model.functions:
        fid = function_id(f.domain, f.name)
        body = helper.make_graph(list(f.node), f.name, [], [])
        fopsets = {**opsets, **{o.domain or "": o.version for o in f.opset_import}}
        context = _Context(fopsets, functions, kernels)
        entry = _graph(body, fid, None, {}, {}, context, graphs)
        entry["inputs"], entry["outputs"] = list(f.input), list(f.output)
        entry["label"] = f"function {f.domain}.{f.name}"
    info = {
        "name": model.graph.name,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opsets": opsets,
        "ir_version": model.ir_version,
        "nodes": sum(len(g["nodes"]) for g in graphs.values()),
    }
    return {"model": info, "graphs": graphs, "kernels": kernels}


@dataclasses.dataclass(frozen=True)
class _Context:
    """What describing a graph needs from the model: the opsets in force, the local functions,
    and the kernels found so far (each described once, by ``domain.op.since``)."""

    opsets: dict[str, int]
    functions: dict[tuple[str, str], Any]
    kernels: dict[str, Any]


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the shapes onnx's inference finds (the model itself when it fails)."""
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is a help here: a model it rejects is still shown
        return model


def _value_types(graph: onnx.GraphProto, outer: dict[str, Any]) -> dict[str, Any]:
    """Shape and dtype of every value declared in ``graph`` (inputs, outputs, value_info,
    initializers), over those of the enclosing graphs."""
    found = dict(outer)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        found[vi.name] = _type_of(vi.type)
    for t in graph.initializer:
        found[t.name] = {"shape": list(t.dims), "dtype": _dtype(t.data_type)}
    return found


def _type_of(tp: onnx.TypeProto) -> dict[str, Any]:
    kind = tp.WhichOneof("value")
    if kind != "tensor_type":
        return {"shape": None, "dtype": kind or "?"}
    tt = tp.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim
        ]
    return {"shape": shape, "dtype": _dtype(tt.elem_type)}


def _dtype(elem: int) -> str:
    try:
        return helper.tensor_dtype_to_np_dtype(elem).name if elem else "?"
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem).lower()


def _graph(
    graph: onnx.GraphProto,
    gid: str,
    parent: str | None,
    outer_types: dict[str, Any],
    outer_consts: dict[str, Any],
    context: _Context,
    graphs: dict[str, Any],
) -> dict[str, Any]:
    """Describe ``graph`` as ``graphs[gid]``, then its bodies under their own ids."""
    types = _value_types(graph, outer_types)
    consts = {**outer_consts, **{t.name: types[t.name] for t in graph.initializer}}
    entry: dict[str, Any] = {
        "name": graph.name,
        "label": graph.name or gid,
        "parent": parent,
        "inputs": [i.name for i in graph.input if i.name not in consts],
        "outputs": [o.name for o in graph.output],
        "nodes": [],
        "values": {},
        "consts": {},
    }
    graphs[gid] = entry
    for node in graph.node:
        entry["nodes"].append(_node(node, gid, types, consts, context, graphs))
    used = {n for node in graph.node for n in (*node.input, *node.output) if n}
    used |= set(entry["inputs"]) | set(entry["outputs"])
    entry["values"] = {n: types.get(n, {"shape": None, "dtype": "?"}) for n in sorted(used)}
    entry["consts"] = {n: consts[n] for n in sorted(used) if n in consts}
    return entry


def _node(
    node: onnx.NodeProto,
    gid: str,
    types: dict[str, Any],
    consts: dict[str, Any],
    context: _Context,
    graphs: dict[str, Any],
) -> dict[str, Any]:
    bodies = []
    for attr in node.attribute:
        inner = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for i, body in enumerate(inner):
            name = attr.name if len(inner) == 1 else f"{attr.name}[{i}]"
            bid = body_id(gid, node, name)
            _graph(body, bid, gid, types, consts, context, graphs)
            graphs[bid]["label"] = f"{node_key(node)} > {name}"
            graphs[bid]["owner"] = node_key(node)
            bodies.append([name, bid])
    entry = {
        "key": node_key(node),
        "name": node.name,
        "op": node.op_type,
        "domain": node.domain or "",
        "attrs": {a.name: _attribute(a) for a in node.attribute},
        "inputs": list(node.input),
        "outputs": list(node.output),
        "bodies": bodies,
        "kernel": None,
        "function": None,
    }
    if (node.domain, node.op_type) in context.functions:
        entry["function"] = function_id(node.domain, node.op_type)
    else:
        entry["kernel"] = _kernel(node, context)
    return entry


def _attribute(attr: onnx.AttributeProto) -> str:
    """An attribute's value as short text (a body as its graph's name and size)."""
    if attr.type == onnx.AttributeProto.GRAPH:
        return f"graph {attr.g.name!r} ({len(attr.g.node)} nodes)"
    if attr.type == onnx.AttributeProto.GRAPHS:
        return f"{len(attr.graphs)} graphs"
    value = helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        array = onnx.numpy_helper.to_array(value)
        text = f"tensor {array.dtype}{list(array.shape)}"
        return text + (f" = {np.array2string(array.ravel()[:8])}" if array.size else "")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, list):
        value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    text = str(value)
    return text if len(text) <= ATTRIBUTE_TEXT else text[:ATTRIBUTE_TEXT] + "..."


def _kernel(node: onnx.NodeProto, context: _Context) -> str:
    """The key, in ``context.kernels``, of the kernel ``node`` resolves to at the model's opset:
    ``{"domain", "op", "opset", "since", "function", "traits"}`` (``since`` None: none is
    registered)."""
    domain = node.domain or ""
    opset = context.opsets.get(domain) or context.opsets.get("ai.onnx" if not domain else "", 0)
    key = f"{domain or 'ai.onnx'}.{node.op_type}@{opset}"
    if key in context.kernels:
        return key
    kernel = REGISTRY.lookup(domain, node.op_type, opset)
    found: dict[str, Any] = {"domain": domain or "ai.onnx", "op": node.op_type, "opset": opset}
    if kernel is None:
        found.update(since=None, function=None, traits=[])
    else:
        fn = kernel.fn
        found.update(
            since=kernel.since,
            function=f"{fn.__module__}.{fn.__qualname__}",
            traits=_traits(kernel.traits),
        )
    context.kernels[key] = found
    return key


def _traits(traits: Any) -> list[str]:
    """The traits a kernel promises (those that differ from "promises nothing")."""
    promised = []
    for f in dataclasses.fields(traits):
        value = getattr(traits, f.name)
        if value == getattr(NONE, f.name) or (value is None):
            continue
        if isinstance(value, bool):
            promised.append(f.name)
        elif isinstance(value, np.ufunc):
            promised.append(f"{f.name}: numpy.{value.__name__}")
        elif isinstance(value, str | int | tuple):
            promised.append(f"{f.name}: {value}")
        else:
            promised.append(f.name)
    return promised
