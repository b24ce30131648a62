"""The command line of ``python -m onnxflow.bench``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import onnxflow.bench
from onnxflow.bench.harness import report_to_json
from onnxflow.bench.report import render
from onnxflow.bench.tier import run_bench
from onnxflow.bench.workloads import TIMED
from onnxflow.logs import show_on_stderr

NAMES = [*TIMED, "loop_linearity", "peak_memory"]
DESCRIPTION = onnxflow.bench.__doc__


def select(only: list[str]) -> list[str]:
    """The workloads named in ``only`` (exact names or prefixes), in bench order; all if empty."""
    wanted = [w for part in only for w in part.split(",") if w]
    if not wanted:
        return list(NAMES)
    unknown = [w for w in wanted if not any(n.startswith(w) for n in NAMES)]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}: expected names or prefixes of {NAMES}")
    return [n for n in NAMES if any(n.startswith(w) for w in wanted)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's command line."""
    parser = argparse.ArgumentParser(prog="python -m onnxflow.bench", description=DESCRIPTION)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats (smoke run)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only these workloads (name or prefix; repeat or comma-separate)",
    )
    parser.add_argument("--repeats", type=int, help="interleaved repeats (default 7; quick 2)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON")
    parser.add_argument(
        "--zoo",
        action="store_true",
        help="the real-model tier instead (models fetched or built into a cache on first use; "
        "--only selects models)",
    )
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="zoo: seconds of samples per engine and model"
    )
    parser.add_argument(
        "--list", action="store_true", help="zoo: list the models (name, kind, size) and stop"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="intra_op_num_threads of onnxflow's and onnxruntime's sessions (default 0: each "
        "engine's own default)",
    )
    parser.add_argument(
        "--kernels",
        choices=("native", "numpy"),
        default="native",
        help="zoo: onnxflow's SessionOptions.kernels (numpy: time its NumPy forms)",
    )
    parser.add_argument(
        "--rows",
        metavar="N,N",
        help="zoo: time the models whose inputs are rows (the tree ensembles) at each of these "
        "row counts instead of the zoo's 1,000",
    )
    parser.add_argument(
        "--engines",
        metavar="A,B",
        help="zoo: only these engines (onnxflow, onnxruntime, tract, onnx.reference)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the bench, print the report, and write the JSON if asked."""
    args = parse_args(argv)
    show_on_stderr("onnxflow.bench")  # which workload or model is being measured
    repeats = args.repeats or (2 if args.quick else 7)
    if repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    if args.threads < 0:
        raise SystemExit("--threads must be 0 (the default) or more")
    if args.zoo:
        return _zoo(args)
    report = run_bench(select(args.only), repeats, args.quick, args.threads)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report_to_json(report), indent=1, ensure_ascii=False))
    return 0


def _zoo(args: argparse.Namespace) -> int:
    """Run the real-model tier and print its table (JSON rows too if asked)."""
    from dataclasses import asdict

    from onnxflow.bench.harness import machine_info
    from onnxflow.bench.zoo import at_rows
    from onnxflow.bench.zoo.engine import ENGINES
    from onnxflow.bench.zoo.run import run_zoo, zoo_text
    from onnxflow.bench.zoo.run import select as select_models

    if args.list:
        for model in select_models(args.only):
            print(f"{model.name:24} {model.kind:12} {model.size}")
        return 0
    engines = tuple(args.engines.split(",")) if args.engines else tuple(ENGINES)
    models = select_models(args.only)
    if args.rows:
        models = [at_rows(m, n) for m in models if "rows" in m.tags for n in _counts(args.rows)]
    rows = run_zoo(models, args.seconds, engines, threads=args.threads, kernels=args.kernels)
    machine = machine_info()
    machine["tract"] = _version("tract")
    print(zoo_text(rows, machine, args.seconds))
    if args.json:
        data = {"machine": machine, "seconds": args.seconds, "rows": [asdict(r) for r in rows]}
        data["threads"] = args.threads
        args.json.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    return 0


def _counts(text: str) -> list[int]:
    """``--rows``'s row counts: positive integers, comma-separated."""
    try:
        counts = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise SystemExit(f"--rows takes row counts such as 1,100,10000, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise SystemExit(f"--rows takes row counts of at least 1, got {text!r}")
    return counts


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"
