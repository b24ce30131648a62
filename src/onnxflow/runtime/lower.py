"""Lowering: where a compiled plan becomes the Python functions that run it.

In one sentence: InferenceSession, when it is created, calls :func:`lower`, which makes for the
main graph's plan and every subgraph plan under it a :class:`Lowered` record holding the plan's
generated function (:mod:`onnxflow.runtime.codegen`; the interpreter for a graph over
:data:`MAX_GENERATED_STEPS` steps), wrapped to name a failing node.

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
    #: Whether it is the whole-loop driver of the loop whose body the plan is (else the plan's
    #: own function).
    loop: bool = False
    #: Whether the driver ends the loop when the body's condition turns false.
    use_cond: bool = False


@dataclass(eq=False)
class Lowered:
    """What runs one plan: made by :func:`lower`, kept for as long as the plan lives.

    Nothing in it holds the plan strongly (a weak reference does), so that the plan, and with
    it this record, goes when its session does.
    """

    plan_ref: weakref.ref[Plan]
    #: Runs the plan with nobody checking RunOptions; failures name the step.
    call: Runner
    #: The generated function ``call`` runs; None when the plan is interpreted.
    function: Generated | None
    #: The forms made by :meth:`variant` so far.
    variants: dict[Variant, Generated] = field(default_factory=dict)
    #: Each step's function as a generated function calls it (:meth:`step_functions`).
    _steps: tuple[Callable[..., Any], ...] | None = None

    def step_functions(self) -> tuple[Callable[..., Any], ...]:
        """Each step's function with its own memo where its kernel keeps one (the stateful
        form, made once for this plan, as the generated function makes its own): what the
        interpreter calls when observers watch every node, so that an observed run does the
        work an unobserved one does (a ShapeMemo does not compute its shapes again)."""
        if self._steps is None:
            plan = self.plan
            self._steps = tuple(
                fn if traits.stateful is None else traits.stateful()
                for (fn, *_), traits in zip(plan.steps, plan.traits)
            )
        return self._steps

    @property
    def plan(self) -> Plan:
        """The plan (alive: whoever asks its record holds it)."""
        return self.plan_ref()  # type: ignore[return-value]

    def variant(self, key: Variant, loop: LoopPlan | None = None) -> Generated:
        """The form ``key`` of the plan, made the first time a run asks for it (a driver, for
        ``loop``, whose body the plan is): the one thing about a plan made after :func:`lower`."""
        made = self.variants.get(key)
        if made is None:
            if loop is None:
                made = Generated(*generate(self.plan, checked=True))
            else:
                made = Generated(
                    *generate_driver(
                        self.plan,
                        loop.layout,
                        checked=key.checked,
                        use_cond=key.use_cond,
                        label=loop.label,
                    )
                )
            self.variants[key] = made
        return made

    def checked_call(self, options: Any) -> Runner:
        """Runs the plan, stopping before any step once ``options.terminate`` is set."""
        if self.function is None:
            return _interpreted(self.plan_ref, options)
        fn, lines = self.variant(_CHECKED)
        return _naming_failures(self.plan_ref, lambda args: fn(args, options), fn, lines)


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
    ref = weakref.ref(plan)
    if len(plan.steps) > MAX_GENERATED_STEPS:
        return Lowered(ref, _interpreted(ref, None), None)
    fn, lines = made = Generated(*generate(plan, checked=False))
    return Lowered(ref, _naming_failures(ref, fn, fn, lines), made)


def _interpreted(plan: weakref.ref[Plan], options: Any) -> Runner:
    """Runs the plan on the interpreter."""
    return lambda args: interpret(plan(), args, options)  # type: ignore[arg-type]


def _naming_failures(
    plan: weakref.ref[Plan], run: Runner, fn: Callable[..., Any], lines: dict[int, int]
) -> Runner:
    """``run``, with a kernel's failure inside the generated ``fn`` raised as a RuntimeFailure
    naming its step."""

    def call(args: Sequence[Any]) -> list[Any]:
        try:
            return run(args)
        except OnnxflowError:
            raise
        except Exception as exc:
            failed = failing_step(exc, fn, lines)
            raise step_failure(plan(), failed, exc) from exc  # type: ignore[arg-type]

    return call
