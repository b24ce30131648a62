"""Runs a :class:`~onnxflow.compile.plan.Plan` on a fresh frame.

There are no operator names in here: everything a step needs was decided at compile time.
"""

from __future__ import annotations

from typing import Any

from onnxflow.compile.plan import Plan
from onnxflow.errors import OnnxflowError, RuntimeFailure, where
from onnxflow.runtime.context import check_terminate, current_run_options


def execute(plan: Plan, args: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Run ``plan`` with ``args`` (formal inputs then captures) and return its outputs.

    When the run has RunOptions, ``terminate`` is checked before every step.
    """
    frame = list(plan.template)
    for slot, value in zip(plan.arg_slots, args):
        frame[slot] = value
    options = current_run_options()
    index = 0
    try:
        for index, (fn, ins, out, free) in enumerate(plan.steps):  # noqa: B007
            if options is not None:
                check_terminate(options, f"graph {plan.graph_name!r} before step {index}")
            result = fn(*[frame[i] for i in ins])
            if out.__class__ is int:
                frame[out] = result
            else:
                _store_many(frame, out, result)
            for slot in free:
                frame[slot] = None
    except OnnxflowError:
        raise
    except Exception as exc:
        info = plan.infos[index]
        raise RuntimeFailure(
            f"{where(info.name, info.op_type, info.domain, info.opset)} in graph "
            f"{plan.graph_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return [frame[i] for i in plan.output_slots]


def _store_many(frame: list[Any], out: tuple[int, ...], result: Any) -> None:
    if result.__class__ is not tuple:
        result = (result,)
    if len(result) < len(out):
        result = result + (None,) * (len(out) - len(result))
    for slot, value in zip(out, result):
        frame[slot] = value
