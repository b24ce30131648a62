"""The result of a comparison: the first divergence, iteration-count notes, a summary, JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


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


@dataclass
class Report:
    """A comparison of one model run by onnxflow against another run.

    JSON fields (stable): ``agree`` (bool), ``model``, ``against``, ``rtol``, ``atol``,
    ``compared`` (int, values compared), ``not_compared`` (list of str, values one side could
    not show, e.g. inside If branches), ``only_in_model`` / ``only_in_other`` (lists of value
    names), ``iteration_counts`` (list of ``{"node", "ours", "theirs", "note"}``) and
    ``first_divergence``: null, or ``{"node": str, "op_type": str, "graph_path": [str],
    "iteration": [int], "output": str, "max_abs_err": float, "max_rel_err": float,
    "reason": str, "ours": stats, "theirs": stats, "agreeing_inputs": [str]}`` where stats is
    ``{"shape", "dtype", "min", "max", "mean", "nan", "inf"}``. ``graph_path`` names the bodies
    from the main graph down (``["outer", "body", "choose", "then_branch"]``); ``iteration``
    has one index per enclosing loop, outermost first (batch and step for Scan 8).
    """

    model: str
    against: str
    rtol: float
    atol: float
    compared: int = 0
    first_divergence: Divergence | None = None
    not_compared: list[str] = field(default_factory=list)
    only_in_model: list[str] = field(default_factory=list)
    only_in_other: list[str] = field(default_factory=list)
    iteration_counts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        """No divergence and the loops ran as many iterations on both sides."""
        return self.first_divergence is None and not self.iteration_counts

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (fields documented on the class)."""
        return {"agree": self.agree, **asdict(self)}

    def to_json(self, path: str | None = None) -> str:
        """The report as JSON text; written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, default=_jsonable)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    def summary(self) -> str:
        """A few lines for a person: agreement or where the first divergence is."""
        head = f"{self.model} vs {self.against} (rtol {self.rtol:g}, atol {self.atol:g}): "
        lines = [head + f"{self.compared} values compared"]
        for count in self.iteration_counts:
            lines.append(count["note"])
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
        lines.append("agree" if self.agree else "DIVERGE")
        return "\n".join(lines)


def _divergence_lines(div: Divergence | None) -> list[str]:
    if div is None:
        return ["no value diverges"]
    where = "/".join(div.graph_path) or "main graph"
    at = f", iteration {div.iteration}" if div.iteration else ""
    return [
        f"first divergence: {div.op_type} {div.node!r} at {where}{at}, output {div.output!r}: "
        f"{div.reason} (max abs err {div.max_abs_err:.6g}, max rel err {div.max_rel_err:.6g})",
        f"  onnxflow: {div.ours}",
        f"  other:    {div.theirs}",
        f"  its inputs agree: {', '.join(div.agreeing_inputs) or '(none compared)'}",
    ]


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)
