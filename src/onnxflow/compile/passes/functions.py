"""Node pass: a call is compiled as the nodes of the function's body.

Two kinds of functions run this way: model-local functions (``ModelProto.functions``) and
operators whose schema defines them by a function body, when onnxflow has no direct kernel.
``onnx.inliner`` handles only the first kind on whole models; expanding at compile time, node by
node, serves both with one mechanism and keeps the function's own opset imports for its body.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto, TypeProto

from onnxflow.compile.passes.node_site import Inlined, NodeSite
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.schemas import op_schema
from onnxflow.ir.walk import subgraphs

_counter = itertools.count()


def expand_functions(site: NodeSite) -> Inlined | None:
    """The pass: a node no kernel serves as its function's body specialised for the call
    (:func:`expand_call`), under the function's opsets; None when no function defines it."""
    if site.kernel is not None or site.step is not None:
        return None
    fn = function_for(site.node, site.domain, site.opset, site.functions, site.types)
    if fn is None:
        return None
    return Inlined(expand_call(site.node, fn), function_opsets(fn, site.opsets))


def function_for(
    node: NodeProto,
    domain: str,
    opset: int,
    local: Mapping[tuple[str, str], FunctionProto],
    value_types: Mapping[str, TypeProto],
) -> FunctionProto | None:
    """Return the function that defines ``node``'s operator: the model-local one (``local``, by
    domain and name), else its schema's at ``opset``; None when there is neither.

    ``value_types`` are the types shape inference found, for schemas whose body depends on them.
    """
    found = local.get((domain, node.op_type))
    if found is not None:
        return found
    types = [value_types.get(name) if name else None for name in node.input]
    return schema_function(node, opset, types)


def function_opsets(fn: FunctionProto, opsets: Mapping[str, int]) -> dict[str, int]:
    """Return the opsets a call's body runs under: the caller's ``opsets``, then ``fn``'s own."""
    return {**opsets, **{normalize_domain(o.domain): o.version for o in fn.opset_import}}


def schema_function(
    node: NodeProto, opset: int, input_types: list[TypeProto | None]
) -> FunctionProto | None:
    """Return the function body that defines ``node``'s operator at ``opset``, if any: the
    schema's context-dependent body when every input type is known, else its context-free
    body."""
    schema = op_schema(node.domain, node.op_type, opset)
    if schema is None:
        return None
    raw = b""
    if schema.has_context_dependent_function and all(t is not None for t in input_types):
        since = _latest(schema.context_dependent_function_opset_versions, opset)
        if since is not None:
            raw = schema.get_context_dependent_function_with_opset_version(
                since,
                node.SerializeToString(),
                [t.SerializeToString() for t in input_types if t is not None],
            )
    if not raw and schema.has_function:
        since = _latest(schema.function_opset_versions, opset)
        raw = b"" if since is None else schema.get_function_with_opset_version(since)
    return FunctionProto.FromString(raw) if raw else None


def _latest(versions: list[int], opset: int) -> int | None:
    """The newest of ``versions`` in force at ``opset``, or None."""
    return max((v for v in versions if v <= opset), default=None)


def expand_call(node: NodeProto, fn: FunctionProto) -> list[NodeProto]:
    """Return ``fn``'s body specialised for the call ``node``: names renamed, attributes bound."""
    prefix = f"{node.name or node.op_type}#{next(_counter)}/"
    mapping: dict[str, str] = {}
    for formal, actual in itertools.zip_longest(fn.input, node.input, fillvalue=""):
        if formal:
            mapping[formal] = actual
    for formal, actual in itertools.zip_longest(fn.output, node.output, fillvalue=""):
        if formal:
            mapping[formal] = actual
    for name in _defined_names(fn.node):
        mapping.setdefault(name, prefix + name)
    call_attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    return [_specialise(n, mapping, call_attrs, defaults) for n in fn.node]


def _defined_names(nodes: Iterable[NodeProto]) -> Iterable[str]:
    for n in nodes:
        yield from (o for o in n.output if o)
        for g in subgraphs(n):
            yield from (i.name for i in g.input)
            yield from (t.name for t in g.initializer)
            yield from _defined_names(g.node)


def _specialise(
    node: NodeProto,
    mapping: dict[str, str],
    call_attrs: dict[str, AttributeProto],
    defaults: dict[str, AttributeProto],
) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    _rename_node(out, mapping)
    kept = []
    for a in out.attribute:
        if a.ref_attr_name:
            source = call_attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if source is None:
                continue
            bound = AttributeProto()
            bound.CopyFrom(source)
            bound.name = a.name
            kept.append(bound)
        else:
            kept.append(a)
    del out.attribute[:]
    out.attribute.extend(kept)
    for g in subgraphs(out):
        _bind_graph_attrs(g, call_attrs, defaults)
    return out


def _bind_graph_attrs(
    g: GraphProto, call_attrs: dict[str, AttributeProto], defaults: dict[str, AttributeProto]
) -> None:
    for i, n in enumerate(g.node):
        g.node[i].CopyFrom(_specialise(n, {}, call_attrs, defaults))


def _rename_node(node: NodeProto, mapping: dict[str, str]) -> None:
    if mapping:
        node.input[:] = [mapping.get(x, x) if x else "" for x in node.input]
        node.output[:] = [mapping.get(x, x) if x else "" for x in node.output]
    for g in subgraphs(node):
        _rename_graph(g, mapping)


def _rename_graph(g: GraphProto, mapping: dict[str, str]) -> None:
    for vi in itertools.chain(g.input, g.output, g.value_info):
        vi.name = mapping.get(vi.name, vi.name)
    for t in g.initializer:
        t.name = mapping.get(t.name, t.name)
    for n in g.node:
        _rename_node(n, mapping)
