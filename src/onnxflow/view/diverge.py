"""The comparison part of a view's document, from :func:`onnxflow.compare.compare_walk`: each
value's error against the other side (the largest over the body runs), the first divergence,
the origins, and the path from each origin to the graph outputs."""

from __future__ import annotations

from typing import Any

import onnx

from onnxflow.compare import compare_walk
from onnxflow.ir.walk import subgraph_reads
from onnxflow.view.graph import MAIN, body_id, node_key
from onnxflow.view.stats import scope_graph


def divergences(
    model: onnx.ModelProto,
    feeds: dict[str, Any],
    against: str | onnx.ModelProto,
    rtol: float,
    atol: float,
) -> dict[str, Any]:
    """The document's ``compare`` part: ``against``, ``summary`` (the report's text),
    ``errors`` ({graph id: {value: {"abs", "rel", "ulp", "within", "exact", "reason"}}}),
    ``first`` and ``origins`` ({"graph", "node", "output", ...}), ``amplified`` (the nodes
    where an error grows: {"graph", "node", "op", "factor", "beyond"}) and ``path`` ({graph id:
    [node keys]}: the nodes downstream of an origin, up to the outputs)."""
    walk = compare_walk(model, feeds, against, rtol, atol)
    report = walk.report
    errors: dict[str, dict[str, Any]] = {}
    for (scope, name), diff in walk.measured.items():
        gid = scope_graph(model.graph, scope)
        if gid is None:
            continue
        old = errors.setdefault(gid, {}).get(name)
        if old is None or diff.max_abs_err > old["abs"]:
            errors[gid][name] = {
                "abs": diff.max_abs_err,
                "rel": diff.max_rel_err,
                "ulp": diff.max_ulp,
                "within": diff.within,
                "exact": diff.exact,
                "reason": diff.reason,
            }
    origins = [_place(model.graph, o) for o in report.origins]
    first = report.first_divergence
    path: dict[str, list[str]] = {}
    for origin in origins or ([_place(model.graph, first)] if first else []):
        if origin["graph"] is not None:
            _downstream(model.graph, origin["graph"], origin["node"], path)
    return {
        "against": report.against,
        "summary": report.summary(),
        "agree": report.agree,
        "errors": errors,
        "first": _place(model.graph, first) if first else None,
        "origins": origins,
        "amplified": [
            {
                "graph": _graph_id(model.graph, a.graph_path),
                "node": a.node,
                "op": a.op_type,
                "factor": a.factor,
                "beyond": a.beyond_tolerance,
            }
            for a in report.amplified
        ],
        "path": {gid: sorted(keys) for gid, keys in path.items()},
    }


def _place(graph: onnx.GraphProto, found: Any) -> dict[str, Any]:
    """An origin's or divergence's node, with the document id of the graph it sits in."""
    return {
        "graph": _graph_id(graph, found.graph_path),
        "node": found.node,
        "op": found.op_type,
        "output": found.output,
        "iteration": list(found.iteration),
        "abs": found.max_abs_err,
        "rel": found.max_rel_err,
    }


def _graph_id(graph: onnx.GraphProto, path: list[str]) -> str | None:
    """The document id of the body a report's ``graph_path`` (node, body, node, body...) names."""
    gid, current = MAIN, graph
    for owner, name in zip(path[::2], path[1::2]):
        node = next((n for n in current.node if node_key(n) == owner), None)
        attr = node and next((a for a in node.attribute if a.name == name), None)
        if node is None or attr is None:
            return None
        gid, current = body_id(gid, node, name), attr.g
    return gid


def _downstream(graph: onnx.GraphProto, gid: str, key: str, path: dict[str, set]) -> None:
    """Mark ``key`` and every node fed by it, in its graph; then the same from the node that
    holds the graph, in the graph above, up to the main graph."""
    chain = _chain(graph, gid)
    for current, current_id, owner in chain:
        marked = path.setdefault(current_id, set())
        start = key if current_id == gid else owner
        reached = {start}
        outputs = {o for n in current.node if node_key(n) == start for o in n.output}
        for node in current.node:
            if set(node.input) & outputs or _reads(node) & outputs:
                reached.add(node_key(node))
                outputs |= set(node.output)
        marked |= reached


def _reads(node: onnx.NodeProto) -> set[str]:
    return subgraph_reads([node])


def _chain(graph: onnx.GraphProto, gid: str) -> list[tuple[onnx.GraphProto, str, str]]:
    """``(graph, id, key of the node in it that leads down to gid)`` from the main graph down
    to ``gid`` (its own entry's key is '')."""
    chain = []
    current, current_id = graph, MAIN
    while True:
        below = _below(current, current_id, gid)
        if below is None:
            chain.append((current, current_id, ""))
            return chain
        node, body, body_gid = below
        chain.append((current, current_id, node_key(node)))
        current, current_id = body, body_gid


def _below(graph: onnx.GraphProto, gid: str, target: str) -> tuple[Any, Any, str] | None:
    if gid == target:
        return None
    for node in graph.node:
        for attr in node.attribute:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            bid = body_id(gid, node, attr.name)
            if target == bid or target.startswith(bid + "/"):
                return node, attr.g, bid
    return None
