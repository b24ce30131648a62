"""Lowering: where a compiled plan becomes the Python functions that run it.

Plans are lowered in :func:`lower`, which InferenceSession calls once when it is created: every
scope of the model (the main graph and each subgraph plan under it) gets its :class:`Lowered`
record, holding the plan's generated function (:mod:`onnxflow.runtime.codegen`), or the
interpreter for a graph over :data:`MAX_GENERATED_STEPS` steps, wrapped to name a failing node.

Only :meth:`Lowered.variant` makes anything later, on the first run that needs it, because only
some runs do and what to make depends on the run: the function that tests RunOptions.terminate
before every step (runs given RunOptions), and a loop body's whole-loop driver
(:mod:`onnxflow.runtime.loopgen`), whose code depends on whether its run checks RunOptions and
uses the body's condition (which a Loop node knows only when it runs). A plan compiled without
a session (tools, tests) is lowered when it first runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from onnxflow.compile.plan import LoopPlan, Plan
from onnxflow.errors import OnnxflowError
from onnxflow.runtime.codegen import failing_step, generate
from onnxflow.runtime.interpret import interpret, step_failure
from onnxflow.runtime.loopgen import generate_driver

#: Graphs with more steps than this are interpreted rather than turned into one function.
MAX_GENERATED_STEPS = 20_000

Runner = Callable[[Sequence[Any]], list[Any]]


class Generated(NamedTuple):
    """A generated function and the plan step each of its source lines runs."""

    fn: Callable[..., Any]
    lines: dict[int, int]


class Variant(NamedTuple):
    """A form of a plan that only some runs use (see :meth:`Lowered.variant`).

    A Variant equals the plain tuple of its fields, so a hot caller may look one up with a
    tuple and not make a Variant on every call.
    """

    #: Whether it tests RunOptions.terminate before every step (and iteration).
    checked: bool
    #: The loop whose whole-loop driver this is, the plan being its body; None: the plan's own
    #: function.
    loop: LoopPlan | None = None
    #: Whether the driver ends the loop when the body's condition turns false.
    use_cond: bool = False


@dataclass(eq=False)
class Lowered:
    """What runs one plan: made by :func:`lower`, kept for as long as the plan lives."""

    plan: Plan
    #: Runs the plan with nobody checking RunOptions; failures name the step.
    call: Runner
    #: The generated function ``call`` runs; None when the plan is interpreted.
    function: Generated | None
    #: The forms made by :meth:`variant` so far.
    variants: dict[Variant, Generated] = field(default_factory=dict)

    def variant(self, key: Variant) -> Generated:
        """The form ``key`` of the plan, made the first time a run asks for it: the one thing
        about a plan that is made after :func:`lower`."""
        made = self.variants.get(key)
        if made is None:
            if key.loop is None:
                made = Generated(*generate(self.plan, checked=True))
            else:
                made = Generated(
                    *generate_driver(
                        self.plan,
                        key.loop.layout,
                        checked=key.checked,
                        use_cond=key.use_cond,
                        label=key.loop.label,
                    )
                )
            self.variants[key] = made
        return made

    def checked_call(self, options: Any) -> Runner:
        """Runs the plan, stopping before any step once ``options.terminate`` is set."""
        plan = self.plan
        if self.function is None:
            return lambda args: interpret(plan, args, options)
        fn, lines = self.variant(_CHECKED)
        return _naming_failures(plan, lambda args: fn(args, options), fn, lines)


_CHECKED = Variant(checked=True)

#: Each live plan's :class:`Lowered`, by the plan's id (the plan is immutable: what is made to
#: run it is kept outside it). A dict by id, emptied when the plan dies, is looked up 3-4x
#: faster than a WeakKeyDictionary, which makes a weak reference on every look-up.
LOWERED: dict[int, Lowered] = {}


def lower(plan: Plan) -> Lowered:
    """Lower ``plan`` and every subgraph plan under it (each once); return ``plan``'s record."""
    for _, child in plan.children:
        if id(child) not in LOWERED:
            lower(child)
    found = LOWERED.get(id(plan))
    if found is None:
        found = LOWERED[id(plan)] = _lower_one(plan)
        weakref.finalize(plan, LOWERED.pop, id(plan), None)
    return found


def lowered(plan: Plan) -> Lowered:
    """``plan``'s :class:`Lowered` record (lowering it, if no session did)."""
    return LOWERED.get(id(plan)) or lower(plan)


def _lower_one(plan: Plan) -> Lowered:
    """The record of one plan: its generated function, or the interpreter for a big graph."""
    if len(plan.steps) > MAX_GENERATED_STEPS:
        return Lowered(plan, lambda args: interpret(plan, args), None)
    fn, lines = made = Generated(*generate(plan, checked=False))
    return Lowered(plan, _naming_failures(plan, fn, fn, lines), made)


def _naming_failures(
    plan: Plan, run: Runner, fn: Callable[..., Any], lines: dict[int, int]
) -> Runner:
    """``run``, with a kernel's failure inside the generated ``fn`` raised as a RuntimeFailure
    naming its step."""

    def call(args: Sequence[Any]) -> list[Any]:
        try:
            return run(args)
        except OnnxflowError:
            raise
        except Exception as exc:
            raise step_failure(plan, failing_step(exc, fn, lines), exc) from exc

    return call
