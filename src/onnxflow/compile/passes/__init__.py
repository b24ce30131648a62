"""The compile pipeline: every graph rewrite, in one declared and ordered list, :data:`PIPELINE`.

The compiler (:mod:`onnxflow.compile.compiler`) runs the passes of :data:`PIPELINE`, in the
order listed, on every scope it compiles: the main graph, each subgraph (If branches, function
bodies, the bodies of the nodes the passes make) and each loop body, with what the loop-body
passes made of it. No kernel starts a pass. Each pass declares the :class:`Stage` it rewrites,
which says when it runs and what its function takes and returns:

- ``MODEL``: the main graph with its subgraphs, once, before anything else;
  ``(graph, facts) -> GraphProto | None`` (:mod:`.model_facts`);
- ``LOOP_BODY``: each Loop or Scan body, before its plans compile (the compiler offers the
  result to the loop's kernel, which compiles the forms); ``(forms, facts) -> BodyForms |
  None`` (:mod:`.body_forms`);
- ``GRAPH``: every graph about to compile, whatever its scope (a loop body's forms too);
  ``(view) -> list[NodeProto] | None`` (:mod:`.graph_view`);
- ``NODE``: each node as the compiler meets it, before its kernel is bound when none serves
  it and again once its step is bound; ``(site) -> Inlined | Computed | None``
  (:mod:`.node_site`).

Within a stage each pass sees what the ones before it left. A pass runs only with
``SessionOptions(optimize=True)`` unless it is ``always`` (function expansion is how a call
runs at all). A pass reads what an op is from its kernel's registration, through
:func:`.op_traits.traits_of` over the compiler's registry (never the module global, never a
list of op names); a fusion names only the ops of the pattern it matches.

To add a pass, a fusion say:

1. write one module here: its pattern, its replacement, and a function of its stage's
   signature (:mod:`.fuse_qdq` is a graph pass, :mod:`.fuse_distances` a loop-body one);
2. name the op the fused node runs in :mod:`onnxflow.ops.pass_made` and register its kernel in
   a module there (:mod:`onnxflow.ops.pass_made.kernels`, or one of its own for a family, such
   as :mod:`onnxflow.ops.pass_made.regions`), then run ``python tools/kernel_index.py`` (the
   registry imports the module the first time a plan looks its op up);
3. add its :class:`Pass` to :data:`PIPELINE` where it should run;
4. test it under ``tests/passes/``.

A graph pass then runs in every scope, loop bodies included, with no other wiring.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from onnx import GraphProto, NodeProto

from onnxflow.compile.passes import (
    batch_norm_affine,
    fold,
    fold_batch_norm,
    functions,
    fuse_attention,
    fuse_conv_activation,
    fuse_distances,
    fuse_matmul_bias,
    fuse_norms,
    fuse_qdq,
    fuse_qdq_conv,
    half,
    half_tables,
    hoist,
    memo_shapes,
    pointwise,
)
from onnxflow.compile.passes.body_forms import BodyFacts, BodyForms
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.compile.passes.model_facts import ModelFacts
from onnxflow.compile.passes.node_site import Computed, Inlined, NodeSite
from onnxflow.ops.pass_made import FUSED_DOMAIN

__all__ = [
    "PIPELINE",
    "Pass",
    "Stage",
    "graph_forms",
    "loop_body_forms",
    "model_forms",
    "node_rewrite",
]


class Stage(enum.Enum):
    """What a pass rewrites, and so when the compiler runs it (see the module)."""

    MODEL = "model"
    LOOP_BODY = "loop body"
    GRAPH = "graph"
    NODE = "node"


@dataclass(frozen=True)
class Pass:
    """One entry of the pipeline: its name, the stage it rewrites, its function, and whether
    it runs without ``optimize``."""

    name: str
    stage: Stage
    run: Callable[..., Any]
    always: bool = False


#: The passes in the order they run. Float16 widening sees the model as written, and the
#: batch norms it leaves between roundings become the scale and shift a region takes; hoisting
#: splits a loop body as written, before any fusion of what stays in it; the graph fusions come
#: before the shape memo, which groups what they leave; the norms before the pointwise regions,
#: which would take their elementwise tails (attention too: its scaling and mask Add); a
#: MatMul's bias after them, since a bias Add in a
#: region costs less (added while the region's chunk is in cache); function expansion and
#: folding meet the nodes one by one as they compile.
PIPELINE: tuple[Pass, ...] = (
    Pass("widen float16", Stage.MODEL, half.widen),
    Pass("batch norm as scale and shift", Stage.MODEL, batch_norm_affine.batch_norm_affine),
    Pass("hoist", Stage.LOOP_BODY, hoist.hoist),
    Pass("fuse row distances", Stage.LOOP_BODY, fuse_distances.fuse),
    Pass("fuse QDQ convolutions", Stage.GRAPH, fuse_qdq_conv.fuse_qdq_conv),
    Pass("fuse QDQ pairs", Stage.GRAPH, fuse_qdq.fuse_qdq),
    Pass("fold batch norm", Stage.GRAPH, fold_batch_norm.fold_batch_norm),
    Pass("fuse norms", Stage.GRAPH, fuse_norms.fuse_norms),
    Pass("fuse attention", Stage.GRAPH, fuse_attention.fuse_attention),
    Pass("fuse conv activations", Stage.GRAPH, fuse_conv_activation.fuse_conv_activation),
    Pass("float16 tables", Stage.GRAPH, half_tables.half_tables),
    Pass("pointwise regions", Stage.GRAPH, pointwise.fuse_pointwise),
    Pass("fuse MatMul bias", Stage.GRAPH, fuse_matmul_bias.fuse_matmul_bias),
    Pass("memo shapes", Stage.GRAPH, memo_shapes.memo_shapes),
    Pass("expand functions", Stage.NODE, functions.expand_functions, always=True),
    Pass("fold constants", Stage.NODE, fold.fold_constants),
)


#: The passes of each stage that run, in order, by (stage, optimize).
_RUNNING: dict[tuple[Stage, bool], tuple[Pass, ...]] = {
    (stage, optimize): tuple(p for p in PIPELINE if p.stage is stage and (optimize or p.always))
    for stage in Stage
    for optimize in (False, True)
}


def stage_passes(stage: Stage, optimize: bool) -> tuple[Pass, ...]:
    """The passes of ``stage`` that run, in order (with ``optimize`` or not)."""
    return _RUNNING[stage, optimize]


def model_forms(
    graph: GraphProto, facts: ModelFacts, optimize: bool
) -> tuple[GraphProto, dict[str, int]]:
    """The main graph as the model passes rewrite it, and the opsets the new nodes need."""
    made: dict[str, int] = {}
    for p in stage_passes(Stage.MODEL, optimize):
        new = p.run(graph, facts)
        if new is not None:
            graph, made = new, {FUSED_DOMAIN: 1}
    return graph, made


def graph_forms(view: GraphView, optimize: bool) -> tuple[Sequence[NodeProto], dict[str, int]]:
    """The nodes of ``view``'s graph as the graph passes rewrite them, and the opsets the new
    nodes need. Each pass sees the graph's nodes as the passes before it left them."""
    made: dict[str, int] = {}
    for p in stage_passes(Stage.GRAPH, optimize):
        new = p.run(view)
        if new is not None:
            view, made = replace(view, nodes=new), {FUSED_DOMAIN: 1}
    return view.nodes, made


def loop_body_forms(graph: GraphProto, facts: BodyFacts, optimize: bool) -> BodyForms | None:
    """``graph``, a loop body, as the loop-body passes rewrite it; None when none changes it."""
    forms = BodyForms(graph)
    changed = False
    for p in stage_passes(Stage.LOOP_BODY, optimize):
        new = p.run(forms, facts)
        if new is not None:
            forms, changed = new, True
    return forms if changed else None


def node_rewrite(site: NodeSite, optimize: bool) -> Inlined | Computed | None:
    """What the first node pass that takes the node makes of it, or None when none does."""
    for p in stage_passes(Stage.NODE, optimize):
        found = p.run(site)
        if found is not None:
            return found
    return None
