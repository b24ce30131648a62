"""Graph pass: elementwise nodes computing on one float16 value become one table lookup.

A float16 model computed op by op (:mod:`.half`) holds its float16 values in float32 and rounds
each op's result with a ``HalfRound`` node. A value a HalfRound makes is one of at most 65536
float16 values (so is a float16 input, cast to float32 as the run starts), so a group of
elementwise nodes whose one varying input is such a value (every other input a scalar constant)
computes a function of those 65536 values: GELU written out as ``Pow, Mul, Add, Mul, Tanh,
Add, Mul, Mul``, or hardswish as ``Add, Clip, Mul, Div``, each op followed by its rounding, is
8 to 17 nodes that read and write the whole tensor.

The pass makes such a group one ``HalfTable`` node. Its NumPy form runs the group's nodes as
written (the ``body`` attribute); its compiled form runs them once, at compile time, on all
65536 float16 values, keeps the results as a table, and looks each element up in one pass
(:mod:`onnxflow.native._half`), so its results are the nodes' own, bit for bit. An input
element that is not a float16 value (it cannot be, after a HalfRound, but the lookup checks)
sends the call to the nodes as written.

A node joins when its kernel computes each output element from the inputs' elements at the
same index (:attr:`Traits.elementwise`, a ufunc or a pointwise instruction), it is pure, has
one output and no subgraph, and passes no input through unchanged. The group's last node (its
root) gives a float32 value and a new array, and only the root's value is read outside the
group; groups of fewer than :data:`MIN_NODES` nodes stay as written. The pass rewrites the
main graph only (not the bodies it makes). Runs that observe every value see a group as one
node; ``SessionOptions(optimize=False)`` keeps the nodes as written.
"""

from __future__ import annotations

import heapq
from collections import Counter

from onnx import AttributeProto, NodeProto, TensorProto, TypeProto, helper

from onnxflow.compile.passes.fold import may_fold
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.walk import scope_types
from onnxflow.ops.pass_made import FUSED_DOMAIN, HALF_ROUND, HALF_TABLE
from onnxflow.traits import NONE, Traits

#: Groups of fewer nodes stay as written.
MIN_NODES = 2
#: The most nodes a group takes (a bound on the pass's work per group).
MAX_NODES = 64
HALF = TensorProto.FLOAT16
#: The attributes of a Constant node giving one number.
_SCALAR_ATTRIBUTES = ("value", "value_float", "value_int")


def half_tables(view: GraphView) -> list[NodeProto] | None:
    """The main graph's nodes with each group described above as one ``HalfTable`` node, or
    None when there is none."""
    if not view.main or not any(_may_hold_halves(n) for n in view.nodes):
        return None
    scan = _Scan(view)
    starts = [n.output[0] for n in scan.nodes if scan.holds_halves(n)]
    if not starts:
        return None
    fused: dict[int, NodeProto] = {}
    for x in starts:
        group = scan.group(x)
        while group is not None:  # the largest first, then what is left of x's readers
            scan.taken.update(id(n) for n in group)
            fused[id(group[-1])] = scan.table_node(x, group)
            group = scan.group(x)
    if not fused:
        return None
    return [fused.get(id(n), n) for n in scan.nodes if id(n) not in scan.taken or id(n) in fused]


def _may_hold_halves(node: NodeProto) -> bool:
    """Whether ``node`` may start a group (:meth:`_Scan.holds_halves`), read from the node
    alone: a HalfRound, or a Cast to float32. A graph with none has no group, and the pass
    returns before reading the graph's traits, types and constants."""
    if _is_half_round(node):
        return True
    if node.op_type != "Cast" or normalize_domain(node.domain):
        return False
    return any(a.name == "to" and a.i == TensorProto.FLOAT for a in node.attribute)


def _is_half_round(node: NodeProto) -> bool:
    return node.op_type == HALF_ROUND and normalize_domain(node.domain) == FUSED_DOMAIN


class _Scan:
    """What finding the groups reads: the nodes in order, their readers and traits, the
    scalar constants (initializers and Constant nodes), the declared types, and the nodes
    already taken by a group."""

    def __init__(self, view: GraphView) -> None:
        self.view = view
        self.nodes = list(view.nodes)  # one Python object per node: ids name them
        self.traits = {id(n): view.traits(n) for n in self.nodes}
        self.order = {id(n): k for k, n in enumerate(self.nodes)}
        self.readers: dict[str, list[NodeProto]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(i for i in node.input if i):
                self.readers.setdefault(name, []).append(node)
        self.reads = view.reads()
        self.types = scope_types(view.graph)
        self.scalars = self._scalars()
        self.folded = self._folded()
        self.taken: set[int] = set()

    def _scalars(self) -> dict[str, TensorProto | NodeProto]:
        """The scalar constants by name: initializers the caller cannot override, Constant
        nodes, and joining nodes computing from scalar constants alone (a Constant rounded)."""
        constants = self.view.constants()
        scalars: dict[str, TensorProto | NodeProto] = {
            t.name: t
            for t in self.view.graph.initializer
            if t.name in constants and _size(list(t.dims)) == 1
        }
        for node in self.nodes:
            ins = [i for i in node.input if i]
            if node.output and (
                _scalar_constant(node)
                or (ins and all(i in scalars for i in ins) and self._joins(node))
            ):
                scalars[node.output[0]] = node
        return scalars

    def _folded(self) -> set[str]:
        """The values the compiler computes from constants alone (the fold pass's rule,
        :func:`~onnxflow.compile.passes.fold.may_fold`): a group on one of them would only keep
        it from folding, since a table node holds its nodes as a subgraph."""
        folded = set(self.view.constants())
        for node in self.nodes:
            traits = self.traits[id(node)] or NONE  # no kernel known: a function's, pure
            if may_fold(traits, node, all(i in folded for i in node.input if i)):
                folded.update(o for o in node.output if o)
        return folded

    def holds_halves(self, node: NodeProto) -> bool:
        """Whether ``node``'s value holds float16 values in float32 and is no constant: a
        HalfRound's, or a Cast to float32 of a value declared float16 (a float16 input's)."""
        if not node.output or node.output[0] in self.scalars or node.output[0] in self.folded:
            return False
        if _is_half_round(node):
            return True
        if node.op_type != "Cast" or normalize_domain(node.domain) or not node.input:
            return False
        tp = self.types.get(node.input[0])
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return to == TensorProto.FLOAT and tp is not None and tp.tensor_type.elem_type == HALF

    def group(self, x: str) -> list[NodeProto] | None:
        """The largest group computing on ``x`` whose root alone is read outside it, in graph
        order, or None when it would have fewer than MIN_NODES nodes."""
        members = self._members(x)
        best: list[NodeProto] = []
        for root in reversed(members):
            if not self._root(root):
                continue
            group = _ancestors(root, members)
            if len(group) > len(best) and self._closed(group):
                best = group
        return best if len(best) >= MIN_NODES else None

    def _members(self, x: str) -> list[NodeProto]:
        """The nodes computing from ``x``, the values they make and scalar constants alone, in
        graph order (a node is met after every node making its inputs)."""
        made, members = {x}, []
        heap = [(self.order[id(n)], n) for n in self.readers.get(x, ())]
        heapq.heapify(heap)
        seen: set[int] = set()
        while heap and len(members) < MAX_NODES:
            _, node = heapq.heappop(heap)
            if id(node) in seen or id(node) in self.taken or not self._joins(node):
                continue
            seen.add(id(node))
            if not all(i in made or i in self.scalars for i in node.input if i):
                continue
            members.append(node)
            made.add(node.output[0])
            for reader in self.readers.get(node.output[0], ()):
                heapq.heappush(heap, (self.order[id(reader)], reader))
        return members

    def _joins(self, node: NodeProto) -> bool:
        traits = self.traits[id(node)]
        if traits is None or not _elementwise(traits) or len(node.output) != 1:
            return False
        graphs = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
        return not any(a.type in graphs for a in node.attribute)

    def _root(self, node: NodeProto) -> bool:
        """Whether ``node`` may end a group: it makes a new float32 array (a HalfRound always
        does; other nodes when their value is declared float32)."""
        traits = self.traits[id(node)]
        tp = self.types.get(node.output[0])
        float32 = _is_half_round(node) or (
            tp is not None and tp.tensor_type.elem_type == TensorProto.FLOAT
        )
        return float32 and traits is not None and (traits.fresh or traits.ufunc is not None)

    def _closed(self, group: list[NodeProto]) -> bool:
        """Whether only the group's last node gives a value read outside it."""
        inside = Counter(name for n in group for name in n.input)
        return all(self.reads[n.output[0]] == inside[n.output[0]] for n in group[:-1])

    def table_node(self, x: str, group: list[NodeProto]) -> NodeProto:
        """The ``HalfTable`` node standing for ``group`` (its root last), reading ``x``."""
        initializers, constant_nodes = self._constants_read(group)
        root = group[-1]
        body = helper.make_graph(
            [*constant_nodes, *group],
            f"half_table_{root.name or root.output[0]}",
            [helper.make_value_info(x, self._type(x))],
            [helper.make_value_info(root.output[0], self._type(root.output[0]))],
            initializer=initializers,
        )
        return helper.make_node(
            HALF_TABLE, [x], list(root.output), name=root.name, domain=FUSED_DOMAIN, body=body
        )

    def _constants_read(self, group: list[NodeProto]) -> tuple[list[TensorProto], list[NodeProto]]:
        """The scalar initializers ``group`` reads, and the nodes making the other scalar
        constants it reads (with those they read), in graph order."""
        stack = [i for n in group for i in n.input if i in self.scalars]
        initializers: dict[str, TensorProto] = {}
        nodes: dict[int, NodeProto] = {}
        while stack:
            made = self.scalars[stack.pop()]
            if isinstance(made, TensorProto):
                initializers[made.name] = made
            elif id(made) not in nodes:
                nodes[id(made)] = made
                stack.extend(i for i in made.input if i)
        ordered = sorted(nodes.values(), key=lambda n: self.order[id(n)])
        return list(initializers.values()), ordered

    def _type(self, name: str) -> TypeProto:
        return self.types.get(name) or helper.make_tensor_type_proto(TensorProto.FLOAT, None)


def _elementwise(traits: Traits) -> bool:
    """Whether the kernel computes each output element from the inputs' elements at its index
    alone, and passes no input through as it is."""
    each = traits.elementwise or traits.ufunc is not None or traits.pointwise is not None
    return each and traits.pure and not traits.passthrough


def _ancestors(root: NodeProto, members: list[NodeProto]) -> list[NodeProto]:
    """``root`` and the members it computes from, in graph order."""
    by_output = {n.output[0]: n for n in members}
    found = {id(root)}
    stack = [root]
    while stack:
        for name in stack.pop().input:
            node = by_output.get(name)
            if node is not None and id(node) not in found:
                found.add(id(node))
                stack.append(node)
    return [n for n in members if id(n) in found]


def _scalar_constant(node: NodeProto) -> bool:
    """Whether ``node`` is a Constant giving one number."""
    if node.op_type != "Constant" or normalize_domain(node.domain) or len(node.attribute) != 1:
        return False
    a = node.attribute[0]
    if a.name not in _SCALAR_ATTRIBUTES:
        return False
    return a.name != "value" or _size(list(a.t.dims)) == 1


def _size(dims: list[int]) -> int:
    size = 1
    for d in dims:
        size *= d
    return size
