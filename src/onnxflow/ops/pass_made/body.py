"""How a pass-made node runs the nodes it stands for as written: its ``body`` subgraph."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import GraphProto

from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.observe import run_in_scope


def body_call(node: Any, body: GraphProto) -> Callable[..., Any]:
    """What runs ``body``, a pass-made node's subgraph, on the node's inputs (and captures),
    as the scope ``body`` of the node that observers see: its one output, or a tuple."""
    sub = node.subgraph(body)
    n_inputs = len(body.input)
    key = node.key
    single = len(body.output) == 1

    def outputs(args: tuple[Any, ...]) -> list[Any]:
        return current_runner(sub.plan)([*args[:n_inputs], *sub.bind(args[n_inputs:])])

    def run(*args: Any) -> Any:
        values = run_in_scope(key, "body", 1, outputs, args)
        return values[0] if single else tuple(values)

    return run
