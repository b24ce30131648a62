"""The result of a comparison: a verdict per output, the kernels that disagree, where the error
grows, the first divergence, iteration-count notes, a summary, JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from onnxflow.compare.measure import RELATIVE_ERROR


@dataclass(frozen=True)
class Stats:
    """What one side computed for a value: shape, dtype, range, mean, NaN and Inf counts."""

    shape: list[int] | None
    dtype: str
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    nan: int = 0
    inf: int = 0

    @classmethod
    def of(cls, value: Any) -> Stats:
        """Statistics of a tensor (others: only their Python type)."""
        if not isinstance(value, np.ndarray):
            return cls(None, type(value).__name__)
        if value.size == 0 or value.dtype.kind not in "biuf":
            return cls(list(value.shape), str(value.dtype))
        data = value.astype(np.float64)
        finite = data[np.isfinite(data)]
        stats = [float(f(finite)) if finite.size else None for f in (np.min, np.max, np.mean)]
        nan, inf = int(np.isnan(data).sum()), int(np.isinf(data).sum())
        return cls(list(value.shape), str(value.dtype), *stats, nan=nan, inf=inf)

    def __str__(self) -> str:
        if self.min is None:
            return f"{self.dtype}{self.shape or ''}"
        text = (
            f"{self.dtype}{self.shape} min {self.min:.6g} max {self.max:.6g} mean {self.mean:.6g}"
        )
        return (
            text
            + (f" NaN {self.nan}" if self.nan else "")
            + (f" Inf {self.inf}" if self.inf else "")
        )


@dataclass(frozen=True)
class Divergence:
    """The first value, in onnxflow's execution order, on which the two sides disagree."""

    node: str
    op_type: str
    graph_path: list[str]
    iteration: list[int]
    output: str
    max_abs_err: float
    max_rel_err: float
    reason: str
    ours: Stats
    theirs: Stats
    agreeing_inputs: list[str]


@dataclass(frozen=True)
class OutputVerdict:
    """One graph output compared: ``agree`` within tolerance (None: one side did not give it),
    its errors (see :data:`onnxflow.compare.measure.RELATIVE_ERROR`), and for logits-shaped
    outputs (floating, 2-d or more, last axis of 2 or more) how many rows' argmax along the
    last axis agree."""

    name: str
    agree: bool | None
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: float | None = None
    beyond: int = 0
    size: int = 0
    reason: str = ""
    argmax_agree: int | None = None
    argmax_rows: int | None = None


@dataclass
class Origin:
    """A node whose inputs agree exactly on both sides but whose output differs: a kernel that
    computes differently. ``iteration`` is the first body run where it differed, ``runs`` how
    many runs did; ``unverified_inputs`` are inputs one side could not show (empty: every input
    was seen to agree exactly)."""

    node: str
    op_type: str
    graph_path: list[str]
    iteration: list[int]
    output: str
    max_abs_err: float
    max_rel_err: float
    max_ulp: float | None
    runs: int = 1
    unverified_inputs: list[str] = field(default_factory=list)


@dataclass
class Amplification:
    """A node whose output's max relative error exceeds ``AMPLIFICATION`` times the largest max
    relative error of its inputs, some of which already differ: where an error grows past what
    its inputs explain. ``factor`` is output over input error; ``beyond_tolerance`` whether
    the output is (in the first run where it amplified)."""

    node: str
    op_type: str
    graph_path: list[str]
    iteration: list[int]
    output: str
    input_rel_err: float
    output_rel_err: float
    factor: float
    runs: int = 1
    beyond_tolerance: bool = False


#: A node amplifies when its output's relative error exceeds this many times its inputs' largest.
AMPLIFICATION = 100.0
#: A first difference of at most this many ulp is called rounding in the summary.
FEW_ULP = 4
#: How many origins the summary lists (the JSON report has them all).
SHOWN = 10


@dataclass
class Report:
    """A comparison of one model run by onnxflow against another run.

    JSON fields (stable): ``agree`` (bool: every output within tolerance and the loops ran as
    many iterations on both sides), ``identical`` (bool: no compared value differs at all),
    ``model``, ``against``, ``rtol``, ``atol``, ``compared`` (int, values compared),
    ``differing`` (values that differ at all), ``beyond_tolerance`` (values beyond tolerance),
    ``relative_error`` (how relative error is defined), ``amplification`` (the factor K below),
    ``not_compared`` (list of str, values one side could not show, e.g. inside If branches),
    ``only_in_model`` / ``only_in_other`` (lists of value names), ``iteration_counts`` (list
    of ``{"node", "ours", "theirs", "note"}``), ``outputs`` (one verdict per graph output:
    ``{"name", "agree", "max_abs_err", "max_rel_err", "max_ulp", "beyond", "size", "reason",
    "argmax_agree", "argmax_rows"}``), ``origins`` (the nodes whose inputs agree exactly but
    whose outputs differ, in execution order: ``{"node", "op_type", "graph_path", "iteration",
    "output", "max_abs_err", "max_rel_err", "max_ulp", "runs", "unverified_inputs"}``),
    ``amplified`` (the nodes whose output's relative error exceeds K = 100 times their inputs'
    largest: ``{"node", "op_type", "graph_path", "iteration", "output", "input_rel_err",
    "output_rel_err", "factor", "runs", "beyond_tolerance"}``) and ``first_divergence``:
    null, or ``{"node": str, "op_type": str, "graph_path": [str], "iteration": [int],
    "output": str, "max_abs_err": float, "max_rel_err": float, "reason": str, "ours": stats,
    "theirs": stats, "agreeing_inputs": [str]}``, the first value beyond tolerance, where
    stats is ``{"shape", "dtype", "min", "max", "mean", "nan", "inf"}``. A node with several
    differing outputs is one origin (or amplification): ``output`` names the first, the errors
    are the largest. ``graph_path`` names the bodies from the
    main graph down (``["outer", "body", "choose", "then_branch"]``); ``iteration`` has one
    index per enclosing loop, outermost first (batch and step for Scan 8).
    """

    model: str
    against: str
    rtol: float
    atol: float
    compared: int = 0
    differing: int = 0
    beyond_tolerance: int = 0
    relative_error: str = RELATIVE_ERROR
    amplification: float = AMPLIFICATION
    first_divergence: Divergence | None = None
    outputs: list[OutputVerdict] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    amplified: list[Amplification] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    only_in_model: list[str] = field(default_factory=list)
    only_in_other: list[str] = field(default_factory=list)
    iteration_counts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        """Every compared output within tolerance (with no output compared: no value beyond
        it), and the loops ran as many iterations on both sides. Intermediate values beyond
        tolerance are reported, not counted."""
        if self.iteration_counts:
            return False
        seen = [o.agree for o in self.outputs if o.agree is not None]
        return all(seen) if seen else self.first_divergence is None

    @property
    def identical(self) -> bool:
        """No compared value differs at all and the loops ran as many iterations (``--strict``)."""
        return not self.iteration_counts and self.differing == 0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (fields documented on the class)."""
        return {"agree": self.agree, "identical": self.identical, **asdict(self)}

    def to_json(self, path: str | None = None) -> str:
        """The report as JSON text; written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, default=_jsonable)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    def summary(self) -> str:
        """A few lines for a person: the verdict per output, the kernels that disagree, where
        the error grows, the first value beyond tolerance, and what was not compared."""
        head = f"{self.model} vs {self.against} (rtol {self.rtol:g}, atol {self.atol:g}): "
        lines = [
            head + f"{self.compared} values compared, {self.differing} differ, "
            f"{self.beyond_tolerance} beyond tolerance"
        ]
        lines += [count["note"] for count in self.iteration_counts]
        lines += _output_lines(self.outputs)
        lines += _origin_lines(self.origins, self.amplified, self.amplification)
        lines += _divergence_lines(self.first_divergence)
        if self.only_in_model or self.only_in_other:
            lines.append(
                f"only in the model: {len(self.only_in_model)} values; "
                f"only in {self.against}: {len(self.only_in_other)}"
            )
        if self.not_compared:
            lines.append(
                f"not compared: {len(self.not_compared)} values ({_few(self.not_compared)})"
            )
        lines.append(self.relative_error)
        lines.append(_verdict(self))
        return "\n".join(lines)


def _verdict(report: Report) -> str:
    if not report.agree:
        return "DIVERGE"
    if report.beyond_tolerance:
        return (
            f"agree (outputs within tolerance; {report.beyond_tolerance} intermediate values "
            "beyond it: noise, reported, not failing)"
        )
    return "agree"


def _errors(max_abs: float, max_rel: float, ulp: float | None) -> str:
    text = f"max abs err {max_abs:.6g}, max rel err {max_rel:.6g}"
    return text + (f", max {ulp:.6g} ulp" if ulp is not None else "")


def _output_lines(outputs: list[OutputVerdict]) -> list[str]:
    lines = ["outputs:"] if outputs else []
    for out in outputs:
        if out.agree is None:
            lines.append(f"  {out.name}: not compared")
            continue
        word = "agree" if out.agree else "DIFFER"
        text = f"  {out.name}: {word} ({_errors(out.max_abs_err, out.max_rel_err, out.max_ulp)}"
        text += f"; {out.beyond} of {out.size} elements beyond tolerance)" if out.beyond else ")"
        if out.argmax_rows and out.max_abs_err:
            text += f", argmax agrees on {out.argmax_agree} of {out.argmax_rows} rows"
        lines.append(text)
    return lines


def _where(path: list[str], iteration: list[int]) -> str:
    at = f", iteration {iteration}" if iteration else ""
    return ("/".join(path) or "main graph") + at


def _origin_lines(origins: list[Origin], amplified: list[Amplification], k: float) -> list[str]:
    if not origins and not amplified:
        return []
    lines = ["origins (nodes whose inputs agree exactly but whose outputs differ):"]
    for o in origins[:SHOWN]:
        runs = f", in {o.runs} runs" if o.runs > 1 else ""
        unsure = f" (inputs not seen on both sides: {', '.join(o.unverified_inputs)})"
        lines.append(
            f"  {o.op_type} {o.node!r} at {_where(o.graph_path, o.iteration)}{runs}: "
            f"{_errors(o.max_abs_err, o.max_rel_err, o.max_ulp)}"
            + (unsure if o.unverified_inputs else "")
        )
    if len(origins) > SHOWN:
        lines.append(f"  ... and {len(origins) - SHOWN} more (all of them in the JSON report)")
    if not origins:
        lines.append("  (none found: the first differences have inputs one side did not show)")
    first = origins[0] if origins else None
    if first is not None and first.max_ulp is not None and first.max_ulp <= FEW_ULP:
        lines.append(
            f"the first difference is within {first.max_ulp:g} ulp: rounding, "
            "a kernel computing the same function another way"
        )
    if amplified:  # the first that left its output beyond tolerance, else the first
        a = next((a for a in amplified if a.beyond_tolerance), amplified[0])
        lines.append(
            f"the error grows at {a.op_type} {a.node!r} at {_where(a.graph_path, a.iteration)}: "
            f"max rel err {a.input_rel_err:.3g} in its inputs, {a.output_rel_err:.3g} out "
            f"(x{a.factor:.3g}; amplification: an output relative error over {k:g}x the largest "
            "of its inputs')"
        )
    return lines


def _divergence_lines(div: Divergence | None) -> list[str]:
    if div is None:
        return ["no value beyond tolerance"]
    return [
        f"first divergence: {div.op_type} {div.node!r} at {_where(div.graph_path, div.iteration)}"
        f", output {div.output!r}: {div.reason} (max abs err {div.max_abs_err:.6g}, "
        f"max rel err {div.max_rel_err:.6g})",
        f"  onnxflow: {div.ours}",
        f"  other:    {div.theirs}",
        f"  its inputs, within tolerance: {', '.join(div.agreeing_inputs) or '(none compared)'}",
    ]


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)
