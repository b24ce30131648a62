"""Walking a graph's nested subgraphs (the bodies of If, Loop, Scan and the like)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from google.protobuf.message import Message
from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TensorProto,
    TensorShapeProto,
    TypeProto,
)


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


#: Unread initializers fewer than this are left in a model (:func:`without_unread_initializers`).
PRUNE_FROM = 1024
#: Nor are they pruned when the initializers kept would take more bytes than this to copy.
PRUNE_COPY_LIMIT = 1 << 28


def without_unread_initializers(model: ModelProto) -> ModelProto:
    """``model``, or a copy of it without the main graph's initializers that nothing reads (no
    node at any depth, no graph output, and not a graph input), as onnxruntime drops them at
    load: shape inference, the checker and the compiler then never walk them.

    Only worth it, and done, when there are at least :data:`PRUNE_FROM` of them and the
    initializers kept take at most :data:`PRUNE_COPY_LIMIT` bytes (they are copied).
    """
    graph = model.graph
    names = [t.name for t in graph.initializer]
    if len(names) < PRUNE_FROM:
        return model
    read = names_read(graph) | {vi.name for vi in graph.input}
    keep = [k for k, name in enumerate(names) if name in read]
    if len(names) - len(keep) < PRUNE_FROM:
        return model
    kept = [graph.initializer[k] for k in keep]
    if sum(t.ByteSize() for t in kept) > PRUNE_COPY_LIMIT:
        return model
    pruned = ModelProto()
    _copy_fields(model, pruned, skip="graph")
    _copy_fields(graph, pruned.graph, skip="initializer")
    pruned.graph.initializer.extend(kept)
    return pruned


def _copy_fields(source: Message, target: Message, skip: str) -> None:
    """Copy every field of ``source`` into ``target`` but ``skip``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def names_read(graph: GraphProto) -> set[str]:
    """Every name ``graph`` reads: its nodes' inputs, its subgraphs' (at any depth) and its
    outputs."""
    read = {name for node in graph.node for name in node.input if name}
    read.update(vi.name for vi in graph.output)
    return read | subgraph_reads(graph.node)


def scope_types(graph: GraphProto) -> ScopeTypes:
    """The types ``graph`` itself declares for its values (inputs, outputs, value_info, and
    initializers by their dtype and dims), not those of its subgraphs: a subgraph is a scope
    of its own, and sibling scopes may give one name different types."""
    return ScopeTypes(graph)


class ScopeTypes(Mapping[str, TypeProto]):
    """:func:`scope_types` of one graph: an initializer's type is made when first looked up
    (a graph may hold a million initializers that no node reads)."""

    def __init__(self, graph: GraphProto) -> None:
        self._types: dict[str, TypeProto] = {}
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.type.WhichOneof("value"):
                self._types.setdefault(vi.name, vi.type)
        self._graph = graph
        self._initializers: dict[str, TensorProto] | None = None

    def __getitem__(self, name: str) -> TypeProto:
        found = self._types.get(name)
        if found is not None:
            return found
        t = self._by_name().get(name)
        if t is None:
            raise KeyError(name)
        tp = self._types[name] = TypeProto()
        tp.tensor_type.elem_type = t.data_type
        tp.tensor_type.shape.dim.extend(TensorShapeProto.Dimension(dim_value=d) for d in t.dims)
        return tp

    def __contains__(self, name: object) -> bool:
        return name in self._types or name in self._by_name()

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name().keys() | self._types.keys())

    def __len__(self) -> int:
        return len(self._by_name().keys() | self._types.keys())

    def initializers(self) -> Mapping[str, TensorProto]:
        """The graph's initializers by name (the first of a name, as declared types are)."""
        return self._by_name()

    def _by_name(self) -> dict[str, TensorProto]:
        if self._initializers is None:
            self._initializers = {t.name: t for t in reversed(self._graph.initializer)}
        return self._initializers
