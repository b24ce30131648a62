"""What a loop-body pass reads (:class:`BodyFacts`) and makes (:class:`BodyForms`).

A loop-body pass is a function ``(forms, facts) -> BodyForms | None``: the body as the passes
before it left it, and what is known about it, give new forms, or None when the pass changes
nothing. :data:`onnxflow.compile.passes.BODY_PASSES` lists them in the order they run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from onnx import GraphProto, NodeProto, ValueInfoProto

from onnxflow.ir.walk import subgraph_reads
from onnxflow.ops.registry import normalize_domain

#: The private domain of fused nodes (never in a model: made by the passes only).
FUSED_DOMAIN = "onnxflow.fused"


@dataclass(frozen=True)
class BodyFacts:
    """What the passes may know about a loop body besides its graph."""

    #: The body inputs that take one element of a scanned sequence each iteration (none for Loop).
    element_inputs: tuple[str, ...]
    #: A value's static rank, when known.
    rank: Callable[[str], int | None]
    #: The ai.onnx opset of the loop node's scope.
    opset: int


@dataclass(frozen=True)
class BodyForms:
    """A loop body split into what runs once and what runs each iteration.

    ``pre`` (None when nothing moved) runs once before the first iteration: its formal inputs
    are the whole scanned sequences, time first, under the body's element input names, and its
    outputs the ``invariants`` then the ``batched`` values (whole sequences). ``body`` runs each
    iteration: it takes the body's own inputs, then one row per batched value, then the
    invariants. ``opsets`` are the domains ``body`` uses beyond the loop node's (fused kernels').
    """

    body: GraphProto
    pre: GraphProto | None = None
    invariants: tuple[str, ...] = ()
    batched: tuple[str, ...] = ()
    opsets: Mapping[str, int] = field(default_factory=dict)


#: A loop-body pass: new forms, or None when it changes nothing.
BodyPass = Callable[[BodyForms, BodyFacts], "BodyForms | None"]


@dataclass(frozen=True)
class GraphView:
    """What a graph pass reads: the graph as written (its inputs, initializers and outputs
    stay), its nodes as the passes before this one left them, and the opsets its scope
    imports."""

    graph: GraphProto
    nodes: Sequence[NodeProto]
    opsets: Mapping[str, int]

    def constants(self) -> set[str]:
        """The initializers the caller cannot override (not also graph inputs)."""
        graph = self.graph
        names = {t.name for t in graph.initializer}
        names |= {t.values.name for t in graph.sparse_initializer}
        return names - {vi.name for vi in graph.input}

    def opset(self, domain: str = "") -> int:
        """The version the scope imports for ``domain`` (0 when not imported)."""
        return self.opsets.get(normalize_domain(domain), 0)

    def names(self) -> set[str]:
        """The names the graph defines: its inputs, initializers and node outputs so far."""
        graph = self.graph
        found = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
        found.update(o for n in self.nodes for o in n.output if o)
        return found

    def reads(self) -> Counter[str]:
        """How many times each value is read: :func:`value_reads` of the nodes so far."""
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


def is_default(node: NodeProto, op_type: str) -> bool:
    """Whether ``node`` is the standard (ai.onnx) operator ``op_type``."""
    return node.op_type == op_type and node.domain in ("", "ai.onnx")


def fresh_name(base: str, used: set[str]) -> str:
    """``base``, or ``base`` with a number after it, not in ``used`` (added to it)."""
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name
