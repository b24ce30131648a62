"""Where do two runs of a model disagree? :func:`compare` answers with a :class:`Report`."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from onnxflow.compare.expose import Exposed, Observed, observed_types
from onnxflow.compare.report import (
    Amplification,
    Divergence,
    Origin,
    OutputVerdict,
    Report,
    Stats,
)
from onnxflow.compare.sides import (
    Records,
    exposed_copy,
    reference_copy,
    run_onnxflow,
    run_onnxruntime,
    run_reference,
)
from onnxflow.compare.walk import Walk
from onnxflow.errors import OnnxflowError
from onnxflow.ir.load import load_model
from onnxflow.ir.walk import subgraphs
from onnxflow.ops.custom import CustomOps

__all__ = [
    "Amplification",
    "Divergence",
    "Origin",
    "OutputVerdict",
    "Report",
    "Stats",
    "compare",
]


def compare(
    model: str | Path | onnx.ModelProto,
    feeds: dict[str, Any],
    against: str | Path | onnx.ModelProto = "onnxruntime",
    rtol: float = 1e-4,
    atol: float = 1e-5,
    custom_ops: CustomOps | None = None,
) -> Report:
    """Run ``model`` in onnxflow and ``against`` ("onnxruntime", "reference", or another model run
    in onnxflow) on ``feeds``; report a verdict per output, the kernels that disagree (origins),
    where an error grows (amplification) and the first value, in execution order, beyond
    rtol/atol.

    ``custom_ops``: the functions of operators onnxflow lacks, as a session takes them; onnx.
    reference runs them too (as its ``new_ops``), and so does another model; onnxruntime,
    which cannot call Python, refuses the model."""
    return compare_walk(model, feeds, against, rtol, atol, custom_ops).report


def compare_walk(
    model: str | Path | onnx.ModelProto,
    feeds: dict[str, Any],
    against: str | Path | onnx.ModelProto = "onnxruntime",
    rtol: float = 1e-4,
    atol: float = 1e-5,
    custom_ops: CustomOps | None = None,
) -> Walk:
    """The walk behind :func:`compare`: its report, and every value it measured
    (:attr:`Walk.measured`, what ``onnxflow view --against`` shows on each value)."""
    if custom_ops and against == "onnxruntime":
        raise OnnxflowError(
            "onnxruntime cannot call the Python functions of custom_ops: compare against "
            "'reference' (onnx.reference runs them) or another model"
        )
    proto = load_model(model)
    ours = run_onnxflow(proto, feeds, custom_ops)
    name = str(against) if not isinstance(against, onnx.ModelProto) else "other model"
    walk = Walk(Report(_label(model), name, rtol, atol), ours, {})
    walk.constants = (_initializers(proto.graph),) * 2
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
        walk.constants = (walk.constants[0], _initializers(other.graph))
    for records in (walk.ours, walk.theirs):  # the feeds agree: both sides were given them
        records.setdefault((), {}).update({n: v for n, v in feeds.items() if n not in records[()]})
    walk.graph(proto.graph, (), [])
    walk.verdicts(proto.graph)
    return walk


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


def _initializers(graph: onnx.GraphProto) -> dict[str, Any]:
    """Every initializer of ``graph`` and its bodies, by name."""
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        for body in subgraphs(node):
            found.update(_initializers(body))
    return found
