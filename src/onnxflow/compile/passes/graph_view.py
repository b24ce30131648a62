"""What a graph pass reads: :class:`GraphView`, one graph as the passes before it left it.

A graph pass is a function ``(view) -> list[NodeProto] | None``: the graph's nodes rewritten,
or None when the pass changes nothing. :data:`onnxflow.compile.passes.PIPELINE` lists them, in
the order they run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from onnx import GraphProto, NodeProto, ValueInfoProto

from onnxflow.compile.passes.op_traits import traits_of
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.walk import subgraph_reads
from onnxflow.ops.registry import Registry
from onnxflow.traits import Traits


@dataclass(frozen=True)
class GraphView:
    """What a graph pass reads: the graph as written (its inputs, initializers and outputs
    stay), its nodes as the passes before this one left them, the opsets its scope imports and
    the kernels the compiler compiles with."""

    graph: GraphProto
    nodes: Sequence[NodeProto]
    opsets: Mapping[str, int]
    registry: Registry
    #: Whether the graph is the model's main graph (not a body, branch or function).
    main: bool = False

    def constants(self) -> set[str]:
        """The initializers the caller cannot override (not also graph inputs)."""
        graph = self.graph
        names = {t.name for t in graph.initializer}
        names |= {t.values.name for t in graph.sparse_initializer}
        return names - {vi.name for vi in graph.input}

    def opset(self, domain: str = "") -> int:
        """The version the scope imports for ``domain`` (0 when not imported)."""
        return self.opsets.get(normalize_domain(domain), 0)

    def traits(self, node: NodeProto) -> Traits | None:
        """What the kernel serving ``node`` in this scope promises (:func:`.traits_of`)."""
        return traits_of(node, self.opsets, self.registry)

    def names(self) -> set[str]:
        """The names the graph defines: its inputs, initializers and node outputs so far."""
        graph = self.graph
        found = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
        found.update(o for n in self.nodes for o in n.output if o)
        return found

    def reads(self) -> Counter[str]:
        """How many times each value is read: :func:`value_reads` of the nodes so far. Counted
        once per view (the passes that leave the graph as it is share it): not to be changed."""
        return self._reads

    @cached_property
    def _reads(self) -> Counter[str]:
        return value_reads(self.nodes, self.graph.output)


#: A graph pass: the graph's nodes rewritten, or None when the pass changes nothing.
GraphPass = Callable[[GraphView], "list[NodeProto] | None"]


def value_reads(nodes: Iterable[NodeProto], outputs: Iterable[ValueInfoProto]) -> Counter[str]:
    """How many times each value is read: by ``nodes``, by their subgraphs (from the outer
    scope) and as one of the graph's ``outputs``. A pass fuses a value away only when the
    fused node is its one reader."""
    nodes = list(nodes)
    reads = Counter(i for n in nodes for i in n.input if i)
    reads.update(vi.name for vi in outputs)
    reads.update(subgraph_reads(nodes))
    return reads
