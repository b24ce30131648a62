"""Runs a :class:`~onnxflow.compile.plan.Plan` on fresh state.

Two ways to run the same plan: :func:`execute`, the generated straight-line function of
:mod:`onnxflow.runtime.codegen` (the default), and :func:`interpret`, a loop over the steps on a
frame list, which is what very large graphs use. There are no operator names in here: everything
a step needs was decided at compile time.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from onnxflow.compile.plan import Plan, many
from onnxflow.errors import OnnxflowError, RuntimeFailure, where
from onnxflow.runtime.codegen import failing_step, generate, source_of
from onnxflow.runtime.context import before_step, cancelled, current_run_options
from onnxflow.runtime.observe import Observation, call_unobserved, current_observation

#: Graphs with more steps than this are interpreted rather than turned into one function.
MAX_GENERATED_STEPS = 20_000

#: What is made from each plan to run it, by the plan's id, kept outside the immutable plan
#: for as long as the plan lives: under ``True``/``False`` the generated function checking
#: RunOptions.terminate or not, under ``"call"`` the unchecked one wrapped to name failures;
#: loops keep their drivers. (A dict by id, emptied when the plan dies, is looked up 3-4x faster
#: than a WeakKeyDictionary, which makes a weak reference on every look-up.)
MADE: dict[int, dict[Any, Any]] = {}


def made_for(plan: Plan) -> dict[Any, Any]:
    """The cache of functions made to run ``plan`` (see :data:`MADE`)."""
    made = MADE.get(id(plan))
    if made is None:
        made = MADE.setdefault(id(plan), {})
        weakref.finalize(plan, MADE.pop, id(plan), None)
    return made


def current_runner(plan: Plan) -> Callable[[Sequence[Any]], list[Any]]:
    """:func:`runner` for the run in progress (its RunOptions): how loops and branches fetch a
    body's runner once per operator call."""
    return runner(plan, current_run_options())


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
    if observation is not None and observation.node_events:
        return lambda args: interpret(plan, args, options, observation)
    if len(plan.steps) > MAX_GENERATED_STEPS:
        return lambda args: interpret(plan, args, options)
    checked = options is not None
    made = made_for(plan)
    if not checked:
        plain = made.get("call")
        if plain is not None:
            return plain
    generated = made.get(checked)
    if generated is None:
        generated = made[checked] = generate(plan, checked)
    fn, lines = generated

    def call(args: Sequence[Any]) -> list[Any]:
        try:
            return fn(args, options) if checked else fn(args)
        except OnnxflowError:
            raise
        except Exception as exc:
            raise step_failure(plan, failing_step(exc, fn, lines), exc) from exc

    if not checked:
        made["call"] = call  # the same for every unchecked run: made once
    return call


def sources(plan: Plan, where: str = "") -> list[tuple[str, str]]:
    """``(where, source)`` of the Python that runs ``plan`` and, after it, its subgraphs: each
    graph's generated function (made now if no run made it yet) and each loop function its
    loops have generated so far (a loop's code depends on the inputs its run is given)."""
    where = where or f"graph {plan.graph_name!r}"
    if len(plan.steps) > MAX_GENERATED_STEPS:
        found = [(where, f"# interpreted step by step: {len(plan.steps)} steps\n")]
    else:
        made = made_for(plan)
        if False not in made:
            made[False] = generate(plan, False)
        found = [(where, source_of(made[False][0]) or "")]
        for key, value in list(made.items()):
            if isinstance(key, tuple):  # a loop's driver: (checked, uses the body's condition)
                found.append((f"{where}, run as a loop{_loop_kind(key)}", source_of(value[0])))
    for index, child in plan.children:
        info = plan.infos[index]
        forms = [c for i, c in plan.children if i == index and c.graph_name == child.graph_name]
        nth = f" (form {forms.index(child) + 1} of {len(forms)})" if len(forms) > 1 else ""
        inner = f"{where} > {info.op_type} {info.name!r} > graph {child.graph_name!r}{nth}"
        found += sources(child, inner)
    return found


def _loop_kind(key: tuple[bool, bool]) -> str:
    checked, use_cond = key
    named = (("checking RunOptions", checked), ("with a condition", use_cond))
    kinds = [kind for kind, on in named if on]
    return f" ({', '.join(kinds)})" if kinds else ""


def interpret(
    plan: Plan,
    args: Sequence[Any],
    options: Any = None,
    observation: Observation | None = None,
) -> list[Any]:
    """Run ``plan`` step by step on a frame list, telling ``observation`` about every node."""
    frame = list(plan.template)
    for slot, value in zip(plan.arg_slots, args):
        frame[slot] = value
    index = 0
    try:
        for index, (fn, ins, out, free) in enumerate(plan.steps):
            if options is not None and options.terminate:
                raise cancelled(before_step(plan, index))
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
    slots = (out,) if out.__class__ is int else out
    outputs = (result,) if out.__class__ is int else many(result, len(out))
    for slot, value in zip(slots, outputs):
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
