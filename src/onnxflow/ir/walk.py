"""Walking a graph's nested subgraphs (the bodies of If, Loop, Scan and the like)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from onnx import AttributeProto, GraphProto, NodeProto, TensorShapeProto, TypeProto


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


def scope_types(graph: GraphProto) -> dict[str, TypeProto]:
    """The types ``graph`` itself declares for its values (inputs, outputs, value_info, and
    initializers by their dtype and dims), not those of its subgraphs: a subgraph is a scope
    of its own, and sibling scopes may give one name different types."""
    types: dict[str, TypeProto] = {}
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.WhichOneof("value"):
            types.setdefault(vi.name, vi.type)
    for t in graph.initializer:
        if t.name not in types:
            tp = types[t.name] = TypeProto()
            tp.tensor_type.elem_type = t.data_type
            tp.tensor_type.shape.dim.extend(TensorShapeProto.Dimension(dim_value=d) for d in t.dims)
    return types
