"""SequenceMap (17): apply a body graph to each element of one or more sequences.

The first input is a sequence and sets the number of iterations; each further input is either a
sequence of the same length (its i-th element is passed) or a tensor (passed as is every time).
Each body output is collected into an output sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import GraphProto

from onnxflow.compile.compiler import NodeContext
from onnxflow.ops.control_flow.common import BODY_ERRORS, iteration_error, terminated
from onnxflow.ops.registry import op
from onnxflow.runtime.context import current_run_options
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.observe import current_observation


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
    sub = node.subgraph(body)
    names = [vi.name for vi in body.input]
    label = node.describe()
    key = node.key

    def run(*args: Any) -> tuple[list[Any], ...]:
        inputs, captured = args[:n_in], sub.bind(args[n_in:])
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
        results: list[list[Any]] = [[] for _ in range(node.n_outputs)]
        options = current_run_options()
        observation = current_observation()
        body_run = current_runner(sub.plan)
        t = 0
        try:
            for t in range(count):
                if options is not None and options.terminate:
                    raise terminated()
                elements = [x[t] if isinstance(x, list) else x for x in inputs]
                if observation is not None:
                    observation.enter(key, t, count)
                    observation.inputs(names, elements)
                try:
                    values = body_run([*elements, *captured])
                finally:
                    if observation is not None:
                        observation.leave()
                for out, value in zip(results, values):
                    out.append(value)
        except BODY_ERRORS as exc:
            raise iteration_error(label, t, exc) from exc
        return tuple(results)

    return run
