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

Two more steps go into the memo nodes. A ``Shape`` or ``Size`` node whose value one memo node
alone reads runs inside it: the memo reads the tensor, compares it by shape alone (its
``shaped`` inputs) and so a ``Shape -> ShapeMemo`` pair is one step. A memo node whose one
value is the target of a ``Reshape`` (and read by nothing else) becomes, with that Reshape,
one ``ShapedReshape`` node (:func:`onnxflow.ops.pass_made.kernels.shaped_reshape`), with the
``Transpose`` alone reading the Reshape's output when there is one (a head split): while the
shapes stay, it reshapes (and transposes) to what its last run gave, without running the
arithmetic or reading the target again. A transformer's head split or merge, written
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape -> Transpose``, is then one step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from onnx import GraphProto, NodeProto, TensorProto, helper

from onnxflow.compile.passes.graph_view import GraphView, value_reads
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ir.walk import subgraph_reads, subgraphs
from onnxflow.ops.pass_made import FUSED_DOMAIN, SHAPE_MEMO, SHAPED_RESHAPE

#: The doc string of a memo node's body (its group as written), which the pass leaves so.
BODY_DOC = "the shape arithmetic a ShapeMemo or ShapedReshape node runs, as written"

#: Groups of fewer nodes are left as written (a memo lookup costs about one small node).
MIN_GROUP = 3


def memo_shapes(view: GraphView) -> list[NodeProto] | None:
    """The nodes of ``graph`` with its shape arithmetic in ``ShapeMemo`` nodes, or None when
    there is none worth a memo."""
    if view.graph.doc_string == BODY_DOC or not any(_is_root(view, n) for n in view.nodes):
        return None
    grouper = _Grouper(view)
    for node in view.nodes:
        grouper.take(node)
    grouper.close()
    if not grouper.groups:
        return None
    needed = _read_outside_groups(view, grouper)
    nodes = [
        _memo_node(*grouper.groups[id(n)], needed) if id(n) in grouper.groups else n
        for n in grouper.nodes
    ]
    return _reshapes(view, _shapes_absorbed(view, nodes))


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
        self.reads = view.reads()

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
            self.close(node)
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

    def close(self, reader: NodeProto | None = None) -> None:
        """Emit the open group: as one placeholder for a ShapeMemo node, or as written when
        it is small, unless its one value read outside it is the target of ``reader``, a
        Reshape (the memo and the Reshape then become one step: :func:`_reshapes`)."""
        group, self.group = self.group, []
        values, self.group_values = self.group_values, set()
        if len(group) < MIN_GROUP and not self._target_of(reader, group, values):
            self.nodes.extend(group)
            return
        inputs = _ordered(i for n in group for i in n.input if i in self.known and i not in values)
        self.groups[id(group[0])] = (group, inputs, len(self.groups) + 1)
        self.nodes.append(group[0])

    def _target_of(
        self, reader: NodeProto | None, group: list[NodeProto], values: set[str]
    ) -> bool:
        """Whether ``reader`` is a Reshape whose target is the one value of ``group`` (whose
        values are ``values``) read outside it, and read there once."""
        if reader is None or not is_onnx_op(reader, "Reshape") or len(reader.input) != 2:
            return False
        inside = Counter(i for n in group for i in n.input)
        outside = {v: self.reads[v] - inside[v] for v in values if self.reads[v] > inside[v]}
        return outside == {reader.input[1]: 1} and reader.input[0] not in values


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
        doc_string=BODY_DOC,
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


# -- Shape nodes and Reshapes taken into the memo nodes -----------------------------------------
def _is_memo(node: NodeProto) -> bool:
    return node.domain == FUSED_DOMAIN and node.op_type == SHAPE_MEMO


def _counted_reads(view: GraphView, nodes: list[NodeProto]) -> Counter[str]:
    """How many times each value is read (:func:`.value_reads`), a memo node's body not
    counted: it reads nothing but the node's inputs."""
    reads = value_reads([n for n in nodes if not _is_memo(n)], view.graph.output)
    reads.update(i for n in nodes if _is_memo(n) for i in n.input if i)
    return reads


def _shapes_absorbed(view: GraphView, nodes: list[NodeProto]) -> list[NodeProto]:
    """``nodes`` with each shape root (Shape, Size) whose value one memo node alone reads
    moved into that memo's body: the memo then reads the root's tensor, by its shape alone
    (its ``shaped`` positions), one step fewer per run."""
    producer = {o: n for n in nodes for o in n.output if o}
    reads = _counted_reads(view, nodes)
    moved: set[int] = set()
    made: dict[int, NodeProto] = {}
    for memo in (n for n in nodes if _is_memo(n)):
        roots = [
            root
            for name in memo.input
            if (root := producer.get(name)) is not None and _absorbable(view, root, memo, reads)
        ]
        if roots:
            made[id(memo)] = _with_roots(memo, roots)
            moved.update(id(r) for r in roots)
    return [made.get(id(n), n) for n in nodes if id(n) not in moved]


def _absorbable(view: GraphView, root: NodeProto, memo: NodeProto, reads: Counter[str]) -> bool:
    """Whether shape root ``root`` may move into ``memo``: its one value is read by the memo
    alone, and its tensor is not among the memo's inputs (read there by value)."""
    if not _is_root(view, root) or len(root.input) != 1 or len(root.output) != 1:
        return False
    return reads[root.output[0]] == 1 and root.input[0] not in memo.input


def _with_roots(memo: NodeProto, roots: list[NodeProto]) -> NodeProto:
    """``memo`` running ``roots`` first, on their tensors, which it reads instead of their
    values and compares by shape."""
    by_value = {r.output[0]: r.input[0] for r in roots}
    inputs = _ordered(by_value.get(i, i) for i in memo.input)
    shaped = sorted({inputs.index(t) for t in by_value.values()} | set(_shaped(memo)))
    return _memo_like(memo, SHAPE_MEMO, [*roots, *_body(memo).node], inputs, memo.output, shaped)


def _reshapes(view: GraphView, nodes: list[NodeProto]) -> list[NodeProto]:
    """``nodes`` with each memo node whose one value only a Reshape reads, as its target,
    made one ShapedReshape node with that Reshape (and the Transpose alone reading the
    Reshape's output, a head split's): three or four steps (Shape, memo, Reshape, Transpose)
    one."""
    reads = _counted_reads(view, nodes)
    readers: dict[str, list[NodeProto]] = {}
    for node in nodes:
        for name in dict.fromkeys(node.input):
            readers.setdefault(name, []).append(node)
    made: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for memo in (n for n in nodes if _is_memo(n) and len(n.output) == 1):
        target = memo.output[0]
        found = readers.get(target, [])
        if reads[target] == 1 and len(found) == 1 and _reshapes_by(found[0], target, memo):
            transpose = _sole_transpose(found[0].output[0], reads, readers)
            made[id(found[0])] = _shaped_reshape(memo, found[0], transpose)
            dropped.update([id(memo), id(transpose)] if transpose else [id(memo)])
    return [made.get(id(n), n) for n in nodes if id(n) not in dropped]


def _reshapes_by(node: NodeProto, target: str, memo: NodeProto) -> bool:
    """Whether ``node`` is a Reshape to ``target`` of a tensor that ``memo`` reads by shape
    alone or not at all."""
    if not is_onnx_op(node, "Reshape") or list(node.input[1:]) != [target]:
        return False
    x = node.input[0]
    return x != target and (x not in memo.input or list(memo.input).index(x) in _shaped(memo))


def _sole_transpose(
    value: str, reads: Counter[str], readers: dict[str, list[NodeProto]]
) -> NodeProto | None:
    """The Transpose naming its perm that alone reads ``value``, else None."""
    found = readers.get(value, [])
    if reads[value] != 1 or len(found) != 1 or _perm(found[0]) is None:
        return None
    return found[0]


def _perm(node: NodeProto | None) -> list[int] | None:
    """The ``perm`` of ``node`` when it is a Transpose that names one."""
    if node is None or not is_onnx_op(node, "Transpose") or len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    return list(attr.ints) if attr.name == "perm" else None


def _shaped_reshape(memo: NodeProto, reshape: NodeProto, transpose: NodeProto | None) -> NodeProto:
    """The ShapedReshape node running ``memo``'s body then ``reshape`` (then ``transpose``):
    its input 0 the reshaped tensor, then the memo's inputs."""
    x = reshape.input[0]
    inputs = _ordered([x, *memo.input])
    shaped = sorted({0} | {inputs.index(memo.input[i]) for i in _shaped(memo)})
    nodes = [*_body(memo).node, reshape, *([transpose] if transpose else [])]
    node = _memo_like(memo, SHAPED_RESHAPE, nodes, inputs, nodes[-1].output, shaped)
    if transpose is not None:
        node.attribute.append(helper.make_attribute("perm", _perm(transpose)))
    return node


def _body(memo: NodeProto) -> GraphProto:
    return next(a.g for a in memo.attribute if a.name == "body")


def _shaped(memo: NodeProto) -> list[int]:
    return next((list(a.ints) for a in memo.attribute if a.name == "shaped"), [])


def _memo_like(
    memo: NodeProto,
    op_type: str,
    nodes: list[NodeProto],
    inputs: list[str],
    outputs: Iterable[str],
    shaped: list[int],
) -> NodeProto:
    """A node like ``memo`` (its name, its body's name) of ``op_type``, running ``nodes``."""
    outputs = list(outputs)
    body = helper.make_graph(
        nodes,
        _body(memo).name,
        [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in inputs],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
        doc_string=BODY_DOC,
    )
    return helper.make_node(
        op_type, inputs, outputs, name=memo.name, domain=FUSED_DOMAIN, body=body, shaped=shaped
    )
