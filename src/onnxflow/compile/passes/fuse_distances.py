"""Loop-body pass: fusing row distances, ``ReduceSumSquare(Sub(A, b), axes=[-1])``.

A Scan that measures the distance from every row of a matrix A to each scanned vector b (the
k-nearest-neighbours models skl2onnx writes) computes per iteration ``A - b``, a broadcast over
rows of a few elements each that NumPy runs one short row at a time, then the squares' row sums.
When A stays the same object across iterations, the fused kernel keeps A transposed: the
difference then runs along long contiguous rows, and the sum over the short axis is one BLAS
product (a knn iteration: 6.0 -> 3.8 us). The values are the same differences and squares; only
the order of the additions in each row sum differs. The fused kernel is
:func:`onnxflow.ops.pass_made.distances.row_squared_distances`.

Like hoisting, this rewrites the body the generated loop runs; observed runs see the body as
written.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from onnx import GraphProto, NodeProto, TensorProto, helper, numpy_helper

from onnxflow.compile.passes.body_forms import BodyFacts, BodyForms
from onnxflow.compile.passes.graph_view import value_reads
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import FUSED_DOMAIN, ROW_SQUARED_DISTANCES


def fuse(forms: BodyForms, facts: BodyFacts) -> BodyForms | None:
    """The pass: ``forms`` with the pairs of the per-iteration body fused, or None if none is."""
    body = fuse_distances(forms.body, facts.rank)
    if body is None:
        return None
    return dataclasses.replace(forms, body=body, opsets={**forms.opsets, FUSED_DOMAIN: 1})


def fuse_distances(body: GraphProto, rank: Callable[[str], int | None]) -> GraphProto | None:
    """``body`` with each fusable Sub + ReduceSumSquare pair as one node, or None if none is.

    ``rank`` gives a value's static rank: A must be a matrix and b a vector.
    """
    if not any(n.op_type == "ReduceSumSquare" for n in body.node):
        return None
    reads = value_reads(body.node, body.output)  # any other read: not fused
    producer = {o: n for n in body.node for o in n.output if o}
    consts = {t.name: t for t in body.initializer}
    fused: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for node in body.node:
        sub = _fusable_sub(node, producer, reads, rank)
        axis = None if sub is None else _last_axis(node, consts)
        if sub is not None and axis is not None:
            fused[id(node)] = _fused_node(node, sub, axis)
            dropped.add(id(sub))
    if not fused:
        return None
    nodes = [fused.get(id(n), n) for n in body.node if id(n) not in dropped]
    graph = GraphProto()
    graph.CopyFrom(body)
    del graph.node[:]
    graph.node.extend(nodes)
    return graph


def _fusable_sub(
    node: NodeProto,
    producer: dict[str, NodeProto],
    reads: Counter[str],
    rank: Callable[[str], int | None],
) -> NodeProto | None:
    """The Sub that ``node``, a ReduceSumSquare, alone reads, of a matrix minus a vector."""
    if not is_onnx_op(node, "ReduceSumSquare"):
        return None
    sub = producer.get(node.input[0])
    if sub is None or not is_onnx_op(sub, "Sub") or reads[node.input[0]] != 1:
        return None
    if rank(sub.input[0]) != 2 or rank(sub.input[1]) != 1:
        return None
    return sub


def _fused_node(node: NodeProto, sub: NodeProto, axis: int) -> NodeProto:
    """The fused node replacing ``sub`` and ``node``, a ReduceSumSquare over ``axis``."""
    keep = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
    return helper.make_node(
        ROW_SQUARED_DISTANCES,
        list(sub.input),
        list(node.output),
        name=node.name or sub.name,
        domain=FUSED_DOMAIN,
        axis=axis,
        keepdims=keep,
    )


def _last_axis(node: NodeProto, consts: dict[str, TensorProto]) -> int | None:
    """The reduced axis when a ReduceSumSquare reduces exactly one axis, 1 or -1, else None."""
    axes: Any = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
    if axes is None and len(node.input) > 1 and node.input[1] in consts:
        axes = numpy_helper.to_array(consts[node.input[1]]).reshape(-1).tolist()
    return axes[0] if axes in ([1], [-1]) else None
