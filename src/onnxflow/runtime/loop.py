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
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxflow.compile.plan import LoopPlan
from onnxflow.errors import CancelledError, OnnxflowError, RuntimeFailure
from onnxflow.runtime.codegen import failing_step
from onnxflow.runtime.context import cancelled, current_run_options
from onnxflow.runtime.executor import (
    MADE,
    MAX_GENERATED_STEPS,
    current_runner,
    made_for,
    step_failure,
)
from onnxflow.runtime.loopgen import generate_driver, iteration_of
from onnxflow.runtime.observe import Observation, current_observation
from onnxflow.runtime.stacking import TRUE, as_bool

#: The stop of a loop with no trip count: it ends by its condition (or runs until terminated).
FOREVER = sys.maxsize

#: Errors from inside a body that get the owning node and iteration added to their message.
BODY_ERRORS = (RuntimeFailure, CancelledError)

Step = Callable[[int, list[Any]], list[Any]]


def iteration_error(label: str, iteration: int, exc: Exception) -> Exception:
    """Return ``exc`` again, its message prefixed with the loop node and the iteration."""
    return type(exc)(f"{label} at iteration {iteration}: {exc}")


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
        step = _stepper(loop, observation, captured, sequences, total, batch)
    except BODY_ERRORS as exc:  # the pre-plan failed: the first iteration could not start
        raise iteration_error(loop.label, 0, exc) from exc
    return _stepped(loop, step, states, sequences, stop, sinks, use_cond)


def _generated(
    loop: LoopPlan,
    captured: Sequence[Any],
    states: list[Any],
    sequences: Sequence[Any],
    stop: int,
    sinks: Sequence[Any],
    use_cond: bool,
) -> list[Any]:
    """The iterations as one generated function, made once per (checked, use_cond)."""
    options = current_run_options()
    key = (options is not None, use_cond)  # the body plan is this loop's alone
    drivers = MADE.get(id(loop.body.plan)) or made_for(loop.body.plan)  # a call less, usually
    made = drivers.get(key)
    if made is None:
        made = drivers[key] = generate_driver(
            loop.body.plan, loop.layout, checked=key[0], use_cond=use_cond, label=loop.label
        )
    fn, lines = made
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
    step: Step,
    states: list[Any],
    sequences: Sequence[Any],
    stop: int,
    sinks: Sequence[Any],
    use_cond: bool,
) -> list[Any]:
    """The iterations as a Python loop calling ``step`` once per iteration."""
    options = current_run_options()
    counter, n = loop.layout.counter, loop.layout.n_states
    first = 1 if counter else 0
    i = 0
    try:
        while i < stop:
            if options is not None and options.terminate:
                raise cancelled("")
            if counter:
                head = [np.array(i, dtype=np.int64), TRUE, *states]
            else:
                head = [*states, *(s[i] for s in sequences)]
            outs = step(i, head)
            states = outs[first : first + n]
            for sink, value in zip(sinks, outs[first + n :]):
                sink.add(value)
            if use_cond and not as_bool(outs[0], f"{loop.label}: body condition at iteration {i}"):
                break
            i += 1
    except BODY_ERRORS as exc:
        raise iteration_error(loop.label, i, exc) from exc
    return list(states)


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
    total: int | None,
    batch: int | None,
) -> Step:
    """The function running one iteration from its head values (the pre-plan runs here).

    Observed by node observers, it is the body as written, node by node; by iteration
    observers only, the body the passes made. Either way each iteration is announced.
    """
    if observation is not None and observation.node_events:
        plain, caps = current_runner(loop.plain.plan), loop.plain.bind(captured)
        run: Step = lambda i, head: plain(head + caps)  # noqa: E731
    else:
        run = _fast(loop, captured, sequences)
    if observation is None:
        return run
    names = loop.plain.plan.input_names

    def step(i: int, head: list[Any]) -> list[Any]:
        observation.enter(loop.key, i if batch is None else (batch, i), total)
        observation.inputs(names, head)
        try:
            return run(i, head)
        finally:
            observation.leave()

    return step


def _fast(loop: LoopPlan, captured: Sequence[Any], sequences: Sequence[Any]) -> Step:
    """One iteration of the body the passes made: head values, pre-plan rows, fixed values."""
    body = current_runner(loop.body.plan)
    seqs, tail = _bind(loop, captured, sequences)
    rows = seqs[len(sequences) :]
    if not rows:
        return lambda i, head: body(head + tail)
    return lambda i, head: body([*head, *(r[i] for r in rows), *tail])
