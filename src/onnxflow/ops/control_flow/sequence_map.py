"""SequenceMap (17): apply a body graph to each element of one or more sequences.

The first input is a sequence and sets the number of iterations; each further input is either a
sequence of the same length (its i-th element is passed) or a tensor (passed as is every time).
Each body output is collected into an output sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.ops.control_flow.body import loop_plan
from onnxflow.ops.registry import op
from onnxflow.runtime.loop import Every, run_loop
from onnxflow.runtime.stacking import Lister


@op("SequenceMap", 17, build=True)
def sequence_map(node: NodeContext, *, body: GraphProto) -> Callable[..., Any]:
    """Compile the body once; return the callable that maps it over the sequences."""
    n_in = node.n_inputs
    if len(body.input) != n_in:
        raise node.error(f"body has {len(body.input)} inputs, expected {n_in} (the node's)")
    if len(body.output) != node.n_outputs:
        raise node.error(
            f"body has {len(body.output)} outputs, expected {node.n_outputs} (the node's)"
        )
    # every body input is read as a row: an element of a sequence, or a tensor every time
    plan = loop_plan(node, body, [vi.name for vi in body.input], passes=False)
    label = node.describe()

    def run(*args: Any) -> tuple[list[Any], ...]:
        inputs, captured = args[:n_in], args[n_in:]
        if not isinstance(inputs[0], list):
            raise TypeError(
                f"{label}: input 0 must be a sequence, found {type(inputs[0]).__name__}"
            )
        count = len(inputs[0])
        for i, x in enumerate(inputs[1:], start=1):
            if isinstance(x, list) and len(x) != count:
                raise ValueError(
                    f"{label}: sequence input {i} has {len(x)} elements, expected {count} "
                    "(the length of input 0)"
                )
        rows = [x if isinstance(x, list) else Every(x) for x in inputs]
        sinks = [Lister() for _ in range(node.n_outputs)]
        run_loop(plan, captured, [], rows, count, sinks, total=count)
        return tuple(sink.items for sink in sinks)

    return run
