"""Graph pass: the arithmetic a graph does on tensor shapes runs once per set of shapes.

Dynamic exports (torch.onnx of any Hugging Face model, with a symbolic batch or sequence
length) compute their Reshape targets, Expand shapes, Slice bounds and masks with chains of
small nodes: ``Shape -> Gather -> Unsqueeze -> Concat``, ``Range``, ``ConstantOfShape``,
``Where``... A 2-layer GPT-2 holds 200 such nodes for 40 that do the work. They read nothing
but the outputs of ``Shape`` and ``Size`` nodes (kernels registered ``from_shape``,
:class:`onnxflow.traits.Traits`) and constants, so their values follow from the shapes alone.

The pass gathers them, in graph order, into groups and replaces each group by one
``ShapeMemo`` node whose ``body`` attribute holds the group's nodes as written. The node's
inputs are the ``Shape``/``Size`` outputs the group reads; its outputs the group's values read
outside it. Its kernel (:func:`onnxflow.ops.pass_made.kernels.shape_memo`) runs the body when
those inputs differ from the last call's and otherwise returns the values it kept, read-only.

A node joins a group when it reads at least one shape value or group value and otherwise only
constants (Constant nodes, initializers the caller cannot override), is run by a pure kernel,
and holds no subgraph. A group is closed, and its node placed, just before
the first node outside it that reads one of its values, so every node still comes after what
it reads. Runs that observe every value (``intermediate``, observers) see the group as one
node; ``SessionOptions(optimize=False)`` keeps the nodes as written.
"""

from __future__ import annotations

from collections.abc import Iterable

from onnx import NodeProto, TensorProto, helper

from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ir.walk import subgraph_reads, subgraphs
from onnxflow.ops.pass_made import FUSED_DOMAIN, SHAPE_MEMO

#: Groups of fewer nodes are left as written (a memo lookup costs about one small node).
MIN_GROUP = 3


def memo_shapes(view: GraphView) -> list[NodeProto] | None:
    """The nodes of ``graph`` with its shape arithmetic in ``ShapeMemo`` nodes, or None when
    there is none worth a memo."""
    if not any(_is_root(view, n) for n in view.nodes):
        return None
    grouper = _Grouper(view)
    for node in view.nodes:
        grouper.take(node)
    grouper.close()
    if not grouper.groups:
        return None
    needed = _read_outside_groups(view, grouper)
    return [
        _memo_node(*grouper.groups[id(n)], needed) if id(n) in grouper.groups else n
        for n in grouper.nodes
    ]


def _read_outside_groups(view: GraphView, grouper: _Grouper) -> set[str]:
    """The values read by a node in no group, by a subgraph of one, by a group (its inputs)
    or as a graph output: what each memo node must output of its group's values."""
    ungrouped = [n for n in grouper.nodes if id(n) not in grouper.groups]
    needed = {i for n in ungrouped for i in n.input if i} | {vi.name for vi in view.graph.output}
    needed |= subgraph_reads(ungrouped)
    needed.update(i for _, inputs, _ in grouper.groups.values() for i in inputs)
    return needed


def _is_root(view: GraphView, node: NodeProto) -> bool:
    """Whether ``node``'s outputs are shape values: its kernel computes them from its input's
    shape alone."""
    traits = view.traits(node)
    return traits is not None and traits.from_shape


def _pure(view: GraphView, node: NodeProto) -> bool:
    """Whether a kernel serves ``node`` in this scope and is pure."""
    traits = view.traits(node)
    return traits is not None and traits.pure


class _Grouper:
    """Walks the nodes in order, growing one open group of shape arithmetic at a time.

    ``nodes`` are the nodes as they will run, each closed group standing as a placeholder
    (its first node) keyed in ``groups`` by id to ``(group nodes, inputs, count)``.
    """

    def __init__(self, view: GraphView) -> None:
        self.view = view
        self.constants = view.constants()
        self.known: set[str] = set()  # shape values and every group's values
        self.nodes: list[NodeProto] = []
        self.groups: dict[int, tuple[list[NodeProto], list[str], int]] = {}
        self.group: list[NodeProto] = []
        self.group_values: set[str] = set()

    def take(self, node: NodeProto) -> None:
        """Add ``node`` to the open group, or emit it (closing the group if it reads it)."""
        if is_onnx_op(node, "Constant") and not node.input:
            self.constants.update(o for o in node.output if o)
        outputs = [o for o in node.output if o]
        if self._joins(node):
            self.group.append(node)
            self.group_values.update(outputs)
            self.known.update(outputs)
            return
        if self.group and not self.group_values.isdisjoint(_reads(node)):
            self.close()
        self.nodes.append(node)
        if _is_root(self.view, node):
            self.known.update(outputs)

    def _joins(self, node: NodeProto) -> bool:
        inputs = [i for i in node.input if i]
        if not any(i in self.known for i in inputs):
            return False
        if not all(i in self.known or i in self.constants for i in inputs):
            return False
        return not any(True for _ in subgraphs(node)) and _pure(self.view, node)

    def close(self) -> None:
        """Emit the open group: as one placeholder for a ShapeMemo node, or as written when
        it is small."""
        group, self.group = self.group, []
        values, self.group_values = self.group_values, set()
        if len(group) < MIN_GROUP:
            self.nodes.extend(group)
            return
        inputs = _ordered(i for n in group for i in n.input if i in self.known and i not in values)
        self.groups[id(group[0])] = (group, inputs, len(self.groups) + 1)
        self.nodes.append(group[0])


def _reads(node: NodeProto) -> set[str]:
    return set(node.input) | subgraph_reads([node])


def _memo_node(
    group: list[NodeProto], inputs: list[str], count: int, needed: set[str]
) -> NodeProto:
    """The ShapeMemo node running ``group``, with the group's values in ``needed`` as outputs."""
    outputs = [o for n in group for o in n.output if o and o in needed]
    body = helper.make_graph(
        list(group),
        f"shape_memo_{count}",
        [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in inputs],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
    )
    first, last = group[0], group[-1]
    return helper.make_node(
        SHAPE_MEMO,
        inputs,
        outputs,
        name=f"{first.name or first.op_type}..{last.name or last.op_type}",
        domain=FUSED_DOMAIN,
        body=body,
    )


def _ordered(names: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for n in names:
        seen.setdefault(n)
    return list(seen)
