"""A copy of a model whose every node output can be read from outside by another runtime.

Main-graph node outputs become graph outputs. Inside a body, each node output is carried out
level by level: through a Loop or Scan (opset 9+) as an extra scan output (its per-iteration
values stacked along a new first axis), through an If as an extra output of both branches (the
branch that did not run gives a placeholder of the same type, and a flag output says which
branch ran). Values nested in several bodies come out stacked once per loop around them. What
cannot come out (sequences inside bodies, maps, bodies beyond ``depth``, Scan 8, SequenceMap)
is listed, as are the blocked tensors of onnxruntime's NCHWc operators: onnxruntime holds them
as (N, C/b, H, W, b) in memory, onnxflow in NCHW order, so their elements do not line up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from onnxflow.ir import keys
from onnxflow.ir.domains import is_default_domain
from onnxflow.ir.names import fresh_name

_BRANCHES = ("then_branch", "else_branch")


@dataclass(frozen=True)
class Step:
    """One level between the main graph and an exposed value: the control-flow node's key and
    ``"iteration"`` (a stacked axis, one index per body run) or the branch the value is in."""

    key: str
    kind: str


@dataclass(frozen=True)
class Exposure:
    """A value carried out of its graph: the steps it crossed, its name in the model, the name
    that carries it in the graph it has reached, its element type and per-run shape (if known)."""

    path: tuple[Step, ...]
    name: str
    carrier: str
    elem_type: int
    shape: tuple[int | None, ...] | None
    #: keys of the Loops that stacked it (one made it as a scan output, or it crossed their
    #: bodies), outermost first: onnx.reference stacks those its own way (see compare.sides)
    loops: tuple[str, ...] = ()


@dataclass
class Exposed:
    """The rewritten model and where each exposed value comes out."""

    model: onnx.ModelProto
    values: list[Exposure] = field(default_factory=list)
    not_exposed: list[str] = field(default_factory=list)
    #: control-flow node key -> op type, for the nodes whose bodies' values come out
    ops: dict[str, str] = field(default_factory=dict)

    @property
    def loops(self) -> set[str]:
        """Keys of the loops whose bodies' values come out (their iterations can be counted)."""
        return {s.key for e in self.values for s in e.path if s.kind == "iteration"}


#: What onnxflow's own run saw of each value: (ONNX element type, shape with the dimensions
#: that changed between body runs as None), for values shape inference left untyped.
Observed = dict[str, tuple[int, tuple[int | None, ...]]]


def observed_types(records: dict[Any, dict[str, Any]]) -> Observed:
    """The element type and shape of every tensor in a run's records (all scopes)."""
    seen: Observed = {}
    for values in records.values():
        for name, value in values.items():
            if not isinstance(value, np.ndarray) or value.dtype.kind == "V":
                continue
            try:
                elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            except (KeyError, ValueError, TypeError):
                continue
            shape = value.shape
            if name in seen:
                old = seen[name][1]
                if len(old) != len(shape):
                    continue
                shape = tuple(a if a == b else None for a, b in zip(old, shape, strict=True))
            seen[name] = (elem, shape)
    return seen


def branch_flag(key: str) -> str:
    """The record name of the flag saying whether If ``key`` ran its then-branch."""
    return f"{key}#then_branch"


def node_key(node: onnx.NodeProto) -> str:
    """How a node is addressed in scopes (:func:`onnxflow.ir.keys.node_key`)."""
    return keys.node_key(node.name, node.output, node.op_type)


@dataclass
class _Context:
    """What the rewrite carries across graphs: taken names, what it could not expose, depth."""

    taken: set[str]
    not_exposed: list[str]
    depth: int | None
    loop_depth: int | None
    opset: int
    loop_branches: bool
    observed: Observed
    ops: dict[str, str] = field(default_factory=dict)
    #: main-graph values of a sequence type: graph outputs of that type (not stackable)
    sequences: dict[str, onnx.TypeProto] = field(default_factory=dict)

    def fresh(self, base: str) -> str:
        """A value name the model does not use yet."""
        return fresh_name(base, self.taken)


def expose(
    model: onnx.ModelProto,
    depth: int | None = None,
    loop_depth: int | None = None,
    loop_branches: bool = True,
    observed: Observed | None = None,
) -> Exposed:
    """Rewrite a copy of ``model`` so that its node outputs are graph outputs.

    ``depth`` bounds how many bodies deep values are carried out (None: all; 0: the main graph
    only); ``loop_depth`` bounds how many loops a value may be stacked through;
    ``loop_branches=False`` leaves the branches of an If inside a loop unexposed (their
    placeholders may not stack with the values of the branch that ran). ``observed`` (what
    onnxflow's run saw, :func:`observed_types`) types the values shape inference cannot (the
    outputs of onnxruntime's own operators) and completes shapes for placeholders.
    """
    try:
        copy = shape_inference.infer_shapes(model)
    except Exception:  # inference is a help here, not a requirement
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
    opset = next((o.version for o in copy.opset_import if is_default_domain(o.domain)), 1)
    context = _Context(
        _all_names(copy.graph), [], depth, loop_depth, opset, loop_branches, observed or {}
    )
    values = _expose_graph(copy.graph, context, "", 0, 0)
    present = {o.name for o in copy.graph.output}
    for value in values:
        if value.carrier not in present:
            sequence = context.sequences.get(value.carrier)
            copy.graph.output.append(
                _info(value.carrier, value.elem_type)
                if sequence is None
                else helper.make_value_info(value.carrier, sequence)
            )
            present.add(value.carrier)
    return Exposed(copy, values, context.not_exposed, context.ops)


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names |= set(node.output)
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names |= _all_names(body)
    return names


def _infos(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto.Tensor]:
    infos = [*graph.input, *graph.output, *graph.value_info]
    return {v.name: v.type.tensor_type for v in infos if v.type.HasField("tensor_type")}


def _sequence_types(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    infos = [*graph.output, *graph.value_info]
    return {v.name: v.type for v in infos if v.type.HasField("sequence_type")}


def _shape(tensor: onnx.TypeProto.Tensor) -> tuple[int | None, ...] | None:
    if not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)


def _info(name: str, elem_type: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, None)


def _expose_graph(
    graph: onnx.GraphProto, context: _Context, where: str, depth: int, loops: int
) -> list[Exposure]:
    """Every value of ``graph`` (and, within the bounds, of its bodies) it can carry out."""
    found, types = [], (_infos(graph), _sequence_types(graph))
    for node in list(graph.node):
        outputs = [o for o in node.output if o]  # before the node gains its bodies' outputs
        bodies = [a for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
        if bodies and is_default_domain(node.domain):
            found += _expose_control(node, context, where, depth, loops)
        elif bodies or any(a.type == onnx.AttributeProto.GRAPHS for a in node.attribute):
            context.not_exposed.append(f"{where}{node_key(node)}/* (its subgraph)")
        found += _node_values(node, outputs, types, context, where)
    return found


def _node_values(
    node: onnx.NodeProto,
    outputs: list[str],
    types: tuple[dict[str, onnx.TypeProto.Tensor], dict[str, onnx.TypeProto]],
    context: _Context,
    where: str,
) -> list[Exposure]:
    """A node's own outputs that are tensors of a known type, or main-graph sequences (the
    others are listed)."""
    if node.domain == "com.microsoft.nchwc" and node.op_type != "ReorderOutput":
        # same values, different memory orders; ReorderOutput gives NCHW back
        context.not_exposed += [f"{where}{name} (NCHWc blocked layout)" for name in outputs]
        return []
    scans = set(node.output[len(node.input) - 2 :]) if node.op_type == "Loop" else set()
    infos, sequences = types
    found = []
    for name in outputs:
        typed = _type_of(name, infos, context.observed)
        if typed is None and not where and name in sequences:
            context.sequences[name] = sequences[name]
            typed = (0, None)  # a sequence: no element type of its own
        if typed is None:
            context.not_exposed.append(f"{where}{name}")
            continue
        stacked_by = (node_key(node),) if name in scans else ()
        found.append(Exposure((), name, name, *typed, stacked_by))
    return found


def _type_of(
    name: str, infos: dict[str, onnx.TypeProto.Tensor], observed: Observed
) -> tuple[int, tuple[int | None, ...] | None] | None:
    """A value's element type and shape: inferred, completed by what onnxflow's run saw."""
    tensor, seen = infos.get(name), observed.get(name)
    if tensor is not None and tensor.elem_type:
        shape = _shape(tensor)
        static = seen is not None and seen[0] == tensor.elem_type and None not in seen[1]
        if static and (shape is None or len(shape) == len(seen[1])):
            shape = seen[1]
        return tensor.elem_type, shape
    return seen


def _within_bounds(node: onnx.NodeProto, context: _Context, depth: int, loops: int) -> bool:
    """Whether the rewrite carries values out of ``node``'s bodies."""
    if node.op_type not in ("Loop", "Scan", "If") or _scan8(node, context):
        return False
    if context.depth is not None and depth >= context.depth:
        return False
    if node.op_type == "If" and loops and not context.loop_branches:
        return False
    is_loop = node.op_type in ("Loop", "Scan")
    return not (is_loop and context.loop_depth is not None and loops >= context.loop_depth)


def _expose_control(
    node: onnx.NodeProto, context: _Context, where: str, depth: int, loops: int
) -> list[Exposure]:
    key = node_key(node)
    inside = f"{where}{key}/"
    if not _within_bounds(node, context, depth, loops):
        context.not_exposed.append(f"{inside}* ({node.op_type} body not exposed)")
        return []
    context.ops[key] = node.op_type
    if node.op_type == "If":
        return _expose_if(node, context, inside, depth, loops)
    return _expose_loop(node, context, inside, depth, loops)


def _expose_loop(
    node: onnx.NodeProto, context: _Context, inside: str, depth: int, loops: int
) -> list[Exposure]:
    """A Loop's or Scan's body values as extra scan outputs, stacked along axis 0."""
    key = node_key(node)
    body = next(a.g for a in node.attribute if a.name == "body")
    inner = _expose_graph(body, context, inside, depth + 1, loops + 1)
    found = []
    for value in inner:
        alias = context.fresh(f"{value.carrier}__expose")
        body.node.append(helper.make_node("Identity", [value.carrier], [alias]))
        body.output.append(_info(alias, value.elem_type))
        stacked = context.fresh(f"{key}__{value.carrier}__stacked")
        node.output.append(stacked)
        shape = None if value.shape is None else (None, *value.shape)
        path = (Step(key, "iteration"), *value.path)
        stacks = (key, *value.loops) if node.op_type == "Loop" else value.loops
        found.append(Exposure(path, value.name, stacked, value.elem_type, shape, stacks))
    if node.op_type == "Scan":
        for attr in node.attribute:
            if attr.name in ("scan_output_axes", "scan_output_directions"):
                attr.ints.extend([0] * len(inner))
    return found


def _scan8(node: onnx.NodeProto, context: _Context) -> bool:
    """Scan 8: a batch axis and ``sequence_lens`` (padded rows) that its exposed values would
    need undone; its body's values are not exposed."""
    return node.op_type == "Scan" and context.opset < 9


def _expose_if(
    node: onnx.NodeProto, context: _Context, inside: str, depth: int, loops: int
) -> list[Exposure]:
    """Both branches' values as extra outputs of the If, with a flag saying which one ran."""
    key = node_key(node)
    branches = {a.name: a.g for a in node.attribute if a.name in _BRANCHES}
    inner = {
        name: _expose_graph(g, context, f"{inside}{name}/", depth + 1, loops)
        for name, g in branches.items()
    }
    flag = context.fresh(f"{key}__then_branch")
    for name, g in branches.items():
        _add_output(g, context, np.array(name == "then_branch"), TensorProto.BOOL)
    node.output.append(flag)
    found = [Exposure((), branch_flag(key), flag, TensorProto.BOOL, ())]
    for owner, values in inner.items():
        for value in values:
            for name, g in branches.items():
                if name == owner:
                    alias = context.fresh(f"{value.carrier}__expose")
                    g.node.append(helper.make_node("Identity", [value.carrier], [alias]))
                    g.output.append(_info(alias, value.elem_type))
                else:
                    _add_output(g, context, _placeholder(value), value.elem_type)
            carrier = context.fresh(f"{key}__{value.carrier}__{owner}")
            node.output.append(carrier)
            path = (Step(key, owner), *value.path)
            found.append(
                Exposure(path, value.name, carrier, value.elem_type, value.shape, value.loops)
            )
    return found


def _add_output(graph: onnx.GraphProto, context: _Context, value: np.ndarray, elem: int) -> None:
    """A Constant output of ``graph`` holding ``value`` (of ONNX element type ``elem``)."""
    name = context.fresh("expose__constant")
    tensor = numpy_helper.from_array(value, name)
    graph.node.append(helper.make_node("Constant", [], [name], value=tensor))
    graph.output.append(_info(name, elem))


def _placeholder(value: Exposure) -> np.ndarray:
    """What the branch that did not compute ``value`` outputs for it: zeros of its static shape
    when known (so loops around the If stack equal shapes), else an empty tensor of its rank."""
    dtype = helper.tensor_dtype_to_np_dtype(value.elem_type)
    known = value.shape is not None and all(d is not None for d in value.shape)
    shape = value.shape if known else (0,) * len(value.shape or (0,))
    if value.elem_type == TensorProto.STRING:
        return np.full(shape, "", dtype=object)
    return np.zeros(shape, dtype)
