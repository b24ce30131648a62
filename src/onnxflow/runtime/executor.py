"""Runs a :class:`~onnxflow.compile.plan.Plan` on fresh state.

Two ways to run the same plan: the generated straight-line function of
:mod:`onnxflow.runtime.codegen` that :mod:`onnxflow.runtime.lower` made for it (the default),
and :func:`~onnxflow.runtime.interpret.interpret`, a loop over the steps on a frame list, which
is what very large graphs and runs whose observers watch every node use. There are no operator
names in here: everything a step needs was decided at compile time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from onnxflow.compile.plan import Plan
from onnxflow.runtime.codegen import source_of
from onnxflow.runtime.context import RUN_OPTIONS, current_run_options
from onnxflow.runtime.interpret import interpret
from onnxflow.runtime.lower import LOWERED, Variant, lower, lowered
from onnxflow.runtime.observe import OBSERVATION, current_observation

#: current_observation and current_run_options as their ContextVars' own get methods: read
#: without a Python call where a branch is taken (an If's every call).
_observation, _run_options = OBSERVATION.get, RUN_OPTIONS.get


def current_runner(plan: Plan) -> Callable[[Sequence[Any]], list[Any]]:
    """:func:`runner` for the run in progress (its RunOptions): how loops and branches fetch a
    body's runner once per operator call."""
    return runner(plan, current_run_options())


def unwatched_runner(plan: Plan) -> Callable[[Sequence[Any]], list[Any]] | None:
    """``plan``'s generated function when the run in progress has no observer and no
    RunOptions (what :func:`current_runner` then returns, fetched with fewer calls); else None."""
    if _observation() is not None or _run_options() is not None:
        return None
    made = LOWERED.get(id(plan)) or lower(plan)
    return made.call


def execute(plan: Plan, args: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Run ``plan`` with ``args`` (formal inputs then captures) and return its outputs.

    When the run has RunOptions, ``terminate`` is checked before every step.
    """
    return runner(plan, current_run_options())(args)


def runner(plan: Plan, options: Any = None) -> Callable[[Sequence[Any]], list[Any]]:
    """Return a function running ``plan`` on ``args``; loops fetch it once, call it per iteration.

    Kernel failures come out as RuntimeFailure naming the node; ``options.terminate`` is
    checked before every step when ``options`` is given.
    """
    observation = current_observation()
    made = LOWERED.get(id(plan)) or lower(plan)
    if observation is not None and observation.node_events:
        functions = made.step_functions()
        return lambda args: interpret(plan, args, options, observation, functions)
    return made.call if options is None else made.checked_call(options)


def sources(plan: Plan, where: str = "") -> list[tuple[str, str]]:
    """``(where, source)`` of the Python that runs ``plan`` and, after it, its subgraphs: each
    graph's generated function and each whole-loop function its loops have generated so far
    (a loop's code depends on the inputs its run is given)."""
    where = where or f"graph {plan.graph_name!r}"
    made = lowered(plan)
    if made.function is None:
        found = [(where, f"# interpreted step by step: {len(plan.steps)} steps\n")]
    else:
        found = [(where, source_of(made.function.fn) or "")]
        for key, value in list(made.variants.items()):
            if key.loop:
                found.append((f"{where}, run as a loop{_loop_kind(key)}", source_of(value.fn)))
    for index, child in plan.children:
        info = plan.infos[index]
        forms = [c for i, c in plan.children if i == index and c.graph_name == child.graph_name]
        nth = f" (form {forms.index(child) + 1} of {len(forms)})" if len(forms) > 1 else ""
        inner = f"{where} > {info.op_type} {info.name!r} > graph {child.graph_name!r}{nth}"
        found += sources(child, inner)
    return found


def _loop_kind(key: Variant) -> str:
    named = (("checking RunOptions", key.checked), ("with a condition", key.use_cond))
    kinds = [kind for kind, on in named if on]
    return f" ({', '.join(kinds)})" if kinds else ""
