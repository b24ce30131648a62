"""A loop body compiled once into a :class:`~onnxflow.compile.plan.LoopPlan`, for Loop, Scan
and SequenceMap alike; :mod:`onnxflow.runtime.loop` runs it.

The compile pipeline's loop-body passes (:mod:`onnxflow.compile.passes`) may have moved work out
of the body: then the body compiles as two plans, the pre-plan, run once when the loop starts,
and the per-iteration remainder, which also takes each batched value's row and each invariant
value. The body as written is compiled only for the runs that watch it node by node.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.compile.plan import Layout, LoopPlan


def loop_plan(
    node: NodeContext,
    graph: GraphProto,
    element_inputs: Sequence[str],
    *,
    counter: bool = False,
    passes: bool = True,
) -> LoopPlan:
    """Compile ``graph``, the body of ``node``, into the plan of its loop.

    ``element_inputs``: the body inputs read as a row of a sequence each iteration, after the
    loop-carried ones; ``counter``: the body starts with Loop's (iteration number, condition)
    inputs; ``passes``: whether the loop-body passes may rewrite the body (rows must then be
    rows of arrays, as in Scan).
    """
    head = 2 if counter else len(element_inputs)
    forms = node.loop_body_forms(graph, element_inputs) if passes else None
    if forms is None:
        body = node.subgraph(graph)
        return LoopPlan(
            label=node.describe(),
            key=node.key,
            layout=Layout(counter, len(graph.input) - head, len(element_inputs)),
            body=body,
        )
    # the pre-plan sees whole sequences where the body has rows: the body's types do not apply
    pre = None if forms.pre is None else node.subgraph(forms.pre)
    # the same values as the body as written, rows of batched ones too
    body = node.subgraph(forms.body, forms.opsets, declared=graph)
    return LoopPlan(
        label=node.describe(),
        key=node.key,
        layout=Layout(counter, len(graph.input) - head, len(element_inputs) + len(forms.batched)),
        body=body,
        pre=pre,
        n_invariants=len(forms.invariants),
        compile_as_written=node.subgraph_later(graph),  # LoopPlan.plain says when and why
    )
