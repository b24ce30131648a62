"""A loop body compiled once into a :class:`~onnxflow.compile.plan.LoopPlan`, for Loop, Scan
and SequenceMap alike; :mod:`onnxflow.runtime.loop` runs it.

When the passes (:mod:`onnxflow.compile.passes`) can move work out of the body, the body compiles as
two plans: the pre-plan, run once when the loop starts, and the per-iteration remainder, which
also takes each batched value's row and each invariant value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.compile.passes import loop_body_forms
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
    inputs; ``passes``: whether hoisting and fusions may rewrite the body (rows must then be
    rows of arrays, as in Scan).
    """
    head = 2 if counter else len(element_inputs)
    forms = None
    if node.optimize and passes:
        rank = _rank_lookup(node, graph)
        forms = loop_body_forms(graph, element_inputs, rank, node.opset_of(""))
    plain = node.subgraph(graph)  # observed runs show every node of every iteration
    # the pre-plan sees whole sequences where the body has rows: the body's types do not apply
    pre = None if forms is None or forms.pre is None else node.subgraph(forms.pre)
    body = plain
    if forms is not None:  # the same values as the body as written, rows of batched ones too
        body = node.subgraph(forms.body, forms.opsets, declared=graph)
    n_rows = 0 if forms is None else len(forms.batched)
    return LoopPlan(
        label=node.describe(),
        key=node.key,
        layout=Layout(counter, len(graph.input) - head, len(element_inputs) + n_rows),
        plain=plain,
        body=body,
        pre=pre,
        n_invariants=0 if forms is None else len(forms.invariants),
    )


def _rank_lookup(node: NodeContext, graph: GraphProto) -> Callable[[str], int | None]:
    types = node.types_in(graph)

    def rank(name: str) -> int | None:
        tp = types.get(name)
        if tp is None or not tp.tensor_type.HasField("shape"):
            return None
        return len(tp.tensor_type.shape.dim)

    return rank
