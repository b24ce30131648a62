"""The run part of a view's document: each value's statistics (main graph, and every body run,
one entry per iteration), each node's time, the top nodes by time.

Statistics, not tensors: shape, dtype, min, max, mean, std, NaN and Inf counts, a histogram of
:data:`BINS` bins over the finite values; the tensors' data only when asked (``values=True``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnxflow.observers import Profiler, Trace
from onnxflow.options import SessionOptions
from onnxflow.session import InferenceSession
from onnxflow.view.graph import MAIN, body_id, node_key

#: Bins of each value's histogram.
BINS = 16
#: Body runs kept per control-flow node (iterations past it are counted, not kept).
ITERATIONS = 256
#: With ``values=True``, the most elements of one value kept in the document.
VALUE_ELEMENTS = 10_000


def stats_of(value: Any, with_data: bool = False) -> dict[str, Any]:
    """Statistics of one value (for a non-tensor: its kind and length only)."""
    if value is None:
        return {"shape": None, "dtype": "empty optional"}
    if isinstance(value, list | dict):
        return {"shape": [len(value)], "dtype": "sequence" if isinstance(value, list) else "map"}
    arr = np.asarray(value)
    found: dict[str, Any] = {"shape": list(arr.shape), "dtype": str(arr.dtype), "size": arr.size}
    if arr.size and (arr.dtype.kind in "biuf" or arr.dtype.name == "bfloat16"):
        found.update(_numbers(arr.astype(np.float64)))
    if with_data and arr.size and arr.dtype.kind in "biuf":
        found["data"] = arr.astype(np.float64).ravel()[:VALUE_ELEMENTS].tolist()
    return found


def _numbers(data: np.ndarray) -> dict[str, Any]:
    finite = data[np.isfinite(data)]
    found: dict[str, Any] = {
        "nan": int(np.isnan(data).sum()),
        "inf": int(np.isinf(data).sum()),
    }
    if finite.size:
        low, high = float(finite.min()), float(finite.max())
        counts, _ = np.histogram(finite, bins=BINS, range=(low, high) if high > low else None)
        found.update(
            min=low,
            max=high,
            mean=float(finite.mean()),
            std=float(finite.std()),
            hist=counts.tolist(),
        )
    return found


def collect(
    sess: InferenceSession, model: onnx.ModelProto, feeds: dict[str, Any], values: bool = False
) -> dict[str, Any]:
    """Run the model on ``feeds`` twice: traced as written (``optimize=False``: every value of
    the graph drawn, every body run kept up to :data:`ITERATIONS` per node), then ``sess``
    profiled node by node, bodies included (the nodes the compiler folded or fused into
    others have no time of their own); the document's ``stats``, ``iterations``, ``times``
    and ``top`` parts."""
    trace = Trace(iterations=range(ITERATIONS), main=True)
    as_written = InferenceSession(model, SessionOptions(optimize=False))
    as_written.run(None, feeds, observers=[trace])
    profiler = Profiler(bodies=True)
    sess.run(None, feeds, observers=[profiler])
    main = dict(trace.records.get((), {}))
    main.update({k: v for k, v in feeds.items()})
    stats = {MAIN: {n: stats_of(v, values) for n, v in main.items()}}
    iterations: dict[str, Any] = {}
    for scope, record in trace.records.items():
        if scope:
            _iteration(iterations, model.graph, scope, record, values)
    times = _times(model.graph, profiler)
    top = sorted(
        ([gid, key, t] for gid, nodes in times.items() for key, t in nodes.items()),
        key=lambda row: -row[2],
    )
    return {"stats": stats, "iterations": iterations, "times": times, "top": top[:20]}


def _iteration(
    iterations: dict[str, Any],
    graph: onnx.GraphProto,
    scope: tuple[Any, ...],
    record: dict[str, Any],
    values: bool,
) -> None:
    """Add one body run's values to its graph's entry: ``{"labels": [...], "values": {name:
    [stats or None per run]}}``."""
    gid = scope_graph(graph, scope)
    if gid is None:
        return
    entry = iterations.setdefault(gid, {"labels": [], "values": {}})
    at = len(entry["labels"])
    entry["labels"].append("/".join(str(k) for _, k in scope if not isinstance(k, str)) or "run")
    for name, value in record.items():
        runs = entry["values"].setdefault(name, [])
        runs.extend([None] * (at - len(runs)))
        runs.append(stats_of(value, values))


def scope_graph(graph: onnx.GraphProto, scope: tuple[Any, ...]) -> str | None:
    """The document id of the body a Trace scope ran (None when the model has no such body)."""
    gid, current = MAIN, graph
    for owner, key in scope:
        node = next((n for n in current.node if node_key(n) == owner), None)
        if node is None:
            return None
        name = key if isinstance(key, str) else "body"
        attr = next((a for a in node.attribute if a.name == name), None)
        if attr is None or attr.type != onnx.AttributeProto.GRAPH:
            return None
        gid, current = body_id(gid, node, name), attr.g
    return gid


def _times(graph: onnx.GraphProto, profiler: Profiler) -> dict[str, dict[str, float]]:
    """``{graph id: {node key: seconds}}``: each node's total time over the run (a body's node
    summed over its iterations), by op type and key as the profiler saw them."""
    seen = {key: total for key, (total, _) in profiler.by_node.items()}
    found: dict[str, dict[str, float]] = {}

    def visit(g: onnx.GraphProto, gid: str) -> None:
        for node in g.node:
            seconds = seen.get((node.op_type, node_key(node)))
            if seconds is not None:
                found.setdefault(gid, {})[node_key(node)] = seconds
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g, body_id(gid, node, attr.name))

    visit(graph, MAIN)
    return found
