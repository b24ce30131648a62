"""Graph rewrites, one per module, each with its own tests.

- :mod:`.half`: float16 values held in float32, each op's result rounded to float16 (a model
  pass: :meth:`~onnxflow.compile.compiler.Compiler.compile_main` runs it on the main graph and
  its subgraphs before anything else);
- :mod:`.fold`: constant folding, node by node as the compiler meets them;
- :mod:`.functions`: function expansion, for nodes no kernel serves;
- :data:`GRAPH_PASSES`: rewrites of every graph before it compiles (:func:`graph_forms`):
  :mod:`.fuse_qdq`, :mod:`.fold_batch_norm`, then :mod:`.memo_shapes`;
- :data:`BODY_PASSES`: the loop-body passes, run by :func:`loop_body_forms` in this order:
  :mod:`.hoist` (invariant hoisting and scan-input batching), then :mod:`.fuse_distances`.

A pass reads what an op is from its kernel's registration (:class:`onnxflow.traits.Traits`),
never from lists of op names; a fusion names only the ops of the pattern it matches.

To add a loop-body fusion: write one module here with its pattern, replacement and a pass
function ``(forms, facts) -> BodyForms | None`` (:data:`~.forms.BodyPass`; see
:func:`.fuse_distances.fuse`), register the fused node's kernel in :mod:`onnxflow.ops.fused`,
add its test under ``tests/passes/``, and add the pass function to :data:`BODY_PASSES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from onnx import GraphProto, NodeProto

from onnxflow.compile.passes import fold_batch_norm, fuse_distances, fuse_qdq, hoist, memo_shapes
from onnxflow.compile.passes.forms import (
    FUSED_DOMAIN,
    BodyFacts,
    BodyForms,
    BodyPass,
    GraphPass,
    GraphView,
)
from onnxflow.ops.registry import REGISTRY

__all__ = [
    "BODY_PASSES",
    "GRAPH_PASSES",
    "BodyFacts",
    "BodyForms",
    "BodyPass",
    "GraphPass",
    "GraphView",
    "graph_forms",
    "loop_body_forms",
]

#: The graph passes in the order they run, each with the fused op it makes (the pass runs only
#: while that op's kernel is registered).
GRAPH_PASSES: tuple[tuple[GraphPass, str], ...] = (
    (fuse_qdq.fuse_qdq, fuse_qdq.FAKE_QUANTIZE),
    (fold_batch_norm.fold_batch_norm, fold_batch_norm.FOLD_BATCH_NORM),
    (memo_shapes.memo_shapes, memo_shapes.SHAPE_MEMO),
)


def graph_forms(
    graph: GraphProto, opsets: Mapping[str, int]
) -> tuple[Sequence[NodeProto], dict[str, int]]:
    """The nodes of ``graph`` as :data:`GRAPH_PASSES` rewrite them, and the opsets the new
    nodes need. Each pass sees the graph's nodes as the passes before it left it."""
    nodes: Sequence[NodeProto] = graph.node
    made: dict[str, int] = {}
    for run, fused_op in GRAPH_PASSES:
        if not REGISTRY.has_op(FUSED_DOMAIN, fused_op):
            continue
        new = run(GraphView(graph, nodes, opsets))
        if new is not None:
            nodes, made = new, {FUSED_DOMAIN: 1}
    return nodes, made


#: The loop-body passes in the order they run: hoisting first, as it splits the body as written.
BODY_PASSES: tuple[BodyPass, ...] = (
    hoist.hoist,
    fuse_distances.fuse,
)


def loop_body_forms(
    graph: GraphProto,
    element_inputs: Sequence[str],
    rank: Callable[[str], int | None],
    opset: int,
) -> BodyForms | None:
    """``graph``, a loop body, as :data:`BODY_PASSES` rewrite it; None when none changes it.

    ``element_inputs`` are the body inputs that take one element of a scanned sequence (none for
    Loop); ``rank`` gives a value's static rank when known; ``opset`` is the ai.onnx opset.
    """
    facts = BodyFacts(tuple(element_inputs), rank, opset)
    forms = BodyForms(graph)
    changed = False
    for run in BODY_PASSES:
        new = run(forms, facts)
        if new is not None:
            forms, changed = new, True
    return forms if changed else None
