"""Run the zoo: every engine on every model, each in its own process, and render the table."""

from __future__ import annotations

import json
import logging
import math
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from onnxflow.bench.process import TIMEOUT, run_engine
from onnxflow.bench.report import format_seconds
from onnxflow.bench.zoo import ZOO, ZooModel
from onnxflow.bench.zoo.engine import ENGINES
from onnxflow.bench.zoo.sources import Unavailable

log = logging.getLogger(__name__)

#: The engines timed in rounds (onnx.reference is timed once, briefly, after them).
TIMED = ("onnxflow", "onnxruntime", "tract")
#: The engines whose first run (session creation + first run, in a fresh process) is shown.
FIRST = ("onnxflow", "onnxruntime")


@dataclass
class ZooRow:
    """One model's result: median seconds per engine, or why an engine has none."""

    name: str
    kind: str
    size: str
    values: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    match: str = "—"
    #: Per engine, the fastest of its processes' session creation + first run (seconds).
    first: dict[str, float] = field(default_factory=dict)


def select(only: list[str]) -> list[ZooModel]:
    """The zoo models named in ``only`` (names or prefixes); all when empty."""
    wanted = [w for part in only for w in part.split(",") if w]
    return [m for m in ZOO if not wanted or any(m.name.startswith(w) for w in wanted)]


def run_zoo(
    models: list[ZooModel],
    seconds: float,
    engines: tuple[str, ...] = tuple(ENGINES),
    threads: int = 0,
    kernels: str = "native",
) -> list[ZooRow]:
    """Measure ``models`` on ``engines``; ``seconds`` of samples per engine and round;
    ``threads``: each engine's intra-op thread count (0: its default); ``kernels``: onnxflow's
    SessionOptions.kernels (``"numpy"`` times its NumPy forms)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="onnxflow-zoo-") as tmp:
        for model in models:
            log.info("[zoo] %s ...", model.name)
            if threads:
                model = replace(model, options=(*model.options, ("threads", threads)))
            if kernels != "native":
                model = replace(model, options=(*model.options, ("kernels", kernels)))
            rows.append(_measure_model(model, Path(tmp), seconds, engines))
    return rows


def _measure_model(model: ZooModel, tmp: Path, seconds: float, engines: tuple[str, ...]) -> ZooRow:
    row = ZooRow(model.name, model.kind, model.size)
    try:
        path = model.path()
    except Unavailable as exc:
        row.failures = {e: f"not made: {exc}" for e in engines}
        return row
    feeds = tmp / f"{model.name}.feeds.npz"
    np.savez(feeds, **model.feeds())
    timed = [e for e in TIMED if e in engines]
    samples: dict[str, list[float]] = {e: [] for e in engines}
    outputs: dict[str, Path] = {}
    for order in (timed, timed[::-1]):  # two rounds, in opposite order
        for engine in order:
            if engine not in row.failures:
                _one(engine, path, feeds, tmp, seconds / 2, row, samples, outputs, model.options)
    if "onnx.reference" in engines:
        _one("onnx.reference", path, feeds, tmp, 0.0, row, samples, outputs, model.options)
    row.values = {e: statistics.median(s) for e, s in samples.items() if s}
    row.match = _match(outputs, model.tolerance)
    return row


def _one(
    engine: str,
    path: str,
    feeds: Path,
    tmp: Path,
    seconds: float,
    row: ZooRow,
    samples: dict[str, list[float]],
    outputs: dict[str, Path],
    options: tuple[tuple[str, object], ...] = (),
) -> None:
    """One process of ``engine`` on the model: its samples, outputs, or failure go on ``row``.
    ``options``: onnxflow's SessionOptions fields, and ``threads`` and ``steps`` (a generation
    loop) for every engine."""
    out = tmp / f"{row.name}.{engine}.{len(samples[engine])}.json"
    cmd = ["-m", "onnxflow.bench.zoo.engine", engine, path, str(feeds), str(out)]
    cmd += ["--seconds", str(seconds)]
    chosen = dict(options)
    cmd += ["--threads", str(chosen.pop("threads", 0)), "--steps", str(chosen.pop("steps", 0))]
    if engine == "onnxflow" and chosen:
        cmd += ["--options", json.dumps(chosen)]
    try:
        done = run_engine(cmd, TIMEOUT)
    except subprocess.TimeoutExpired:
        row.failures[engine] = f"over {TIMEOUT} s"
        return
    if not out.exists():
        tail = (done.stderr or "").strip().splitlines()
        row.failures[engine] = f"crashed (exit {done.returncode}): {tail[-1][:80] if tail else ''}"
        return
    result = json.loads(out.read_text())
    if "error" in result:
        row.failures[engine] = result["error"][:90]
        return
    samples[engine].extend(result["samples"])
    outputs.setdefault(engine, Path(result["outputs"]))
    first = result["build"] + result["first"]  # a fresh process: imports, session, one run
    row.first[engine] = min(first, row.first.get(engine, first))


def _match(outputs: dict[str, Path], tolerance: tuple[float, float]) -> str:
    """✓ or ✗ for onnxflow's outputs against onnxruntime's, or — when either has none."""
    if "onnxflow" not in outputs or "onnxruntime" not in outputs:
        return "—"
    with np.load(outputs["onnxflow"]) as a, np.load(outputs["onnxruntime"]) as b:
        if a.files != b.files:
            return "✗ (outputs differ in number)"
        worst = 0.0
        for k in a.files:
            x, y = a[k], b[k]
            if x.shape != y.shape:
                return f"✗ ({k}: shape {x.shape} vs {y.shape})"
            if x.dtype.kind in "fc":
                rtol, atol = tolerance
                x64, y64 = x.astype(np.float64), y.astype(np.float64)
                if not np.allclose(x64, y64, rtol, atol, equal_nan=True):
                    return f"✗ (max abs err {np.max(np.abs(x64 - y64)):.3g})"
                worst = max(worst, float(np.max(np.abs(x64 - y64), initial=0.0)))
            elif not np.array_equal(x, y):
                return "✗ (values differ)"
    return "✓"


#: The engines whose steady time is a column (onnx.reference is shown as ref/flow only).
SHOWN = ("onnxflow", "onnxruntime", "tract")
HEADER = (
    "model",
    "kind",
    "size",
    *SHOWN,
    "flow/ort",
    "flow/tract",
    "ref/flow",
    "first run: flow",
    "first run: ort",
    "match",
)


def _ratio(row: ZooRow, a: str, b: str) -> float | None:
    if a in row.values and b in row.values:
        return row.values[a] / row.values[b]
    return None


def _cell(row: ZooRow, engine: str) -> str:
    if engine in row.values:
        return format_seconds(row.values[engine])
    reason = row.failures.get(engine)
    return f"fails: {reason}" if reason else "—"


def _first(row: ZooRow, engine: str) -> str:
    if engine in row.first:
        return format_seconds(row.first[engine])
    return "—"


def geomean(values: list[float]) -> float | None:
    """The geometric mean, or None for no values."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def zoo_text(rows: list[ZooRow], machine: dict[str, str], seconds: float) -> str:
    """The machine line, then :func:`render`'s table and summary."""
    m = dict(machine)
    head = f"Machine: {m.pop('cpus')} CPUs (load {m.pop('load')}), {m.pop('platform')}"
    versions = ", ".join(f"{k} {v}" for k, v in m.items())
    return (
        f"{head}; {versions}. Zoo: each engine in its own process, {seconds:g} s of samples "
        "per engine and model over two rounds in opposite order; ref/flow is onnx.reference's "
        "time over onnxflow's; first run: session creation and the first run in a fresh "
        "process (imports included), the faster of two processes.\n\n" + render(rows)
    )


def rows_from_json(data: dict) -> list[ZooRow]:
    """The rows of a saved ``--zoo --json`` run."""
    return [ZooRow(**row) for row in data["rows"]]


def render(rows: list[ZooRow]) -> str:
    """The zoo table, then geometric means overall and per kind."""
    lines = [
        "| " + " | ".join(HEADER) + " |",
        "| " + " | ".join(["---"] * 3 + ["---:"] * (len(HEADER) - 4) + ["---"]) + " |",
    ]
    for row in rows:
        ratios = [
            _ratio(row, "onnxflow", "onnxruntime"),
            _ratio(row, "onnxflow", "tract"),
            _ratio(row, "onnx.reference", "onnxflow"),
        ]
        cells = [row.name, row.kind, row.size, *(_cell(row, e) for e in SHOWN)]
        cells += ["—" if r is None else f"{r:.2f}x" for r in ratios]
        cells += [_first(row, e) for e in FIRST]
        lines.append("| " + " | ".join([*cells, row.match]) + " |")
    lines.append("")
    lines.extend(_summary(rows))
    return "\n".join(lines)


def _summary(rows: list[ZooRow]) -> list[str]:
    out = []
    for label, pair in (
        ("onnxflow / onnxruntime", ("onnxflow", "onnxruntime")),
        ("onnxflow / tract", ("onnxflow", "tract")),
    ):
        ratios = [(r.kind, _ratio(r, *pair)) for r in rows]
        ratios = [(k, v) for k, v in ratios if v is not None]
        overall = geomean([v for _, v in ratios])
        if overall is None:
            continue
        kinds = sorted({k for k, _ in ratios})
        per_kind = ", ".join(
            f"{k} {geomean([v for kk, v in ratios if kk == k]):.2f}x" for k in kinds
        )
        out.append(
            f"- Geometric mean {label}: **{overall:.2f}x** over {len(ratios)} models ({per_kind})."
        )
    return out
