"""A loop body compiled once, shared by Loop and Scan.

When :mod:`~onnxflow.ops.control_flow.hoist` can move work out of the body, the body compiles as
two plans: the pre-plan, run once when the loop starts, and the per-iteration remainder, which
also takes each batched value's row and each invariant value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from onnx import GraphProto

from onnxflow.compile.compiler import NodeContext
from onnxflow.compile.passes import loop_body_forms
from onnxflow.errors import OnnxflowError
from onnxflow.ops.control_flow.common import BODY_ERRORS, Stacker, iteration_error
from onnxflow.ops.control_flow.driver import Layout, generate_driver, iteration_of
from onnxflow.runtime.codegen import failing_step
from onnxflow.runtime.context import current_run_options
from onnxflow.runtime.executor import (
    MAX_GENERATED_STEPS,
    current_runner,
    made_for,
    step_failure,
)
from onnxflow.runtime.observe import Observation, current_observation

Step = Callable[[int, list[Any]], list[Any]]


class LoopBody:
    """Runs one iteration given its index and leading inputs (states, elements...)."""

    def __init__(
        self,
        node: NodeContext,
        graph: GraphProto,
        element_inputs: Sequence[str],
        *,
        counter: bool = False,
    ) -> None:
        """``counter``: the body starts with Loop's (iteration number, condition) inputs."""
        self.graph = graph
        self.key = node.key
        self.label = node.describe()
        head = 2 if counter else len(element_inputs)
        forms = None
        if node.optimize:
            rank = _rank_lookup(node, graph)
            forms = loop_body_forms(graph, element_inputs, rank, node.opset_of(""))
        self.plain = node.subgraph(graph)  # observed runs show every node of every iteration
        self.pre = None if forms is None or forms.pre is None else node.subgraph(forms.pre)
        self.n_invariants = 0 if forms is None else len(forms.invariants)
        self.sub = self.plain if forms is None else node.subgraph(forms.body, forms.opsets)
        self._small = len(self.sub.plan.steps) <= MAX_GENERATED_STEPS
        n_rows = 0 if forms is None else len(forms.batched)
        self.layout = Layout(counter, len(graph.input) - head, len(element_inputs) + n_rows)

    def fused(self) -> bool:
        """Whether :meth:`drive` can run this loop now (not observed, body not too large)."""
        return self._small and current_observation() is None

    def drive(
        self,
        captured: Sequence[Any],
        sequences: Sequence[Any],
        states: list[Any],
        stop: int,
        sinks: Sequence[Stacker],
        *,
        use_cond: bool = False,
    ) -> tuple[int, list[Any]]:
        """Run iterations ``0..stop-1`` as one generated loop; return (iterations run, states).

        Call it only when :meth:`fused` and at least one iteration will run. ``sinks`` collect
        each scan output value, one per iteration; with ``use_cond`` the loop also stops when
        the body's condition is false. Errors name this loop and the iteration.
        """
        options = current_run_options()
        key = (options is not None, use_cond)  # the body plan is this loop's alone
        drivers = made_for(self.sub.plan)
        made = drivers.get(key)
        if made is None:
            made = drivers[key] = generate_driver(
                self.sub.plan, self.layout, checked=key[0], use_cond=use_cond, label=self.label
            )
        fn, lines = made
        try:
            seqs, tail = self._bind(captured, sequences)
        except BODY_ERRORS as exc:
            raise iteration_error(self.label, 0, exc) from exc
        try:
            return fn(0, stop, states, seqs, tail, sinks, options)
        except Exception as exc:
            at = iteration_of(exc, fn)
            if isinstance(exc, BODY_ERRORS):
                raise iteration_error(self.label, at or 0, exc) from exc
            step = failing_step(exc, fn, lines)
            if at is None or step is None or isinstance(exc, OnnxflowError):
                raise  # the loop's own errors (a scan output changing shape...) say what failed
            failure = step_failure(self.sub.plan, step, exc)
            raise iteration_error(self.label, at, failure) from exc

    def _bind(self, captured: Sequence[Any], sequences: Sequence[Any]) -> tuple[list, list]:
        """The driver's per-iteration sequences and fixed values; runs the pre-plan."""
        caps = self.sub.bind(captured)
        if self.pre is None:
            return list(sequences), caps
        pre_out = current_runner(self.pre.plan)([*sequences, *self.pre.bind(captured)])
        rows = pre_out[self.n_invariants :]
        return [*sequences, *rows], [*pre_out[: self.n_invariants], *caps]

    def start(
        self,
        captured: Sequence[Any],
        sequences: Sequence[Any] = (),
        total: int | None = None,
        batch: int | None = None,
    ) -> Step:
        """Prepare a run of the loop (the pre-plan runs here); return the per-iteration step.

        Call it only when at least one iteration will run. ``sequences`` are the whole scanned
        sequences, time first, in iteration order; ``total`` is the number of iterations when
        known, and ``batch`` Scan-8's batch index (iterations are then keyed ``(batch, t)``).
        """
        observation = current_observation()
        if observation is not None:
            return self._observed(observation, captured, sequences, total, batch)
        return self._fast(captured, sequences)

    def _fast(self, captured: Sequence[Any], sequences: Sequence[Any]) -> Step:
        run = current_runner(self.sub.plan)
        seqs, tail = self._bind(captured, sequences)
        rows = seqs[len(sequences) :]
        if not rows:
            return lambda t, head: run(head + tail)
        return lambda t, head: run([*head, *(r[t] for r in rows), *tail])

    def _observed(
        self,
        observation: Observation,
        captured: Sequence[Any],
        sequences: Sequence[Any],
        total: int | None,
        batch: Any,
    ) -> Step:
        names = self.plain.plan.input_names
        if observation.node_events:  # every node of every iteration: the body as written
            plain, caps = current_runner(self.plain.plan), self.plain.bind(captured)
            run: Step = lambda t, head: plain(head + caps)  # noqa: E731
        else:
            run = self._fast(captured, sequences)

        def step(t: int, head: list[Any]) -> list[Any]:
            observation.enter(self.key, t if batch is None else (batch, t), total)
            observation.inputs(names, head)
            try:
                return run(t, head)
            finally:
                observation.leave()

        return step


def _rank_lookup(node: NodeContext, graph: GraphProto) -> Callable[[str], int | None]:
    declared: dict[str, int | None] = {}
    for vi in graph.input:
        tt = vi.type.tensor_type
        declared[vi.name] = len(tt.shape.dim) if tt.HasField("shape") else None
    for t in graph.initializer:
        declared[t.name] = len(t.dims)

    def rank(name: str) -> int | None:
        if name in declared:
            return declared[name]
        tp = node.value_type(name)
        if tp is None or not tp.tensor_type.HasField("shape"):
            return None
        return len(tp.tensor_type.shape.dim)

    return rank
