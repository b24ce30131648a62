"""Walking a graph's nested subgraphs (the bodies of If, Loop, Scan and the like)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from onnx import AttributeProto, GraphProto, NodeProto


def subgraphs(node: NodeProto) -> Iterator[GraphProto]:
    """The graphs held in ``node``'s attributes (GRAPH and GRAPHS), in attribute order."""
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            yield from a.graphs


def subgraph_reads(nodes: Iterable[NodeProto]) -> set[str]:
    """Every name the subgraphs of ``nodes`` read (node inputs and graph outputs), nested too."""
    reads: set[str] = set()
    for n in nodes:
        for g in subgraphs(n):
            reads |= {i for m in g.node for i in m.input if i}
            reads |= {vi.name for vi in g.output}
            reads |= subgraph_reads(g.node)
    return reads
