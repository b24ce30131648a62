"""The workloads tier with each engine in a process of its own (:mod:`onnxflow.bench.process`).

The bench's process starts one child per engine (onnxflow, onnxruntime, onnx.reference), one
after another; each child runs every workload on its engine alone, as
:func:`onnxflow.bench.harness.one_row` does (warm-up, then timed repeats), and saves its rows and
its warm-up outputs. The bench's process then merges the rows and checks onnxflow's outputs
against the others'. So onnxruntime's spinning thread pool and OpenBLAS's threads never share
a process or a measurement with another engine, and every engine runs without the OpenBLAS pin.

    python -m onnxflow.bench.tier ENGINE OUTDIR --names a,b [--repeats R] [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import logging
import pickle
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from onnxflow.bench.harness import (
    ENGINES,
    Report,
    Row,
    _match,
    engine_builders,
    machine_info,
    memory_row,
    one_row,
)
from onnxflow.bench.process import TIMEOUT, run_engine

log = logging.getLogger(__name__)

#: Rows measured in the bench's own process (each of its engines runs in a subprocess already).
IN_PARENT = ("peak_memory",)


def run_bench(names: list[str], repeats: int, quick: bool, threads: int = 0) -> Report:
    """Run the named workloads (``peak_memory`` included), each engine in its own process."""
    _, skipped = engine_builders()
    engines = [e for e in ENGINES if e not in skipped]
    in_child = [n for n in names if n not in IN_PARENT]
    parts: dict[str, dict[str, Row]] = {}
    with tempfile.TemporaryDirectory(prefix="onnxflow-bench-") as tmp:
        for engine in engines if in_child else []:
            log.info("[%s] %d workload(s) ...", engine, len(in_child))
            start = time.perf_counter()
            parts[engine] = _child(engine, in_child, repeats, quick, threads, Path(tmp))
            log.info("    %.1f s", time.perf_counter() - start)
        rows = []
        for name in names:
            if name in IN_PARENT:
                rows.append(memory_row("squeezenet" if quick else "resnet50", skipped))
            else:
                rows.append(_merge(name, parts, skipped, Path(tmp)))
    return Report(machine_info(), repeats, quick, rows)


def _child(
    engine: str, names: list[str], repeats: int, quick: bool, threads: int, tmp: Path
) -> dict[str, Row]:
    """Run ``engine``'s process; its rows by workload (each failing, if the process did)."""
    cmd = ["-m", "onnxflow.bench.tier", engine, str(tmp), "--names", ",".join(names)]
    cmd += ["--repeats", str(repeats), "--threads", str(threads)] + (["--quick"] if quick else [])
    out = tmp / f"{engine}.json"
    try:
        done = run_engine(cmd, TIMEOUT * len(names))
        why = (done.stderr or "").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    except subprocess.TimeoutExpired:
        why = [f"over {TIMEOUT * len(names)} s"]
    if not out.exists():
        return {n: Row(n, "—", failures={engine: f"crashed: {why[0][:60]}"}) for n in names}
    return {r["name"]: Row(**r) for r in json.loads(out.read_text())}


def _merge(name: str, parts: dict[str, dict[str, Row]], skipped: dict[str, str], tmp: Path) -> Row:
    """One workload's row from every engine's process, its outputs checked across them: each
    engine's time, sample count and failure come from its own process's row."""
    rows = {e: p[name] for e, p in parts.items() if name in p}
    if not rows:
        return Row(name, "—", failures={e: f"skipped: {r}" for e, r in skipped.items()})
    merged = Row(**asdict(next(iter(rows.values()))))
    merged.values, merged.samples, merged.failures = {}, {}, {}
    notes = [n for r in rows.values() for n in r.note.split("; ") if n]
    merged.note = "; ".join(dict.fromkeys(notes))
    for engine, row in rows.items():
        for part in ("values", "samples", "failures"):
            mine = getattr(row, part)
            if engine in mine:
                getattr(merged, part)[engine] = mine[engine]
    merged.failures.update({e: f"skipped: {r}" for e, r in skipped.items()})
    if merged.kind == "time":
        merged.match = _check(name, list(rows), tmp)
    return merged


def _check(name: str, engines: list[str], tmp: Path) -> str:
    """onnxflow's warm-up outputs against the other engines' (:func:`harness._match`)."""
    outputs: dict[str, list] = {}
    check: list = [(1e-3, 1e-4), ""]
    for engine in engines:
        path = tmp / f"{name}.{engine}.pkl"
        if path.exists():
            kept = pickle.loads(path.read_bytes())
            check = kept.pop("__check__", check)
            outputs.update(kept)
    return _match(outputs, tuple(check[0]), check[1]) if outputs else "—"


def engine_rows(
    engine: str, names: list[str], repeats: int, quick: bool, threads: int, out: Path
) -> list[Row]:
    """In an engine's process: every workload's row on ``engine``; outputs saved in ``out``."""
    builders, _ = engine_builders(threads)
    builders = {engine: builders[engine]}
    rows = []
    for i, name in enumerate(names, 1):
        log.info("  [%s %d/%d] %s", engine, i, len(names), name)
        keep: dict[str, list] = {}
        row = one_row(name, builders, {}, repeats, quick, keep)
        if keep:
            (out / f"{name}.{engine}.pkl").write_bytes(pickle.dumps(keep))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """An engine's process: run the workloads and write the rows as ``OUTDIR/ENGINE.json``."""
    from onnxflow.logs import show_on_stderr

    parser = argparse.ArgumentParser(prog="python -m onnxflow.bench.tier")
    parser.add_argument("engine", choices=list(ENGINES))
    parser.add_argument("out", type=Path)
    parser.add_argument("--names", required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    show_on_stderr("onnxflow.bench")
    rows = engine_rows(
        args.engine, args.names.split(","), args.repeats, args.quick, args.threads, args.out
    )
    (args.out / f"{args.engine}.json").write_text(json.dumps([asdict(r) for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
