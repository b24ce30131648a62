"""Render a benchmark report as a markdown table with the machine line and the method notes."""

from __future__ import annotations

from onnxflow.bench.harness import ENGINES, REF_CAP, Report, Row
from onnxflow.bench.memory import METHOD

HEADER = ("workload", "size", *ENGINES, "flow/ort", "ref/flow", "match", "note")


def _num(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def format_seconds(seconds: float) -> str:
    """A duration with three significant digits in s, ms or µs."""
    if seconds >= 1:
        return f"{_num(seconds)} s"
    if seconds >= 1e-3:
        return f"{_num(seconds * 1e3)} ms"
    return f"{_num(seconds * 1e6)} µs"


def _cell(row: Row, engine: str) -> str:
    if engine in row.failures:
        reason = row.failures[engine]
        return reason if reason.startswith(("skipped", "not ")) else f"fails: {reason}"
    if engine not in row.values:
        return "—"
    value = row.values[engine]
    if row.kind == "memory":
        return f"{value:.0f} MiB"
    if row.kind == "ratio":
        return f"{value:.2f}"
    text = format_seconds(value)
    if row.unit:
        text += f" ({format_seconds(value / row.units)}/{row.unit})"
    return text


def _ratio(row: Row, top: str, bottom: str) -> str:
    if row.kind == "ratio":  # a ratio of an engine's own times: engines compare in its cells
        return "—"
    if top in row.values and bottom in row.values and row.values[bottom] > 0:
        return f"{row.values[top] / row.values[bottom]:.2f}x"
    return "—"


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def table(rows: list[Row]) -> str:
    """The markdown table: one row per workload."""
    lines = [_line(list(HEADER)), "| " + " | ".join(["---"] * 2 + ["---:"] * 5 + ["---"] * 2)]
    lines[-1] += " |"
    for row in rows:
        cells = [row.name, row.size, *(_cell(row, e) for e in ENGINES)]
        cells += [_ratio(row, "onnxflow", "onnxruntime"), _ratio(row, "onnx.reference", "onnxflow")]
        lines.append(_line([*cells, row.match, row.note]))
    return "\n".join(lines)


def machine_line(report: Report) -> str:
    """One line: CPUs, load, platform and package versions, and the run's settings."""
    m = dict(report.machine)
    head = f"Machine: {m.pop('cpus')} CPUs (load {m.pop('load')}), {m.pop('platform')}"
    versions = ", ".join(f"{k} {v}" for k, v in m.items())
    mode = "quick smoke run" if report.quick else "full run"
    return f"{head}; {versions}. {mode}, {report.repeats} repeat(s)."


def linearity(rows: list[Row]) -> str | None:
    """The cost ratio of the large to the mid counting Loop per engine, if measured."""
    by_name = {r.name: r for r in rows}
    paired = by_name.get("loop_linearity")
    if paired is not None and paired.values:
        ratios = ", ".join(f"{e} {v:.1f}" for e, v in paired.values.items())
        return f"Loop linearity ({paired.size}, {paired.note}): {ratios}"
    mid, large = by_name.get("loop_count_mid"), by_name.get("loop_count_large")
    if mid is None or large is None:
        return None
    ratios = [
        f"{e} {large.values[e] / mid.values[e]:.1f}"
        for e in ENGINES
        if e in mid.values and e in large.values and mid.values[e] > 0
    ]
    trips = large.units // max(mid.units, 1)
    return f"Loop linearity (loop_count_large / loop_count_mid, {trips}x the trips): " + (
        ", ".join(ratios) or "—"
    )


def render(report: Report) -> str:
    """The machine line, the table and the notes on method, as markdown."""
    notes = [
        "Each engine runs every workload in a process of its own (one after another), without "
        "the OpenBLAS pin (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE). Times are medians of per-call "
        f"times over {report.repeats} repeats (a sample averages enough calls to last about "
        f"{'10 ms' if report.quick else '0.1 s'}); onnx.reference takes at most {REF_CAP} "
        "samples. flow/ort and ref/flow are ratios of medians. match: onnxflow's warm-up "
        "outputs allclose to onnxruntime's.",
    ]
    lin = linearity(report.rows)
    if lin:
        notes.append(lin)
    if any(r.kind == "memory" for r in report.rows):
        notes.append(f"peak_memory: {METHOD}.")
    body = [machine_line(report), "", table(report.rows), ""]
    return "\n".join(body + [f"- {n}" for n in notes])
