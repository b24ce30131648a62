"""How a pass-made node runs the nodes it stands for as written: its ``body`` subgraph."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import GraphProto

from onnxflow.compile.plan import Subgraph
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.observe import run_in_scope


def body_call(node: Any, body: GraphProto) -> Callable[..., Any]:
    """What runs ``body``, a pass-made node's subgraph, on the node's inputs (and captures),
    as the scope ``body`` of the node that observers see: its one output, or a tuple."""
    sub = node.subgraph(body)
    return _calling(node, body, lambda: sub)


def body_call_later(node: Any, body: GraphProto) -> Callable[..., Any]:
    """:func:`body_call`, with ``body`` compiled the first time the result is called instead
    of now: for a compiled form that seldom runs the nodes as written (a region's falls back to
    them only on inputs its one pass does not read), so that a session does not compile and
    lower a plan it will most likely never run. ``body`` reads no outer-scope value (all its
    reads are its inputs), as a region's body does."""
    compile_body = node.subgraph_later(body)
    made: list[Subgraph] = []

    def subgraph() -> Subgraph:
        if not made:  # two threads may both compile it: the same plan, the first one kept
            made.append(compile_body())
        return made[0]

    return _calling(node, body, subgraph)


def _calling(node: Any, body: GraphProto, subgraph: Callable[[], Subgraph]) -> Callable[..., Any]:
    """What runs ``body``'s plan, as ``subgraph()`` gives it, in the node's scope ``body``."""
    n_inputs = len(body.input)
    key = node.key
    single = len(body.output) == 1

    def outputs(args: tuple[Any, ...]) -> list[Any]:
        sub = subgraph()
        return current_runner(sub.plan)([*args[:n_inputs], *sub.bind(args[n_inputs:])])

    def run(*args: Any) -> Any:
        values = run_in_scope(key, "body", 1, outputs, args)
        return values[0] if single else tuple(values)

    return run
