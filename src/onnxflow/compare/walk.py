"""The walk behind a comparison: every node output of both runs, in onnxflow's execution order,
main graph and bodies, measured; the first value beyond tolerance, the kernels that disagree
(origins) and the nodes where an error grows (amplification) noted in the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from onnxflow.compare.expose import node_key
from onnxflow.compare.measure import Difference, argmax_agreement, combined, measure
from onnxflow.compare.report import (
    Amplification,
    Divergence,
    Origin,
    OutputVerdict,
    Report,
    Stats,
)
from onnxflow.ir.walk import subgraph_reads

Records = dict[tuple[Any, ...], dict[str, Any]]
CONTROL = {"Loop", "Scan", "If", "SequenceMap"}
SPEC_NOTE = (
    "the ONNX spec's Loop table (input M given, cond omitted: 'for (int i=0; i<M; ++i)') "
    "ignores the body's condition; onnxflow follows the spec and onnxruntime stops when it turns "
    "false: onnxflow.SessionOptions(loop_condition='always') runs as onnxruntime does"
)
_UNSEEN = object()


@dataclass
class Walk:
    """Walks the model in onnxflow's execution order, measuring every value both sides show.

    ``constants`` holds each side's initializers (all graphs), which the runs do not record.
    """

    report: Report
    ours: Records
    theirs: Records
    counted: set[str] | None = None
    constants: tuple[dict[str, Any], dict[str, Any]] = field(default_factory=lambda: ({}, {}))
    _measured: dict[tuple[tuple[Any, ...], str], Difference] = field(default_factory=dict)
    _flagged: dict[tuple[str, ...], Origin | Amplification] = field(default_factory=dict)

    @property
    def measured(self) -> dict[tuple[tuple[Any, ...], str], Difference]:
        """Every value compared so far, by (scope, name): how the two sides differ."""
        return dict(self._measured)

    def graph(self, graph: onnx.GraphProto, scope: tuple[Any, ...], path: list[str]) -> None:
        """Compare a graph's node outputs at one scope, bodies first for control flow."""
        for node in graph.node:
            before = self.report.differing
            if node.op_type in CONTROL:
                self._bodies(node, scope, path)
            self._node(node, scope, path, explained=self.report.differing > before)

    def verdicts(self, graph: onnx.GraphProto) -> None:
        """One verdict per graph output (main graph)."""
        mine, other = self.ours.get((), {}), self.theirs.get((), {})
        for out in graph.output:
            if out.name not in mine or out.name not in other:
                self.report.outputs.append(OutputVerdict(out.name, None))
                continue
            d = self._difference((), out.name)
            rows = argmax_agreement(mine[out.name], other[out.name]) or (None, None)
            errors = (d.max_abs_err, d.max_rel_err, d.max_ulp, d.beyond, d.size, d.reason)
            self.report.outputs.append(OutputVerdict(out.name, d.within, *errors, *rows))

    def _difference(self, scope: tuple[Any, ...], name: str) -> Difference:
        key = (scope, name)
        if key not in self._measured:
            a, b = self.ours[scope][name], self.theirs[scope][name]
            self._measured[key] = measure(a, b, self.report.rtol, self.report.atol)
        return self._measured[key]

    def _input(self, scope: tuple[Any, ...], name: str) -> Difference | None:
        """How an input differs between the sides, looked up from ``scope`` outwards to the
        main graph, then among initializers; None when one side does not show it."""
        for depth in range(len(scope), -1, -1):
            outer = scope[:depth]
            mine, other = self.ours.get(outer, {}), self.theirs.get(outer, {})
            if name in mine or name in other:
                return self._difference(outer, name) if name in mine and name in other else None
        a, b = self.constants[0].get(name, _UNSEEN), self.constants[1].get(name, _UNSEEN)
        if a is _UNSEEN or b is _UNSEEN:
            return None
        if a is b:  # the same model's initializer, given to both sides
            return Difference(size=int(np.size(a)))
        return measure(a, b, self.report.rtol, self.report.atol)

    def _bodies(self, node: onnx.NodeProto, scope: tuple[Any, ...], path: list[str]) -> None:
        """Compare the body runs of a control-flow node, in the order onnxflow ran them."""
        key = node_key(node)
        bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        ours, theirs = _runs(self.ours, scope, key), _runs(self.theirs, scope, key)
        counted = self.counted is None or (key in self.counted and scope in self.theirs)
        if node.op_type == "Loop" and counted:
            self._count(node, len(ours), len(theirs))
        previous = None
        for run in (s for s in ours if s in self.theirs):
            name = run[-1][1] if isinstance(run[-1][1], str) else "body"
            if name in bodies:
                fill_formals(node, bodies[name], self.theirs, run, previous)
                self.graph(bodies[name], run, [*path, key, name])
            previous = run

    def _count(self, node: onnx.NodeProto, ours: int, theirs: int) -> None:
        if ours == theirs:
            return
        note = (
            f"{node.op_type} {node_key(node)!r}: onnxflow ran {ours} iterations, "
            f"{self.report.against} {theirs}"
        )
        if node.op_type == "Loop" and len(node.input) > 1 and node.input[0] and not node.input[1]:
            note += f"; {SPEC_NOTE}"
        self.report.iteration_counts.append(
            {"node": node_key(node), "ours": ours, "theirs": theirs, "note": note}
        )

    def _node(
        self, node: onnx.NodeProto, scope: tuple[Any, ...], path: list[str], explained: bool
    ) -> None:
        """Measure a node's outputs; ``explained``: values inside its bodies differed."""
        mine, other = self.ours.get(scope, {}), self.theirs.get(scope, {})
        differing = []
        for name in (o for o in node.output if o):
            if name not in mine or name not in other:
                continue
            self.report.compared += 1
            diff = self._difference(scope, name)
            if diff.exact:
                continue
            differing.append((name, diff))
            self.report.differing += 1
            if not diff.within:
                self.report.beyond_tolerance += 1
                if self.report.first_divergence is None:
                    self._diverged(node, scope, path, name, diff)
        if differing and not explained:
            worst = combined([d for _, d in differing])
            self._classify(node, scope, path, differing[0][0], worst, self._inputs(node, scope))

    def _inputs(self, node: onnx.NodeProto, scope: tuple[Any, ...]) -> dict[str, Difference | None]:
        """How each input of a node differs, with the outer values its bodies read."""
        inputs = {i: self._input(scope, i) for i in node.input if i}
        for name in sorted(subgraph_reads([node]) - set(inputs)):
            if _lookup(self.ours, scope, name) is not _UNSEEN or name in self.constants[0]:
                inputs[name] = self._input(scope, name)
        return inputs

    def _diverged(
        self,
        node: onnx.NodeProto,
        scope: tuple[Any, ...],
        path: list[str],
        name: str,
        diff: Difference,
    ) -> None:
        mine, other = self.ours[scope], self.theirs[scope]
        agreeing = [i for i in node.input if i and i in mine and i in other]
        self.report.first_divergence = Divergence(
            node_key(node), node.op_type, path, iteration(scope), name, diff.max_abs_err,
            diff.max_rel_err, diff.reason, Stats.of(mine[name]), Stats.of(other[name]), agreeing,
        )  # fmt: skip

    def _classify(
        self,
        node: onnx.NodeProto,
        scope: tuple[Any, ...],
        path: list[str],
        name: str,
        diff: Difference,
        inputs: dict[str, Difference | None],
    ) -> None:
        """Note a differing output as an origin (its inputs, and the outer values its bodies
        read, agree exactly) or an amplification (K x its inputs' largest relative error)."""
        seen = [d for d in inputs.values() if d is not None]
        unseen = [i for i, d in inputs.items() if d is None]
        if all(d.exact for d in seen):
            self._origin(node, scope, path, name, diff, unseen)
            return
        worst = max(d.max_rel_err for d in seen)
        factor = diff.max_rel_err / worst if worst > 0 else float("inf")
        if node.op_type not in CONTROL and factor > self.report.amplification:
            where = ("amplified", *path, node_key(node), name)
            if where in self._flagged:
                self._flagged[where].runs += 1
                return
            found = Amplification(
                node_key(node), node.op_type, path, iteration(scope), name, worst,
                diff.max_rel_err, factor, beyond_tolerance=not diff.within,
            )  # fmt: skip
            self._flagged[where] = found
            self.report.amplified.append(found)

    def _origin(
        self,
        node: onnx.NodeProto,
        scope: tuple[Any, ...],
        path: list[str],
        name: str,
        diff: Difference,
        unseen: list[str],
    ) -> None:
        where = ("origin", *path, node_key(node), name)
        if where in self._flagged:
            self._flagged[where].runs += 1
            return
        found = Origin(
            node_key(node), node.op_type, path, iteration(scope), name, diff.max_abs_err,
            diff.max_rel_err, diff.max_ulp, unverified_inputs=unseen,
        )  # fmt: skip
        self._flagged[where] = found
        self.report.origins.append(found)


def iteration(scope: tuple[Any, ...]) -> list[int]:
    """The loop indices of a scope, outermost first: one per Loop, Scan or SequenceMap
    iteration, two for Scan 8 (batch, step); If branches add none (the path names them)."""
    indices: list[int] = []
    for _, key in scope:
        if isinstance(key, tuple):
            indices.extend(int(k) for k in key)
        elif not isinstance(key, str):
            indices.append(int(key))
    return indices


def _runs(records: Records, scope: tuple[Any, ...], key: str) -> list[tuple[Any, ...]]:
    """The body scopes, directly under ``scope``, of the loop ``key``, in the order they ran."""
    depth = len(scope) + 1
    return [s for s in records if len(s) == depth and s[:-1] == scope and s[-1][0] == key]


def _lookup(records: Records, scope: tuple[Any, ...], name: str) -> Any:
    for depth in range(len(scope), -1, -1):
        values = records.get(scope[:depth], {})
        if name in values:
            return values[name]
    return _UNSEEN


def fill_formals(
    node: onnx.NodeProto,
    body: onnx.GraphProto,
    records: Records,
    run: tuple[Any, ...],
    previous: tuple[Any, ...] | None,
) -> None:
    """Give one side's body run the formal inputs its records lack (a runtime that shows only
    node outputs), from the spec: a Loop's iteration number, condition and states and a Scan's
    (opset 9+) states and scan elements, taken from the node's inputs at the first iteration
    and from the previous run's body outputs after it."""
    key = run[-1][1]
    if not isinstance(key, int | np.integer) or node.op_type not in ("Loop", "Scan"):
        return
    values = records.setdefault(run, {})
    formals = [i.name for i in body.input]
    if all(f in values for f in formals):
        return
    for k, formal in enumerate(formals):
        if formal not in values:
            value = _formal(node, body, records, run, previous, k)
            if value is not None and value is not _UNSEEN:
                values[formal] = value


def _formal(
    node: onnx.NodeProto,
    body: onnx.GraphProto,
    records: Records,
    run: tuple[Any, ...],
    previous: tuple[Any, ...] | None,
    k: int,
) -> Any:
    """The value of body input ``k`` in ``run`` (see :func:`fill_formals`)."""
    loop = node.op_type == "Loop"
    if loop and k == 0:
        return np.array(run[-1][1], np.int64)
    states = len(body.input) if loop else len(body.input) - _scan_inputs(node)
    if k >= states:
        return _scan_element(node, records, run, k - states, states)
    if previous is None:
        return _lookup(records, run[:-1], node.input[k]) if k < len(node.input) else None
    out = body.output[k - 1 if loop else k].name  # a Loop's body outputs cond first
    return records.get(previous, {}).get(out)


def _scan_inputs(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)


def _scan_element(
    node: onnx.NodeProto, records: Records, run: tuple[Any, ...], j: int, states: int
) -> Any:
    """Scan input ``j``'s slice for the run's step, along its axis, in its direction."""
    whole = _lookup(records, run[:-1], node.input[states + j])
    if not isinstance(whole, np.ndarray):
        return None
    axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"), [])
    ways = next((list(a.ints) for a in node.attribute if a.name == "scan_input_directions"), [])
    axis = axes[j] if j < len(axes) else 0
    step = int(run[-1][1])
    if j < len(ways) and ways[j]:
        step = whole.shape[axis] - 1 - step
    return np.take(whole, step, axis=axis % whole.ndim)
