"""Graph pass: a chain of float32 elementwise nodes runs as one pointwise region.

Transformer and CNN exports spend many nodes on elementwise arithmetic over whole activations:
GELU written as ``Div -> Erf -> Add -> Mul -> Mul``, a bias ``Add`` before it, a scale and
shift, a clip. Run node by node, each makes a full-size array and reads the one before it back
from memory. The pass groups such nodes into ``Pointwise`` nodes whose compiled form
(:mod:`onnxflow.native._pointwise`) runs the group's instructions over the tensor in chunks
that stay in cache, each instruction computing what its node computes (float32 arithmetic,
rounded once per node, so the values are the nodes' own). Its NumPy form runs the group's
nodes as written (the ``body`` attribute).

A node joins a group when its kernel declares an instruction (:attr:`Traits.pointwise
<onnxflow.traits.Traits.pointwise>`), it has no attributes, and its inputs and output are
known to be float32. Two such nodes join when one reads the other's output and only such
nodes read it (no other node, subgraph or graph output): they all join. A group whose last
node alone gives a value read outside it becomes one node, in that last node's place (every
value it reads is made before then). Groups of fewer
than :data:`MIN_NODES` nodes, and groups whose output is known to be small, stay as written.

The pass rewrites the main graph only: in loop bodies and branches the values are small and
the loop generator's buffers already serve them. Runs that observe every value see a group as
one node; ``SessionOptions(optimize=False)`` keeps the nodes as written.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable

from onnx import NodeProto, TensorProto, TypeProto, helper

from onnxflow.compile.passes.chains import Chains
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.walk import scope_types
from onnxflow.ops.pass_made import FUSED_DOMAIN, POINTWISE, SMALL_POWERS

#: The most inputs each instruction reads (Clip's bounds may be omitted).
ARITY = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2, "clip": 3,
    "neg": 1, "abs": 1, "sqrt": 1, "reciprocal": 1, "relu": 1, "erf": 1, "sigmoid": 1,
    "half": 1, "tanh": 1, "pow": 2,
}  # fmt: skip
#: Groups of fewer nodes stay as written.
MIN_NODES = 2
#: Groups hold at most this many nodes: a region runs as one call, and RunOptions.terminate
#: is read between calls, so a long chain is cut into regions that each take about as long
#: as one of its nodes would on a bigger tensor.
MAX_NODES = 24
#: Groups whose output is known to hold fewer elements stay as written: on small tensors a
#: region's call costs more than the NumPy calls it saves.
MIN_ELEMENTS = 4096


def fuse_pointwise(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the main graph with each group of pointwise nodes as one ``Pointwise``
    node, or None when there is none (or the view is not the main graph)."""
    if not view.main:
        return None
    types = _float32_types(view)
    chains = functools.cache(lambda: Chains(view))  # read only for a Pow's exponent
    members = [n for n in view.nodes if _instruction(view, n, types, chains) is not None]
    if len(members) < MIN_NODES:
        return None
    fused: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for group in _groups(view, members):
        if len(group) >= MIN_NODES and not _small(types[group[-1].output[0]]):
            fused[id(group[-1])] = _region(view, group, types)
            dropped.update(id(n) for n in group[:-1])
    if not fused:
        return None
    return [fused.get(id(n), n) for n in view.nodes if id(n) not in dropped]


_FLOAT = TensorProto.FLOAT


def _float32_types(view: GraphView) -> dict[str, TypeProto]:
    """The float32 tensors the graph declares (:func:`~onnxflow.ir.walk.scope_types`) among
    those its nodes read or write, by name."""
    declared = scope_types(view.graph)
    names = {name for node in view.nodes for name in (*node.input, *node.output)}
    found = {}
    for name in names:
        tp = declared.get(name)
        if tp is not None and tp.HasField("tensor_type") and tp.tensor_type.elem_type == _FLOAT:
            found[name] = tp
    return found


def _instruction(
    view: GraphView, node: NodeProto, types: dict[str, TypeProto], chains: Callable[[], Chains]
) -> str | None:
    """The region instruction ``node`` is, or None when it cannot join a region."""
    traits = view.traits(node)
    code = traits.pointwise if traits is not None else None
    if code is None or node.attribute or len(node.output) != 1:
        return None
    ins = [name for name in node.input if name]
    if not ins or not node.input[0] or len(node.input) > ARITY[code]:
        return None
    if ARITY[code] == 2 and len(ins) != 2:
        return None
    if not all(n in types for n in (*ins, node.output[0])):
        return None
    return code if _computes(code, node, chains) else None


def _computes(code: str, node: NodeProto, chains: Callable[[], Chains]) -> bool:
    """Whether the instruction computes ``node``'s operands: a Pow's exponent must be a
    constant among SMALL_POWERS (the instruction's products)."""
    return code != "pow" or chains().scalar(node.input[1]) in SMALL_POWERS


def _groups(view: GraphView, members: list[NodeProto]) -> list[list[NodeProto]]:
    """The groups of ``members``, each in graph order with one output, its last node's: two
    members join when one reads the other's output and only members read that output (then
    they all join, up to MAX_NODES); a group whose values other nodes read at more than its
    last node is left out."""
    reads = view.reads()
    by_output = {n.output[0]: n for n in members}
    member_reads: dict[str, list[NodeProto]] = {}
    for node in members:
        for name in dict.fromkeys(node.input):
            if name in by_output:
                member_reads.setdefault(name, []).append(node)
    sets = _Union(members)
    for name, readers in member_reads.items():
        if sum(list(node.input).count(name) for node in readers) == reads[name]:
            sets.join([by_output[name], *readers])
    grouped: dict[int, list[NodeProto]] = {}
    for node in members:  # graph order
        grouped.setdefault(sets.find(id(node)), []).append(node)
    return [g for g in grouped.values() if _one_output(g, reads)]


class _Union:
    """Disjoint sets of nodes, each at most MAX_NODES large."""

    def __init__(self, nodes: list[NodeProto]) -> None:
        self.parent = {id(n): id(n) for n in nodes}
        self.size = dict.fromkeys(self.parent, 1)

    def find(self, k: int) -> int:
        parent = self.parent
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def join(self, nodes: list[NodeProto]) -> None:
        """Put ``nodes``' sets together, unless that makes one of more than MAX_NODES."""
        roots = {self.find(id(n)) for n in nodes}
        if sum(self.size[r] for r in roots) > MAX_NODES:
            return
        keep = roots.pop()
        for r in roots:
            self.parent[r] = keep
            self.size[keep] += self.size[r]


def _one_output(group: list[NodeProto], reads: Counter[str]) -> bool:
    """Whether only the group's last node gives a value read outside the group."""
    inside = Counter(name for n in group for name in n.input)
    return all(reads[n.output[0]] == inside[n.output[0]] for n in group[:-1])


def _small(tp: TypeProto) -> bool:
    """Whether the tensor type ``tp`` has a static shape of fewer than MIN_ELEMENTS elements."""
    dims = tp.tensor_type.shape.dim if tp.tensor_type.HasField("shape") else None
    if dims is None or any(not d.HasField("dim_value") for d in dims):
        return False
    return math.prod(d.dim_value for d in dims) < MIN_ELEMENTS


def _region(view: GraphView, group: list[NodeProto], types: dict[str, TypeProto]) -> NodeProto:
    """The ``Pointwise`` node running ``group`` (in graph order, its root last): its inputs are
    the values the group reads from outside it, ``opcodes`` its instructions, ``operands``
    three per instruction (input k is operand k, instruction j's result operand
    ``len(inputs) + j``, an omitted input -1)."""
    produced = [n.output[0] for n in group]
    inputs = list(
        dict.fromkeys(name for n in group for name in n.input if name and name not in produced)
    )
    slot = {name: k for k, name in enumerate([*inputs, *produced])}
    operands = [slot[name] if name else -1 for n in group for name in [*n.input, "", "", ""][:3]]
    root = group[-1]
    body = helper.make_graph(
        list(group),
        f"pointwise_{root.name or root.output[0]}",
        [helper.make_value_info(name, types[name]) for name in inputs],
        [helper.make_value_info(root.output[0], types[root.output[0]])],
    )
    return helper.make_node(
        POINTWISE,
        inputs,
        list(root.output),
        name=root.name,
        domain=FUSED_DOMAIN,
        body=body,
        opcodes=[view.traits(n).pointwise for n in group],  # type: ignore[union-attr]
        operands=operands,
    )
