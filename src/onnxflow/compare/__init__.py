"""Where do two runs of a model disagree? :func:`compare` answers with a :class:`Report`."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxflow.compare.expose import Exposed, Observed, node_key, observed_types
from onnxflow.compare.report import Divergence, Report, Stats
from onnxflow.compare.sides import (
    Records,
    exposed_copy,
    reference_copy,
    run_onnxflow,
    run_onnxruntime,
    run_reference,
)
from onnxflow.errors import OnnxflowError
from onnxflow.ir.load import load_model
from onnxflow.ops.custom import CustomOps

__all__ = ["Divergence", "Report", "Stats", "compare"]

_CONTROL = {"Loop", "Scan", "If", "SequenceMap"}
SPEC_NOTE = (
    "the ONNX spec's Loop table (input M given, cond omitted: 'for (int i=0; i<M; ++i)') "
    "ignores the body's condition; onnxflow follows the spec and onnxruntime stops when it turns "
    "false: onnxflow.SessionOptions(loop_condition='always') runs as onnxruntime does"
)


def compare(
    model: str | Path | onnx.ModelProto,
    feeds: dict[str, Any],
    against: str | Path | onnx.ModelProto = "onnxruntime",
    rtol: float = 1e-4,
    atol: float = 1e-5,
    custom_ops: CustomOps | None = None,
) -> Report:
    """Run ``model`` in onnxflow and ``against`` ("onnxruntime", "reference", or another model run
    in onnxflow) on ``feeds``; report the first value, in execution order, beyond rtol/atol.

    ``custom_ops``: the functions of operators onnxflow lacks, as a session takes them; onnx.
    reference runs them too (as its ``new_ops``), and so does another model; onnxruntime,
    which cannot call Python, refuses the model."""
    if custom_ops and against == "onnxruntime":
        raise OnnxflowError(
            "onnxruntime cannot call the Python functions of custom_ops: compare against "
            "'reference' (onnx.reference runs them) or another model"
        )
    proto = load_model(model)
    ours = run_onnxflow(proto, feeds, custom_ops)
    name = str(against) if not isinstance(against, onnx.ModelProto) else "other model"
    walk = _Walk(Report(_label(model), name, rtol, atol), ours, {})
    if against in ("onnxruntime", "reference"):
        observed = observed_types(ours)
        exposed, walk.theirs = _run_exposed(
            proto, feeds, str(against), walk.report, observed, custom_ops
        )
        walk.counted = exposed.loops
        walk.report.not_compared.extend(exposed.not_exposed)
    else:
        other = load_model(against)
        walk.theirs = run_onnxflow(other, feeds, custom_ops)
        walk.counted = None
        _only(walk.report, proto.graph, other.graph)
    for records in (walk.ours, walk.theirs):  # the feeds agree: both sides were given them
        records.setdefault((), {}).update({n: v for n, v in feeds.items() if n not in records[()]})
    walk.graph(proto.graph, (), [])
    return walk.report


#: What compare exposes, from all to the main graph only, when the other runtime refuses a
#: copy: the keywords of :func:`onnxflow.compare.expose.expose` and what each step leaves out.
_ATTEMPTS: list[tuple[dict[str, Any], str]] = [
    ({}, ""),
    ({"loop_branches": False}, "values of If branches inside loops"),
    ({"depth": 1, "loop_branches": False}, "values of bodies within bodies"),
    ({"depth": 0}, "values of bodies"),
]


def _run_exposed(
    proto: onnx.ModelProto,
    feeds: dict[str, Any],
    against: str,
    report: Report,
    observed: Observed,
    custom_ops: CustomOps | None = None,
) -> tuple[Exposed, Records]:
    """Run the copy exposing every body's values; when the other runtime refuses it (a loop
    whose iterations stack unequal shapes: an If's placeholder of unknown shape, an inner loop
    whose count changes), expose less and say so."""
    copy, runner = (
        (exposed_copy, run_onnxruntime)
        if against == "onnxruntime"
        else (reference_copy, functools.partial(run_reference, custom_ops=custom_ops))
    )
    for (options, _), (_, dropped) in itertools.pairwise(_ATTEMPTS):
        exposed = copy(proto, observed=observed, **options)
        try:
            return exposed, runner(exposed, feeds)
        except OnnxflowError as exc:
            if not _nested(proto.graph):
                raise
            report.not_compared.append(f"{dropped} ({against} refused the copy: {exc})")
    exposed = copy(proto, observed=observed, **_ATTEMPTS[-1][0])
    return exposed, runner(exposed, feeds)


def _nested(graph: onnx.GraphProto) -> bool:
    return any(a.type == onnx.AttributeProto.GRAPH for n in graph.node for a in n.attribute)


def _label(model: Any) -> str:
    return "model" if isinstance(model, onnx.ModelProto) else str(model)


def _outputs(graph: onnx.GraphProto) -> set[str]:
    names = {o for n in graph.node for o in n.output if o}
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names |= _outputs(body)
    return names


def _only(report: Report, ours: onnx.GraphProto, theirs: onnx.GraphProto) -> None:
    a, b = _outputs(ours), _outputs(theirs)
    report.only_in_model, report.only_in_other = sorted(a - b), sorted(b - a)


@dataclass
class _Walk:
    """Walks the model in onnxflow's execution order until the first divergence."""

    report: Report
    ours: Records
    theirs: Records
    counted: set[str] | None = field(default=None)

    def graph(self, graph: onnx.GraphProto, scope: tuple[Any, ...], path: list[str]) -> bool:
        """Compare a graph's node outputs at one scope; True once a divergence is found."""
        for node in graph.node:
            if node.op_type in _CONTROL and self._bodies(node, scope, path):
                return True
            if self._node(node, scope, path):
                return True
        return False

    def _bodies(self, node: onnx.NodeProto, scope: tuple[Any, ...], path: list[str]) -> bool:
        """Compare the body runs of a control-flow node, in the order onnxflow ran them."""
        key = node_key(node)
        bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        ours, theirs = _runs(self.ours, scope, key), _runs(self.theirs, scope, key)
        counted = self.counted is None or (key in self.counted and scope in self.theirs)
        if node.op_type == "Loop" and counted:
            self._count(node, len(ours), len(theirs))
        for run in (s for s in ours if s in self.theirs):
            name = run[-1][1] if isinstance(run[-1][1], str) else "body"
            if name in bodies and self.graph(bodies[name], run, [*path, key, name]):
                return True
        return False

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

    def _node(self, node: onnx.NodeProto, scope: tuple[Any, ...], path: list[str]) -> bool:
        mine, other = self.ours.get(scope, {}), self.theirs.get(scope, {})
        for name in (o for o in node.output if o):
            if name not in mine or name not in other:
                continue
            self.report.compared += 1
            reason, abs_err, rel_err = _differ(
                mine[name], other[name], self.report.rtol, self.report.atol
            )
            if reason:
                agreeing = [i for i in node.input if i and i in mine and i in other]
                iteration = _iteration(scope)
                self.report.first_divergence = Divergence(
                    node_key(node),
                    node.op_type,
                    path,
                    iteration,
                    name,
                    abs_err,
                    rel_err,
                    reason,
                    Stats.of(mine[name]),
                    Stats.of(other[name]),
                    agreeing,
                )
                return True
        return False


def _iteration(scope: tuple[Any, ...]) -> list[int]:
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


def _differ(a: Any, b: Any, rtol: float, atol: float) -> tuple[str, float, float]:
    """Why two values differ ('' when they agree), with the max absolute and relative error."""
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"sequence length {len(a)} vs {len(b)}", float("inf"), float("inf")
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            reason, abs_err, rel_err = _differ(x, y, rtol, atol)
            if reason:
                return f"element {i}: {reason}", abs_err, rel_err
        return "", 0.0, 0.0
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}", float("inf"), float("inf")
    if a.shape != b.shape:
        return f"shape {list(a.shape)} vs {list(b.shape)}", float("inf"), float("inf")
    if a.dtype.kind not in "biufc":
        same = bool(np.array_equal(a, b))
        return ("" if same else "values differ"), float(not same), float(not same)
    return _numeric(a, b, rtol, atol)


def _numeric(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[str, float, float]:
    if a.size == 0:
        return "", 0.0, 0.0
    x, y = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(x) & np.isnan(y)
    with np.errstate(all="ignore"):  # inf - inf, huge / tiny: handled below
        diff = np.where(both_nan | (x == y), 0.0, np.abs(x - y))
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = diff / np.maximum(np.abs(y), np.finfo(np.float64).tiny)
    close = diff <= atol + rtol * np.abs(np.where(np.isnan(y), 0.0, y))
    abs_err, rel_err = float(diff.max()), float(np.where(diff == 0, 0.0, rel).max())
    if bool(close.all()):
        return "", abs_err, rel_err
    return f"{int((~close).sum())} of {a.size} elements beyond tolerance", abs_err, rel_err
