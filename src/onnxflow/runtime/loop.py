"""The one loop engine: runs the iterations of every :class:`~onnxflow.compile.plan.LoopPlan`.

``Loop``, ``Scan`` and ``SequenceMap`` check their inputs against the spec in their own modules,
then hand the iterations here: the loop-carried values, the sequences read a row per iteration,
the number of iterations (an upper bound when the body's condition may stop the loop first)
and one sink per scan output. There are two ways to run them, with one meaning:

- **generated**: the whole loop as one generated function (:mod:`onnxflow.runtime.loopgen`),
  when nothing observes the run and the body is small enough to generate;
- **stepped**: a Python loop calling the body's plan once per iteration, telling observers about
  each iteration (and, for node observers, stepping through the body as written).

Both test ``RunOptions.terminate`` before every iteration and raise the run's one cancellation
error, and both name the loop and the iteration in any error from the body.

The stepped runs go through :func:`iterate`, the engine's one Python loop, which any operator
that runs a body step after step uses too (the generation operators' decoding loops): it tests
``RunOptions.terminate``, makes each iteration a scope observers see and names the iteration in
errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxflow.compile.plan import LoopPlan
from onnxflow.errors import CancelledError, OnnxflowError, RuntimeFailure
from onnxflow.runtime.codegen import failing_step
from onnxflow.runtime.context import cancelled, current_run_options, stop_requested
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.growth import Watch, first_check
from onnxflow.runtime.interpret import step_failure
from onnxflow.runtime.loopgen import iteration_of
from onnxflow.runtime.lower import LOWERED, MAX_GENERATED_STEPS, Variant, lowered
from onnxflow.runtime.observe import Observation, current_observation
from onnxflow.runtime.stacking import TRUE, as_bool

#: Errors from inside a body that get the owning node and iteration added to their message.
BODY_ERRORS = (RuntimeFailure, CancelledError)

Step = Callable[[int, list[Any]], list[Any]]


def iteration_error(label: str, iteration: int, exc: Exception) -> Exception:
    """Return ``exc`` again, its message prefixed with the loop node and the iteration."""
    return type(exc)(f"{label} at iteration {iteration}: {exc}")


@dataclass(frozen=True)
class Iterations:
    """How :func:`iterate` names a run of iterations and shows it to observers."""

    #: The node, in error messages ("Loop 'l' (opset 16)").
    label: str
    #: The node's key in observer scopes.
    key: str
    #: The number of iterations, when known, for observers.
    total: int | None = None
    #: Scan 8's batch index: iterations are then keyed ``(batch, i)``.
    batch: int | None = None


def iterate(shown: Iterations, stop: int, step: Callable[[int], bool]) -> None:
    """Run ``step(0)``, ``step(1)``... until ``stop`` iterations ran or a step returns False.

    Before each iteration, RunOptions.terminate is tested; each iteration is a scope observers
    see; a body's error (:data:`BODY_ERRORS`) comes out naming the node and the iteration.
    """
    options = current_run_options()
    observation = current_observation()
    i = 0
    try:
        while i < stop:
            if stop_requested(options):
                raise cancelled("")
            if observation is None:
                go = step(i)
            else:
                observation.enter(
                    shown.key, i if shown.batch is None else (shown.batch, i), shown.total
                )
                try:
                    go = step(i)
                finally:
                    observation.leave()
            if not go:
                break
            i += 1
    except BODY_ERRORS as exc:
        raise iteration_error(shown.label, i, exc) from exc


class Every:
    """A value read as the same row every iteration (a tensor SequenceMap passes as is)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __getitem__(self, i: int) -> Any:
        return self.value


def run_loop(
    loop: LoopPlan,
    captured: Sequence[Any],
    states: list[Any],
    sequences: Sequence[Any],
    stop: int,
    sinks: Sequence[Any],
    *,
    use_cond: bool = False,
    total: int | None = None,
    batch: int | None = None,
) -> list[Any]:
    """Run iterations ``0..stop-1`` of ``loop``; return the final loop-carried values.

    ``sequences`` are the node's values read as row ``i`` in iteration ``i`` (Scan's inputs,
    time first and in iteration order); ``sinks`` (Stacker, Lister) collect each scan output;
    with ``use_cond`` the loop also ends after an iteration whose body condition is false.
    ``total`` (the number of iterations, when known) and ``batch`` (Scan 8's batch index) are
    what observers are told.
    """
    if stop <= 0:
        return list(states)
    observation = current_observation()
    if observation is None and len(loop.body.plan.steps) <= MAX_GENERATED_STEPS:
        return _generated(loop, captured, states, sequences, stop, sinks, use_cond)
    try:
        step = _stepper(loop, observation, captured, sequences)
    except BODY_ERRORS as exc:  # the pre-plan failed: the first iteration could not start
        raise iteration_error(loop.label, 0, exc) from exc
    shown = Iterations(loop.label, loop.key, total, batch)
    return _stepped(loop, step, states, sequences, stop, sinks, use_cond, shown)


def _generated(
    loop: LoopPlan,
    captured: Sequence[Any],
    states: list[Any],
    sequences: Sequence[Any],
    stop: int,
    sinks: Sequence[Any],
    use_cond: bool,
) -> list[Any]:
    """The iterations as one generated function: the body plan's whole-loop driver for this
    run (whether it checks RunOptions, whether it uses the body's condition)."""
    options = current_run_options()
    body = LOWERED.get(id(loop.body.plan)) or lowered(loop.body.plan)  # a call less, usually
    key = (options is not None, True, use_cond)  # a Variant's fields: see Variant
    fn, lines = body.variants.get(key) or body.variant(Variant(*key), loop)
    try:
        seqs, tail = _bind(loop, captured, sequences)
    except BODY_ERRORS as exc:
        raise iteration_error(loop.label, 0, exc) from exc
    try:
        return fn(0, stop, states, seqs, tail, sinks, options)[1]
    except Exception as exc:
        at = iteration_of(exc, fn)
        if isinstance(exc, BODY_ERRORS):
            raise iteration_error(loop.label, at or 0, exc) from exc
        step = failing_step(exc, fn, lines)
        if at is None or step is None or isinstance(exc, OnnxflowError):
            raise  # the loop's own errors (a scan output changing shape...) say what failed
        failure = step_failure(loop.body.plan, step, exc)
        raise iteration_error(loop.label, at, failure) from exc


def _stepped(
    loop: LoopPlan,
    run: Step,
    states: list[Any],
    sequences: Sequence[Any],
    stop: int,
    sinks: Sequence[Any],
    use_cond: bool,
    shown: Iterations,
) -> list[Any]:
    """The iterations as :func:`iterate` calling ``run`` on each iteration's head values; the
    loop-carried values are looked at now and then (:class:`~onnxflow.runtime.growth.Watch`)."""
    counter, n = loop.layout.counter, loop.layout.n_states
    first = 1 if counter else 0
    observation = current_observation()
    # the body the passes made takes the body's own inputs first, under their names: reading
    # them there keeps an iteration observer from compiling the body as written
    names = loop.body.plan.input_names[: (2 if counter else len(sequences)) + n]
    carried = list(states)
    watch = Watch(loop.label, loop.body.plan.output_names[first : first + n], use_cond)
    looked: list[Any] = [None, first_check(stop, use_cond)]  # the run's Growth, next check

    def step(i: int) -> bool:
        if counter:
            head = [np.array(i, dtype=np.int64), TRUE, *carried]
        else:
            head = [*carried, *(s[i] for s in sequences)]
        if observation is not None:
            observation.inputs(names, head)
        outs = run(i, head)
        carried[:] = outs[first : first + n]
        if n and i + 1 >= looked[1]:
            looked[:] = watch.check(looked[0], i + 1, stop, states, carried)
        for sink, value in zip(sinks, outs[first + n :]):
            sink.add(value)
        return not use_cond or as_bool(outs[0], f"{loop.label}: body condition at iteration {i}")

    iterate(shown, stop, step)
    return carried


def _bind(
    loop: LoopPlan, captured: Sequence[Any], sequences: Sequence[Any]
) -> tuple[list[Any], list[Any]]:
    """The body's per-iteration sequences and fixed values; runs the pre-plan, if any."""
    caps = loop.body.bind(captured)
    if loop.pre is None:
        return list(sequences), caps
    pre_out = current_runner(loop.pre.plan)([*sequences, *loop.pre.bind(captured)])
    rows = pre_out[loop.n_invariants :]
    return [*sequences, *rows], [*pre_out[: loop.n_invariants], *caps]


def _stepper(
    loop: LoopPlan,
    observation: Observation | None,
    captured: Sequence[Any],
    sequences: Sequence[Any],
) -> Step:
    """The function running one iteration from its head values (the pre-plan runs here).

    Observed by node observers, it is the body as written, node by node; otherwise the body
    the passes made.
    """
    if observation is not None and observation.node_events:
        plain, caps = current_runner(loop.plain.plan), loop.plain.bind(captured)
        return lambda i, head: plain(head + caps)
    return _fast(loop, captured, sequences)


def _fast(loop: LoopPlan, captured: Sequence[Any], sequences: Sequence[Any]) -> Step:
    """One iteration of the body the passes made: head values, pre-plan rows, fixed values."""
    body = current_runner(loop.body.plan)
    seqs, tail = _bind(loop, captured, sequences)
    rows = seqs[len(sequences) :]
    if not rows:
        return lambda i, head: body(head + tail)
    return lambda i, head: body([*head, *(r[i] for r in rows), *tail])
