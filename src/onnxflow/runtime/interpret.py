"""The interpreter: runs a plan step by step on a frame list.

What runs very large graphs (over :data:`~onnxflow.runtime.lower.MAX_GENERATED_STEPS` steps) and
runs whose observers watch every node; every other run calls the plan's generated function
(:mod:`onnxflow.runtime.codegen`). Also the one wording of a failed step's error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from onnxflow.compile.plan import Plan, out_slots, out_values
from onnxflow.errors import OnnxflowError, RuntimeFailure, where
from onnxflow.runtime.context import before_step, cancelled, stop_requested
from onnxflow.runtime.observe import Observation, call_unobserved


def interpret(
    plan: Plan,
    args: Sequence[Any],
    options: Any = None,
    observation: Observation | None = None,
    functions: Sequence[Callable[..., Any]] | None = None,
) -> list[Any]:
    """Run ``plan`` step by step on a frame list, telling ``observation`` about every node;
    with ``options`` (RunOptions), stop before any step when the caller asks. ``functions``:
    what each step calls instead of its plan function (its stateful form, see
    :meth:`~onnxflow.runtime.lower.Lowered.step_functions`)."""
    frame = list(plan.template)
    for slot, value in zip(plan.arg_slots, args):
        frame[slot] = value
    index = 0
    try:
        for index, (fn, ins, out, free) in enumerate(plan.steps):
            if stop_requested(options):
                raise cancelled(before_step(plan.graph_name, plan.infos[index]))
            if functions is not None:
                fn = functions[index]
            _interpret_step(frame, plan.infos[index], fn, ins, out, observation)
            for slot in free:
                frame[slot] = None
    except OnnxflowError:
        raise
    except Exception as exc:
        raise step_failure(plan, index, exc) from exc
    return [frame[i] for i in plan.output_slots]


def _interpret_step(
    frame: list[Any],
    info: Any,
    fn: Callable[..., Any],
    ins: tuple[int, ...],
    out: Any,
    observation: Observation | None,
) -> None:
    """Run one step on ``frame``, between the observers' node_start and node_end."""
    inputs = [frame[i] for i in ins]
    observers = () if observation is None else observation.observers
    for o in observers:
        o.node_start(observation.scope, info, inputs)  # type: ignore[union-attr]
    start = time.perf_counter()
    if observation is None or observation.body_events:
        result = fn(*inputs)
    else:
        result = call_unobserved(fn, inputs)
    seconds = time.perf_counter() - start
    outputs = out_values(result, out)
    for slot, value in zip(out_slots(out), outputs):
        frame[slot] = value
    for o in observers:
        o.node_end(observation.scope, info, inputs, outputs, seconds)  # type: ignore[union-attr]


def step_failure(plan: Plan, index: int | None, exc: Exception) -> RuntimeFailure:
    """The error saying that step ``index`` of ``plan`` (None: some step) raised ``exc``."""
    if index is None:
        return RuntimeFailure(f"graph {plan.graph_name!r} failed: {type(exc).__name__}: {exc}")
    info = plan.infos[index]
    return RuntimeFailure(
        f"{where(info.name, info.op_type, info.domain, info.opset)} in graph "
        f"{plan.graph_name!r} failed: {type(exc).__name__}: {exc}"
    )
