"""Loop, every version (1, 11, 13, 16, 19, 21, 23, 24, 25).

Node inputs ``(M, cond, v_1..v_N)``; body inputs ``(i, cond_in, v_1..v_N)``; body outputs
``(cond_out, v_1..v_N, s_1..s_K)``; node outputs ``(v_1..v_N final, s_1..s_K stacked)``.
The five modes of the spec's table, by which of M and cond are given:

- neither: run until terminated; the body's condition is ignored;
- cond only: a while loop driven by the body's condition;
- M only: a for loop of M iterations; the body's condition is ignored;
- both: stop at M iterations or when the condition is false, whichever comes first.

M = 0 or an initial cond of false means zero iterations: the loop-carried values come out as
given and each scan output is empty, with the rank and dtype the body declares.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.errors import OnnxflowWarning
from onnxflow.ops.control_flow.body import loop_plan
from onnxflow.ops.registry import op
from onnxflow.runtime.growth import FOREVER
from onnxflow.runtime.loop import run_loop
from onnxflow.runtime.stacking import Stacker, as_bool, as_count


@op("Loop", 1, 11, 13, 16, 19, 21, 23, 24, 25, build=True)
def loop(node: NodeContext, *, body: GraphProto) -> Callable[..., Any]:
    """Compile the body once; return the callable that runs the loop."""
    n_states, n_scans = _check_arity(node, body)
    plan = loop_plan(node, body, [], counter=True)
    scan_decls = list(body.output)[1 + n_states :]
    label = node.describe()
    honour_body_cond = node.loop_condition == "always"
    if not honour_body_cond and node.inputs[0] and not node.inputs[1]:
        _warn_if_condition_ignored(node, body)

    what_m, what_cond = f"{label}: trip count M", f"{label}: condition"
    what_scans = [f"{label}: scan output {k}" for k in range(n_scans)]

    def run(m: Any, cond: Any, *rest: Any) -> tuple[Any, ...]:
        states, captured = list(rest[:n_states]), rest[n_states:]
        trips = None if m is None else as_count(m, what_m)
        use_cond = cond is not None or honour_body_cond
        scans = [Stacker(what, trips, at_most=use_cond) for what in what_scans]
        if cond is None or as_bool(cond, what_cond):
            stop = FOREVER if trips is None else trips
            states = run_loop(
                plan, captured, states, (), stop, scans, use_cond=use_cond, total=trips
            )
        return (*states, *[s.result(d) for s, d in zip(scans, scan_decls)])

    return run


def _check_arity(node: NodeContext, body: GraphProto) -> tuple[int, int]:
    """Return (N loop-carried values, K scan outputs) after checking node and body agree."""
    n_states = node.n_inputs - 2
    if n_states < 0:
        raise node.error(f"expects inputs (M, cond, v_initial...), found {node.n_inputs} inputs")
    if len(body.input) != n_states + 2:
        raise node.error(
            f"body has {len(body.input)} inputs, expected 2 (iteration number, condition) + "
            f"{n_states} loop-carried = {n_states + 2}"
        )
    n_scans = len(body.output) - 1 - n_states
    if n_scans < 0:
        raise node.error(
            f"body has {len(body.output)} outputs, expected at least 1 (condition) + "
            f"{n_states} loop-carried = {n_states + 1}"
        )
    if node.n_outputs > n_states + n_scans:
        raise node.error(
            f"node has {node.n_outputs} outputs, expected at most {n_states} loop-carried + "
            f"{n_scans} scan outputs = {n_states + n_scans}"
        )
    return n_states, n_scans


def _warn_if_condition_ignored(node: NodeContext, body: GraphProto) -> None:
    """Warn when the spec's rule (cond omitted: body condition ignored) drops a real condition."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    producer = next((n for n in body.node if cond_out in n.output), None)
    passes_through = cond_out == cond_in or (
        producer is not None and producer.op_type == "Identity" and producer.input[0] == cond_in
    )
    if producer is not None and producer.op_type == "Constant":
        return
    if not passes_through:
        warnings.warn(
            f"{node.describe()}: the trip count is given and cond is omitted, so the condition "
            f"the body computes ({cond_out!r}) is ignored, as the Loop spec says; onnxruntime "
            "stops when it is false. To do the same, create the session with "
            "onnxflow.SessionOptions(loop_condition='always').",
            OnnxflowWarning,
            stacklevel=2,
        )
