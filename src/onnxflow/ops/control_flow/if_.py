"""If, every version (1, 11, 13, 16, 19, 21, 23, 24, 25): run one of two branch graphs.

Both branches compile once; each may read outer-scope values (captures) and may produce
tensors, sequences or optionals. The branches must have as many outputs as the node.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.ops.registry import op
from onnxflow.runtime.executor import current_runner, unwatched_runner
from onnxflow.runtime.observe import run_in_scope
from onnxflow.runtime.stacking import as_bool


@op("If", 1, 11, 13, 16, 19, 21, 23, 24, 25, build=True)
def if_(
    node: NodeContext, *, then_branch: GraphProto, else_branch: GraphProto
) -> Callable[..., Any]:
    """Compile both branches once; return the callable that picks one by the condition."""
    for which, g in (("then_branch", then_branch), ("else_branch", else_branch)):
        if len(g.input):
            raise node.error(f"{which} has {len(g.input)} inputs, expected 0")
        if len(g.output) != node.n_outputs:
            raise node.error(
                f"{which} has {len(g.output)} outputs, expected {node.n_outputs} (the node's)"
            )
    then_sub, else_sub = node.subgraph(then_branch), node.subgraph(else_branch)
    label = node.describe()
    then_pick, else_pick = _picker(then_sub.positions), _picker(else_sub.positions)

    key, what = node.key, f"{label}: condition"

    def run(cond: Any, *captured: Any) -> tuple[Any, ...]:
        if cond.__class__ is np.ndarray and cond.size == 1:  # one element: its truth, as as_bool
            taken = bool(cond)
        else:
            taken = as_bool(cond, what)
        sub, pick = (then_sub, then_pick) if taken else (else_sub, else_pick)
        plain = unwatched_runner(sub.plan)  # no observer, no RunOptions: the branch's function
        if plain is not None:
            return tuple(plain(captured[pick] if pick.__class__ is slice else pick(captured)))
        branch = "then_branch" if taken else "else_branch"
        return tuple(run_in_scope(key, branch, 1, current_runner(sub.plan), sub.bind(captured)))

    return run


def _picker(positions: Sequence[int]) -> slice | Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """What picks a branch's captured values out of the node's (at ``positions``) without a
    Python call: a slice where they are consecutive (all of them, one, none), else an
    itemgetter."""
    start = positions[0] if positions else 0
    if tuple(positions) == tuple(range(start, start + len(positions))):
        return slice(start, start + len(positions))
    return operator.itemgetter(*positions)
